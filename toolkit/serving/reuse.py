"""Inputs the serving model takes from stored replays: HiSparse misses and prefix reuse.

Serving never replays: a selection replay or a tier replay already in the
store is read here and turned into per-row columns for :func:`toolkit.serving.predict`.

Labelled assumption (as in :mod:`toolkit.cost.from_replay`): a trace recorded with a small
top-k (the bundled SmolLM2 trace has k = 64) is priced at the model's k (2048 for DSA models)
by scaling its misses by ``model k / trace k``, which keeps the trace's miss ratio per row.
"""

from __future__ import annotations

import polars as pl

from toolkit.errors import ToolkitError
from toolkit.models import ModelSpec
from toolkit.store import Store


def hisparse_columns(store: Store, run_id: str, model: ModelSpec) -> dict[str, float]:
    """Columns for a HiSparse selection replay ``run_id`` priced as ``model``.

    Returns:
        ``device_buffer_tokens`` (scaled to the model's k), ``miss_rows_per_layer`` (mean
        host fetches per request, layer and decode step, scaled likewise), ``miss_scale`` and
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
    return {
        "device_buffer_tokens": float(run["buffer_tokens"][0]) * scale,
        "miss_rows_per_layer": float(rows["misses"].mean()) * scale,
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
