"""Error bands from cross-validated residuals: every prediction carries low / high bounds.

Why from held-out residuals: an in-sample residual says how well the fit memorised its rows,
not how wrong the next prediction will be. The bands are the 10th and 90th percentiles of
``log(measured / predicted)`` on rows the fit never saw:

* a (hardware, engine) pair the fit saw gets the quantiles of its own pair's rows under
  K-fold cross-validation (K = :data:`KFOLDS`, rows shuffled with a fixed seed), or of its
  hardware's, or of all rows, whichever first has :data:`MIN_ROWS` rows;
* a pair the fit never saw (``basis = shared-terms``) gets the quantiles of all rows under
  leave-one-hardware-out, which is what predicting an unseen pair is.
"""

from __future__ import annotations

import numpy as np
import polars as pl

KFOLDS = 5
SEED = 20261203
MIN_ROWS = 5
QUANTILES = (0.10, 0.90)
METRICS = {"tput_per_gpu": "pred_tput_per_gpu", "median_tpot": "pred_median_tpot",
           "median_ttft": "pred_median_ttft"}
"""Measured column -> predicted column whose residuals make the band."""


def _quantiles(meas: np.ndarray, pred: np.ndarray) -> dict[str, float] | None:
    ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred) & (pred > 0)
    if ok.sum() < MIN_ROWS:
        return None
    r = np.log(meas[ok] / pred[ok])
    lo, hi = np.quantile(r, QUANTILES)
    return {"log_low": float(min(lo, 0.0)), "log_high": float(max(hi, 0.0)),
            "rows": int(ok.sum())}


def band_table(kfold: pl.DataFrame, by_hardware: pl.DataFrame) -> dict:
    """The ``bands`` object of a parameter file from two held-out prediction frames."""
    out: dict = {"method": f"{KFOLDS}-fold (seed {SEED}) for fitted pairs; leave-one-hardware-"
                 "out for shared-terms", "quantiles": list(QUANTILES), "groups": {}}
    for m, p in METRICS.items():
        if m not in kfold.columns:
            continue
        groups = {}
        for key, g in (("all", kfold),
                       *((f"{h}", kfold.filter(pl.col("hardware") == h))
                         for h in kfold["hardware"].unique().sort().to_list()),
                       *((f"{h}/{e}", kfold.filter((pl.col("hardware") == h)
                                                   & (pl.col("framework") == e)))
                         for h, e in kfold.select("hardware", "framework").unique()
                         .sort("hardware", "framework").iter_rows())):
            q = _quantiles(g[m].cast(pl.Float64).to_numpy(), g[p].to_numpy())
            if q:
                groups[key] = q
        q = _quantiles(by_hardware[m].cast(pl.Float64).to_numpy(), by_hardware[p].to_numpy())
        if q:
            groups["shared-terms"] = q
        out["groups"][m] = groups
    return out


def kfold_assignment(n: int) -> np.ndarray:
    """Fold of each row (fixed seed: the bands are reproducible)."""
    return np.random.default_rng(SEED).permutation(n) % KFOLDS


def apply_bands(df: pl.DataFrame, bands: dict, basis: np.ndarray) -> pl.DataFrame:
    """Add ``pred_*_low`` / ``pred_*_high`` for every ``pred_*`` column of ``df``.

    Without bands (an unfitted model) the bounds are null: no band is better than a made-up
    one.
    """
    groups = bands.get("groups", {}) if bands else {}
    hw = df["hardware"].to_list()
    pairs = [f"{h}/{e}" for h, e in zip(hw, df["framework"].to_list(), strict=True)]

    def logs(metric: str) -> tuple[np.ndarray, np.ndarray]:
        g = groups.get(metric, {})
        lo, hi = np.full(df.height, np.nan), np.full(df.height, np.nan)
        for i in range(df.height):
            keys = (["shared-terms", "all"] if basis[i] == "shared-terms"
                    else [pairs[i], hw[i], "all"])
            q = next((g[k] for k in keys if k in g), None)
            if q:
                lo[i], hi[i] = q["log_low"], q["log_high"]
        return lo, hi

    t_lo, t_hi = logs("tput_per_gpu")
    p_lo, p_hi = logs("median_tpot")
    f_lo, f_hi = logs("median_ttft")
    spec = {"pred_tput_per_gpu": (t_lo, t_hi), "pred_output_tput_per_gpu": (t_lo, t_hi),
            "pred_median_tpot": (p_lo, p_hi), "pred_median_ttft": (f_lo, f_hi),
            "pred_p90_ttft": (f_lo, f_hi)}
    cols = []
    for c, (lo, hi) in spec.items():
        if c in df.columns:
            v = df[c].to_numpy()
            cols += [pl.Series(f"{c}_low", v * np.exp(lo)), pl.Series(f"{c}_high", v * np.exp(hi))]
    if "pred_median_intvty" in df.columns:  # interactivity = 1 / TPOT: bounds swap
        v = df["pred_median_intvty"].to_numpy()
        cols += [pl.Series("pred_median_intvty_low", v * np.exp(-p_hi)),
                 pl.Series("pred_median_intvty_high", v * np.exp(-p_lo))]
    return df.with_columns(cols)
