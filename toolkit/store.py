"""Trace store: Parquet datasets in a directory, plus a DuckDB catalog of views over them.

Layout of a store directory::

    catalog.duckdb            views only (rewritten only when a view's definition changes)
    requests/<trace>.parquet  one file per ingested request timeline
    replay_runs/<run>.parquet one file per replay run, keyed by its config fingerprint
    .staging/tx-<id>/         a write in progress: its files, then a COMMIT marker
    .staging/one-<id>.<table>.<key>.parquet   a lone small write in progress

Only this module knows that layout. Every write is a transaction: all its files (a trace
and its metadata, a run summary and its per-row results) are written completely under
``.staging/tx-<id>/``; then, under an exclusive lock on the store directory, the names
are checked once more, a ``COMMIT`` marker listing the files is written and the files are
renamed into place. A process killed before the marker leaves nothing visible (its staging
directory is removed on a later open); one killed after it is rolled forward on the next
open. So a failed or killed write never exposes part of itself, and two writers of the same
name without ``replace`` cannot both succeed. A lone small write (one table, outside any
transaction) has a single file to move, whose rename is atomic by itself: it is staged as
that one file and renamed under the same lock and checks, without a directory or marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError
from toolkit.parquet_row import encode_row
from toolkit.parquet_table import FlatWriter, writable
from toolkit.runtime.progress import turned_off

if TYPE_CHECKING:
    from toolkit.ingest import IngestResult

CATALOG_FILE = "catalog.duckdb"
STAGING_DIR = ".staging"
CACHE_DIR = ".cache"
"""Derived data kept for speed (replay indexes). Anything in it may be deleted at any
time; each entry carries the ``source_stamp`` of the file it was derived from and is
ignored once that file changes."""
COMMIT_MARKER = "COMMIT"
#: Age after which an unlocked staging entry is taken to belong to a dead process. Live
#: writers hold a lock on their staging directory, so the age only guards the instant
#: between creating it and locking it (and files of older toolkit versions).
STALE_STAGING_S = 300.0
#: Compacted runs of a table: ``<table>/.compacted/<partition>/part-*.parquet`` plus a
#: manifest mapping each key to its rows (see :meth:`Store.compact`).
COMPACT_DIR = ".compacted"
MANIFEST_FILE = "manifest.json"
#: Tables whose keys are runs; compaction merges them. Input tables (traces) stay one
#: file per key, since replays read those files directly.
COMPACTABLE = ("replay_runs", "selection_runs", "selection_replay", "tier_runs",
               "tier_requests", "engram_runs", "sweeps", "compare_runs")
PART_ROWS = 4_000_000  # rows per compacted part file
SMALL_WRITE_BYTES = 4 << 20  # a lone write up to this is staged as one file (_write_small)
SMALL_PREFIX = "one-"  # the name of such a staged file starts with this
TINY_TABLE_BYTES = 16 << 10  # below this a table is written plain (see parquet_options)
ROW_GROUP_BYTES = 32 << 20  # ~32 MB per row group: selective reads of big list columns
KEY_MAX_CHARS = 128
_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")

_DUCKDB_TYPES = {
    pa.string(): "VARCHAR",
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.int16(): "SMALLINT",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
}


def _duckdb_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return _duckdb_type(t.value_type) + "[]"
    return _DUCKDB_TYPES[t]


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _glob_literal(path: str) -> str:
    """``path`` as a DuckDB glob matching only itself (``s[1]`` must not match ``s1``)."""
    return re.sub(r"([\[\]*?])", r"[\1]", path)


def check_key(key: str, what: str = "trace name") -> str:
    """Refuse names that would escape the store or confuse a glob."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise StoreError(
            f"invalid {what} {key!r}: use 1-128 letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        )
    return key


def bounded_key(key: str) -> str:
    """A key derived from a valid name (run ids, miss-curve keys) cut to the key limit.

    A long key keeps its first characters and ends with a digest of the whole, so two
    different derived keys stay different.
    """
    if len(key) <= KEY_MAX_CHARS:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{key[:KEY_MAX_CHARS - 13]}-{digest}"


class _Transaction:
    """Files staged for one all-or-nothing write (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.dir = store.root / STAGING_DIR / f"tx-{uuid.uuid4().hex}"
        self.dir.mkdir(parents=True)
        # A lock on our own staging directory tells other processes we are alive.
        self._fd = os.open(self.dir, os.O_RDONLY)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.entries: dict[tuple[str, str], bool] = {}  # (table, key) -> replace
        self.expelled: set[tuple[str, str]] = set()  # compacted keys to drop (Store.delete)

    def stage(self, table: str, key: str, replace: bool) -> Path:
        """Path to write ``table``/``key`` to; refuses a taken name early."""
        if (table, key) in self.entries:
            raise StoreError(f"{table} {key!r} is written twice in one transaction")
        if self.store._key_exists(table, key) and not replace:
            raise StoreError(
                f"{table} {key!r} already exists in {self.store.root}; "
                "pass --replace to overwrite"
            )
        self.entries[(table, key)] = replace
        return self.dir / _staged_name(table, key)

    def commit(self) -> None:
        if not self.entries and not self.expelled:
            return
        with self.store._lock(exclusive=True):
            self.store._recover_locked(skip=self.dir.name)
            for (table, key), replace in self.entries.items():
                if not replace and self.store._key_exists(table, key):
                    raise StoreError(
                        f"{table} {key!r} already exists in {self.store.root} (written by "
                        "another process meanwhile); pass --replace to overwrite"
                    )
            # a replaced key that lives in a compacted part leaves it (its part rewritten)
            drop = self.expelled | {e for e in self.entries
                                    if e[1] in self.store._compacted(e[0])}
            moves, deletes = self.store._expel_ops(self.dir, drop)
            self.commit_ops(moves, deletes)

    def commit_ops(self, moves: list[tuple[str, str]], deletes: list[str]) -> None:
        """The commit point: write the marker, apply it, remove it. Caller holds the
        exclusive store lock."""
        staged = [(_staged_name(t, k), f"{t}/{k}.parquet") for t, k in sorted(self.entries)]
        plan = {"entries": [], "moves": staged + moves, "deletes": deletes}
        replaced = [self.store._key_path(t, k) for (t, k), r in self.entries.items() if r]
        with _freed_later(replaced, self.store.root / STAGING_DIR):
            if len(self.entries) == 1 and not moves and not deletes:
                # one file: its rename is atomic on its own, so no marker to write, read
                # back and remove (a third of a one-row run write's commit); a death
                # before the rename leaves staging that the next open removes
                _apply(self.store.root, self.dir, plan)
                return
            marker = self.dir / COMMIT_MARKER
            tmp = self.dir / (COMMIT_MARKER + ".tmp")
            tmp.write_text(json.dumps(plan))
            os.replace(tmp, marker)  # the commit point
            _apply(self.store.root, self.dir, plan)
            marker.unlink()

    def close(self) -> None:
        """Drop the staging directory, unless it committed but could not finish renaming
        (then the next open completes it)."""
        if not (self.dir / COMMIT_MARKER).exists():
            try:  # committed: every staged file has been renamed out
                os.rmdir(self.dir)
            except OSError:  # files left (a failed or abandoned write)
                shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self._fd)


def _locked(path: Path) -> bool:
    """Whether another open file description holds a flock on ``path``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


