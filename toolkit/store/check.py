"""``toolkit store check`` and ``repair``: find what in a store cannot be read, one line per
file, and fix it without losing anything that still reads.

What is looked at, per table: every key file's Parquet footer and schema (a file another
program wrote there: required columns, their types, and for a trace's table that its rows
are that trace's); names that are no key; for a run table, its
manifest (JSON and shape), each listed part (there, of the size the manifest recorded,
or a footer that reads when no size was recorded), parts on disk that no manifest lists
(their rows would show twice in queries) and keys held both by a file and by a part.

What repair does: a file that does not read is moved to ``.damaged/<table>/`` (never
deleted); a listed part that is missing or does not read is dropped from the manifest
with its keys (their runs are gone: a sweep makes them again); a damaged manifest is
rebuilt from its parts' footers, which list their keys (a part without such a footer is
moved aside, its keys unknown); an unlisted part is adopted the same way; a key both in
a file and in a part keeps the file. All of it is one transaction under the store lock.
Then ``catalog.duckdb`` is compared with the views the files make, and rewritten when it
differs (missing, foreign, or stale).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError
from toolkit.store import parts, transaction, views
from toolkit.store.layout import (
    CATALOG_FILE,
    COMMIT_MARKER,
    COMPACT_DIR,
    COMPACTABLE,
    STAGING_DIR,
)

if TYPE_CHECKING:
    from toolkit.store.state import StoreState


@dataclass(frozen=True)
class Finding:
    """One problem: the file, what is wrong with it, and what repair does about it."""

    path: Path
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


def first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


def unreadable(path: Path) -> str | None:
    try:
        pq.read_metadata(path)
        return None
    except (OSError, pa.ArrowException) as e:
        return first_line(e)


def part_files(store: StoreState, table: str) -> list[str]:
    """Every Parquet file under ``table``'s compacted directory, relative to the table."""
    d = store._table_dir(table)
    return sorted(p.relative_to(d).as_posix() for p in (d / COMPACT_DIR).rglob("*.parquet"))


@dataclass
class TablePlan:
    """What repair does to one table: files to move aside, parts to rewrite without some
    keys, and the manifest to write (None: leave it)."""

    findings: list[Finding]
    quarantine: list[str]  # paths relative to the table
    rewrite: dict[str, list[list]]  # part -> entries to keep (the rest dropped)
    manifest: dict | None  # {"parts": ..., "bytes": ...} after the rewrites' renames


#: The column each key file of a table holds its key in (and nothing else): trace tables
#: by trace name, run tables by run id.
KEY_COLUMN = {
    **dict.fromkeys(("requests", "request_traces", "request_labels", "request_sessions",
                     "selections", "selection_traces", "selection_requests",
                     "engram_lookups", "engram_traces"), "trace"),
    **dict.fromkeys(("replay_runs", "selection_runs", "selection_replay", "tier_runs",
                     "tier_requests", "engram_runs", "compare_runs", "decode_costs",
                     "serving_fronts"), "run_id"),
}


