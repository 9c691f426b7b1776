"""Least-recently-used: HiSparse's device-buffer policy and HiCache's default.

Dense doubly linked list over key ids (index ``n_keys`` is the sentinel), so an access is
a few array loads and stores with no hashing.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel


@nb.njit(cache=True, nogil=True)
def lru_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    sentinel = n_keys
    # int32 links and "prv < 0 = not cached" keep the per-key state small and cut one load
    nxt = np.empty(n_keys + 1, dtype=np.int32)  # towards the LRU end
    prv = np.full(n_keys + 1, -1, dtype=np.int32)  # towards the MRU end
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
            after = nxt[node]
            prv[node] = -1
            node = after
        nxt[sentinel] = sentinel
        prv[sentinel] = sentinel
        size = 0
        for i in range(lo, hi):
            k = keys[i]
            p = prv[k]
            if p >= 0:
                hits[i] = 1
                # unlink, then push to the MRU end
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
                    prv[victim] = -1
                    evictions += 1
                else:
                    size += 1
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
        return run_kernel(lru_kernel, keys, n_keys, capacity, segments)
