"""Engram speed: compute lookups for >= 1 M tokens of real text, then replay them.

Corpus: this Python's standard-library sources (real text, PSF licence), concatenated in
sorted path order into one file until it holds >= ``--tokens`` SmolLM2 tokens.

    .venv/bin/python benchmarks/engram_bench.py [--tokens 1000000]

Prints tokenizer/compression-table build time (once per process, excluded from the
per-token figures), hashing time (tokenise + compress + hash, no I/O), recording time
(hashing + Parquet writes), replay load time (DuckDB read + keys) and replay kernel time
(policy kernel + reuse shares; the dense remap is fused into the load).
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

import toolkit
from toolkit.cost.engram import run_engram
from toolkit.engram.hashing import EngramConfig, EngramHasher, load_backbone_tokenizer
from toolkit.engram.record import hash_text, record_engram
from toolkit.replay.engram import EngramReplayConfig
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with


def build_corpus(out: Path, tokens: int, tok) -> int:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for p in sorted(stdlib.glob("*.py")):
            text = p.read_text(encoding="utf-8", errors="strict")
            fh.write(text)
            n += len(tok.encode(text).ids)
            if n >= tokens:
                break
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=1_000_000)
    args = ap.parse_args()
    print(f"loadavg {os.getloadavg()}", file=sys.stderr)
    t = time.perf_counter()
    tok = load_backbone_tokenizer()
    hasher = EngramHasher.build(EngramConfig())
    print(f"tokenizer + compression table: {time.perf_counter() - t:.2f} s")
    with tempfile.TemporaryDirectory() as d:
        corpus = Path(d) / "stdlib.txt"
        build_corpus(corpus, args.tokens, tok)
        hasher.rows(np.zeros(4, dtype=np.int64), hasher.start_history())  # JIT warm-up
        t, c = time.perf_counter(), time.process_time()
        n = sum(r.shape[0] for _, r in hash_text(hasher, tok, corpus))
        hash_s, hash_cpu = time.perf_counter() - t, time.process_time() - c
        print(f"hash {n:,} tokens ({corpus.stat().st_size / 1e6:.1f} MB): {hash_s:.2f} s wall, "
              f"{hash_cpu:.2f} s CPU ({n / hash_s / 1e6:.2f} M tokens/s)")
        with toolkit.open_store(Path(d) / "store", create=True) as s:
            res = record_engram(s, "stdlib", [corpus], EngramConfig(), hasher=hasher,
                                tokenizer=tok)
            print(f"record (hash + write {res.lookups:,} rows): {res.elapsed_s:.2f} s")
            run_engram(s, EngramReplayConfig("stdlib", 1e6), save=False)  # JIT warm-up
            for gb, policy in ((0.1, "lru"), (1.0, "lru"), (0.1, "s3fifo")):
                t, c = time.perf_counter(), time.process_time()
                out = run_engram(s, EngramReplayConfig("stdlib", gb * 1e9, policy=policy),
                                    save=False)
                total, cpu = time.perf_counter() - t, time.process_time() - c
                print(f"replay {policy} {gb} GB: load {out['load_s']:.2f} s, remap + kernel "
                      f"{out['elapsed_s'] - out['load_s']:.2f} s, total {total:.2f} s wall, "
                      f"{cpu:.2f} s CPU; hit ratio "
                      f"{out['hit_ratio']:.4f}, hottest 1% / 10% rows serve "
                      f"{out['hottest_1pct_share']:.3f} / {out['hottest_10pct_share']:.3f}")
    print(f"loadavg {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    main()
