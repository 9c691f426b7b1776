"""Inputs the serving model takes from stored replays: HiSparse misses and prefix reuse.

Serving never replays: a selection replay or a tier replay already in the
store is read here and turned into per-row columns for :func:`toolkit.serving.predict`.

A trace recorded with a small top-k (the bundled SmolLM2 trace has k = 64) is priced at the
model's k (2048 for DSA models): its buffer keeps its buffer / k ratio and its miss ratio
moves along the measured scaling fit (:func:`toolkit.replay.selection_scaling.scale_misses`,
an extrapolation from a 135M dense model's selections, with a band).
"""

from __future__ import annotations

import polars as pl

from toolkit.errors import ToolkitError
from toolkit.models import ModelSpec
from toolkit.replay.selection_scaling import scale_misses
from toolkit.store import Store


def hisparse_columns(store: Store, run_id: str, model: ModelSpec,
                     target_context_tokens: float | None = None) -> dict[str, float]:
    """Columns for a HiSparse selection replay ``run_id`` priced as ``model``.

    Returns:
        ``device_buffer_tokens`` (scaled to the model's k), ``miss_rows_per_layer`` (mean
        host fetches per request, layer and decode step at the model's k and
        ``target_context_tokens``, default the trace's own mean context) with
        ``miss_rows_per_layer_low``/``_high``, ``miss_scale`` (the buffer's k ratio) and
        ``trace_k`` for the record.
    """
    run = pl.from_arrow(store.read("selection_runs", run_id))
    if run["mode"][0] != "hisparse":
        raise ToolkitError(f"selection run {run_id!r} is mode {run['mode'][0]!r}; the serving "
                           "model needs a --mode hisparse replay")
    trace = run["trace"][0]
    meta = pl.from_arrow(store.read("selection_traces", trace))
    trace_k = int(meta["k"][0])
    scale = model.index_topk / trace_k if model.index_topk > 0 else 1.0
    rows = pl.from_arrow(store.read("selection_replay", run_id)).select("misses")
    if model.index_topk <= 0:
        miss = float(rows["misses"].mean())
        return {"device_buffer_tokens": float(run["buffer_tokens"][0]),
                "miss_rows_per_layer": miss, "miss_rows_per_layer_low": miss,
                "miss_rows_per_layer_high": miss, "miss_scale": 1.0, "trace_k": float(trace_k)}
    accesses = int(run["accesses"][0])
    ctx = float(store.query("SELECT avg(seq_len) FROM selections WHERE trace = $t",
                            {"t": trace}).item())
    s = scale_misses(int(run["misses"][0]) / accesses if accesses else 0.0, trace_k=trace_k,
                     model_k=model.index_topk,
                     buffer_ratio=float(run["buffer_tokens"][0]) / trace_k,
                     context_tokens=ctx, target_context_tokens=target_context_tokens)
    return {
        "device_buffer_tokens": float(run["buffer_tokens"][0]) * scale,
        "miss_rows_per_layer": s.rows, "miss_rows_per_layer_low": s.rows_low,
        "miss_rows_per_layer_high": s.rows_high,
        "miss_scale": scale,
        "trace_k": float(trace_k),
    }


def prefix_columns(store: Store, tier_run_id: str) -> dict[str, float]:
    """Columns for a tier replay: share of prompt tokens from any cache and from host DRAM."""
    run = pl.from_arrow(store.read("tier_runs", tier_run_id)).row(0, named=True)
    prompt = max(int(run["prompt_tokens"]), 1)
    cached = run["device_hit_tokens"] + run["host_hit_tokens"] + run["storage_hit_tokens"]
    return {
        "cached_prefix_fraction": cached / prompt,
        "host_prefix_fraction": (run["host_hit_tokens"] + run["storage_hit_tokens"]) / prompt,
        "gpu_hit_rate": float(run["gpu_hit_rate"]),
        "host_hit_rate": float(run["host_hit_rate"]),
    }
