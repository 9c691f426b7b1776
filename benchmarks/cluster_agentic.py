"""The cluster replay against agentic measurements: nothing fitted, every assumption printed.

Measured (real): InferenceX's B200 multi-turn agentic points
(``toolkit/data/inferencex/agentic_b200_multiturn.csv``: vLLM, DeepSeek-R1 FP4, TP4 and
TP8, 1-256 users, CPU offload off/on; GPU and CPU prefix-hit rates = hit tokens / prompt
tokens), and the AgentX figures quoted in the brief (GPU share of reused prompt tokens
90.3% -> 54.8%, host 6.0% -> 40.3% from 8 to 16 users per B200 instance).

Modelled: the cluster replay on the SYNTHETIC coding-agent sessions
(``toolkit.synth.agentic`` preset ``coding``; the benchmark's own sessions are not bundled),
B200 + DeepSeek-R1, each instance's device pool = its REAL HBM left after FP4 weights at
vLLM's 0.9 memory utilisation (``TierServiceModel.default_device_tokens``, not a chosen
pool); vLLM semantics (block pool, 16-token blocks) with its CPU offloading tier (LRU)
when offload is on, sized 2 x the device pool (the benchmark's CPU pool is not published:
an ASSUMPTION, printed). Closed loop: U users x instances over the sessions.

Run: ``.venv/bin/python benchmarks/cluster_agentic.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import polars as pl

import toolkit
from toolkit.cost.from_replay import run_cluster
from toolkit.replay.tiers import ClusterReplayConfig, ServiceAssumptions, TierReplayConfig
from toolkit.replay.tiers.cluster import stream_for

CSV = Path(__file__).resolve().parents[1] / "toolkit/data/inferencex/agentic_b200_multiturn.csv"
AGENTX = {8: (0.903, 0.060), 16: (0.548, 0.403)}  # users per instance -> (GPU, host) shares


def tiers(tp: int, users: int, offload: bool) -> TierReplayConfig:
    a = ServiceAssumptions(gpus_per_replica=tp, weight_precision="fp4", engine="vllm")
    return TierReplayConfig(
        "coding", hardware="b200", model="dsr1", concurrency=users,
        engine_semantics="vllm", offload_policy="lru" if offload else "none",
        host_ratio=2.0, assumptions=a)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="cluster_agentic_")) / "store"
    with toolkit.open(root, create=True) as ws:
        ws.synth_agentic("coding", "coding")
        s = ws.store
        measured = (pl.read_csv(CSV).filter(pl.col("status") == "SUCCESS")
                    .group_by("tp", "users", "offload").agg(
                        (pl.col("gpu_hit_rate").median() / 100).alias("gpu"),
                        (pl.col("cpu_hit_rate").fill_null(0).median() / 100).alias("cpu"))
                    .sort("tp", "offload", "users"))
        ps = stream_for(s, ClusterReplayConfig(tiers(4, 1, True)))
        rows = []
        for tp in (4, 8):
            for offload in (False, True):
                for users in (1, 4, 8, 16, 24, 32, 48, 64):
                    m = run_cluster(s, ClusterReplayConfig(tiers(tp, users, offload)),
                                    stream=ps, save=False).summary
                    rows.append({"tp": tp, "users": users, "offload": "on" if offload else
                                 "off", "model_gpu": m["gpu_hit_share"],
                                 "model_cpu": m["host_hit_share"],
                                 "device_tokens": m["device_capacity_tokens"],
                                 "host_tokens": m["host_capacity_tokens"]})
        model = pl.DataFrame(rows)
        side = measured.join(model, on=["tp", "users", "offload"], how="inner").sort(
            "tp", "offload", "users")
        pl.Config.set_tbl_rows(100)
        pl.Config.set_tbl_cols(20)
        print("InferenceX B200 agentic (measured, median of runs) vs cluster replay, 1 "
              "instance (SYNTHETIC sessions):")
        print(side.with_columns(pl.col(c).round(3) for c in ("gpu", "cpu", "model_gpu",
                                                             "model_cpu")))
        print("\nAgentX (8 -> 16 users per B200 instance), TP4 and TP8 instances, offload "
              "on, 1 and 4 instances:")
        for tp in (4, 8):
            for n, router in ((1, "round-robin"), (4, "round-robin"), (4, "cache-aware")):
                for upi in (8, 16):
                    m = run_cluster(s, ClusterReplayConfig(tiers(tp, upi * n, True),
                                                           instances=n, router=router),
                                    stream=ps, save=False).summary
                    reused = m["device_hit_tokens"] + m["host_hit_tokens"]
                    g = m["device_hit_tokens"] / reused if reused else 0.0
                    print(f"  TP{tp} x{n} {router:11s} {upi:2d} users/instance: GPU "
                          f"{m['gpu_hit_share']:.3f} host {m['host_hit_share']:.3f} of prompt "
                          f"tokens (GPU {g:.3f} of reused); published GPU {AGENTX[upi][0]:.3f} "
                          f"host {AGENTX[upi][1]:.3f}; device pool "
                          f"{m['device_capacity_tokens']:,} tokens/instance")


if __name__ == "__main__":
    main()
