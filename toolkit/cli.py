"""Command line: a thin layer over the library. Every command has a library twin."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import StoreOpt, cli_store, fail, guard, print_record

app = typer.Typer(
    help="Trace-replay toolkit for KV-cache tiering in sparse-attention LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
ingest_app = typer.Typer(help="Ingest a trace file into a store.", no_args_is_help=True)
replay_app = typer.Typer(help="Replay a stored trace through a cache.", no_args_is_help=True)
synth_app = typer.Typer(help="Generate labelled-SYNTHETIC traces.", no_args_is_help=True)
app.add_typer(ingest_app, name="ingest")
app.add_typer(replay_app, name="replay")
app.add_typer(synth_app, name="synth")


def _make_ingest_command(fmt: str, description: str) -> None:
    def command(
        path: Annotated[Path, typer.Argument(help="Trace file to read.")],
        store: StoreOpt,
        name: Annotated[
            str | None, typer.Option("--name", help="Trace name; defaults to the file stem.")
        ] = None,
        replace: Annotated[
            bool, typer.Option("--replace", help="Overwrite a trace of the same name.")
        ] = False,
    ) -> None:
        with cli_store(store, create=True) as s:
            res = guard(s.ingest, fmt, path, name, replace=replace)
        for n in res.notes:
            typer.echo(f"note: {n}", err=True)
        typer.echo(
            f"ingested {res.rows:,} rows from {path} as {res.table}/{res.trace} "
            f"in {res.elapsed_s:.2f} s"
        )

    command.__doc__ = f"{description}."
    ingest_app.command(fmt)(command)


def _register_ingest_commands() -> None:
    from toolkit.commands.timelines import COMMANDS
    from toolkit.ingest import readers

    for fmt in readers.names():
        reader = readers.get(fmt)
        if fmt in COMMANDS:  # formats with options of their own
            ingest_app.command(fmt)(COMMANDS[fmt])
        elif reader.table == "requests":
            _make_ingest_command(fmt, reader.description)


_register_ingest_commands()


@replay_app.command("prefix")
def replay_prefix_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Name of a request timeline.")],
    policy: Annotated[str, typer.Option("--policy", help="Cache policy.")] = "lru",
    capacity_blocks: Annotated[
        list[int] | None,
        typer.Option("--capacity-blocks", min=0, help="Cache size in blocks; omit for "
                     "unbounded; repeat for a sweep (replayed on --workers threads)."),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", min=0, help="Threads for a sweep (default: all "
                                 "cores); results do not depend on it.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay a request timeline's prefix blocks through one cache (see README: semantics)."""
    from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix, sweep_prefix

    with cli_store(store) as s:
        if capacity_blocks is not None and len(capacity_blocks) > 1:
            for c in capacity_blocks:
                guard(PrefixReplayConfig, trace, policy, c)
            rows = guard(sweep_prefix, s, trace, list(capacity_blocks), policy,
                         workers=workers)
            for row in rows:
                print_record(row, as_json)
            return
        cap = capacity_blocks[0] if capacity_blocks else None
        cfg = guard(PrefixReplayConfig, trace, policy, cap)
        row = guard(replay_prefix, s, cfg)
    print_record(row, as_json)