def _family(t: pa.DataType) -> str:
    """Types one column may be stored as and still read as its schema's type."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list<" + _family(t.value_type) + ">"
    if pa.types.is_dictionary(t):
        return _family(t.value_type)
    for name, test in (("int", pa.types.is_integer), ("float", pa.types.is_floating),
                       ("str", lambda x: pa.types.is_string(x) or pa.types.is_large_string(x)),
                       ("bool", pa.types.is_boolean)):
        if test(t):
            return name
    return str(t)


def _only(pf: pq.ParquetFile, column: str, value: str) -> bool:
    """Whether the footer's statistics show every row of ``column`` equal to ``value``
    (then the column need not be read)."""
    md = pf.metadata
    leaves = [md.schema.column(j).path for j in range(md.num_columns)]
    if column not in leaves:
        return False
    i = leaves.index(column)
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(i).statistics
        if st is None or not st.has_min_max or st.null_count or st.min != value \
                or st.max != value:
            return False
    return True


def foreign(path: Path, table: str, key: str) -> str | None:
    """Why the readable key file ``path`` is not ``table``'s file for ``key``: a required
    column missing, a column of another type, or (a trace's table) rows of another trace,
    e.g. a file another program wrote into the table's directory. None when it is."""
    want = schema.TABLES[table]
    try:
        pf = pq.ParquetFile(path)
        have = pf.schema_arrow
    except (OSError, pa.ArrowException) as e:
        return f"unreadable Parquet file ({first_line(e)})"
    missing = [f.name for f in want if not f.nullable and f.name not in have.names]
    if missing:
        return (f"not a {table} file: column(s) {', '.join(missing[:5])} missing "
                f"(it has {', '.join(have.names[:5]) or 'none'})")
    wrong = [f"{f.name} is {have.field(f.name).type}, not {f.type}" for f in want
             if f.name in have.names and _family(have.field(f.name).type) != _family(f.type)]
    if wrong:
        return f"not a {table} file: {'; '.join(wrong[:3])}"
    col = KEY_COLUMN.get(table)
    if col is not None and pf.metadata.num_rows and not _only(pf, col, key):
        try:
            keys = set(pf.read(columns=[col]).column(col).unique().to_pylist())
        except (OSError, pa.ArrowException) as e:
            return f"unreadable Parquet file ({first_line(e)})"
        if keys != {key}:
            other = sorted(str(t) for t in keys - {key})
            what = "trace(s)" if col == "trace" else "run(s)"
            return (f"holds rows of {what} {', '.join(other[:3])} under the name {key!r} "
                    "(a copy written outside the toolkit: its rows show twice)")
    return None


def plan_table(store: StoreState, table: str, *, key_files: bool = True) -> TablePlan:
    """``key_files=False``: leave key files unread (compaction reads them anyway)."""
    d = store._table_dir(table)
    found: list[Finding] = []
    aside: list[str] = []
    file_keys: set[str] = set()
    valid, strangers = views.scan(store, table)
    if strangers and key_files:
        known = {name for name, _, _ in valid}
        for e in sorted(os.scandir(d), key=lambda e: e.name) if d.is_dir() else []:
            if e.name.startswith(".") or e.name in known:
                continue
            found.append(Finding(Path(e.path), "not a file the store writes (a name that is "
                                 "no key, or not Parquet): left out of every view",
                                 "moved to .damaged/"))
            aside.append(e.name)
    for name, key, is_file in valid:
        files = [d / name] if is_file else sorted((d / name).rglob("*.parquet"))
        for f in files:
            why = unreadable(f) if key_files else None
            if why:
                found.append(Finding(f, f"unreadable Parquet file ({why})",
                                     "moved to .damaged/ (out of every view)"))
                aside.append(f.relative_to(d).as_posix())
                continue
            why = foreign(f, table, key) if key_files and is_file else None
            if why:
                found.append(Finding(f, why, "moved to .damaged/ (out of every view)"))
                aside.append(f.relative_to(d).as_posix())
            elif is_file:
                file_keys.add(key)
    if table not in COMPACTABLE:
        return TablePlan(found, aside, {}, None)
    mpath = parts.manifest_path(store, table)
    try:
        doc = parts.read_manifest(store, table)
        rebuilt = False
    except parts.ManifestError as e:
        doc, rebuilt = {"parts": {}, "bytes": {}}, True
        reason = str(e).split(": damaged manifest (", 1)[-1].rsplit("); the table", 1)[0]
        found.append(Finding(mpath, f"damaged manifest ({reason})",
                             "rebuilt from the footers of the parts on disk"))
    keep: dict[str, list[list]] = {}
    sizes: dict[str, int] = {}
    rewrite: dict[str, list[list]] = {}
    taken = set(file_keys)
    for part, entries in doc["parts"].items():
        why = parts.part_problem(store, table, part, entries, doc["bytes"].get(part))
        if why:
            keys = [e[0] for e in entries]
            found.append(Finding(d / part, f"compacted part {why}; its {len(keys)} key(s) "
                                 f"are lost ({', '.join(keys[:5])}"
                                 f"{', ...' if len(keys) > 5 else ''})",
                                 "dropped from the manifest (a sweep makes those runs again)"
                                 + ("; moved to .damaged/" if why != "missing" else "")))
            if why != "missing":
                aside.append(part)
            continue
        keep[part] = entries
        size = doc["bytes"].get(part)
        sizes[part] = size if size is not None else (d / part).stat().st_size
    for part in part_files(store, table):
        if part in keep or part in aside:
            continue
        entries = parts.footer_entries(d / part) if parts.PART_RE.fullmatch(part) else None
        if entries is None:
            found.append(Finding(d / part, "compacted part in no manifest (its rows show "
                                 "twice or its keys are unknown)",
                                 "moved to .damaged/: its footer does not list its keys"))
            aside.append(part)
            continue
        if not rebuilt:
            found.append(Finding(d / part, "compacted part in no manifest (its rows show "
                                 "in queries but its keys do not)",
                                 f"adopted: its footer lists {len(entries)} key(s)"))
        keep[part] = entries
        sizes[part] = (d / part).stat().st_size
    for part in sorted(keep):  # a key in a file and in a part: the file wins
        entries = keep[part]
        dup = [e[0] for e in entries if e[0] in taken]
        taken.update(e[0] for e in entries)
        if dup:
            found.append(Finding(d / part, f"holds {len(dup)} key(s) that another file or "
                                 f"part also holds ({', '.join(dup[:5])}): their rows show "
                                 "twice", "rewritten without them"))
            rewrite[part] = [e for e in entries if e[0] not in dup]
    changed = rebuilt or keep != doc["parts"] or rewrite
    new_doc = {"parts": keep, "bytes": sizes} if found and changed else None
    return TablePlan(found, aside, rewrite, new_doc)


def check(store: StoreState, tables: list[str] | None = None) -> list[Finding]:
    """Every problem found in ``tables`` (None: all), one per file, then committed writes
    that could not be completed and a catalog that does not match the files; changes
    nothing."""
    with store._lock(exclusive=False):
        found = [f for t in (tables or list(schema.TABLES))
                 for f in plan_table(store, t).findings]
    return found + stuck_commits(store) + catalog_findings(store)


def _view_sql(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal "
                            "AND schema_name = 'main'").fetchall())


