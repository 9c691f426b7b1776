"""What a sweep can run: one entry per replay kind, each through its normal entry point.

A kind names its frozen config dataclass (the grid's keys are its fields), the table
its runs land in (every such table keeps the run's ``config_json``, which is how a sweep
finds a cell that already ran), and how to run one config against a store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from toolkit.config import config_json, fingerprint
from toolkit.registry import Registry
from toolkit.store import Store, bounded_key, kept


@dataclass(frozen=True)
class Kind:
    """One replay kind a sweep can run.

    Attributes:
        name: the grid's ``kind``.
        config: the frozen config dataclass (grid keys are its fields).
        runs_table: store table holding one summary row (or rows) per run, with
            ``run_id`` and ``config_json`` columns.
        trace_table: table a cell's ``trace`` must exist in (None: no trace).
        run: ``run(store, config, threads) -> run_id``; writes the run's tables.
        check: registry look-ups that a config's own ``__post_init__`` does not do.
        hidden: config fields a grid may not set.
    """

    name: str
    config: type
    runs_table: str
    trace_table: str | None
    run: Callable[[Store, Any, int], str]
    check: Callable[[Any], Any] = lambda cfg: cfg
    hidden: tuple[str, ...] = ()

    def build(self, fields: dict[str, Any]) -> Any:
        return self.config(**fields)


kinds: Registry[Kind] = Registry("sweep kind")

_STREAMS: dict[tuple, Any] = {}  # the flattened trace of the last cells, per worker process


def _cached(store: Store, table: str, trace: str, key: tuple, load: Callable[[], Any]) -> Any:
    """A trace flattened once per worker for consecutive cells of the same trace (as
    ``sweep_prefix`` does), keyed by the trace file's identity so a replaced trace is
    re-read; at most two kept."""
    return kept(_STREAMS, (str(store.root), *key, store.source_stamp(table, trace)), load, 2)


# -- selections -------------------------------------------------------------------------
def _selections() -> Kind:
    from toolkit.policies import policies
    from toolkit.replay.selections import SelectionReplayConfig, replay_selections

    def run(store: Store, cfg: Any, threads: int) -> str:
        return replay_selections(store, cfg, workers=threads, progress=False)["run_id"]

    def check(cfg: Any) -> Any:
        policies.get(cfg.policy)
        return cfg

    return Kind("selections", SelectionReplayConfig, "selection_runs", "selections", run, check)


# -- prefix -----------------------------------------------------------------------------
def _prefix() -> Kind:
    from toolkit.policies import policies
    from toolkit.replay.prefix import PrefixReplayConfig, load_stream, replay_prefix

    def run(store: Store, cfg: Any, threads: int) -> str:
        stream = _cached(store, "requests", cfg.trace, ("prefix", cfg.trace),
                         lambda: load_stream(store, cfg.trace))
        return replay_prefix(store, cfg, stream=stream)["run_id"]

    def check(cfg: Any) -> Any:
        policies.get(cfg.policy)
        return cfg

    return Kind("prefix", PrefixReplayConfig, "replay_runs", "requests", run, check)


# -- tiers ------------------------------------------------------------------------------
def _tiers() -> Kind:
    from toolkit.cost.from_replay import run_tiers
    from toolkit.hardware import get_hardware
    from toolkit.models import get_model
    from toolkit.replay.tiers import TierReplayConfig, block_stream, page_stream

    def run(store: Store, cfg: Any, threads: int) -> str:
        if cfg.engine_semantics == "vllm":  # vLLM's full blocks, not radix pages
            key = (cfg.trace, "vllm", cfg.block_tokens)
            stream = _cached(store, "requests", cfg.trace, key, lambda: block_stream(
                store.read("requests", cfg.trace), cfg.block_tokens))
        else:
            key = (cfg.trace, cfg.page_tokens, cfg.radix_semantics)
            stream = _cached(store, "requests", cfg.trace, key, lambda: page_stream(
                store.read("requests", cfg.trace), cfg.page_tokens, cfg.radix_semantics))
        return run_tiers(store, cfg, stream=stream).summary["run_id"]

    def check(cfg: Any) -> Any:
        get_hardware(cfg.hardware)
        get_model(cfg.model)
        get_hardware(cfg.hardware).price_usd_per_gpu_hour(cfg.price_tier)
        return cfg

    return Kind("tiers", TierReplayConfig, "tier_runs", "requests", run, check)


# -- serving (toolkit cost compare) ---------------------------------------------------
def compare_run_id(cfg: Any) -> str:
    """Run id of a cost comparison: model, hardware and the config's fingerprint."""
    return bounded_key(f"compare-{cfg.model}-{'-'.join(cfg.hardware)}-{fingerprint(cfg)[:8]}")