OLD_PREFIX = "old-"  # a staging entry that is only a second name of a replaced file


def _keep_old(final: Path, staging: Path) -> str | None:
    """A second name in ``staging`` for the file ``final`` that a write is about to
    replace, so the rename does not free its blocks: on the project VM a rename over a
    file took 0.2-0.4 ms against 0.06 with this link first, and the freeing happens on
    a background thread (:func:`_discard_later`). None when there is no such file or
    the file system refuses a hard link (the rename then frees it, as usual). Such an
    entry is never needed: recovery removes it silently once stale (by its ctime, the
    link's time), whoever dies when."""
    old = os.path.join(staging, f"{OLD_PREFIX}{uuid.uuid4().hex}.parquet")
    try:
        os.link(final, old)
    except OSError:
        return None
    return old


@contextlib.contextmanager
def _freed_later(finals: list[Path], staging: Path) -> Iterator[None]:
    """Around the renames that replace ``finals``: each gets a second name first
    (:func:`_keep_old`), handed to the trash thread when the block ends, whatever
    happened in it (such a name is never needed)."""
    olds = [old for final in finals if (old := _keep_old(final, staging)) is not None]
    try:
        yield
    finally:
        for old in olds:
            _discard_later(old)


_TRASH: tuple[int, ThreadPoolExecutor] | None = None
_TRASH_LOCK = threading.Lock()
_TRASH_PENDING: list[Future[None]] = []


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):  # recovery may have removed it first
        os.unlink(path)


def _discard_later(path: str) -> None:
    """Unlink ``path`` on this process's one trash thread (a new one after a fork: a
    forked child has the executor but not its thread)."""
    global _TRASH
    with _TRASH_LOCK:
        if _TRASH is None or _TRASH[0] != os.getpid():
            _TRASH = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="toolkit-trash"))
            _TRASH_PENDING.clear()
        _TRASH_PENDING[:] = [f for f in _TRASH_PENDING if not f.done()]
        try:
            _TRASH_PENDING.append(_TRASH[1].submit(_unlink, path))
            return
        except RuntimeError:  # interpreter shutting down: no new futures (the write
            pass  # itself has landed), so free it here
    _unlink(path)


def _forget_trash() -> None:
    """In a forked child: the parent's lock may have been held by another thread."""
    global _TRASH, _TRASH_LOCK
    _TRASH, _TRASH_LOCK = None, threading.Lock()
    _TRASH_PENDING.clear()


os.register_at_fork(after_in_child=_forget_trash)


def drain_trash() -> None:
    """Wait until every replaced file handed to :func:`_discard_later` is gone (the
    executor also finishes them at interpreter exit)."""
    with _TRASH_LOCK:
        pending = list(_TRASH_PENDING) if _TRASH and _TRASH[0] == os.getpid() else []
    for f in pending:
        f.result()


def _staged_name(table: str, key: str) -> str:
    """Where a transaction stages ``table``/``key``: flat in its directory (a directory
    per table was two more mkdir/rmdir pairs, ~80 us each on the VM's disk, per sweep
    cell). Table names hold no '.', so the name is unambiguous. Markers of older
    transactions list ``entries`` staged as ``table/key.parquet``; ``_apply`` reads both."""
    return f"{table}.{key}.parquet"


