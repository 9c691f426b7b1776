"""``cost compare --selections``: a DSA model priced with HiSparse at a trace's measured misses,
beside the same question without HiSparse.

Why three answers and not two: HiSparse changes two things at once. Its device buffer
shrinks the HBM each running request needs (more requests fit: the *capacity gain*) and its
misses add host fetches to every decode step (the *fetch cost*). Pricing the buffer with no
misses separates them: capacity gain = $/M without HiSparse - $/M with the buffer and zero
misses; fetch cost = $/M with the trace's misses - $/M with zero misses. All three answers
come from the serving model (``measured=False``): measured points know nothing of HiSparse,
so mixing them in would compare a measurement with a model.

The misses are the exact selection replay of the trace (HiSparse mode, LRU: SGLang's
buffer) at the device buffer scaled to the trace's top-k, then priced at the model's k
(:func:`toolkit.replay.selection_scaling.scale_misses`: a trace recorded with the model's own k
needs no scaling; any other is an extrapolation and says so).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import polars as pl

from toolkit.cost.compare import compare
from toolkit.cost.config import CompareConfig
from toolkit.errors import ToolkitError
from toolkit.models import ModelSpec, get_model
from toolkit.replay.selection_scaling import scale_misses
from toolkit.serving.params import ServingParams
from toolkit.store import Store


@dataclass(frozen=True)
class TraceMisses:
    """A trace's HiSparse misses at one device buffer, at trace and model scale.

    ``miss_rows_per_layer`` (model scale) is what the serving model fetches per request,
    layer and decode step; ``_low``/``_high`` its band (equal to it when no extrapolation
    was needed); ``scaling`` says how it was scaled.
    """

    trace: str
    trace_k: int
    model_k: int
    buffer_tokens: int  # model scale: HiSparse device buffer per request per layer
    trace_buffer_tokens: int  # the replayed buffer, at the trace's k
    rows: int
    misses: int
    miss_ratio: float  # misses / accesses: the trace's own miss ratio
    mean_seq_len: float
    miss_rows_per_layer: float
    miss_rows_per_layer_low: float
    miss_rows_per_layer_high: float
    scaling: str


def trace_misses(store: Store, trace: str, model: ModelSpec,
                 buffer_tokens: int | None = None,
                 target_context_tokens: float | None = None) -> TraceMisses:
    """Replay ``trace`` in HiSparse mode at ``buffer_tokens`` (model scale; default 2 x the
    model's k, HiSparse's default) scaled to the trace's k, and carry its miss ratio to the
    model's k at ``target_context_tokens`` (default: the trace's own mean context); nothing
    is written."""
    from toolkit.replay.selections import load_rows, model_config, replay_selections

    if trace not in store.keys("selections"):
        known = ", ".join(store.keys("selections")) or "none"
        raise ToolkitError(f"--selections {trace!r}: no selection trace of that name in "
                           f"{store.root}; known: {known}")
    if model.index_topk <= 0:
        raise ToolkitError(f"--selections: {model.name} is a dense model (no indexer top-k); "
                           "HiSparse applies to sparse-attention (DSA) models")
    rows = load_rows(store, trace)
    trace_k = int(rows.k)
    buffer = int(buffer_tokens or 2 * model.index_topk)
    trace_buffer = max(1, round(buffer * trace_k / model.index_topk))
    cfg = model_config(store, trace, model, mode="hisparse", policy="lru",
                       buffer_tokens=trace_buffer)
    res = replay_selections(store, cfg, save=False, rows=rows, progress=False)
    n_rows, misses = int(res["rows"]), int(res["misses"])
    ratio = misses / int(res["accesses"]) if res["accesses"] else 0.0
    mean_seq = float(rows.seq_len.mean()) if n_rows else 0.0
    s = scale_misses(ratio, trace_k=trace_k, model_k=model.index_topk,
                     buffer_ratio=trace_buffer / trace_k, context_tokens=mean_seq,
                     target_context_tokens=target_context_tokens)
    return TraceMisses(trace, trace_k, model.index_topk, buffer, trace_buffer, n_rows, misses,
                       ratio, mean_seq, s.rows, s.rows_low, s.rows_high, s.label)


KEYS = ("hardware", "engine", "interactivity")


def compare_with_hisparse(cfg: CompareConfig, params: ServingParams, misses: TraceMisses, *,
                          overlap: bool = False) -> pl.DataFrame:
    """Per (hardware, engine, interactivity): $/M and throughput without HiSparse, with the
    buffer alone, and with the trace's misses (and their band); capacity gain and fetch cost
    in $/M total tokens.

    ``overlap``: fetches hidden behind the layer's work (HiSparse's plan-then-IO path);
    otherwise each decode step waits for them (HiSparse v1).
    """
    if get_model(cfg.model).index_topk <= 0:
        raise ToolkitError(f"{cfg.model} is a dense model: HiSparse needs a DSA model")
    cfg = replace(cfg, measured=False, measurements=None)
    hs = {"device_buffer_tokens": float(misses.buffer_tokens),
          "hisparse_overlap": 1.0 if overlap else 0.0}
    runs = {"": compare(cfg, params),
            "_buffer_only": compare(cfg, params, what_if={**hs, "miss_rows_per_layer": 0.0}),
            "_hisparse": compare(cfg, params, what_if={
                **hs, "miss_rows_per_layer": misses.miss_rows_per_layer})}
    if misses.miss_rows_per_layer_high != misses.miss_rows_per_layer:
        for tag, m in (("_misses_low", misses.miss_rows_per_layer_low),
                       ("_misses_high", misses.miss_rows_per_layer_high)):
            runs[tag] = compare(cfg, params, what_if={**hs, "miss_rows_per_layer": m})
    cols = ("usd_per_mtok_total", "tput_per_gpu", "reachable", "layout", "gpus")
    out = runs[""].select(*KEYS, *cols)
    for tag, df in list(runs.items())[1:]:
        keep = cols if tag in ("_hisparse", "_buffer_only") else ("usd_per_mtok_total",)
        out = out.join(df.select(*KEYS, *(pl.col(c).alias(c + tag) for c in keep)), on=KEYS,
                       how="left")
    usd, usd0 = pl.col("usd_per_mtok_total"), pl.col("usd_per_mtok_total_buffer_only")
    out = out.with_columns(
        (usd - usd0).alias("capacity_gain_usd_per_mtok"),
        (pl.col("usd_per_mtok_total_hisparse") - usd0).alias("fetch_cost_usd_per_mtok"),
        (pl.col("tput_per_gpu_hisparse") / pl.col("tput_per_gpu")).alias(
            "tput_ratio_hisparse"),
        (pl.col("usd_per_mtok_total_hisparse") / usd).alias("cost_ratio_hisparse"))
    return out


def meta(misses: TraceMisses, overlap: bool) -> dict:
    """What the answer rests on, for the CLI header and ``--json``."""
    return {"selections": asdict(misses), "hisparse_overlap": overlap,
            "hisparse_note": (
                "all three answers from the serving model (measured points know nothing of "
                "HiSparse): without HiSparse; device buffer only (zero misses); with the "
                "trace's misses. capacity_gain = $/M without - $/M buffer only; fetch_cost = "
                "$/M with misses - $/M buffer only")}
