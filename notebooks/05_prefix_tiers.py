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
# # Prefix tiers under concurrency: GPU / host / storage with HiCache semantics
#
# Operators of agentic workloads see prompt reuse move from HBM to host DRAM as concurrency
# rises (published: GPU share 90.3% → 54.8%, host share 6.0% → 40.3% from 8 to 16 users,
# combined above 95%). This notebook replays timelines through a GPU (L1) and host (L2)
# prefix cache with HiCache's rules (prefix usability, locked pages stay, leaf-first
# eviction, write-through demotion, load-back) and prices the runs with the cost models.
#
# Workloads: the **real** Mooncake conversation trace, and a **labelled-synthetic** agentic
# coding workload (`toolkit.synth.agentic`, preset `coding`: shared 12K system prompt,
# tool outputs ~3K per turn, answers ~250 tokens, 10-40 turns, contexts up to 200K).
# Every grid is a **sweep** (`toolkit.sweep`, TOML grid files written next to the store),
# each cell a normal tier replay keyed by its config, so cells shared between sections
# run once. Every number is computed in DuckDB from the run tables; assumptions of the
# service-time model are listed in `toolkit/serving/tier_service.py`. The store stays in
# `build/notebooks/05` for `toolkit sql`.

# %%
import shutil
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit import charts
from toolkit.serving import bundled_points_path, predict, validate
from toolkit.tables import Table

