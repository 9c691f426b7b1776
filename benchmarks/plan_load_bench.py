"""``toolkit plan`` for a load: speed of the instance search, and the same plans on one
worker, two local workers and Ray (plans and a grid of plans through the sweep).

Real data: the bundled Mooncake conversation trace (12,031 requests). Run:

    .venv/bin/python benchmarks/plan_load_bench.py [--users 64] [--no-ray]

Prints the wall time of ``plan --users N`` over GB200, GB300 and MI355X (default memory
options, the instance search by cluster replays) and checks that two local workers and a
local Ray give the same plans, and that a grid of plans on Ray through the sweep gives the
same ``plan_runs`` rows as one process.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import toolkit
from toolkit import sweep
from toolkit.ingest import ingest_file
from toolkit.plan.config import PlanConfig
from toolkit.plan.search import plan
from toolkit.sweep.grid import parse_grid

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "traces/mooncake/conversation_trace.jsonl"
GRID = """
kind = "plan"
trace = "conv"
[fixed]
model = "glm-5.2"
hardware = ["mi355x"]
host_dram_gb = [0.0, 512.0]
ssd_gb = [0.0]
prefix_reserve = [0.0]
[axes]
users = [16, 64]
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="plan_load_"))
    with toolkit.open_store(tmp / "store", create=True) as s:
        ingest_file(s, "mooncake", TRACE, "conv")
        cfg = PlanConfig("conv", "glm-5.2", ("gb200", "gb300", "mi355x"), users=args.users)
        plan(s, PlanConfig("conv", "glm-5.2", ("mi355x",), users=2, host_dram_gb=(0.0,),
                           ssd_gb=(0.0,), prefix_reserve=(0.0,)), progress=False,
             save=False)  # warm: kernels loaded, serving model read
        t0 = time.perf_counter()
        one = plan(s, cfg, progress=False, save=False)
        wall = time.perf_counter() - t0
        print(f"plan --users {args.users} over gb200, gb300, mi355x: {wall:.1f} s wall "
              f"({one.searched} candidates, {one.evaluated_exactly} exact, "
              f"{one.cluster_replays} cluster replays)")
        for h in one.by_hardware:
            print(f"  {h['hardware']}: {h['instances']} x {h['layout']} = {h['gpus_total']} "
                  f"GPUs, ${h['usd_per_hour_total']:.2f}/h, binds {h['binding']}")
        t0 = time.perf_counter()
        two = plan(s, cfg, progress=False, save=False, executor="local", workers=2)
        print(f"two local workers: {time.perf_counter() - t0:.1f} s, same plans: "
              f"{two.plans == one.plans}")
        assert two.plans == one.plans
        if args.no_ray:
            return
        t0 = time.perf_counter()
        ray_ = plan(s, cfg, progress=False, save=False, executor="ray", workers=2)
        print(f"Ray, 2 CPUs: {time.perf_counter() - t0:.1f} s, same plans: "
              f"{ray_.plans == one.plans}")
        assert ray_.plans == one.plans
    with toolkit.open_store(tmp / "a", create=True) as a, \
            toolkit.open_store(tmp / "b", create=True) as b:
        for st in (a, b):
            ingest_file(st, "mooncake", TRACE, "conv")
        t0 = time.perf_counter()
        sweep.run(a, parse_grid(GRID), workers=1)
        t1 = time.perf_counter()
        sweep.run(b, parse_grid(GRID), engine="ray", workers=2)
        t2 = time.perf_counter()
        q = ("SELECT * EXCLUDE (elapsed_s, toolkit_version) FROM plan_runs ORDER BY plan_id, "
             "hardware, host_dram_gb, policy")
        same = a.query(q).equals(b.query(q))
        print(f"grid of 2 plans: one process {t1 - t0:.1f} s, Ray 2 CPUs {t2 - t1:.1f} s, "
              f"same plan_runs rows: {same}")
        assert same


if __name__ == "__main__":
    main()
