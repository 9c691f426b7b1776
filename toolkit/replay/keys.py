"""Dense key ids for replay kernels (which index arrays with keys)."""

from __future__ import annotations

import numpy as np

# A presence table is used when the id range is at most this many times the value count
# (plus a floor), so it stays small next to the values themselves.
_TABLE_FACTOR, _TABLE_FLOOR = 4, 1 << 22


def dense_ids(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Map int64 ``values`` to ids ``0..n-1`` in sorted-value order (as ``np.unique``'s
    inverse), returning ``(ids, n)``.

    Traces usually carry small non-negative ids already (Mooncake's hashes are remapped
    0..N); those take a linear presence-table pass instead of an O(n log n) sort, which is
    what dominates flattening a million-request trace.
    """
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    lo, hi = int(values.min()), int(values.max())
    if lo >= 0 and hi < _TABLE_FACTOR * values.size + _TABLE_FLOOR:
        present = np.zeros(hi + 1, dtype=np.bool_)
        present[values] = True
        rank = np.cumsum(present, dtype=np.int64) - 1
        return rank[values], int(rank[-1] + 1)
    uniq, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64), int(uniq.size)
