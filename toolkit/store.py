"""Trace store: Parquet datasets in a directory, plus a DuckDB catalog of views over them.

Layout of a store directory::

    catalog.duckdb            views only (rebuilt on every open; safe to delete)
    requests/<trace>.parquet  one file per ingested request timeline
    replay_runs/<run>.parquet one file per replay run, keyed by its config fingerprint
    .staging/                 temporary files; a write lands here, then is renamed

Only this module knows that layout. Writes are atomic: the Parquet file is written
completely under ``.staging/`` and moved into place with ``os.replace``, so a failed
ingest leaves the store exactly as it was.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import StoreError

if TYPE_CHECKING:
    from toolkit.ingest import IngestResult

CATALOG_FILE = "catalog.duckdb"
STAGING_DIR = ".staging"
ROW_GROUP_BYTES = 32 << 20  # ~32 MB per row group: selective reads of big list columns
_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")

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


def check_key(key: str, what: str = "trace name") -> str:
    """Refuse names that would escape the store or confuse a glob."""
    if not _KEY_RE.match(key):
        raise StoreError(
            f"invalid {what} {key!r}: use 1-128 letters, digits, '_', '.', '-' "
            "(starting with a letter or digit)"
        )
    return key


class Store:
    """A trace store opened at ``root``. Use :func:`open_store` and a ``with`` block.

    Queries run on an in-memory DuckDB connection whose views read the Parquet files, so
    an open store never locks anything; ``catalog.duckdb`` holds the same views for the
    DuckDB CLI and is rewritten after every write.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self._con: duckdb.DuckDBPyConnection | None = duckdb.connect()
        self._ddl: list[str] | None = None
        self._refresh_views()

    # -- context management -------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            raise StoreError(f"store {self.root} is closed")
        return self._con

    # -- reading --------------------------------------------------------------------
    def query(self, sql: str) -> pl.DataFrame:
        """Run DuckDB SQL against the store's views and return a Polars frame."""
        return self.con.sql(sql).pl()

    def query_arrow(self, sql: str) -> pa.Table:
        """Like :meth:`query` but returns an Arrow table (keeps exact Arrow types)."""
        return self.con.sql(sql).to_arrow_table()

    def tables(self) -> list[str]:
        """Names of the views a query can use."""
        return sorted(schema.TABLES)

    def keys(self, table: str) -> list[str]:
        """Keys (trace names, run ids) present in ``table``."""
        d = self._table_dir(table)
        if not d.is_dir():
            return []
        return sorted(p.name.removesuffix(".parquet") for p in d.iterdir() if _is_data(p))

    def traces(self) -> list[str]:
        """Names of the ingested request timelines."""
        return self.keys("requests")

    def read(self, table: str, key: str) -> pa.Table:
        """One key of one table as Arrow, e.g. ``read("requests", "conversation_trace")``."""
        path = self._key_path(table, key)
        if not path.exists():
            known = ", ".join(self.keys(table)) or "none"
            raise StoreError(f"no {table} named {key!r} in store {self.root}; known: {known}")
        return pq.read_table(path, schema=schema.TABLES[table])

    # -- writing --------------------------------------------------------------------
    def write(self, table: str, key: str, data: pa.Table, *, replace: bool = False) -> Path:
        """Atomically write ``data`` as ``table``/``key``.

        Raises:
            StoreError: the key exists and ``replace`` is false.
        """
        return self.write_many({table: data}, key, replace=replace)[0]

    def write_many(
        self, tables: dict[str, pa.Table], key: str, *, replace: bool = False
    ) -> list[Path]:
        """Write several tables under one key (a trace and its metadata) together.

        Every file is fully written under ``.staging/`` before the first rename, so a
        schema or disk error leaves the store untouched.
        """
        check_key(key, "trace name" if "requests" in tables else "key")
        finals = {t: self._key_path(t, key) for t in tables}
        for t, final in finals.items():
            if final.exists() and not replace:
                raise StoreError(
                    f"{t} {key!r} already exists in {self.root}; pass --replace to overwrite"
                )
        conformed = {t: schema.conform(d, schema.TABLES[t]) for t, d in tables.items()}
        with contextlib.ExitStack() as stack:
            staged = {t: stack.enter_context(self._staged(finals[t].name)) for t in tables}
            for t, data in conformed.items():
                pq.write_table(data, staged[t], row_group_size=row_group_rows(data),
                               **parquet_options(data.schema))
            for t, final in finals.items():
                final.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staged[t], final)
        self._refresh_views()
        return list(finals.values())

    @contextmanager
    def writer(self, table: str, key: str, *, replace: bool = False) -> Iterator[ParquetSink]:
        """Stream record batches into ``table``/``key``; the file appears atomically when
        the block exits cleanly and never if it raises (for results larger than memory)."""
        check_key(key, "key")
        final = self._key_path(table, key)
        if final.exists() and not replace:
            raise StoreError(
                f"{table} {key!r} already exists in {self.root}; pass --replace to overwrite"
            )
        with self._staged(final.name) as tmp:
            sink = ParquetSink(tmp, schema.TABLES[table])
            try:
                yield sink
            finally:
                sink.close()
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
        self._refresh_views()

    def delete(self, table: str, key: str) -> None:
        """Remove one key of a table (no error if absent)."""
        self._key_path(table, key).unlink(missing_ok=True)
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
        if table not in schema.TABLES:
            raise StoreError(f"unknown table {table!r}; known: {', '.join(self.tables())}")
        return self.root / table

    def _key_path(self, table: str, key: str) -> Path:
        return self._table_dir(table) / f"{key}.parquet"

    @contextmanager
    def _staged(self, suffix: str) -> Iterator[Path]:
        staging = self.root / STAGING_DIR
        staging.mkdir(parents=True, exist_ok=True)
        tmp = staging / f"{uuid.uuid4().hex}-{suffix}"
        try:
            yield tmp
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)

    def _view_sql(self, table: str) -> str:
        d = self._table_dir(table)
        if d.is_dir() and any(_is_data(p) for p in d.iterdir()):
            glob = _sql_str(str(d / "**" / "*.parquet"))
            return f"SELECT * FROM read_parquet({glob}, union_by_name = true)"
        cols = ", ".join(
            f"CAST(NULL AS {_duckdb_type(f.type)}) AS {f.name}" for f in schema.TABLES[table]
        )
        return f"SELECT {cols} WHERE false"

    def _refresh_views(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        ddl = [f"CREATE OR REPLACE VIEW {t} AS {self._view_sql(t)}" for t in schema.TABLES]
        if ddl == self._ddl:
            return  # views glob their files when queried: a new file in a known table
            # needs no new view, and rewriting the catalog costs ~40 ms per write
        self._ddl = ddl
        for stmt in ddl:
            self.con.execute(stmt)
        # The on-disk catalog is a convenience for `duckdb store/catalog.duckdb`; if
        # another process holds it, our in-memory views still work.
        try:
            with duckdb.connect(str(self.root / CATALOG_FILE)) as cat:
                for stmt in ddl:
                    cat.execute(stmt)
        except duckdb.Error:
            pass


def parquet_options(table_schema: pa.Schema) -> dict[str, object]:
    """zstd everywhere, except that ``list<int32>`` position columns (selections' ``topk``)
    are delta-encoded and left uncompressed: ascending positions pack to a few bits each
    and decode at ~200 M values/s on one core, against ~90 M/s for zstd + dictionary,
    which made reading the store slower than replaying it (benchmarks/RESULTS.md)."""
    lists = [f"{f.name}.list.element" for f in table_schema
             if pa.types.is_list(f.type) and f.type.value_type == pa.int32()]
    if not lists:
        return {"compression": "zstd"}
    lists_set = {c.split(".")[0] for c in lists}
    return {
        "compression": {f.name: "zstd" for f in table_schema if f.name not in lists_set}
        | dict.fromkeys(lists, "none"),
        "use_dictionary": [f.name for f in table_schema if f.name not in lists_set],
        "column_encoding": dict.fromkeys(lists, "DELTA_BINARY_PACKED"),
    }


def row_group_rows(data: pa.Table) -> int:
    """Rows per Parquet row group so that a group holds about ``ROW_GROUP_BYTES``.

    A fixed row count would put a whole k=2048 selection trace in one group, and every
    filtered read (one request at a time) would then decode the whole file.
    """
    per_row = data.nbytes / max(data.num_rows, 1)
    return int(max(1_024, min(1 << 17, ROW_GROUP_BYTES // max(per_row, 1))))


class ParquetSink:
    """Appends tables conforming to one schema to a Parquet file (see :meth:`Store.writer`)."""

    def __init__(self, path: Path, table_schema: pa.Schema) -> None:
        self.schema = table_schema
        self.rows = 0
        self._writer = pq.ParquetWriter(path, table_schema, **parquet_options(table_schema))

    def write(self, data: pa.Table) -> None:
        data = schema.conform(data, self.schema)
        self._writer.write_table(data, row_group_size=row_group_rows(data))
        self.rows += data.num_rows

    def close(self) -> None:
        self._writer.close()


def _is_data(p: Path) -> bool:
    return not p.name.startswith(".") and (p.suffix == ".parquet" or p.is_dir())


def open_store(path: str | Path) -> Store:
    """Open (creating if needed) the trace store at ``path``."""
    return Store(path)
