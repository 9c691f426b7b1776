"""LRU miss-ratio curve in one pass (Mattson stack distances, Fenwick tree over time).

LRU has the stack property, so one pass that measures each access's reuse distance
(distinct keys touched since the previous access to the same key, plus one) gives the
miss count for every capacity at once, instead of one replay per size. The Fenwick tree
marks the latest access time of every key, so a distance is one prefix-sum query.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import pyarrow as pa

from toolkit.policies import as_segments, check_keys
from toolkit.store import Store, bounded_key


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


def lru_miss_curve(
    keys: np.ndarray,
    n_keys: int,
    max_capacity: int,
    segments: np.ndarray | None = None,
) -> np.ndarray:
    """LRU miss counts for every capacity ``0..max_capacity`` (index = capacity).

    Equal to ``LRU().simulate(keys, n_keys, c, segments).miss_count`` for each ``c``;
    every segment restarts cold, so its first access to each key misses at any size.
    """
    keys = check_keys(keys, n_keys)
    if max_capacity < 0:
        raise ValueError(f"max_capacity must be >= 0, got {max_capacity}")
    seg = as_segments(segments, keys.size)
    hist = _distance_histogram(keys, int(n_keys), seg, int(max_capacity))
    return keys.size - np.cumsum(hist)


def miss_curve_table(store: Store, trace: str, kind: str, max_capacity: int,
                     *, save: bool = True) -> pa.Table:
    """One-pass LRU miss curve of a stored trace, as a ``miss_curves`` table.

    ``kind="selections"``: plain-mode streams (one cold buffer per request x layer,
    positions ascending within a step). ``kind="prefix"``: the prefix-block stream of a
    request timeline. Written to the store under ``<kind>-<trace>`` when ``save``.
    """
    if kind == "selections":
        from toolkit.replay.selections import load_rows, plan

        rows = load_rows(store, trace)
        p = plan(rows, 1, "plain", "first")
        keys, segments = p.keys, p.segments
        n_keys = int(max(rows.seq_len.max(initial=0), 1))
    elif kind == "prefix":
        from toolkit.replay.prefix import load_stream

        stream = load_stream(store, trace)
        keys, segments, n_keys = stream.keys, None, stream.n_keys
    else:
        raise ValueError(f"kind must be 'selections' or 'prefix', got {kind!r}")
    misses = lru_miss_curve(keys, n_keys, max_capacity, segments)
    n = keys.size
    table = pa.table({
        "trace": [trace] * misses.size, "kind": [kind] * misses.size,
        "capacity": np.arange(misses.size, dtype=np.int64),
        "accesses": np.full(misses.size, n, dtype=np.int64), "misses": misses.astype(np.int64),
        "miss_ratio": misses / n if n else np.zeros(misses.size),
    })
    if save:
        store.write("miss_curves", bounded_key(f"{kind}-{trace}"), table, replace=True)
    return table
