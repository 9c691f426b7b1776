"""Adaptive Replacement Cache (Megiddo & Modha, FAST'03), as libCacheSim's ``ARC``.

T1 holds keys seen once recently, T2 keys seen at least twice; ghost lists B1/B2
remember keys recently evicted from each, and a ghost hit moves the target size ``p``
of T1 (a float, as in libCacheSim). Details copied from libCacheSim so counts match:
ghost bookkeeping runs only when the cache is full, REPLACE also takes T1 when T2 is
empty, and with B1 empty and T1 + 1 > capacity the T1 LRU key is dropped without a
ghost entry.

The eviction steps stay inline in one kernel on purpose: moved into helpers taking the
state arrays, LLVM left them as calls (too large to inline by its own measure) and the
calls halved throughput on miss-heavy runs.
The list moves (``_relink``, ``_pop_lru``, ``_push``) are left to LLVM to inline (numba's
``inline="always"`` made them ~1.5x slower); each knows whether its key is tracked, so none
reads ``where`` first (1.15x over one generic move). A key's (prv, next) links share one
int32 array, a ghost hit leaves its ghost list in the same move that puts it in T2, the
four list lengths are scalars (not an array read back after every store), and indices are
cast with ``U`` (see ``_kernel.U``).
"""

from __future__ import annotations

import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U

T1, T2, B1, B2 = 1, 2, 3, 4  # list ids; 0 = untracked


@nb.njit(cache=True, nogil=True)
def _push(L, where, n_keys, k, dst):  # pragma: no cover - compiled
    """Put the untracked key ``k`` at the MRU end of ``dst`` (0 = leave it untracked)."""
    where[U(k)] = dst
    if dst:
        sent = n_keys + dst
        h = L[U(2 * sent + 1)]
        L[U(2 * k + 1)] = h
        L[U(2 * k)] = sent
        L[U(2 * h)] = k
        L[U(2 * sent + 1)] = k


@nb.njit(cache=True, nogil=True)
def _relink(L, where, n_keys, k, dst):  # pragma: no cover - compiled
    """Move the tracked key ``k`` to the MRU end of list ``dst``."""
    p = L[U(2 * k)]
    q = L[U(2 * k + 1)]
    L[U(2 * p + 1)] = q
    L[U(2 * q)] = p
    _push(L, where, n_keys, k, dst)


@nb.njit(cache=True, nogil=True)
def _pop_lru(L, where, n_keys, src, dst):  # pragma: no cover - compiled
    """Move the LRU key of the non-empty list ``src`` to the MRU end of ``dst`` (0 = drop)."""
    _relink(L, where, n_keys, L[U(2 * (n_keys + src))], dst)


@nb.njit(cache=True, nogil=True)
def arc_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    L = np.empty(2 * (n_keys + 5), dtype=np.int32)  # (prv, next) pairs; sentinels at n_keys + id
    where = np.zeros(n_keys, dtype=np.uint8)
    for j in range(1, 5):
        L[2 * (n_keys + j)] = n_keys + j
        L[2 * (n_keys + j) + 1] = n_keys + j
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for j in range(1, 5):
            sent = n_keys + j
            node = L[2 * sent + 1]
            while node != sent:
                where[node] = 0
                node = L[2 * node + 1]
            L[2 * sent] = sent
            L[2 * sent + 1] = sent
        p = 0.0
        # list lengths as scalars (not an array): no store-to-load round trips
        t1 = 0
        t2 = 0
        b1 = 0
        b2 = 0
        for i in range(lo, hi):
            k = keys[U(i)]
            w = where[U(k)]
            if w == T1 or w == T2:
                hits[U(i)] = 1
                if w == T1:
                    t1 -= 1
                    t2 += 1
                _relink(L, where, n_keys, k, T2)
                continue
            hits[U(i)] = 0
            if capacity == 0:
                continue
            if w == B1:
                p = min(p + max(b2 / b1, 1.0), capacity)
                b1 -= 1  # k leaves its ghost list in the final move below
            elif w == B2:
                p = max(p - max(b1 / b2, 1.0), 0.0)
                b2 -= 1
            if t1 + t2 + 1 > capacity:
                replace = True
                if w == 0:
                    if t1 + b1 + 1 > capacity:
                        if b1 > 0:
                            b1 -= 1
                            _pop_lru(L, where, n_keys, B1, 0)
                        else:
                            t1 -= 1
                            _pop_lru(L, where, n_keys, T1, 0)
                            replace = False
                    elif t1 + t2 + b1 + b2 >= 2 * capacity and b2 > 0:
                        b2 -= 1
                        _pop_lru(L, where, n_keys, B2, 0)
                if replace:
                    if (t1 > 0 and (t1 > p or (t1 == p and w == B2))) or t2 == 0:
                        t1 -= 1
                        b1 += 1
                        _pop_lru(L, where, n_keys, T1, B1)
                    else:
                        t2 -= 1
                        b2 += 1
                        _pop_lru(L, where, n_keys, T2, B2)
                evictions += 1
            if w:
                t2 += 1
                _relink(L, where, n_keys, k, T2)
            else:
                t1 += 1
                _push(L, where, n_keys, k, T1)
    return evictions


class ARC:
    """Compiled ARC (see module docstring)."""

    name = "arc"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        return run_kernel(arc_kernel, keys, n_keys, capacity, segments)
