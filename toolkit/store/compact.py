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
from toolkit.store import transaction, views
from toolkit.store.layout import COMPACTABLE, KEY_RE, PART_ROWS
from toolkit.store.parts import manifest, read_compacted, stage_manifest, write_part

if TYPE_CHECKING:
    from toolkit.store.state import StoreState


def compact(store: StoreState, tables: list[str] | None = None) -> dict[str, int]:
    """Merge each run table's per-run files (and earlier compacted parts) into one
    dataset partitioned by trace (sweeps: by sweep id), parts of up to
    :data:`PART_ROWS` rows in key order, listed in a manifest; queries return the same
    rows and every key stays readable, replaceable and deletable. One transaction
    under the exclusive lock: a killed compaction changes nothing.

    Returns:
        table -> number of per-run files merged.
    """
    tables = list(COMPACTABLE) if not tables else tables
    for t in tables:
        if t not in COMPACTABLE:
            raise StoreError(f"table {t!r} cannot be compacted (replays read its files "
                             f"directly); compactable: {', '.join(COMPACTABLE)}")
    merged: dict[str, int] = {}
    tx = transaction.Transaction(store)
    try:
        with store._lock(exclusive=True):
            transaction.recover_locked(store)
            moves: list[tuple[str, str]] = []
            deletes: list[str] = []
            for table in tables:
                files = {k: p for k, p in views.entries(store, table).items() if p.is_file()}
                old = manifest(store, table)
                if not files:
                    merged[table] = 0
                    continue
                m, d = compact_table(store, tx.dir, table, files, old)
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
                  old: dict[str, list[list]]) -> tuple[list[tuple[str, str]], list[str]]:
    col = "sweep_id" if table == "sweeps" else "trace"
    # partition -> key -> (loader, rows)
    sources: dict[str, dict[str, tuple[Callable[[], pa.Table], int]]] = {}
    for part, keys in old.items():
        for k, _, n in keys:
            if k not in files:  # else a file of the same key replaced it
                sources.setdefault(Path(part).parent.name, {})[k] = (
                    functools.partial(read_compacted, store, table, k), n)
    for k, p in files.items():
        try:
            n = pq.ParquetFile(p).metadata.num_rows
            first = pq.read_table(p, columns=[col]).column(0)
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"{p}: unreadable Parquet file, not compacted: {e}") from None
        value = str(first[0].as_py()) if len(first) else "empty"
        part = value if KEY_RE.fullmatch(value) else "other"
        sources.setdefault(part, {})[k] = (functools.partial(
            pq.read_table, p, schema=schema.TABLES[table]), n)
    parts: dict[str, list[list]] = {}
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
            name, entries = write_part(store, tx_dir, table, partition,
                                       ((k, src[k][0]()) for k in batch))
            parts[name] = entries
            moves.append((f"{table}/{name}", f"{table}/{name}"))
    moves.append(stage_manifest(store, tx_dir, table, parts))
    deletes = [f"{table}/{p}" for p in old] + [f"{table}/{k}.parquet" for k in files]
    return moves, deletes