def _apply(root: Path, tx_dir: Path, marker: object) -> list[str]:
    """Carry out a committed transaction (idempotent, so a crash midway is rolled forward):
    rename its staged files into place, then delete what it replaced. ``marker`` is the
    COMMIT file's content: a list of (table, key) (older stores) or a dict with
    ``entries``, ``moves`` (staged, final; paths relative to the staging/store dirs) and
    ``deletes``."""
    if isinstance(marker, list):
        marker = {"entries": marker, "moves": [], "deletes": []}
    assert isinstance(marker, dict)
    moves = [(f"{t}/{k}.parquet", f"{t}/{k}.parquet") for t, k in marker["entries"]]
    moved = []
    for staged_rel, final_rel in moves + [tuple(m) for m in marker.get("moves", [])]:
        staged, final = tx_dir / staged_rel, root / final_rel
        try:  # the table directory is there but for a table's first file
            os.replace(staged, final)
        except FileNotFoundError:
            if not staged.exists():
                continue  # moved already (a commit rolled forward a second time)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged, final)
        moved.append(final_rel.removesuffix(".parquet"))
    for rel in marker.get("deletes", []):
        (root / rel).unlink(missing_ok=True)
    return moved


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
        self.problems: list[str] = []
        self._dirs = {t: self.root / t for t in schema.TABLES}
        self._dir_names = [str(d) for d in self._dirs.values()]
        self._table_index = {t: i for i, t in enumerate(schema.TABLES)}
        self._manifests = {t: os.path.join(d, COMPACT_DIR, MANIFEST_FILE)
                           for t, d in zip(schema.TABLES, self._dir_names, strict=True)}
        self._tx: _Transaction | None = None
        self._seen: tuple[int, ...] | None = None
        self._tried: dict[str, str] = {}  # table -> view statement last attempted
        self._made: dict[str, str] = {}  # table -> view statement in force
        self._catalog_ddl: list[str] | None = None  # the view statements last on disk
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect()
        if turned_off():  # DuckDB draws its own bar in a notebook for a query over ~2 s,
            # so an executed notebook's outputs would depend on the machine's speed
            self._con.execute("SET enable_progress_bar = false")
        self._recover()
        self._refresh_views()

    # -- context management -------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        drain_trash()  # replaced files this process still has to unlink
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"store {self.root} is closed")
        if self._tx is None and self._signature() != self._seen:
            self._refresh_views(set())  # the tables whose directories changed
        return self._con

    # -- reading --------------------------------------------------------------------
    def query(self, sql: str, params: dict[str, object] | None = None) -> pl.DataFrame:
        """Run DuckDB SQL against the store's views and return a Polars frame.

        Pass values (names, run ids) as ``params`` (``$name`` in the SQL), never by
        formatting them into the text.
        """
        return self.con.sql(sql, params=params).pl()

    def query_arrow(self, sql: str, params: dict[str, object] | None = None) -> pa.Table:
        """Like :meth:`query` but returns an Arrow table (keeps exact Arrow types)."""
        return self.con.sql(sql, params=params).to_arrow_table()

    def tables(self) -> list[str]:
        """Names of the views a query can use."""
        return sorted(schema.TABLES)

    def keys(self, table: str) -> list[str]:
        """Keys (trace names, run ids) present in ``table``; invalid names are left out
        and noted in :attr:`problems`."""
        return sorted({key for _, key, _ in self._scan(table)[0]} | set(self._compacted(table)))

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
        want = _columns_schema(table, columns)
        if not path.exists() and key in self._compacted(table):
            with self._lock(exclusive=False):
                t = self._read_compacted(table, key)
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
        want = _columns_schema(table, columns)
        try:
            groups = pq.ParquetFile(path).num_row_groups
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"{path}: unreadable Parquet file: {e}") from None
        return [functools.partial(_read_group, path, g, want) for g in range(groups)]

    # -- writing --------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes: every :meth:`write`, :meth:`write_many` and :meth:`writer` inside
        the block lands together when it exits cleanly, and none does if it raises or
        the process dies. Nested blocks join the outermost one."""
        if self._tx is not None:
            yield
            return
        tx = _Transaction(self)
        self._tx = tx
        try:
            yield
            tx.commit()
        finally:
            self._tx = None
            tx.close()
            self._after_own_write({t for t, _ in tx.entries} | {t for t, _ in tx.expelled})

    def write(self, table: str, key: str, data: pa.Table, *, replace: bool = False) -> Path:
        """Atomically write ``data`` as ``table``/``key``.

        Raises:
            StoreError: the key exists and ``replace`` is false.
        """
        return self.write_many({table: data}, key, replace=replace)[0]

    def write_row(self, table: str, key: str, row: dict[str, object], *,
                  replace: bool = False) -> Path:
        """Atomically write one ``row`` (a run summary) as ``table``/``key``.

        Encoded straight to Parquet by :mod:`toolkit.parquet_row` (~0.06 ms, against
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
            if self._write_small(table, key, payload, replace):
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
                _write_parquet(table, data, out, nbytes)
                if self._write_small(table, key, out.getvalue(), replace):
                    return finals
        with self.transaction():
            assert self._tx is not None
            for t, data in conformed.items():
                _write_parquet(t, data, self._tx.stage(t, key, replace))
        return finals

    def _write_small(self, table: str, key: str, payload: bytes | pa.Buffer,
                     replace: bool) -> bool:
        """One small table written outside a transaction (a run row, a short curve): its
        single rename is atomic on its own, so it needs no staging directory, marker or
        lock file of its own. Encoded in memory and staged as one file, flock-ed while
        it lives (see ``_recover_entry``): a one-row write takes ~0.5 ms against ~1.0
        through a transaction, a third of a replay of the real Mooncake trace. False (and
        nothing written) if ``key`` lives in a compacted part: that needs the part
        rewritten, in a transaction."""
        if key in self._compacted(table):
            return False
        if not replace and self._key_path(table, key).exists():
            raise StoreError(f"{table} {key!r} already exists in {self.root}; "
                             "pass --replace to overwrite")
        view = memoryview(payload)
        staging = self.root / STAGING_DIR
        name = f"{SMALL_PREFIX}{uuid.uuid4().hex}.{_staged_name(table, key)}"
        staged: Path | None = staging / name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            fd = os.open(staged, flags, 0o666)
        except FileNotFoundError:
            staging.mkdir(parents=True, exist_ok=True)
            fd = os.open(staged, flags, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # alive: recovery leaves it
            while view:
                view = view[os.write(fd, view):]
            with self._lock(exclusive=True):
                self._recover_locked(skip=name)
                if key in self._compacted(table):  # compacted meanwhile by another process
                    return False
                final = self._key_path(table, key)
                if not replace and final.exists():
                    raise StoreError(
                        f"{table} {key!r} already exists in {self.root} (written by "
                        "another process meanwhile); pass --replace to overwrite")
                with _freed_later([final] if replace else [], staging):
                    try:  # the table directory is there but for a table's first file
                        os.replace(staged, final)
                    except FileNotFoundError:
                        final.parent.mkdir(parents=True, exist_ok=True)
                        os.replace(staged, final)
                staged = None
        finally:
            os.close(fd)
            if staged is not None:
                staged.unlink(missing_ok=True)
        self._after_own_write({table})
        return True

    def _after_own_write(self, tables: set[str]) -> None:
        """What :meth:`_refresh_views` would do after our own write into ``tables``
        alone, with one ``stat`` a table instead of the store lock and one per table
        (0.1-0.2 ms of a one-row write or a replay's commit): a table read by glob whose
        directory time moved keeps its view, and the next query, which sees that
        directory changed, lists it (as ``_refresh_views`` arranges). Any other case
        takes the full refresh."""
        if self._con is not None and self._seen is not None and len(self._made) == len(
                schema.TABLES) and all(self._moved_glob(t) for t in tables):
            return
        self._refresh_views(tables)

    def _moved_glob(self, table: str, mtime_ns: int | None = None) -> bool:
        """Whether ``table`` is read by glob and its directory time (``mtime_ns``, or
        stat-ed now) moved since the last refresh (so the write just made is seen by the
        next query's refresh)."""
        i = self._table_index.get(table)
        if i is None or self._seen is None or self._made.get(table) != self._glob_view(table):
            return False
        if mtime_ns is None:
            try:
                mtime_ns = os.stat(self._dir_names[i]).st_mtime_ns
            except FileNotFoundError:
                return False
        return mtime_ns != self._seen[i]

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
                               _codec(table), dictionary_strings=table in FAST_CODEC_TABLES)
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
        if key in self._compacted(table):
            with self.transaction():
                assert self._tx is not None
                self._tx.expelled.add((table, key))
        with self._lock(exclusive=True):
            self._key_path(table, key).unlink(missing_ok=True)
            for derived in (self.root / CACHE_DIR).glob(f"*/{key}.*"):
                derived.unlink(missing_ok=True)  # a cache: rebuilt by whoever needs it
        self._refresh_views()

    def ingest(
        self,
        fmt: str,
        path: str | Path,
        name: str | None = None,
        *,
        replace: bool = False,
        **options: object,
    ) -> IngestResult:
        """Read ``path`` with the reader registered as ``fmt`` and store it as ``name``.

        The name defaults to the file stem. Nothing is written unless the whole file is
        valid. ``options`` go to the reader (selection formats take ``model``, ``k``,
        ``score``, ``order``).
        """
        from toolkit.ingest import ingest_file  # ingest sits above the store

        return ingest_file(self, fmt, path, name=name, replace=replace, **options)

    # -- internals --------------------------------------------------------------------
    def _table_dir(self, table: str) -> Path:
        d = self._dirs.get(table)
        if d is None:
            raise StoreError(f"unknown table {table!r}; known: {', '.join(self.tables())}")
        return d

    def _key_path(self, table: str, key: str) -> Path:
        return self._table_dir(table) / f"{key}.parquet"

    def _key_exists(self, table: str, key: str) -> bool:
        return self._key_path(table, key).exists() or key in self._compacted(table)

    # -- compaction -----------------------------------------------------------------------
    def _manifest(self, table: str) -> dict[str, list[list]]:
        """Compacted part (path relative to the table) -> [[key, first row, rows], ...]."""
        self._table_dir(table)  # refuses an unknown table
        try:  # a string path, opened directly: Path joins and read_text cost ~0.05 ms
            with open(self._manifests[table], "rb") as f:  # of a one-row write, twice
                return json.loads(f.read())["parts"]
        except FileNotFoundError:
            return {}

    def _compacted(self, table: str) -> dict[str, tuple[str, int, int]]:
        """Key -> (part, first row, rows) for the keys living in compacted parts."""
        if table not in COMPACTABLE:
            return {}
        return {k: (part, off, n) for part, keys in self._manifest(table).items()
                for k, off, n in keys}

    def _read_compacted(self, table: str, key: str) -> pa.Table:
        part, off, n = self._compacted(table)[key]
        pf = pq.ParquetFile(self._table_dir(table) / part)
        starts = np.cumsum([0] + [pf.metadata.row_group(i).num_rows
                                  for i in range(pf.num_row_groups)])
        g0 = int(np.searchsorted(starts, off, side="right")) - 1
        g1 = int(np.searchsorted(starts, off + n, side="left"))
        t = pf.read_row_groups(list(range(g0, g1)), use_threads=False)
        return schema.conform(t.slice(off - int(starts[g0]), n), schema.TABLES[table])

    def _expel_ops(self, tx_dir: Path, drop: set[tuple[str, str]]
                   ) -> tuple[list[tuple[str, str]], list[str]]:
        """Stage rewrites of the compacted parts holding ``drop`` without those keys, and a
        new manifest: (moves, deletes) for the commit. Caller holds the exclusive lock."""
        moves: list[tuple[str, str]] = []
        deletes: list[str] = []
        for table in sorted({t for t, _ in drop}):
            keys = {k for t, k in drop if t == table}
            parts = self._manifest(table)
            hit = [p for p, ks in parts.items() if any(k in keys for k, _, _ in ks)]
            if not hit:
                continue
            for part in hit:
                kept = [e for e in parts.pop(part) if e[0] not in keys]
                deletes.append(f"{table}/{part}")
                if kept:
                    new_part, entries = self._write_part(
                        tx_dir, table, str(Path(part).parent),
                        [(k, self._read_compacted(table, k)) for k, _, _ in kept])
                    parts[new_part] = entries
                    moves.append((f"{table}/{new_part}", f"{table}/{new_part}"))
            moves.append(self._stage_manifest(tx_dir, table, parts))
        return moves, deletes

    def _write_part(self, tx_dir: Path, table: str, partition: str,
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

    def _stage_manifest(self, tx_dir: Path, table: str, parts: dict) -> tuple[str, str]:
        rel = f"{table}/{COMPACT_DIR}/{MANIFEST_FILE}"
        (tx_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (tx_dir / rel).write_text(json.dumps({"parts": parts}, sort_keys=True))
        return rel, rel

    def compact(self, tables: list[str] | None = None) -> dict[str, int]:
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
        tx = _Transaction(self)
        try:
            with self._lock(exclusive=True):
                self._recover_locked()
                moves: list[tuple[str, str]] = []
                deletes: list[str] = []
                for table in tables:
                    files = {k: p for k, p in self._entries(table).items() if p.is_file()}
                    old = self._manifest(table)
                    if not files:
                        merged[table] = 0
                        continue
                    m, d = self._compact_table(tx.dir, table, files, old)
                    moves += m
                    deletes += d
                    merged[table] = len(files)
                if moves:
                    tx.commit_ops(moves, deletes)
        finally:
            tx.close()
            self._refresh_views()
        return merged

    def _compact_table(self, tx_dir: Path, table: str, files: dict[str, Path],
                       old: dict[str, list[list]]) -> tuple[list[tuple[str, str]], list[str]]:
        col = "sweep_id" if table == "sweeps" else "trace"
        # partition -> key -> (loader, rows)
        sources: dict[str, dict[str, tuple[Callable[[], pa.Table], int]]] = {}
        for part, keys in old.items():
            for k, _, n in keys:
                if k not in files:  # else a file of the same key replaced it
                    sources.setdefault(Path(part).parent.name, {})[k] = (
                        functools.partial(self._read_compacted, table, k), n)
        for k, p in files.items():
            try:
                n = pq.ParquetFile(p).metadata.num_rows
                first = pq.read_table(p, columns=[col]).column(0)
            except (OSError, pa.ArrowException) as e:
                raise StoreError(f"{p}: unreadable Parquet file, not compacted: {e}") from None
            value = str(first[0].as_py()) if len(first) else "empty"
            part = value if _KEY_RE.fullmatch(value) else "other"
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
                name, entries = self._write_part(tx_dir, table, partition,
                                                 ((k, src[k][0]()) for k in batch))
                parts[name] = entries
                moves.append((f"{table}/{name}", f"{table}/{name}"))
        moves.append(self._stage_manifest(tx_dir, table, parts))
        deletes = [f"{table}/{p}" for p in old] + [f"{table}/{k}.parquet" for k in files]
        return moves, deletes

    def _note(self, problem: str) -> None:
        if problem not in self.problems:
            self.problems.append(problem)

    def _scan(self, table: str) -> tuple[list[tuple[str, str, bool]], bool]:
        """One ``scandir`` of ``table``'s directory, names only (file types from the
        directory entries: no stat, no path object per entry): its valid entries as
        (name, key, is_file) in name order, and whether it holds anything else (an
        invalid name, a file that is not Parquet). Every write re-lists the tables it
        touched, so this runs once per run a sweep records: with a path object and a
        second listing per entry, a 2,000-cell sweep spent more here than replaying."""
        d = self._table_dir(table)
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
            if not _KEY_RE.fullmatch(key):
                self._note(f"{d / name}: not a valid key name; ignored")
                strangers = True
                continue
            valid.append((name, key, is_file))
        valid.sort()
        return valid, strangers

    def _entries(self, table: str) -> dict[str, Path]:
        """Valid key -> file or directory of ``table`` (see :meth:`_scan`)."""
        d = self._table_dir(table)
        return {key: d / name for name, key, _ in self._scan(table)[0]}

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

    def _recover(self) -> None:
        staging = self.root / STAGING_DIR
        if staging.is_dir() and any(staging.iterdir()):
            try:
                with self._lock(exclusive=True):
                    self._recover_locked()
            except OSError as e:  # e.g. a read-only store: report, don't refuse to read
                self._note(f"{staging}: could not clean up: {e}")

    def _recover_locked(self, skip: str | None = None) -> None:
        """Roll forward committed transactions of dead processes; remove their stale
        uncommitted files. Caller holds the exclusive store lock. ``skip``: the name of
        the caller's own staging entry (alive, and not to be probed for its lock)."""
        staging = self.root / STAGING_DIR
        if not staging.is_dir():
            return
        now = time.time()
        for entry in sorted(staging.iterdir()):
            if entry.name == skip:
                continue
            try:
                self._recover_entry(entry, now)
            except FileNotFoundError:  # its live owner finished and removed it meanwhile
                continue

    def _recover_entry(self, entry: Path, now: float) -> None:
        """One staging entry of :meth:`_recover_locked`; raises FileNotFoundError if the
        entry vanishes while looked at (its owner closes without the store lock)."""
        if entry.name.startswith(OLD_PREFIX):  # a replaced file's second name: garbage
            # (see _keep_old), left to its writer's trash thread while young, so that
            # the next write does not free it inline; removed without a note
            if now - entry.lstat().st_ctime > STALE_STAGING_S:
                entry.unlink(missing_ok=True)
            return
        if entry.is_dir() and entry.name.startswith("tx-"):
            fd = os.open(entry, os.O_RDONLY)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # a live writer
                marker = entry / COMMIT_MARKER
                if marker.exists():
                    moved = _apply(self.root, entry, json.loads(marker.read_text()))
                    self._note(f"completed a write interrupted after its commit: "
                               f"{', '.join(moved) or 'nothing left to move'}")
                elif now - entry.stat().st_mtime > STALE_STAGING_S:
                    self._note(f"removed {entry.relative_to(self.root)}: an interrupted "
                               "write that never committed")
                else:
                    return
                shutil.rmtree(entry, ignore_errors=True)
            finally:
                os.close(fd)
        elif now - entry.lstat().st_mtime > STALE_STAGING_S:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            elif entry.name.startswith(SMALL_PREFIX) and _locked(entry):
                return  # a live small write (see Store._write_small)
            else:
                entry.unlink(missing_ok=True)
            self._note(f"removed stale {entry.relative_to(self.root)}")

    def _signature(self) -> tuple[int, ...]:
        sig = []
        for d in self._dir_names:  # strings: a Path per table was half of this
            try:
                sig.append(os.stat(d).st_mtime_ns)
            except FileNotFoundError:
                sig.append(0)
        return tuple(sig)

    def _view_sql(self, table: str, files: list[Path] | None) -> str:
        """``files=None``: every Parquet file under the table's directory, found when a query
        runs (the directory's path escaped so its glob matches only itself)."""
        if files is None:
            glob = _sql_str(_glob_literal(str(self._table_dir(table))) + "/**/*.parquet")
            return f"SELECT * FROM read_parquet({glob}, union_by_name = true)"
        if files:
            listed = ", ".join(_sql_str(_glob_literal(str(f))) for f in files)
            return f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"
        cols = ", ".join(
            f"CAST(NULL AS {_duckdb_type(f.type)}) AS {f.name}" for f in schema.TABLES[table]
        )
        return f"SELECT {cols} WHERE false"

    def _view(self, table: str) -> tuple[str, Callable[[], list[Path]]]:
        """The view statement to try first, and the table's files (listed when asked:
        only a fallback needs them once the glob works).

        A table whose entries all have valid key names reads its directory by glob, so the
        statement (and the catalog) does not change when files are added; a table holding
        an invalid name lists its valid files instead, leaving the stranger out.
        """
        d = self._table_dir(table)
        valid, strangers = self._scan(table)
        parts = list(self._manifest(table)) if table in COMPACTABLE else []

        def files() -> list[Path]:
            out: list[Path] = []
            for name, _, is_file in valid:  # a file is named <key>.parquet, a directory <key>
                out.extend([d / name] if is_file else sorted((d / name).rglob("*.parquet")))
            return out + [d / part for part in parts]

        some = parts or any(is_file for _, _, is_file in valid) or files()
        if not some:
            return f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table, [])}", list
        sql = self._view_sql(table, files() if strangers else None)
        return f"CREATE OR REPLACE VIEW {table} AS {sql}", files

    def _create_view(self, table: str, stmt: str, files: Callable[[], list[Path]]) -> str:
        """Run ``stmt``; if DuckDB cannot read some file, leave it out (noting it by name)
        so one corrupt file does not break queries on the other tables."""
        con = self._con
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
                con.execute(f"DESCRIBE {self._view_sql(table, [f])}")
                good.append(f)
            except (OSError, pa.ArrowException, duckdb.Error) as e:
                self._note(f"{f}: unreadable Parquet file, left out of view {table!r}: "
                           f"{str(e).splitlines()[0]}")
        stmt = f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table, good)}"
        try:
            con.execute(stmt)
        except duckdb.Error as e:
            self._note(f"table {table!r}: files do not combine ({str(e).splitlines()[0]}); "
                       "its view is empty")
            stmt = f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table, [])}"
            con.execute(stmt)
        return stmt

    def _refresh_views(self, touched: set[str] | None = None) -> None:
        """Re-make the views of ``touched`` tables (None: all) and of every table whose
        directory changed since the last refresh (another process may have written it).
        Re-listing all tables after every one-row write cost ~1 ms of a ~2.5 ms write."""
        if self._con is None:
            return
        with self._lock(exclusive=False):
            seen = list(self._signature())
            if touched is None or self._seen is None or len(self._made) < len(schema.TABLES):
                todo = set(schema.TABLES)
            else:
                todo = touched | {t for t, a, b in zip(schema.TABLES, seen, self._seen,
                                                       strict=True) if a != b}
                for i, t in enumerate(schema.TABLES):
                    if t in touched and self._moved_glob(t, seen[i]):
                        # our own write into a table read by glob leaves its view as it
                        # is: list it when a query next needs it (its change is still
                        # unseen), not after every write (a sweep recording 2,000 runs
                        # spent 8 of its 17 s listing the runs it had written). A
                        # directory whose time did not move (a coarse clock: another
                        # writer's file could hide in the same tick) is listed now.
                        todo.discard(t)
                        seen[i] = self._seen[i]
            wanted = {t: self._view(t) for t in schema.TABLES if t in todo}
        ddl = []
        for t in schema.TABLES:
            if t in wanted:
                stmt, files = wanted[t]
                # a statement that worked last time needs no new bind; after a fallback (a
                # corrupt file left out) the table is re-listed whenever its directory
                # changes
                if not self._tried.get(t) == stmt == self._made.get(t):
                    self._made[t] = self._create_view(t, stmt, files)
                    self._tried[t] = stmt
            ddl.append(self._made[t])
        self._seen = tuple(seen)
        self._write_catalog(ddl)

    def _glob_view(self, table: str) -> str:
        """The view statement of a table whose entries all have valid names."""
        return f"CREATE OR REPLACE VIEW {table} AS {self._view_sql(table, None)}"

    def _write_catalog(self, ddl: list[str]) -> None:
        """Rewrite ``catalog.duckdb`` only when its views would change, so commands that
        change nothing leave the store byte-identical."""
        if ddl == self._catalog_ddl:  # the same statements (mostly the same objects):
            return  # no hash of every view's text after each write (0.2-0.3 ms)
        sha = hashlib.sha256("\n".join(ddl).encode()).hexdigest()
        path = self.root / CATALOG_FILE
        # The on-disk catalog is a convenience for `duckdb store/catalog.duckdb`; if
        # another process holds it, our in-memory views still work.
        with contextlib.suppress(duckdb.Error):
            if path.exists():
                with duckdb.connect(str(path), read_only=True) as cat:
                    row = cat.execute("SELECT sha FROM toolkit_catalog").fetchone()
                if row and row[0] == sha:
                    self._catalog_ddl = list(ddl)
                    return
        try:
            with duckdb.connect(str(path)) as cat:
                for stmt in ddl:
                    cat.execute(stmt)
                cat.execute("CREATE OR REPLACE TABLE toolkit_catalog AS SELECT $sha AS sha",
                            {"sha": sha})
            self._catalog_ddl = list(ddl)
        except duckdb.Error:
            pass


