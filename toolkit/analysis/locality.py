"""Locality of top-k selections: the statistics that decide device-buffer miss rates.

Thin functions over the named queries (so the CLI, notebooks and charts agree), plus the
IndexShare overlap, which needs the Full/Shared pattern as input.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from toolkit.analysis.queries import run_query
from toolkit.replay.selections import anchor_layers
from toolkit.store import Store


def position_mix(store: Store, trace: str | None = None, *, window: int = 128,
                 sinks: int = 4) -> pl.DataFrame:
    """Per (trace, layer): share of selections in the last ``window`` positions, in the
    first ``sinks`` positions, and how often position 0 is selected."""
    return run_query(store, "selection_position_mix", trace=trace, window=window, sinks=sinks)


def layer_overlap(store: Store, trace: str | None = None) -> pl.DataFrame:
    """Per (trace, layer l): Jaccard and |A∩B|/k between layers l and l+1."""
    return run_query(store, "selection_layer_overlap", trace=trace)


def step_overlap(store: Store, trace: str | None = None) -> pl.DataFrame:
    """Per (trace, layer): Jaccard and |A∩B|/k between consecutive recorded steps."""
    return run_query(store, "selection_step_overlap", trace=trace)


def indexshare_overlap(store: Store, trace: str, full_layers: tuple[int, ...]) -> pl.DataFrame:
    """Per Shared layer: overlap between its own selection and its Full layer's, i.e. how
    much of what it would have picked IndexShare still gives it."""
    n_layers = store.query(
        "SELECT n_layers FROM selection_traces WHERE trace = $trace", {"trace": trace}).item()
    anc = anchor_layers(np.arange(n_layers), full_layers)
    share = pa.table({"layer": np.arange(n_layers, dtype=np.int16),
                      "anchor": anc.astype(np.int16)})
    con = store.con
    con.register("indexshare_map", share)
    try:
        return store.con.sql("""
            WITH s AS (SELECT * FROM selections WHERE trace = $trace)
            SELECT m.layer, m.anchor, count(*) AS pairs,
                   avg(len(list_intersect(a.topk, b.topk))
                       / (len(a.topk) + len(b.topk) - len(list_intersect(a.topk, b.topk)))
                       ::DOUBLE) AS jaccard,
                   avg(len(list_intersect(a.topk, b.topk)) / t.k::DOUBLE) AS overlap_of_k
            FROM indexshare_map m
            JOIN s a ON a.layer = m.layer
            JOIN s b ON b.request_id = a.request_id AND b.step = a.step AND b.layer = m.anchor
            JOIN selection_traces t ON t.trace = a.trace
            WHERE m.layer <> m.anchor
            GROUP BY m.layer, m.anchor ORDER BY m.layer
        """, params={"trace": trace}).pl()
    finally:
        con.unregister("indexshare_map")
