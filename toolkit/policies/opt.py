"""Belady's OPT: evict the cached key whose next use is farthest away.

``OPT()`` always admits the missed key, like libCacheSim's ``Belady``; ``OPT(bypass=True)``
is true MIN for unit-size keys: it declines to admit a missed key whose next use is no
sooner than every cached key's, which saves a few misses and is the lower bound every
other policy is checked against. Next uses are computed here from ``keys`` (within
each segment, since the cache restarts cold); the cache itself is the set of pending
next-use times (see ``opt_kernel``), so an access is a bit test and a few word updates.
"""

from __future__ import annotations

import numpy as np

from toolkit.policies import SimResult, as_segments, check_keys
from toolkit.policies._kernel import run_kernel
from toolkit.runtime.aot import intrinsic, ir, nb, types
from toolkit.runtime.jit import U

NEVER = np.iinfo(np.int64).max


@nb.njit(cache=True, nogil=True)
def next_use_kernel(keys, n_keys, segments, out):  # pragma: no cover - compiled
    """``out[i]`` = index of the next access to ``keys[i]`` in its segment, else NEVER.

    One backward pass per segment and no reset between segments: segments run in order,
    so a ``last`` entry left by an earlier segment is below ``i`` and reads as "none".
    """
    never = np.iinfo(np.int64).max
    last = np.full(n_keys, -1, dtype=np.int64)
    n = keys.shape[0]
    n_seg = segments.shape[0]
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        for i in range(hi - 1, lo - 1, -1):
            k = keys[U(i)]
            j = last[U(k)]
            out[U(i)] = j if j > i else never
            last[U(k)] = i


def next_use(keys: np.ndarray, n_keys: int, segments: np.ndarray | None = None) -> np.ndarray:
    """Index of each access's next use within its segment; ``NEVER`` (int64 max) if none."""
    keys = check_keys(keys, n_keys)
    out = np.empty(keys.size, dtype=np.int64)
    next_use_kernel(keys, int(n_keys), as_segments(segments, keys.size), out)
    return out


@intrinsic
def _clz(typingctx, x):
    """Leading zeros of an int64 (LLVM ``ctlz``): the highest set bit in one instruction."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.ctlz(args[0], ir.Constant(ir.IntType(1), 0))

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def _mark_up(bits, off, n_lv, w):  # pragma: no cover - compiled
    """Word ``w`` of level 0 became non-empty: mark it in the levels above."""
    for lv in range(1, n_lv):
        j = off[U(lv)] + (w >> 6)
        word = bits[U(j)]
        bits[U(j)] = word | (np.int64(1) << (w & 63))
        if word != 0:
            return
        w >>= 6


@nb.njit(cache=True, nogil=True)
def _unmark_up(bits, off, n_lv, w):  # pragma: no cover - compiled
    """Word ``w`` of level 0 became empty: unmark it in the levels above."""
    for lv in range(1, n_lv):
        j = off[U(lv)] + (w >> 6)
        word = bits[U(j)] & ~(np.int64(1) << (w & 63))
        bits[U(j)] = word
        if word != 0:
            return
        w >>= 6


@nb.njit(inline="always")
def _latest(bits, off, n_lv):  # pragma: no cover - compiled
    """The largest time in the set (the set must not be empty)."""
    w = 0
    for lv in range(n_lv - 1, -1, -1):
        w = (w << 6) | (63 - _clz(bits[U(off[U(lv)] + w)]))
    return w


@nb.njit(cache=True, nogil=True)
def opt_kernel(keys, n_keys, capacity, segments, hits, bypass):  # pragma: no cover - compiled
    """Fill ``hits`` (uint8) and return the eviction count.

    Every cached key has exactly one pending next use, and the key used at time t is
    ``keys[t]``, so the set of pending next-use times *is* the cache: ``keys[i]`` is cached
    iff time i is in the set, and the victim is the key at the largest time. The set is a
    64-ary bitset hierarchy over the segment (a lookup is one bit test, the victim a few
    ``ctlz``), with no per-key state and no heap. Cached keys never used again are only
    counted: they are all equally good victims and never hit, so which one goes does not
    change any later hit.
    """
    n = keys.shape[0]
    nu = np.empty(n, dtype=np.int64)
    next_use_kernel(keys, n_keys, segments, nu)
    n_seg = segments.shape[0]
    longest = 1
    for s in range(n_seg):
        hi = segments[s + 1] if s + 1 < n_seg else n
        longest = max(longest, hi - segments[s])
    n_lv = 1
    span = 64
    while span < longest:
        span *= 64
        n_lv += 1
    off = np.zeros(n_lv + 1, dtype=np.int64)
    words = (longest + 63) >> 6
    for lv in range(n_lv):
        off[lv + 1] = off[lv] + words
        words = (words + 63) >> 6
    bits = np.zeros(off[n_lv], dtype=np.int64)
    never = np.iinfo(np.int64).max
    evictions = 0
    for s in range(n_seg):
        lo = segments[s]
        hi = segments[s + 1] if s + 1 < n_seg else n
        words = (hi - lo + 63) >> 6
        for lv in range(n_lv):  # clear what the previous segment may have left
            bits[off[lv]:off[lv] + words] = 0
            words = (words + 63) >> 6
        size = 0
        dead = 0  # cached keys with no further use in this segment
        for i in range(lo, hi):
            t = i - lo
            p = nu[U(i)]
            # level-0 words are updated here, the levels above only when a word empties
            # or fills (helpers for those measured ~10% slower on the k = 2048 stream)
            w = bits[U(t >> 6)]
            if (w >> (t & 63)) & 1:
                hits[U(i)] = 1
                w &= ~(np.int64(1) << (t & 63))
                bits[U(t >> 6)] = w
                if w == 0:
                    _unmark_up(bits, off, n_lv, t >> 6)
            else:
                hits[U(i)] = 0
                if capacity == 0:
                    continue
                if size == capacity:
                    if dead > 0:
                        if bypass and p == never:
                            continue
                        dead -= 1
                    else:
                        m = _latest(bits, off, n_lv)
                        if bypass and p - lo >= m:
                            continue
                        w = bits[U(m >> 6)] & ~(np.int64(1) << (m & 63))
                        bits[U(m >> 6)] = w
                        if w == 0:
                            _unmark_up(bits, off, n_lv, m >> 6)
                    evictions += 1
                else:
                    size += 1
            if p == never:
                dead += 1
            else:
                q = p - lo
                w = bits[U(q >> 6)]
                bits[U(q >> 6)] = w | (np.int64(1) << (q & 63))
                if w == 0:
                    _mark_up(bits, off, n_lv, q >> 6)
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