def _columns_schema(table: str, columns: list[str] | None) -> pa.Schema:
    """The schema of ``columns`` of ``table`` (all when None); unknown names are refused."""
    full = schema.TABLES[table]
    if columns is None:
        return full
    unknown = sorted(set(columns) - set(full.names))
    if unknown:
        raise StoreError(f"table {table} has no column(s) {', '.join(unknown)}; "
                         f"columns: {', '.join(full.names)}")
    return pa.schema([full.field(c) for c in columns])


def _read_group(path: Path, group: int, want: pa.Schema) -> pa.Table:
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


def _write_parquet(table: str, data: pa.Table, where: object, nbytes: int | None = None
                   ) -> None:
    """``data`` of ``table`` as one Parquet file at ``where`` (a path or a buffer), with
    the store's row groups and encodings."""
    pq.write_table(data, where, row_group_size=row_group_rows(data, nbytes),
                   **parquet_options(data.schema, data, _codec(table), nbytes))


def _codec(table: str) -> str:
    return "lz4" if table in FAST_CODEC_TABLES else "zstd"


FAST_CODEC_TABLES = frozenset({"selection_replay"})
"""Per-row replay results, written on the replay's own path and read rarely: lz4 instead
of zstd. On the real SmolLM2 trace's 30,720 rows that writes in 2.0 ms against 3.1 (a
fifth of that replay) and reads faster, for 1.9x the bytes (~7 bytes a row). Streamed,
their string columns may also arrive dictionary-encoded (see ``ParquetSink``)."""


