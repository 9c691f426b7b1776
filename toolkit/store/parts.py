"""Compacted parts: a run table's rows merged into parts partitioned by trace, and the
manifest mapping each key to its rows. Reading, replacing and deleting a key that lives in
a part goes through here (transactions and views need it; :mod:`.compact` makes parts).

The manifest is an index, not the only record: each part's Parquet footer carries its own
``[[key, first row, rows], ...]`` under :data:`FOOTER_KEYS`, and the manifest records each
part's size in bytes, so a damaged manifest can be rebuilt from the parts and a truncated
part is found by one ``stat`` (:mod:`.check`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError
from toolkit.store.layout import COMPACT_DIR, COMPACTABLE, DAMAGED_DIR, KEY_RE, MANIFEST_FILE
from toolkit.store.parquet.sink import ParquetSink

if TYPE_CHECKING:
    from toolkit.store.state import StoreState

FOOTER_KEYS = b"toolkit.keys"
#: A part's path relative to its table: ``.compacted/<partition>/part-<hex>.parquet``.
#: Stores written before the layout was kept flat may hold ``.compacted/`` repeated;
#: those still read, and the next rewrite of the part puts it back at one level.
PART_RE = re.compile(
    r"(?:\.compacted/)+([A-Za-z0-9][A-Za-z0-9_.\-]{0,127})/part-[0-9a-f]{1,32}\.parquet")


class ManifestError(StoreError):
    """A table's ``manifest.json`` cannot be read or does not describe parts."""


def manifest_path(store: StoreState, table: str) -> Path:
    return Path(store._manifests[table])


def damaged_manifest(store: StoreState, table: str, why: str) -> ManifestError:
    return ManifestError(
        f"{store._manifests[table]}: damaged manifest ({why}); the table's other files "
        f"still read; rebuild it with: toolkit store repair --store {store.root}")


def read_manifest(store: StoreState, table: str) -> dict:
    """The whole manifest of ``table`` (``{"parts": ..., "bytes": ...}``, fresh dicts the
    caller may change), checked; an absent one is empty. Parsed once per version of the
    file: every write of a run table asks whether its key lives in a part, and parsing a
    2,000-key manifest each time was most of a replacement's cost. A manifest is only
    ever replaced by a rename, so its (inode, size, mtime, ctime) names its content.

    Raises:
        ManifestError: not JSON, or not a manifest (its path and what is wrong).
    """
    doc, _ = cached_manifest(store, table)
    return {"parts": dict(doc["parts"]), "bytes": dict(doc["bytes"])}


def cached_manifest(store: StoreState, table: str) -> tuple[dict, dict]:
    """The checked manifest of ``table`` and its key -> (part, first row, rows) map, from
    the store's cache when the file is unchanged (both shared: do not change them)."""
    store._table_dir(table)  # refuses an unknown table
    path = store._manifests[table]
    try:  # a string path, opened directly: Path joins and read_text cost ~0.05 ms
        with open(path, "rb") as f:  # of a one-row write, twice
            st = os.fstat(f.fileno())
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            hit = store._manifest_cache.get(table)
            if hit is not None and hit[0] == stamp:
                return hit[1], hit[2]
            raw = f.read()
    except FileNotFoundError:
        return {"parts": {}, "bytes": {}}, {}
    except OSError as e:
        raise damaged_manifest(store, table, e.strerror or str(e)) from None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise damaged_manifest(store, table, f"not JSON: {str(e)[:80]}") from None
    why = manifest_problem(doc)
    if why:
        raise damaged_manifest(store, table, why)
    doc.setdefault("bytes", {})
    keys = {k: (part, off, n) for part, entries in doc["parts"].items()
            for k, off, n in entries}
    store._manifest_cache[table] = (stamp, doc, keys)
    return doc, keys


