"""Streaming SYNTHETIC selection traces, generated in compiled code, for billions of positions.

SYNTHETIC: nothing here is measured. Same model as :mod:`toolkit.synth.selections` (sinks,
recency window, middle positions carried over from the previous layer and the previous
step, fresh uniform picks for the rest), drawn with numba's generator seeded per
request, so a request's rows do not depend on how requests are batched or threaded.
Rows are written as they are made, one batch of requests at a time, so memory stays
bounded by the batch whatever the trace size.
"""

from __future__ import annotations

from collections.abc import Callable

import numba as nb
import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.config import config_json
from toolkit.replay.parallel import resolve_workers, thread_map
from toolkit.store import Store
from toolkit.synth.selections import SyntheticSelectionConfig

BATCH_POSITIONS = 1 << 25  # ~32 M positions (128 MB int32) per written batch


@nb.njit(cache=True, nogil=True)
def _pick(pool, n_pool, want, mark, chosen, c):  # pragma: no cover - compiled
    """Move ``want`` random unmarked entries of ``pool[:n_pool]`` into ``chosen[c:]``."""
    for i in range(want):
        j = i + np.random.randint(0, n_pool - i)
        pool[i], pool[j] = pool[j], pool[i]
        v = pool[i]
        mark[v] = 1
        chosen[c] = v
        c += 1
    return c


@nb.njit(cache=True, nogil=True)
def _request_rows(seed, req, prompt, steps, layers, k, sinks, recent, step_ret,
                  layer_ret, values, offsets):  # pragma: no cover - compiled
    """Rows of one request in (step, layer) order into ``values``/``offsets``; returns
    the number of positions written."""
    np.random.seed((seed * 1_000_003 + req) & 0x7FFFFFFF)
    m = k - sinks - recent
    max_len = prompt + steps
    mark = np.zeros(max_len + 1, dtype=np.uint8)
    prev_step = np.empty((layers, max(m, 1)), dtype=np.int32)
    has_step = np.zeros(layers, dtype=np.bool_)
    prev_layer = np.empty(max(m, 1), dtype=np.int32)
    pool = np.empty(max(m, 1), dtype=np.int32)
    chosen = np.empty(max(m, 1), dtype=np.int32)
    pos = 0
    row = 0
    for step in range(steps):
        seq_len = prompt + step + 1
        has_layer = False
        for layer in range(layers):
            offsets[row] = pos
            row += 1
            if seq_len <= k:
                for i in range(seq_len):
                    values[pos + i] = i
                pos += seq_len
                has_layer = False
                has_step[layer] = False
                continue
            lo = sinks
            hi = seq_len - recent
            c = 0
            if has_layer and m > 0:
                for i in range(m):
                    pool[i] = prev_layer[i]
                c = _pick(pool, m, int(round(layer_ret * m)), mark, chosen, c)
            if has_step[layer] and c < m:
                n_pool = 0
                for i in range(m):
                    v = prev_step[layer, i]
                    if mark[v] == 0:
                        pool[n_pool] = v
                        n_pool += 1
                want = min(n_pool, int(round(step_ret * (m - c))))
                c = _pick(pool, n_pool, want, mark, chosen, c)
            while c < m:
                v = np.random.randint(lo, hi)
                if mark[v] == 0:
                    mark[v] = 1
                    chosen[c] = v
                    c += 1
            mid = np.sort(chosen[:m])
            for i in range(m):
                mark[mid[i]] = 0
                prev_layer[i] = mid[i]
                prev_step[layer, i] = mid[i]
            has_layer = True
            has_step[layer] = True
            for i in range(sinks):
                values[pos + i] = i
            pos += sinks
            for i in range(m):
                values[pos + i] = mid[i]
            pos += m
            for i in range(recent):
                values[pos + i] = hi + i
            pos += recent
    offsets[row] = pos
    return pos


def request_table(cfg: SyntheticSelectionConfig, trace: str, req: int) -> pa.Table:
    """The ``selections`` rows of one request, in (step, layer) order."""
    n_rows = cfg.steps * cfg.layers
    bound = sum(min(cfg.prompt_tokens + s + 1, cfg.k) for s in range(cfg.steps)) * cfg.layers
    values = np.empty(bound, dtype=np.int32)
    offsets = np.empty(n_rows + 1, dtype=np.int32)
    _request_rows(cfg.seed, req, cfg.prompt_tokens, cfg.steps, cfg.layers, cfg.k, cfg.sinks,
                  cfg.recent_window, cfg.step_retention, cfg.layer_retention, values, offsets)
    step = np.repeat(np.arange(cfg.steps, dtype=np.int32), cfg.layers)
    return pa.table({
        "trace": pa.repeat(pa.scalar(trace, pa.string()), n_rows),
        "request_id": np.full(n_rows, req, dtype=np.int64),
        "step": step,
        "layer": np.tile(np.arange(cfg.layers, dtype=np.int16), cfg.steps),
        "seq_len": (cfg.prompt_tokens + 1 + step).astype(np.int32),
        "topk": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values),
                                         type=schema.SELECTIONS.field("topk").type),
    }, schema=schema.SELECTIONS)


def write_streaming(store: Store, cfg: SyntheticSelectionConfig, trace: str, *,
                    replace: bool = False, workers: int | None = None,
                    on_batch: Callable[[int], None] | None = None) -> int:
    """Generate ``cfg`` into the store request batch by request batch; returns rows.

    Requests of a batch are generated on ``workers`` threads; ``on_batch(positions)``
    reports progress. The trace's metadata is written after its rows, and the rows are
    removed again if that fails, so a trace is either complete or absent.
    """
    n_workers = resolve_workers(workers)
    if cfg.prompt_tokens + cfg.steps >= 2**31 - 1:
        raise ValueError("prompt_tokens + steps must stay below 2**31 (int32 positions)")
    per_request = sum(min(cfg.prompt_tokens + s + 1, cfg.k) for s in range(cfg.steps)) \
        * cfg.layers
    if per_request >= 2**31:
        raise ValueError("one request must hold fewer than 2**31 positions (int32 offsets)")
    batch = max(n_workers, min(cfg.requests, BATCH_POSITIONS // max(per_request, 1),
                               4 * n_workers))
    rows = 0
    with store.writer("selections", trace, replace=replace) as sink:
        for first in range(0, cfg.requests, batch):
            reqs = range(first, min(first + batch, cfg.requests))
            for t in thread_map(lambda r: request_table(cfg, trace, r), reqs, n_workers):
                sink.write(t)
                rows += t.num_rows
            if on_batch is not None:
                on_batch(per_request * len(reqs))
    source = "SYNTHETIC toolkit.synth.selections_fast " + config_json(cfg)
    meta = {
        "selection_traces": pa.table({
            "trace": [trace], "model": ["synthetic"], "k": [cfg.k], "score": ["synthetic"],
            "order": ["position"], "n_layers": [cfg.layers], "synthetic": [True],
            "source": [source]}, schema=schema.SELECTION_TRACES),
        "selection_requests": pa.table({
            "trace": [trace] * cfg.requests, "request_id": np.arange(cfg.requests),
            "prompt_tokens": np.full(cfg.requests, cfg.prompt_tokens, dtype=np.int32),
            "source_text": ["synthetic"] * cfg.requests,
            "external_id": pa.nulls(cfg.requests, pa.string())},
            schema=schema.SELECTION_REQUESTS),
    }
    try:
        store.write_many(meta, trace, replace=True)
    except BaseException:
        store.delete("selections", trace)
        raise
    return rows
