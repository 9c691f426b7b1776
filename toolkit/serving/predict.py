"""Predictions for configuration rows: the public face of the serving model."""

from __future__ import annotations

import numpy as np
import polars as pl

from toolkit.serving.bands import apply_bands
from toolkit.serving.calibration import CONFIDENCE, bundled_calibration
from toolkit.serving.calibration import apply as apply_calibration
from toolkit.serving.layout import Design, design
from toolkit.serving.model import client, solve
from toolkit.serving.params import ServingParams, bundled_params

PRED_COLUMNS = {
    "pred_median_tpot": "median_tpot_s",
    "pred_median_ttft": "median_ttft_s",
    "pred_p90_ttft": "p90_ttft_s",
    "pred_p99_ttft": "p99_ttft_s",
    "pred_tput_per_gpu": "tput_per_gpu",
    "pred_output_tput_per_gpu": "output_tput_per_gpu",
    "pred_median_intvty": "median_intvty",
}
"""Output column -> model quantity (times in seconds, throughputs in tokens/s/GPU)."""

BREAKDOWN_COLUMNS = (
    "batch_per_instance", "max_batch_per_instance", "requests_per_s", "prefill_tokens_per_step",
    "weight_bytes", "kv_bytes", "indexer_bytes", "miss_bytes", "comm_bytes", "gemm_flops",
    "attention_flops", "t_overhead_s", "t_dense_gemm_s", "t_moe_gemm_s", "t_attention_s",
    "t_hbm_s", "t_compute_s", "t_comm_s", "t_miss_s",
    "t_step_s", "t_prefill_s", "t_kv_transfer_s", "prefill_wait_s", "hbm_queue_wait_s",
    "t_per_token_s", "n_collectives", "collective_latency_s", "t_comm_bandwidth_s",
    "t_comm_latency_s",
    "peak_hbm_bytes_per_s", "eff_mem", "peak_flops_per_s", "eff_compute", "link_bytes_per_s",
    "eff_comm", "achieved_hbm_fraction", "achieved_compute_fraction", "achieved_link_fraction",
    "age_factor",
)
"""Per-GPU, per-decode-step terms (bytes, FLOPs, seconds) of each row's operating point."""


def levels(d: Design) -> dict[str, np.ndarray]:
    """The labels the parameter hierarchy is keyed by."""
    return {"vendor": d.vendor, "family": d.family, "hardware": d.hardware, "engine": d.engine,
            "precision": d.precision}


def basis(df: pl.DataFrame, params: ServingParams) -> np.ndarray:
    """``fitted-pair`` where the fit saw the row's (hardware, engine), else ``shared-terms``
    (the prediction rests on the global, vendor, family, engine and precision terms that
    exist, none of them fitted on this pair)."""
    seen = set(params.pairs)
    return np.array(["fitted-pair" if f"{h}/{e}" in seen else "shared-terms"
                     for h, e in zip(df["hardware"].to_list(), df["framework"].to_list(),
                                     strict=True)])


def evaluate(d: Design, params: ServingParams) -> dict[str, np.ndarray]:
    """Solve every row of a design with ``params``: the step terms at the steady-state batch,
    then TTFT, TPOT and throughput from replaying InferenceX's client against them."""
    th = params.row_values(levels(d))
    out = solve(d, th)
    out.update(client(d, th, out["max_batch_per_instance"]))
    return out


def predict(df: pl.DataFrame, params: ServingParams | None = None, *,
            breakdown: bool = False, kv_dtype: str = "fp8", bands: bool = True,
            confidence: float = CONFIDENCE) -> pl.DataFrame:
    """``df`` (validated rows, :func:`toolkit.serving.points.validate`) plus ``pred_*`` columns.

    Args:
        params: fitted parameters; default: the bundled fit on InferenceX DeepSeek-R1 points.
        breakdown: also add the per-step terms (:data:`BREAKDOWN_COLUMNS`, prefixed ``term_``).
        bands: calibrate: add ``pred_*_low`` / ``pred_*_high``, the ``confidence`` central
            interval from the shipped calibration of cross-validated residuals
            (:mod:`toolkit.serving.calibration`; a parameter file's own ``bands.calibration``
            first, the uncalibrated percentile bands of :mod:`toolkit.serving.bands` when
            neither exists), and centre p90 TTFT on its calibrated median. p99 TTFT takes
            p90's centre and band (no source with a p99 is in the calibration: the factor
            that moves the tail at p90 moves it at p99). Without it the raw model outputs
            (what cross-validation scores).

    A ``basis`` column says whether the fit saw the row's (hardware, engine) pair.
    """
    params = params or bundled_params()
    out = evaluate(design(df, kv_dtype=kv_dtype, reference_date=params.reference_date), params)
    cols = [pl.Series(name, out[key]) for name, key in PRED_COLUMNS.items()]
    if breakdown:
        cols += [pl.Series(f"term_{k}", out[k]) for k in BREAKDOWN_COLUMNS]
    b = basis(df, params)
    res = df.with_columns(cols)
    if bands:
        cal = params.bands.get("calibration") if params.bands else None
        cal = cal or bundled_calibration()
        res = (apply_calibration(res, cal, b, confidence=confidence) if cal
               else apply_bands(res, params.bands, b))
    return res.with_columns(pl.Series("basis", b))
