"""Selection replay end to end: store-to-result against kernel-only on the same stream.

Builds a SYNTHETIC k=2048 selection trace in a temporary store (default: 4 requests x 256
steps x 8 layers, 32K-token prompt; the workload of issue 11), then, in this one process
and for plain and HiSparse modes with LRU at 4,096 slots:

* **store-to-result**: ``replay_selections`` from the store (read Parquet, order rows,
  fast-path/newest filtering, warm-up, policy, per-row results written back);
* **kernel-only**: ``LRU().simulate`` alone on the key stream that replay plans;
* **libCacheSim LRU** (tuned ``hashpower``) on the same keys as one segment (it has no
  cold restarts), next to our LRU on that same single-segment stream; miss counts of the
  two must agree.

Each figure is the median of ``--runs`` runs taken in turn; numba compile is excluded.
Run: ``.venv/bin/python benchmarks/e2e_bench.py [--workers 1] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import libcachesim as lcs
import numpy as np

import toolkit
from toolkit.policies import policies
from toolkit.replay.selection_plan import fused_plan
from toolkit.replay.selections import SelectionReplayConfig, _order, load_rows, replay_selections
from toolkit.synth.selections import SyntheticSelectionConfig
from toolkit.synth.selections_fast import write_streaming


def lcs_lru(keys: np.ndarray, capacity: int, tmp: Path) -> tuple[float, int]:
    """libCacheSim LRU on ``keys`` read in place from an int32 .npy: (seconds, misses)."""
    npy = tmp / "keys.npy"
    np.save(npy, keys.astype(np.int32))
    with npy.open("rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        header = f.tell()
    param = lcs.ReaderInitParam(binary_fmt_str="<i", ignore_obj_size=True,
                                trace_start_offset=header)
    param.obj_id_field = 1
    reader = lcs.TraceReader(str(npy), lcs.TraceType.BIN_TRACE, param)
    cache = lcs.LRU(capacity, hashpower=math.ceil(math.log2(capacity)) + 1)
    t0 = time.perf_counter()
    ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - t0, round(ratio * cache._cache.n_req)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=32_768)
    ap.add_argument("--buffer", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2,
                    help="thread count compared with 1 worker (0 = all cores)")
    ap.add_argument("--read-ahead", action="store_true",
                    help="replay with the extra I/O thread that decodes the next chunks")
    args = ap.parse_args()
    ahead = args.read_ahead
    lru = policies.get("lru")
    cfg = SyntheticSelectionConfig(requests=args.requests, prompt_tokens=args.prompt_tokens,
                                   steps=args.steps, layers=args.layers)
    with tempfile.TemporaryDirectory() as tmp, toolkit.open_store(Path(tmp) / "s") as store:
        write_streaming(store, cfg, "syn")
        print(f"# SYNTHETIC trace: {args.requests} requests x {args.steps} steps x "
              f"{args.layers} layers, k=2048, prompt {args.prompt_tokens:,}; LRU, "
              f"{args.buffer} slots; median of {args.runs} runs, 1 worker, {args.workers} "
              f"workers and kernel-only taking turns; read-ahead thread: {ahead}")
        print(f"# load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        w = args.workers
        print(f"| mode | accesses | misses | store-to-result 1 worker M acc/s | store-to-result "
              f"{w} workers M acc/s | kernel-only (1 thread) M acc/s | ratio 1 worker | "
              f"ratio {w} workers | {w} vs 1 worker | policy keys (incl. warm-up) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        single = None
        for mode in ("plain", "hisparse"):
            rc = SelectionReplayConfig("syn", "lru", args.buffer, mode=mode)
            rows = load_rows(store, "syn")
            o = _order(rows, None)
            p = fused_plan(rows.values, rows.offsets, o.src, o.seq_len, o.new_group,
                           args.buffer, mode, "first")
            n_keys = int(max(rows.seq_len.max(), args.buffer))
            replay_selections(store, rc, workers=w, progress=False)  # compile
            e2e1, e2en, kern, misses = [], [], [], set()
            for _ in range(args.runs):
                for workers, times in ((1, e2e1), (w, e2en)):
                    t0 = time.perf_counter()
                    out = replay_selections(store, rc, workers=workers, progress=False,
                                            read_ahead=ahead)
                    times.append(time.perf_counter() - t0)
                    misses.add(out["misses"])
                t0 = time.perf_counter()
                lru.simulate(p.keys, n_keys, args.buffer, p.segments)
                kern.append(time.perf_counter() - t0)
            assert len(misses) == 1, misses  # any worker count, same result
            n = out["accesses"]
            r1, rn, rk = (n / statistics.median(t) / 1e6 for t in (e2e1, e2en, kern))
            print(f"| {mode} | {n:,} | {out['misses']:,} | {r1:.1f} | {rn:.1f} | {rk:.1f} "
                  f"| {r1 / rk:.0%} | {rn / rk:.0%} | {rn / r1:.2f}x | {p.keys.size:,} |",
                  flush=True)
            if mode == "plain":
                single = (p.keys, n_keys)
        keys, n_keys = single
        t_lcs, m_lcs, t_ours, m_ours = [], set(), [], set()
        for _ in range(args.runs):
            t, m = lcs_lru(keys, args.buffer, Path(tmp))
            t_lcs.append(t)
            m_lcs.add(m)
            t0 = time.perf_counter()
            res = lru.simulate(keys, n_keys, args.buffer)
            t_ours.append(time.perf_counter() - t0)
            m_ours.add(res.miss_count)
        n = keys.size
        print(f"\nsingle-segment stream of the plain-mode keys ({n:,} accesses, LRU "
              f"{args.buffer}): libCacheSim {n / statistics.median(t_lcs) / 1e6:.1f} M acc/s, "
              f"misses {sorted(m_lcs)}; ours {n / statistics.median(t_ours) / 1e6:.1f} "
              f"M acc/s, misses {sorted(m_ours)}")
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    print(f"# peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
