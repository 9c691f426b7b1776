"""One small registry shared by every plugin family (readers, policies, hardware, ...).

Why not a dict: duplicate names must fail loudly (Vidur silently ignores them), and
third-party plugins arrive through entry points without the package importing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(KeyError):
    """A name is unknown to, or already taken in, a registry."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


class Registry(Generic[T]):
    """Named plugins of one family.

    Args:
        family: human name used in error messages ("policy", "reader").
        entry_point_group: ``importlib.metadata`` group scanned once, lazily, for
            third-party plugins (``[project.entry-points."<group>"]``).
    """

    def __init__(self, family: str, entry_point_group: str | None = None) -> None:
        self.family = family
        self._group = entry_point_group
        self._items: dict[str, T] = {}
        self._loaded_entry_points = entry_point_group is None

    def register(self, name: str, obj: T) -> T:
        """Add ``obj`` under ``name``; raises :class:`RegistryError` if the name is taken."""
        if name in self._items:
            raise RegistryError(f"{self.family} {name!r} is already registered")
        self._items[name] = obj
        return obj

    def _load_entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        self._loaded_entry_points = True
        for ep in entry_points(group=self._group):
            if ep.name not in self._items:
                self.register(ep.name, ep.load())

    def get(self, name: str) -> T:
        """Return the plugin called ``name``; the error lists the valid names."""
        self._load_entry_points()
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise RegistryError(f"unknown {self.family} {name!r}; known: {known}") from None

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load_entry_points()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
