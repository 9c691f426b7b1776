"""A small store holding one run of every analysis the named queries and the report read,
built from the bundled real traces (Mooncake conversation, SmolLM2 selections)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import toolkit
from toolkit.cost.compare import CompareConfig
from toolkit.cost.engram import run_engram
from toolkit.cost.from_replay import run_tiers
from toolkit.cost.records import DecodeCostConfig, record_replay_cost, record_serving_fronts
from toolkit.engram.hashing import EngramConfig
from toolkit.engram.record import record_engram
from toolkit.ingest import ingest_file
from toolkit.replay.engram import EngramReplayConfig, load_dense
from toolkit.replay.mrc import lru_miss_curve
from toolkit.replay.prefix import sweep_prefix
from toolkit.replay.selections import SelectionReplayConfig, load_rows, replay_selections
from toolkit.replay.tiers import TierReplayConfig
from toolkit.sweep.kinds import run_compare

ROOT = Path(__file__).resolve().parents[1]
TIER_RUNS = (("gb200", 8), ("gb200", 16), ("mi355x", 8), ("mi355x", 16))
#: (policy, buffer as a multiple of k)
SELECTION_RUNS = (("lru", 1), ("lru", 2), ("opt", 1), ("opt", 2))


@pytest.fixture(scope="session")
def analysis_store(tmp_path_factory: pytest.TempPathFactory):
    """Store with prefix runs (1,000 / 10,000 blocks / unbounded), closed-loop tier runs,
    HiSparse LRU and OPT at k and 2k, three priced decode configurations, and Engram lookups
    of heapq.py with its one-pass LRU curve and 1 MB replays (LRU on DRAM and SSD, OPT),
    and modelled DeepSeek-R1 FP4 fronts on GB200 and MI355X."""
    root = tmp_path_factory.mktemp("analysis") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", "mc")
        sweep_prefix(s, "mc", [1_000, 10_000, None])
        for hw, users in TIER_RUNS:
            run_tiers(s, TierReplayConfig("mc", hw, "glm-5.2", concurrency=users))
        # issue 48: cluster replays, two routers at two loads over 2 instances
        from toolkit.cost.from_replay import run_cluster
        from toolkit.replay.tiers import ClusterReplayConfig

        for router in ("round-robin", "cache-aware"):
            for users in (8, 16):
                run_cluster(s, ClusterReplayConfig(TierReplayConfig("mc", concurrency=users),
                                                   instances=2, router=router))
        ingest_file(s, "bundle", ROOT / "traces/smollm2", "smollm2", select="smollm2-softmax-sum")
        rows = load_rows(s, "smollm2")
        ids: dict[tuple[str, int], str] = {}
        for policy, mult in SELECTION_RUNS:
            run = replay_selections(s, SelectionReplayConfig("smollm2", policy, mult * rows.k),
                                    rows=rows)
            ids[(policy, mult)] = run["run_id"]
        for batch, overlap in ((16, False), (64, False), (64, True)):
            record_replay_cost(s, DecodeCostConfig(ids[("lru", 2)], "glm-5.2", "gb200", batch,
                                                   overlap, miss_scale=32.0))
        # issue 36: a capacity plan's rows only (its tier replays would join tier_runs)
        import pyarrow as pa

        from toolkit.plan.record import rows as plan_rows
        from toolkit.plan.search import PlanConfig, plan
        from toolkit.schema import PLAN_RUNS

        pcfg = PlanConfig("mc", "glm-5.2", ("mi355x",), host_dram_gb=(0.0, 512.0),
                          ssd_gb=(0.0,), users=4)
        res = plan(s, pcfg, progress=False, save=False)
        s.write("plan_runs", res.plan_id,
                pa.Table.from_pylist(plan_rows(pcfg, res), schema=PLAN_RUNS))
        text = ROOT / "traces/smollm2/texts/heapq.py.txt"
        record_engram(s, "heapq", [text], EngramConfig())
        dense = load_dense(s, "heapq")
        misses = lru_miss_curve(dense.keys, dense.n_distinct, dense.n_distinct)
        n = dense.keys.size
        s.write("miss_curves", "engram-heapq", pl.DataFrame({
            "trace": "heapq", "kind": "engram", "capacity": list(range(misses.size)),
            "accesses": n, "misses": misses, "miss_ratio": misses / n}).to_arrow())
        for policy, backing in (("lru", "dram"), ("lru", "ssd"), ("opt", "dram")):
            run_engram(s, EngramReplayConfig("heapq", 1e6, policy=policy, backing=backing))
        record_serving_fronts(s, CompareConfig(model="dsr1", hardware=("gb200", "mi355x"),
                                               precision="fp4"))
        run_compare(s, CompareConfig(model="dsr1", hardware=("gb200", "mi355x"),
                                     interactivity=(60.0, 100.0)))
        yield s