def run_compare(store: Store, cfg: Any) -> str:
    """``toolkit cost compare`` for ``cfg`` with the bundled serving fit; its rows go to
    ``compare_runs`` under the config's run id (modelled, not measured)."""
    from toolkit.cost.compare import compare
    from toolkit.serving.params import bundled_params
    from toolkit.version import __version__

    params = bundled_params()
    t0 = time.perf_counter()
    df = compare(cfg, params)
    elapsed = time.perf_counter() - t0
    run_id = compare_run_id(cfg)
    rows = [{
        "run_id": run_id, "model": cfg.model, "precision": cfg.precision,
        "price_tier": cfg.price_tier, "isl": cfg.isl, "osl": cfg.osl,
        "cached_prefix_fraction": cfg.cached_prefix_fraction,
        "max_p90_ttft_s": cfg.max_p90_ttft_s, "params_kind": params.kind,
        "config_json": config_json(cfg), "elapsed_s": elapsed, "toolkit_version": __version__,
        **{k: r[k] for k in ("hardware", "engine", "interactivity", "clamped", "reachable",
                             "edge", "source", "basis", "tput_per_gpu", "tput_per_gpu_low",
                             "tput_per_gpu_high", "output_tput_per_gpu", "p90_ttft_s", "gpus",
                             "layout", "usd_per_gpu_hour", "price_survey", "usd_per_mtok_total",
                             "usd_per_mtok_total_low", "usd_per_mtok_total_high",
                             "usd_per_mtok_output")},
    } for r in df.to_dicts()]
    from toolkit.schema import COMPARE_RUNS

    names = set(COMPARE_RUNS.names)
    rows = [{k: v for k, v in r.items() if k in names} for r in rows]
    store.write("compare_runs", run_id, pa.Table.from_pylist(rows, schema=COMPARE_RUNS),
                replace=True)
    return run_id


def _serving() -> Kind:
    from toolkit.cost.compare import DEFAULT_ENGINES, CompareConfig, check_engine
    from toolkit.hardware import get_hardware
    from toolkit.models import get_model

    def check(cfg: Any) -> Any:
        get_model(cfg.model)
        if not cfg.hardware:
            raise ValueError("hardware: give at least one accelerator")
        for hw in cfg.hardware:
            get_hardware(hw).price_usd_per_gpu_hour(cfg.price_tier)
            check_engine(hw, cfg.engines.get(hw, DEFAULT_ENGINES.get(hw, "sglang")),
                         "engines")
        if not cfg.interactivity:
            raise ValueError("interactivity: give at least one target")
        return cfg

    return Kind("serving", CompareConfig, "compare_runs", None,
                lambda store, cfg, threads: run_compare(store, cfg), check)


def _plan() -> Kind:
    """``toolkit plan`` as a sweep kind: one cell is one whole plan search (its rows land in
    ``plan_runs`` under the plan id), so a grid of targets, accelerators or memory options
    runs on the local pool or on Ray with the same results as the command."""
    from toolkit.hardware import get_hardware
    from toolkit.models import get_model
    from toolkit.plan.config import PlanConfig

    def run(store: Store, cfg: Any, threads: int) -> str:
        from toolkit.plan.search import plan

        return plan(store, cfg, progress=False).plan_id

    def check(cfg: Any) -> Any:
        get_model(cfg.model)
        for hw in cfg.hardware:
            get_hardware(hw).price_usd_per_gpu_hour(cfg.price_tier)
        return cfg

    return Kind("plan", PlanConfig, "plan_runs", "requests", run, check)


for _make in (_selections, _prefix, _tiers, _serving, _plan):
    _k = _make()
    kinds.register(_k.name, _k)
