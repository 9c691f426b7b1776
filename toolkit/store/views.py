"""The DuckDB views over a store's tables, kept current as files come and go, and the
on-disk ``catalog.duckdb`` holding the same views for the DuckDB CLI."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.store import parts
from toolkit.store.layout import CATALOG_FILE, COMPACT_DIR, COMPACTABLE, KEY_RE

if TYPE_CHECKING:
    from toolkit.store.state import StoreState

_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.int16(): "SMALLINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}


def duckdb_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return duckdb_type(t.value_type) + "[]"
    return _DUCKDB_TYPES[t]


def sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def glob_literal(path: str) -> str:
    """``path`` as a DuckDB glob matching only itself (``s[1]`` must not match ``s1``)."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def after_own_write(store: StoreState, tables: set[str]) -> None:
    """What :func:`refresh_views` would do after our own write into ``tables``
    alone, with one ``stat`` a table instead of the store lock and one per table
    (0.1-0.2 ms of a one-row write or a replay's commit): a table read by glob whose
    directory time moved keeps its view, and the next query, which sees that
    directory changed, lists it (as :func:`refresh_views` arranges). Any other case
    takes the full refresh."""
    if store._con is not None and store._seen is not None and len(store._made) == len(
            schema.TABLES) and all(moved_glob(store, t) for t in tables):
        return
    refresh_views(store, tables)


def moved_glob(store: StoreState, table: str, mtime_ns: int | None = None) -> bool:
    """Whether ``table`` is read by glob and its directory time (``mtime_ns``, or
    stat-ed now) moved since the last refresh (so the write just made is seen by the
    next query's refresh)."""
    i = store._table_index.get(table)
    if i is None or store._seen is None or store._made.get(table) != glob_view(store, table):
        return False
    if mtime_ns is None:
        try:
            mtime_ns = os.stat(store._dir_names[i]).st_mtime_ns
        except FileNotFoundError:
            return False
    return mtime_ns != store._seen[i]


