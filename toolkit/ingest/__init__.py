"""Readers turn trace files into Arrow tables of a store schema; one module per format.

A reader is registered under its format name (``toolkit ingest <format> PATH``). Third
parties add readers through the ``toolkit.readers`` entry-point group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from toolkit import schema
from toolkit.errors import StoreError, TraceFormatError
from toolkit.registry import Registry
from toolkit.runtime.files import file_problem
from toolkit.store import check_key

if TYPE_CHECKING:
    from toolkit.store import Store


@dataclass(frozen=True)
class Reader:
    """A trace format.

    Attributes:
        name: format name used on the command line.
        table: the main store table the reader fills (a key of ``toolkit.schema.TABLES``);
            a name already present there is refused unless replacing.
        read: ``read(path, trace_name, **options) -> {table: pa.Table}``; raises
            :class:`TraceFormatError`. All returned tables are written together.
        description: one line for ``--help``.
        directory: the input is a directory (a bundle), not a file; ``None``: either (a
            file, or a directory of such files).
    """

    name: str
    table: str
    read: Callable[..., dict[str, pa.Table]]
    description: str
    directory: bool | None = False


@dataclass(frozen=True)
class IngestResult:
    """What an ingest wrote."""

    trace: str
    table: str
    rows: int
    path: Path
    elapsed_s: float
    notes: tuple[str, ...] = ()  # what the reader skipped on purpose (extra columns, ...)
    found: str = ""  # what the reader found, in one line (engine captures say it)


readers: Registry[Reader] = Registry("reader", entry_point_group="toolkit.readers")
_notes: ContextVar[list[str] | None] = ContextVar("ingest_notes", default=None)
_found: ContextVar[list[str] | None] = ContextVar("ingest_found", default=None)


def note(message: str) -> None:
    """Tell the user about input a reader skips on purpose (shown by the CLI, kept in
    ``IngestResult.notes``); outside an ingest it is dropped."""
    notes = _notes.get()
    if notes is not None and message not in notes:
        notes.append(message)


def found(message: str) -> None:
    """Tell the user what the reader found (requests, layers, ...): the CLI prints it on
    stdout and ``IngestResult.found`` keeps it; outside an ingest it is dropped."""
    got = _found.get()
    if got is not None:
        got.append(message)


MAX_REQUEST_TOKENS = 1 << 30
"""Most input or output tokens one request may have: ~100x the longest context window
served today (10M tokens). A count of 2^63 - 1 was stored and every later ``trace_summary``
query failed, summing it past int64."""


def check_requests(table: pa.Table, path: Path) -> None:
    """The checks every reader's ``requests`` rows pass, whatever the format: token
    counts in [0, :data:`MAX_REQUEST_TOKENS`] and finite arrival times (one line naming
    the file, the request and the field).

    Raises:
        TraceFormatError: the first request that fails, by its request_id (its position
            in the file, from 0).
    """
    import numpy as np

    ids = table.column("request_id").to_numpy(zero_copy_only=False)
    for col in ("input_tokens", "output_tokens"):
        v = table.column(col).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero((v < 0) | (v > MAX_REQUEST_TOKENS))
        if bad.size:
            i = int(bad[0])
            raise TraceFormatError(path, None, col, f"request_id {int(ids[i])}: {int(v[i]):,} "
                                   f"tokens; a request has 0 to 2^30 "
                                   f"({MAX_REQUEST_TOKENS:,})")
    t = table.column("arrival_s").to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        i = int(bad[0])
        raise TraceFormatError(path, None, "arrival_s", f"request_id {int(ids[i])}: "
                               f"{t[i]!r} is not a finite time in s")


def ingest_file(
    store: Store,
    fmt: str,
    path: str | Path,
    name: str | None = None,
    *,
    replace: bool = False,
    **options: object,
) -> IngestResult:
    """Validate ``path`` completely, then write it to ``store`` in one atomic step.

    ``options`` go to the reader (e.g. ``model``, ``k``, ``score`` for selection formats).
    """
    reader = readers.get(fmt)
    path = Path(path)
    problem = file_problem(path, directory=reader.directory)  # /dev/zero, a FIFO: refused
    if problem is not None:
        raise TraceFormatError(path, None, None, problem)
    trace = check_key(name or path.stem)
    if trace in store.keys(reader.table) and not replace:
        # Refuse before the (possibly long) parse, not only at write time.
        raise StoreError(
            f"{reader.table} {trace!r} already exists in {store.root}; pass --replace to overwrite"
        )
    t0 = time.perf_counter()
    notes: list[str] = []
    seen: list[str] = []
    token, token_found = _notes.set(notes), _found.set(seen)
    try:
        tables = reader.read(path, trace, **options)
    except OSError as e:  # unreadable file: permissions, a FIFO gone away, I/O errors
        raise TraceFormatError(path, None, None, f"cannot read: {e.strerror or e}") from None
    finally:
        _notes.reset(token)
        _found.reset(token_found)
    if "requests" in tables:
        check_requests(tables["requests"], path)
    if reader.table == "requests":
        tables["request_traces"] = pa.table(
            {"trace": [trace], "format": [fmt], "source": [str(path)], "synthetic": [False]})
        if "request_labels" not in tables and trace in store.keys("request_labels"):
            # replacing a labelled trace with an unlabelled one: leave no stale labels
            tables["request_labels"] = schema.REQUEST_LABELS.empty_table()
        if "request_sessions" not in tables and trace in store.keys("request_sessions"):
            tables["request_sessions"] = schema.REQUEST_SESSIONS.empty_table()  # none stale
    if (reader.table == "selections" and "selection_prefill" not in tables
            and trace in store.keys("selection_prefill")):
        tables["selection_prefill"] = schema.SELECTION_PREFILL.empty_table()  # none stale
    outs = store.write_many(tables, trace, replace=replace)
    rows = tables[reader.table].num_rows
    return IngestResult(trace, reader.table, rows, outs[0], time.perf_counter() - t0,
                        tuple(notes), " ".join(seen))


def _register_builtins() -> None:
    from toolkit.ingest import (
        agentic,
        azure,
        bailian,
        bundle,
        burstgpt,
        dsa_jsonl,
        mooncake,
        npz,
        parquet,
        sglang_topk,
    )

    for mod in (mooncake, azure, bailian, burstgpt, agentic, dsa_jsonl, npz, parquet, bundle,
                sglang_topk):
        readers.register(mod.READER.name, mod.READER)
    from toolkit.ingest import points, table  # any table of requests; measured points

    for mod in (table, points):
        readers.register(mod.READER.name, mod.READER)


_register_builtins()
