"""CLI: ``toolkit sweep`` and ``toolkit store compact|check|repair``; thin layers over
:func:`toolkit.sweep.run` and :meth:`toolkit.store.Store.compact`, ``check`` and
``repair``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import (
    StoreOpt,
    check_names,
    check_workers,
    cli_store,
    fail,
    guard,
)
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

store_app = typer.Typer(help="Store maintenance.", no_args_is_help=True)

#: The table each sweep kind's traces live in: ``toolkit.sweep.kinds``' ``trace_table``,
#: repeated here (``tests/test_errors_early.py`` keeps the two equal) so that a mistyped
#: name in a grid costs no import of the replays and the serving model.
GRID_TRACE_TABLES = {"selections": "selections", "prefix": "requests", "tiers": "requests",
                     "plan": "requests"}


def _grid_names(grid: Path, store: Path) -> None:
    """The accelerator, model and trace names a grid file gives (top level, ``[fixed]``,
    ``[axes]``), checked against the spec registries and the store before the sweep
    package loads; whatever else is wrong with the file :func:`toolkit.sweep.load_grid`
    words (this check skips what it cannot read)."""
    import tomllib

    from toolkit.runtime.files import file_problem

    if file_problem(grid) is not None:  # /dev/zero, a FIFO, a directory: load_grid words it
        return
    try:
        doc = tomllib.loads(grid.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return
    fixed, axes = (doc.get(k) if isinstance(doc.get(k), dict) else {} for k in ("fixed", "axes"))

    def names(key: str, *extra: object) -> list[str]:
        out: list[str] = []
        for v in (doc.get(key), fixed.get(key), axes.get(key), *extra):
            for x in v if isinstance(v, list) else [v]:
                out += [y for y in (x if isinstance(x, list) else [x]) if isinstance(y, str)]
        return out

    check_names(hardware=names("hardware"), model=None, flags=(f"{grid}: hardware", ""))
    for m in dict.fromkeys(names("model")):
        check_names(model=m, flags=("", f"{grid}: model"))
    table = GRID_TRACE_TABLES.get(doc.get("kind"))
    traces = names("trace", doc.get("traces"))
    if table and traces and store.is_dir() and any(store.iterdir()):
        with cli_store(store) as s:
            keys = s.keys(table)
            for t in dict.fromkeys(traces):
                if t not in keys:
                    shown = ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "") or "none"
                    fail(f"{grid}: trace {t!r} is not in store {s.root} (table {table}); "
                         f"known: {shown}")


def sweep_cmd(
    store: StoreOpt,
    grid: Annotated[Path, typer.Option("--grid", help="TOML grid file (docs/sweep.md).")],
    engine: Annotated[str, typer.Option("--engine", help="local (process pool) or ray.")]
    = "local",
    workers: Annotated[
        int | None, typer.Option(
            "--workers", min=0, callback=check_workers, help="Local processes or local-Ray CPUs "
                                 "(default: all cores); 1 runs cells in this process.")
    ] = None,
    address: Annotated[
        str | None, typer.Option("--address", help="Ray cluster address (ray start --head "
                                 "prints it); default: a local Ray for this run.")
    ] = None,
    on_error: Annotated[
        str, typer.Option("--on-error", help="raise (stop at the first failed cell) or "
                          "record (record it, run the rest).")
    ] = "raise",
    connect_timeout_s: Annotated[
        float | None, typer.Option("--connect-timeout-s", min=0.001, max=86_400.0,
                                   help="Give up on an unreachable --address after this "
                                   "many seconds (default: the engine's, 30 s).")
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show Ray's own log lines.")
    ] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Run every cell of a grid not already in the store (resumable; exit 1 if a cell
    failed). Shows a cell counter on a terminal (never with --json)."""
    _grid_names(grid, store)  # names first: the sweep package loads the replays (~1 s)
    from toolkit.sweep import SweepError, SweepInterrupted, load_grid, run
    from toolkit.sweep.engines import CONNECT_TIMEOUT_S

    if connect_timeout_s is None:  # the engines' default, read once they are imported
        connect_timeout_s = CONNECT_TIMEOUT_S

    out = Output.from_options(fmt, as_json, output)
    if on_error not in ("raise", "record"):
        fail(f"--on-error must be raise or record, got {on_error!r}")
    if engine not in ("local", "ray"):
        fail(f"--engine must be local or ray, got {engine!r}")
    if address and engine != "ray":
        fail("--address applies to --engine ray")
    g = guard(load_grid, grid)
    with cli_store(store) as s:
        try:
            res = run(s, g, engine=engine, workers=workers, address=address,
                      on_error=on_error, progress=False if out.quiet else None,
                      connect_timeout_s=connect_timeout_s, verbose=verbose)
        except SweepError as e:
            fail(str(e), code=1)
        except SweepInterrupted as e:  # Ctrl-C: one line, exit 130 as a shell reports it
            from toolkit.commands.oneline import interrupted_reported

            typer.echo(str(e), err=True)
            interrupted_reported()
            raise typer.Exit(130) from None
        except (ToolkitError, RegistryError, ValueError) as e:  # nothing ran
            fail(str(e))
    if out.fmt == "table" and out.path is None:
        typer.echo(f"sweep {res.sweep_id}: {res.cells} cells, {res.ran} ran, {res.skipped} "
                   f"skipped, {res.failed} failed in {res.elapsed_s:.1f} s")
    else:  # --json prints exactly the summary object
        out.emit(res.as_json())
    if res.failed:
        raise typer.Exit(1)


