"""Least-recently-used: HiSparse's device-buffer policy and HiCache's default.

Dense doubly linked list over key ids (index ``n_keys`` is the sentinel), so an access is
a few array loads and stores with no hashing.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.policies import SimResult, as_segments, check_keys


@nb.njit(cache=True, nogil=True)
def lru_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    sentinel = n_keys
    nxt = np.empty(n_keys + 1, dtype=np.int64)  # towards the LRU end
    prv = np.empty(n_keys + 1, dtype=np.int64)  # towards the MRU end
    cached = np.zeros(n_keys, dtype=np.uint8)
    nxt[sentinel] = sentinel
    prv[sentinel] = sentinel
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        # cold restart: clear only what is cached, O(occupancy)
        node = nxt[sentinel]
        while node != sentinel:
            cached[node] = 0
            node = nxt[node]
        nxt[sentinel] = sentinel
        prv[sentinel] = sentinel
        size = 0
        for i in range(lo, hi):
            k = keys[i]
            if cached[k]:
                hits[i] = 1
                # unlink, then push to the MRU end
                p = prv[k]
                q = nxt[k]
                nxt[p] = q
                prv[q] = p
            else:
                hits[i] = 0
                if capacity == 0:
                    continue
                if size == capacity:
                    victim = prv[sentinel]
                    p = prv[victim]
                    nxt[p] = sentinel
                    prv[sentinel] = p
                    cached[victim] = 0
                    evictions += 1
                else:
                    size += 1
                cached[k] = 1
            head = nxt[sentinel]
            nxt[k] = head
            prv[k] = sentinel
            prv[head] = k
            nxt[sentinel] = k
    return evictions


class LRU:
    """Compiled LRU (see module docstring)."""

    name = "lru"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        keys = check_keys(keys, n_keys)
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        hits = np.zeros(keys.size, dtype=np.uint8)
        ev = lru_kernel(keys, int(n_keys), int(capacity), as_segments(segments, keys.size), hits)
        return SimResult(hits.view(np.bool_), int(ev))
