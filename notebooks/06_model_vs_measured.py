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
# # The serving model against measured InferenceX points
#
# Inputs and their status:
# * **Measured: real.** 300 DeepSeek-R1 FP4/FP8 serving points on B200, B300, GB200, H100,
#   H200, MI300X, MI325X and MI355X (six engines, single-node and disaggregated, with and
#   without MTP) from **SemiAnalysis InferenceX** (Apache-2.0; bundled with its LICENSE and
#   SOURCE in `toolkit/data/inferencex/`).
# * **Predicted: computed** by the step-level serving model (`toolkit/serving/`) from sourced
#   hardware and model specs plus efficiency terms **fitted** on those points
#   (`toolkit serving fit`). A fitted figure is not a reproduced one, so every prediction
#   below is **held out**: leave-one-hardware-out cross-validation, i.e. the fit that predicts
#   a GB200 row never saw a GB200 row (`toolkit serving validate --out-dir
#   toolkit/serving/fitted/cv`, whose output is bundled; the last cell re-runs one fold and
#   checks it reproduces).
#
# All tables and charts come from named queries (`model_vs_measured`, `model_error`; e.g.
# `toolkit sql --store build/notebooks/06 --query model_error --param group=framework`) over
# the bundled held-out predictions, run on the notebook's store at `build/notebooks/06`.

# %%
import shutil
from importlib.resources import files
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit import charts
from toolkit.serving import bundled_points_path, cross_validate, read_points
from toolkit.tables import Table

alt.renderers.enable("svg")
pl.Config(tbl_rows=40, tbl_width_chars=130, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, float_precision=3)
CV = Path(str(files("toolkit.serving").joinpath("fitted", "cv")))
heldout = pl.read_csv(CV / "heldout_hardware.csv")
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
STORE_DIR = ROOT / "build" / "notebooks" / "06"
shutil.rmtree(STORE_DIR, ignore_errors=True)  # each run starts from an empty store
ws = toolkit.open(STORE_DIR, create=True)
print(f"{heldout.height} held-out predictions, "
      f"{heldout['hardware'].n_unique()} accelerators, {heldout['framework'].n_unique()} engines")

# %% [markdown]
# ## 1. Predicted vs measured throughput per GPU and TPOT (held out)
# The dashed line is y = x, the band +-25%. Hover a point for its configuration.

# %%
tput = ws.query("model_vs_measured", metric="tput_per_gpu")
tpot = ws.query("model_vs_measured", metric="median_tpot").with_columns(
    pl.col("measured", "predicted") * 1e3)  # s -> ms
alt.hconcat(
    charts.predicted_vs_measured(tput, "tok/s/GPU", "Throughput per GPU (InferenceX divisors)"),
    charts.predicted_vs_measured(tpot, "TPOT (ms)", "Median TPOT"),
)

# %% [markdown]
# ## 2. Error by hardware and by engine
# Median of |predicted / measured - 1| on held-out rows, and Spearman's rank correlation
# (does the model order configurations correctly?).

# %%
def error_table(group):
    """Median |predicted / measured - 1| per metric, one row per hardware or engine."""
    err = ws.query("model_error", group=group)
    rows = err.filter(pl.col("metric_rank") == 1).select("key", "rows")
    wide = err.pivot(on="metric", index="key", values="median_abs_err")
    return Table(rows.join(wide, on="key").rename({"key": group}),
                 percent=tuple(c for c in wide.columns if c != "key"))


error_table("hardware")

# %%
error_table("framework")

# %%
by_hw = ws.query("model_error", group="hardware").filter(
    pl.col("metric") != "TTFT").rename({"key": "hardware"})
charts.error_by_group(by_hw, "hardware", "Held-out error by hardware (leave-one-hardware-out)")

# %% [markdown]
# ## 3. GB200, GB300 and MI355X fronts: model lines, measured points
# DeepSeek-R1 FP4, 8K in / 1K out: the model sweeps layouts x concurrency for each
# accelerator with the engine of the published comparison (GB200 Dynamo-SGLang, GB300
# Dynamo-TRT, MI355X ATOM) and keeps the Pareto front of throughput per GPU vs interactivity
# (bundled fit) among the points whose predicted p90 TTFT is within 10 s, `cost compare`'s
# default bound: beyond it a front ends in thousands of users whose prompts wait minutes.
# Diamonds are measured points at the same shape, any engine and any TTFT (some sit beyond a
# line's end); there are no GB300 DeepSeek points in the bundled data, so its line is a
# prediction only.

# %%
hardware = ("gb200", "gb300", "mi355x")
ws.record_serving_fronts("dsr1", hardware, precision="fp4", isl=8192, osl=1024)
fronts = ws.query("serving_fronts")
measured = pl.concat([ws.query("measured_points", hardware=hw) for hw in hardware])
charts.pareto_fronts(fronts, measured, "DeepSeek-R1 FP4 8K/1K: modelled fronts and measured points")

# %% [markdown]
# ### The same fronts with their error bands
# `toolkit cost compare --model-only` at targets along each front: the line is the model's
# throughput per GPU, the shaded band its calibrated 80% central interval (split-conformal
# quantiles of cross-validated residuals per regime, `toolkit/serving/fitted/calibration.json`;
# the pool of unseen pairs for GB300 + Dynamo-TRT, `basis = shared-terms`). A good band holds
# about 8 of 10 measured diamonds of its own engine.

