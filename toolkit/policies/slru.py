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

import numba as nb
import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel


@nb.njit(cache=True, nogil=True)
def _unlink(nxt, prv, k):  # pragma: no cover - compiled
    p = prv[k]
    q = nxt[k]
    nxt[p] = q
    prv[q] = p


@nb.njit(cache=True, nogil=True)
def _push_mru(nxt, prv, sentinel, k):  # pragma: no cover - compiled
    h = nxt[sentinel]
    nxt[k] = h
    prv[k] = sentinel
    prv[h] = k
    nxt[sentinel] = k


@nb.njit(cache=True, nogil=True)
def slru_kernel(keys, n_keys, capacity, segments, hits, n_lists):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    seg_max = capacity // n_lists
    # circular lists, one sentinel per segment at n_keys + level; nxt runs MRU -> LRU
    nxt = np.empty(n_keys + n_lists, dtype=np.int32)
    prv = np.empty(n_keys + n_lists, dtype=np.int32)
    level = np.full(n_keys, -1, dtype=np.int32)
    count = np.zeros(n_lists, dtype=np.int64)
    for lv in range(n_lists):
        nxt[n_keys + lv] = n_keys + lv
        prv[n_keys + lv] = n_keys + lv
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for lv in range(n_lists):
            sent = n_keys + lv
            node = nxt[sent]
            while node != sent:
                level[node] = -1
                node = nxt[node]
            nxt[sent] = sent
            prv[sent] = sent
            count[lv] = 0
        size = 0
        for i in range(lo, hi):
            k = keys[i]
            lv = level[k]
            if lv >= 0:
                hits[i] = 1
                _unlink(nxt, prv, k)
                if lv == n_lists - 1:
                    _push_mru(nxt, prv, n_keys + lv, k)
                    continue
                count[lv] -= 1
                lv += 1
                level[k] = lv
                count[lv] += 1
                _push_mru(nxt, prv, n_keys + lv, k)
                # cool: each overflowing level hands its LRU key one level down
                while lv > 0 and count[lv] > seg_max:
                    v = prv[n_keys + lv]
                    _unlink(nxt, prv, v)
                    count[lv] -= 1
                    lv -= 1
                    level[v] = lv
                    count[lv] += 1
                    _push_mru(nxt, prv, n_keys + lv, v)
                while lv == 0 and count[0] > seg_max:
                    v = prv[n_keys]
                    _unlink(nxt, prv, v)
                    level[v] = -1
                    count[0] -= 1
                    size -= 1
                    evictions += 1
                continue
            hits[i] = 0
            if seg_max == 0:
                continue
            while size + 1 > capacity:
                lv = 0
                while count[lv] == 0:
                    lv += 1
                v = prv[n_keys + lv]
                _unlink(nxt, prv, v)
                level[v] = -1
                count[lv] -= 1
                size -= 1
                evictions += 1
            lv = 0
            while lv < n_lists and count[lv] + 1 > seg_max:
                lv += 1
            if lv == n_lists:
                lv = 0
            level[k] = lv
            count[lv] += 1
            size += 1
            _push_mru(nxt, prv, n_keys + lv, k)
    return evictions


class SLRU:
    """Compiled segmented LRU (see module docstring).

    Args:
        n_segments: number of LRU segments (libCacheSim's default is 4).
    """

    def __init__(self, n_segments: int = 4) -> None:
        if n_segments < 1:
            raise ValueError(f"n_segments must be >= 1, got {n_segments}")
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