def catalog_findings(store: StoreState) -> list[Finding]:
    """``catalog.duckdb`` (the views for the DuckDB CLI) against the views the store's
    files make: missing, not a DuckDB file, or views that differ (a stale or foreign
    catalog would answer the DuckDB CLI with other files' rows)."""
    path = store.root / CATALOG_FILE
    if store._con is None:
        return []
    want = _view_sql(store._con)
    fix = "rewritten from the Parquet files"
    if not path.is_file():
        return [Finding(path, "missing: the DuckDB CLI sees no views", fix)]
    try:
        with duckdb.connect(str(path), read_only=True) as cat:
            have = _view_sql(cat)
    except duckdb.Error as e:
        if "lock" in str(e).lower():
            return []  # in use by the DuckDB CLI: nothing to say about it now
        return [Finding(path, f"not a catalog DuckDB can open ({first_line(e)})", fix)]
    differ = sorted(t for t in set(want) | set(have) if want.get(t) != have.get(t))
    if differ:
        return [Finding(path, f"does not match the files: view(s) {', '.join(differ[:5])}"
                        f"{', ...' if len(differ) > 5 else ''} differ", fix)]
    return []


def stuck_commits(store: StoreState) -> list[Finding]:
    """Committed transactions still in staging with no live writer: opening the store
    tried to complete them and could not (why is in ``store.problems``)."""
    staging = store.root / STAGING_DIR
    found = []
    for tx in sorted(staging.glob("tx-*")) if staging.is_dir() else []:
        try:
            if not (tx / COMMIT_MARKER).exists() or transaction.locked(tx):
                continue
        except FileNotFoundError:  # completed meanwhile
            continue
        why = next((p.split(", so a committed write")[0] for p in store.problems
                    if tx.name in p), None)
        found.append(Finding(tx, f"a committed write is not complete ({why})" if why else
                             "a committed write is not complete",
                             "completed, once the directories it moves into are writable"))
    return found


def repair(store: StoreState, tables: list[str] | None = None, *,
           dry_run: bool = False, key_files: bool = True) -> list[Finding]:
    """Fix what :func:`check` finds (see the module docstring), in one transaction;
    ``dry_run``: only say what would be done; ``key_files=False``: only manifests and
    parts. Returns the findings."""
    if dry_run:
        return check(store, tables)
    todo = tables or list(schema.TABLES)
    catalog = catalog_findings(store)
    with store._lock(exclusive=False):  # most stores need nothing: no staging, no lock
        if not any(plan_table(store, t, key_files=key_files).findings for t in todo) \
                and not transaction.dead_commit(store):
            if catalog:
                views.rewrite_catalog(store)
            return catalog
    found: list[Finding] = []
    tx = transaction.Transaction(store)
    try:
        with store._lock(exclusive=True):
            transaction.recover_locked(store, skip=tx.dir.name)
            moves: list[tuple[str, str]] = []
            deletes: list[str] = []
            for table in todo:
                plan = plan_table(store, table, key_files=key_files)
                found += plan.findings
                for rel in plan.quarantine:
                    parts.quarantine(store, table, rel)
                if plan.manifest is None:
                    continue
                doc = plan.manifest
                for part, entries in plan.rewrite.items():
                    kept = [e for e in doc["parts"].pop(part) if e in entries]
                    doc["bytes"].pop(part, None)
                    deletes.append(f"{table}/{part}")
                    if not kept:
                        continue
                    new, new_entries, nbytes = parts.copy_part(
                        tx.dir, table, parts.partition_of(part),
                        store._table_dir(table) / part, kept)
                    doc["parts"][new], doc["bytes"][new] = new_entries, nbytes
                    moves.append((f"{table}/{new}", f"{table}/{new}"))
                moves.insert(0, parts.stage_manifest(tx.dir, table, doc["parts"], doc["bytes"]))
            if moves or deletes:
                tx.commit_ops(moves, deletes)
    except (OSError, pa.ArrowException) as e:
        raise StoreError(f"{store.root}: repair stopped, nothing changed but files moved "
                         f"to .damaged/: {first_line(e)}") from None
    finally:
        tx.close()
        views.refresh_views(store)
    if catalog_findings(store):
        views.rewrite_catalog(store)
    return found + catalog
