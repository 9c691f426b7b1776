"""Cluster replay speed: the real Mooncake trace over 16 instances, and a SYNTHETIC 1M-request
trace over 64 instances.

* Real: the Mooncake conversation trace (12,031 requests), open loop on its own arrivals,
  16 GB200 / GLM-5.2 instances (default per-instance tiers: HBM device pool, 2x host),
  each router. Timed: the whole replay (stream, kernel, tables) after a warm-up that
  compiles the kernel.
* SYNTHETIC (labelled so): the same trace tiled ``--copies`` times (84 -> 1,010,604
  requests) with fresh hashes per copy (no sharing between copies) and copy ``k``'s
  arrivals shifted by ``k x span / rate_multiple`` (``rate_multiple`` = big instances /
  instances = 4 by default), so the 64 instances see the per-instance load the 16 see on
  the real trace (4 x the trace's 3.4 requests/s over 4 x the instances, ~21 hours).

Run: ``.venv/bin/python benchmarks/cluster_bench.py`` (``--copies 8 --big-instances 8`` for
a quick run). Prints seconds and peak RSS; the figures go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import toolkit
from benchmarks.tiers_bench import tiled
from toolkit.cost.from_replay import run_cluster
from toolkit.ingest import ingest_file
from toolkit.replay.tiers import ClusterReplayConfig, TierReplayConfig
from toolkit.replay.tiers.cluster import stream_for
from toolkit.runtime import keep_freed_memory

keep_freed_memory()

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
ROUTERS = ("round-robin", "least-load", "cache-aware", "kv-router")


def interleaved(copies: int, rate_multiple: float) -> pa.Table:
    """SYNTHETIC: ``copies`` disjoint-hash copies of Mooncake, copy k shifted by
    ``k x span / rate_multiple`` (so the whole arrives at ``rate_multiple`` x the rate)."""
    t = tiled(copies)
    n = t.num_rows // copies
    arr = t.column("arrival_s").to_numpy()
    base = arr[:n]
    span = float(base.max() - base.min())
    shifted = np.concatenate([base + span * k / rate_multiple for k in range(copies)])
    t = t.set_column(t.schema.get_field_index("arrival_s"), "arrival_s", pa.array(shifted))
    return t.set_column(0, "trace", pa.array(["synthetic-1m"] * t.num_rows))


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=84)
    ap.add_argument("--instances", type=int, default=16)
    ap.add_argument("--big-instances", type=int, default=64)
    ap.add_argument("--big-router", default="round-robin", choices=ROUTERS)
    ap.add_argument("--skip-big", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cluster_bench_")) / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
        t = TierReplayConfig("conv")
        run_cluster(s, ClusterReplayConfig(t, instances=2, router="kv-router"), save=False)
        print(f"Mooncake conversation (12,031 requests, real), open loop, "
              f"{args.instances} x GB200 / GLM-5.2 instances:")
        for router in ROUTERS:
            t0 = time.perf_counter()
            c0 = time.process_time()
            res = run_cluster(s, ClusterReplayConfig(t, instances=args.instances,
                                                     router=router), save=False)
            dt = time.perf_counter() - t0
            cpu = time.process_time() - c0
            m = res.summary
            print(f"  {router:12s} replay {dt:5.2f} s wall, {cpu:5.2f} s CPU "
                  f"(kernel {m['elapsed_s']:.2f} s wall)  "
                  f"GPU {m['gpu_hit_share']:.3f} host {m['host_hit_share']:.3f}  "
                  f"p90 TTFT {m['p90_ttft_s']:.2f} s")
        if args.skip_big:
            return
        t0 = time.perf_counter()
        big = interleaved(args.copies, args.big_instances / args.instances)
        s.write("requests", "synthetic-1m", big, replace=True)
        t1 = time.perf_counter()
        cfg = ClusterReplayConfig(TierReplayConfig("synthetic-1m"),
                                  instances=args.big_instances, router=args.big_router)
        c1 = time.process_time()
        ps = stream_for(s, cfg)
        t2 = time.perf_counter()
        c2 = time.process_time()
        res = run_cluster(s, cfg, stream=ps, save=False)
        t3 = time.perf_counter()
        c3 = time.process_time()
        m = res.summary
        print(f"SYNTHETIC {big.num_rows:,} requests (Mooncake x{args.copies}, fresh hashes), "
              f"{ps.keys.size:,} page lookups, {ps.n_keys:,} pages, "
              f"{args.big_instances} instances, {args.big_router}:")
        print(f"  build + store trace {t1 - t0:6.2f} s")
        print(f"  flatten (stream)    {t2 - t1:6.2f} s")
        print(f"  replay (kernel)     {m['elapsed_s']:6.2f} s")
        print(f"  replay total        {t3 - t2:6.2f} s (kernel + tables + summary)")
        print(f"  stream + replay     {t3 - t1:6.2f} s wall, {c3 - c1:6.2f} s CPU "
              f"(replay {c3 - c2:.2f} s CPU)")
        print(f"  GPU {m['gpu_hit_share']:.3f} host {m['host_hit_share']:.3f} p90 TTFT "
              f"{m['p90_ttft_s']:.2f} s; peak RSS {rss_mib():,.0f} MiB")


if __name__ == "__main__":
    main()