def manifest_problem(doc: object) -> str | None:
    """What makes ``doc`` not a manifest (None: it is one)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("parts"), dict):
        return "no 'parts' object"
    sizes = doc.get("bytes", {})
    if not isinstance(sizes, dict):
        return "'bytes' is not an object"
    seen: set[str] = set()
    for part, entries in doc["parts"].items():
        if not PART_RE.fullmatch(part):
            return f"part path {part[:80]!r} is not a compacted part's"
        if not isinstance(entries, list):
            return f"part {part}: its keys are not a list"
        for e in entries:
            if not (isinstance(e, list) and len(e) == 3 and isinstance(e[0], str)
                    and KEY_RE.fullmatch(e[0]) and all(
                        type(v) is int and v >= 0 for v in e[1:])):
                return f"part {part}: entry {str(e)[:60]} is not [key, first row, rows]"
            if e[0] in seen:
                return f"key {e[0]!r} listed twice"
            seen.add(e[0])
        size = sizes.get(part)
        if size is not None and (type(size) is not int or size < 0):
            return f"part {part}: size {size!r} is not a byte count"
    return None


def manifest(store: StoreState, table: str) -> dict[str, list[list]]:
    """Compacted part (path relative to the table) -> [[key, first row, rows], ...]."""
    return read_manifest(store, table)["parts"]


def compacted(store: StoreState, table: str) -> dict[str, tuple[str, int, int]]:
    """Key -> (part, first row, rows) for the keys living in compacted parts."""
    if table not in COMPACTABLE:
        return {}
    return cached_manifest(store, table)[1]


def partition_of(part: str) -> str:
    m = PART_RE.fullmatch(part)
    assert m is not None  # manifests are checked on reading
    return m.group(1)


def part_problem(store: StoreState, table: str, part: str, entries: list[list],
                 size: int | None) -> str | None:
    """Why compacted ``part`` cannot give its rows (None: it can): missing, of another
    size than the manifest recorded, or (no size recorded) a footer that does not read
    or holds fewer rows than its keys."""
    path = store._table_dir(table) / part
    try:
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return e.strerror or str(e)
    if size is not None:
        return None if st.st_size == size else f"{st.st_size} bytes, the manifest says {size}"
    try:
        rows = pq.read_metadata(path).num_rows
    except (OSError, pa.ArrowException) as e:
        return f"unreadable: {str(e).splitlines()[0][:100]}"
    need = max((off + n for _, off, n in entries), default=0)
    return None if rows >= need else f"{rows} rows, its keys need {need}"


def damaged_parts(store: StoreState, table: str, doc: dict | None = None) -> dict[str, str]:
    """Part -> what is wrong, for the listed parts of ``table`` that cannot give their rows."""
    doc = read_manifest(store, table) if doc is None else doc
    out = {}
    for part, entries in doc["parts"].items():
        why = part_problem(store, table, part, entries, doc["bytes"].get(part))
        if why:
            out[part] = why
    return out


def read_compacted(store: StoreState, table: str, key: str) -> pa.Table:
    part, off, n = compacted(store, table)[key]
    path = store._table_dir(table) / part
    try:
        t = PartReader(path).rows(off, n)
    except (OSError, pa.ArrowException, StoreError) as e:
        raise StoreError(f"{path}: unreadable compacted part holding {table} {key!r} "
                         f"({str(e).splitlines()[0][:100]}); toolkit store repair --store "
                         f"{store.root} drops it so the run can be made again") from None
    return schema.conform(t, schema.TABLES[table])


class PartReader:
    """Rows of one part by (first row, rows), reading each row group at most once when
    asked in row order (the last group is kept): rewriting or merging a part costs that
    part, however many keys it holds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pf = pq.ParquetFile(path)
        sizes = [self._pf.metadata.row_group(i).num_rows for i in range(self._pf.num_row_groups)]
        self._starts = np.cumsum([0, *sizes])
        self._g, self._group = -1, None

    def rows(self, off: int, n: int) -> pa.Table:
        pieces = []
        while n > 0:
            g = int(np.searchsorted(self._starts, off, side="right")) - 1
            if g >= len(self._starts) - 1:
                raise StoreError(f"{self.path}: ends before row {off}")
            if g != self._g:
                self._g, self._group = g, self._pf.read_row_group(g, use_threads=False)
            assert self._group is not None
            take = min(n, int(self._starts[g + 1]) - off)
            pieces.append(self._group.slice(off - int(self._starts[g]), take))
            off, n = off + take, n - take
        if not pieces:
            return self._pf.schema_arrow.empty_table()
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def part_rows(path: Path, entries: list[list]) -> Iterator[tuple[list, pa.Table]]:
    """Each entry of ``entries`` with its rows, in row order, reading ``path`` once."""
    reader = PartReader(path)
    for e in sorted(entries, key=lambda e: e[1]):
        yield e, reader.rows(e[1], e[2])


def copy_part(tx_dir: Path, table: str, partition: str, src: Path, kept: list[list]
              ) -> tuple[str, list[list], int]:
    """A new staged part holding the ``kept`` entries of part ``src``: runs of adjacent
    entries are read and written as one slice (dropping one key of a part of 2,000
    one-row runs is then a few slices, not 2,000 small tables)."""
    reader = PartReader(src)
    runs: list[list[list]] = []
    for e in sorted(kept, key=lambda e: e[1]):
        if runs and runs[-1][-1][1] + runs[-1][-1][2] == e[1]:
            runs[-1].append(e)
        else:
            runs.append([e])
    name, path = new_part_path(tx_dir, table, partition)
    sink = ParquetSink(path, schema.TABLES[table])
    entries: list[list] = []
    off = 0
    try:
        for run in runs:
            start, rows = run[0][1], sum(e[2] for e in run)
            sink.write(schema.conform(reader.rows(start, rows), schema.TABLES[table]))
            for key, first, n in run:
                entries.append([key, off + first - start, n])
            off += rows
        sink.add_metadata({FOOTER_KEYS: json.dumps(entries).encode()})
    finally:
        sink.close()
    return name, entries, path.stat().st_size


