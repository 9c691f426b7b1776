"""Speed of ``toolkit plan`` over three accelerators on the bundled traces: the Mooncake
conversation trace and the SmolLM2 selections, GLM-5.2, default search (288 candidates:
HiSparse off / 1k / 2k / 4k, host DRAM 0/256/512/1024 GB, SSD 0/4096/16384 GB, prefix
reserve 0 / 0.5 of the KV pool), one worker
and ``--workers 2`` (threads), with the machine's load beside each figure. Includes the
store write; excludes ingest. ``--shared-pool`` searches the shared pool alone (reserve 0:
half the candidates); ``--engram`` adds the Engram lookups of the bundled heapq.py text (Engram
HBM 0.5/2/8/25 GB per GPU: 4 x the candidates); ``--ray`` also runs the search on a local
Ray of 2 CPUs and checks it gives the same plans and evaluations as one process (Ray's
start-up and its workers' first imports dominate a search this small).

Target (issue 36): under 2 minutes on 2 cores. Run from the repo root:

    .venv/bin/python benchmarks/plan_bench.py [--shared-pool] [--engram] [--ray]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import toolkit
from toolkit.ingest import ingest_file
from toolkit.plan.config import PlanConfig
from toolkit.plan.search import plan

ROOT = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists(
        "/proc/loadavg") else "n/a"


def _run(s, cfg: PlanConfig, label: str, **kw):
    t0 = time.perf_counter()
    r = plan(s, cfg, progress=False, **kw)
    wall = time.perf_counter() - t0
    best = r.plans[0]
    print(f"{label}: {wall:.1f} s wall (search {r.elapsed_s:.1f} s), {r.searched} "
          f"candidates, {r.evaluated_exactly} exact, {r.feasible} feasible; best "
          f"{best['hardware']} ${best['usd_per_mtok_total']:.4f}/M (prefix "
          f"{best['device_prefix_tokens']:,} tok, Engram {best['engram_hbm_gb']:g} GB/GPU); "
          f"load {_load()}", flush=True)
    return r


def _same(a, b) -> bool:
    return a.plans == b.plans and [(e["candidate"], e.get("why")) for e in a.evaluated] == [
        (e["candidate"], e.get("why")) for e in b.evaluated]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared-pool", action="store_true")
    ap.add_argument("--engram", action="store_true")
    ap.add_argument("--ray", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, toolkit.open_store(Path(tmp) / "s",
                                                                  create=True) as s:
        ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", "conv")
        ingest_file(s, "bundle", ROOT / "traces/smollm2", "smollm2",
                    select="smollm2-softmax-sum")
        extra = {}
        if args.engram:
            from toolkit.engram.hashing import EngramConfig
            from toolkit.engram.record import record_engram

            record_engram(s, "heapq", [ROOT / "traces/smollm2/texts/heapq.py.txt"],
                          EngramConfig())
            extra = {"engram": "heapq"}
        if args.shared_pool:
            extra["prefix_reserve"] = (0.0,)
        cfg = PlanConfig("conv", "glm-5.2", ("gb200", "gb300", "mi355x"),
                         selections="smollm2", interactivity=100.0, **extra)
        one = _run(s, cfg, "plan 3 accelerators, 1 worker")
        two = _run(s, cfg, "plan 3 accelerators, --workers 2", workers=2)
        print(f"--workers 2 same plans and evaluations as 1: {_same(one, two)}")
        if args.ray:
            ray = _run(s, cfg, "plan 3 accelerators, --engine ray --workers 2",
                       executor="ray", workers=2)
            print(f"--engine ray same plans and evaluations as 1: {_same(one, ray)}")


if __name__ == "__main__":
    main()
