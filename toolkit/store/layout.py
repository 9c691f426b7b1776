"""Where things live in a store directory, and which names may be keys.

Only the store package knows this layout (see :mod:`toolkit.store`); other layers ask a
:class:`~toolkit.store.Store` for tables or for the one file a reader needs.
"""

from __future__ import annotations

import hashlib
import re

from toolkit.errors import StoreError

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
#: manifest mapping each key to its rows (see :meth:`toolkit.store.Store.compact`).
COMPACT_DIR = ".compacted"
MANIFEST_FILE = "manifest.json"
#: Where ``toolkit store repair`` (and a rewrite that meets one) moves a damaged file: a
#: part that does not read, a key file that is not Parquet. Out of every view; the
#: toolkit never deletes it.
DAMAGED_DIR = ".damaged"
#: Tables whose keys are runs; compaction merges them. Input tables (traces) stay one
#: file per key, since replays read those files directly.
COMPACTABLE = ("replay_runs", "selection_runs", "selection_replay", "tier_runs",
               "tier_requests", "cluster_runs", "cluster_requests", "engram_runs", "sweeps",
               "compare_runs")
#: Tables whose rows declare other tables' rows complete (a sweep cell's ``done`` row
#: names its run): a committed write moves its files into them last, so a move that
#: fails (a directory made read-only or immutable) never leaves such a row without
#: what it names.
LANDS_LAST = ("sweeps",)
PART_ROWS = 4_000_000  # rows per compacted part file
SMALL_WRITE_BYTES = 4 << 20  # a lone write up to this is staged as one file (_write_small)
OLD_PREFIX = "old-"  # a staging entry that is only a second name of a replaced file
SMALL_PREFIX = "one-"  # the name of such a staged file starts with this
KEY_MAX_CHARS = 128
KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_key(key: str, what: str = "trace name") -> str:
    """Refuse names that would escape the store or confuse a glob."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
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


def staged_name(table: str, key: str) -> str:
    """Where a transaction stages ``table``/``key``: flat in its directory (a directory
    per table was two more mkdir/rmdir pairs, each a metadata syscall, per sweep
    cell). Table names hold no '.', so the name is unambiguous. Markers of older
    transactions list ``entries`` staged as ``table/key.parquet``;
    ``transaction.apply_commit`` reads both."""
    return f"{table}.{key}.parquet"
