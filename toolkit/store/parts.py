"""Compacted parts: a run table's rows merged into parts partitioned by trace, and the
manifest mapping each key to its rows. Reading, replacing and deleting a key that lives in
a part goes through here (transactions and views need it; :mod:`.compact` makes parts)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.store.layout import COMPACT_DIR, COMPACTABLE, MANIFEST_FILE
from toolkit.store.parquet.sink import ParquetSink

if TYPE_CHECKING:
    from toolkit.store.state import StoreState


def manifest(store: StoreState, table: str) -> dict[str, list[list]]:
    """Compacted part (path relative to the table) -> [[key, first row, rows], ...]."""
    store._table_dir(table)  # refuses an unknown table
    try:  # a string path, opened directly: Path joins and read_text cost ~0.05 ms
        with open(store._manifests[table], "rb") as f:  # of a one-row write, twice
            return json.loads(f.read())["parts"]
    except FileNotFoundError:
        return {}


def compacted(store: StoreState, table: str) -> dict[str, tuple[str, int, int]]:
    """Key -> (part, first row, rows) for the keys living in compacted parts."""
    if table not in COMPACTABLE:
        return {}
    return {k: (part, off, n) for part, keys in manifest(store, table).items()
            for k, off, n in keys}


def read_compacted(store: StoreState, table: str, key: str) -> pa.Table:
    part, off, n = compacted(store, table)[key]
    pf = pq.ParquetFile(store._table_dir(table) / part)
    starts = np.cumsum([0] + [pf.metadata.row_group(i).num_rows
                              for i in range(pf.num_row_groups)])
    g0 = int(np.searchsorted(starts, off, side="right")) - 1
    g1 = int(np.searchsorted(starts, off + n, side="left"))
    t = pf.read_row_groups(list(range(g0, g1)), use_threads=False)
    return schema.conform(t.slice(off - int(starts[g0]), n), schema.TABLES[table])


def expel_ops(store: StoreState, tx_dir: Path, drop: set[tuple[str, str]]
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """Stage rewrites of the compacted parts holding ``drop`` without those keys, and a
    new manifest: (moves, deletes) for the commit. Caller holds the exclusive lock."""
    moves: list[tuple[str, str]] = []
    deletes: list[str] = []
    for table in sorted({t for t, _ in drop}):
        keys = {k for t, k in drop if t == table}
        parts = manifest(store, table)
        hit = [p for p, ks in parts.items() if any(k in keys for k, _, _ in ks)]
        if not hit:
            continue
        for part in hit:
            kept = [e for e in parts.pop(part) if e[0] not in keys]
            deletes.append(f"{table}/{part}")
            if kept:
                new_part, entries = write_part(
                    store, tx_dir, table, str(Path(part).parent),
                    [(k, read_compacted(store, table, k)) for k, _, _ in kept])
                parts[new_part] = entries
                moves.append((f"{table}/{new_part}", f"{table}/{new_part}"))
        moves.append(stage_manifest(store, tx_dir, table, parts))
    return moves, deletes


def write_part(store: StoreState, tx_dir: Path, table: str, partition: str,
               keyed: Iterable[tuple[str, pa.Table]]) -> tuple[str, list[list]]:
    """Write ``(key, rows)`` into one new staged part; returns its name and entries."""
    name = f"{COMPACT_DIR}/{partition}/part-{uuid.uuid4().hex[:12]}.parquet"
    path = tx_dir / table / name
    path.parent.mkdir(parents=True, exist_ok=True)
    sink, entries, off = None, [], 0
    try:
        for key, t in keyed:
            t = schema.conform(t, schema.TABLES[table])
            sink = sink or ParquetSink(path, schema.TABLES[table])
            sink.write(t)
            entries.append([key, off, t.num_rows])
            off += t.num_rows
    finally:
        if sink is not None:
            sink.close()
    return name, entries


def stage_manifest(store: StoreState, tx_dir: Path, table: str, parts: dict) -> tuple[str, str]:
    rel = f"{table}/{COMPACT_DIR}/{MANIFEST_FILE}"
    (tx_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (tx_dir / rel).write_text(json.dumps({"parts": parts}, sort_keys=True))
    return rel, rel
