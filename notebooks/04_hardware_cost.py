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
# # What a million GLM-5.2 tokens cost on GB200, GB300 and MI355X
#
# Inputs and their status:
# * **Serving model: computed** (`toolkit/serving/`) from sourced hardware specs (HBM
#   bandwidth and capacity, FP4/FP8 peaks, scale-up domain and bandwidth, scale-out NIC;
#   `toolkit hardware show NAME`) and GLM-5.2's sourced geometry (78 layers, DSA top-2048,
#   21 indexer layers, MoE 256 x 8), with efficiency terms **fitted** on 300 measured
#   DeepSeek-R1 points from SemiAnalysis InferenceX (`toolkit serving fit`; held-out errors
#   in notebook 06). GLM-5.2 itself has no measured points here: every number below is a
#   **prediction** for a model the fit never saw.
# * **Prices: sourced** InferenceX survey values (July 2026, hyperscaler tier unless stated).
# * **Selections: real** (the bundled SmolLM2 recording) for the HiSparse section, scaled to
#   k = 2048 by the measured selection-scaling fit (an **extrapolation** from a 135M dense
#   model's selections beyond its measured k range, with its band; notebook 02).
# * **Published figures** (a public analysis of GLM-5.3 serving) are shown next to
#   the model's answers, never used to fit it.

# %%
import shutil
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit import charts
from toolkit.serving import predict, validate
from toolkit.tables import Table

alt.renderers.enable("svg")
pl.Config(tbl_rows=60, tbl_width_chars=140, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, float_precision=4, fmt_str_lengths=60)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
STORE_DIR = ROOT / "build" / "notebooks" / "04"
shutil.rmtree(STORE_DIR, ignore_errors=True)  # each run starts from an empty store
ws = toolkit.open(STORE_DIR, create=True)  # sections 1-3 price without it; 4-5 replay
HARDWARE = ("gb200", "gb300", "mi355x")
GLM = ws.model("glm-5.2")
COLS = ["hardware", "engine", "interactivity", "source", "basis", "reachable", "edge",
        "tput_per_gpu", "tput_per_gpu_low", "tput_per_gpu_high", "p90_ttft_s",
        "p90_ttft_s_low", "p90_ttft_s_high", "gpus",
        "usd_per_mtok_total", "usd_per_mtok_total_low", "usd_per_mtok_total_high",
        "cost_ratio_total_vs_first", "layout"]

# %% [markdown]
# ## 1. The seed questions at an InferenceX shape (8K in / 1K out, FP8)
# `toolkit cost compare --model glm-5.2 --hardware gb200,gb300,mi355x --interactivity
# 100,150 --json`: per accelerator, the Pareto front of throughput per GPU vs interactivity
# (measured points where they cover the question; GLM-5.2 has none, so the serving model's
# sweep of layouts x concurrency), only points with p90 TTFT <= 10 s (the default), Steffen
# interpolation at the targets, the price. `source` says where an answer comes from, `basis`
# whether the fit saw that (hardware, engine) pair (`fitted-pair`) or rests on shared terms;
# `*_low`/`*_high` are calibrated 80% central bands (held-out coverage 75-88%: notebook 06);
# the p90 TTFT bound applies to the upper end of the p90 TTFT band (`--ttft-confidence 0.8`);
# a target beyond
# a front's end is `reachable = false` and gets no price; `edge` flags the last 15% of a front.

# %%
shape = ws.compare("glm-5.2", HARDWARE)
Table(shape.select(COLS))

# %% [markdown]
# Read the `p90_ttft_s` column before the prices: without a TTFT bound the point on the
# throughput front that meets an interactivity target may queue prompts for minutes, and is
# cheap only because its users wait. `cost compare` therefore keeps only points with p90
# TTFT <= 10 s unless told otherwise (`--max-p90-ttft-s none` lifts it; section 3 prints the
# p90 TTFT of GB200's unbounded front at 150 tok/s/user beside the published 14-19 s). The next
# table tightens the bound to 2 s. The bound holds on the upper end of each point's p90 TTFT
# band (`--ttft-confidence 0.8`; those bands are ~4x wide, and p90 TTFT's held-out error is
# 33-37%: notebook 06), so a front keeps only the points whose upper end is under 2 s, at
# lower concurrency and throughput per GPU than under 10 s; where no point's upper end is
# under the bound, a row is `reachable = false`: the toolkit says it cannot promise the
# bound rather than price an optimistic point (`--ttft-confidence 0.5` asks for less).