def scan(store: StoreState, table: str) -> tuple[list[tuple[str, str, bool]], bool]:
    """One ``scandir`` of ``table``'s directory, names only (file types from the
    directory entries: no stat, no path object per entry): its valid entries as
    (name, key, is_file) in name order, and whether it holds anything else (an
    invalid name, a file that is not Parquet). Every write re-lists the tables it
    touched, so this runs once per run a sweep records: with a path object and a
    second listing per entry, a 2,000-cell sweep spent more here than replaying."""
    d = store._table_dir(table)
    try:
        with os.scandir(d) as it:
            found = [(e.name, e.is_file(), e.is_dir()) for e in it
                     if not e.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return [], False
    valid: list[tuple[str, str, bool]] = []
    strangers = False
    for name, is_file, is_dir in found:
        if is_file and name.endswith(".parquet"):
            key = name[:-8]
        elif is_dir:
            key = name
        else:
            strangers = True
            continue
        if not KEY_RE.fullmatch(key):
            store._note(f"{d / name}: not a valid key name; ignored")
            strangers = True
            continue
        valid.append((name, key, is_file))
    valid.sort()
    return valid, strangers


def entries(store: StoreState, table: str) -> dict[str, Path]:
    """Valid key -> file or directory of ``table`` (see :meth:`_scan`)."""
    d = store._table_dir(table)
    return {key: d / name for name, key, _ in scan(store, table)[0]}


def signature(store: StoreState) -> tuple[int, ...]:
    """The times of every table directory, then of each run table's compacted directory
    and of the staging directory: a compaction (which may leave a table directory's own
    time alone) and a commit that another process left half done both show."""
    sig = []
    for d in store._sig_names:  # strings: a Path per table was half of this
        try:
            sig.append(os.stat(d).st_mtime_ns)
        except (FileNotFoundError, NotADirectoryError):
            sig.append(0)
    return tuple(sig)


def view_sql(store: StoreState, table: str, files: list[Path] | None) -> str:
    """``files=None``: every Parquet file under the table's directory, found when a query
    runs (the directory's path escaped so its glob matches only itself)."""
    if files is None:
        glob = sql_str(glob_literal(str(store._table_dir(table))) + "/**/*.parquet")
        return f"SELECT * FROM read_parquet({glob}, union_by_name = true)"
    if files:
        listed = ", ".join(sql_str(glob_literal(str(f))) for f in files)
        return f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"
    cols = ", ".join(
        f"CAST(NULL AS {duckdb_type(f.type)}) AS {f.name}" for f in schema.TABLES[table]
    )
    return f"SELECT {cols} WHERE false"


def view(store: StoreState, table: str) -> tuple[str, Callable[[], list[Path]]]:
    """The view statement to try first, and the table's files (listed when asked:
    only a fallback needs them once the glob works).

    A table whose entries all have valid key names reads its directory by glob, so the
    statement (and the catalog) does not change when files are added; a table holding
    an invalid name lists its valid files instead, leaving the stranger out.
    """
    d = store._table_dir(table)
    valid, strangers = scan(store, table)
    compacted: list[str] = []
    if table in COMPACTABLE:
        try:
            compacted = list(parts.manifest(store, table))
        except parts.ManifestError as e:  # the parts on disk still read by glob
            store._note(str(e))
            compacted = sorted(p.relative_to(d).as_posix()
                               for p in (d / COMPACT_DIR).rglob("*.parquet"))

    def files() -> list[Path]:
        out: list[Path] = []
        for name, _, is_file in valid:  # a file is named <key>.parquet, a directory <key>
            out.extend([d / name] if is_file else sorted((d / name).rglob("*.parquet")))
        return out + [d / part for part in compacted]

    some = compacted or any(is_file for _, _, is_file in valid) or files()
    if not some:
        return f"CREATE OR REPLACE VIEW {table} AS {view_sql(store, table, [])}", list
    sql = view_sql(store, table, files() if strangers else None)
    return f"CREATE OR REPLACE VIEW {table} AS {sql}", files


def create_view(store: StoreState, table: str, stmt: str, files: Callable[[], list[Path]]) -> str:
    """Run ``stmt``; if DuckDB cannot read some file, leave it out (noting it by name)
    so one corrupt file does not break queries on the other tables."""
    con = store._con
    assert con is not None
    try:
        con.execute(stmt)
        return stmt
    except duckdb.Error:
        pass
    good = []
    for f in files():
        try:
            pq.read_metadata(f)
            con.execute(f"DESCRIBE {view_sql(store, table, [f])}")
            good.append(f)
        except (OSError, pa.ArrowException, duckdb.Error) as e:
            store._note(f"{f}: unreadable Parquet file, left out of view {table!r}: "
                        f"{str(e).splitlines()[0]}")
    stmt = f"CREATE OR REPLACE VIEW {table} AS {view_sql(store, table, good)}"
    try:
        con.execute(stmt)
    except duckdb.Error as e:
        store._note(f"table {table!r}: files do not combine ({str(e).splitlines()[0]}); "
                    "its view is empty")
        stmt = f"CREATE OR REPLACE VIEW {table} AS {view_sql(store, table, [])}"
        con.execute(stmt)
    return stmt


def refresh_views(store: StoreState, touched: set[str] | None = None) -> None:
    """Re-make the views of ``touched`` tables (None: all) and of every table whose
    directory changed since the last refresh (another process may have written it).
    Re-listing all tables after every one-row write cost ~1 ms of a ~2.5 ms write."""
    if store._con is None:
        return
    with store._lock(exclusive=False):
        seen = list(signature(store))
        if touched is None or store._seen is None or len(store._made) < len(schema.TABLES):
            todo = set(schema.TABLES)
        else:
            todo = touched | {t for t, a, b in zip(store._sig_tables, seen, store._seen,
                                                   strict=True) if a != b and t}
            for i, t in enumerate(schema.TABLES):
                if t in touched and moved_glob(store, t, seen[i]):
                    # our own write into a table read by glob leaves its view as it
                    # is: list it when a query next needs it (its change is still
                    # unseen), not after every write (a sweep recording 2,000 runs
                    # spent 8 of its 17 s listing the runs it had written). A
                    # directory whose time did not move (a coarse clock: another
                    # writer's file could hide in the same tick) is listed now.
                    todo.discard(t)
                    seen[i] = store._seen[i]
        wanted = {t: view(store, t) for t in schema.TABLES if t in todo}
    ddl = []
    for t in schema.TABLES:
        if t in wanted:
            stmt, files = wanted[t]
            # a statement that worked last time needs no new bind; after a fallback (a
            # corrupt file left out) the table is re-listed whenever its directory
            # changes
            if not store._tried.get(t) == stmt == store._made.get(t):
                store._made[t] = create_view(store, t, stmt, files)
                store._tried[t] = stmt
        ddl.append(store._made[t])
    store._seen = tuple(seen)
    write_catalog(store, ddl)


def glob_view(store: StoreState, table: str) -> str:
    """The view statement of a table whose entries all have valid names."""
    return f"CREATE OR REPLACE VIEW {table} AS {view_sql(store, table, None)}"


def rewrite_catalog(store: StoreState) -> None:
    """Write ``catalog.duckdb`` afresh from the views in force (``store repair`` of a
    catalog that does not match the files, whatever its recorded digest says)."""
    store._catalog_ddl = None
    write_catalog(store, [store._made[t] for t in schema.TABLES if t in store._made],
                  force=True)


def write_catalog(store: StoreState, ddl: list[str], *, force: bool = False) -> None:
    """Rewrite ``catalog.duckdb`` only when its views would change, so commands that
    change nothing leave the store byte-identical. The catalog is a cache of views: one
    that does not open (garbage, truncated, another program's file) is rebuilt from the
    Parquet files and noted. A new catalog is written beside it and renamed over it, so
    a reader (the DuckDB CLI) never sees half of one."""
    if ddl == store._catalog_ddl:  # the same statements (mostly the same objects):
        return  # no hash of every view's text after each write (0.2-0.3 ms)
    sha = hashlib.sha256("\n".join(ddl).encode()).hexdigest()
    path = store.root / CATALOG_FILE
    if path.exists() and not force:
        try:
            with duckdb.connect(str(path), read_only=True) as cat:
                row = cat.execute("SELECT sha FROM toolkit_catalog").fetchone()
            if row and row[0] == sha:
                store._catalog_ddl = list(ddl)
                return
        except duckdb.CatalogException:  # a DuckDB file without our table: rewrite it
            pass
        except duckdb.Error as e:
            if "conflicting lock" in str(e).lower() or "could not set lock" in str(e).lower():
                # held by another process (the DuckDB CLI writing to it): our in-memory
                return  # views still work, and a later command rewrites it
            store._note(f"{path}: not a catalog DuckDB can open ({str(e).splitlines()[0][:80]}); "
                        "rebuilt from the Parquet files")
    tmp = store.root / f".{CATALOG_FILE}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with duckdb.connect(str(tmp)) as cat:
            for stmt in ddl:
                cat.execute(stmt)
            cat.execute("CREATE OR REPLACE TABLE toolkit_catalog AS SELECT $sha AS sha",
                        {"sha": sha})
        os.replace(tmp, path)
        store._catalog_ddl = list(ddl)
    except (duckdb.Error, OSError):  # e.g. a read-only store: the views still work
        pass
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
