"""Sweep orchestration: validate a grid, skip cells whose run exists, run the rest on an
engine, record every cell in the ``sweeps`` table.

Resumable by construction: a cell is identified by its config, and every run table keeps
the ``config_json`` of the run it holds, so a cell whose config already ran (in an
earlier sweep, a killed one, or by hand from the CLI) is skipped and points at that run.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from toolkit.config import config_json
from toolkit.errors import ToolkitError
from toolkit.store import Store
from toolkit.sweep.engines import CellOutcome, CellTask, cell_key, driver_id, engines
from toolkit.sweep.grid import Grid, GridError, cell_json, load_grid

ON_ERROR = ("raise", "record")


class SweepError(ToolkitError):
    """A cell failed under ``on_error="raise"`` (the failure is recorded first)."""


class SweepInterrupted(ToolkitError):
    """Ctrl-C stopped a sweep; the cells committed so far are kept, a rerun resumes."""


@dataclass(frozen=True)
class SweepResult:
    """What one sweep invocation did; :meth:`as_json` is the CLI's ``--json`` object."""

    sweep_id: str
    cells: int
    ran: int
    skipped: int
    failed: int
    elapsed_s: float

    def as_json(self) -> dict[str, Any]:
        return {"sweep_id": self.sweep_id, "cells": self.cells, "ran": self.ran,
                "skipped": self.skipped, "failed": self.failed, "elapsed_s": self.elapsed_s}


def _existing_runs(store: Store, table: str) -> dict[str, str]:
    """``config_json`` -> run id of every run in ``table``."""
    df = store.query(f"SELECT DISTINCT config_json, run_id FROM {table}")
    return dict(zip(df["config_json"].to_list(), df["run_id"].to_list(), strict=True))


def _swept_runs(store: Store, kind: str, table: str) -> dict[str, str]:
    """Config fingerprint -> run id of cells earlier sweeps ran or found, if that run is
    still in ``table``: a replay that normalises its config before storing it (a default
    filled in) still resumes."""
    df = store.query("SELECT config_fingerprint, any_value(run_id) AS run_id FROM sweeps "
                     "WHERE kind = $k AND status <> 'failed' GROUP BY ALL", {"k": kind})
    present = set(store.keys(table))
    return {fp: r for fp, r in zip(df["config_fingerprint"].to_list(),
                                   df["run_id"].to_list(), strict=True) if r in present}


def _check_traces(store: Store, grid: Grid, cells: list[Any]) -> None:
    table = grid.kind_spec.trace_table
    if table is None:
        return
    known = set(store.keys(table))
    for c in cells:
        trace = c.fields.get("trace")
        if trace not in known:
            raise GridError(
                f"{grid.source}: cell {c.index}: trace {trace!r} is not in {store.root} "
                f"({table}); known: {', '.join(sorted(known)) or 'none'}")
    if grid.kind == "selections":
        _check_layers(store, grid, cells)


def _check_layers(store: Store, grid: Grid, cells: list[Any]) -> None:
    """IndexShare Full layers must be layers of the cell's trace: found now, not when
    that cell replays."""
    layers: dict[str, int] = {}
    for c in cells:
        full = getattr(c.config, "full_layers", None)
        if not full:
            continue
        trace = c.config.trace
        if trace not in layers:
            df = store.query("SELECT max(n_layers) AS n FROM selection_traces "
                             "WHERE trace = $t", {"t": trace})
            layers[trace] = int(df["n"][0]) if df.height and df["n"][0] is not None else -1
        n = layers[trace]
        bad = [la for la in full if n >= 0 and la >= n]
        if bad:
            raise GridError(f"{grid.source}: cell {c.index}: full_layers {bad[0]} is not a "
                            f"layer of trace {trace!r} (layers 0..{n - 1})")


def _progress(total: int, enabled: bool | None) -> Any:
    """A cell counter: on a terminal or in a notebook, never under --json or
    ``TOOLKIT_PROGRESS=0`` (tests, executed notebooks); see toolkit.runtime.progress."""
    from toolkit.runtime.progress import progress

    return progress(total, "sweep", enabled, unit="cell")


def new_sweep_id(grid: Grid) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return f"sweep-{grid.kind}-{grid.fingerprint[:8]}-{stamp}-{uuid.uuid4().hex[:6]}"


