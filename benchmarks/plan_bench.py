"""Speed of ``toolkit plan`` over three accelerators on the bundled traces: the Mooncake
conversation trace and the SmolLM2 selections, GLM-5.2, default search (144 candidates:
HiSparse off / 1k / 2k / 4k, host DRAM 0/256/512/1024 GB, SSD 0/4096/16384 GB), with the
machine's load beside the figure. Includes the store write; excludes ingest.

Target (issue 36): under 2 minutes on 2 cores. Run from the repo root:

    .venv/bin/python benchmarks/plan_bench.py
"""

from __future__ import annotations

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


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, toolkit.open_store(Path(tmp) / "s",
                                                                  create=True) as s:
        ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", "conv")
        ingest_file(s, "bundle", ROOT / "traces/smollm2", "smollm2",
                    select="smollm2-softmax-sum")
        cfg = PlanConfig("conv", "glm-5.2", ("gb200", "gb300", "mi355x"),
                         selections="smollm2", interactivity=100.0)
        t0 = time.perf_counter()
        r = plan(s, cfg, progress=False)
        wall = time.perf_counter() - t0
    best = r.plans[0]
    print(f"plan 3 accelerators: {wall:.1f} s wall (search {r.elapsed_s:.1f} s), "
          f"{r.searched} candidates, {r.evaluated_exactly} exact, {r.feasible} feasible; "
          f"best {best['hardware']} ${best['usd_per_mtok_total']:.4f}/M; load {_load()}")


if __name__ == "__main__":
    main()
