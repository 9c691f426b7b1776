"""What the store's own modules use of a :class:`~toolkit.store.core.Store`.

Transactions, views, compacted parts and compaction are functions that take the store; they
see it through this protocol, so they need not import the class that imports them, and what
they may touch (its directory, DuckDB connection, view bookkeeping, table paths and lock) is
written down in one place.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import duckdb


class StoreState(Protocol):
    root: Path
    _con: duckdb.DuckDBPyConnection | None
    _seen: tuple[int, ...] | None  # the directory signature the views were made for
    _tried: dict[str, str]  # table -> view statement last attempted
    _made: dict[str, str]  # table -> view statement in force
    _catalog_ddl: list[str] | None  # the view statements last written to the catalog
    _dir_names: list[str]
    _sig_names: list[str]  # the directories whose times tell that the store changed
    _sig_tables: list[str]  # the table each of those belongs to ('' for staging)
    _table_index: dict[str, int]
    _manifests: dict[str, str]  # table -> path of its compacted parts' manifest
    _manifest_cache: dict[str, tuple]  # table -> (file stamp, manifest, key map)

    def _table_dir(self, table: str) -> Path: ...

    def _key_path(self, table: str, key: str) -> Path: ...

    def _key_exists(self, table: str, key: str) -> bool: ...

    def _note(self, problem: str) -> None: ...

    def _lock(self, *, exclusive: bool) -> AbstractContextManager[None]: ...
