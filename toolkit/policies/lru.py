"""Least-recently-used: HiSparse's device-buffer policy and HiCache's default.

Dense doubly linked list over key ids (index ``n_keys`` is the sentinel), so an access is
a few array loads and stores with no hashing.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.policies._kernel import KernelPolicy, U


@nb.njit(cache=True, nogil=True)
def lru_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
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


class LRU(KernelPolicy):
    """Compiled LRU (see module docstring)."""

    name = "lru"
    kernel = staticmethod(lru_kernel)
