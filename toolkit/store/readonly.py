"""SQL over a store is read-only unless asked otherwise: ``toolkit sql``, ``Workspace.sql``
and :meth:`toolkit.store.Store.query` run queries, not statements that write, and read no
file outside the store.

Two layers, DuckDB's own mechanisms first:

* the store's connection is confined by DuckDB itself: ``allowed_directories`` is the
  store's root, ``enable_external_access`` is off (no other file, no URL, no extension
  installed or loaded, no database attached or exported) and ``lock_configuration`` is
  on, so no statement can lift either;
* inside the store DuckDB would still let ``COPY ... TO`` write, so each statement's type
  (from DuckDB's parser, :func:`duckdb.extract_statements`) must be a query: ``SELECT``
  (with ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``), ``EXPLAIN``, ``PRAGMA`` or ``CALL`` (a
  pragma or call that would change a setting meets the locked configuration).

``allow_write=True`` (``--allow-write``) runs the SQL on a second connection with DuckDB's
defaults and the same views.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from toolkit.errors import StoreError
from toolkit.store.layout import CACHE_DIR

#: DuckDB's temporary directory (spilled intermediate results), inside the store's cache.
TEMP_DIR = f"{CACHE_DIR}/duckdb-tmp"

#: Statement types that only read.
READ_TYPES = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN,
                        duckdb.StatementType.PRAGMA, duckdb.StatementType.CALL})
HINT = ("the store's SQL is read-only: pass --allow-write (Python: allow_write=True) to run "
        "it, or --output FILE to export rows")


class WriteRefused(StoreError):
    """A statement that writes, or touches a file outside the store, without allow_write."""


def confine(con: duckdb.DuckDBPyConnection, root: Path) -> None:
    """Let ``con`` read files under ``root`` only, for good (see the module docstring).
    The views name the root as a glob matching only itself (``s[1]`` as ``s[[]1[]]``),
    which DuckDB checks as written, so that spelling is allowed too.

    DuckDB also allows its temporary directory, by default ``.tmp`` under the current
    directory: ``read_text('.tmp/...')`` read files outside the store, and a ``.tmp``
    symlink any file on the machine. The temporary directory is therefore set inside the
    store first (:data:`TEMP_DIR`, made only if a query spills); DuckDB refuses paths
    that leave the allowed directories through a symlink or ``..`` itself."""
    temp = str(root / TEMP_DIR)
    con.execute("SET temp_directory = " + "'" + temp.replace("'", "''") + "'")
    where = str(root).rstrip("/") + "/"
    dirs = dict.fromkeys([where, re.sub(r"([\[\]*?])", r"[\1]", where)])
    listed = ", ".join("'" + d.replace("'", "''") + "'" for d in dirs)
    con.execute(f"SET allowed_directories = [{listed}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def check_statements(sql: str) -> None:
    """Refuse ``sql`` unless every statement in it is a query.

    Raises:
        WriteRefused: one line naming the statement (its number, type and start).
    """
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error:
        return  # not SQL: running it reports DuckDB's syntax error
    for i, st in enumerate(statements, 1):
        if st.type not in READ_TYPES:
            text = " ".join(st.query.split())
            text = text if len(text) <= 60 else text[:57] + "..."
            raise WriteRefused(f"statement {i} ({st.type.name}: {text!r}) refused: {HINT}")


_FILE = re.compile(r'Cannot access (?:file|directory) "([^"]*)"')


def refused_by_duckdb(e: duckdb.Error) -> None:
    """Turn DuckDB's refusal of a file outside the store (or of a locked setting) into
    :class:`WriteRefused` naming the file; other errors return untouched."""
    msg = (str(e).splitlines() or [""])[0]
    if isinstance(e, duckdb.PermissionException):
        m = _FILE.search(msg)
        what = f"{m.group(1)} is outside the store" if m else msg
        raise WriteRefused(f"{what}: {HINT}") from None
    if "the configuration has been locked" in msg:
        m = re.search(r'option "([^"]+)"', msg)
        raise WriteRefused(f"setting {m.group(1) if m else '?'} cannot change: {HINT}") from None