# %%
shape_2s = ws.compare("glm-5.2", HARDWARE, max_p90_ttft_s=2.0)
Table(shape_2s.select(COLS))

# %% [markdown]
# The same question for a model with measured points: DeepSeek-R1 FP8 on MI355X, p90 TTFT
# <= 2 s. The bundled InferenceX rows (ATOM, 8K/1K) reach 100 tok/s/user; the answer is
# `measured` where 3+ of them bracket the target within 25% interactivity, else `blended`
# (the best of them and the model's points, each corrected by its nearest measured runs), or
# measured with a note when the model meets the bound nowhere; the row says which.

# %%
dsr1 = ws.compare("dsr1", ("mi355x",), interactivity=(100.0,), max_p90_ttft_s=2.0)
Table(dsr1.select("hardware", "engine", "source", "tput_per_gpu", "tput_per_gpu_low",
            "tput_per_gpu_high", "model_tput_per_gpu", "p90_ttft_s", "usd_per_mtok_total",
            "model_usd_per_mtok_total", "layout"))

# %% [markdown]
# ### Cost vs interactivity with its band
# Each accelerator's $/M total tokens at targets along its front (the same `cost compare`
# answers), the shaded band its calibrated 80% band.

# %%
targets = tuple(float(x) for x in range(20, 181, 10))
curve = ws.compare("glm-5.2", HARDWARE, interactivity=targets)
charts.cost_band(curve, title="GLM-5.2, 8K in / 1K out, p90 TTFT <= 10 s: $/M total tokens "
                 "(modelled, calibrated 80% band)")

# %% [markdown]
# ## 2. Agentic traffic: long prompts served mostly from a prefix cache
# The published figures come from agentic traffic: their output/total cost ratio (5.92 / 0.044
# = 134) means ~134 prompt tokens per output token, most of them prefix-cache hits. Here:
# 64K-token prompts, 512 output tokens, 95% of prompt tokens cached (**assumed** workload;
# the real mix is not published).

# %%
agentic = ws.compare("glm-5.2", HARDWARE, isl=65536, osl=512, cached_prefix_fraction=0.95,
                     max_p90_ttft_s=2.0)
Table(agentic.select(COLS))

# %% [markdown]
# ## 3. Next to the published figures
# Each published figure, the model's answer for the agentic workload above (p90 TTFT <= 2 s
# unless stated), the difference, and why they differ.

# %%
def pick(df, hw, target):
    return df.filter((pl.col("hardware") == hw) & (pl.col("interactivity") == target)).row(
        0, named=True)


def div(a, b):
    """A ratio, or None where either side is unreachable (no price)."""
    return None if a is None or b is None else a / b


relaxed = ws.compare("glm-5.2", HARDWARE, isl=65536, osl=512, cached_prefix_fraction=0.95,
                     max_p90_ttft_s=10.0)
g150, g300_150 = pick(agentic, "gb200", 150), pick(agentic, "gb300", 150)
m150, m100 = pick(agentic, "mi355x", 150), pick(agentic, "mi355x", 100)
g100 = pick(agentic, "gb200", 100)
rows = [
    ("GB200 Dynamo-SGLang $/M total at 150 tok/s/user", 0.044, g150["usd_per_mtok_total"]),
    ("GB200 $/M output at 150", 5.92, g150["usd_per_mtok_output"]),
    ("MI355X (ATOM) / GB200 cost at 150", 1 / 0.88, div(m150["usd_per_mtok_total"],
                                                         g150["usd_per_mtok_total"])),
    ("GB300 / GB200 throughput per GPU at 150", 1.175, div(g300_150["tput_per_gpu"],
                                                            g150["tput_per_gpu"])),
    ("GB300 Dynamo-TRT $/M total, p90 TTFT <= 10 s", 0.0451,
     pick(relaxed, "gb300", 150)["usd_per_mtok_total"]),
    ("MI355X / GB200 cost at 100 tok/s/user", 0.87, div(m100["usd_per_mtok_total"],
                                                         g100["usd_per_mtok_total"])),
    ("MI355X $/M total at 100, p90 TTFT <= 2 s", 0.0607, m100["usd_per_mtok_total"]),
]
free = ws.compare("glm-5.2", HARDWARE, isl=65536, osl=512, cached_prefix_fraction=0.95,
                  max_p90_ttft_s=None)  # no TTFT bound, as published