# %%
targets = tuple(float(x) for x in (10, 15, 20, 30, 40, 50, 60, 70, 80, 100, 120, 150, 200))
banded = ws.compare("dsr1", hardware, precision="fp4", interactivity=targets,
                    measured=False, max_p90_ttft_s=None)
print(Table(banded.group_by("hardware", "engine", "basis").agg(
    pl.col("reachable").sum().alias("targets_reached")).sort("hardware")))
charts.front_band(banded, measured, "DeepSeek-R1 FP4 8K/1K: modelled front, calibrated 80% "
                  "band, measured points")

# %% [markdown]
# ### How often the bands hold, out of sample
# Every held-out prediction of 5-fold, leave-one-hardware-out and time cross-validation gets
# the band the shipped method would give it, **calibrated on rows outside its own fold
# only** (`toolkit.serving.calibration.nested_bands`; `toolkit serving validate --from-cv
# toolkit/serving/fitted/cv` prints the same). The promise is 80%; 75-88% counts as kept.
# The time split's p90 TTFT cannot be judged this way: only its newer half recorded p90.

# %%
from toolkit.serving import calibration  # noqa: E402

frames = calibration.cv_frames(CV)
cols = ["tput_per_gpu", "median_tpot", "median_ttft", "p90_ttft"]
coverage = pl.concat([
    calibration.coverage_table(calibration.nested_bands(frames, s)).filter(
        pl.col("group") == "all").select(pl.lit(s).alias("scheme"), "rows",
                                         *(f"{c}_coverage" for c in cols),
                                         *(f"{c}_width" for c in cols[:2]))
    for s in ("kfold", "hardware", "time")])
Table(coverage, percent=tuple(f"{c}_coverage" for c in cols))

# %% [markdown]
# Per (vendor, engine) group under leave-one-hardware-out: where the bands are kept and where
# they are not.

# %%
Table(calibration.coverage_table(calibration.nested_bands(frames, "hardware")).select(
    "group", "rows", *(f"{c}_coverage" for c in cols)),
    percent=tuple(f"{c}_coverage" for c in cols))

# %% [markdown]
# ### p90 TTFT as its own target
# The replayed client gave about half the measured p90 TTFT; the calibration moves it by the
# median held-out residual of its (vendor, engine) group where 20+ rows give one, else of
# its regime (a `fitted` correction: AMD SGLang's measured p90 is 5-10x its median TTFT,
# other engines' about 2x, and no input of the model separates them). On held-out rows: median
# |error|, median predicted / measured, band coverage; and, for `--ttft-confidence 0.8`
# (the band's upper end within the bound), how many rows said to meet 1, 2, 5 and 10 s were
# measured over it.

# %%
p90 = pl.DataFrame([{"scheme": s, **calibration.p90_check(calibration.nested_bands(frames, s))}
                    for s in ("kfold", "hardware")])
bounds = pl.DataFrame([r for s in ("kfold", "hardware")
                       for r in calibration.bound_check(frames, s) if r["confidence"] == 0.8])
print(Table(p90))
Table(bounds)

# %% [markdown]
# ### Sparse-attention models, leave one source out
# 84 measured DSA points from eight sources (InferenceX GLM-5 on H200 with vLLM; SGLang's
# GLM-5 / GLM-5.2 cards and PRs on H200, B200, GB300 and MI300X; TensorRT-LLM's DeepSeek-V3.2
# blog; two vLLM publications; `toolkit/data/dsa/SOURCE.md`), none in the model's fit. DSA
# throughput is centred per (vendor, engine) group with 2+ sources; here each source's centre
# and band come from the other sources only. Throughput is the total where a source publishes
# it, else the output throughput.

# %%
dsa = pl.read_csv(CV / "heldout_dsa.csv", infer_schema_length=None)
Table(calibration.dsa_loso(dsa).select("source", "rows", "tput_per_gpu_median_err",
                                       "tput_per_gpu_median_ratio", "tput_per_gpu_coverage",
                                       "median_tpot_median_err", "median_tpot_coverage"),
      percent=("tput_per_gpu_median_err", "tput_per_gpu_coverage", "median_tpot_median_err",
               "median_tpot_coverage"))

# %% [markdown]
# ## 4. The bundled held-out file reproduces
# Re-run the MI300X fold (fit on every other accelerator, predict MI300X) and compare with
# the bundled predictions.

# %%
fold = cross_validate(read_points(bundled_points_path()), "hardware", only=["mi300x"])
bundled = heldout.filter(pl.col("hardware") == "mi300x")
diff = (fold["pred_tput_per_gpu"] / bundled["pred_tput_per_gpu"] - 1).abs().max()
# the fit's last digits depend on the BLAS build and thread count, so the check is a bound
assert diff < 1e-3, diff
print("MI300X fold reproduces the bundled predictions to within 0.1%")

# %%
ws.close()
print("store kept at build/notebooks/06; e.g. toolkit sql --store build/notebooks/06 "
      "--query model_error --param group=framework")
