"""One object for notebooks and scripts: a store plus the verbs that work on it.

``toolkit.open(path)`` returns a :class:`Workspace`; its methods ingest traces, replay
them, and query the results, so a notebook imports one name instead of a dozen modules.
Each method is a thin hand-off to the library function that does the work (named in its
docstring), and each replay builds that function's frozen config from the keyword
arguments given, so the defaults live once, in the config dataclass.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import StoreError

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from toolkit.ingest import IngestResult
    from toolkit.replay.tiers import TierReplayResult
    from toolkit.store import Store


class Workspace:
    """A trace store opened for analysis; close it (or use ``with``) when done.

    Attributes:
        store: the underlying :class:`~toolkit.store.Store`, for anything the verbs
            below do not cover.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- lifecycle ------------------------------------------------------------------
    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the store (waits for replaced files it still has to free)."""
        self.store.close()

    def __repr__(self) -> str:
        return f"Workspace({str(self.store.root)!r})"

    # -- ingest ---------------------------------------------------------------------
    def ingest(self, path: str | Path, format: str | None = None, name: str | None = None,
               *, replace: bool = False, **options: object) -> IngestResult:
        """Validate a trace file completely, then store it (see
        :func:`toolkit.ingest.ingest_file`).

        Args:
            path: the trace file (or directory, for ``bundle``).
            format: a registered reader name (``toolkit ingest --help`` lists them);
                required, since files of different formats share extensions.
            name: the stored trace name; defaults to the file's stem.
            replace: overwrite a stored trace of that name.
            **options: passed to the reader (e.g. ``select`` for ``bundle``).

        Raises:
            ToolkitError: no ``format`` given, or the file is invalid.
        """
        from toolkit.errors import ToolkitError
        from toolkit.ingest import ingest_file, readers

        if format is None:
            raise ToolkitError(f"ingest {path}: pass format=, one of {', '.join(readers.names())}")
        return ingest_file(self.store, format, path, name, replace=replace, **options)

    def traces(self) -> dict[str, list[str]]:
        """Stored trace names by kind: ``requests`` (timelines), ``selections`` (top-k)."""
        return {"requests": self.store.traces(), "selections": self.store.keys("selections")}

    # -- replay ---------------------------------------------------------------------
    def replay_prefix(self, trace: str, *, save: bool = True, **config: Any) -> dict[str, Any]:
        """Replay a request timeline's prefix blocks through one cache.

        ``config``: the fields of :class:`toolkit.replay.config.PrefixReplayConfig`
        (``policy``, ``capacity_blocks``); see :func:`toolkit.replay.prefix.replay_prefix`.
        """
        from toolkit.replay.config import PrefixReplayConfig
        from toolkit.replay.prefix import replay_prefix

        return replay_prefix(self.store, PrefixReplayConfig(trace, **config), save=save)

    def replay_selections(self, trace: str, *, save: bool = True, **config: Any
                          ) -> dict[str, Any]:
        """Replay a top-k selection trace through a device buffer.

        ``config``: the fields of :class:`toolkit.replay.config.SelectionReplayConfig`
        (``policy``, ``buffer_tokens``, ``mode``, ...); see
        :func:`toolkit.replay.selections.replay_selections`.
        """
        from toolkit.replay.config import SelectionReplayConfig
        from toolkit.replay.selections import replay_selections

        return replay_selections(self.store, SelectionReplayConfig(trace, **config), save=save)

    def replay_tiers(self, trace: str, *, save: bool = True, **config: Any
                     ) -> TierReplayResult:
        """Replay a request timeline through device, host and storage KV tiers, timed by the
        serving model and priced.

        ``config``: the fields of :class:`toolkit.replay.tiers.TierReplayConfig`
        (``hardware``, ``model``, ``concurrency``, ...); see
        :func:`toolkit.cost.from_replay.run_tiers`.
        """
        from toolkit.cost.from_replay import run_tiers
        from toolkit.replay.tiers.config import TierReplayConfig

        return run_tiers(self.store, TierReplayConfig(trace, **config), save=save)

    def replay_engram(self, trace: str, hbm_cache_bytes: float, *, save: bool = True,
                      **config: Any) -> dict[str, Any]:
        """Replay an Engram lookup trace through an HBM cache of its table and price the
        placement.

        ``config``: the other fields of :class:`toolkit.replay.config.EngramReplayConfig`;
        see :func:`toolkit.cost.engram.run_engram`.
        """
        from toolkit.cost.engram import run_engram
        from toolkit.replay.config import EngramReplayConfig

        cfg = EngramReplayConfig(trace, hbm_cache_bytes, **config)
        return run_engram(self.store, cfg, save=save)

    def miss_curve(self, trace: str, kind: str, max_capacity: int, *, save: bool = True,
                   workers: int | None = None) -> pa.Table:
        """The one-pass LRU miss curve of a stored trace (``kind``: ``"selections"`` or
        ``"prefix"``); see :func:`toolkit.replay.mrc.miss_curve_table`."""
        from toolkit.replay.mrc import miss_curve_table

        return miss_curve_table(self.store, trace, kind, max_capacity, save=save,
                                workers=workers)

    # -- query ----------------------------------------------------------------------
    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run a named query (``toolkit sql --list`` shows them); unspecified parameters
        take their defaults. See :func:`toolkit.analysis.queries.run_query`."""
        from toolkit.analysis.queries import run_query

        return run_query(self.store, name, **params)

    def sql(self, text: str, params: dict[str, object] | None = None) -> pl.DataFrame:
        """Run DuckDB SQL over the store's tables; pass values as ``params`` (``$name``)."""
        return self.store.query(text, params)


def open(path: str | Path, *, create: bool = False) -> Workspace:
    """Open the trace store at ``path`` as a :class:`Workspace`.

    Args:
        path: the store directory.
        create: make an empty store when ``path`` does not exist yet; without it a
            missing path is an error, so a typo does not silently start a new store.

    Raises:
        StoreError: ``path`` does not exist (and ``create`` is false) or is not a store
            directory.
    """
    from toolkit.store import open_store

    root = Path(path)
    if not create and not root.exists():
        raise StoreError(f"no store at {root.resolve()}; pass create=True to make one")
    return Workspace(open_store(root, create=create))