def _dictionary_strings(table_schema: pa.Schema) -> pa.Schema:
    """``table_schema`` with its string columns as ``dictionary<int32, string>``."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable)
                      if pa.types.is_string(f.type) else f for f in table_schema])


@functools.cache
def sink_schema(table: str) -> pa.Schema:
    """The schema a :meth:`Store.writer` sink of ``table`` holds its tables in: a table
    built with it is taken as it is (for the per-row results of a replay of the real
    SmolLM2 trace, conforming a table built otherwise was 0.3 ms of ~15)."""
    want = schema.TABLES[table]
    return _dictionary_strings(want) if table in FAST_CODEC_TABLES else want


def parquet_options(table_schema: pa.Schema, data: pa.Table | None = None,
                    codec: str = "zstd", nbytes: int | None = None) -> dict[str, object]:
    """``codec`` (zstd unless the table is in ``FAST_CODEC_TABLES``) everywhere, except for
    two kinds of list column that replays read whole:

    * ``list<int32>`` positions (selections' ``topk``): delta-encoded and uncompressed.
      Ascending positions pack to a few bits each and decode at ~200 M values/s on one
      core, against ~90 M/s for zstd + dictionary, which made reading the store slower
      than replaying it.
      The table's flat integer columns (its per-row request, step, layer and length)
      are written the same way.
    * ``list<int64>`` block hashes, when ``data`` shows they are small non-negative ids
      (Mooncake's and Bailian's are renumbered 0..N): delta-encoded, then zstd, with no
      dictionary. On Mooncake x 40 (11.5M lookups) that is 6.4 MB read at 3.9 ns a
      lookup, against 18.5 MB at 5.9 ns with the dictionary. Random 64-bit hashes keep
      the dictionary: repeats are what compresses them (73.8 vs 93.6 MB).

    Dictionaries only where values repeat as whole strings or lists (names, ids, random
    hashes): on numeric columns zstd finds the repeats anyway, and building their
    dictionaries made writing a 10,001-row miss curve take 2.5 ms instead of 1.3.

    (benchmarks/RESULTS.md has the measurements.) ``nbytes``: ``data.nbytes``, if known.
    """
    if data is not None and (data.nbytes if nbytes is None else nbytes) < TINY_TABLE_BYTES \
            and not any(pa.types.is_nested(f.type) for f in table_schema):
        # a run row or a short curve: nothing to compress, and zstd and dictionaries cost
        # ~0.45 ms of a one-row file's ~0.95 ms to write; nor anything for min/max
        # statistics to skip (a whole file is one read), which cost another 0.09 ms
        return {"compression": "none", "use_dictionary": False, "write_statistics": False}
    delta_none = [f"{f.name}.list.element" for f in table_schema
                  if pa.types.is_list(f.type) and f.type.value_type == pa.int32()]
    delta_zstd = [f"{f.name}.list.element" for f in table_schema
                  if data is not None and pa.types.is_list(f.type)
                  and f.type.value_type == pa.int64() and _small_ids(data.column(f.name))]
    # beside positions, a replay reads the per-row integers whole too: zstd + PLAIN cost
    # 0.54 ms of a 30,720-row chunk's read in Arrow, where delta pages (33 KB against
    # 3.3 KB) decode in one compiled pass (topk_pages.read_flat)
    flat_delta = [f.name for f in table_schema if delta_none and f.type in _FLAT_INTS]
    plain = {c.split(".")[0] for c in delta_none + delta_zstd} | set(flat_delta)
    dictionary = [f"{f.name}.list.element" if pa.types.is_list(f.type) else f.name
                  for f in table_schema if f.name not in plain and _repeats_whole(f.type)]
    if not delta_none and not delta_zstd:
        return {"compression": codec, "use_dictionary": dictionary}
    return {
        # v1 pages: the layout toolkit/replay/topk_pages.py decodes (Arrow reads any other)
        "data_page_version": "1.0",
        "compression": {f.name: codec for f in table_schema if f.name not in plain}
        | dict.fromkeys(delta_none + flat_delta, "none") | dict.fromkeys(delta_zstd, "zstd"),
        "use_dictionary": dictionary,
        "column_encoding": dict.fromkeys(delta_none + delta_zstd + flat_delta,
                                         "DELTA_BINARY_PACKED"),
    }


_FLAT_INTS = (pa.int16(), pa.int32(), pa.int64())


def _repeats_whole(t: pa.DataType) -> bool:
    """String-like or nested: a column whose repeats a dictionary stores once."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_dictionary(t) or pa.types.is_nested(t))


def _small_ids(column: pa.ChunkedArray) -> bool:
    """Whether a list<int64> column holds only ids in [0, 2**32) (and at least one)."""
    values = pc.list_flatten(column)
    if len(values) == 0:
        return False
    lo_hi = pc.min_max(values)
    lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    return lo is not None and lo >= 0 and hi < 2**32


def row_group_rows(data: pa.Table, nbytes: int | None = None) -> int:
    """Rows per Parquet row group so that a group holds about ``ROW_GROUP_BYTES``.

    A fixed row count would put a whole k=2048 selection trace in one group, and every
    filtered read (one request at a time) would then decode the whole file.
    """
    per_row = (data.nbytes if nbytes is None else nbytes) / max(data.num_rows, 1)
    return int(max(1_024, min(1 << 17, ROW_GROUP_BYTES // max(per_row, 1))))


class ParquetSink:
    """Appends tables conforming to one schema to a Parquet file (see :meth:`Store.writer`).

    Writes smaller than a row group are held (at most one group's worth) and written
    together: a replay streams its per-row results a chunk at a time (4,096 rows for a
    k = 2048 request), and a row group per chunk cost 3x the writing of one per 64K rows
    (benchmarks/RESULTS.md), on the thread that the replay workers share the cores with.
    A write of a row group or more goes out as it is, so a writer that writes whole
    requests keeps its row groups aligned with them (what ``chunk_specs`` cuts at)."""

    def __init__(self, path: Path, table_schema: pa.Schema, codec: str = "zstd", *,
                 dictionary_strings: bool = False) -> None:
        """``dictionary_strings``: take string columns dictionary-encoded (a replay's
        ``run_id`` and ``trace``, one value each: built as a one-entry dictionary, they
        are not hashed again row by row, 0.4 of 2.4 ms for 30,720 rows) and write the
        file without the Arrow schema, so that every reader still sees plain strings."""
        self.schema = _dictionary_strings(table_schema) if dictionary_strings else table_schema
        self._coded = [f.name for f in self.schema if pa.types.is_dictionary(f.type)
                       and not pa.types.is_dictionary(table_schema.field(f.name).type)]
        self.rows = 0
        self._held: list[pa.Table] = []
        self._held_rows = 0
        # per-row replay results: our own encoder (toolkit/parquet_table.py, ~1.6 against
        # 2.3-3.3 ms for 30,720 rows); the Arrow schema is not stored in either case
        self._flat = FlatWriter(path, self.schema) if dictionary_strings and writable(
            self.schema) else None
        self._writer = None if self._flat else pq.ParquetWriter(
            path, self.schema, store_schema=not dictionary_strings,
            **parquet_options(self.schema, codec=codec))

    def write(self, data: pa.Table) -> None:
        for name in self._coded:  # other string types (string_view, large_string) have no
            i = data.schema.get_field_index(name)  # cast to a dictionary: as strings first
            t = data.schema.field(i).type if i >= 0 else None
            if t is not None and not pa.types.is_dictionary(t) and t != pa.string():
                data = data.set_column(i, data.schema.field(i).with_type(pa.string()),
                                       data.column(i).cast(pa.string()))
        data = schema.conform(data, self.schema)
        self.rows += data.num_rows
        group = row_group_rows(data)
        if data.num_rows >= group:
            self.flush()
            self._put(data, group)
            return
        self._held.append(data)
        self._held_rows += data.num_rows
        if self._held_rows >= group:
            self.flush()

    def flush(self) -> None:
        """Write the held tables as one row group."""
        if self._held:
            held = pa.concat_tables(self._held)
            self._held, self._held_rows = [], 0
            self._put(held, max(held.num_rows, 1))

    def _put(self, data: pa.Table, group: int) -> None:
        if self._flat is not None:
            self._flat.write(data, group)
        else:
            self._writer.write_table(data, row_group_size=group)

    def close(self, *, flush: bool = True) -> None:
        """Write what is held (unless ``flush`` is false: the file is being discarded)
        and finish the file."""
        if flush:
            self.flush()
        if self._flat is not None:
            (self._flat.close if flush else self._flat.abort)()
        else:
            self._writer.close()


def open_store(path: str | Path, *, create: bool = True) -> Store:
    """Open the trace store at ``path``; with ``create=False`` a missing store is an
    error instead of a new empty directory (read-only commands)."""
    return Store(path, create=create)
