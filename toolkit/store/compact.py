"""Compaction: a run table's per-run files merged into parts partitioned by trace, with
a manifest mapping each key to its rows, so that every key stays readable, replaceable
and deletable (:meth:`toolkit.store.Store.compact`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError
from toolkit.store import check, transaction, views
from toolkit.store.layout import COMPACTABLE, KEY_RE, PART_ROWS
from toolkit.store.parts import PartReader, quarantine, read_manifest, stage_manifest, write_part

if TYPE_CHECKING:
    from toolkit.store.state import StoreState


def compact(store: StoreState, tables: list[str] | None = None) -> dict[str, int]:
    """Merge each run table's per-run files (and earlier compacted parts) into one
    dataset partitioned by trace (sweeps: by sweep id), parts of up to
    :data:`PART_ROWS` rows in key order, listed in a manifest; queries return the same
    rows and every key stays readable, replaceable and deletable. One transaction
    under the exclusive lock: a killed compaction changes nothing.

    A damaged store is repaired first (:func:`toolkit.store.check.repair`: a manifest
    rebuilt from its parts' footers, parts that do not read dropped), and a key file
    that does not read is moved to ``.damaged/``, each noted, so compaction goes on from
    what remains.

    Returns:
        table -> number of per-run files merged.
    """
    tables = list(COMPACTABLE) if not tables else tables
    for t in tables:
        if t not in COMPACTABLE:
            raise StoreError(f"table {t!r} cannot be compacted (replays read its files "
                             f"directly); compactable: {', '.join(COMPACTABLE)}")
    for finding in check.repair(store, tables, key_files=False):  # key files: below
        store._note(f"{finding}; {finding.fix}")
    merged: dict[str, int] = {}
    tx = transaction.Transaction(store)
    try:
        with store._lock(exclusive=True):
            transaction.recover_locked(store)
            moves: list[tuple[str, str]] = []
            deletes: list[str] = []
            for table in tables:
                files = {k: p for k, p in views.entries(store, table).items() if p.is_file()}
                if not files:
                    merged[table] = 0
                    continue
                m, d = compact_table(store, tx.dir, table, files, read_manifest(store, table))
                moves += m
                deletes += d
                merged[table] = len(files)
            if moves:
                tx.commit_ops(moves, deletes)
    finally:
        tx.close()
        views.refresh_views(store)
    return merged


def compact_table(store: StoreState, tx_dir: Path, table: str, files: dict[str, Path],
                  old: dict) -> tuple[list[tuple[str, str]], list[str]]:
    col = "sweep_id" if table == "sweeps" else "trace"
    # partition -> key -> (loader, rows)
    sources: dict[str, dict[str, tuple[Callable[[], pa.Table], int]]] = {}
    readers: dict[str, PartReader] = {}

    def from_part(part: str, off: int, n: int) -> pa.Table:
        if part not in readers:  # each old part opened once, its groups read once
            readers[part] = PartReader(store._table_dir(table) / part)
        return readers[part].rows(off, n)

    for part, keys in old["parts"].items():
        for k, off, n in keys:
            if k not in files:  # else a file of the same key replaced it
                sources.setdefault(Path(part).parent.name, {})[k] = (
                    functools.partial(from_part, part, off, n), n)
    for k, p in list(files.items()):
        try:
            n = pq.ParquetFile(p).metadata.num_rows
            first = pq.read_table(p, columns=[col]).column(0)
        except (OSError, pa.ArrowException) as e:
            moved = quarantine(store, table, p.name)
            store._note(f"{p}: unreadable Parquet file ({check.first_line(e)}); not "
                        f"compacted, moved to {moved}")
            del files[k]  # not deleted by the commit: it is gone from the table already
            continue
        value = str(first[0].as_py()) if len(first) else "empty"
        part = value if KEY_RE.fullmatch(value) else "other"
        sources.setdefault(part, {})[k] = (functools.partial(
            pq.read_table, p, schema=schema.TABLES[table]), n)
    parts: dict[str, list[list]] = {}
    sizes: dict[str, int] = {}
    moves = []
    for partition in sorted(sources):
        src = sources[partition]
        batches: list[list[str]] = [[]]
        rows = 0
        for k in sorted(src):  # key order: a key's rows are contiguous in its part
            if batches[-1] and rows + src[k][1] > PART_ROWS:
                batches.append([])
                rows = 0
            batches[-1].append(k)
            rows += src[k][1]
        for batch in batches:
            name, entries, nbytes = write_part(tx_dir, table, partition,
                                               ((k, src[k][0]()) for k in batch))
            parts[name], sizes[name] = entries, nbytes
            moves.append((f"{table}/{name}", f"{table}/{name}"))
    moves.insert(0, stage_manifest(tx_dir, table, parts, sizes))
    deletes = [f"{table}/{p}" for p in old["parts"]] + [f"{table}/{k}.parquet" for k in files]
    return moves, deletes
