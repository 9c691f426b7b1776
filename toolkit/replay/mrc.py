"""LRU miss-ratio curve in one pass (Mattson stack distances, Fenwick tree over time).

LRU has the stack property, so one pass that measures each access's reuse distance
(distinct keys touched since the previous access to the same key, plus one) gives the
miss count for every capacity at once, instead of one replay per size. The Fenwick tree
marks the latest access time of every key, so a distance is one prefix-sum query.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from toolkit.policies import as_segments, check_keys, compact_keys
from toolkit.runtime.aot import nb
from toolkit.runtime.memory import check_memory
from toolkit.runtime.pool import ordered_results, resolve_workers, split_at, thread_map
from toolkit.store import Store, bounded_key


class Stream(NamedTuple):
    """A dense key stream with its cold-restart offsets (``None``: one segment)."""

    keys: np.ndarray
    n_keys: int
    segments: np.ndarray | None


@nb.njit(cache=True, nogil=True)
def _distance_histogram(keys, n_keys, segments, max_capacity):  # pragma: no cover - compiled
    """``hist[d]`` = accesses with stack distance ``d`` (1..max_capacity); cold or farther
    accesses are not counted (they miss at every capacity up to ``max_capacity``)."""
    hist = np.zeros(max_capacity + 1, dtype=np.int64)
    last = np.full(n_keys, -1, dtype=np.int64)  # latest access time in this segment
    n = keys.shape[0]
    n_seg = segments.shape[0]
    longest = 0
    for s in range(n_seg):
        hi = segments[s + 1] if s + 1 < n_seg else n
        longest = max(longest, hi - segments[s])
    tree = np.zeros(longest + 1, dtype=np.int32)  # 1-based Fenwick tree over times
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        m = hi - lo
        tree[: m + 1] = 0
        live = 0  # marked times = distinct keys so far
        for t in range(m):
            k = keys[lo + t]
            prev = last[k]
            if prev >= 0:
                # distinct keys touched after prev = marks in (prev, t) = live - marks in [0, prev]
                j = prev + 1
                upto = 0
                while j > 0:
                    upto += tree[j]
                    j -= j & (-j)
                d = live - upto + 1
                if d <= max_capacity:
                    hist[d] += 1
                j = prev + 1
                while j <= m:
                    tree[j] -= 1
                    j += j & (-j)
                live -= 1
            j = t + 1
            while j <= m:
                tree[j] += 1
                j += j & (-j)
            live += 1
            last[k] = t
        for i in range(lo, hi):
            last[keys[i]] = -1
    return hist


def distinct_keys(keys: np.ndarray, n_keys: int) -> int:
    """How many different keys ``keys`` holds (each ``< n_keys``)."""
    if keys.size == 0:
        return 0
    if n_keys <= 4 * keys.size + 65_536:
        return int(np.count_nonzero(np.bincount(keys, minlength=n_keys)))
    return int(np.unique(keys).size)


def _add_flat(curves: list[np.ndarray]) -> np.ndarray:
    """Sum miss curves of different lengths, each flat beyond its end."""
    size = max(c.size for c in curves)
    total = np.zeros(size, dtype=np.int64)
    for c in curves:
        total[:c.size] += c
        total[c.size:] += c[-1]
    return total


def lru_miss_curve(
    keys: np.ndarray,
    n_keys: int,
    max_capacity: int,
    segments: np.ndarray | None = None,
    workers: int | None = 1,
    *,
    pad: bool = True,
) -> np.ndarray:
    """LRU miss counts for every capacity ``0..max_capacity`` (index = capacity).

    Equal to ``LRU().simulate(keys, n_keys, c, segments).miss_count`` for each ``c``;
    every segment restarts cold, so its first access to each key misses at any size.
    Segments are independent, so with ``workers`` threads (``None`` = every core) groups
    of segments are measured in parallel and their histograms added: same result.
    Reuse distances never exceed the distinct keys, so the curve is flat beyond them:
    ``pad=False`` stops it there (its length is then bounded by the work, whatever
    ``max_capacity`` asks), ``pad=True`` repeats the last value up to ``max_capacity``.
    """
    keys = check_keys(keys, n_keys)
    if max_capacity < 0:
        raise ValueError(f"max_capacity must be >= 0, got {max_capacity}")
    keys, n_keys = compact_keys(keys, n_keys)
    requested = int(max_capacity)
    max_capacity = min(requested, distinct_keys(keys, int(n_keys)))
    check_memory(8.0 * (requested if pad else max_capacity) + 16.0 * n_keys + 12.0 * keys.size,
                 f"a miss curve to capacity {requested:,} over {keys.size:,} accesses")
    seg = as_segments(segments, keys.size)
    bounds = np.r_[seg, keys.size]
    parts = split_at(bounds, bounds, resolve_workers(workers))

    def hist(part: tuple[int, int]) -> np.ndarray:
        lo, hi = part
        inner = seg[(seg >= lo) & (seg < hi)] - lo
        return _distance_histogram(keys[lo:hi], int(n_keys), inner, int(max_capacity))

    total = np.zeros(max_capacity + 1, dtype=np.int64)
    for h in thread_map(hist, parts, resolve_workers(workers)):
        total += h
    curve = keys.size - np.cumsum(total)
    if pad and requested > max_capacity:
        curve = np.concatenate([curve, np.full(requested - max_capacity, curve[-1])])
    return curve


def _selection_chunks(store: Store, trace: str) -> tuple[list[Any], Callable[[Any], Stream]]:
    """A stored selection trace's chunks and the function that plans one into its
    plain-mode stream: every (request, layer) buffer is its own segment, so whatever is
    measured per chunk adds up over chunks (bounded memory)."""
    from toolkit.replay.selection_plan import fused_plan
    from toolkit.replay.selections import (
        CHUNK_ACCESSES,
        _order,
        chunk_specs,
        read_chunk,
        thread_scratch,
        trace_facts,
    )

    k, path, md = trace_facts(store, trace)
    specs = chunk_specs(path, max(1, CHUNK_ACCESSES // max(k, 1)), md)

    def plan(spec: Any) -> Stream:
        rows = read_chunk(path, spec, k, thread_scratch(), md)  # planned before the next read
        o = _order(rows, None)
        p = fused_plan(rows.values, rows.offsets, o.src, o.seq_len, o.new_group, 1, "plain",
                       "first")
        return Stream(p.keys, int(max(rows.seq_len.max(initial=0), 1)), p.segments)

    return list(specs), plan


def _selection_curve(store: Store, trace: str, max_capacity: int,
                     workers: int | None) -> tuple[np.ndarray, int]:
    """Plain-mode curve of a stored selection trace, chunk by chunk."""
    specs, plan = _selection_chunks(store, trace)
    n_workers = resolve_workers(workers)
    inner = n_workers if len(specs) == 1 else 1  # one chunk: split its buffers instead

    def curve(spec: object) -> tuple[np.ndarray, np.ndarray]:
        st = plan(spec)
        return (lru_miss_curve(st.keys, st.n_keys, max_capacity, st.segments, inner,
                               pad=False), np.unique(st.keys))

    work = [functools.partial(curve, spec) for spec in specs]
    curves, positions = [], np.zeros(0, dtype=np.int64)
    for c, pos in ordered_results(work, n_workers if len(specs) > 1 else 1):
        curves.append(c)
        positions = np.union1d(positions, pos)
    # the trace's distinct positions, whatever the chunking: every chunk's curve is flat
    # beyond its own distinct positions, which are at most these
    stop = min(max_capacity, positions.size)
    total = _add_flat([*curves, np.zeros(stop + 1, dtype=np.int64)])
    n = int(total[0])  # capacity 0: every access misses
    return total, n


def miss_curve_table(store: Store, trace: str, kind: str, max_capacity: int | None = None,
                     *, save: bool = True, workers: int | None = None) -> pa.Table:
    """One-pass LRU miss curve of a stored trace, as a ``miss_curves`` table.

    ``kind="selections"``: plain-mode streams (one cold buffer per request x layer,
    positions ascending within a step). ``kind="prefix"``: the prefix-block stream of a
    request timeline. ``kind="engram"``: an Engram lookup trace's rows, one HBM row cache.
    The curve stops at ``max_capacity`` or at the trace's distinct keys, whichever is
    smaller (``None``: at the distinct keys), since it is flat beyond them; its last
    ``capacity`` says where it stopped. Written to the store under ``<kind>-<trace>``
    when ``save``.
    """
    if max_capacity is None:
        max_capacity = np.iinfo(np.int64).max // 16
    if max_capacity < 0:
        raise ValueError(f"max_capacity must be >= 0, got {max_capacity}")
    if kind == "selections":
        misses, n = _selection_curve(store, trace, max_capacity, workers)
    elif kind == "prefix":
        from toolkit.replay.prefix import load_stream

        stream = load_stream(store, trace, workers)
        n = stream.keys.size
        misses = lru_miss_curve(stream.keys, stream.n_keys, max_capacity, None, workers,
                                pad=False)
    elif kind == "engram":
        from toolkit.replay.engram import load_dense

        dense = load_dense(store, trace)
        n = dense.keys.size
        misses = lru_miss_curve(dense.keys, dense.n_distinct, max_capacity, None, workers,
                                pad=False)
    else:
        raise ValueError(f"kind must be 'selections', 'prefix' or 'engram', got {kind!r}")
    table = pa.table({
        "trace": pa.repeat(pa.scalar(trace), misses.size),
        "kind": pa.repeat(pa.scalar(kind), misses.size),
        "capacity": np.arange(misses.size, dtype=np.int64),
        "accesses": np.full(misses.size, n, dtype=np.int64), "misses": misses.astype(np.int64),
        "miss_ratio": misses / n if n else np.zeros(misses.size),
    })
    if save:
        store.write("miss_curves", bounded_key(f"{kind}-{trace}"), table, replace=True)
    return table


DEFAULT_SAMPLE_KEYS = 65_536
"""Distinct keys a sampled curve keeps when neither rate nor size is given: the fixed-size
SHARDS default. A trace with fewer distinct (buffer, key) pairs is replayed exactly."""


@dataclass(frozen=True)
class PolicyCurve:
    """A policy's miss ratio at each size, exact or estimated from a sampled stream.

    Attributes:
        sizes: cache sizes (slots, blocks or rows), as asked.
        miss_ratio: per size; exact when ``sample_rate == 1``.
        misses: per size, estimated misses of the whole stream (``miss_ratio * accesses``).
        accesses: accesses of the whole stream.
        sample_rate: keys kept (1.0: every key, the curve is exact).
        sampled_accesses: accesses of the sampled stream the mini caches replayed.
        method: ``exact`` (per-size replays), ``stack`` (LRU one pass), ``shards`` (LRU
            one pass over the sample) or ``minisim`` (per-size mini caches).
    """

    sizes: np.ndarray
    miss_ratio: np.ndarray
    misses: np.ndarray
    accesses: int
    sample_rate: float
    sampled_accesses: int
    method: str


def _threshold(streams: Callable[[], Iterable[tuple[int, Stream]]], sample_rate: float | None,
               sample_keys: int | None, salt: int) -> int:
    from toolkit.replay.shards import (
        HASH_SPACE,
        smallest_hashes,
        threshold_for_keys,
        threshold_for_rate,
    )

    if sample_rate is not None and sample_keys is not None:
        raise ValueError("give --sample-rate or --sample-keys, not both")
    if sample_rate is not None:
        return threshold_for_rate(sample_rate)
    count = DEFAULT_SAMPLE_KEYS if sample_keys is None else int(sample_keys)
    if count < 1:
        raise ValueError(f"--sample-keys must be >= 1, got {count}")
    best = np.zeros(0, dtype=np.int64)
    for base, st in streams():  # a first pass: the ``count`` smallest hashes over chunks
        seg = as_segments(st.segments, st.keys.size)
        h = smallest_hashes(check_keys(st.keys, st.n_keys), st.n_keys, seg, count + 1, salt,
                            base)
        best = np.sort(np.concatenate([best, h]))[: count + 1]
    return HASH_SPACE if best.size <= count else threshold_for_keys(best, count)


def policy_miss_curve(
    streams: Callable[[], Iterable[tuple[int, Stream]]],
    sizes: Iterable[int],
    policy: str = "lru",
    *,
    sample_rate: float | None = None,
    sample_keys: int | None = None,
    salt: int = 0,
    workers: int | None = 1,
) -> PolicyCurve:
    """Miss ratios of ``policy`` at ``sizes`` over one or more independent streams.

    Args:
        streams: called once per pass; yields ``(segment id base, Stream)`` per chunk
            (chunks restart cold, so their misses add up). The base keeps the sampling hash
            of one chunk's segments apart from another's.
        sizes: cache sizes.
        policy: a registered policy name.
        sample_rate: keep this share of the keys (``1``: exact replays).
        sample_keys: keep this many distinct keys (fixed-size SHARDS); the default when
            neither is given is :data:`DEFAULT_SAMPLE_KEYS`.
        salt: seeds the key hash (another salt, another sample).
        workers: threads over sizes for the per-size replays.
    """
    from toolkit.policies import policies
    from toolkit.replay.shards import HASH_SPACE, dense_keys, mini_capacity, sample_stream

    sizes = np.asarray(list(sizes), dtype=np.int64)
    if sizes.size and sizes.min() < 0:
        raise ValueError(f"sizes must be >= 0, got {int(sizes.min())}")
    sim = policies.get(policy)
    threshold = _threshold(streams, sample_rate, sample_keys, salt)
    rate = threshold / HASH_SPACE
    minis = np.array([mini_capacity(int(c), rate) for c in sizes], dtype=np.int64)
    misses = np.zeros(sizes.size, dtype=np.int64)
    total = sampled = 0
    lru_pass = policy == "lru"
    n_workers = resolve_workers(workers)
    for base, st in streams():
        keys = check_keys(st.keys, st.n_keys)
        seg = as_segments(st.segments, keys.size)
        sk, sseg = sample_stream(keys, seg, threshold, salt, base)
        n_keys = st.n_keys
        if sk.size < keys.size:
            sk, n_keys = dense_keys(sk, n_keys)
        total += keys.size
        sampled += sk.size
        if lru_pass:
            top = int(minis.max(initial=0))
            misses += lru_miss_curve(sk, n_keys, top, sseg, n_workers)[minis]
        else:
            def one(c: int, sk: np.ndarray = sk, sseg: np.ndarray = sseg,
                    n_keys: int = n_keys) -> int:
                return sim.simulate(sk, n_keys, c, sseg).miss_count

            misses += np.array(thread_map(one, [int(c) for c in minis], n_workers),
                               dtype=np.int64)
    if total and not sampled:  # no key kept: every ratio would read 0, capacity 0 included
        raise ValueError(f"--sample-rate {rate:g}: none of the trace's {total:,} accesses was "
                         "sampled; raise the rate or use --sample-keys")
    expected = rate * total  # SHARDS-adj: the sample's expected size, not its actual one
    ratio = np.minimum(misses / expected, 1.0) if expected else np.zeros(sizes.size)
    if threshold >= HASH_SPACE:
        method = "stack" if lru_pass else "exact"
    else:
        method = "shards" if lru_pass else "minisim"
    return PolicyCurve(sizes, ratio, np.rint(ratio * total).astype(np.int64), total, rate,
                       sampled, method)


def stored_streams(store: Store, trace: str, kind: str,
                   workers: int | None = None) -> Callable[[], Iterable[tuple[int, Stream]]]:
    """The stream(s) of a stored trace as :func:`policy_miss_curve` takes them: a
    selection trace chunk by chunk in plain mode, a timeline's prefix blocks, an Engram
    trace's rows."""
    if kind == "selections":
        specs, plan = _selection_chunks(store, trace)

        def chunks() -> Iterable[tuple[int, Stream]]:
            for i, spec in enumerate(specs):
                yield i << 24, plan(spec)  # room for 16M buffers per chunk

        return chunks
    if kind == "prefix":
        from toolkit.replay.prefix import load_stream

        stream = load_stream(store, trace, workers)
        one = Stream(stream.keys, stream.n_keys, None)
    elif kind == "engram":
        from toolkit.replay.engram import load_dense

        dense = load_dense(store, trace)
        one = Stream(dense.keys, dense.n_distinct, None)
    else:
        raise ValueError(f"kind must be 'selections', 'prefix' or 'engram', got {kind!r}")
    return lambda: [(0, one)]
