"""Predictions for configuration rows: the public face of the serving model."""

from __future__ import annotations

import numpy as np
import polars as pl

from toolkit.serving.layout import Design, design
from toolkit.serving.model import solve
from toolkit.serving.params import ServingParams, bundled_params

PRED_COLUMNS = {
    "pred_median_tpot": "median_tpot_s",
    "pred_median_ttft": "median_ttft_s",
    "pred_p90_ttft": "p90_ttft_s",
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
)
"""Per-GPU, per-decode-step terms (bytes, FLOPs, seconds) of each row's operating point."""


def levels(d: Design) -> dict[str, np.ndarray]:
    """The labels the parameter hierarchy is keyed by."""
    return {"vendor": d.vendor, "family": d.family, "hardware": d.hardware, "engine": d.engine}


def evaluate(d: Design, params: ServingParams) -> dict[str, np.ndarray]:
    """Solve every row of a design with ``params``."""
    return solve(d, params.row_values(levels(d)))


def predict(df: pl.DataFrame, params: ServingParams | None = None, *,
            breakdown: bool = False, kv_dtype: str = "fp8") -> pl.DataFrame:
    """``df`` (validated rows, :func:`toolkit.serving.points.validate`) plus ``pred_*`` columns.

    Args:
        params: fitted parameters; default: the bundled fit on InferenceX DeepSeek-R1 points.
        breakdown: also add the per-step terms (:data:`BREAKDOWN_COLUMNS`, prefixed ``term_``).
    """
    params = params or bundled_params()
    out = evaluate(design(df, kv_dtype=kv_dtype), params)
    cols = [pl.Series(name, out[key]) for name, key in PRED_COLUMNS.items()]
    if breakdown:
        cols += [pl.Series(f"term_{k}", out[k]) for k in BREAKDOWN_COLUMNS]
    return df.with_columns(cols)
