"""Segmented LRU with libCacheSim's ``SLRU`` semantics (4 equal segments by default).

Segment 0 is the probationary end, the last segment the protected end; each holds at
most ``capacity // n_segments`` keys. A hit moves a key up one segment (the top segment
just refreshes it); an overflowing segment pushes its LRU key down one level, and an
overflowing segment 0 evicts. libCacheSim quirks kept on purpose so counts match: a
missed key enters the *lowest segment with room* (so a cold cache fills segments 0, 1,
2, ... in turn), falls back to segment 0 when all are full (possible when ``capacity``
is not a multiple of ``n_segments``), and nothing is admitted when
``capacity < n_segments``. Eviction takes the LRU key of the lowest non-empty segment.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U


@nb.njit(cache=True, nogil=True)
def slru_kernel(keys, n_keys, capacity, segments, hits, n_lists):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count.

    Links are written out inline, not through helpers, and a key's (prv, nxt) pair shares
    one int32 array: ~1.15x over separate arrays and helper calls on the k = 2048 stream.
    A hit below a full level swaps places (k up, that level's LRU key down) and leaves both
    counts alone: most hits on that stream are such promotions, and skipping the count
    round trip is ~1.1x. Indices are cast with ``U`` (see ``_kernel.U``).
    """
    seg_max = capacity // n_lists
    # (prv, nxt) pairs in one int32 array; sentinel of level lv at n_keys + lv; nxt runs MRU -> LRU
    L = np.empty(2 * (n_keys + n_lists), dtype=np.int32)
    level = np.full(n_keys, -1, dtype=np.int8)
    count = np.zeros(n_lists, dtype=np.int64)
    for lv in range(n_lists):
        s = n_keys + lv
        L[2 * s] = s
        L[2 * s + 1] = s
    top = n_lists - 1
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for g in range(n_seg):
        lo = segments[g]
        hi = segments[g + 1] if g + 1 < n_seg else n
        for lv in range(n_lists):
            s = n_keys + lv
            node = L[2 * s + 1]
            while node != s:
                level[node] = -1
                node = L[2 * node + 1]
            L[2 * s] = s
            L[2 * s + 1] = s
            count[lv] = 0
        size = 0
        for i in range(lo, hi):
            k = keys[U(i)]
            lv = level[U(k)]
            if lv >= 0:
                hits[U(i)] = 1
                # unlink k
                p = L[U(2 * k)]
                q = L[U(2 * k + 1)]
                L[U(2 * p + 1)] = q
                L[U(2 * q)] = p
                if lv < top:
                    up = lv + 1
                    level[U(k)] = up
                    s = n_keys + up
                    if count[U(up)] >= seg_max:
                        # up is full: k takes the MRU place of up, whose LRU key v takes
                        # the MRU place of lv; both counts stay as they are
                        v = L[U(2 * s)]
                        pv = L[U(2 * v)]
                        L[U(2 * pv + 1)] = s
                        L[U(2 * s)] = pv
                        h = L[U(2 * s + 1)]
                        L[U(2 * k + 1)] = h
                        L[U(2 * k)] = s
                        L[U(2 * h)] = k
                        L[U(2 * s + 1)] = k
                        level[U(v)] = lv
                        s = n_keys + lv
                        h = L[U(2 * s + 1)]
                        L[U(2 * v + 1)] = h
                        L[U(2 * v)] = s
                        L[U(2 * h)] = v
                        L[U(2 * s + 1)] = v
                    else:
                        count[U(lv)] -= 1
                        count[U(up)] += 1
                        h = L[U(2 * s + 1)]
                        L[U(2 * k + 1)] = h
                        L[U(2 * k)] = s
                        L[U(2 * h)] = k
                        L[U(2 * s + 1)] = k
                        lv = up
                else:
                    s = n_keys + lv
                    h = L[U(2 * s + 1)]
                    L[U(2 * k + 1)] = h
                    L[U(2 * k)] = s
                    L[U(2 * h)] = k
                    L[U(2 * s + 1)] = k
                # cool: each overflowing level hands its LRU key one level down
                while lv > 0 and count[U(lv)] > seg_max:
                    s = n_keys + lv
                    v = L[U(2 * s)]
                    pv = L[U(2 * v)]
                    L[U(2 * pv + 1)] = s
                    L[U(2 * s)] = pv
                    count[U(lv)] -= 1
                    lv -= 1
                    level[U(v)] = lv
                    count[U(lv)] += 1
                    s = n_keys + lv
                    h = L[U(2 * s + 1)]
                    L[U(2 * v + 1)] = h
                    L[U(2 * v)] = s
                    L[U(2 * h)] = v
                    L[U(2 * s + 1)] = v
                while lv == 0 and count[U(0)] > seg_max:
                    s = n_keys
                    v = L[U(2 * s)]
                    pv = L[U(2 * v)]
                    L[U(2 * pv + 1)] = s
                    L[U(2 * s)] = pv
                    level[U(v)] = -1
                    count[U(0)] -= 1
                    size -= 1
                    evictions += 1
                continue
            hits[U(i)] = 0
            if seg_max == 0:
                continue
            while size + 1 > capacity:
                lv = 0
                while count[U(lv)] == 0:
                    lv += 1
                s = n_keys + lv
                v = L[U(2 * s)]
                pv = L[U(2 * v)]
                L[U(2 * pv + 1)] = s
                L[U(2 * s)] = pv
                level[U(v)] = -1
                count[U(lv)] -= 1
                size -= 1
                evictions += 1
            lv = 0
            while lv < n_lists and count[U(lv)] + 1 > seg_max:
                lv += 1
            if lv == n_lists:
                lv = 0
            level[U(k)] = lv
            count[U(lv)] += 1
            size += 1
            s = n_keys + lv
            h = L[U(2 * s + 1)]
            L[U(2 * k + 1)] = h
            L[U(2 * k)] = s
            L[U(2 * h)] = k
            L[U(2 * s + 1)] = k
    return evictions


class SLRU:
    """Compiled segmented LRU (see module docstring).

    Args:
        n_segments: number of LRU segments (libCacheSim's default is 4).
    """

    def __init__(self, n_segments: int = 4) -> None:
        if not 1 <= n_segments <= 64:  # the kernel keeps a key's level in an int8
            raise ValueError(f"n_segments must be in [1, 64], got {n_segments}")
        self.n_segments = n_segments
        self.name = "slru" if n_segments == 4 else f"slru{n_segments}"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        return run_kernel(slru_kernel, keys, n_keys, capacity, segments, self.n_segments)