def expel_ops(store: StoreState, tx_dir: Path, drop: set[tuple[str, str]]
              ) -> tuple[list[tuple[str, str]], list[str]]:
    """Stage rewrites of the compacted parts holding ``drop`` without those keys, and a
    new manifest: (moves, deletes) for the commit. Caller holds the exclusive lock.

    Each part is read once and written once into the same partition (one level under
    ``.compacted``). A part that is missing or does not read is dropped from the manifest
    with all its keys (their rows are gone already), moved aside to ``.damaged/`` if it
    is there, and noted: a sweep then re-runs those cells."""
    moves: list[tuple[str, str]] = []
    deletes: list[str] = []
    for table in sorted({t for t, _ in drop}):
        keys = {k for t, k in drop if t == table}
        doc = read_manifest(store, table)
        parts, sizes = doc["parts"], doc["bytes"]
        hit = [p for p, ks in parts.items() if any(k in keys for k, _, _ in ks)]
        if not hit:
            continue
        for part in hit:
            entries = parts.pop(part)
            size = sizes.pop(part, None)
            kept = [e for e in entries if e[0] not in keys]
            why = part_problem(store, table, part, entries, size) if kept else None
            if kept and why is None:
                try:
                    new, new_entries, nbytes = copy_part(
                        tx_dir, table, partition_of(part), store._table_dir(table) / part, kept)
                except (OSError, pa.ArrowException, StoreError) as e:
                    why = f"unreadable: {str(e).splitlines()[0][:100]}"
                else:
                    parts[new], sizes[new] = new_entries, nbytes
                    moves.append((f"{table}/{new}", f"{table}/{new}"))
            if why is not None:
                lost = [e[0] for e in kept]
                store._note(f"{store._table_dir(table) / part}: compacted part {why}; "
                            f"dropped from the manifest with {len(lost)} other key(s) "
                            f"({', '.join(lost[:5])}{', ...' if len(lost) > 5 else ''})")
                quarantine(store, table, part)
            else:
                deletes.append(f"{table}/{part}")
        moves.insert(0, stage_manifest(tx_dir, table, parts, sizes))
    return moves, deletes


def quarantine(store: StoreState, table: str, rel: str) -> Path | None:
    """Move ``table``/``rel`` (a damaged file) to ``.damaged/<table>/``, out of every view
    and never deleted by the toolkit; None when there is no such file."""
    src = store._table_dir(table) / rel
    if not src.exists():
        return None
    dest = store.root / DAMAGED_DIR / table / f"{uuid.uuid4().hex[:8]}-{src.name}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(src, dest)
    except OSError:  # another file system: copy, then remove
        shutil.copy2(src, dest)
        src.unlink()
    return dest


def new_part_path(tx_dir: Path, table: str, partition: str) -> tuple[str, Path]:
    """A new part's name (relative to its table) and where it is staged."""
    if not KEY_RE.fullmatch(partition):
        raise StoreError(f"{partition!r} is not a partition name")
    name = f"{COMPACT_DIR}/{partition}/part-{uuid.uuid4().hex[:12]}.parquet"
    path = tx_dir / table / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return name, path


def write_part(tx_dir: Path, table: str, partition: str,
               keyed: Iterable[tuple[str, pa.Table]]) -> tuple[str, list[list], int]:
    """Write ``(key, rows)`` into one new staged part in ``partition``; returns its name
    (relative to the table), its entries and its size in bytes. The entries also go
    into the part's footer (:data:`FOOTER_KEYS`)."""
    name, path = new_part_path(tx_dir, table, partition)
    sink = ParquetSink(path, schema.TABLES[table])
    entries: list[list] = []
    off = 0
    try:
        for key, t in keyed:
            t = schema.conform(t, schema.TABLES[table])
            sink.write(t)
            entries.append([key, off, t.num_rows])
            off += t.num_rows
        sink.add_metadata({FOOTER_KEYS: json.dumps(entries).encode()})
    finally:
        sink.close()
    return name, entries, path.stat().st_size


def footer_entries(path: Path) -> list[list] | None:
    """The ``[[key, first row, rows], ...]`` a part's footer records (None: parts written
    before footers carried them, or a footer that does not read or does not check)."""
    try:
        meta = pq.read_metadata(path)
        raw = (meta.metadata or {}).get(FOOTER_KEYS)
        if raw is None:
            return None
        entries = json.loads(raw)
    except (OSError, pa.ArrowException, ValueError):
        return None
    if manifest_problem({"parts": {f"{COMPACT_DIR}/p/part-0.parquet": entries}}):
        return None
    if max((off + n for _, off, n in entries), default=0) > meta.num_rows:
        return None
    return entries


def stage_manifest(tx_dir: Path, table: str, parts: dict, sizes: dict) -> tuple[str, str]:
    rel = f"{table}/{COMPACT_DIR}/{MANIFEST_FILE}"
    (tx_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    doc = {"parts": parts, "bytes": {p: sizes[p] for p in parts if p in sizes}}
    (tx_dir / rel).write_text(json.dumps(doc, sort_keys=True))
    return rel, rel
