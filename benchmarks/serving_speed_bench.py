"""Speed of the serving model on the user's path: ``serving predict`` on 1,000 configuration
rows and ``cost compare`` over three accelerators, warm (kernels compiled), with the
machine's load next to each figure.

Targets (issue: cost answers): predict on 1,000 points < 2 s; cost compare over three
accelerators < 15 s. Run from the repo root:

    .venv/bin/python benchmarks/serving_speed_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

import polars as pl

from toolkit.cost.compare import compare
from toolkit.cost.config import CompareConfig
from toolkit.serving import bundled_points_path, predict, read_points


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists(
        "/proc/loadavg") else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    points = read_points(bundled_points_path())
    rows = pl.concat([points] * 4).head(1000)
    cfg = CompareConfig("glm-5.2", ("gb200", "gb300", "mi355x"))
    t0 = time.perf_counter()
    predict(rows.head(5))
    compare(CompareConfig("dsr1", ("b200",), (50.0,)))
    print(f"warm-up (compile or load kernels): {time.perf_counter() - t0:.1f} s")
    for i in range(a.repeat):
        t0 = time.perf_counter()
        predict(rows)
        t_pred = time.perf_counter() - t0
        t0 = time.perf_counter()
        compare(cfg)
        t_cmp = time.perf_counter() - t0
        print(f"run {i + 1}: predict 1,000 rows {t_pred:.2f} s (target < 2); cost compare "
              f"glm-5.2 x 3 accelerators {t_cmp:.2f} s (target < 15); load {_load()}; "
              f"cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
