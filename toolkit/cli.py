"""Command line: a thin layer over the library. Every command has a library twin."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import (
    MAX_GB,
    StoreOpt,
    check_workers,
    choices,
    cli_store,
    fail,
    field_default,
    guard,
)
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.replay.config import PrefixReplayConfig

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


def _version(show: bool) -> None:
    if show:
        from toolkit.version import __version__

        typer.echo(f"toolkit {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version and exit.")]
    = False,
) -> None:
    """Trace-replay toolkit for KV-cache tiering in sparse-attention LLM serving."""
    from toolkit.runtime import keep_freed_memory

    keep_freed_memory()  # process-wide, so the command applies it and ``import toolkit`` not


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
        from toolkit.commands.timelines import run_ingest

        run_ingest(fmt, path, store, name, replace)

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


def _int_list(values: list[str] | None, what: str) -> list[int]:
    """``--opt 1000,10000 --opt 30000`` -> [1000, 10000, 30000]."""
    out = []
    for text in values or []:
        for item in text.split(","):
            try:
                out.append(int(item.strip().replace("_", "")))
            except ValueError:
                fail(f"{what}: {item.strip()!r} is not an integer (give e.g. 1000,10000)")
    return out


def _float_list(values: list[str] | None, what: str) -> list[float]:
    out = []
    for text in values or []:
        for item in text.split(","):
            try:
                out.append(float(item.strip()))
            except ValueError:
                fail(f"{what}: {item.strip()!r} is not a number (give e.g. 0.5,2,8)")
    return out


def _gb_to_blocks(store, trace: str, model: str, sizes_gb: list[float]) -> list[int]:
    """Cache sizes in GB -> blocks of the trace, at the model's KV bytes per token (MLA rows
    and indexer keys, FP8)."""
    from toolkit.models import get_model
    from toolkit.serving.tier_service import kv_bytes_per_token

    if not sizes_gb:
        return []
    kvb = kv_bytes_per_token(guard(get_model, model))
    if trace not in store.keys("requests"):
        return [0 for _ in sizes_gb]  # the replay names the unknown trace
    bt = store.query("SELECT max(block_tokens) FROM requests WHERE trace = $t",
                     {"t": trace}).item()
    if not bt:
        fail(f"trace {trace!r} has no prefix blocks (block_tokens is null); --capacity-gb "
             "needs a timeline with hashes")
    return [int(gb * 1e9 // (kvb * bt)) for gb in sizes_gb]


@replay_app.command("prefix")
def replay_prefix_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Name of a request timeline.")],
    policy: Annotated[str, typer.Option("--policy", help=f"Cache policy: {choices('policy')}.")]
    = field_default(PrefixReplayConfig, "policy"),
    capacity_blocks: Annotated[
        list[str] | None,
        typer.Option("--capacity-blocks", help="Cache size in blocks; omit for unbounded; "
                     "several sizes (1000,10000,30000 or repeated) replay in one call on "
                     "--workers threads."),
    ] = None,
    capacity_gb: Annotated[
        list[str] | None,
        typer.Option("--capacity-gb", help="Cache size in GB (1e9 B) of the --model's KV "
                     "(MLA rows + indexer keys, FP8); comma-separated or repeated."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help=f"Model for --capacity-gb: {choices('model')}.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(
            "--workers", min=0, callback=check_workers, help="Threads for a sweep (default: all "
                                 "cores); results do not depend on it.")
    ] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Replay a request timeline's prefix blocks through one cache (docs/prefix.md:
    exact semantics)."""
    from toolkit.replay.prefix import replay_prefix, sweep_prefix
    from toolkit.runtime.progress import compile_notice, status

    out = Output.from_options(fmt, as_json, output)
    blocks = _int_list(capacity_blocks, "--capacity-blocks")
    sizes_gb = _float_list(capacity_gb, "--capacity-gb")
    if any(c < 0 for c in blocks) or any(g < 0 for g in sizes_gb):
        fail("--capacity-blocks and --capacity-gb must be >= 0")
    if any(c >= 1 << 62 for c in blocks) or any(g > MAX_GB for g in sizes_gb):
        fail(f"--capacity-blocks must be < 2^62 and --capacity-gb <= {MAX_GB:.0e}")
    if sizes_gb and model is None:
        fail("--capacity-gb needs --model (bytes per token), e.g. --model glm-5.2")
    if model is not None and not sizes_gb:
        fail("--model applies to --capacity-gb only")
    quiet = False if out.quiet else None
    with cli_store(store) as s, compile_notice(quiet):
        caps: list[int | None] = [*blocks, *_gb_to_blocks(s, trace, model, sizes_gb)]
        extra = [{}] * len(blocks) + [{"capacity_gb": g, "model": model} for g in sizes_gb]
        for c in caps:
            guard(PrefixReplayConfig, trace, policy, c)
        if len(caps) > 1:
            rows = guard(sweep_prefix, s, trace, caps, policy, workers=workers, progress=quiet)
        else:
            with status(f"replay prefix {trace}", quiet):
                rows = [guard(replay_prefix, s, PrefixReplayConfig(
                    trace, policy, caps[0] if caps else None))]
    if extra:  # the sizes as given, next to the blocks they became
        rows = [{**r, **e} for r, e in zip(rows, extra, strict=True)]
    out.emit(rows[0] if len(rows) == 1 else rows)


@app.command("sql")
def sql_cmd(
    query: Annotated[str | None, typer.Argument(
        help="DuckDB SQL over the store's views; - reads it from standard input.")] = None,
    store: Annotated[Path | None, typer.Option("--store", help="Store directory.")] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
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

    from toolkit.commands.queries import list_named, run_named

    if list_queries:
        typer.echo(list_named())
        return
    out = Output.from_options(fmt, as_json, output)
    if store is None:
        fail("--store DIR is required")
    if query == "-":
        query = sys.stdin.read()
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
    out.emit(df)


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
def info_cmd(store: StoreOpt, fmt: FormatOpt = None, as_json: JsonOpt = False,
             output: OutputOpt = None) -> None:
    """List a store's tables: keys (traces or runs) and rows in each."""
    out = Output.from_options(fmt, as_json, output)
    with cli_store(store) as s:
        rows = []
        for t in s.tables():
            keys = s.keys(t)
            n = s.query(f'SELECT count(*) FROM "{t}"').item() if keys else 0  # a fixed table name
            rows.append({"table": t, "keys": len(keys), "rows": n,
                         "names": ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "")})
    if out.fmt == "table" and out.path is None:
        for r in rows:
            typer.echo(f"{r['table']}: {r['keys']} key(s), {r['rows']:,} row(s)"
                       + (f": {r['names']}" if r["names"] else ""))
        return
    out.emit(rows)


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
    from toolkit.runtime.progress import compile_notice, status

    with compile_notice(), status("demo (ingest, replays, pricing, charts)") as st:
        guard(run_demo, store, report, traces, echo=st.write)


def _mount_commands() -> None:
    from toolkit.commands import cost, engram, models, selections, serving, synth, tiers

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
    app.add_typer(models.models_app, name="models")
    app.add_typer(cost.cost_app, name="cost")
    app.add_typer(serving.serving_app, name="serving")
    app.command("cost-at-interactivity")(cost.cost_at_interactivity_cmd)
    from toolkit.commands import sweep  # issue 12

    app.command("sweep")(sweep.sweep_cmd)
    app.add_typer(sweep.store_app, name="store")


_mount_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