def run(
    store: Store,
    grid: Grid | str | Path,
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    on_error: str = "raise",
    progress: bool | None = None,
    connect_timeout_s: float | None = None,
    verbose: bool = False,
) -> SweepResult:
    """Run every cell of ``grid`` not already in ``store``.

    Args:
        grid: a :class:`Grid` or the path of a TOML grid file (validated before anything
            runs).
        engine: ``local`` (process pool; ``workers=1`` runs in this process) or ``ray``.
        workers: local processes, or CPUs of a local Ray (``None`` = every core).
        address: a Ray cluster to use (``ray start --head`` prints it).
        on_error: ``raise`` (default) stops at the first failed cell after recording it;
            ``record`` records failures and runs the rest.
        progress: cell counter on stderr (``None`` = on a terminal only).
        connect_timeout_s: Ray only: give up on an unreachable ``address`` after this
            many seconds (``None``: 30).
        verbose: Ray only: show Ray's own log lines.

    Raises:
        GridError: the grid or a cell's trace is invalid (nothing ran).
        SweepError: a cell failed with ``on_error="raise"``.
    """
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be raise or record, got {on_error!r}")
    if engine not in engines:
        raise ValueError(f"unknown engine {engine!r}; known: {', '.join(engines.names())}")
    t0 = time.perf_counter()
    grid = grid if isinstance(grid, Grid) else load_grid(grid)
    kind = grid.kind_spec
    cells = grid.cells()
    _check_traces(store, grid, cells)
    existing = _existing_runs(store, kind.runs_table)
    swept = _swept_runs(store, grid.kind, kind.runs_table)
    sweep_id = new_sweep_id(grid)
    base = {"sweep_id": sweep_id, "kind": grid.kind, "grid_fingerprint": grid.fingerprint,
            "grid_json": grid.canonical_json()}

    def row(c: Any) -> dict[str, Any]:
        return {**base, "cell": c.index,
                "cell_json": cell_json(c.fields),
                "config_fingerprint": c.fingerprint}

    todo, skipped_rows = [], []
    for c in cells:
        run_id = existing.get(config_json(c.config)) or swept.get(c.fingerprint)
        if run_id is None:
            todo.append(c)
        else:
            skipped_rows.append({**row(c), "run_id": run_id, "status": "skipped",
                                 "error": None, "seconds": 0.0})
    if skipped_rows:
        store.write("sweeps", f"{sweep_id}.skipped", pa.Table.from_pylist(skipped_rows))
    ran = failed = 0
    if todo:
        opts: dict[str, Any] = {} if engine != "ray" else {"verbose": verbose} | (
            {} if connect_timeout_s is None else {"connect_timeout_s": connect_timeout_s})
        eng = engines.get(engine)(workers=workers, address=address, **opts)
        driver = driver_id()  # a worker whose driver died does not commit its cell
        tasks = [CellTask(str(store.root), grid.kind, c.config, row(c), eng.cell_threads,
                          driver) for c in todo]
        by_index = {c.index: c for c in todo}
        try:
            with _progress(len(cells), progress) as bar:
                bar.update(len(skipped_rows))
                for out in eng.run(tasks, store):
                    bar.update(1)
                    if out.status == "done":
                        ran += 1
                        continue
                    failed += 1
                    _record_failure(store, tasks, out)
                    if on_error == "raise":
                        eng.cancel()
                        shown = ", ".join(f"{k}={v!r}" for k, v in
                                          by_index[out.index].fields.items() if k in grid.axes)
                        raise SweepError(f"sweep {sweep_id}: cell {out.index} ({shown}) "
                                         f"failed: {out.error}")
        except KeyboardInterrupt:
            (getattr(eng, "abort", None) or eng.cancel)()
            raise SweepInterrupted(
                f"interrupted: sweep {sweep_id} stopped after {ran + failed} of {len(todo)} "
                f"cell(s) to run ({failed} failed); the store keeps every finished cell and "
                "the same command resumes with the rest") from None
        finally:
            eng.close()
    return SweepResult(sweep_id, len(cells), ran, len(skipped_rows), failed,
                       time.perf_counter() - t0)


def _record_failure(store: Store, tasks: list[CellTask], out: CellOutcome) -> None:
    task = next(t for t in tasks if t.index == out.index)
    r = {**task.row, "run_id": None, "status": "failed", "error": out.error,
         "seconds": out.seconds}
    store.write_row("sweeps", cell_key(r["sweep_id"], out.index), r, replace=True)