rows += [
    ("GB200 p90 TTFT at 150, s (published 14-19)", 16.5, pick(free, "gb200", 150)["p90_ttft_s"]),
    ("MI355X + ATOM p90 TTFT at 150, s", 1.2, pick(free, "mi355x", 150)["p90_ttft_s"]),
]
reach = {hw: pick(agentic, hw, 150)["front_max_interactivity"] for hw in HARDWARE}
print("fastest modelled interactivity (tok/s/user) per front:",
      {hw: None if v is None else round(v, 1) for hw, v in reach.items()})
Table(pl.DataFrame(rows, schema={"figure": pl.String, "published": pl.Float64,
                                 "model": pl.Float64}, orient="row").with_columns(
    (pl.col("model") / pl.col("published") - 1).alias("difference")), percent=("difference",))

# %% [markdown]
# **Why they differ.** First, where a front stops short of a target (`reachable = false`;
# the printed fastest interactivity per front) the model says that accelerator + engine
# cannot serve GLM-5.2 at that speed with the swept layouts within the TTFT bound, and gives
# no price. (a) The workload: the published analysis replays real agentic sessions whose
# prompt lengths, cache hit rates and output lengths are not public; ours is an assumed
# 64K/512 mix at 95% reuse, and cost per *total* token moves almost 1:1 with the share of
# cached prompt tokens. (b) The efficiencies were fitted on DeepSeek-R1 (dense MLA, 61
# layers) and are applied to GLM-5.2 (DSA, 78 layers); no GLM-5.x point constrains them.
# (c) GB300 has no measured point in the bundled data: its prediction rests on its specs
# and on shared terms (`basis = shared-terms`). (d) The engines differ: the published
# pairing is GB200 + Dynamo-SGLang, GB300 + Dynamo-TRT-LLM, MI355X + ATOM, and part of every
# published ratio is software (section 3b). None of the published figures was used as a fit
# target, so none counts as reproduced; the differences above are the model's honest
# distance.

# %% [markdown]
# ## 3b. Engines side by side: hardware ratios at matched engines
# `toolkit cost compare --all-engines` answers for every engine that runs on each
# accelerator (measured, fitted pair or shared terms). A ratio between two accelerators under
# the **same** engine isolates the hardware; the spec table says where it should come from:
# GB300 has GB200's HBM bandwidth (8 TB/s) with 1.5x the capacity and 1.5x the FP4 peak, so
# at a fixed engine it can only win where batch (capacity) or FP4 compute binds; MI355X has
# 8 TB/s, 288 GB and its own scale-up domain of 8 GPUs (vs a 72-GPU NVL72 rack).

# %%
specs = pl.DataFrame([{"hardware": h, "hbm_tb_per_s": ws.hardware(h).hbm_bandwidth_bytes_per_s
                       / 1e12, "hbm_gb": ws.hardware(h).hbm_bytes / 1e9,
                       "fp8_pflops": ws.hardware(h).dense_fp8_tflops / 1e3,
                       "fp4_pflops": (ws.hardware(h).dense_fp4_tflops or 0) / 1e3,
                       "scaleup_domain_gpus": ws.hardware(h).scaleup_domain_gpus,
                       "usd_per_gpu_hour": ws.hardware(h).price_usd_per_gpu_hour("hyperscaler")}
                      for h in HARDWARE])
Table(specs)

# %%
every = ws.compare("glm-5.2", HARDWARE, isl=65536, osl=512, cached_prefix_fraction=0.95,
                   max_p90_ttft_s=10.0, interactivity=(100.0, 150.0), all_engines=True)
wide = every.filter(pl.col("reachable")).pivot(
    on="hardware", index=["engine", "interactivity"], values="tput_per_gpu")
matched = wide.drop_nulls(["gb200", "gb300"]).with_columns(
    (pl.col("gb300") / pl.col("gb200")).alias("gb300_over_gb200_tput"))
if "mi355x" in wide.columns:
    matched = matched.with_columns((pl.col("mi355x") / pl.col("gb200")).alias(
        "mi355x_over_gb200_tput"))
Table(matched)

# %% [markdown]
# Published (GLM-5.3, each accelerator on its own engine): GB300/GB200 throughput per GPU
# +17.5% at 150 tok/s/user; MI355X/GB200 cost 0.87 at 100 and 1.14 at 150. At matched engines
# the model's GB300/GB200 ratio stays between 1.0 and a few percent above it (1.00-1.08 here:
# GB300 runs every GB200 layout at the same speed, and its larger HBM adds a 4-GPU instance
# and room where capacity binds: under the disaggregated engines a 4-GPU prefill instance,
# P4/D16 against GB200's P8/D16, whose p90 TTFT band stays within the 10 s bound), as the
# spec table allows; a ratio far outside that range in a mixed-engine comparison is the
# engines, not the silicon.

