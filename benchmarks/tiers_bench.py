"""Tier replay speed: 1M requests (~24M page lookups) through device + host tiers.

The Mooncake conversation trace (12,031 requests) is tiled 84 times: copy ``k`` gets its
hash ids offset (no sharing between copies) and its timestamps shifted by k hours, so
the load per hour is the real trace's. GB200 / GLM-5.2 default tiers (1.38M-token
device, 2x host), write-through LRU, open-loop trace arrivals. Timed: the compiled event
loop alone (after a warm-up that compiles it) and, separately, flattening + summary.

Run: ``.venv/bin/python benchmarks/tiers_bench.py`` (``--copies 8`` for a quick run;
``--radix-semantics page`` for the page-granular kernel; default sglang).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.replay.tiers import TierReplayConfig, capacities, page_stream, run_kernel
from toolkit.replay.tiers.run import _assemble
from toolkit.runtime import keep_freed_memory
from toolkit.serving.tier_service import TierServiceModel

keep_freed_memory()  # the allocator setting the toolkit command runs with

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"


def tiled(copies: int) -> pa.Table:
    """The Mooncake trace repeated ``copies`` times with disjoint hashes, hour by hour."""
    rows = [json.loads(line) for line in MOONCAKE.open()]
    ts = np.array([r["timestamp"] for r in rows], np.float64) / 1000.0
    inp = np.array([r["input_length"] for r in rows], np.int64)
    out = np.array([r["output_length"] for r in rows], np.int64)
    lens = np.array([len(r["hash_ids"]) for r in rows], np.int64)
    flat = np.concatenate([np.asarray(r["hash_ids"], np.int64) for r in rows])
    span = int(flat.max()) + 1
    n = len(rows)
    offsets = np.zeros(n * copies + 1, np.int32)
    np.cumsum(np.tile(lens, copies), out=offsets[1:])
    values = np.concatenate([flat + k * span for k in range(copies)])
    return pa.table({
        "trace": pa.array(["tiled"] * (n * copies)),
        "request_id": np.arange(n * copies, dtype=np.int64),
        "arrival_s": np.concatenate([ts - ts[0] + 3600.0 * k for k in range(copies)]),
        "input_tokens": np.tile(inp, copies),
        "output_tokens": np.tile(out, copies),
        "block_tokens": pa.array(np.full(n * copies, 512, np.int32)),
        "block_hashes": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        "session_id": pa.nulls(n * copies, pa.int64()),
        "turn": pa.nulls(n * copies, pa.int32()),
    }).cast(schema.REQUESTS)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=84)
    ap.add_argument("--radix-semantics", default="sglang", choices=("sglang", "page"))
    args = ap.parse_args()
    cfg = TierReplayConfig("tiled", radix_semantics=args.radix_semantics)
    hw, model = get_hardware(cfg.hardware), get_model(cfg.model)
    # warm-up: compile on one copy
    small = page_stream(tiled(1), semantics=cfg.radix_semantics)
    service = TierServiceModel(hw, model, cfg.assumptions)
    svc = service.times(int(small.prompt.mean()), 1024)
    caps = capacities(cfg, service, small.page_tokens)
    run_kernel(cfg, small, svc, caps, small.arrival_s - small.arrival_s[0])
    t0 = time.perf_counter()
    table = tiled(args.copies)
    t1 = time.perf_counter()
    ps = page_stream(table, semantics=cfg.radix_semantics)
    t2 = time.perf_counter()
    out = run_kernel(cfg, ps, svc, caps, ps.arrival_s - ps.arrival_s[0])
    t3 = time.perf_counter()
    res = _assemble(cfg, ps, svc, caps, out)
    t4 = time.perf_counter()
    s = res.summary
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{cfg.radix_semantics} semantics: requests {ps.prompt.size:,}, "
          f"page lookups {ps.keys.size:,}, pages {ps.n_keys:,}")
    print(f"tiers: device {caps[0]:,} tokens, host {caps[1]:,} tokens (GB200 / GLM-5.2 defaults)")
    print(f"build table             : {t1 - t0:6.2f} s")
    print(f"flatten (sort + unique) : {t2 - t1:6.2f} s")
    rate = ps.keys.size / (t3 - t2) / 1e6
    print(f"event loop (kernel)     : {t3 - t2:6.2f} s  ({rate:.1f} M lookups/s)")
    print(f"assemble tables+summary : {t4 - t3:6.2f} s")
    print(f"replay total (flatten+kernel+summary): {t4 - t1:6.2f} s")
    print(f"gpu {s['gpu_hit_rate']:.4f} host {s['host_hit_rate']:.4f} "
          f"overall {s['overall_hit_rate']:.4f} p90 TTFT {s['p90_ttft_s']:.3f} s")
    print(f"peak RSS {rss:,.0f} MiB")


if __name__ == "__main__":
    main()
