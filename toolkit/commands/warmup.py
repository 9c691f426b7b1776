"""CLI: ``toolkit warm-up`` compiles every kernel once, so that no later command does.

numba compiles a kernel the first time it is called with new argument types and caches
the machine code on disk. The commands call many kernels (the store's page decoders and
writers, one row kernel per policy and mode, the tier loop, the Engram hash), so a first
run used to spend most of its time compiling. ``make setup`` runs this command once: it
runs the demo into a scratch directory without its charts (every kernel the demo uses;
the charts compile none), runs the serving model's client replay and a cost answer, and
replays small traces through every policy in every mode and through the tier engines the
demo does not run (vLLM's block pool, page-granular SGLang), on ``--workers`` processes.
``make setup`` builds the compiled extension (:mod:`toolkit.runtime.aot`) first: the
kernels it holds run from it here as in every command, so only numba's other kernels
compile.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import fail

#: Work items; each runs in its own process with its own scratch store. The demo starts
#: first on one process; "serving" starts first on the other, so the serving client's
#: kernels are cached before the demo reaches its cost part (the demo then loads them).
TASKS = ("demo", "serving", "cluster", "tiers", "selections-plain", "selections-hisparse",
         "prefix", "mrc")


def _run_task(task: str, scratch: str, traces: str) -> tuple[str, float, int]:
    """Run one work item; returns (task, seconds, kernels compiled)."""
    # toolkit.runtime.aot before numba: with the compiled extension built (make setup builds
    # it first), the kernels it holds run from it here as in every command, and only the
    # other kernels compile
    from toolkit.runtime import aot  # noqa: F401
    from toolkit.runtime.progress import _compile_listener

    listener = _compile_listener(announce=False)
    from numba.core import event

    event.register("numba:compile", listener)
    t0 = time.perf_counter()
    try:
        _TASK_FUNCTIONS[task](Path(scratch) / task, Path(traces))
    finally:
        event.unregister("numba:compile", listener)
    return task, time.perf_counter() - t0, listener.kernels


def _demo(root: Path, traces: Path) -> None:
    from toolkit.demo import run_demo

    if (traces / "mooncake").is_dir():
        run_demo(root / "store", root / "report", traces, echo=lambda _: None,
                 report=False)


def _serving(root: Path, traces: Path) -> None:
    """The serving model's client replay and a cost answer, as the demo's cost part runs
    them (the same argument types: the kernels compiled here are the demo's)."""
    from toolkit.cost.compare import CompareConfig
    from toolkit.serving import bundled_points_path, predict, read_points
    from toolkit.serving.params import bundled_params
    from toolkit.store import open_store
    from toolkit.sweep.kinds import run_compare

    predict(read_points(bundled_points_path()).head(8), bundled_params())
    with open_store(root / "store", create=True) as store:
        run_compare(store, CompareConfig(model="glm-5.2", hardware=("gb200",), isl=65536,
                                         osl=512, cached_prefix_fraction=0.95,
                                         interactivity=(100.0,)))


def _selection_store(root: Path):
    from toolkit.store import open_store
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    store = open_store(root / "store", create=True)
    cfg = SyntheticSelectionConfig(requests=2, prompt_tokens=300, steps=4, layers=2, k=32,
                                   sinks=2, recent_window=8, seed=1)
    store.write_many(generate(cfg, "warm"), "warm")
    return store


def _selections(mode: str):
    def run(root: Path, traces: Path) -> None:
        from toolkit.policies import policies
        from toolkit.replay.config import SelectionReplayConfig
        from toolkit.replay.selections import replay_selections

        with _selection_store(root) as store:
            for policy in policies.names():
                for initial in ("first", "empty") if mode == "hisparse" else ("first",):
                    replay_selections(store, SelectionReplayConfig(
                        "warm", policy, 48, mode=mode, initial=initial), workers=1)
    return run


def _prefix(root: Path, traces: Path) -> None:
    from toolkit.policies import policies
    from toolkit.replay.config import PrefixReplayConfig
    from toolkit.replay.prefix import replay_prefix, sweep_prefix
    from toolkit.store import open_store
    from toolkit.synth.agentic import AgenticConfig, write_agentic

    with open_store(root / "store", create=True) as store:
        write_agentic(store, AgenticConfig(sessions=4), "warm")
        for policy in policies.names():
            replay_prefix(store, PrefixReplayConfig("warm", policy, 64))
            replay_prefix(store, PrefixReplayConfig("warm", policy, None))
        sweep_prefix(store, "warm", [16, 64], "lru", workers=2)


def _mrc(root: Path, traces: Path) -> None:
    from toolkit.policies import policies
    from toolkit.replay.mrc import miss_curve_table, policy_miss_curve, stored_streams

    with _selection_store(root) as store:
        miss_curve_table(store, "warm", "selections", 64, workers=1)
        streams = stored_streams(store, "warm", "selections")
        for policy in policies.names():
            for kw in ({"sample_rate": 0.5}, {"sample_keys": 50}):
                policy_miss_curve(streams, [8, 32], policy, **kw)


def _tiers(root: Path, traces: Path) -> None:
    """The tier engines the demo does not run: vLLM's block pool (offload none, LRU, ARC)
    and page-granular SGLang, open and closed loop and sequential (a first vLLM replay of
    the Mooncake trace compiled for 11 s without this)."""
    from toolkit.cost.from_replay import run_tiers
    from toolkit.replay.tiers import TierReplayConfig
    from toolkit.store import open_store
    from toolkit.synth.agentic import AgenticConfig, write_agentic

    with open_store(root / "store", create=True) as store:
        write_agentic(store, AgenticConfig(sessions=4), "warm")
        runs = [{"engine_semantics": "vllm", "offload_policy": o} for o in ("none", "lru", "arc")]
        runs.append({"radix_semantics": "page"})
        for kw in runs:
            for loop in ({}, {"concurrency": 2}, {"sequential": True}):
                run_tiers(store, TierReplayConfig("warm", "gb200", "glm-5.2", **kw, **loop))


def _cluster(root: Path, traces: Path) -> None:
    """The cluster replay's loops over each engine (N caches from a list: their own
    compilations, as long as the tier item's, so a work item of their own: the two compile
    on the two processes at once). Ranks and disaggregation change no argument type."""
    from toolkit.cost.from_replay import run_cluster
    from toolkit.replay.tiers import ClusterReplayConfig, TierReplayConfig
    from toolkit.store import open_store
    from toolkit.synth.agentic import AgenticConfig, write_agentic

    with open_store(root / "store", create=True) as store:
        write_agentic(store, AgenticConfig(sessions=4), "warm")
        for kw in ({}, {"radix_semantics": "page"}, {"engine_semantics": "vllm"}):
            run_cluster(store, ClusterReplayConfig(TierReplayConfig(
                "warm", "gb200", "glm-5.2", concurrency=2, **kw), instances=2,
                router="kv-router"), save=False)


_TASK_FUNCTIONS = {"demo": _demo, "serving": _serving, "tiers": _tiers, "cluster": _cluster,
                   "selections-plain": _selections("plain"),
                   "selections-hisparse": _selections("hisparse"), "prefix": _prefix,
                   "mrc": _mrc}


def warm_up_cmd(
    workers: Annotated[int, typer.Option("--workers", min=1, help="Processes compiling at "
                                         "once.")] = 2,
    traces: Annotated[Path, typer.Option("--traces", help="Bundled traces directory (the "
                                         "demo's kernels are compiled on them; skipped "
                                         "when absent).")] = Path("traces"),
) -> None:
    """Compile every kernel the commands use, once (make setup runs it); later commands
    load them from numba's cache."""
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from toolkit.runtime.pool import die_with_parent

    t0 = time.perf_counter()
    total = 0
    with tempfile.TemporaryDirectory(prefix="toolkit-warm-up-") as scratch:
        # the demo is the longest item: it starts first, and the other process works
        # through the serving item, then the replays, meanwhile (TASKS' order)
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                 initializer=die_with_parent,  # none outlives a kill -9
                                 initargs=(os.getpid(),)) as pool:
            futures = [pool.submit(_run_task, t, scratch, str(traces)) for t in TASKS]
            for fut in as_completed(futures):
                try:
                    task, seconds, kernels = fut.result()
                except Exception as e:
                    fail(f"warm-up failed: {type(e).__name__}: {e}", code=1)
                total += kernels
                typer.echo(f"warm-up {task}: {kernels} kernel(s) compiled, {seconds:.1f} s",
                           err=True)
    typer.echo(f"warm-up: {total} kernel(s) compiled in {time.perf_counter() - t0:.0f} s "
               "(cached for every later command)")