# %% [markdown]
# ## 4. HiSparse inside the serving model
# Per-layer misses of a stored HiSparse replay of the real SmolLM2 selections (buffer 2 x k,
# carried to k = 2048 and this workload's 36.9K-token mean context by the measured scaling
# fit, an extrapolation: docs/selections.md) enter the decode step as host fetches (one gather round trip per layer +
# bytes / SM-kernel bandwidth over the host link), synchronous (v1) or overlapped
# (plan-then-IO). Offload also changes how many requests fit: only the device buffer of each
# layer stays in HBM, the indexer keys stay for every token, the full KV moves to host DRAM.

# %%
ws.ingest(ROOT / "traces" / "smollm2", "bundle", "smollm2", select="smollm2-softmax-sum")
rows_ = ws.load_rows("smollm2")
run = ws.replay_selections("smollm2", policy="lru", buffer_tokens=2 * rows_.k, rows=rows_)
hs = ws.hisparse_columns(run["run_id"], "glm-5.2", target_context_tokens=32768 + 8192 / 2)
print({k: round(v, 3) for k, v in hs.items()})

base = dict(framework="dynamo-sglang", model="glm-5.2", precision="fp8", spec_method="none",
            disagg=True, is_multinode=True, isl=32768, osl=8192, num_prefill_gpu=32,
            num_decode_gpu=8, prefill_tp=8, prefill_ep=8, prefill_dp_attention=True,
            decode_tp=8, decode_ep=8, decode_dp_attention=True)
cases = []
for hw in HARDWARE:
    for conc in (64, 256, 1024):
        for mode, buf, miss, ovl in (("all KV in HBM", 0.0, 0.0, 0.0),
                                     ("HiSparse sync", hs["device_buffer_tokens"],
                                      hs["miss_rows_per_layer"], 0.0),
                                     ("HiSparse overlapped", hs["device_buffer_tokens"],
                                      hs["miss_rows_per_layer"], 1.0)):
            cases.append({**base, "hardware": hw, "conc": conc, "mode": mode,
                          "device_buffer_tokens": buf, "miss_rows_per_layer": miss,
                          "hisparse_overlap": ovl})
hisparse = predict(validate(pl.DataFrame(cases)), breakdown=True).select(
    "hardware", "conc", "mode", pl.col("term_max_batch_per_instance").alias("max_batch"),
    pl.col("term_batch_per_instance").alias("batch"),
    (pl.col("pred_median_tpot") * 1e3).alias("tpot_ms"),
    (pl.col("term_t_miss_s") * 1e3).alias("exposed_miss_ms"),
    pl.col("pred_tput_per_gpu").alias("tput_per_gpu"),
    pl.col("pred_median_ttft").alias("ttft_s"))
Table(hisparse)

# %% [markdown]
# ## 5. Priced HiSparse decode per GPU: cost vs interactivity, and where the step time goes
# The decode-step model (`toolkit/serving/step.py`) prices the same replay at batches 8, 32
# and 128 per GPU, synchronous and overlapped, on each accelerator (GLM-5.2, 32K in / 8K out,
# misses scaled to k = 2048 by the selection-scaling fit: an **extrapolation**, with its band
# in `usd_per_million_total_tokens_low/_high`); each pricing is a `decode_costs` row, and
# both charts are named queries (`cost_per_mtok`, `step_time`). Diamonds: the published
# GLM-5.3 figures (a different, agentic workload), for scale only.

# %%
for hw in HARDWARE:
    for batch in (8, 32, 128):
        for overlap in (False, True):
            ws.record_replay_cost(
                run["run_id"], model="glm-5.2", hardware=hw, batch_per_gpu=batch,
                overlap=overlap, isl_tokens=32_768,
                osl_tokens=8_192)
cost = ws.query("cost_per_mtok")
Table(cost.select("hardware", "setting", pl.col("interactivity_tok_s_user").round(1),
                  pl.col("usd_per_mtok_total").round(4), "on_front"))

# %%
charts.cost_pareto(cost, ws.query("published_costs"),
            "GLM-5.2 HiSparse decode (SmolLM2 selections): $/M total tokens vs interactivity")

# %%
charts.step_time_breakdown(ws.query("step_time"),
                    "GLM-5.2 decode step: HBM/compute work and exposed miss I/O")

# %%
ws.close()
print("store kept at build/notebooks/04; e.g. toolkit sql --store build/notebooks/04 "
      "--query cost_per_mtok")
