"""Streaming SYNTHETIC selection traces, generated in compiled code, for billions of positions.

SYNTHETIC: nothing here is measured. Same model as :mod:`toolkit.synth.selections` (sinks,
recency window, middle positions carried over from the previous layer and the previous
step, fresh uniform picks for the rest), drawn with an xorshift64* generator seeded per
request, so a request's rows do not depend on how requests are batched or threaded.
Rows are written as they are made, one request at a time (a few requests in flight), so
memory stays bounded by a request whatever the trace size. Carried-over positions are drawn by
selection sampling, which keeps them sorted, so a row is a 3-way merge rather than a sort.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.config import config_json
from toolkit.runtime.aot import nb
from toolkit.runtime.pool import ordered_results, resolve_workers
from toolkit.store import Store
from toolkit.synth.selections import SyntheticSelectionConfig


@nb.njit(cache=True, nogil=True, inline="always")
def _next(state):  # pragma: no cover - compiled
    """xorshift64* step: a few ns per draw, where numba's Mersenne Twister call costs ~15."""
    x = state[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    state[0] = x
    return x * np.uint64(2685821657736338717)


@nb.njit(cache=True, nogil=True, inline="always")
def _below(state, n):  # pragma: no cover - compiled
    """Uniform integer in [0, n) (n < 2**32) by multiply-shift."""
    return np.int64(((_next(state) >> np.uint64(32)) * np.uint64(n)) >> np.uint64(32))


@nb.njit(cache=True, nogil=True)
def _sample_sorted(pool, n_pool, want, state, mark, out):  # pragma: no cover - compiled
    """Knuth's selection sampling: ``want`` of ``pool[:n_pool]`` uniformly at random, kept
    in pool order (sorted in, sorted out, so no sort afterwards); marks the chosen."""
    c = 0
    for i in range(n_pool):
        if c == want:
            break
        if _below(state, n_pool - i) < want - c:
            v = pool[i]
            out[c] = v
            mark[v] = 1
            c += 1
    return c


@nb.njit(cache=True, nogil=True)
def _merge3(a, na, b, nb_, c, nc, out, o):  # pragma: no cover - compiled
    """Merge three sorted, disjoint runs into ``out[o:]``."""
    i = j = q = 0
    big = np.int32(2**31 - 1)
    for _ in range(na + nb_ + nc):
        x = a[i] if i < na else big
        y = b[j] if j < nb_ else big
        z = c[q] if q < nc else big
        if x < y and x < z:
            out[o] = x
            i += 1
        elif y < z:
            out[o] = y
            j += 1
        else:
            out[o] = z
            q += 1
        o += 1
    return o


@nb.njit(cache=True, nogil=True)
def _request_rows(seed, req, prompt, steps, layers, k, sinks, recent, step_ret,
                  layer_ret, values, offsets):  # pragma: no cover - compiled
    """Rows of one request in (step, layer) order into ``values``/``offsets``; returns
    the number of positions written."""
    state = np.empty(1, dtype=np.uint64)
    state[0] = np.uint64((seed * 1_000_003 + req) * 2 + 1) * np.uint64(0x9E3779B97F4A7C15)
    for _ in range(4):
        _next(state)
    m = k - sinks - recent
    mm = max(m, 1)
    mark = np.zeros(prompt + steps + 1, dtype=np.uint8)
    prev_step = np.empty((layers, mm), dtype=np.int32)
    has_step = np.zeros(layers, dtype=np.bool_)
    prev_layer = np.empty(mm, dtype=np.int32)
    from_layer = np.empty(mm, dtype=np.int32)
    from_step = np.empty(mm, dtype=np.int32)
    fresh = np.empty(mm, dtype=np.int32)
    pool = np.empty(mm, dtype=np.int32)
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
            hi = seq_len - recent
            na = 0
            nb_ = 0
            if has_layer and m > 0:
                na = _sample_sorted(prev_layer, m, int(round(layer_ret * m)), state, mark,
                                    from_layer)
            if has_step[layer] and na < m:
                n_pool = 0
                for i in range(m):
                    v = prev_step[layer, i]
                    if mark[v] == 0:
                        pool[n_pool] = v
                        n_pool += 1
                want = min(n_pool, int(round(step_ret * (m - na))))
                nb_ = _sample_sorted(pool, n_pool, want, state, mark, from_step)
            nc = 0
            while na + nb_ + nc < m:
                v = sinks + _below(state, hi - sinks)
                if mark[v] == 0:
                    mark[v] = 1
                    fresh[nc] = v
                    nc += 1
            fresh[:nc] = np.sort(fresh[:nc])
            for i in range(sinks):
                values[pos + i] = i
            pos += sinks
            start = pos
            pos = _merge3(from_layer, na, from_step, nb_, fresh, nc, values, pos)
            for i in range(m):
                v = values[start + i]
                mark[v] = 0
                prev_layer[i] = v
                prev_step[layer, i] = v
            has_layer = True
            has_step[layer] = True
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
    """Generate ``cfg`` into the store request by request; returns rows.

    Requests are generated on ``workers`` threads, in order, while the calling thread
    writes; ``on_batch(positions)`` reports progress after each request. Rows and
    metadata are one store transaction, so a trace is either complete or absent.
    """
    n_workers = resolve_workers(workers)
    if cfg.prompt_tokens + cfg.steps >= 2**31 - 1:
        raise ValueError("prompt_tokens + steps must stay below 2**31 (int32 positions)")
    per_request = sum(min(cfg.prompt_tokens + s + 1, cfg.k) for s in range(cfg.steps)) \
        * cfg.layers
    if per_request >= 2**31:
        raise ValueError("one request must hold fewer than 2**31 positions (int32 offsets)")
    rows = 0
    work = [functools.partial(request_table, cfg, trace, r) for r in range(cfg.requests)]
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
    # one transaction: the rows and the metadata land together or not at all
    with store.writer("selections", trace, replace=replace) as sink:
        # requests are generated on worker threads while this thread encodes and writes
        # the previous ones; at most workers + 1 requests are held at once
        for t in ordered_results(work, n_workers):
            sink.write(t)
            rows += t.num_rows
            if on_batch is not None:
                on_batch(per_request)
        store.write_many(meta, trace, replace=replace)
    return rows
