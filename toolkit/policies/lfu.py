"""Least-frequently-used, ties broken by LRU, as libCacheSim's ``LFU``.

Frequency counts only accesses since the key last entered the cache (no history kept
after eviction). Among keys with the lowest count, the one whose last access is oldest
is evicted: each count has its own list and a key moves to the tail of the next list on
every hit, so a list's head is its least recently used key. O(1) per access.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.policies import SimResult, check_keys
from toolkit.policies._kernel import run_kernel


@nb.njit(cache=True, nogil=True)
def lfu_kernel(keys, n_keys, capacity, segments, hits, max_freq):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count.

    ``max_freq`` bounds any key's access count (sizes the per-count list heads).
    """
    nxt = np.full(n_keys, -1, dtype=np.int32)  # towards the most recent in its count list
    prv = np.full(n_keys, -1, dtype=np.int32)
    freq = np.zeros(n_keys, dtype=np.int32)  # 0 = not cached
    head = np.full(max_freq + 2, -1, dtype=np.int32)
    tail = np.full(max_freq + 2, -1, dtype=np.int32)
    size = 0
    top = 0  # highest count used in this segment
    min_f = 1
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for f in range(1, top + 1):
            node = head[f]
            while node != -1:
                freq[node] = 0
                node = nxt[node]
            head[f] = -1
            tail[f] = -1
        size = 0
        top = 0
        for i in range(lo, hi):
            k = keys[i]
            f = freq[k]
            if f:
                hits[i] = 1
                p = prv[k]
                q = nxt[k]
                if p == -1:
                    head[f] = q
                else:
                    nxt[p] = q
                if q == -1:
                    tail[f] = p
                else:
                    prv[q] = p
                if head[f] == -1 and min_f == f:
                    min_f = f + 1
                f += 1
            else:
                hits[i] = 0
                if capacity == 0:
                    continue
                if size == capacity:
                    victim = head[min_f]
                    q = nxt[victim]
                    head[min_f] = q
                    if q == -1:
                        tail[min_f] = -1
                    else:
                        prv[q] = -1
                    freq[victim] = 0
                    evictions += 1
                else:
                    size += 1
                f = 1
                min_f = 1
            freq[k] = f
            if f > top:
                top = f
            t = tail[f]
            prv[k] = t
            nxt[k] = -1
            if t == -1:
                head[f] = k
            else:
                nxt[t] = k
            tail[f] = k
    return evictions


class LFU:
    """Compiled LFU with LRU tie-breaking (see module docstring)."""

    name = "lfu"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        keys = check_keys(keys, n_keys)
        max_freq = int(np.bincount(keys).max()) if keys.size else 0
        return run_kernel(lfu_kernel, keys, n_keys, capacity, segments, max_freq)
