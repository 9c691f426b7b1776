"""Selection replay at scale: a >= 2-billion-access SYNTHETIC trace from the store, and
1 vs N worker threads.

Steps, each in its own child process so that peak RSS is that step's own:

1. ``toolkit synth selections`` writes the trace streaming (default 240 requests x 256
   steps x 16 layers, k = 2048, 32K-token prompt = 2,013,265,920 positions);
2. the same shape held in memory (``--memory-requests`` requests, default 32 = 268M
   positions, loaded with ``load_rows`` and replayed with ``rows=``) gives the in-memory
   rate (a shorter reference, 8 requests in 0.2 s, timed too noisily: 237-460 M acc/s at 2
   workers across runs; this one holds ~2.7 GB);
3. the big trace replays from the store (HiSparse LRU, 4,096 slots, per-row results
   streamed to the store) with 1 worker and with ``--workers`` workers.

Run: ``.venv/bin/python benchmarks/scale_bench.py [--workers 2] [--runs 3] [--dir /tmp/scale]``
(needs ~2 GB of disk; several minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SYNTH = """
import json, resource, sys, time
import toolkit
from toolkit.synth.selections import SyntheticSelectionConfig
from toolkit.synth.selections_fast import write_streaming
root, name, requests, steps, layers, prompt, workers = sys.argv[1:8]
cfg = SyntheticSelectionConfig(requests=int(requests), prompt_tokens=int(prompt),
                               steps=int(steps), layers=int(layers))
per = sum(min(cfg.prompt_tokens + s + 1, cfg.k) for s in range(cfg.steps)) * cfg.layers
with toolkit.open_store(root, create=True) as s:
    t0 = time.perf_counter()
    write_streaming(s, cfg, name, replace=True, workers=int(workers))
    wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "positions": per * cfg.requests,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

REPLAY = """
import json, resource, sys, time
import toolkit
from toolkit.replay.selections import SelectionReplayConfig, load_rows, replay_selections
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with
root, name, workers, in_memory = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
ahead, runs = sys.argv[5] == "1", int(sys.argv[6])
with toolkit.open_store(root) as s:
    cfg = SelectionReplayConfig(name, "lru", 4096)
    rows = load_rows(s, name) if in_memory else None
    # compile outside the timing, on the small trace (the big one would take minutes), and
    # keep replaying it for 2 s: a process's first second runs 2-worker replays up to 1.8x
    # slower, which would otherwise land on whichever run is timed
    t_warm = time.perf_counter()
    while time.perf_counter() - t_warm < 2.0:
        replay_selections(s, SelectionReplayConfig("small", "lru", 4096), workers=workers,
                          save=False, max_rows=512)
    walls = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = replay_selections(s, cfg, rows=rows, workers=workers, progress=False,
                                read_ahead=ahead)
        walls.append(time.perf_counter() - t0)
print(json.dumps({"walls_s": walls, "accesses": out["accesses"], "misses": out["misses"],
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(code: str, *args: object) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=240)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=32_768)
    ap.add_argument("--memory-requests", type=int, default=32)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--runs", type=int, default=3,
                    help="timed replays per row (median reported; each child compiles and "
                    "warms up once)")
    ap.add_argument("--dir", type=Path, default=None, help="store location (default: temp)")
    ap.add_argument("--read-ahead", action="store_true",
                    help="store replays with the extra I/O thread decoding the next chunks")
    args = ap.parse_args()
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=args.dir)) if args.dir else Path(tempfile.mkdtemp())
    root = tmp / "store"
    shape = (args.steps, args.layers, args.prompt_tokens)
    try:
        print(f"# load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        r = child(SYNTH, root, "big", args.requests, *shape, args.workers)
        size = (root / "selections" / "big.parquet").stat().st_size / 1e9
        print(f"synth: SYNTHETIC {args.requests} requests x {args.steps} steps x "
              f"{args.layers} layers, k=2048: {r['positions']:,} positions in "
              f"{r['wall_s']:.1f} s = {r['positions'] / r['wall_s'] / 1e6:.1f} M positions/s "
              f"({args.workers} threads), Parquet {size:.2f} GB, peak RSS "
              f"{r['peak_rss_mib']:.0f} MiB", flush=True)
        child(SYNTH, root, "small", args.memory_requests, *shape, args.workers)
        print(f"# read-ahead thread: {args.read_ahead}")
        print(f"# median of {args.runs} replays per row; all rates in the last column")
        print("| run | workers | accesses | misses | wall s | M acc/s | peak RSS MiB | "
              "every run M acc/s |")
        print("|---|---|---|---|---|---|---|---|")
        for label, name, in_mem in (("in memory (rows=)", "small", 1),
                                    ("from store, streamed", "big", 0)):
            for w in sorted({1, args.workers}):
                r = child(REPLAY, root, name, w, in_mem, int(args.read_ahead), args.runs)
                wall = statistics.median(r["walls_s"])
                every = ", ".join(f"{r['accesses'] / x / 1e6:.0f}" for x in r["walls_s"])
                print(f"| {label} | {w} | {r['accesses']:,} | {r['misses']:,} | "
                      f"{wall:.2f} | {r['accesses'] / wall / 1e6:.1f} | "
                      f"{r['peak_rss_mib']:.0f} | {every} |", flush=True)
        print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
