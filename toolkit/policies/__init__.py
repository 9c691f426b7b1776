"""Cache policies: a Protocol, a registry, one module per built-in policy.

A policy replays a stream of dense integer keys (``0 <= key < n_keys``) through a cache
of ``capacity`` unit-size slots and reports, per access, whether it hit. ``segments``
marks offsets where the cache restarts cold (one buffer per request x layer in selection
replay), so one compiled call covers a whole trace. Built-ins are numba kernels; a plain
Python class with the same ``simulate`` method also works (slowly) and is how third-party
policies start. Third parties register through the ``toolkit.policies`` entry points.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from toolkit.registry import Registry

if TYPE_CHECKING:
    import numpy as np


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
        import numpy as np

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


BUILTIN_NAMES = ("arc", "clock", "fifo", "lfu", "lru", "opt", "opt-bypass", "s3fifo", "slru")
"""The built-in policies' names, known without importing their kernels (numba)."""


class _PolicyRegistry(Registry["CachePolicy"]):
    """The policy registry loads its built-ins on first lookup, not on import: a CLI that
    only lists names (``--help``, a config's validation) never starts numba."""

    def __init__(self) -> None:
        super().__init__("policy", entry_point_group="toolkit.policies")
        self._builtins_loaded = self._loading = False
        self._lock = threading.RLock()
        self._third_party: set[str] | None = None

    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        with self._lock:  # replay threads may look a policy up at the same moment
            if self._builtins_loaded or self._loading:
                return  # loaded meanwhile, or a kernel module's import looks one up
            self._loading = True
            try:
                _register_builtins(self)
            except BaseException:
                for name in BUILTIN_NAMES:
                    self._items.pop(name, None)
                raise
            finally:
                self._loading = False
            self._builtins_loaded = True

    def _load_entry_points(self) -> None:
        self._load_builtins()
        super()._load_entry_points()

    def register(self, name: str, obj: CachePolicy) -> CachePolicy:
        self._load_builtins()  # a third party may not take a built-in's name
        return super().register(name, obj)

    def names(self) -> list[str]:
        if self._builtins_loaded:
            return super().names()
        if self._third_party is None:  # scanning the installed packages takes ~40 ms
            self._third_party = {ep.name for ep in entry_points(group="toolkit.policies")}
        return sorted({*BUILTIN_NAMES, *self._items, *self._third_party})


policies: Registry[CachePolicy] = _PolicyRegistry()

_CHECKS = ("as_segments", "check_keys", "compact_keys", "SPARSE_KEY_FACTOR", "_key_range")


def __getattr__(name: str) -> Any:
    """The key checks load NumPy and numba, so they are imported on first use."""
    if name in _CHECKS:
        return getattr(import_module("toolkit.policies._checks"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_builtins(registry: Registry[CachePolicy]) -> None:
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
        Registry.register(registry, policy.name, policy)
