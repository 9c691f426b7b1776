"""Selection replay in bounded memory: chunked-by-request vs whole-trace loading.

Builds a SYNTHETIC k=2048 selection trace in a temporary store, then replays it (HiSparse
LRU, buffer 2k) in two fresh subprocesses, one reading the whole trace at once and one
streaming chunks of whole requests, and prints wall time, throughput and peak RSS of each.
Run: ``.venv/bin/python benchmarks/selection_stream_bench.py [--requests 24]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Every heavy step runs in its own child: Linux keeps ru_maxrss across fork and exec, so a
# child forked from a parent that built the trace would report the parent's peak.
BUILD = """
import sys, toolkit
from toolkit.synth.selections import SyntheticSelectionConfig, generate
root, requests, steps, layers = sys.argv[1], *map(int, sys.argv[2:5])
cfg = SyntheticSelectionConfig(requests=requests, prompt_tokens=16_384, steps=steps,
                               layers=layers)
with toolkit.open_store(root, create=True) as s:
    s.write_many(generate(cfg, "syn"), "syn")
"""

CHILD = """
import json, resource, sys, time
import toolkit
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with
store, max_rows = sys.argv[1], int(sys.argv[2])
with toolkit.open_store(store) as s:
    t0 = time.perf_counter()
    out = replay_selections(s, SelectionReplayConfig("syn"), max_rows=max_rows)
    wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "peak_rss_mib": rss, "accesses": out["accesses"],
                  "misses": out["misses"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--chunk-rows", type=int, default=2_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", BUILD, str(root), str(args.requests),
                        str(args.steps), str(args.layers)], check=True)
        size_mb = (root / "selections" / "syn.parquet").stat().st_size / 1e6
        print(f"# SYNTHETIC trace: {args.requests} requests x {args.steps} steps x "
              f"{args.layers} layers, k=2048, 16K context; Parquet {size_mb:.0f} MB; "
              f"built in {time.perf_counter() - t0:.1f} s")
        print("| mode | max_rows | accesses | misses | wall s | M accesses/s | peak RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        for mode, max_rows in (("whole trace", 10**12), ("streamed", args.chunk_rows)):
            out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(max_rows)],
                                 check=True, capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"| {mode} | {max_rows:,} | {r['accesses']:,} | {r['misses']:,} | "
                  f"{r['wall_s']:.2f} | {r['accesses'] / r['wall_s'] / 1e6:.1f} | "
                  f"{r['peak_rss_mib']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
