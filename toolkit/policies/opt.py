"""Belady's OPT: evict the cached key whose next use is farthest away.

``OPT()`` always admits the missed key, like libCacheSim's ``Belady``; ``OPT(bypass=True)``
is true MIN for unit-size keys: it declines to admit a missed key whose next use is no
sooner than every cached key's, which saves a few misses and is the lower bound every
other policy is checked against. Next uses are computed here from ``keys`` (within
each segment, since the cache restarts cold), and cached keys sit in an indexed
max-heap on next use, so an access is O(log capacity).
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.policies import SimResult, as_segments, check_keys
from toolkit.policies._kernel import run_kernel

NEVER = np.iinfo(np.int64).max


@nb.njit(cache=True, nogil=True)
def next_use_kernel(keys, n_keys, segments, out):  # pragma: no cover - compiled
    """``out[i]`` = index of the next access to ``keys[i]`` in its segment, else NEVER."""
    never = np.iinfo(np.int64).max
    last = np.full(n_keys, never, dtype=np.int64)
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for i in range(hi - 1, lo - 1, -1):
            k = keys[i]
            out[i] = last[k]
            last[k] = i
        for i in range(lo, hi):
            last[keys[i]] = never


def next_use(keys: np.ndarray, n_keys: int, segments: np.ndarray | None = None) -> np.ndarray:
    """Index of each access's next use within its segment; ``NEVER`` (int64 max) if none."""
    keys = check_keys(keys, n_keys)
    out = np.empty(keys.size, dtype=np.int64)
    next_use_kernel(keys, int(n_keys), as_segments(segments, keys.size), out)
    return out


@nb.njit(cache=True, nogil=True)
def _sift_up(heap, pri, pos, j, k, p):  # pragma: no cover - compiled
    """Place key ``k`` with next use ``p`` at slot ``j`` or above (max-heap)."""
    while j > 0:
        parent = (j - 1) >> 1
        if pri[parent] >= p:
            break
        heap[j] = heap[parent]
        pri[j] = pri[parent]
        pos[heap[j]] = j
        j = parent
    heap[j] = k
    pri[j] = p
    pos[k] = j


@nb.njit(cache=True, nogil=True)
def _sift_down(heap, pri, pos, j, k, p, size):  # pragma: no cover - compiled
    """Place key ``k`` with next use ``p`` at slot ``j`` or below (max-heap)."""
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and pri[c + 1] > pri[c]:
            c += 1
        if pri[c] <= p:
            break
        heap[j] = heap[c]
        pri[j] = pri[c]
        pos[heap[j]] = j
        j = c
    heap[j] = k
    pri[j] = p
    pos[k] = j


@nb.njit(cache=True, nogil=True)
def opt_kernel(keys, n_keys, capacity, segments, hits, bypass):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    nu = np.empty(keys.shape[0], dtype=np.int64)
    next_use_kernel(keys, n_keys, segments, nu)
    # max-heap on next use; priorities sit beside their keys so sifting never chases keys
    heap = np.empty(max(capacity, 1), dtype=np.int32)
    pri = np.empty(max(capacity, 1), dtype=np.int64)
    pos = np.full(n_keys, -1, dtype=np.int32)  # heap slot, -1 = not cached
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for j in range(size):
            pos[heap[j]] = -1
        size = 0
        for i in range(lo, hi):
            k = keys[i]
            j = pos[k]
            if j >= 0:
                hits[i] = 1
                _sift_up(heap, pri, pos, j, k, nu[i])  # the next use only moves later
                continue
            hits[i] = 0
            if capacity == 0:
                continue
            if size == capacity:
                if bypass and nu[i] >= pri[0]:
                    continue
                pos[heap[0]] = -1
                evictions += 1
                _sift_down(heap, pri, pos, 0, k, nu[i], size)
            else:
                size += 1
                _sift_up(heap, pri, pos, size - 1, k, nu[i])
    return evictions


class OPT:
    """Compiled Belady / MIN (see module docstring).

    Args:
        bypass: if true, a missed key may be left out of the cache (true MIN).
    """

    def __init__(self, bypass: bool = False) -> None:
        self.bypass = bypass
        self.name = "opt-bypass" if bypass else "opt"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        return run_kernel(opt_kernel, keys, n_keys, capacity, segments, self.bypass)
