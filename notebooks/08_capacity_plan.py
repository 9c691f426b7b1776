# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Capacity plan: HBM, host DRAM, SSD and the accelerator for a recorded workload
#
# `toolkit plan` answers the planner's question for the **real** Mooncake conversation
# trace (prefix reuse) and the **real** SmolLM2-135M selection recording (HiSparse buffer
# misses): which accelerator, layout and concurrency, how much HBM for the prefix cache and
# for HiSparse device buffers, how much host DRAM and SSD per 8-GPU instance, at the lowest
# $ per million total tokens within the interactivity and p90 TTFT targets.
#
# Every figure below comes from the toolkit's exact machinery: hit shares from tier
# replays (run ids in each plan), HiSparse misses from the selection replay, times from the
# serving model (`cost compare`'s front with those shares), prices with kind and source.
# The serving answers are **modelled** (the serving model, fitted on InferenceX points), not
# measured; the last section puts the planner beside measured B200 agentic points. The
# store stays in `build/notebooks/08` for `toolkit sql` and `toolkit plan explain`.

# %%
import json
import shutil
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit.ingest import ingest_file
from toolkit.plan.config import PlanConfig
from toolkit.plan.search import PlanError, plan
from toolkit.serving import bundled_points_path
from toolkit.tables import Table

alt.renderers.enable("svg")
pl.Config(tbl_rows=40, tbl_cols=-1, tbl_width_chars=160, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, fmt_str_lengths=60)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
OUT = ROOT / "build" / "notebooks"
shutil.rmtree(OUT / "08", ignore_errors=True)  # a re-run starts from an empty store
store = toolkit.open_store(OUT / "08", create=True)
ingest_file(store, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl",
            "mooncake_conversation")
ingest_file(store, "bundle", ROOT / "traces/smollm2", "smollm2", select="smollm2-softmax-sum")
HW = ("gb200", "gb300", "mi355x")

# %% [markdown]
# ## 1. The plan: GLM-5.2 at 100 tok/s/user, p90 TTFT <= 10 s
#
# The default search: HiSparse off or a device buffer of 1, 2 or 4 x k per request and
# layer; host DRAM 0 / 256 / 512 / 1024 GB and SSD 0 / 4 / 16 TB per 8-GPU instance; the
# KV pool shared by running requests and the prefix cache, or half of it reserved for the
# prefix cache; LRU prefix eviction. Candidates are pruned by a lower bound on their $/M;
# every printed plan was evaluated exactly, each with its layout's prefix pool, then sized
# for the trace's recorded rate by cluster replays (`instances`, `binding`; notebook 09 and
# `docs/plan.md`). At that load the best plan buys no host DRAM or SSD (`plan explain`
# below prints what each alternative costs).

# %%
best = plan(store, PlanConfig("mooncake_conversation", "glm-5.2", HW, selections="smollm2",
                              interactivity=100.0), progress=False)
print(f"{best.searched} candidates, {best.evaluated_exactly} evaluated exactly, "
      f"{best.feasible} feasible; plan id {best.plan_id}")
show = ("rank", "hardware", "layout", "gpus", "device_prefix_tokens", "hisparse_buffer_tokens",
        "host_dram_gb", "ssd_gb", "gpu_hit_share", "host_hit_share", "storage_hit_share",
        "p90_ttft_s", "tput_per_gpu", "usd_per_mtok_total", "usd_per_mtok_total_low",
        "usd_per_mtok_total_high")
Table(pl.DataFrame(best.plans).select(show))  # formatted as the CLI prints it

# %%
print("\n".join(f"- {a}" for a in best.assumptions))
print("runs of plan 1:", ", ".join(best.plans[0]["run_ids"]))

# %% [markdown]
# `toolkit plan explain` reads the plan back from `plan_runs` and names the binding
# constraint and the next-best alternative along each dimension:

# %%
from toolkit.plan.explain import explain, explain_text  # noqa: E402

print(explain_text(explain(store, best.plan_id)))

# %% [markdown]
# ## 2. Pareto front of $/M vs interactivity per accelerator, with its memory split
#
# One plan per accelerator and target (host DRAM 0 / 1024 GB, SSD 0 / 4 TB; HiSparse, which
# section 1 priced above the plain plans on this trace, left out to keep the notebook
# quick), the best plan of each; a point is on the front when no other point of the same
# accelerator is both faster and cheaper.

