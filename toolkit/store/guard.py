"""The one path guard of every command that writes a file outside the store (``--output``,
``export store --out``, ``export perfetto --out``, ``report --out``, ``serving ... --out``):
no such file may land inside a store, and no ``--replace`` may remove a store.

A file written into ``STORE/requests/`` becomes a trace (or replaces one) behind the
store's transactions, and an export directory replaced with ``--replace`` is removed
first: given the store, a parent of it or a directory inside it, that wiped the store.
The guard knows a store by the files only a store has (``catalog.duckdb``, ``.staging/``),
so it needs no open store and also protects a second store the command was not given;
paths are resolved first, so a symlink into a store is refused as the store is.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from toolkit.errors import ToolkitError
from toolkit.store.layout import CATALOG_FILE, STAGING_DIR


class UnsafePath(ToolkitError):
    """A write the path guard refuses (one line naming the option and the path)."""


def is_store(path: Path) -> bool:
    """Whether ``path`` is a store directory (it has the catalog or the staging area
    that every store writes when it is opened or written)."""
    try:
        return (path / CATALOG_FILE).is_file() or (path / STAGING_DIR).is_dir()
    except OSError:
        return False


def _real(path: Path) -> Path:
    """``path`` absolute with every symlink of its existing part resolved."""
    return Path(os.path.realpath(os.path.abspath(path)))


def store_holding(path: str | Path) -> Path | None:
    """The store directory ``path`` is (or is inside), or None."""
    p = _real(Path(path))
    for d in (p, *p.parents):
        if is_store(d):
            return d
    return None


def check_write_path(path: str | Path, option: str, *, store: str | Path | None = None
                     ) -> Path:
    """Refuse a file or directory to be written at ``path`` inside a store (``store``,
    the one the command opened, or any other). Returns ``path``.

    Raises:
        UnsafePath: one line naming ``option`` and the store.
    """
    p = _real(Path(path))
    root = store_holding(p)
    if root is None and store is not None:
        s = _real(Path(store))
        root = s if p == s or s in p.parents else None
    if root is not None:
        where = "is the store" if p == root else f"inside the store {root}"
        raise UnsafePath(f"{option} {path}: {where}; the store's directories "
                         "are written by the toolkit only: give a path outside it")
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return Path(path)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):  # /dev/null, a FIFO: never replaced
        raise UnsafePath(f"{option} {path}: exists and is not a regular file (a device or "
                         "FIFO); give a file name")
    return Path(path)


def check_replace_dir(path: str | Path, option: str, *, store: str | Path | None = None,
                      allowed: Callable[[str], bool] | None = None) -> None:
    """Refuse to remove the directory ``path`` (``--replace``) when it is a store, inside
    one, a parent of ``store`` (or holds any store below it), or, with ``allowed``, holds
    an entry that is not a plain file whose name ``allowed`` accepts (it is not what the
    command writes there).

    Raises:
        UnsafePath: one line naming ``option`` and why.
    """
    check_write_path(path, option, store=store)
    p = _real(Path(path))
    if store is not None:
        s = _real(Path(store))
        if p in s.parents:
            raise UnsafePath(f"{option} {path}: holds the store {s}; --replace would remove it")
    if not p.is_dir():
        return
    for d, dirs, _ in os.walk(p):
        if is_store(Path(d)):
            raise UnsafePath(f"{option} {path}: holds the store {d}; --replace would remove it")
        dirs[:] = [x for x in dirs if not os.path.islink(os.path.join(d, x))]
    if allowed is not None:
        foreign = sorted(e.name for e in os.scandir(p) if not allowed(e.name)
                         or not e.is_file(follow_symlinks=False))
        if foreign:
            raise UnsafePath(f"{option} {path}: holds {foreign[0]!r}, which this command does "
                             "not write; --replace only replaces an earlier export: remove "
                             "the directory yourself or choose another")
