"""CLOCK (second chance), with libCacheSim's ``Clock`` defaults.

One reference bit per key; a key enters with the bit clear, a hit sets it, and the hand
clears set bits as it passes. libCacheSim's queue form (a referenced tail is cleared and
moved to the head) is the same as this ring with a hand, so miss counts agree exactly.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies._kernel import KernelPolicy
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U


@nb.njit(cache=True, nogil=True)
def clock_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    ring = np.empty(max(capacity, 1), dtype=np.int64)
    cached = np.zeros(n_keys, dtype=np.uint8)
    ref = np.zeros(n_keys, dtype=np.uint8)
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for j in range(size):
            cached[ring[j]] = 0
            ref[ring[j]] = 0
        size = 0
        hand = 0  # next slot to fill; once full, the oldest key
        for i in range(lo, hi):
            k = keys[U(i)]
            if cached[U(k)]:
                hits[U(i)] = 1
                ref[U(k)] = 1
                continue
            hits[U(i)] = 0
            if capacity == 0:
                continue
            if size == capacity:
                while ref[U(ring[U(hand)])]:
                    ref[U(ring[U(hand)])] = 0
                    hand += 1
                    if hand == capacity:
                        hand = 0
                cached[U(ring[U(hand)])] = 0
                evictions += 1
            else:
                size += 1
            ring[U(hand)] = k
            cached[U(k)] = 1
            hand += 1
            if hand == capacity:
                hand = 0
    return evictions


class Clock(KernelPolicy):
    """Compiled CLOCK (see module docstring)."""

    name = "clock"
    kernel = staticmethod(clock_kernel)