@store_app.command("compact")
def compact_cmd(
    store: StoreOpt,
    table: Annotated[
        list[str] | None, typer.Option("--table", help="Table to compact (repeatable); "
                                       "default: every run/result table.")
    ] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Merge small per-run files into one partitioned dataset per table (queries return
    the same rows; keys stay readable and replaceable)."""
    out = Output.from_options(fmt, as_json, output)
    with cli_store(store) as s:
        res = guard(s.compact, table)
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps(res))  # {table: files merged}
    elif out.fmt == "table" and out.path is None:
        for t, n in res.items():
            typer.echo(f"{t}: merged {n} file(s)")
    else:
        out.emit([{"table": t, "files_merged": n} for t, n in res.items()])


@store_app.command("check")
def check_cmd(
    store: StoreOpt,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Report what in the store cannot be read, one line per file (exit 1 if anything;
    changes nothing). toolkit store repair fixes it."""
    out = Output.from_options(fmt, as_json, output)
    with cli_store(store) as s:
        found = guard(s.check)
    _report(out, found, "ok: nothing damaged", "problem")
    if found:
        if out.fmt == "table" and out.path is None:  # stderr: stdout is one line a file
            typer.echo(f"to recover: toolkit store repair --store {store} (moves damaged and "
                       "foreign files to .damaged/, never deletes; rewrites the catalog)",
                       err=True)
        raise typer.Exit(1)


@store_app.command("repair")
def repair_cmd(
    store: StoreOpt,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be done; "
                                          "change nothing.")] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Fix what toolkit store check reports: damaged files are moved to .damaged/ (never
    deleted), a damaged manifest is rebuilt from its parts, lost runs are dropped from it
    (a sweep makes them again). One line per file."""
    out = Output.from_options(fmt, as_json, output)
    with cli_store(store) as s:
        found = guard(s.repair, dry_run=dry_run)
    _report(out, found, "ok: nothing to repair", "would fix" if dry_run else "fixed")


def _report(out: Output, found: list, none: str, verb: str) -> None:
    if out.fmt == "table" and out.path is None:
        for f in found:
            typer.echo(f"{f}" if verb == "problem" else f"{verb}: {f}; {f.fix}")
        if not found:
            typer.echo(none)
        return
    out.emit([{"path": str(f.path), "problem": f.problem, "fix": f.fix} for f in found])
