"""Cache policies: a Protocol, a registry, one module per built-in policy.

A policy replays a stream of dense integer keys (``0 <= key < n_keys``) through a cache
of ``capacity`` unit-size slots and reports, per access, whether it hit. ``segments``
marks offsets where the cache restarts cold (one buffer per request x layer in selection
replay), so one compiled call covers a whole trace. Built-ins are numba kernels; a plain
Python class with the same ``simulate`` method also works (slowly) and is how third-party
policies start. Third parties register through the ``toolkit.policies`` entry points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numba as nb
import numpy as np

from toolkit.registry import Registry


@dataclass(frozen=True)
class SimResult:
    """Outcome of one simulate call.

    Attributes:
        hits: bool array, one per access.
        evictions: number of keys evicted to make room (capacity pressure only; the
            cold restarts at segment boundaries are not evictions).
    """

    hits: np.ndarray
    evictions: int

    @property
    def hit_count(self) -> int:
        return int(np.count_nonzero(self.hits))

    @property
    def miss_count(self) -> int:
        return int(self.hits.size - self.hit_count)


@runtime_checkable
class CachePolicy(Protocol):
    """What the replay drivers need from a policy.

    A policy may also carry ``rows_kernel``, a compiled kernel that replays selection
    rows directly (see :func:`toolkit.policies.lru.lru_rows` for its signature); the
    selection replay then skips its key stream. It is optional: without it the replay
    plans the stream and calls :meth:`simulate`.
    """

    name: str

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        """Replay ``keys`` (int64, dense) through a cache of ``capacity`` slots.

        Args:
            keys: accessed keys in order, ``0 <= key < n_keys``.
            n_keys: size of the key space (kernels index arrays with keys).
            capacity: number of slots; ``0`` caches nothing.
            segments: sorted start offsets where the cache restarts empty; ``None`` means
                one segment starting at 0.
        """
        ...


policies: Registry[CachePolicy] = Registry("policy", entry_point_group="toolkit.policies")


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


def _register_builtins() -> None:
    from toolkit.policies import arc, clock, fifo, lfu, lru, opt, s3fifo, slru

    for policy in (
        lru.LRU(),
        fifo.FIFO(),
        clock.Clock(),
        lfu.LFU(),
        arc.ARC(),
        s3fifo.S3FIFO(),
        slru.SLRU(),
        opt.OPT(),
        opt.OPT(bypass=True),
    ):
        policies.register(policy.name, policy)


_register_builtins()
