"""Command line: a thin layer over the library. Every command has a library twin."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

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
from toolkit.commands.oneline import OneLineErrors
from toolkit.commands.output import PREFIX_TABLE, FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.replay.config import PrefixReplayConfig


class _Commands(dict):
    """The root's commands, each turned into a click command when first looked up.

    Typer converts a command by evaluating every annotation of its function, and the
    command modules import what their options list (hardware, models, policies): doing that
    for the whole tree took longer than the rest of start-up, while ``--version``,
    ``--help`` or ``toolkit sql`` need one command or none. The command modules are mounted
    when a name defined there is looked up, or the commands are listed.
    """

    def _build(self, name: str) -> Any:
        if not dict.__contains__(self, name):
            if name not in _DEFERRED or hasattr(_DEFERRED[name], "typer_instance"):
                _mount_once()  # a sub-app gets commands from the command modules too
            if name not in _DEFERRED:
                return None
            dict.__setitem__(self, name, _convert(_DEFERRED[name]))
        return dict.get(self, name)

    def __getitem__(self, name: str) -> Any:
        command = self._build(name)
        if command is None:
            raise KeyError(name)
        return command

    def get(self, name: str, default: Any = None) -> Any:
        command = self._build(name)
        return default if command is None else command

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        _mount_once()
        return iter(list(_DEFERRED))

    def __len__(self) -> int:
        return len(list(iter(self)))

    def keys(self) -> list[str]:  # type: ignore[override]
        return list(iter(self))

    def items(self) -> list[tuple[str, Any]]:  # type: ignore[override]
        return [(k, self[k]) for k in self]

    def values(self) -> list[Any]:  # type: ignore[override]
        return [self[k] for k in self]


def _convert(info: Any) -> Any:
    """A Typer command or sub-app -> its click object, as ``typer.main`` builds the tree."""
    import inspect

    from typer.models import CommandInfo

    fn = (typer.main.get_command_from_info if isinstance(info, CommandInfo)
          else typer.main.get_group_from_info)
    options = {"pretty_exceptions_short": app.pretty_exceptions_short,
               "rich_markup_mode": app.rich_markup_mode,
               "suggest_commands": getattr(app, "suggest_commands", True)}
    accepted = inspect.signature(fn).parameters  # the keywords vary across typer versions
    return fn(info, **{k: v for k, v in options.items() if k in accepted})


class _LazyRoot(OneLineErrors):
    """The root group: its commands are registered on ``app`` as usual, then handed over
    to :class:`_Commands` at the end of this module (``_defer_commands``); usage errors and
    Ctrl-C print one line (:class:`~toolkit.commands.oneline.OneLineErrors`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands()  # one per conversion: built commands are not shared


_DEFERRED: dict[str, Any] = {}

app = typer.Typer(
    cls=_LazyRoot,  # lazy commands; one-line usage errors and Ctrl-C (OneLineErrors)
    help="Trace-replay toolkit for KV-cache tiering in sparse-attention LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _IngestGroup(TyperGroup):
    """``toolkit ingest``: one command per registered reader, built when the group is used.

    Listing the readers imports each reader module (Arrow, the store); building their
    commands on first use keeps that out of every other command's start-up.
    """

    def _load_readers(self) -> None:
        if getattr(self, "_readers_loaded", False):
            return
        self._readers_loaded = True
        formats = typer.Typer()
        _register_ingest_commands(formats)
        for name, command in typer.main.get_group(formats).commands.items():
            self.commands.setdefault(name, command)

    def list_commands(self, ctx):
        self._load_readers()
        return super().list_commands(ctx)

    def get_command(self, ctx, cmd_name):
        self._load_readers()
        return super().get_command(ctx, cmd_name)


ingest_app = typer.Typer(help="Ingest a trace file into a store.", no_args_is_help=True,
                         cls=_IngestGroup)
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


def _make_ingest_command(formats: typer.Typer, fmt: str, description: str) -> None:
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
    formats.command(fmt)(command)


def _register_ingest_commands(formats: typer.Typer) -> None:
    from toolkit.commands import ingest
    from toolkit.commands.timelines import COMMANDS
    from toolkit.ingest import readers

    commands = {**COMMANDS, **ingest.COMMANDS}
    for fmt in readers.names():
        reader = readers.get(fmt)
        if fmt in commands:  # formats with options of their own
            formats.command(fmt)(commands[fmt])
        elif reader.table == "requests":
            _make_ingest_command(formats, fmt, reader.description)


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
        load_s, block_tokens = guard(_kernel_load_s, s, trace, policy)
        if len(caps) > 1:
            rows = guard(sweep_prefix, s, trace, caps, policy, workers=workers, progress=quiet)
        else:
            with status(f"replay prefix {trace}", quiet):
                rows = [guard(replay_prefix, s, PrefixReplayConfig(
                    trace, policy, caps[0] if caps else None))]
    if extra:  # the sizes as given, next to the blocks they became
        rows = [{**r, **e} for r, e in zip(rows, extra, strict=True)]
    if len(rows) == 1:
        out.emit(rows[0])
    else:
        out.emit([{**r, "capacity_tokens": r["capacity_blocks"] and block_tokens
                   and r["capacity_blocks"] * block_tokens} for r in rows]
                 if out.fmt == "table" else rows, PREFIX_TABLE)
    if out.fmt == "table" and out.path is None:
        typer.echo(f"(elapsed_s times each replay alone; loading the kernels took "
                   f"{load_s:.2f} s before them, compiling them on a first run)")


def _kernel_load_s(store, trace: str, policy: str) -> tuple[float, int | None]:
    """Seconds to load (or compile) the replay's kernels, kept out of every run's
    elapsed_s, and the trace's tokens per block."""
    from toolkit.policies import policies
    from toolkit.replay.prefix import load_kernels, load_stream

    stream = load_stream(store, trace)
    bt = stream.block_tokens
    return load_kernels(policies.get(policy), stream), int(bt.max()) if bt.size else None


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
    allow_write: Annotated[
        bool, typer.Option("--allow-write", help="Also run statements that write (COPY, "
                           "ATTACH, CREATE, SET, INSTALL/LOAD...) or touch files outside "
                           "the store; without it the SQL is read-only.")
    ] = False,
) -> None:
    """Run SQL, or a named query, against a store (views: requests, replay_runs, ...).
    Read-only unless --allow-write; --output FILE exports the rows."""
    import duckdb

    from toolkit.commands.queries import list_named, run_named
    from toolkit.store.readonly import WriteRefused

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
                df = s.query(query, allow_write=allow_write)
                if df.width == 0:  # a statement without a result (SET, CREATE, COPY)
                    return
        except WriteRefused as e:
            fail(str(e))
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
    from toolkit.commands.export import export_app  # issue 38

    app.add_typer(export_app, name="export")
    from toolkit.commands import sweep  # issue 12

    app.command("sweep")(sweep.sweep_cmd)
    app.add_typer(sweep.store_app, name="store")
    from toolkit.commands import plan  # issue 36

    app.add_typer(plan.plan_app, name="plan")
    from toolkit.commands import warmup

    app.command("warm-up")(warmup.warm_up_cmd)


def _defer_commands() -> None:
    """Move the root's commands and sub-apps into ``_DEFERRED`` (commands first, then
    sub-apps, the order typer lists them in): the root group built from ``app`` converts
    each on first use (see :class:`_Commands`)."""
    commands = [(info.name or typer.main.get_command_name(info.callback.__name__), info)
                for info in app.registered_commands]
    groups = [(info.name, info) for info in app.registered_groups]
    app.registered_commands = []
    app.registered_groups = []
    merged = {**{k: v for k, v in _DEFERRED.items() if not hasattr(v, "typer_instance")},
              **dict(commands),
              **{k: v for k, v in _DEFERRED.items() if hasattr(v, "typer_instance")},
              **dict(groups)}
    _DEFERRED.clear()
    _DEFERRED.update(merged)


_mounted = False


def _mount_once() -> None:
    global _mounted
    if not _mounted:
        _mounted = True
        _mount_commands()
        _defer_commands()


_defer_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