# %%
TARGETS = (50.0, 100.0, 150.0)
SPACE = dict(host_dram_gb=(0.0, 1024.0), ssd_gb=(0.0, 4096.0), top=1)
front_rows = []
front_plans = {}  # (hardware, target) -> plan, reused by the next section
for hw in HW:
    for t in TARGETS:
        try:
            p = plan(store, PlanConfig("mooncake_conversation", "glm-5.2", (hw,),
                                       interactivity=t, **SPACE),
                     progress=False, save=False).plans[0]
            front_plans[(hw, t)] = p
        except PlanError as e:
            print(f"{hw} at {t:g} tok/s/user: {e}")
            continue
        front_rows.append({**{k: p[k] for k in show if k != "rank"},
                           "interactivity": t, "usd_gpu": p["usd_breakdown"]["gpu"],
                           "usd_dram": p["usd_breakdown"]["dram"],
                           "usd_ssd": p["usd_breakdown"]["ssd"]})
front = pl.DataFrame(front_rows)
front = front.with_columns(pl.Series("on_front", [
    not any(o["hardware"] == r["hardware"] and o["interactivity"] >= r["interactivity"]
            and o["usd_per_mtok_total"] < r["usd_per_mtok_total"] for o in front_rows)
    for r in front_rows]))
Table(front.select("hardware", "interactivity", "layout", "hisparse_buffer_tokens",
                   "host_dram_gb", "ssd_gb", "gpu_hit_share", "host_hit_share",
                   "storage_hit_share", "usd_per_mtok_total", "usd_gpu", "usd_dram", "usd_ssd",
                   "on_front"))

# %%
alt.Chart(alt.Data(values=front.drop("layout").to_dicts())).mark_line(point=True).encode(
    x=alt.X("interactivity:Q", title="target interactivity (tok/s/user)"),
    y=alt.Y("usd_per_mtok_total:Q", title="$ per million total tokens"),
    color=alt.Color("hardware:N"),
    tooltip=["hardware:N", "host_dram_gb:Q", "ssd_gb:Q", "hisparse_buffer_tokens:Q",
             "usd_per_mtok_total:Q"],
).properties(title="Planned $/M vs interactivity per accelerator (Mooncake conversation, "
             "GLM-5.2; modelled)", width=520, height=300)

# %% [markdown]
# ## 3. What forbidding host DRAM or SSD costs
#
# The same search at 100 tok/s/user with the SSD tier forbidden, then with both host tiers
# forbidden; the ratio is to the best with every tier allowed.

# %%
forbid = []
for hw in HW:
    base = None
    for label, dram, ssd in (("all tiers", (0.0, 1024.0), (0.0, 4096.0)),
                             ("no SSD", (0.0, 1024.0), (0.0,)),
                             ("no host DRAM, no SSD", (0.0,), (0.0,))):
        try:  # "all tiers" is the front's own plan at 100 tok/s/user (same search)
            p = front_plans.get((hw, 100.0)) if label == "all tiers" else None
            p = p or plan(store, PlanConfig("mooncake_conversation", "glm-5.2", (hw,),
                                            interactivity=100.0,
                                            **{**SPACE, "host_dram_gb": dram, "ssd_gb": ssd}),
                          progress=False, save=False).plans[0]
        except PlanError as e:
            print(f"{hw} {label}: {e}")
            continue
        base = base or p["usd_per_mtok_total"]
        forbid.append({"hardware": hw, "allowed": label, "host_dram_gb": p["host_dram_gb"],
                       "ssd_gb": p["ssd_gb"], "hit_share_total": p["gpu_hit_share"]
                       + p["host_hit_share"] + p["storage_hit_share"],
                       "usd_per_mtok_total": p["usd_per_mtok_total"],
                       "ratio_to_all_tiers": p["usd_per_mtok_total"] / base})
forbid = pl.DataFrame(forbid)
for hw in HW:
    one = forbid.filter(pl.col("hardware") == hw)
    r = dict(zip(one["allowed"], one["ratio_to_all_tiers"], strict=True))
    print(f"{hw}: forbidding SSD costs {r.get('no SSD', float('nan')) - 1:+.1%}, forbidding "
          f"host DRAM and SSD {r.get('no host DRAM, no SSD', float('nan')) - 1:+.1%}")
Table(forbid)

# %% [markdown]
# ## 4. B200 with and without KV offload, beside the measured B200 agentic points
#
# **Measured** (InferenceX multi-turn experiment, `agentic_b200_multiturn.csv`): B200, vLLM,
# DeepSeek-R1 FP4, TP8, users replaying agentic sessions, LMCache CPU offload off / on;
# vLLM's GPU and CPU prefix hit rates (percent of prompt tokens) and p90 TTFT.
#
# **Planned**: the planner on the Mooncake conversation trace for B200 + vLLM + DeepSeek-R1
# FP4 (no MTP, as measured), host DRAM 0 GB (offload off) or 1024 GB per 8 GPUs (offload
# on; the benchmark's CPU pool size is not published: an **assumption**), at targets that
# land on the measured user counts. The planner's users per 8-GPU instance are the
# concurrency of its front point.

