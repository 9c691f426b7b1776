"""First-in first-out: the baseline every other policy should beat.

A ring buffer of cached keys plus a dense residency flag; hits change no state.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies._kernel import KernelPolicy
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U


@nb.njit(cache=True, nogil=True)
def fifo_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    ring = np.empty(max(capacity, 1), dtype=np.int64)
    cached = np.zeros(n_keys, dtype=np.uint8)
    size = 0
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for j in range(size):  # cold restart: slots 0..size-1 hold the cached keys
            cached[ring[j]] = 0
        size = 0
        pos = 0  # next slot to fill; once full, also the oldest key
        for i in range(lo, hi):
            k = keys[U(i)]
            if cached[U(k)]:
                hits[U(i)] = 1
                continue
            hits[U(i)] = 0
            if capacity == 0:
                continue
            if size == capacity:
                cached[U(ring[U(pos)])] = 0
                evictions += 1
            else:
                size += 1
            ring[U(pos)] = k
            cached[U(k)] = 1
            pos += 1
            if pos == capacity:
                pos = 0
    return evictions


class FIFO(KernelPolicy):
    """Compiled FIFO (see module docstring)."""

    name = "fifo"
    kernel = staticmethod(fifo_kernel)
