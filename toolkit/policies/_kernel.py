"""The shared Python side of every built-in policy: validate, allocate, call the kernel.

Kernels index memory with keys, so validation happens here, once, before any compiled
code runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from toolkit.policies import SimResult, as_segments, check_keys, compact_keys
from toolkit.runtime.memory import check_memory

INT32_LIMIT = 2**31 - 8  # room for the list sentinels kept after the last key


def run_kernel(
    kernel: Callable[..., int],
    keys: np.ndarray,
    n_keys: int,
    capacity: int,
    segments: np.ndarray | None,
    *extra: object,
) -> SimResult:
    """Call ``kernel(keys, n_keys, capacity, segments, hits, *extra) -> evictions``.

    Raises:
        ValueError: on out-of-range keys, a key space too large for int32 links, badly
            formed segments or a negative capacity.
    """
    keys = check_keys(keys, n_keys)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    keys, n_keys = compact_keys(keys, n_keys)
    # a cache at least as large as the keys it ever sees never evicts, under every policy:
    # sizing by the keys, not by the requested slots, keeps 2**40-slot buffers cheap
    capacity = min(int(capacity), int(n_keys))
    check_memory(24.0 * n_keys + 24.0 * capacity + 9.0 * keys.size,
                 f"a {kernel.__name__} replay of {keys.size:,} accesses over {n_keys:,} keys")
    if n_keys >= INT32_LIMIT:
        raise ValueError(
            f"n_keys must be < {INT32_LIMIT} (kernels link keys with int32), got {n_keys}"
        )
    # every kernel writes hits[i] for every access (segments cover [0, n)): no memset
    hits = np.empty(keys.size, dtype=np.uint8)
    ev = kernel(keys, int(n_keys), int(capacity), as_segments(segments, keys.size), hits, *extra)
    return SimResult(hits.view(np.bool_), int(ev))


class KernelPolicy:
    """Base of the built-ins whose kernel takes no extra arguments: subclasses set
    ``name`` and ``kernel`` (wrapped in ``staticmethod``) and inherit ``simulate``."""

    name: str
    kernel: Callable[..., int]

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        return run_kernel(self.kernel, keys, n_keys, capacity, segments)
