"""The AgentX TTFT comparison of ``benchmarks/cluster_agentx_ttft.py`` on a small SYNTHETIC run:
exact figures of a GB200 Dynamo-SGLang 1P4D deployment (one DEP8 prefill side, four TP4
decode workers as one pool) and an aggregated MI355X ATOM TP4 instance, GLM-5.2 FP4 + MTP,
and where the disaggregated TTFT goes (docs/cluster.md, "Against measurements")."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import toolkit
from toolkit.cost.from_replay import run_cluster
from toolkit.replay.tiers import ClusterReplayConfig, ServiceAssumptions, TierReplayConfig
from toolkit.replay.tiers.config import DecodePool

# p90 TTFT (s) measured on 64 SYNTHETIC coding sessions, GB200 1P4D at 48 users, MI355X TP4 at 4
# (GB200 with the recipe's session affinity of 3600 s, and without it)
P90 = {"gb200": 0.8980292290847021, "gb200_no_affinity": 5.237281328150829,
       "mi355x": 0.2412019672546649}  # measured, 64 sessions


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    with toolkit.open(tmp_path_factory.mktemp("agentx") / "s", create=True) as w:
        w.synth_agentic("coding", "coding", sessions=64)
        yield w


def gb200_1p4d(users: int, affinity_s: float = 3600.0) -> ClusterReplayConfig:
    a = ServiceAssumptions(gpus_per_replica=8, weight_precision="fp4", mem_fraction=0.8,
                           engine="dynamo-sglang", dp_attention=True, expert_parallel=True,
                           mtp=True)
    t = TierReplayConfig("coding", hardware="gb200", model="glm-5.2", concurrency=users,
                         host_tokens=2_502_780, write_policy="write_back", max_running=2,
                         assumptions=a)
    dec = DecodePool(gpus=16, dp_attention=True, expert_parallel=False, mtp=True,
                     max_running=64)
    return ClusterReplayConfig(t, router="kv-router", ranks=8, decode=dec,
                               session_affinity_ttl_s=affinity_s)


def mi355x_tp4(users: int) -> ClusterReplayConfig:
    a = ServiceAssumptions(gpus_per_replica=4, weight_precision="fp4", engine="atom", mtp=True)
    t = TierReplayConfig("coding", hardware="mi355x", model="glm-5.2", concurrency=users,
                         engine_semantics="vllm", offload_policy="lru", host_tokens=3_981_245,
                         max_running=2 * users, assumptions=a)
    return ClusterReplayConfig(t)


def test_disaggregated_ttft_is_prefill_queueing(ws):
    """48 users on one DEP8 prefill side: every first token comes after its prefill end;
    the decode pool always has a slot (64 > 48), so the TTFT is the prefill side's
    admission queue, lane wait and compute."""
    r = run_cluster(ws.store, gb200_1p4d(48), save=False)
    m, q = r.summary, pl.from_arrow(r.requests)
    assert m["gpus"] == 24 and m["layout"] == "disagg:dp8/dp16+mtp"
    after = (q["first_token_s"] - q["prefill_end_s"]).to_numpy()
    assert after.min() >= 0
    assert m["mean_decode_wait_s"] == pytest.approx(0.0, abs=1e-12)
    assert np.all(q["prefill_end_s"].to_numpy() >= q["admit_s"].to_numpy())
    assert m["p90_ttft_s"] == pytest.approx(P90["gb200"], rel=1e-9)


def test_aggregated_mi355x_ttft(ws):
    r = run_cluster(ws.store, mi355x_tp4(4), save=False)
    assert r.summary["mean_decode_wait_s"] is None
    assert r.summary["p90_ttft_s"] == pytest.approx(P90["mi355x"], rel=1e-9)
    assert r.summary["p90_ttft_s"] < P90["gb200"]


def test_without_session_affinity_the_kv_router_moves_turns(ws):
    """The recipe's session affinity keeps a session's turns on its DP rank; Dynamo's KV
    router alone moves turns whose rank has queued prefill, which recompute their prefix:
    the p90 TTFT grows about fivefold."""
    sticky = run_cluster(ws.store, gb200_1p4d(48), save=False).summary
    free = run_cluster(ws.store, gb200_1p4d(48, affinity_s=0.0), save=False).summary
    assert free["p90_ttft_s"] == pytest.approx(P90["gb200_no_affinity"], rel=1e-9)
    assert free["computed_tokens"] > sticky["computed_tokens"]
    assert free["gpu_hit_share"] < sticky["gpu_hit_share"]

