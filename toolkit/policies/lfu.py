"""Least-frequently-used, ties broken by LRU, as libCacheSim's ``LFU``.

Frequency counts only accesses since the key last entered the cache (no history kept
after eviction). Among keys with the lowest count, the one whose last access is oldest
is evicted: each count has its own list and a key moves to the tail of the next list on
every hit, so a list's head is its least recently used key. O(1) per access.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U

_SIZE, _TOP, _MIN_F, _EVICTIONS = 0, 1, 2, 3  # slots of the state carried between runs


@nb.njit(cache=True, nogil=True)
def _lfu_run(keys, lo, hi, capacity, hits, link, freq, head, tail, st):  # pragma: no cover
    """Replay ``keys[lo:hi]``; return where it stopped: ``hi``, or the first access whose
    new count would not fit ``head``/``tail`` (the caller grows them and resumes).

    A key's (prv, nxt) links share one int32 array (``nxt`` runs towards the most recent
    key of its count list; -1 ends a list).
    """
    size = st[_SIZE]
    top = st[_TOP]
    min_f = st[_MIN_F]
    evictions = st[_EVICTIONS]
    n_heads = head.shape[0]
    stop = hi
    for i in range(lo, hi):
        k = keys[U(i)]
        f = freq[U(k)]
        if f:
            if f + 2 >= n_heads:
                stop = i
                break
            hits[U(i)] = 1
            p = link[U(2 * k)]
            q = link[U(2 * k + 1)]
            if p == -1:
                head[U(f)] = q
            else:
                link[U(2 * p + 1)] = q
            if q == -1:
                tail[U(f)] = p
            else:
                link[U(2 * q)] = p
            if head[U(f)] == -1 and min_f == f:
                min_f = f + 1
            f += 1
        else:
            hits[U(i)] = 0
            if capacity == 0:
                continue
            if size == capacity:
                victim = head[U(min_f)]
                q = link[U(2 * victim + 1)]
                head[U(min_f)] = q
                if q == -1:
                    tail[U(min_f)] = -1
                else:
                    link[U(2 * q)] = -1
                freq[U(victim)] = 0
                evictions += 1
            else:
                size += 1
            f = 1
            min_f = 1
        freq[U(k)] = f
        if f > top:
            top = f
        t = tail[U(f)]
        link[U(2 * k)] = t
        link[U(2 * k + 1)] = -1
        if t == -1:
            head[U(f)] = k
        else:
            link[U(2 * t + 1)] = k
        tail[U(f)] = k
    st[_SIZE] = size
    st[_TOP] = top
    st[_MIN_F] = min_f
    st[_EVICTIONS] = evictions
    return stop


@nb.njit(cache=True, nogil=True)
def lfu_kernel(keys, n_keys, capacity, segments, hits):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count.

    The per-count list heads start small and double when a count outgrows them, so no
    pass over the keys is needed to bound the counts first.
    """
    link = np.full(2 * n_keys, -1, dtype=np.int32)
    freq = np.zeros(n_keys, dtype=np.int32)  # 0 = not cached
    head = np.full(64, -1, dtype=np.int32)
    tail = np.full(64, -1, dtype=np.int32)
    st = np.zeros(4, dtype=np.int64)
    st[_MIN_F] = 1
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for f in range(1, st[_TOP] + 1):  # cold restart: clear only what is cached
            node = head[f]
            while node != -1:
                freq[node] = 0
                node = link[2 * node + 1]
            head[f] = -1
            tail[f] = -1
        st[_SIZE] = 0
        st[_TOP] = 0
        i = lo
        while i < hi:
            i = _lfu_run(keys, i, hi, capacity, hits, link, freq, head, tail, st)
            if i < hi:
                grown = np.full(2 * head.shape[0], -1, dtype=np.int32)
                grown[: head.shape[0]] = head
                head = grown
                grown = np.full(2 * tail.shape[0], -1, dtype=np.int32)
                grown[: tail.shape[0]] = tail
                tail = grown
    return st[_EVICTIONS]


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
        return run_kernel(lfu_kernel, keys, n_keys, capacity, segments)
