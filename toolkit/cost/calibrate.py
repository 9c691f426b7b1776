"""Fit the decode-step model's efficiency factors to a user's measured points.

The analytic model (:mod:`toolkit.serving.step`) and measurements rarely agree out of the
box. Rather than hide the gap, :func:`calibrate_decode` reports both and fits two
documented factors per hardware:

* ``hbm_efficiency``: the share of peak HBM bandwidth a decode step achieves;
* ``fixed_latency_s``: a per-step constant (kernel launches, scheduling, sync) added to the
  modelled step time.

A measured point gives TPOT = 1 / median interactivity at a batch of
``concurrency / gpus_per_replica`` requests per GPU. The fit minimises the squared log
error of TPOT over an efficiency grid, with the fixed latency set per grid point to the
non-negative median residual (robust to one odd point). With a single point the two
factors are not identifiable: the fit then keeps the default efficiency and fits only the
fixed latency, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from toolkit.hardware import HardwareSpec
from toolkit.models import ModelSpec
from toolkit.serving.step import DecodeScenario, decode_step

DEFAULT_HBM_EFFICIENCY = 0.8
EFFICIENCY_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)


@dataclass(frozen=True)
class Calibration:
    """Fitted factors and the points before and after."""

    hardware: str
    hbm_efficiency: float
    fixed_latency_s: float
    identifiable: bool
    rmse_log_before: float
    rmse_log_after: float
    points: pl.DataFrame  # concurrency, batch_per_gpu, measured/model TPOT before/after


def _model_tpot(model: ModelSpec, hw: HardwareSpec, batch: np.ndarray, context_tokens: int,
                eff: float, gpus: int, misses_per_layer: float) -> np.ndarray:
    return np.array([
        decode_step(DecodeScenario(model, hw, int(b), context_tokens, misses_per_layer,
                                   gpus_per_replica=gpus, hbm_efficiency=eff)).tpot_s
        for b in batch
    ])


def _fit_latency(measured: np.ndarray, modelled: np.ndarray) -> tuple[float, float]:
    t0 = max(0.0, float(np.median(measured - modelled)))
    err = float(np.sqrt(np.mean(np.log(measured / (modelled + t0)) ** 2)))
    return t0, err


def calibrate_decode(
    measurements: pl.DataFrame,
    model: ModelSpec,
    hardware: HardwareSpec,
    *,
    context_tokens: int,
    gpus_per_replica: int = 8,
    misses_per_layer: float = 0.0,
) -> Calibration:
    """Fit ``hbm_efficiency`` and ``fixed_latency_s`` for ``hardware`` from its rows of
    ``measurements`` (columns ``hardware``, ``concurrency``, ``median_interactivity``)."""
    pts = measurements.filter(pl.col("hardware") == hardware.name)
    if pts.height == 0:
        raise ValueError(f"no measured points for hardware {hardware.name!r}")
    batch = np.maximum(1, np.ceil(pts["concurrency"].to_numpy() / gpus_per_replica)).astype(int)
    measured = 1.0 / pts["median_interactivity"].to_numpy()
    args = (model, hardware, batch, context_tokens)
    before = _model_tpot(*args, DEFAULT_HBM_EFFICIENCY, gpus_per_replica, misses_per_layer)
    rmse_before = float(np.sqrt(np.mean(np.log(measured / before) ** 2)))
    identifiable = np.unique(batch).size >= 2
    grid = EFFICIENCY_GRID if identifiable else np.array([DEFAULT_HBM_EFFICIENCY])
    best = None
    for eff in grid:
        tpot = _model_tpot(*args, float(eff), gpus_per_replica, misses_per_layer)
        t0, err = _fit_latency(measured, tpot)
        if best is None or err < best[2] - 1e-12:
            best = (float(eff), t0, err, tpot)
    eff, t0, err, tpot = best
    table = pts.select("concurrency", "median_interactivity").with_columns(
        batch_per_gpu=pl.Series(batch),
        measured_tpot_s=pl.Series(measured),
        model_tpot_s_before=pl.Series(before),
        model_tpot_s_after=pl.Series(tpot + t0),
    )
    return Calibration(hardware.name, eff, t0, identifiable, rmse_before, err, table)
