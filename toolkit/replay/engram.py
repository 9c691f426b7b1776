"""Replay an Engram lookup trace through an HBM row cache over a DRAM or SSD backing store.

The key of a lookup is its row in one global row space (every (layer, order, head) table
laid end to end, sizes from the trace metadata); keys are remapped densely in first-seen
order by a compiled pass, then replayed by any registered policy in one compiled call. The
cache is shared by all requests (the tables are model weights, not per-request state) and
sized in rows: ``floor(hbm_cache_bytes / row_bytes)``. Lookups are replayed in recorded
order: request by request, position by position, layer, order, head.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.policies import policies
from toolkit.replay.config import EngramReplayConfig
from toolkit.runtime.aot import nb
from toolkit.store import Store


@dataclass(frozen=True)
class EngramStream:
    """Global keys of a trace in replay order, plus what the metadata says about them."""

    keys: np.ndarray
    n_keys: int
    tokens: int
    row_bytes: int
    layer_ids: tuple[int, ...]
    lookups_per_token_layer: int


@nb.njit(cache=True, nogil=True)
def dense_remap(keys, n_keys):  # pragma: no cover - compiled
    """Keys renumbered 0.. in first-seen order (int32) and how many distinct keys there are."""
    ids = np.full(n_keys, -1, dtype=np.int32)
    out = np.empty(keys.shape[0], dtype=np.int32)
    n = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        d = ids[k]
        if d < 0:
            d = n
            ids[k] = n
            n += 1
        out[i] = d
    return out, n


@nb.njit(cache=True, nogil=True)
def rows_to_dense(rows, table_offsets, n_keys):  # pragma: no cover - compiled
    """Global keys ``rows[i] + table_offsets[i % per_token]`` remapped densely (first seen),
    with the lookup count of every dense key: one pass, no key array materialised."""
    per_token = table_offsets.shape[0]
    ids = np.full(n_keys, -1, dtype=np.int32)
    out = np.empty(rows.shape[0], dtype=np.int32)
    counts = np.zeros(min(n_keys, rows.shape[0]) + 1, dtype=np.int64)
    n = 0
    j = 0
    for i in range(rows.shape[0]):
        k = rows[i] + table_offsets[j]
        j += 1
        if j == per_token:
            j = 0
        d = ids[k]
        if d < 0:
            d = n
            ids[k] = n
            n += 1
        out[i] = d
        counts[d] += 1
    return out, n, counts[:n]


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def trace_meta(store: Store, trace: str) -> dict[str, Any]:
    """The ``engram_traces`` row of ``trace``."""
    if trace not in store.keys("engram_traces"):
        known = ", ".join(store.keys("engram_traces")) or "none"
        raise ToolkitError(f"no engram trace named {trace!r} in {store.root}; known: {known}")
    return store.read("engram_traces", trace).to_pylist()[0]


def load_stream(store: Store, trace: str) -> EngramStream:
    """A trace's lookups as global row keys (every table laid end to end), in replay order.

    Slow-path twin of :func:`load_dense` (reads the layer/ngram/head columns; tests).
    """
    meta = trace_meta(store, trace)
    cfg = json.loads(meta["config_json"])
    primes = np.asarray(json.loads(meta["primes_json"]), dtype=np.int64)
    flat = primes.ravel()
    offsets = (np.cumsum(flat) - flat).reshape(primes.shape)
    layer_ids, orders = cfg["layer_ids"], cfg["ngram_orders"]
    tab = store.query_arrow(
        "SELECT layer, ngram, head, row FROM engram_lookups "
        f"WHERE trace = {_quote(trace)}")
    layer = tab.column("layer").to_numpy()
    ngram = tab.column("ngram").to_numpy()
    head = tab.column("head").to_numpy().astype(np.int64)
    row = tab.column("row").to_numpy()
    li = np.full(max(layer_ids) + 1, -1, dtype=np.int64)
    li[np.asarray(layer_ids)] = np.arange(len(layer_ids))
    oi = np.full(max(orders) + 1, -1, dtype=np.int64)
    oi[np.asarray(orders)] = np.arange(len(orders))
    keys = offsets.reshape(-1)[(li[layer] * len(orders) + oi[ngram]) * primes.shape[2] + head] + row
    return EngramStream(keys, int(flat.sum()), int(meta["tokens"]), int(meta["row_bytes"]),
                        tuple(layer_ids), len(orders) * primes.shape[2])


@dataclass(frozen=True)
class DenseStream:
    """Dense keys of a trace (first-seen order) with per-key lookup counts."""

    keys: np.ndarray
    n_distinct: int
    counts: np.ndarray
    tokens: int
    row_bytes: int
    layer_ids: tuple[int, ...]
    lookups_per_token_layer: int


def load_dense(store: Store, trace: str) -> DenseStream:
    """Fast path: read only ``row`` and rebuild the table of each lookup from its index.

    The recorder writes lookups position by position, each position's rows in (layer,
    order, head) order, so lookup ``i`` belongs to table ``i % lookups_per_token``; the row
    count is checked against ``tokens x lookups_per_token`` from the metadata.
    """
    meta = trace_meta(store, trace)
    cfg = json.loads(meta["config_json"])
    primes = np.asarray(json.loads(meta["primes_json"]), dtype=np.int64)
    flat = primes.ravel()
    offsets = np.cumsum(flat) - flat
    rows = store.query_arrow(
        f"SELECT row FROM engram_lookups WHERE trace = {_quote(trace)}").column("row")
    rows = rows.to_numpy()
    if rows.size != int(meta["tokens"]) * flat.size:
        raise ToolkitError(f"engram trace {trace!r}: {rows.size} lookups stored, metadata says "
                           f"{meta['tokens']} tokens x {flat.size} tables; re-record it")
    dense, n, counts = rows_to_dense(rows, offsets, int(flat.sum()))
    return DenseStream(dense, int(n), counts, int(meta["tokens"]), int(meta["row_bytes"]),
                       tuple(cfg["layer_ids"]), len(cfg["ngram_orders"]) * primes.shape[2])


def reuse_shares(dense: np.ndarray, n_distinct: int,
                 fractions: tuple[float, ...] = (0.01, 0.10),
                 counts: np.ndarray | None = None) -> tuple[float, ...]:
    """Share of lookups served by the hottest ``fraction`` of the distinct rows touched."""
    if dense.size == 0:
        return tuple(0.0 for _ in fractions)
    if counts is None:
        counts = np.bincount(dense, minlength=n_distinct)
    out = []
    for f in fractions:
        k = max(1, int(np.ceil(f * n_distinct)))
        out.append(float(np.partition(counts, n_distinct - k)[n_distinct - k:].sum() / dense.size))
    return tuple(out)


@dataclass(frozen=True)
class EngramCounts:
    """What an Engram replay counts; :func:`toolkit.cost.engram.run_engram` prices it."""

    stream: DenseStream
    capacity_rows: int
    lookups: int
    hits: int
    hottest_1pct_share: float
    hottest_10pct_share: float
    load_s: float
    replay_s: float

    @property
    def misses(self) -> int:
        return self.lookups - self.hits

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.lookups if self.lookups else 0.0


def replay_engram(store: Store, cfg: EngramReplayConfig) -> EngramCounts:
    """Replay ``cfg.trace``'s lookups through an HBM row cache of ``cfg.hbm_cache_bytes``."""
    t0 = time.perf_counter()
    stream = load_dense(store, cfg.trace)
    dense, n_distinct = stream.keys, stream.n_distinct
    t_load = time.perf_counter() - t0
    t1 = time.perf_counter()
    capacity = int(cfg.hbm_cache_bytes // stream.row_bytes)
    # a cache holding every distinct row behaves alike at any larger size; kernels size
    # their arrays by capacity, so clamp
    sim = policies.get(cfg.policy).simulate(dense, max(n_distinct, 1), min(capacity, n_distinct))
    top1, top10 = reuse_shares(dense, n_distinct, counts=stream.counts)
    t_replay = time.perf_counter() - t1
    return EngramCounts(stream, capacity, int(dense.size), sim.hit_count, top1, top10,
                        t_load, t_replay)
