"""Out-of-sample checks of the serving model: leave one hardware out, leave one shape out,
fit on older engines and predict newer ones (and the reverse: ``time``), K-fold.

Each fold fits on every other row and predicts the held-out rows, whose hardware (or ISL/OSL
shape) the fit never saw; the held-out hardware's own terms are therefore absent and its
prediction rests on its specs and the shared terms. Errors are reported per hardware as the
median and p90 of ``|pred / measured - 1|`` and as Spearman's rank correlation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
from scipy.stats import spearmanr

from toolkit.serving.fit import fit
from toolkit.serving.predict import predict

METRICS = {"tput_per_gpu": "pred_tput_per_gpu", "median_tpot": "pred_median_tpot",
           "median_ttft": "pred_median_ttft"}


def cross_validate(df: pl.DataFrame, scheme: str, *, max_nfev: int = 100,
                   progress=None, only: list[str] | None = None) -> pl.DataFrame:
    """Held-out predictions of every row under ``scheme`` ("hardware" or "shape").

    ``only`` limits the run to the named folds (e.g. to re-check one held-out group).

    Returns:
        ``df`` plus the ``pred_*`` columns and ``fold`` (the held-out group of the row).
    """
    if scheme == "hardware":
        key = pl.col("hardware")
    elif scheme == "shape":
        key = pl.format("{}/{}", pl.col("isl"), pl.col("osl"))
    elif scheme == "time":
        if "date" not in df.columns or df["date"].null_count() == df.height:
            raise ValueError("the time scheme needs a 'date' column")
        dates = df["date"].cast(pl.String)
        cut = dates.drop_nulls().sort()[dates.drop_nulls().len() // 2]
        key = pl.when(pl.col("date").cast(pl.String) < cut).then(pl.lit(f"older than {cut}")
                                                                  ).otherwise(
            pl.lit(f"from {cut}"))
    elif scheme == "kfold":
        from toolkit.serving.bands import kfold_assignment

        df = df.with_columns(pl.Series("_k", kfold_assignment(df.height)))
        key = pl.format("fold {}", pl.col("_k"))
    else:
        raise ValueError(f"scheme must be 'hardware', 'shape', 'time' or 'kfold', got "
                         f"{scheme!r}")
    df = df.with_columns(key.alias("fold"))
    folds = df["fold"].unique(maintain_order=True).to_list()
    if only is not None:
        unknown = sorted(set(only) - set(folds))
        if unknown:
            raise ValueError(f"no {scheme} fold {unknown}; folds: {folds}")
    if len(folds) < 2:
        raise ValueError(f"leave-one-{scheme}-out needs at least two groups; got {folds}")
    out = []
    for i, f in enumerate(folds if only is None else [f for f in folds if f in only]):
        train = df.filter(pl.col("fold") != f)
        test = df.filter(pl.col("fold") == f)
        params = fit(train, max_nfev=max_nfev, fitted_on=f"all rows except {scheme} {f}")
        out.append(predict(test, params, bands=False).drop("_k", strict=False))
        if progress:
            progress(i + 1, len(folds), f)
    return pl.concat(out, how="vertical_relaxed")


def error_table(pred: pl.DataFrame, by: str = "hardware") -> pl.DataFrame:
    """Median / p90 absolute relative error and Spearman rho per group and overall."""
    rows = []
    groups = [(g, pred.filter(pl.col(by) == g)) for g in sorted(pred[by].unique().to_list())]
    for name, g in [*groups, ("all", pred)]:
        row = {by: name, "rows": g.height}
        for m, p in METRICS.items():
            meas, est = g[m].cast(pl.Float64).to_numpy(), g[p].to_numpy()
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(est)
            err = np.abs(est[ok] / meas[ok] - 1.0)
            row[f"{m}_median_err"] = float(np.median(err)) if err.size else None
            row[f"{m}_p90_err"] = float(np.quantile(err, 0.9)) if err.size else None
            rho = spearmanr(meas[ok], est[ok]).statistic if ok.sum() > 2 else None
            row[f"{m}_spearman"] = None if rho is None or np.isnan(rho) else float(rho)
        rows.append(row)
    return pl.DataFrame(rows)


def fit_with_bands(df: pl.DataFrame, *, fitted_on: str = "", max_nfev: int = 100,
                   progress=None):
    """Fit on every row, then attach error bands from K-fold and leave-one-hardware-out
    held-out residuals (:mod:`toolkit.serving.bands`): 1 + K + hardware-count fits."""
    from dataclasses import replace

    from toolkit.serving.bands import band_table

    params = fit(df, fitted_on=fitted_on, max_nfev=max_nfev)
    kf = cross_validate(df, "kfold", max_nfev=max_nfev, progress=progress)
    hw = (cross_validate(df, "hardware", max_nfev=max_nfev, progress=progress)
          if df["hardware"].n_unique() > 1 else kf)
    return replace(params, bands=band_table(kf, hw))


DSA_FILE = "token_position_decode_slo.csv"
DSA_MODELS = {"zai-org/GLM-5-FP8": ("glm-5", "fp8")}
"""Rows of the decode-SLO file the model can express: GLM-5 (DSA). MiniMax-M2.5 (GQA) and
Qwen3.5 (hybrid linear attention) have no model spec: their attention is not MLA."""
DSA_DECODE_MTP_ACCEPT = 1.44
"""Tokens per step of the decode-SLO runs' MTP with one draft (their server ran ``vllm serve
zai-org/GLM-5-FP8 --tensor-parallel-size 8 --speculative-config.method mtp
--speculative-config.num_speculative_tokens 1``: InferenceX
``experimental/token_position_decode_slo/glm-5/serve_glm5_sbatch.sh``). The runs record no
acceptance; assumed from the nearest measurement: vLLM's GLM-5 recipe (``GLM/GLM5.md``,
2026-03-28 revision), GLM-5-FP8 on random tokens with 3 drafts, acceptance length 1.64; under
one per-position acceptance ``a`` (1 + a + a^2 + a^3 = 1.64, a = 0.44) one draft gives 1.44."""


def dsa_decode_points() -> pl.DataFrame:
    """The bundled InferenceX decode-SLO points (8x H200, vLLM, TP8, ISL 1K-16K, OSL 128) of
    DSA models, as validated configuration rows with measured TPOT (and its reciprocal, the
    median interactivity), median and p99 TTFT (the runs record no p90) and throughput.
    None of them is in the fit: predicting them is out of sample (model and engine)."""
    from toolkit.serving.points import bundled_points_path, validate

    raw = pl.read_csv(bundled_points_path(DSA_FILE))
    raw = raw.filter(pl.col("model").is_in(list(DSA_MODELS)) & (pl.col("parallel") == "tp8"))
    # the client's length spread, from the runs' own token counts: lengths uniform in
    # [r L, L] average (1 + r) L / 2 (these runs sent every prompt at exactly L: r = 1)
    mean_isl = raw["input_tok_s"] * raw["duration_s"] / raw["completed"]
    raw = raw.with_columns(ratio=(2.0 * mean_isl / raw["isl"] - 1.0).clip(0.01, 1.0).round(2))
    rows = [{"hardware": "h200", "framework": "vllm", "model": DSA_MODELS[r["model"]][0],
             "precision": DSA_MODELS[r["model"]][1], "spec_method": "mtp", "mtp_draft_tokens": 1,
             "mtp_accept": DSA_DECODE_MTP_ACCEPT, "disagg": False,
             "is_multinode": False, "isl": r["isl"], "osl": r["osl"], "conc": r["conc"],
             "num_prefill_gpu": 8, "num_decode_gpu": 8, "prefill_tp": 8, "prefill_ep": 1,
             "prefill_dp_attention": False, "decode_tp": 8, "decode_ep": 1,
             "decode_dp_attention": False, "random_range_ratio": r["ratio"],
             "date": f"{r['date'][:4]}-{r['date'][4:6]}-{r['date'][6:8]}",
             "tput_per_gpu": (r["input_tok_s"] + r["output_tok_s"]) / 8.0,
             "output_tput_per_gpu": r["output_tok_s"] / 8.0,
             "median_tpot": r["median_tpot_s"], "median_intvty": 1.0 / r["median_tpot_s"],
             "median_ttft": r["median_ttft_s"], "p99_ttft": r["p99_ttft_s"]}
            for r in raw.iter_rows(named=True)]
    return validate(pl.DataFrame(rows), f"bundled {DSA_FILE}")


DSA_INFERENCEX = "inferencex-glm5-fp8-h200-vllm"
"""Source label of the bundled InferenceX decode-SLO GLM-5 runs."""
DSA_PUBLIC_FILES = ("glm52_public_points.csv", "glm5_dsv32_public_points.csv",
                    "vllm_dsa_public_points.csv")
"""Public measured DSA points gathered from engine docs and PRs (``toolkit/data/dsa``,
``SOURCE.md`` there): one ``source`` per publication, with URL, date, engine version and the
definition of each throughput."""


def dsa_public_points() -> pl.DataFrame:
    """The gathered public DSA points as validated rows (``source`` column kept)."""
    from importlib.resources import files

    from toolkit.serving.points import validate

    frames = []
    for name in DSA_PUBLIC_FILES:
        path = Path(str(files("toolkit").joinpath("data", "dsa", name)))
        frames.append(validate(pl.read_csv(path, infer_schema_length=None), str(path)))
    return pl.concat(frames, how="diagonal_relaxed")


def dsa_points() -> pl.DataFrame:
    """Every measured DSA point: the bundled InferenceX GLM-5 runs and the public ones."""
    ix = dsa_decode_points().with_columns(pl.lit(DSA_INFERENCEX).alias("source"))
    return pl.concat([ix, dsa_public_points()], how="diagonal_relaxed")


def dsa_caveat() -> str:
    """What the shipped DSA checks (``fitted/cv/heldout_dsa.csv``, written by ``toolkit serving
    validate --scheme dsa``) say of the model's answers for a sparse-attention model, per
    source: direction and size computed from the file, never a fixed word. Every fitted
    parameter comes from DeepSeek-R1 (dense MLA); the answers' bands for a DSA model come from
    these residuals (:mod:`toolkit.serving.calibration`)."""
    from toolkit.serving.params import bundled_cv_dir

    df = pl.read_csv(bundled_cv_dir() / "heldout_dsa.csv", infer_schema_length=None)
    if "source" not in df.columns:
        df = df.with_columns(pl.lit(DSA_INFERENCEX).alias("source"))
    # throughput: the total where a source publishes it, else its output throughput
    df = df.with_columns(
        tput_ratio=pl.coalesce(pl.col("pred_tput_per_gpu") / pl.col("tput_per_gpu"),
                               pl.col("pred_output_tput_per_gpu")
                               / pl.col("output_tput_per_gpu")),
        tpot_ratio=pl.col("pred_median_tpot") / pl.col("median_tpot"))
    parts = []
    for src, g in df.group_by("source", maintain_order=True):
        runs = f"{g.height} run" + ("s" if g.height != 1 else "")
        said = f"{src[0]} ({runs}): throughput {_says(g['tput_ratio'].median())}"
        if g["tpot_ratio"].drop_nulls().len():
            said += f", TPOT {_says(g['tpot_ratio'].median())}"
        parts.append(said)
    return ("sparse-attention (DSA) model: the serving model is fitted on DeepSeek-R1 (dense "
            "MLA) only; measured DSA checks, never fitted: " + "; ".join(parts)
            + f" (medians of model / measured; all {df.height}: throughput "
            f"{_says(df['tput_ratio'].median())}); "
            + _engine_centres_said()
            + "source=model rows carry bands from these residuals")


def _engine_centres_said() -> str:
    """What the shipped calibration does to a DSA answer's throughput per (vendor, engine)
    group (:data:`toolkit.serving.calibration.MIN_DSA_ENGINE_SOURCES`), or nothing."""
    import math

    from toolkit.serving.calibration import bundled_calibration

    cal = bundled_calibration() or {}
    ec = (cal.get("groups", {}).get("dsa", {}).get("tput_per_gpu", {}).get("all", {})
          .get("engine_centres", {}))
    if not ec:
        return ""
    said = ", ".join(f"{k} x{math.exp(v['centre']):.2f} ({len(v['sources'])} sources)"
                     for k, v in sorted(ec.items()))
    return f"DSA throughput answers are multiplied by their engine's measured factor: {said}; "


def _says(ratio: float) -> str:
    """``1.85x (over by 85%)``: the direction and size of a median model / measured."""
    return f"{ratio:.2f}x ({'over' if ratio > 1 else 'under'} by {abs(ratio - 1):.0%})"


def dsa_decode_check(params=None) -> pl.DataFrame:
    """Predictions of every measured DSA point (:func:`dsa_points`) by the bundled (or given)
    fit; ``fold`` is the point's source (leave-one-source-out is how they are judged)."""
    return predict(dsa_points(), params, bands=False).with_columns(
        pl.col("source").alias("fold"))
