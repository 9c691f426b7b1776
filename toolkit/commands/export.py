"""CLI: ``toolkit export perfetto`` (a tier replay's timeline) and ``toolkit export store``
(every table as Parquet); mounted by cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import StoreOpt, cli_store, fail, guard

export_app = typer.Typer(help="Export a run's timeline (Perfetto) or a whole store (Parquet).",
                         no_args_is_help=True)


@export_app.command("perfetto")
def export_perfetto_cmd(
    store: StoreOpt,
    run: Annotated[str, typer.Option("--run", help="run_id of a tier replay (tier_runs) or a "
                                     "cluster replay (cluster_runs: one process per instance), "
                                     "or a plan's PLAN_ID or PLAN_ID/RANK (plan_runs): the tier "
                                     "replay that plan was evaluated by.")],
    out: Annotated[Path, typer.Option("--out", help="Trace-event JSON file (.json, or "
                                      ".json.gz) for ui.perfetto.dev / chrome://tracing.")],
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite an existing "
                                          "file.")] = False,
) -> None:
    """A tier replay's per-request timeline as Chrome trace-event JSON: tracks for the GPU's
    prefill lane, host and storage tier loads; queue, prefill-wait and decode slices per
    request; counters of running and waiting requests and host tier use (docs/formats.md)."""
    with cli_store(store) as s:  # the id first: a typo costs no exporter start-up
        runs = [*s.keys("tier_runs"), *s.keys("cluster_runs")]
        if run not in runs and run.partition("/")[0] not in s.keys("plan_runs"):
            shown = ", ".join(runs[:8]) + (", ..." if len(runs) > 8 else "") or "none"
            fail(f"--run: no tier replay {run!r} in store {s.root}, nor a cluster replay or "
                 f"plan of that id (tables tier_runs, cluster_runs, plan_runs); runs: {shown}"
                 " (`toolkit replay tiers` makes one; a plan's timeline: --run "
                 "PLAN_ID[/RANK])")
        from toolkit.export import write_perfetto

        res = guard(write_perfetto, s, run, out, replace=replace)
    slices = ", ".join(f"{n:,} {k}" for k, n in res["slices"].items())
    typer.echo(f"wrote {res['events']:,} events ({slices}) of {run} to {res['path']}")


@export_app.command("store")
def export_store_cmd(
    store: StoreOpt,
    out: Annotated[Path, typer.Option("--out", help="Directory to write (<table>.parquet "
                                      "and README.md).")],
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite an earlier export "
                                          "(a directory of .parquet files and README.md "
                                          "only).")] = False,
) -> None:
    """Every table of a store as one Parquet file each, with a README.md of the schemas
    (types, units, meanings), for anyone with only DuckDB."""
    from toolkit.export import export_store

    with cli_store(store) as s:
        res = guard(export_store, s, out, replace=replace)
    typer.echo(f"wrote {res['tables']} tables ({res['rows']:,} rows) and README.md to "
               f"{res['path']}")
