"""Trace store: Parquet datasets in a directory, plus a DuckDB catalog of views over them.

Layout of a store directory::

    catalog.duckdb            views only (rewritten only when a view's definition changes)
    requests/<trace>.parquet  one file per ingested request timeline
    replay_runs/<run>.parquet one file per replay run, keyed by its config fingerprint
    .staging/tx-<id>/         a write in progress: its files, then a COMMIT marker
    .staging/one-<id>.<table>.<key>.parquet   a lone small write in progress
    <run table>/.compacted/   compacted parts and their manifest (see ``parts``)
    .damaged/<table>/         files ``toolkit store repair`` moved out of the views

Only this package knows that layout. Every write is a transaction: all its files (a trace
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

from toolkit.store.core import Store, kept, open_store
from toolkit.store.layout import (
    CACHE_DIR,
    CATALOG_FILE,
    COMMIT_MARKER,
    COMPACT_DIR,
    COMPACTABLE,
    DAMAGED_DIR,
    KEY_MAX_CHARS,
    MANIFEST_FILE,
    OLD_PREFIX,
    STAGING_DIR,
    STALE_STAGING_S,
    bounded_key,
    check_key,
)
from toolkit.store.parquet.sink import ParquetSink, parquet_options, row_group_rows, sink_schema
from toolkit.store.readonly import WriteRefused
from toolkit.store.trash import drain_trash

__all__ = [
    "CACHE_DIR", "CATALOG_FILE", "COMMIT_MARKER", "COMPACTABLE", "COMPACT_DIR", "DAMAGED_DIR",
    "KEY_MAX_CHARS", "MANIFEST_FILE", "OLD_PREFIX", "STAGING_DIR", "STALE_STAGING_S",
    "ParquetSink", "Store", "bounded_key", "check_key", "drain_trash", "kept", "open_store",
    "WriteRefused", "parquet_options", "row_group_rows", "sink_schema",
]
