"""AgentX p90 TTFT, GB200 Dynamo-SGLang (disaggregated) vs MI355X ATOM (aggregated), through
the cluster replay with the serving model's times: nothing fitted, every assumption printed.

Published (quoted, not rows): p90 TTFT 14-19 s on GB200 with Dynamo-SGLang vs ~1.2 s on
MI355X with ATOM, at 150 tok/s/user, GLM-5.x on InferenceX's AgentX agentic-coding replay.
Which concurrency point and layout each figure comes from is not published beside it.

Setups replayed (InferenceX ``configs/*-master.yaml`` and the recipes they name, snapshot
843c6254, 2026-08-21; GLM-5.2 NVFP4 on GB200, MXFP4 on MI355X, both with MTP):

* GB200 ``glm5.2-fp4-gb200-dynamo-sglang-agentic-mtp``: prefill DEP8 (TP8, DP attention
  8, EP8) with HiCache host tier (``hicache-size 135`` GB per rank), decode TP4 workers
  (1P4D at 48 users, 1P6D at 45) or DEP16 (2P1D at 128 users), Dynamo KV router,
  ``max-running-requests`` 16 per decode worker (144 on DEP16).
* MI355X ``glm5.2-fp4-mi355x-atom-agentic-mtp``: one aggregated TP4 instance, 2-10 users,
  LMCache CPU offload (``LMCACHE_MAX_LOCAL_CPU_SIZE`` 200 GiB per rank), ``max-num-seqs``
  2 x users; or TP8 without offload, 1-4 users.

Modelled: the SYNTHETIC coding-agent sessions (``toolkit.synth.agentic`` preset ``coding``:
prompts up to 200K tokens; AgentX replays real Claude-Code sessions up to 1M tokens, not
bundled), closed loop (users = AgentX concurrency), each instance's device pool its real
HBM after FP4 weights at the recipe's memory fraction, the host tier sized as the recipe,
every time from the serving model (``cost.from_replay.run_cluster``).

Run: ``.venv/bin/python benchmarks/cluster_agentx_ttft.py`` (about a minute).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

import toolkit
from toolkit.cost.from_replay import run_cluster
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.replay.tiers import ClusterReplayConfig, ServiceAssumptions, TierReplayConfig
from toolkit.replay.tiers.cluster import stream_for
from toolkit.replay.tiers.config import DecodePool
from toolkit.serving.tier_service import TierServiceModel, kv_bytes_per_token

GIB = 1 << 30
MODEL = "glm-5.2"
PUBLISHED = {"gb200": "14-19 s", "mi355x": "~1.2 s"}  # p90 TTFT at 150 tok/s/user


@dataclass(frozen=True)
class Setup:
    """One published AgentX point as the cluster replay runs it."""

    name: str
    hardware: str
    users: int
    cfg: ClusterReplayConfig
    note: str


def host_tokens(host_bytes: float) -> int:
    """A host tier of ``host_bytes`` as KV tokens (MLA rows + indexer keys, FP8). Under
    tensor parallelism every rank holds every token's MLA row, so one rank's host budget
    is the cache's (an ASSUMPTION for LMCache, which then stores one copy)."""
    return int(host_bytes // kv_bytes_per_token(get_model(MODEL), "fp8"))


def gb200(users: int, decode: DecodePool, instances: int, label: str) -> Setup:
    # prefill side: DEP8, mem-fraction-static 0.8, HiCache 135 GB per DP rank (its own cache)
    a = ServiceAssumptions(gpus_per_replica=8, weight_precision="fp4", mem_fraction=0.8,
                           engine="dynamo-sglang", dp_attention=True, expert_parallel=True,
                           mtp=True)
    t = TierReplayConfig("coding", hardware="gb200", model=MODEL, concurrency=users,
                         engine_semantics="sglang", host_tokens=host_tokens(135e9),
                         write_policy="write_back", max_running=2, assumptions=a)
    # the recipe's frontend: --router-mode kv with --router-session-affinity-ttl-secs 3600
    cfg = ClusterReplayConfig(t, instances=instances, router="kv-router", ranks=8,
                              decode=decode, session_affinity_ttl_s=3600.0)
    return Setup(label, "gb200", users, cfg, "Dynamo-SGLang, KV router over 8 DP ranks "
                 "per prefill worker, session affinity 3600 s")


def mi355x(users: int, tp: int, offload: bool) -> Setup:
    a = ServiceAssumptions(gpus_per_replica=tp, weight_precision="fp4", mem_fraction=0.9,
                           engine="atom", mtp=True)
    t = TierReplayConfig("coding", hardware="mi355x", model=MODEL, concurrency=users,
                         engine_semantics="vllm", offload_policy="lru" if offload else "none",
                         host_tokens=host_tokens(200 * GIB) if offload else None,
                         max_running=2 * users, assumptions=a)
    return Setup(f"ATOM TP{tp}{' + CPU offload' if offload else ''} c{users}", "mi355x",
                 users, ClusterReplayConfig(t), "aggregated, one instance")


def setups() -> list[Setup]:
    out = []
    # 1P4D / 1P6D: one DEP8 prefill worker, 4 or 6 TP4 decode workers (16 slots each). The
    # replay pairs one decode pool with each prefill side, so the TP4 workers are one pool
    # of their GPUs timed as DP attention (each worker's batch on its own GPUs) with their
    # summed slots and KV: an ASSUMPTION (a TP4 worker reads every KV row on each GPU; DP
    # attention a quarter of them), printed with the figures.
    for workers, users in ((4, 48), (6, 45)):
        dec = DecodePool(gpus=4 * workers, dp_attention=True, expert_parallel=False, mtp=True,
                         max_running=16 * workers)
        out.append(gb200(users, dec, 1, f"Dynamo-SGLang 1P{workers}D DEP8/{workers}xTP4 "
                                       f"c{users}"))
    # 2P1D: two DEP8 prefill workers and one DEP16 decode worker (144 slots): two prefill
    # sides with a DEP8 decode pool each (72 slots), requests to the least-loaded pool
    dec = DecodePool(gpus=8, dp_attention=True, expert_parallel=True, mtp=True, max_running=72)
    out.append(gb200(128, dec, 2, "Dynamo-SGLang 2P1D 2xDEP8/DEP16 c128"))
    for users in (2, 4, 8, 10):
        out.append(mi355x(users, 4, True))
    for users in (1, 2, 4):
        out.append(mi355x(users, 8, False))
    return out


def breakdown(req: pl.DataFrame, st: Setup, makespan_s: float) -> dict[str, float]:
    """Where the TTFT goes, mean seconds per request: the prefix cache's admission queue
    (arrival to admission), the wait for the instance's prefill lane, the prefill compute
    (the replay's own formula ``n c_tok + n c_ctx (cached + prompt) / 2`` with the serving
    model's coefficients; host loads are ~0 here), and for a disaggregated deployment the
    wait for a decode slot plus the KV transfer (first token - prefill end). Also the prefill
    lanes' utilisation (compute / makespan / lanes)."""
    t = st.cfg.tiers
    prompt = req["prompt_tokens"].to_numpy().astype(np.float64)
    n = req["computed_tokens"].to_numpy().astype(np.float64)
    svc = TierServiceModel(get_hardware(t.hardware), get_model(t.model), t.assumptions).times(
        int(prompt.mean()), min(t.concurrency or 1, prompt.size))
    compute = n * svc.prefill_s_per_token + n * svc.prefill_s_per_token_context * (
        2 * prompt - n) / 2
    phase = (req["prefill_end_s"] - req["admit_s"]).to_numpy()
    ttft = req["ttft_s"].to_numpy()
    tail = ttft >= np.quantile(ttft, 0.9)
    return {"queue_s": float(req["queue_wait_s"].mean()),
            "lane_wait_s": float((phase - compute).mean()), "compute_s": float(compute.mean()),
            "after_prefill_s": float((req["first_token_s"] - req["prefill_end_s"]).mean()),
            "lane_util": float(compute.sum() / makespan_s / st.cfg.instances),
            "tail_wait_share": float(((ttft - compute) / ttft)[tail].mean())}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="cluster_agentx_")) / "store"
    pl.Config.set_tbl_rows(40)
    pl.Config.set_tbl_cols(30)
    pl.Config.set_tbl_width_chars(250)
    with toolkit.open(root, create=True) as ws:
        ws.synth_agentic("coding", "coding")
        s = ws.store
        reqs = s.read("requests", "coding")
        print(f"SYNTHETIC coding sessions: {reqs.num_rows:,} requests, mean prompt "
              f"{np.mean(reqs['input_tokens'].to_numpy()):,.0f} tokens, mean output "
              f"{np.mean(reqs['output_tokens'].to_numpy()):,.0f}")
        rows = []
        streams: dict[str, object] = {}
        for st in setups():
            key = st.cfg.tiers.engine_semantics
            if key not in streams:
                streams[key] = stream_for(s, st.cfg)
            r = run_cluster(s, st.cfg, stream=streams[key], save=False)
            m = r.summary
            req = pl.from_arrow(r.requests)
            b = breakdown(req, st, m["makespan_s"])
            dwait = m["mean_decode_wait_s"]
            rows.append({
                "setup": st.name, "gpus": m["gpus"], "users": st.users,
                "tok_s_user": 1.0 / m["median_tpot_s"], "p50_ttft_s": m["p50_ttft_s"],
                "p90_ttft_s": m["p90_ttft_s"], "queue_s": b["queue_s"],
                "lane_wait_s": b["lane_wait_s"], "compute_s": b["compute_s"],
                "decode_wait_s": dwait,
                "transfer_s": None if dwait is None else b["after_prefill_s"] - dwait,
                "lane_util": b["lane_util"], "tail_wait_share": b["tail_wait_share"],
                "gpu_hit": m["gpu_hit_share"], "host_hit": m["host_hit_share"],
                "tput_per_gpu": m["tput_per_gpu"],
                "device_tokens": m["device_capacity_tokens"],
                "host_tokens": m["host_capacity_tokens"],
                "published_p90": PUBLISHED[st.hardware]})
            print(f"  {st.name}: {st.note}", flush=True)
        df = pl.DataFrame(rows)
        print("\nCluster replay, GLM-5.2 FP4 + MTP, SYNTHETIC coding sessions, closed loop "
              "(published p90 TTFT at 150 tok/s/user: GB200 Dynamo-SGLang 14-19 s, MI355X "
              "ATOM ~1.2 s; nothing fitted):")
        print(df.with_columns(pl.col(pl.Float64).round(3)))
        # the router decides how much the prefill lanes recompute and how evenly the DP
        # ranks share them: Dynamo's KV router alone moves a turn off its DP rank when that
        # rank's queued prompt blocks outweigh the overlap; the recipe's session affinity
        # keeps it there
        first = setups()[0]
        print(f"\n{first.name}, by router (prefill tokens computed per request and the "
              "busiest rank drive the lanes' queues):")
        for router, ttl in (("kv-router", 3600.0), ("kv-router", 0.0), ("cache-aware", 0.0),
                            ("round-robin", 0.0), ("round-robin", 3600.0)):
            r = run_cluster(s, replace(first.cfg, router=router, session_affinity_ttl_s=ttl),
                            stream=streams["sglang"], save=False)
            m = r.summary
            q = pl.from_arrow(r.requests).sort("session_id", "turn").with_columns(
                pl.col("rank").shift(1).over("session_id").alias("prev"))
            q = q.filter(pl.col("prev").is_not_null())
            moved = float((q["rank"] != q["prev"]).mean())
            busiest = pl.from_arrow(r.requests)["rank"].value_counts()["count"].max()
            name = router + (" + affinity" if ttl else "")
            print(f"  {name:22s} p90 TTFT {m['p90_ttft_s']:6.2f} s, GPU hit "
                  f"{m['gpu_hit_share']:.3f}, host {m['host_hit_share']:.3f}, computed "
                  f"{m['computed_tokens'] / m['requests']:,.0f} tokens/request, "
                  f"{moved:.1%} of later turns on another DP rank than the previous turn, "
                  f"busiest rank {busiest:,} of {m['requests']:,} requests")
        # the four TP4 decode workers as one pool: timed with DP attention (as above), as
        # TP16, or as DEP16; the TTFT barely moves (the decode pool always has a slot)
        print(f"\n{first.name}, by how the decode workers are timed:")
        for dpa, ep, label in ((True, False, "DP attention, TP MoE"), (False, False, "TP16"),
                               (True, True, "DEP16")):
            dec = replace(first.cfg.decode, dp_attention=dpa, expert_parallel=ep)
            m = run_cluster(s, replace(first.cfg, decode=dec), stream=streams["sglang"],
                            save=False).summary
            print(f"  {label:20s} p90 TTFT {m['p90_ttft_s']:5.2f} s, "
                  f"{1 / m['median_tpot_s']:5.1f} tok/s/user")
        print("\nAssumptions: device pool = HBM after FP4 weights x mem fraction (0.8 GB200 "
              "prefill, the recipe; 0.9 MI355X, vLLM's default), per DP rank on GB200; host "
              "tier 135 GB per DP rank (GB200 HiCache) / 200 GiB per TP rank (MI355X LMCache, "
              "as vLLM's CPU offload tier, LRU); GB200 prefill max-running 16 per worker = 2 "
              "per DP rank; the 1P4D/1P6D TP4 decode workers timed as one DP-attention pool "
              "of their GPUs; 2P1D's DEP16 as two DEP8 pools; Dynamo's session affinity as "
              "the recipe's 3600 s TTL; a DP rank prefills its own requests at 1/8 of the "
              "instance's speed (an imbalance between ranks is charged in full); output "
              "tokens not cached; prompts from the "
              "SYNTHETIC coding preset (<= 200K tokens), not AgentX's 1M-token corpus.")


if __name__ == "__main__":
    main()