# %%
b200 = []
for offload, dram in (("off", (0.0,)), ("on", (1024.0,))):
    for t in (20.0, 40.0, 60.0, 100.0):
        try:
            r = plan(store, PlanConfig("mooncake_conversation", "dsr1", ("b200",),
                                       interactivity=t, precision="fp4", mtp="off",
                                       engines={"b200": "vllm"}, host_dram_gb=dram,
                                       ssd_gb=(0.0,), top=1), progress=False, save=False)
        except PlanError as e:
            print(f"offload {offload} at {t:g}: {e}")
            continue
        p = r.plans[0]
        b200.append({"offload": offload, "target": t, "users": p["users_per_instance"],
                     "layout": p["layout"], "plan_gpu": p["front_gpu_hit_share"],
                     "plan_host": p["front_host_hit_share"],
                     "plan_p90_ttft_s": p["front_p90_ttft_s"],
                     "replay_p90_ttft_s": p["replay_p90_ttft_s"]})
planned = pl.DataFrame(b200)
measured = (pl.read_csv(bundled_points_path("agentic_b200_multiturn.csv"))
            .filter((pl.col("tp") == 8) & (pl.col("status") == "SUCCESS"))
            .group_by("users", "offload").agg(
                (pl.col("gpu_hit_rate").median() / 100).alias("measured_gpu"),
                (pl.col("cpu_hit_rate").fill_null(0).median() / 100).alias("measured_host"),
                (pl.col("p90_ttft_ms").median() / 1000).alias("measured_p90_ttft_s")))
side = planned.join(measured, on=["users", "offload"], how="left").sort("offload", "users")
Table(side)

# %%
print(json.dumps({"measured_users": sorted(measured["users"].unique().to_list()),
                  "planned_users": sorted(planned["users"].unique().to_list())}))

# %% [markdown]
# **Where they differ, and why.**
#
# * **GPU hit share.** Measured (TP8), the agentic sessions hit about 90% on the GPU at 4
#   users, 55-63% at 16, 24-39% at 32 and almost nothing at 64, as the sessions' growing
#   contexts outgrow HBM. The planner's GPU share on the Mooncake conversation trace stays
#   near 14% from 4 to 64 users: the workloads differ. An agentic session resends its whole,
#   growing context every turn (almost every prompt token is a prefix of the previous
#   prompt), so its reuse is near-total until HBM runs out; the conversation trace's reuse is
#   spread over sessions far apart in time (an unbounded cache reaches only about 37%), so
#   the device pool is too small for it at any user count and its share barely moves.
# * **Host share with offload on.** The planner's 1 TB host tier adds about 22% of prompt
#   tokens at every user count: the long-distance reuse the device pool evicted. The
#   measured TP8 rows report a CPU hit rate of 0 with offload on at every user count (the
#   TP4 rows show the CPU tier taking 70-83% at 24-48 users), so there the measurement and
#   the planner disagree in kind; the benchmark's CPU pool size and the reason its TP8
#   CPU hits are zero are not published, so this comparison cannot settle it.
# * **TTFT.** The measured p90 TTFT reaches minutes from 16 users with offload off (and from
#   32 with it on): the benchmark offered more load than the deployment served and queued
#   it. The planner never plans such a point: its concurrency is the front point that meets
#   the interactivity target within the p90 TTFT bound (10 s), and its TTFT is the serving
#   model's at that point, at the trace's mean prompt. The tier replay's own p90 TTFT
#   (`replay_p90_ttft_s`: one instance, closed loop, the trace's real prompt-length mix)
#   differs from it (0.6-2.2 s against 0.35-3.1 s here): long prompts queue behind each
#   other there, where the plan's figure is at the trace's mean prompt and carries the
#   calibrated p90 centring (measured p90 over the model's, per engine: notebook 06).
# * **Same direction.** Both say KV offload lowers TTFT at a given user count: measured p90
#   at 4 users 6.5 s -> 1.3 s, at 16 users 1,184 s -> 51 s; planned 0.40 s -> 0.35 s at 4
#   users (more prompt tokens skip prefill and load over the host link instead).

# %% [markdown]
# The plans, candidates and the replays they used are in the store:
# `toolkit sql --store build/notebooks/08 --query capacity_plans`, and
# `toolkit plan explain --store build/notebooks/08 --plan <plan id>`.
