"""Least-recently-used: HiSparse's device-buffer policy and HiCache's default.

Dense doubly linked list over key ids (index ``n_keys`` is the sentinel), so an access is
a few array loads and stores with no hashing.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies._kernel import KernelPolicy
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U, prefetch_row


@nb.njit(inline="always")
def _links(n_keys):  # pragma: no cover - compiled
    """One int32 array of (prv, nxt) pairs: a key's two links share a cache line, and
    "prv < 0" means "not cached", so a lookup is one load. Index n_keys is the sentinel."""
    s = n_keys
    link = np.empty(2 * (n_keys + 1), dtype=np.int32)
    for j in range(n_keys):
        link[2 * j] = -1
    link[2 * s] = s
    link[2 * s + 1] = s
    return link


@nb.njit(inline="always")
def _clear(link, s):  # pragma: no cover - compiled
    """Cold restart: clear only what is cached, O(occupancy)."""
    node = link[2 * s + 1]
    while node != s:
        after = link[2 * node + 1]
        link[2 * node] = -1
        node = after
    link[2 * s] = s
    link[2 * s + 1] = s


@nb.njit(inline="always")
def _touch(link, s, k, size, capacity):  # pragma: no cover - compiled
    """Access key ``k``: (hit, new size, evicted)."""
    p = link[U(2 * k)]
    evicted = 0
    if p >= 0:
        hit = 1
        # unlink, then push to the MRU end
        q = link[U(2 * k + 1)]
        link[U(2 * p + 1)] = q
        link[U(2 * q)] = p
    else:
        hit = 0
        if capacity == 0:
            return 0, size, 0
        if size == capacity:
            victim = link[U(2 * s)]
            pv = link[U(2 * victim)]
            link[U(2 * pv + 1)] = s
            link[U(2 * s)] = pv
            link[U(2 * victim)] = -1
            evicted = 1
        else:
            size += 1
    head = link[U(2 * s + 1)]
    link[U(2 * k + 1)] = head
    link[U(2 * k)] = s
    link[U(2 * head)] = k
    link[U(2 * s + 1)] = k
    return hit, size, evicted


@nb.njit(cache=True, nogil=True)
def lru_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count. The operations of
    :func:`_clear` and :func:`_touch`, written out: the loop every planned replay runs is
    kept as it was measured against libCacheSim. Numba does inline the helpers (they are
    ``inline="always"``), but an interleaved timing through them could not show the same
    speed (within noise on most streams, slower at capacity 0), so the copy stays."""
    # One int32 array of (prv, nxt) pairs: a key's two links share a cache line, and
    # "prv < 0" means "not cached", so a lookup is one load. Index n_keys is the sentinel.
    s = n_keys
    link = np.empty(2 * (n_keys + 1), dtype=np.int32)
    for j in range(n_keys):
        link[2 * j] = -1
    link[2 * s] = s
    link[2 * s + 1] = s
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for g in range(n_seg):
        lo = segments[g]
        hi = segments[g + 1] if g + 1 < n_seg else n
        # cold restart: clear only what is cached, O(occupancy)
        node = link[2 * s + 1]
        while node != s:
            after = link[2 * node + 1]
            link[2 * node] = -1
            node = after
        link[2 * s] = s
        link[2 * s + 1] = s
        size = 0
        for i in range(lo, hi):
            k = keys[U(i)]
            p = link[U(2 * k)]
            if p >= 0:
                hits[U(i)] = 1
                # unlink, then push to the MRU end
                q = link[U(2 * k + 1)]
                link[U(2 * p + 1)] = q
                link[U(2 * q)] = p
            else:
                hits[U(i)] = 0
                if capacity == 0:
                    continue
                if size == capacity:
                    victim = link[U(2 * s)]
                    pv = link[U(2 * victim)]
                    link[U(2 * pv + 1)] = s
                    link[U(2 * s)] = pv
                    link[U(2 * victim)] = -1
                    evictions += 1
                else:
                    size += 1
            head = link[U(2 * s + 1)]
            link[U(2 * k + 1)] = head
            link[U(2 * k)] = s
            link[U(2 * head)] = k
            link[U(2 * s + 1)] = k
    return evictions


