"""Key checks every policy runs before its kernel: range validation and dense renumbering.

They live apart from the registry so that listing policy names (``--help``, config
validation) loads neither NumPy nor numba.
"""

from __future__ import annotations

import numpy as np

from toolkit.runtime.aot import nb


def as_segments(segments: np.ndarray | None, n: int) -> np.ndarray:
    """Normalise segment starts to an int64 array that begins at 0 (empty for n == 0)."""
    if segments is None:
        return np.zeros(1 if n else 0, dtype=np.int64)
    seg = np.asarray(segments, dtype=np.int64)
    if seg.size and (seg[0] != 0 or np.any(np.diff(seg) < 0) or seg[-1] > n):
        raise ValueError("segments must be sorted offsets starting at 0 and <= len(keys)")
    return seg


@nb.njit(cache=True, nogil=True)
def _key_range(keys):  # pragma: no cover - compiled
    """(min, max) in one pass: validation must not cost a fifth of a fast replay."""
    lo = keys[0]
    hi = keys[0]
    for i in range(1, keys.shape[0]):
        v = keys[i]
        lo = min(lo, v)  # branch-free, so LLVM vectorises the loop
        hi = max(hi, v)
    return lo, hi


def check_keys(keys: np.ndarray, n_keys: int) -> np.ndarray:
    """Refuse out-of-range keys before a kernel indexes memory with them.

    int32 and int64 keys pass through as they are (int32 halves the bytes a replay
    streams); anything else is converted to int64.
    """
    keys = np.asarray(keys)
    if keys.dtype not in (np.int32, np.int64):
        keys = keys.astype(np.int64)
    keys = np.ascontiguousarray(keys)
    if keys.size:
        lo, hi = _key_range(keys)
        if lo < 0 or hi >= n_keys:
            raise ValueError(f"keys must lie in [0, {n_keys}); got [{lo}, {hi}]")
    return keys


SPARSE_KEY_FACTOR = 2
"""A key space more than this many times the accesses (plus 64K) is compacted first."""


def compact_keys(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, int]:
    """Renumber keys densely when the key space dwarfs the accesses.

    Kernels size their state by ``n_keys``; positions up to a ``seq_len`` of 10^9 in a few
    rows would allocate gigabytes for a handful of keys. Policies only compare keys for
    equality, so a dense renumbering gives the same hits.
    """
    if n_keys <= SPARSE_KEY_FACTOR * keys.size + 65_536:
        return keys, n_keys
    uniq, inv = np.unique(keys, return_inverse=True)
    return inv.astype(np.int32 if uniq.size < 2**31 - 8 else np.int64), int(uniq.size)