alt.renderers.enable("svg")
pl.Config(tbl_rows=30, tbl_width_chars=140, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
OUT = ROOT / "build" / "notebooks"
shutil.rmtree(OUT / "05", ignore_errors=True)  # a re-run starts from an empty store
shutil.rmtree(OUT / "05_grids", ignore_errors=True)
(OUT / "05_grids").mkdir(parents=True)
ws = toolkit.open(OUT / "05", create=True)


def run_grid(name: str, text: str):
    """Write a grid file (rerun it with `toolkit sweep --store build/notebooks/05 --grid
    build/notebooks/05_grids/NAME.toml`) and sweep it in this process; returns the
    `toolkit.sweep.SweepResult`."""
    path = OUT / "05_grids" / f"{name}.toml"
    path.write_text(text)
    res = ws.sweep(path, workers=1)
    print(f"{name}: {res.cells} cells, {res.ran} ran, {res.skipped} skipped, "
          f"{res.failed} failed")
    return res


ws.ingest(ROOT / "traces/mooncake/conversation_trace.jsonl", "mooncake",
          "mooncake_conversation")
ws.synth_agentic("synthetic_coding", "coding")
Table(ws.sql("""
    SELECT trace, count(*) AS requests, round(avg(input_tokens)) AS mean_isl,
           round(avg(output_tokens)) AS mean_osl,
           round(sum(input_tokens) / sum(output_tokens)) AS isl_over_osl,
           count(DISTINCT session_id) AS sessions
    FROM requests GROUP BY trace ORDER BY trace
"""))

# %% [markdown]
# ## 1. Concurrency sweep on GB200-sized tiers
# Closed loop: each of N users runs one agent session at a time and sends the next turn
# when the previous one finishes plus its think time. GLM-5.2 (FP8 weights and KV, 8 GPUs,
# TP attention): the default device pool is one GPU's HBM after weights, 1.59M tokens;
# host = 2 × device (`--hicache-ratio 2`). A second sweep uses a 600K-token device pool
# (≈32 GB of FP8 KV), the size that puts the crossover between 8 and 16 users.

# %%
run_grid("concurrency", """
kind = "tiers"
trace = "synthetic_coding"
[axes]
device_tokens = ["none", 600000]   # "none": one GPU's HBM after weights (the default)
concurrency = [4, 8, 16, 32]
""")
shares = ws.query("tier_shares").filter(pl.col("hardware") == "gb200")
shares = shares.with_columns(
    pl.format("device {} K tokens", pl.col("device_capacity_tokens") // 1000).alias("label"))
Table(ws.sql("""
    SELECT device_capacity_tokens AS device_tokens, concurrency,
           round(gpu_hit_rate, 3) AS gpu, round(host_hit_rate, 3) AS host,
           round(overall_hit_rate, 3) AS overall, round(p90_ttft_s, 3) AS p90_ttft_s,
           round(p50_tpot_s * 1000, 1) AS p50_tpot_ms
    FROM tier_runs WHERE trace = 'synthetic_coding'
    ORDER BY device_capacity_tokens DESC, concurrency
"""), percent=("gpu", "host", "overall"))

# %%
charts.tier_share_bars(shares, "Synthetic coding agents on GB200 / GLM-5.2: where prompt tokens come from")

# %% [markdown]
# **Reading.** The shape of the published observation appears on both pool sizes: as users
# are added, the sessions' contexts stop fitting in HBM, HiCache evicts the deepest pages
# of idle sessions first, and the next turn finds its prefix's head on the GPU and its tail
# on the host. The overall hit rate does not move (94.5%, set by the workload: the new
# tokens of each turn) because write-through keeps every evicted page on the host. With the
# default 1.59M-token pool the host share appears only at 32 users (GPU 85.6%, host 8.9%);
# with a 600K-token pool the crossover sits between 8 and 16: GPU 94.4% → 52.8%, host
# 0.1% → 41.7% (SGLang semantics; 53.0% / 41.5% page-granular, section 5) against the
# published 90.3% → 54.8% and 6.0% → 40.3%. The parameter that matters is the ratio of concurrent
# session contexts to the device pool (here ~8 sessions × ~60-150K tokens vs 600K), not the
# absolute numbers; the published run's workload and pool sizes are not public. At 32 users
# on the small pool even the host (2 × device) overflows and the overall rate collapses,
# with p90 TTFT near 47 s: the next cliff a larger `--hicache-ratio` would move.

# %%
Table(ws.sql("""
    SELECT concurrency, round(gpu_hit_rate, 3) AS model_gpu, round(host_hit_rate, 3) AS model_host,
           CASE concurrency WHEN 8 THEN 0.903 WHEN 16 THEN 0.548 END AS published_gpu,
           CASE concurrency WHEN 8 THEN 0.060 WHEN 16 THEN 0.403 END AS published_host
    FROM tier_runs
    WHERE trace = 'synthetic_coding' AND device_capacity_tokens = 600000
      AND concurrency IN (8, 16)
    ORDER BY concurrency
"""), percent=("model_gpu", "model_host", "published_gpu", "published_host"))

# %% [markdown]
# ## 2. TTFT per configuration
# Host hits cost a load over NVLink-C2C (overlapped with the prefill); TTFT grows mostly
# from queueing once the device pool is full of locked pages. The 4- and 8-user curves
# nearly coincide (neither queues); dashes tell them apart.

# %%
cdf = ws.query("tier_ttft_cdf").filter(pl.col("device_capacity_tokens") == 600_000)
cdf = cdf.with_columns(pl.format("{} users", pl.col("concurrency")).alias("config"))
users = [f"{c} users" for c in sorted(set(cdf["concurrency"]))]  # numeric legend order
charts.ttft_cdf(cdf, "TTFT CDF, synthetic coding agents, 600K-token device pool").encode(
    color=alt.Color("config:N", scale=alt.Scale(domain=users), title="configuration"),
    strokeDash=alt.StrokeDash("config:N", scale=alt.Scale(domain=users), title="configuration"),
    strokeWidth=alt.value(2.5),
)

# %% [markdown]
# ## 3. $ per million tokens per hardware x concurrency
# The same closed loop on three accelerators with their default pools; $/M uses
# InferenceX's arithmetic on the replay's throughput (input + output tokens per GPU) and
# each spec's hyperscaler price. The GB200 cells are section 1's runs (skipped here).

# %%
hardware_sweep = run_grid("hardware", """
kind = "tiers"
trace = "synthetic_coding"
[axes]
hardware = ["gb200", "gb300", "mi355x"]
concurrency = [4, 8, 16, 32]
""")
surface = ws.sweep_query("sweep_cost_surface", hardware_sweep.sweep_id)
run_ids = surface.filter(pl.col("concurrency") == 16)["run_id"].to_list()
cost = ws.query("tier_cost").filter(pl.col("run_id").is_in(run_ids)).drop("run_id")
Table(cost)

# %%
charts.cost_bars(cost, "Synthetic coding agents, 16 users: $ per million total tokens")

# %% [markdown]
# The whole sweep as a result surface (the `sweep_cost_surface` query of `toolkit.sweep`):
# $ per million total tokens by hardware x concurrency.

# %%
charts.sweep_surface(surface, "concurrency", "hardware", "usd_per_million_total_tokens",
              "Synthetic coding agents: $ per million total tokens by hardware x users",
              "$ / M total tokens", fmt=".3f")

# %% [markdown]
# ## 4. The real Mooncake conversation trace
# With unbounded tiers the overall hit rate is 37.34%: the prefix replay's unbounded 37.36%
# less the partial last pages SGLang never caches (with `radix_semantics="page"` the two are
# equal, a test); with GB200 default pools and the trace's own arrivals reuse is split
# between GPU and host.

# %%
run_grid("mooncake", """
kind = "tiers"
trace = "mooncake_conversation"
[axes]
device_tokens = [-1, "none"]   # unbounded tiers; GB200 default pools
""")
Table(ws.sql("""
    SELECT device_capacity_tokens AS device_tokens, host_capacity_tokens AS host_tokens,
           round(gpu_hit_rate, 4) AS gpu, round(host_hit_rate, 4) AS host,
           round(overall_hit_rate, 4) AS overall, round(p90_ttft_s, 3) AS p90_ttft_s
    FROM tier_runs WHERE trace = 'mooncake_conversation' ORDER BY device_capacity_tokens
"""), percent=("gpu", "host", "overall"))

# %% [markdown]
# ## 5. SGLang's radix cache vs the page-granular ideal
# Every run above uses `--radix-semantics sglang` (the default): SGLang's `RadixCache` node
# for node, page-aligned prompts, whole-leaf LRU eviction that frees at least what is
# needed (often much more), the split-node access stamp, running requests locked; it
# equals SGLang 0.5.23's own code request by request on the Mooncake trace
# (`tests/test_tiers_sglang.py`). `--radix-semantics page` is the ideal the toolkit used
# before: eviction page by page, partial pages cached. The same 600K-token concurrency
# sweep under both shows what the whole-leaf eviction costs.

# %%
run_grid("page_semantics", """
kind = "tiers"
trace = "synthetic_coding"
[fixed]
device_tokens = 600000
radix_semantics = "page"
[axes]
concurrency = [4, 8, 16, 32]
""")
both = ws.sql("""
    SELECT radix_semantics, concurrency, round(gpu_hit_rate, 3) AS gpu,
           round(host_hit_rate, 3) AS host, round(overall_hit_rate, 3) AS overall,
           device_evictions, round(p90_ttft_s, 3) AS p90_ttft_s
    FROM tier_runs
    WHERE trace = 'synthetic_coding' AND hardware = 'gb200' AND device_capacity_tokens = 600000
    ORDER BY concurrency, radix_semantics
""")
Table(both, percent=("gpu", "host", "overall"))

# %%
sem = ws.sql("SELECT run_id, radix_semantics AS label FROM tier_runs")
shares_both = (ws.query("tier_shares")
               .filter((pl.col("trace") == "synthetic_coding") & (pl.col("hardware") == "gb200")
                       & (pl.col("device_capacity_tokens") == 600_000))
               .join(sem, on="run_id"))
charts.tier_share_bars(shares_both, "600K-token device pool: page-granular ideal (left) vs SGLang radix cache (right)")

# %% [markdown]
# **Reading.** Below the crossover the two agree (4 and 8 users: GPU 94.4-94.5% either
# way). At 16 users they differ by a fifth of a point: SGLang's radix tree keeps 52.8% of
# prompt tokens on the GPU against 53.0% page-granular, and evicts 0.1% more pages (2.231M
# against 2.228M). SGLang evicts whole leaves, each an idle session's tail, which is also where
# page-granular LRU evicts first, so the two choose nearly the same pages.
# Write-through catches the rest on the host (41.7% SGLang, 41.5% page-granular), so the
# overall rate (94.5%) and p90 TTFT (0.78 s against 0.74 s) barely move. At 32 users the
# host overflows under both.

# %% [markdown]
# ## 6. Against measured agentic serving: B200, vLLM, DeepSeek-R1 (InferenceX)
# **Measured (real):** SemiAnalysis InferenceX's multi-turn agentic benchmark (Apache-2.0,
# bundled in `toolkit/data/inferencex/`): B200, vLLM, DeepSeek-R1 FP4 at TP4, 1-256
# concurrent users replaying agentic sessions, KV offload to CPU (LMCache) off and on;
# vLLM's GPU and CPU prefix-cache hit rates (hit tokens / prompt tokens), TTFT, TPOT.
# **Modelled:** the tier replay above on the **SYNTHETIC** coding sessions (the benchmark's
# own sessions are not bundled), B200 + DeepSeek-R1 pools: device = one GPU's HBM at vLLM's
# 0.9 memory utilisation after TP4 FP4 weights, in 656-byte FP8 MLA rows x 61 layers; host =
# 2 x device when offload is on (the benchmark's CPU pool size is not published: an
# **assumption**). TTFT comes from the serving model (vLLM aggregated TP4 EP4, fitted on the
# DeepSeek points of notebook 06) with each run's cached and host-loaded prompt shares.

# %%
B200, R1 = ws.hardware("b200"), ws.model("dsr1")
device_tokens = int((B200.hbm_usable_bytes * 0.9 - R1.weight_bytes("fp4") / 4)
                    / (R1.mla_row_bytes("fp8") * R1.num_layers))
measured = (pl.read_csv(bundled_points_path("agentic_b200_multiturn.csv"))
            .filter((pl.col("tp") == 4) & (pl.col("status") == "SUCCESS"))
            .group_by("users", "offload").agg(
                (pl.col("gpu_hit_rate").median() / 100).alias("gpu"),
                (pl.col("cpu_hit_rate").fill_null(0).median() / 100).alias("host"),
                (pl.col("p50_ttft_ms").median() / 1000).alias("p50_ttft_s"),
                (pl.col("p50_tpot_ms").median() / 1000).alias("p50_tpot_s"))
            .sort("offload", "users"))
b200_sweep = run_grid("b200_offload", f"""
kind = "tiers"
trace = "synthetic_coding"
[fixed]
hardware = "b200"
model = "dsr1"
device_tokens = {device_tokens}
[axes]
host_tokens = [0, {2 * device_tokens}]   # CPU offload off / on (host = 2 x device, assumed)
concurrency = [1, 2, 4, 8, 16, 24, 32, 48, 64]
""")
cells = ws.sql("""
    SELECT r.run_id, r.concurrency AS users,
           CASE WHEN r.host_capacity_tokens = 0 THEN 'off' ELSE 'on' END AS offload
    FROM sweeps s JOIN tier_runs r USING (run_id) WHERE s.sweep_id = $sweep_id
    ORDER BY offload, users
""", {"sweep_id": b200_sweep.sweep_id})
runs = pl.DataFrame([{**c, **ws.prefix_columns(c["run_id"])} for c in cells.to_dicts()])
mean_isl, mean_osl = ws.sql(
    "SELECT avg(input_tokens), avg(output_tokens) FROM requests "
    "WHERE trace = 'synthetic_coding'").row(0)
configs = validate(runs.select(
    pl.lit("b200").alias("hardware"), pl.lit("vllm").alias("framework"),
    pl.lit("dsr1").alias("model"), pl.lit("fp4").alias("precision"),
    pl.lit("none").alias("spec_method"), pl.lit(False).alias("disagg"),
    pl.lit(False).alias("is_multinode"), pl.lit(int(mean_isl)).alias("isl"),
    pl.lit(max(int(mean_osl), 2)).alias("osl"), pl.col("users").alias("conc"),
    *[pl.lit(4).alias(c) for c in ("num_prefill_gpu", "num_decode_gpu", "prefill_tp",
                                  "prefill_ep", "decode_tp", "decode_ep")],
    pl.lit(False).alias("prefill_dp_attention"), pl.lit(False).alias("decode_dp_attention"),
    "cached_prefix_fraction", "host_prefix_fraction"))
model = runs.with_columns(
    predict(configs)["pred_median_ttft"].alias("model_p50_ttft_s"),
    predict(configs)["pred_median_tpot"].alias("model_p50_tpot_s"))
print(f"device pool {device_tokens:,} tokens per GPU; synthetic sessions: mean prompt "
      f"{mean_isl:,.0f} tokens, mean answer {mean_osl:,.0f} tokens")
side = measured.join(model, on=["users", "offload"], how="inner").select(
    "offload", "users", pl.col("gpu").alias("measured_gpu"),
    pl.col("gpu_hit_rate").alias("model_gpu"), pl.col("host").alias("measured_host"),
    pl.col("host_hit_rate").alias("model_host"), pl.col("p50_ttft_s").alias("measured_ttft_s"),
    "model_p50_ttft_s", pl.col("p50_tpot_s").alias("measured_tpot_s"), "model_p50_tpot_s")
Table(side, percent=("measured_gpu", "model_gpu", "measured_host", "model_host"))

# %%
long = pl.concat([
    side.select("offload", "users", pl.lit("GPU").alias("tier"), pl.lit("measured")
                .alias("source"), pl.col("measured_gpu").alias("rate")),
    side.select("offload", "users", pl.lit("host").alias("tier"), pl.lit("measured")
                .alias("source"), pl.col("measured_host").alias("rate")),
    side.select("offload", "users", pl.lit("GPU").alias("tier"), pl.lit("model")
                .alias("source"), pl.col("model_gpu").alias("rate")),
    side.select("offload", "users", pl.lit("host").alias("tier"), pl.lit("model")
                .alias("source"), pl.col("model_host").alias("rate")),
])
charts.hit_rate_vs_users(long, "B200 / DeepSeek-R1 agentic sessions: measured (InferenceX) vs model")

# %% [markdown]
# **Where they agree and where they differ.** Both show the same regime change: a GPU hit
# rate near 95% while the sessions' contexts fit in HBM, then a collapse of GPU reuse, and,
# with offload on, the host taking over the reuse for a while. They differ in *where* the
# cliff falls and in TTFT: (a) the measured cliff comes at ~24 users on TP4, the modelled one
# between 32 and 48 users, because the synthetic sessions are not the benchmark's (their context lengths and
# turn counts are not bundled) and vLLM's paged pool, block size and preemption differ from
# SGLang's radix tree; (b) beyond the cliff the measured GPU hit rate falls to ~0 and TTFT to
# minutes (vLLM preempts and recomputes whole sessions; the benchmark queues), while the
# model keeps partial reuse and a bounded queue; (c) below the cliff the measured p50 TTFT
# (~0.7-0.9 s) is mostly per-request overhead the serving model fits (`request_overhead_s`, fitted);
# (d) the measured CPU hit rate drops again past ~48 users when the (unknown) CPU pool
# overflows; the modelled host pool is an assumed 2 x device.

# %% [markdown]
# ## 7. The same comparison with vLLM's own cache semantics
# The measured points are vLLM runs, so here the synthetic sessions replay with
# `engine_semantics="vllm"`: vLLM v1's block pool and prefix cache (16-token blocks, its
# default; the benchmark's block size is not in the bundled data: an **assumption**), and,
# offload on, vLLM's CPU offloading tier with its LRU policy over a host pool of 2 x device
# (the same **assumed** size as above). Both tiers are proven request by request against
# vLLM 0.33's own `KVCacheManager` and `CPUOffloadingManager` (`tests/test_tiers_vllm*.py`);
# what stays modelled is the load: sessions as closed-loop users, transfers completing at
# once, decode blocks reserved at admission, no preemption. Three user counts bracket the
# measured cliff (8, 24, 48).

# %%
vllm_sweep = run_grid("b200_vllm_offload", f"""
kind = "tiers"
trace = "synthetic_coding"
[fixed]
hardware = "b200"
model = "dsr1"
engine_semantics = "vllm"
block_tokens = 16                        # vLLM's default block size (assumed for the benchmark)
device_tokens = {device_tokens}
host_tokens = {2 * device_tokens}        # used only when offload is on (2 x device, assumed)
[axes]
offload_policy = ["none", "lru"]         # CPU offload off / on
concurrency = [8, 24, 48]
""")
vllm_rows = ws.sql("""
    SELECT CASE WHEN json_extract_string(r.config_json, '$.offload_policy') = 'none'
                THEN 'off' ELSE 'on' END AS offload,
           r.concurrency AS users, r.gpu_hit_rate AS vllm_model_gpu,
           r.host_hit_rate AS vllm_model_host
    FROM sweeps s JOIN tier_runs r USING (run_id) WHERE s.sweep_id = $sweep_id
""", {"sweep_id": vllm_sweep.sweep_id})
vside = (measured.join(vllm_rows, on=["users", "offload"], how="inner")
         .join(side.select("offload", "users", pl.col("model_gpu").alias("sglang_model_gpu"),
                           pl.col("model_host").alias("sglang_model_host")),
               on=["offload", "users"], how="left")
         .select("offload", "users", pl.col("gpu").alias("measured_gpu"), "vllm_model_gpu",
                 "sglang_model_gpu", pl.col("host").alias("measured_host"),
                 "vllm_model_host", "sglang_model_host")
         .sort("offload", "users"))
for r in vside.iter_rows(named=True):
    print(f"{r['offload']:>3} {r['users']:>2} users: GPU measured {r['measured_gpu']:.1%} vs "
          f"vLLM model {r['vllm_model_gpu']:.1%} ({r['vllm_model_gpu'] - r['measured_gpu']:+.1%}); "
          f"CPU measured {r['measured_host']:.1%} vs vLLM model {r['vllm_model_host']:.1%} "
          f"({r['vllm_model_host'] - r['measured_host']:+.1%})")
Table(vside, percent=("measured_gpu", "vllm_model_gpu", "sglang_model_gpu", "measured_host",
                     "vllm_model_host", "sglang_model_host"))

# %% [markdown]
# **Reading it.** The engine's rules barely move the modelled rates: vLLM's block pool and
# SGLang's radix tree agree at 8 and 24 users (94.5%) and within 0.5 point at 48 users
# offload off (34.5% vs 34.1%); with offload on, vLLM's CPU tier serves 53.7% of prompt
# tokens at 48 users against SGLang's host tier's 53.5%. What separates model and
# measurement is not the cache rules (vLLM's are proven against its code) but: (a) **the
# workload**: at 8 users the synthetic sessions reuse 94.5% (their ceiling: a shared 12K
# system prompt, whole turns appended) against 89.8-90.7% measured; at 24 users the
# measured GPU rate has already collapsed (6.8% off, 3.6% on) while the synthetic sessions
# still fit the 1.84M-token pool, so the modelled cliff comes later (between 24 and 48
# users), which suggests the benchmark's sessions (not bundled) hold longer contexts per
# user; (b) **the
# CPU pool**: its size is not published (assumed 2 x device here), and the measured CPU
# rate at 24-48 users (77%) is above what a 2 x device tier gives the synthetic sessions at
# 48 (53%): the real pool holds more of its sessions than 2 x device holds of these; (c)
# **the measured CPU tier itself**: section 6 notes the benchmark offloads through
# LMCache, whose chunking and eviction are not vLLM's offloading connector modelled here.

# %%
ws.close()