@nb.njit(inline="always")
def row_shape(values, lo, hi, hisparse, newest):  # pragma: no cover - compiled
    """(descents, times the newest token is selected) of the list ``values[lo:hi]``, for
    selection planning (``toolkit.replay.selection_plan``) and :func:`lru_rows`. Order
    is checked on the full row (a subsequence of an ascending row ascends), in a pass
    without a loop-carried value, so LLVM vectorises it."""
    descents = 0
    n_newest = 0
    for i in range(lo + 1, hi):
        descents += values[U(i)] <= values[U(i - 1)]
    if hisparse:
        if descents == 0 and hi > lo and values[U(hi - 1)] <= newest:
            # strictly ascending up to the newest token: only the last can be it
            n_newest = 1 if values[U(hi - 1)] == newest else 0
        else:
            for i in range(lo, hi):
                n_newest += values[U(i)] == newest
    return descents, n_newest


@nb.njit(cache=True, nogil=True)
def lru_rows(values, offsets, src, seq_len, new_group, n, hisparse, warm, n_keys, capacity,
             row_hits, fast, scratch):  # pragma: no cover - compiled
    """Selection replay rows straight through LRU, with no key stream in between: the
    planning of :func:`toolkit.replay.selection_plan.fused_plan` (fast-path rows, the
    newest token as a free hit, rows sorted when not ascending, a cold buffer per
    (request, layer) led by ``warm`` uncounted accesses of ``0 .. warm-1``) fused with
    :func:`lru_kernel` and the fold of its hits into rows. Fills ``row_hits`` and
    ``fast`` per replay row; returns the eviction count, or ``-1 - r`` if replay row
    ``r`` holds a position outside ``[0, n_keys)`` (an ascending row is checked at its
    ends, any other at every position). ``scratch``: of ``values``' dtype, at least the
    longest row (a row that is not ascending is sorted there)."""
    s = n_keys
    link = _links(n_keys)
    size = 0
    evictions = 0
    seg_open = False
    for r in range(src.shape[0]):
        prefetch_row(values, offsets, src, r)
        if new_group[r]:
            seg_open = False
        lo = offsets[U(src[r])]
        hi = offsets[U(src[r] + 1)]
        newest = seq_len[r] - 1
        if hisparse and seq_len[r] <= n:  # every token resident: all hits
            fast[r] = True
            row_hits[r] = hi - lo
            continue
        fast[r] = False
        descents, n_newest = row_shape(values, lo, hi, hisparse, newest)
        if hi - lo - n_newest == 0:  # nothing for the policy (at most the newest token)
            row_hits[r] = hi - lo
            continue
        if not seg_open:  # a buffer starts cold at its first policy access
            _clear(link, s)
            size = 0
            for j in range(warm):
                _, size, evicted = _touch(link, s, j, size, capacity)
                evictions += evicted
            seg_open = True
        h = n_newest  # the newest token lives in the reserved slot: a free hit
        # one touch loop for every row shape (a row that is not ascending is replayed
        # from ``scratch``): with a third copy of it, for the sorted rows, every row ran
        # 1.3x slower on SmolLM2 although none takes that branch (24 against 18 ms, the
        # same rows; the copies shared the code after each loop)
        row = values
        end = hi
        if descents:
            m = 0
            for i in range(lo, hi):
                v = values[U(i)]
                if not (hisparse and v == newest):
                    if v < 0 or v >= n_keys:
                        return -1 - r
                    scratch[m] = v
                    m += 1
            scratch[:m].sort()
            row, lo, end, n_newest = scratch, 0, m, 0
        else:
            if values[U(lo)] < 0 or values[U(hi - 1)] >= n_keys:
                return -1 - r
            if n_newest and values[U(hi - 1)] == newest:
                end = hi - 1  # ascending: the newest token is last, the usual case
                n_newest = 0
        if n_newest:
            for i in range(lo, end):
                v = values[U(i)]
                if v != newest:
                    hit, size, evicted = _touch(link, s, v, size, capacity)
                    h += hit
                    evictions += evicted
        else:  # no test in the loop
            for i in range(lo, end):
                hit, size, evicted = _touch(link, s, row[U(i)], size, capacity)
                h += hit
                evictions += evicted
        row_hits[r] = h
    return evictions


class LRU(KernelPolicy):
    """Compiled LRU (see module docstring)."""

    name = "lru"
    kernel = staticmethod(lru_kernel)
    rows_kernel = staticmethod(lru_rows)
