"""One object for notebooks and scripts: a store plus the verbs that work on it.

``toolkit.open(path)`` returns a :class:`Workspace`; its methods ingest, generate or record
traces, replay and sweep them, price the runs and query the results, so a notebook imports
one name instead of a dozen modules. Each method is a thin hand-off to the library function
that does the work (named in its docstring), and builds that function's frozen config from
the keyword arguments given, so the defaults live once, in the config dataclass. Spec names
are looked up here, at the edge, so callers pass ``"gb200"`` rather than a spec object.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.errors import StoreError

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

    from toolkit.cost.config import CompareConfig
    from toolkit.engram.record import EngramRecordResult
    from toolkit.hardware import HardwareSpec
    from toolkit.ingest import IngestResult
    from toolkit.models import ModelSpec
    from toolkit.replay.engram import DenseStream
    from toolkit.replay.selections import SelectionRows
    from toolkit.replay.tiers import TierReplayResult
    from toolkit.serving import ServingParams
    from toolkit.store import Store
    from toolkit.sweep import Grid, SweepResult


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

    def synth_selections(self, name: str, *, replace: bool = False, **config: Any) -> int:
        """Generate a SYNTHETIC top-k selection trace in memory and store it; returns its rows.

        ``config``: the fields of :class:`toolkit.synth.selections.SyntheticSelectionConfig`;
        see :func:`toolkit.synth.selections.generate`. This is the reference generator: for
        traces larger than memory, ``toolkit synth selections`` streams a faster one
        (:mod:`toolkit.synth.selections_fast`), which draws different positions.
        """
        from toolkit.synth.selections import SyntheticSelectionConfig, generate

        tables = generate(SyntheticSelectionConfig(**config), name)
        self.store.write_many(tables, name, replace=replace)
        return tables["selections"].num_rows

    def synth_agentic(self, name: str, preset: str = "coding", *, replace: bool = False,
                      **overrides: Any) -> int:
        """Generate a SYNTHETIC agentic request timeline and store it, labelled synthetic in
        ``request_traces``; returns its requests (``toolkit synth agentic``).

        Args:
            preset: a key of :data:`toolkit.synth.agentic.PRESETS` (``coding``,
                ``toolagent``).
            **overrides: fields of :class:`toolkit.synth.agentic.AgenticConfig` replacing
                the preset's (``sessions``, ``seed``, ...).
        """
        import dataclasses

        from toolkit.synth.agentic import PRESETS, write_agentic

        if preset not in PRESETS:
            raise KeyError(f"unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
        cfg = dataclasses.replace(PRESETS[preset], **overrides)
        return write_agentic(self.store, cfg, name, replace=replace).num_rows

    def record_engram(self, name: str, texts: Sequence[str | Path], *, replace: bool = False,
                      **config: Any) -> EngramRecordResult:
        """Hash every token of ``texts`` (one request each) into an Engram lookup trace.

        ``config``: the fields of :class:`toolkit.engram.hashing.EngramConfig`; see
        :func:`toolkit.engram.record.record_engram` (``toolkit record engram``).
        """
        from toolkit.engram.hashing import EngramConfig
        from toolkit.engram.record import record_engram

        return record_engram(self.store, name, [Path(t) for t in texts],
                             EngramConfig(**config), replace=replace)

    def load_rows(self, trace: str) -> SelectionRows:
        """A whole selection trace in memory (:func:`toolkit.replay.selections.load_rows`);
        pass it to :meth:`replay_selections` as ``rows`` to replay it several times."""
        from toolkit.replay.selections import load_rows

        return load_rows(self.store, trace)

    def load_dense(self, trace: str) -> DenseStream:
        """An Engram trace's lookups as dense row keys
        (:func:`toolkit.replay.engram.load_dense`)."""
        from toolkit.replay.engram import load_dense

        return load_dense(self.store, trace)

    # -- replay ---------------------------------------------------------------------
    def replay_prefix(self, trace: str, *, save: bool = True, **config: Any) -> dict[str, Any]:
        """Replay a request timeline's prefix blocks through one cache.

        ``config``: the fields of :class:`toolkit.replay.config.PrefixReplayConfig`
        (``policy``, ``capacity_blocks``); see :func:`toolkit.replay.prefix.replay_prefix`.
        """
        from toolkit.replay.config import PrefixReplayConfig
        from toolkit.replay.prefix import replay_prefix

        return replay_prefix(self.store, PrefixReplayConfig(trace, **config), save=save)

    def replay_selections(self, trace: str, *, save: bool = True,
                          rows: SelectionRows | None = None, **config: Any) -> dict[str, Any]:
        """Replay a top-k selection trace through a device buffer.

        ``config``: the fields of :class:`toolkit.replay.config.SelectionReplayConfig`
        (``policy``, ``buffer_tokens``, ``mode``, ...); ``rows``: the trace from
        :meth:`load_rows`, to skip reading it again; see
        :func:`toolkit.replay.selections.replay_selections`.
        """
        from toolkit.replay.config import SelectionReplayConfig
        from toolkit.replay.selections import replay_selections

        return replay_selections(self.store, SelectionReplayConfig(trace, **config), save=save,
                                 rows=rows)

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

    def replay_cluster(self, trace: str, *, instances: int = 1, router: str = "round-robin",
                       rate_rps: float | None = None, layout: str | None = None,
                       save: bool = True, progress: bool | None = False,
                       **config: Any) -> Any:
        """Replay a request timeline over ``instances`` serving instances behind ``router``
        (round-robin, least-load, cache-aware, kv-router), each with its own device/host/
        storage tiers, timed by the serving model and priced. ``layout``: as ``toolkit
        replay cluster --layout`` (``tp8``, ``dp8``, ``disagg:dp8/dp16``, a cost compare
        layout text); it sets the instance's assumptions, ``ranks`` and ``decode``.

        ``config``: the fields of :class:`toolkit.replay.tiers.TierReplayConfig` (per
        instance: ``device_tokens``, ``host_tokens``, ``storage_tokens``; ``concurrency`` =
        closed-loop users over the cluster) and the router knobs of
        :class:`toolkit.replay.tiers.ClusterReplayConfig`; see
        :func:`toolkit.cost.from_replay.run_cluster`. Returns its result (``.summary`` is
        the ``cluster_runs`` row, ``.requests`` the ``cluster_requests`` rows).
        """
        from dataclasses import fields

        from toolkit.cost.from_replay import run_cluster
        from toolkit.replay.tiers.config import ClusterReplayConfig, TierReplayConfig

        knobs = {f.name for f in fields(ClusterReplayConfig)} - {"tiers", "instances",
                                                                  "router", "rate_rps"}
        extra = {k: config.pop(k) for k in list(config) if k in knobs}
        if layout is not None:
            from toolkit.plan.pool import cluster_layout

            lay = cluster_layout(layout)
            base = config.pop("assumptions", TierReplayConfig(trace).assumptions)
            config["assumptions"] = lay.assumptions(base)
            extra = {"ranks": lay.ranks, "decode": lay.decode, **extra}
        cfg = ClusterReplayConfig(TierReplayConfig(trace, **config), instances=instances,
                                  router=router, rate_rps=rate_rps, **extra)
        return run_cluster(self.store, cfg, save=save, progress=progress)

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

    def miss_curve(self, trace: str, kind: str, max_capacity: int | None = None, *,
                   save: bool = True,
                   workers: int | None = None) -> pa.Table:
        """The one-pass LRU miss curve of a stored trace (``kind``: ``"selections"``,
        ``"prefix"`` or ``"engram"``); see :func:`toolkit.replay.mrc.miss_curve_table`."""
        from toolkit.replay.mrc import miss_curve_table

        return miss_curve_table(self.store, trace, kind, max_capacity, save=save,
                                workers=workers)

    # -- sweeps ---------------------------------------------------------------------
    def sweep_prefix(self, trace: str, capacities: list[int | None], **options: Any
                     ) -> list[dict[str, Any]]:
        """Replay a request timeline's prefix blocks at several capacities (``None``:
        unbounded), flattening it once; one ``replay_runs`` row each.

        ``options``: ``policy``, ``workers``, ``save``, ``progress`` of
        :func:`toolkit.replay.prefix.sweep_prefix`.
        """
        from toolkit.replay.prefix import sweep_prefix

        return sweep_prefix(self.store, trace, capacities, **options)

    def sweep(self, grid: Grid | str | Path, **options: Any) -> SweepResult:
        """Run every cell of a TOML grid (a path or a :class:`toolkit.sweep.Grid`) not
        already in the store (``toolkit sweep``).

        ``options``: ``engine``, ``workers`` (``1`` runs in this process), ``address``,
        ``on_error``, ``progress`` of :func:`toolkit.sweep.run`.
        """
        from toolkit.sweep import run

        return run(self.store, grid, **options)

    def sweep_query(self, name: str, sweep_id: str) -> pl.DataFrame:
        """Run the sweep query ``name`` (e.g. ``sweep_miss_surface``) for one sweep; see
        :func:`toolkit.analysis.queries.sweep.sweep_query`."""
        from toolkit.analysis import sweep_query

        return sweep_query(self.store, name, sweep_id)

    # -- serving model and prices ---------------------------------------------------
    def hardware(self, name: str) -> HardwareSpec:
        """The registered accelerator spec ``name`` (``toolkit hardware show NAME``)."""
        from toolkit.hardware import get_hardware

        return get_hardware(name)

    def model(self, name: str) -> ModelSpec:
        """The registered model spec ``name`` or alias (``toolkit models show NAME``)."""
        from toolkit.models import get_model

        return get_model(name)

    def compare(self, model: str, hardware: Sequence[str], *,
                params: ServingParams | None = None, **config: Any) -> pl.DataFrame:
        """$/M tokens per accelerator at target interactivities (``toolkit cost compare``);
        reads nothing from the store.

        ``config``: the other fields of :class:`toolkit.cost.config.CompareConfig`
        (``interactivity``, ``max_p90_ttft_s``, ``isl``, ...); ``params``: fitted serving
        terms (default: the bundled fit). See :func:`toolkit.cost.compare.compare`.
        """
        from toolkit.cost.compare import compare

        return compare(_compare_config(model, hardware, config), params)

    def record_serving_fronts(self, model: str, hardware: Sequence[str], **config: Any
                              ) -> str:
        """Store each accelerator's modelled Pareto front (throughput per GPU vs
        interactivity) in ``serving_fronts``; returns the run id.

        ``config``: as :meth:`compare`; see :func:`toolkit.cost.records.record_serving_fronts`.
        """
        from toolkit.cost.records import record_serving_fronts

        return record_serving_fronts(self.store, _compare_config(model, hardware, config))

    def record_replay_cost(self, selection_run_id: str, **config: Any) -> dict[str, Any]:
        """Price a stored selection replay with the serving model's decode step and store its
        ``decode_costs`` row; returns the row.

        ``config``: the other fields of :class:`toolkit.cost.records.DecodeCostConfig`
        (``model``, ``hardware``, ``batch_per_gpu``, ``overlap``, ...); see
        :func:`toolkit.cost.records.record_replay_cost`.
        """
        from toolkit.cost.records import DecodeCostConfig, record_replay_cost

        return record_replay_cost(self.store, DecodeCostConfig(selection_run_id, **config))

    def hisparse_columns(self, run_id: str, model: str,
                         target_context_tokens: float | None = None) -> dict[str, float]:
        """Serving-model inputs from a stored HiSparse selection replay, carried to
        ``model``'s k (and ``target_context_tokens``); see
        :func:`toolkit.serving.reuse.hisparse_columns`."""
        from toolkit.serving.reuse import hisparse_columns

        return hisparse_columns(self.store, run_id, self.model(model), target_context_tokens)

    def prefix_columns(self, tier_run_id: str) -> dict[str, float]:
        """Serving-model inputs from a stored tier replay (cached and host-loaded prompt
        shares); see :func:`toolkit.serving.reuse.prefix_columns`."""
        from toolkit.serving.reuse import prefix_columns

        return prefix_columns(self.store, tier_run_id)

    # -- query ----------------------------------------------------------------------
    def query(self, name: str, **params: Any) -> pl.DataFrame:
        """Run a named query (``toolkit sql --list`` shows them); unspecified parameters
        take their defaults. See :func:`toolkit.analysis.queries.run_query`."""
        from toolkit.analysis.queries import run_query

        return run_query(self.store, name, **params)

    def sql(self, text: str, params: dict[str, object] | None = None, *,
            allow_write: bool = False) -> pl.DataFrame:
        """Run DuckDB SQL over the store's tables; pass values as ``params`` (``$name``).
        Read-only unless ``allow_write``: a statement that writes (COPY, ATTACH, CREATE,
        SET, ...) or a file outside the store is refused with
        :class:`toolkit.store.readonly.WriteRefused`."""
        return self.store.query(text, params, allow_write=allow_write)


def _compare_config(model: str, hardware: Sequence[str], config: dict[str, Any]
                    ) -> CompareConfig:
    """A :class:`CompareConfig` from keywords; lists become the tuples its fields hold, so
    the config (and the fingerprint keying stored fronts) does not depend on which was
    passed, and ``"gb200,mi355x"`` is split as the CLI splits it."""
    from toolkit.cost.config import CompareConfig

    if isinstance(hardware, str):
        hardware = [h.strip() for h in hardware.split(",") if h.strip()]
    if "interactivity" in config:
        config = {**config, "interactivity": tuple(config["interactivity"])}
    return CompareConfig(model=model, hardware=tuple(hardware), **config)


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
