"""Readers turn trace files into Arrow tables of a store schema; one module per format.

A reader is registered under its format name (``toolkit ingest <format> PATH``). Third
parties add readers through the ``toolkit.readers`` entry-point group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from toolkit.errors import StoreError, TraceFormatError
from toolkit.registry import Registry
from toolkit.store import check_key

if TYPE_CHECKING:
    from toolkit.store import Store


@dataclass(frozen=True)
class Reader:
    """A trace format.

    Attributes:
        name: format name used on the command line.
        table: store table the reader fills (a key of ``toolkit.schema.TABLES``).
        read: ``read(path, trace_name) -> pa.Table``; raises :class:`TraceFormatError`.
        description: one line for ``--help``.
    """

    name: str
    table: str
    read: Callable[[Path, str], pa.Table]
    description: str


@dataclass(frozen=True)
class IngestResult:
    """What an ingest wrote."""

    trace: str
    table: str
    rows: int
    path: Path
    elapsed_s: float


readers: Registry[Reader] = Registry("reader", entry_point_group="toolkit.readers")


def ingest_file(
    store: Store, fmt: str, path: str | Path, name: str | None = None, *, replace: bool = False
) -> IngestResult:
    """Validate ``path`` completely, then write it to ``store`` in one atomic step."""
    reader = readers.get(fmt)
    path = Path(path)
    if not path.is_file():
        raise TraceFormatError(path, None, None, "no such file")
    trace = check_key(name or path.stem)
    if trace in store.keys(reader.table) and not replace:
        # Refuse before the (possibly long) parse, not only at write time.
        raise StoreError(
            f"{reader.table} {trace!r} already exists in {store.root}; pass --replace to overwrite"
        )
    t0 = time.perf_counter()
    table = reader.read(path, trace)
    out = store.write(reader.table, trace, table, replace=replace)
    return IngestResult(trace, reader.table, table.num_rows, out, time.perf_counter() - t0)


def _register_builtins() -> None:
    from toolkit.ingest import azure, mooncake

    for mod in (mooncake, azure):
        readers.register(mod.READER.name, mod.READER)


_register_builtins()
