"""Plans as sweep cells (kind "plan"): the local pool and Ray give the same plan_runs rows
as one process and as ``toolkit plan`` itself."""

from __future__ import annotations

from pathlib import Path

import polars as pl

import toolkit
from toolkit import sweep
from toolkit.ingest import ingest_file
from toolkit.plan.config import PlanConfig
from toolkit.plan.search import plan
from toolkit.sweep.grid import parse_grid

ROOT = Path(__file__).resolve().parents[1]
GRID = """
kind = "plan"
trace = "conv"
[fixed]
model = "glm-5.2"
hardware = ["mi355x"]
host_dram_gb = [0.0, 512.0]
ssd_gb = [0.0]
users = 8
[axes]
interactivity = [50.0, 100.0]
"""
VOLATILE = ("elapsed_s", "toolkit_version")


HEAD = 1500  # the trace's first requests: every cell sizes its plans with cluster replays


def _store(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    head = root / "conv_head.jsonl"
    with (ROOT / "traces/mooncake/conversation_trace.jsonl").open() as f:
        head.write_text("".join(next(f) for _ in range(HEAD)))
    s = toolkit.open_store(root / "store", create=True)
    ingest_file(s, "mooncake", head, "conv")
    return s


def _rows(s) -> pl.DataFrame:
    return s.query("SELECT * FROM plan_runs ORDER BY plan_id, hardware, host_dram_gb, "
                   "ssd_gb, policy").drop(VOLATILE)


def test_pool_equals_one_process_and_the_command(tmp_path: Path) -> None:
    with _store(tmp_path / "one") as a, _store(tmp_path / "pool") as b:
        r1 = sweep.run(a, parse_grid(GRID), workers=1)
        r2 = sweep.run(b, parse_grid(GRID), engine="local", workers=2)
        assert (r1.ran, r1.failed, r2.ran, r2.failed) == (2, 0, 2, 0)
        assert _rows(a).equals(_rows(b))
        direct = plan(a, PlanConfig("conv", "glm-5.2", ("mi355x",), interactivity=100.0,
                                    host_dram_gb=(0.0, 512.0), ssd_gb=(0.0,), users=8),
                      progress=False, save=False)
        got = _rows(b).filter((pl.col("rank") == 1) & (pl.col("interactivity") == 100.0))
        assert got["usd_per_mtok_total"].item() == direct.plans[0]["usd_per_mtok_total"]
        assert got["gpu_hit_share"].item() == direct.plans[0]["gpu_hit_share"]
        assert (got["instances"].item(), got["binding"].item()) == (
            direct.plans[0]["instances"], direct.plans[0]["binding"])

