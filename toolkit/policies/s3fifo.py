"""S3-FIFO (Yang et al., SOSP'23), as libCacheSim's ``S3FIFO`` (its Dec 2024 variant).

A small FIFO (10% of slots) filters one-hit wonders; keys re-referenced there at least
``move_to_main_threshold`` times move to the main FIFO (a 2-bit CLOCK), others leave a
ghost entry (ghost FIFO of 90% of capacity) so that a quick return goes straight to
main. Details copied from libCacheSim so counts match: sizes are truncated
(``int(capacity * ratio)``); until the first eviction a full small queue spills new keys
into main; a key is never admitted to small if it would fill it alone (so no key enters
at all when the small queue has fewer than 2 slots, i.e. ``capacity < 20``); main
evicts when over its share or when small is empty.

The eviction steps stay inline in one kernel on purpose: moved into helpers taking the
state arrays, LLVM left them as calls (too large to inline by its own measure) and the
calls halved throughput on miss-heavy runs.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies import SimResult
from toolkit.policies._kernel import run_kernel
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U

SMALL, MAIN, GHOST = 1, 2, 3  # queue ids; 0 = untracked


@nb.njit(cache=True, nogil=True)
def _move(nxt, prv, where, n_keys, k, dst):  # pragma: no cover - compiled
    """Unlink ``k`` (if tracked) and push it at the newest end of queue ``dst`` (0 = drop)."""
    if where[U(k)]:
        p = prv[U(k)]
        q = nxt[U(k)]
        nxt[U(p)] = q
        prv[U(q)] = p
    where[U(k)] = dst
    if dst:
        sent = n_keys + dst
        h = nxt[U(sent)]
        nxt[U(k)] = h
        prv[U(k)] = sent
        prv[U(h)] = k
        nxt[U(sent)] = k


@nb.njit(cache=True, nogil=True)
def s3fifo_kernel(
    keys, n_keys, capacity, segments, hits, small_max, ghost_max, threshold
):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count."""
    main_max = capacity - small_max
    nxt = np.empty(n_keys + 4, dtype=np.int32)  # sentinels at n_keys + queue id
    prv = np.empty(n_keys + 4, dtype=np.int32)
    where = np.zeros(n_keys, dtype=np.uint8)
    freq = np.zeros(n_keys, dtype=np.int32)
    ln = np.zeros(4, dtype=np.int64)
    for j in range(1, 4):
        nxt[n_keys + j] = n_keys + j
        prv[n_keys + j] = n_keys + j
    evictions = 0
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for j in range(1, 4):
            sent = n_keys + j
            node = nxt[sent]
            while node != sent:
                where[node] = 0
                node = nxt[node]
            nxt[sent] = sent
            prv[sent] = sent
            ln[j] = 0
        has_evicted = False
        for i in range(lo, hi):
            k = keys[U(i)]
            w = where[U(k)]
            if w == SMALL or w == MAIN:
                hits[U(i)] = 1
                freq[U(k)] += 1
                continue
            hits[U(i)] = 0
            if w == GHOST:
                ln[U(GHOST)] -= 1
                _move(nxt, prv, where, n_keys, k, 0)
            if small_max < 1:
                continue
            while ln[U(SMALL)] + ln[U(MAIN)] + 1 > capacity:
                has_evicted = True
                if ln[U(MAIN)] > main_max or ln[U(SMALL)] == 0:
                    while ln[U(MAIN)] > 0:  # main: 2-bit CLOCK
                        v = prv[U(n_keys + MAIN)]
                        if freq[U(v)] >= 1:
                            freq[U(v)] = min(freq[U(v)], 3) - 1
                            _move(nxt, prv, where, n_keys, v, MAIN)
                        else:
                            ln[U(MAIN)] -= 1
                            _move(nxt, prv, where, n_keys, v, 0)
                            evictions += 1
                            break
                else:
                    # small: promote the re-referenced; stop at the first one evicted
                    while ln[U(SMALL)] > 0:
                        v = prv[U(n_keys + SMALL)]
                        ln[U(SMALL)] -= 1
                        if freq[U(v)] >= threshold:
                            freq[U(v)] = 0
                            ln[U(MAIN)] += 1
                            _move(nxt, prv, where, n_keys, v, MAIN)
                            continue
                        if ghost_max == 0:
                            _move(nxt, prv, where, n_keys, v, 0)
                        else:
                            if ln[U(GHOST)] == ghost_max:
                                _move(nxt, prv, where, n_keys, prv[U(n_keys + GHOST)], 0)
                            else:
                                ln[U(GHOST)] += 1
                            _move(nxt, prv, where, n_keys, v, GHOST)
                        evictions += 1
                        break
            # int64, not the literals: numba's AOT compiler (pycc) does not unify them
            if w == GHOST:
                dst = np.int64(MAIN)
            elif small_max <= 1:
                continue
            elif not has_evicted and ln[U(SMALL)] >= small_max:
                dst = np.int64(MAIN)
            else:
                dst = np.int64(SMALL)
            freq[U(k)] = 0
            ln[U(dst)] += 1
            _move(nxt, prv, where, n_keys, k, dst)
    return evictions


class S3FIFO:
    """Compiled S3-FIFO (see module docstring).

    Args:
        small_size_ratio: share of slots for the small FIFO.
        ghost_size_ratio: ghost entries as a share of slots.
        move_to_main_threshold: hits in small needed to move to main on eviction.
    """

    def __init__(
        self,
        small_size_ratio: float = 0.1,
        ghost_size_ratio: float = 0.9,
        move_to_main_threshold: int = 2,
    ) -> None:
        self.small_size_ratio = small_size_ratio
        self.ghost_size_ratio = ghost_size_ratio
        self.move_to_main_threshold = move_to_main_threshold
        self.name = "s3fifo"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        small = int(capacity * self.small_size_ratio)
        ghost = int(capacity * self.ghost_size_ratio)
        return run_kernel(
            s3fifo_kernel,
            keys,
            n_keys,
            capacity,
            segments,
            small,
            ghost,
            self.move_to_main_threshold,
        )
