"""Ingest of the bundled Mooncake conversation trace plus one LRU prefix replay.

Prints wall times (median of N after a warm-up that compiles the kernel), the replay's
lookups/s and peak RSS. Run: ``.venv/bin/python benchmarks/ingest_replay_bench.py``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import toolkit
from toolkit.ingest import ingest_file
from toolkit.replay.prefix import PrefixReplayConfig, load_stream, replay_prefix
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with

TRACE = Path(__file__).resolve().parents[1] / "traces/mooncake/conversation_trace.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--capacity-blocks", type=int, default=10_000)
    args = ap.parse_args()
    ingest_s, replay_s, kernel_s = [], [], []
    with tempfile.TemporaryDirectory() as tmp, \
            toolkit.open_store(Path(tmp) / "s", create=True) as store:
        ingest_file(store, "mooncake", TRACE, "conv")
        replay_prefix(store, PrefixReplayConfig("conv", "lru", args.capacity_blocks))  # warm-up
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            ingest_file(store, "mooncake", TRACE, "conv", replace=True)
            t1 = time.perf_counter()
            row = replay_prefix(store, PrefixReplayConfig("conv", "lru", args.capacity_blocks))
            t2 = time.perf_counter()
            ingest_s.append(t1 - t0)
            replay_s.append(t2 - t1)
            kernel_s.append(row["elapsed_s"])
        lookups = load_stream(store, "conv").keys.size
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    med = statistics.median
    print(f"trace: {TRACE.name} ({lookups:,} block lookups), LRU {args.capacity_blocks:,} blocks")
    print(f"ingest (parse + validate + write)      : {med(ingest_s):.3f} s")
    print(f"replay (read + flatten + kernel + save): {med(replay_s):.3f} s")
    print(f"  kernel + summary                     : {med(kernel_s) * 1e3:.1f} ms"
          f"  ({lookups / med(kernel_s) / 1e6:.1f} M lookups/s)")
    print(f"ingest + one replay                    : {med(ingest_s) + med(replay_s):.3f} s")
    print(f"peak RSS                               : {rss_mib:.0f} MiB")


if __name__ == "__main__":
    main()
