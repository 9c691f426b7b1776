"""The :class:`Store` API: tables in, tables out, by table and key, plus SQL over views.

How writes stay all-or-nothing lives in ``transaction``, compaction in ``compact``, the
views in ``views``, the Parquet encodings in ``parquet``; see :mod:`toolkit.store` for the
layout on disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError
from toolkit.runtime.progress import turned_off
from toolkit.store import check, compact, parts, readonly, transaction, trash, views
from toolkit.store.layout import (
    CACHE_DIR,
    CATALOG_FILE,
    COMPACT_DIR,
    COMPACTABLE,
    MANIFEST_FILE,
    SMALL_WRITE_BYTES,
    STAGING_DIR,
    check_key,
)
from toolkit.store.parquet.row import encode_row
from toolkit.store.parquet.sink import (
    FAST_CODEC_TABLES,
    ParquetSink,
    table_codec,
    write_parquet,
)

if TYPE_CHECKING:  # imported by the queries that return a frame: ~0.3 s, not for the rest
    import polars as pl


class Store:
    """A trace store opened at ``root``. Use :func:`open_store` and a ``with`` block.

    Queries run on an in-memory DuckDB connection whose views read each table's directory
    (its path escaped, so ``s[1]`` never matches ``s1``); a table holding a file with an
    invalid name or an unreadable file lists its good files instead. Views are checked when
    a table directory changes, so a store kept open in a notebook sees other processes'
    writes. ``catalog.duckdb`` holds the same views for the DuckDB CLI and is rewritten only
    when a definition changes (a table's first file, a damaged file), not on every write.

    Attributes:
        problems: what opening or reading found and worked around (an interrupted write
            completed, stale staging removed, an unreadable file or invalid name left out
            of the views), one line each; the CLI prints them as warnings.
    """

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            if self.root.exists():
                raise StoreError(f"store path {self.root} is not a directory")
            if not create:
                raise StoreError(f"no store at {self.root}; create one with toolkit ingest")
            self.root.mkdir(parents=True, exist_ok=True)  # another process may race us
        elif not create and not _holds_store(self.root):
            # a read-only command (info, sql, replay) given a directory that is not a
            # store wrote a catalog into it and answered from an empty store
            raise StoreError(f"{self.root} is not a store (no {CATALOG_FILE} or table "
                             "directories); give a store's directory, or create one with "
                             "toolkit ingest (Python: create=True)")
        self.problems: list[str] = []
        self._dirs = {t: self.root / t for t in schema.TABLES}
        self._dir_names = [str(d) for d in self._dirs.values()]
        self._table_index = {t: i for i, t in enumerate(schema.TABLES)}
        self._manifests = {t: os.path.join(d, COMPACT_DIR, MANIFEST_FILE)
                           for t, d in zip(schema.TABLES, self._dir_names, strict=True)}
        self._manifest_cache: dict[str, tuple] = {}
        self._sig_names = [*self._dir_names, *(os.path.join(self._dir_names[i], COMPACT_DIR)
                                               for i, t in enumerate(schema.TABLES)
                                               if t in COMPACTABLE),
                           str(self.root / STAGING_DIR)]
        self._sig_tables = [*schema.TABLES, *(t for t in schema.TABLES if t in COMPACTABLE), ""]
        self._tx: transaction.Transaction | None = None
        self._seen: tuple[int, ...] | None = None
        self._tried: dict[str, str] = {}  # table -> view statement last attempted
        self._made: dict[str, str] = {}  # table -> view statement in force
        self._catalog_ddl: list[str] | None = None  # the view statements last on disk
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect()
        self._open_con: duckdb.DuckDBPyConnection | None = None  # for allow_write
        self._open_made: dict[str, str] = {}
        if turned_off():  # DuckDB draws its own bar in a notebook for a query over ~2 s,
            # so an executed notebook's outputs would depend on the machine's speed
            self._con.execute("SET enable_progress_bar = false")
        readonly.confine(self._con, self.root)
        transaction.recover(self)
        views.refresh_views(self)

    # -- context management -------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        trash.drain_trash()  # replaced files this process still has to unlink
        if self._open_con is not None:
            self._open_con.close()
            self._open_con = None
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The store's DuckDB connection: its views, reading only files inside the store
        (see :mod:`toolkit.store.readonly`)."""
        if self._con is None:
            raise StoreError(f"store {self.root} is closed")
        if self._tx is None and views.signature(self) != self._seen:
            # another process changed the store: if it died inside a commit, complete
            # that first, so no query sees the files it replaced next to their
            # replacements (a compaction's parts and the per-run files they merged)
            transaction.complete_dead_commits(self)
            views.refresh_views(self, set())  # the tables whose directories changed
        return self._con

    # -- reading --------------------------------------------------------------------
    def query(self, sql: str, params: dict[str, object] | None = None, *,
              allow_write: bool = False) -> pl.DataFrame:
        """Run DuckDB SQL against the store's views and return a Polars frame.

        Pass values (names, run ids) as ``params`` (``$name`` in the SQL), never by
        formatting them into the text. Read-only unless ``allow_write``: statements
        other than queries, and any file outside the store, are refused
        (:mod:`toolkit.store.readonly`). The query runs under the store's shared lock,
        so it never sees half of another process's commit (a compaction's new parts
        next to the files they replace).

        Raises:
            readonly.WriteRefused: a statement that writes, or reads outside the store.
        """
        rel = self._run(sql, params, allow_write, lambda r: r.pl())
        if rel is None:
            import polars as pl

            return pl.DataFrame()
        return rel

    def query_fetch(self, sql: str, fetch: Callable[[duckdb.DuckDBPyRelation], T],
                    params: dict[str, object] | None = None, *,
                    allow_write: bool = False) -> T | None:
        """Like :meth:`query` but hands the DuckDB relation to ``fetch`` (under the same
        checks and lock) and returns what it returns; ``None`` for a statement without a
        result. For a caller that reads the rows its own way: ``toolkit sql`` prints
        DuckDB's own rows without importing Polars."""
        return self._run(sql, params, allow_write, fetch)

    def query_arrow(self, sql: str, params: dict[str, object] | None = None, *,
                    allow_write: bool = False) -> pa.Table:
        """Like :meth:`query` but returns an Arrow table (keeps exact Arrow types)."""
        t = self._run(sql, params, allow_write, lambda r: r.to_arrow_table())
        return pa.table({}) if t is None else t

    def _run(self, sql: str, params: dict[str, object] | None, allow_write: bool,
             fetch: Callable[[duckdb.DuckDBPyRelation], T]) -> T | None:
        if allow_write:
            con = self._writable_con()
        else:
            readonly.check_statements(sql)
            con = self.con
        with self._lock(exclusive=False):
            try:
                rel = con.sql(sql, params=params)
                return None if rel is None else fetch(rel)
            except duckdb.Error as e:
                if not allow_write:
                    readonly.refused_by_duckdb(e)
                raise

    def _writable_con(self) -> duckdb.DuckDBPyConnection:
        """A second connection with the same views and DuckDB's defaults (files
        anywhere, any statement), for ``allow_write``."""
        self.con  # noqa: B018 - brings the views up to date
        if self._open_con is None:
            self._open_con, self._open_made = duckdb.connect(), {}
            if turned_off():
                self._open_con.execute("SET enable_progress_bar = false")
        for t, stmt in self._made.items():
            if self._open_made.get(t) != stmt:
                self._open_con.execute(stmt)
                self._open_made[t] = stmt
        return self._open_con

    def check(self, tables: list[str] | None = None) -> list[check.Finding]:
        """What in the store cannot be read, one finding per file; changes nothing
        (``toolkit store check``; see :mod:`toolkit.store.check`)."""
        return check.check(self, tables)

    def repair(self, tables: list[str] | None = None, *,
               dry_run: bool = False) -> list[check.Finding]:
        """Fix what :meth:`check` finds, losing nothing that still reads (``toolkit store
        repair``); ``dry_run`` only says what it would do."""
        return check.repair(self, tables, dry_run=dry_run)

    def tables(self) -> list[str]:
        """Names of the views a query can use."""
        return sorted(schema.TABLES)

    def keys(self, table: str) -> list[str]:
        """Keys (trace names, run ids) present in ``table`` whose rows can be read:
        invalid names, keys in a compacted part that is missing or truncated, and (while
        the table's manifest is damaged) keys of compacted parts are left out, each noted
        in :attr:`problems` by file name. A sweep makes what is left out again."""
        if self._tx is None and views.signature(self) != self._seen:
            transaction.complete_dead_commits(self)  # another process died in a commit
        keys = {key for _, key, _ in views.scan(self, table)[0]}
        if table not in COMPACTABLE:
            return sorted(keys)
        try:
            doc = parts.read_manifest(self, table)
        except parts.ManifestError as e:
            self._note(str(e))
            return sorted(keys)
        damaged = parts.damaged_parts(self, table, doc)
        for part, why in damaged.items():
            self._note(f"{self._table_dir(table) / part}: compacted part {why}; its "
                       f"{len(doc['parts'][part])} key(s) are left out (toolkit store "
                       f"repair --store {self.root})")
        return sorted(keys | {k for part, entries in doc["parts"].items()
                              if part not in damaged for k, _, _ in entries})

    def traces(self) -> list[str]:
        """Names of the ingested request timelines."""
        return self.keys("requests")

    def read(self, table: str, key: str, columns: list[str] | None = None) -> pa.Table:
        """One key of one table as Arrow, e.g. ``read("requests", "conversation_trace")``.

        ``columns``: only these (a replay that needs four of nine columns skips decoding
        the rest).
        """
        check_key(key, "key")  # a user's run id must not reach outside the store
        path = self._key_path(table, key)
        want = columns_schema(table, columns)
        if not path.exists() and key in parts.compacted(self, table):
            with self._lock(exclusive=False):
                t = parts.read_compacted(self, table, key)
                return t if columns is None else t.select(columns)
        if not path.exists():
            known = ", ".join(self.keys(table)) or "none"
            raise StoreError(f"no {table} named {key!r} in store {self.root}; known: {known}")
        try:
            pf = pq.ParquetFile(path)
            if set(want.names) <= set(pf.schema_arrow.names):
                # the file has every column: read it directly (0.18 ms for a one-row
                # table against 0.44 through the dataset layer)
                t = pf.read(columns=want.names)
                if t.schema.equals(want):
                    return t
                with contextlib.suppress(ValueError):  # e.g. a null where none may be
                    return t.cast(want)
            # an older file without a column added since (the dataset layer fills it),
            # or one another tool wrote with nulls in a required column (read as it is)
            return pq.read_table(path, columns=columns, schema=want)
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"{path}: unreadable Parquet file: {e}") from None

    def read_parts(self, table: str, key: str,
                   columns: list[str] | None = None) -> list[Callable[[], pa.Table]]:
        """One key of one table as readers of its row groups, in order: calling them on
        threads decodes the groups in parallel (pyarrow releases the GIL), and each
        caller can reduce its group before the next is read. A compacted key is one part.
        """
        check_key(key, "key")
        path = self._key_path(table, key)
        if not path.exists():
            return [functools.partial(self.read, table, key, columns)]
        want = columns_schema(table, columns)
        try:
            groups = pq.ParquetFile(path).num_row_groups
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"{path}: unreadable Parquet file: {e}") from None
        return [functools.partial(read_group, path, g, want) for g in range(groups)]

    # -- writing --------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes: every :meth:`write`, :meth:`write_many` and :meth:`writer` inside
        the block lands together when it exits cleanly, and none does if it raises or
        the process dies. Nested blocks join the outermost one."""
        if self._tx is not None:
            yield
            return
        tx = transaction.Transaction(self)
        self._tx = tx
        try:
            yield
            tx.commit()
        finally:
            self._tx = None
            tx.close()
            views.after_own_write(self, {t for t, _ in tx.entries} | {t for t, _ in tx.expelled})

    def write(self, table: str, key: str, data: pa.Table, *, replace: bool = False) -> Path:
        """Atomically write ``data`` as ``table``/``key``.

        Raises:
            StoreError: the key exists and ``replace`` is false.
        """
        return self.write_many({table: data}, key, replace=replace)[0]

    def write_row(self, table: str, key: str, row: dict[str, object], *,
                  replace: bool = False) -> Path:
        """Atomically write one ``row`` (a run summary) as ``table``/``key``.

        Encoded straight to Parquet by :mod:`toolkit.store.parquet.row` (~0.06 ms, against
        0.3-0.6 ms for building an Arrow table and writing it: a third of a replay of a
        small trace); a row it does not take is built by Arrow with the table's schema.
        Keys the schema lacks are dropped, as by ``conform``.

        Raises:
            ValueError: a value does not fit its column, or a required one is missing.
        """
        want = schema.TABLES.get(table)
        if want is None:
            self._table_dir(table)  # the error naming the known tables
        check_key(key, "key")
        try:
            payload = encode_row(want, row)
        except ValueError as e:
            raise ValueError(f"{table} {key!r}: {e}") from None
        if payload is not None:
            if self._tx is not None:
                with open(self._tx.stage(table, key, replace), "wb") as f:
                    f.write(payload)
                return self._key_path(table, key)
            if transaction.write_small(self, table, key, payload, replace):
                return self._key_path(table, key)
        try:
            data = pa.Table.from_pylist([row], schema=want)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            raise ValueError(f"{table} {key!r}: {e}") from None
        return self.write(table, key, data, replace=replace)

    def write_many(
        self, tables: dict[str, pa.Table], key: str, *, replace: bool = False
    ) -> list[Path]:
        """Write several tables under one key (a trace and its metadata) together.

        Every table is conformed to its schema before anything is staged, and all land
        in one transaction.
        """
        check_key(key, "trace name" if "requests" in tables else "key")
        finals = [self._key_path(t, key) for t in tables]
        conformed = {t: schema.conform(d, schema.TABLES[t]) for t, d in tables.items()}
        if self._tx is None and len(conformed) == 1:
            ((table, data),) = conformed.items()
            nbytes = data.nbytes
            if nbytes <= SMALL_WRITE_BYTES:
                out = pa.BufferOutputStream()
                write_parquet(table, data, out, nbytes)
                if transaction.write_small(self, table, key, out.getvalue(), replace):
                    return finals
        with self.transaction():
            assert self._tx is not None
            for t, data in conformed.items():
                write_parquet(t, data, self._tx.stage(t, key, replace))
        return finals

    @contextmanager
    def writer(self, table: str, key: str, *, replace: bool = False) -> Iterator[ParquetSink]:
        """Stream record batches into ``table``/``key``; the file appears atomically when
        the block exits cleanly and never if it raises (for results larger than memory).
        Writes made inside the block join its transaction."""
        check_key(key, "key")
        self._table_dir(table)
        with self.transaction():
            assert self._tx is not None
            sink = ParquetSink(self._tx.stage(table, key, replace), schema.TABLES[table],
                               table_codec(table), dictionary_strings=table in FAST_CODEC_TABLES)
            try:
                yield sink
            except BaseException:
                sink.close(flush=False)  # the staged file is discarded
                raise
            sink.close()

    def cache_path(self, kind: str, key: str, suffix: str) -> Path:
        """Where derived data of ``kind`` for ``key`` may be kept (see ``CACHE_DIR``)."""
        check_key(key, "key")
        return self.root / CACHE_DIR / kind / f"{key}{suffix}"

    def key_file(self, table: str, key: str) -> Path | None:
        """The Parquet file that holds ``table``/``key`` alone, or None when the key is
        absent or lives in a compacted part (for readers of a file's own layout)."""
        check_key(key, "key")
        path = self._key_path(table, key)
        return path if path.is_file() else None

    def selection_file(self, trace: str) -> Path:
        """Where selection trace ``trace``'s own Parquet file is (whether or not it exists
        yet): selection traces are never compacted, and replays decode that file's pages
        themselves (:mod:`toolkit.store.parquet.topk_pages`)."""
        check_key(trace, "trace name")
        return self._key_path("selections", trace)

    def source_stamp(self, table: str, key: str) -> tuple[int, ...] | None:
        """(size, mtime ns, ctime ns, inode, device) of the file holding ``table``/``key``,
        which every write replaces (never edits in place); None when it lives in a
        compacted part. The ctime: ext4 hands a replaced file's inode to the next file
        written, sizes repeat, and an mtime can be set back (copies, coarse clocks), but
        a rename always sets the ctime and nothing else can."""
        try:
            st = self._key_path(table, key).stat()
        except FileNotFoundError:
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)

    def delete(self, table: str, key: str) -> None:
        """Remove one key of a table (no error if absent)."""
        check_key(key, "key")
        if key in parts.compacted(self, table):
            with self.transaction():
                assert self._tx is not None
                self._tx.expelled.add((table, key))
        with self._lock(exclusive=True):
            self._key_path(table, key).unlink(missing_ok=True)
            for derived in (self.root / CACHE_DIR).glob(f"*/{key}.*"):
                derived.unlink(missing_ok=True)  # a cache: rebuilt by whoever needs it
        views.refresh_views(self)

    # -- internals --------------------------------------------------------------------
    def _table_dir(self, table: str) -> Path:
        d = self._dirs.get(table)
        if d is None:
            raise StoreError(f"unknown table {table!r}; known: {', '.join(self.tables())}")
        return d

    def _key_path(self, table: str, key: str) -> Path:
        return self._table_dir(table) / f"{key}.parquet"

    def _key_exists(self, table: str, key: str) -> bool:
        return self._key_path(table, key).exists() or key in parts.compacted(self, table)

    def compact(self, tables: list[str] | None = None) -> dict[str, int]:
        """Merge each run table's per-run files (and earlier compacted parts) into one
        dataset partitioned by trace (sweeps: by sweep id), parts of up to
        :data:`~toolkit.store.layout.PART_ROWS` rows in key order, listed in a manifest;
        queries return the same rows and every key stays readable, replaceable and
        deletable. One transaction under the exclusive lock: a killed compaction changes
        nothing.

        Returns:
            table -> number of per-run files merged.
        """
        return compact.compact(self, tables)

    def _note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    @contextmanager
    def _lock(self, *, exclusive: bool) -> Iterator[None]:
        """A lock on the store directory: writers commit under LOCK_EX, views are listed
        under LOCK_SH, so nobody sees half of a commit."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)


def columns_schema(table: str, columns: list[str] | None) -> pa.Schema:
    """The schema of ``columns`` of ``table`` (all when None); unknown names are refused."""
    full = schema.TABLES[table]
    if columns is None:
        return full
    unknown = sorted(set(columns) - set(full.names))
    if unknown:
        raise StoreError(f"table {table} has no column(s) {', '.join(unknown)}; "
                         f"columns: {', '.join(full.names)}")
    return pa.schema([full.field(c) for c in columns])


def read_group(path: Path, group: int, want: pa.Schema) -> pa.Table:
    try:
        t = pq.ParquetFile(path).read_row_group(group, columns=want.names, use_threads=False)
    except (OSError, pa.ArrowException) as e:
        raise StoreError(f"{path}: unreadable Parquet row group {group}: {e}") from None
    return t if t.schema.equals(want) else t.cast(want)


T = TypeVar("T")
_KEPT_LOCK = threading.Lock()


def kept(cache: dict, key: tuple, load: Callable[[], T], limit: int) -> T:
    """``cache[key]``, loaded on a miss, the oldest entries dropped past ``limit``: for
    what a process derives from a stored file and keys by its :meth:`Store.source_stamp`
    (a trace's facts, a flattened stream), so a rewritten file is never taken for the
    old one. Safe from several threads (a miss may load twice; one copy is kept)."""
    hit = cache.get(key)
    if hit is None:
        hit = load()
        with _KEPT_LOCK:
            while len(cache) >= limit:
                cache.pop(next(iter(cache)))
            cache[key] = hit
    return hit


def _holds_store(root: Path) -> bool:
    """Whether the existing directory ``root`` is a store: it has the catalog, the staging
    area or a table directory (a store whose catalog was deleted is still one)."""
    try:
        with os.scandir(root) as it:
            names = {e.name for e in it}
    except OSError:
        return True  # unreadable: opening it reports why
    return CATALOG_FILE in names or STAGING_DIR in names or not names.isdisjoint(schema.TABLES)


def open_store(path: str | Path, *, create: bool = False) -> Store:
    """Open the trace store at ``path``.

    Args:
        path: the store directory.
        create: make an empty store when ``path`` does not exist; without it a missing
            path is an error, as on the command line, so a mistyped path never silently
            starts a new, empty store.

    Raises:
        StoreError: ``path`` does not exist (and ``create`` is false) or is not a directory.
    """
    if not create and not Path(path).exists():
        raise StoreError(f"no store at {Path(path).resolve()}; pass create=True to make one")
    return Store(path, create=create)