@app.command("sql")
def sql_cmd(
    query: Annotated[
        str | None, typer.Argument(help="DuckDB SQL over the store's views.")
    ] = None,
    store: Annotated[Path | None, typer.Option("--store", help="Store directory.")] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="Output format: table, csv or json.")
    ] = "table",
    named: Annotated[
        str | None, typer.Option("--query", help="Run a named query (see --list-queries).")
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", help="k=v parameter of --query; repeat.")
    ] = None,
    list_queries: Annotated[
        bool, typer.Option("--list-queries", help="List the named queries and exit.")
    ] = False,
) -> None:
    """Run SQL, or a named query, against a store (views: requests, replay_runs, ...)."""
    import duckdb
    import polars as pl

    from toolkit.commands.queries import list_named, run_named

    if list_queries:
        typer.echo(list_named())
        return
    if store is None:
        fail("--store DIR is required")
    if fmt not in ("table", "csv", "json"):
        fail(f"--format must be table, csv or json, got {fmt!r}")
    if named is None and not (query or "").strip():
        fail("empty query; give a SQL statement, e.g. \"SELECT * FROM requests LIMIT 5\", "
             "or --query NAME")
    with cli_store(store) as s:
        try:
            if named is not None:
                df = run_named(s, named, param or [])
            else:
                rel = s.con.sql(query)
                if rel is None:  # a statement without a result (SET, CREATE on the session)
                    return
                df = rel.pl()
        except duckdb.Error as e:
            fail(str(e).splitlines()[0], code=1)
    if fmt == "csv":
        nested = [c for c, t in df.schema.items() if t.is_nested()]
        if nested:
            fail(f"column(s) {', '.join(nested)} are nested (lists or structs), which CSV "
                 "cannot hold; use --format json or table, or select scalar columns")
        sys.stdout.write(df.write_csv())
    elif fmt == "json":
        sys.stdout.write(json.dumps(df.to_dicts(), default=str) + "\n")
    else:
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=80):
            typer.echo(str(df))


@app.command("report")
def report_cmd(
    store: StoreOpt,
    out: Annotated[Path, typer.Option("--out", help="Report directory (index.html, SVG, PNG).")],
    title: Annotated[str, typer.Option("--title", help="Report title.")] = (
        "KV-cache tiering report"),
) -> None:
    """Write a self-contained HTML report of a store plus SVG and PNG of every chart."""
    from toolkit.report import write_report

    with cli_store(store) as s:
        path = guard(write_report, s, out, title)
    typer.echo(f"report: {path}")


@app.command("info")
def info_cmd(store: StoreOpt) -> None:
    """List a store's tables and what each holds."""
    with cli_store(store) as s:
        for t in s.tables():
            keys = s.keys(t)
            typer.echo(f"{t}: {len(keys)} key(s)" + (f": {', '.join(keys[:20])}" if keys else ""))


@app.command("demo")
def demo_cmd(
    store: Annotated[Path, typer.Option("--store")] = Path("build/store"),
    report: Annotated[Path, typer.Option("--report", help="Report directory.")] = Path(
        "build/report"
    ),
    traces: Annotated[Path, typer.Option("--traces", help="Bundled traces directory.")] = Path(
        "traces"
    ),
) -> None:
    """The main job on the bundled real traces: ingest, replay (prefix, tiers, HiSparse),
    price on GB200/GB300/MI355X, print summaries, write charts to the report directory."""
    from toolkit.demo import run_demo

    guard(run_demo, store, report, traces, echo=typer.echo)


def _mount_commands() -> None:
    from toolkit.commands import cost, engram, selections, serving, synth, tiers

    ingest_app.command("selections")(selections.ingest_selections_cmd)
    replay_app.command("selections")(selections.replay_selections_cmd)
    replay_app.command("mrc")(selections.replay_mrc_cmd)
    replay_app.command("tiers")(tiers.tiers_cmd)
    record_app = typer.Typer(cls=engram.DefaultSelectionsGroup, no_args_is_help=True,
                             help="Record traces: selections (default) or engram lookups.")
    record_app.command("selections")(selections.record_cmd)
    record_app.command("engram")(engram.record_engram_cmd)
    app.add_typer(record_app, name="record")
    replay_app.command("engram")(engram.replay_engram_cmd)
    synth_app.command("selections")(synth.synth_selections_cmd)
    synth_app.command("agentic")(synth.synth_agentic_cmd)
    app.add_typer(cost.hardware_app, name="hardware")
    app.add_typer(cost.cost_app, name="cost")
    app.add_typer(serving.serving_app, name="serving")
    app.command("cost-at-interactivity")(cost.cost_at_interactivity_cmd)


_mount_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
