"""The compiled encoders of :mod:`toolkit.store.parquet.table`, in a module of their own
so that opening a store (``toolkit sql``, ``info``) does not import numba: only writing a
table with integer or several-valued string columns loads them.
"""

from __future__ import annotations

import numpy as np

from toolkit.runtime.aot import nb

_BLOCK, _MINI = 128, 4  # values per delta block; miniblocks per block (32 values each)


@nb.njit(cache=True, nogil=True)
def _uleb(x, out, at):  # pragma: no cover - compiled
    while x > np.uint64(0x7F):
        out[at] = np.uint8((x & np.uint64(0x7F)) | np.uint64(0x80))
        x >>= np.uint64(7)
        at += 1
    out[at] = np.uint8(x)
    return at + 1


@nb.njit(inline="always")
def _pack32(src, a, w, out, at):  # pragma: no cover - compiled
    """``src[a:a+32]`` (each below ``2**w``, ``w`` <= 32) -> ``4 * w`` bytes at
    ``out[at:]``, least significant bit first: fewer than 32 bits wait in ``acc``, so a
    value never spills past 64."""
    acc = np.uint64(0)
    held = 0
    for j in range(32):
        acc |= src[a + j] << np.uint64(held)
        held += w
        if held >= 32:
            out[at] = np.uint8(acc & np.uint64(0xFF))
            out[at + 1] = np.uint8((acc >> np.uint64(8)) & np.uint64(0xFF))
            out[at + 2] = np.uint8((acc >> np.uint64(16)) & np.uint64(0xFF))
            out[at + 3] = np.uint8((acc >> np.uint64(24)) & np.uint64(0xFF))
            at += 4
            acc >>= np.uint64(32)
            held -= 32
    return at


@nb.njit(inline="always")
def _pack_wide(src, a, w, out, at):  # pragma: no cover - compiled
    """As :func:`_pack32` for 33-64 bits: each value fed as its low 32 bits, then the
    rest, a byte out at a time."""
    acc = np.uint64(0)
    held = 0
    for j in range(32):
        v = src[a + j]
        for part in range(2):
            piece = v & np.uint64(0xFFFFFFFF) if part == 0 else v >> np.uint64(32)
            acc |= piece << np.uint64(held)
            held += 32 if part == 0 else w - 32
            while held >= 8:
                out[at] = np.uint8(acc & np.uint64(0xFF))
                acc >>= np.uint64(8)
                held -= 8
                at += 1
    return at


@nb.njit(cache=True, nogil=True)
def delta_encode(values, bits, out):  # pragma: no cover - compiled
    """DELTA_BINARY_PACKED bytes of ``values`` (any integer dtype, each a ``bits``-bit
    integer, 32 or 64; deltas wrap at that width, as readers add them) into ``out``;
    returns (bytes used, min, max). Per block of 128 deltas: the deltas, their minimum
    and the offsets from it in separate passes that LLVM vectorises (loops over a block
    index: a ``while i < n: ...; i += m`` loop kept it from that, 2-2.5x slower), then
    each miniblock of 32 packed by :func:`_pack32`."""
    n = values.shape[0]
    mask = np.uint64(0xFFFFFFFFFFFFFFFF) if bits == 64 else np.uint64(0xFFFFFFFF)
    at = _uleb(np.uint64(_BLOCK), out, 0)
    at = _uleb(np.uint64(_MINI), out, at)
    at = _uleb(np.uint64(n), out, at)
    if n == 0:
        at = _uleb(np.uint64(0), out, at)
        return at, 0, 0
    first = np.int64(values[0])
    at = _uleb(np.uint64((first << 1) ^ (first >> 63)), out, at)
    lo = first
    hi = first
    for j in range(n):
        v = np.int64(values[j])
        lo = min(lo, v)
        hi = max(hi, v)
    deltas = np.empty(_BLOCK, dtype=np.int64)
    packed = np.zeros(_BLOCK, dtype=np.uint64)
    for blk in range((n - 1 + _BLOCK - 1) // _BLOCK):
        i = 1 + blk * _BLOCK  # the block's first value (its delta is from the one before)
        m = min(_BLOCK, n - i)
        if bits == 32:
            for j in range(m):
                deltas[j] = np.int32(np.int64(values[i + j]) - np.int64(values[i + j - 1]))
        else:
            for j in range(m):
                deltas[j] = np.int64(np.uint64(values[i + j]) - np.uint64(values[i + j - 1]))
        dmin = deltas[0]
        for j in range(1, m):
            dmin = min(dmin, deltas[j])
        for j in range(m):
            packed[j] = (np.uint64(deltas[j]) - np.uint64(dmin)) & mask
        for j in range(m, _BLOCK):
            packed[j] = 0  # the last miniblock's padding
        at = _uleb(np.uint64((dmin << 1) ^ (dmin >> 63)), out, at)
        widths_at = at
        at += _MINI
        for mb in range(_MINI):
            a = mb * 32
            if a >= m:
                out[widths_at + mb] = 0  # a miniblock with no values: width 0, no bytes
                continue
            top = np.uint64(0)
            for j in range(32):
                top |= packed[a + j]
            w = 0
            while top:
                w += 1
                top >>= np.uint64(1)
            out[widths_at + mb] = w
            if w:
                at = _pack32(packed, a, w, out, at) if w <= 32 else _pack_wide(
                    packed, a, w, out, at)
    return at, lo, hi


@nb.njit(cache=True, nogil=True)
def plain_kernel(offsets, data, out):  # pragma: no cover - compiled
    at = 0
    for r in range(offsets.shape[0] - 1):
        lo, hi = offsets[r], offsets[r + 1]
        n = hi - lo
        for b in range(4):
            out[at + b] = (n >> (8 * b)) & 0xFF
        at += 4
        for j in range(n):
            out[at + j] = data[lo + j]
        at += n
