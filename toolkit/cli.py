"""Command line: a thin layer over the library. Every command has a library twin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from toolkit.commands.common import (
    MAX_GB,
    StoreOpt,
    check_names,
    check_trace_param,
    check_workers,
    choices,
    cli_store,
    fail,
    field_default,
    guard,
    require_key,
)
from toolkit.commands.oneline import OneLineErrors
from toolkit.commands.output import PREFIX_TABLE, FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.replay.config import PrefixReplayConfig


class _Commands(dict):
    """A group's commands, each turned into a click command when first looked up.

    Typer converts a command by evaluating every annotation of its function, and the
    command modules import what their options list (hardware, models, policies): doing that
    for the whole tree took longer than the rest of start-up, while ``--version``,
    ``--help`` or ``toolkit sql`` need one command or none. A command module (:data:`LAZY`)
    is imported when a name defined there is looked up, or the commands are listed.

    ``build(name)``: the click command, or None for an unknown name; ``names()``: every
    name, in listing order; ``built``: commands already converted.
    """

    def __init__(self, build: Callable[[str], Any], names: Callable[[], list[str]],
                 built: dict[str, Any] | None = None) -> None:
        super().__init__(built or {})
        self._make, self._names = build, names

    def _build(self, name: str) -> Any:
        if not dict.__contains__(self, name):
            command = self._make(name)
            if command is None:
                return None
            dict.__setitem__(self, name, command)
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
        return iter(self._names())

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
    return _bound_ints(fn(info, **{k: v for k, v in options.items() if k in accepted}))


def _bound_ints(command: Any) -> Any:
    """Refuse, naming the flag, an integer option beyond 2^53 (``MAX_INT``) in ``command``
    and the subcommands built with it: ``--device-tokens 9223372036854775807`` ended in an
    OverflowError traceback deep in a kernel. Seeds are left alone (any integer seeds)."""
    from toolkit.config import MAX_INT

    for sub in dict.values(getattr(command, "commands", None) or {}):
        _bound_ints(sub)
    cb = getattr(command, "callback", None)
    flags = {p.name: (p.opts[0] if p.opts else p.name) for p in getattr(command, "params", [])
             if "seed" not in (p.name or "")}  # values are checked: only ints can be refused
    if cb is None or not flags or getattr(cb, "_bounded", False):
        return command

    def bounded(*args: Any, **kwargs: Any) -> Any:
        for name, flag in flags.items():
            v = kwargs.get(name)
            for x in v if isinstance(v, list | tuple) else [v]:
                if isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_INT:
                    fail(f"{flag} {x}: too large; at most 2^53 ({MAX_INT:,})")
        return cb(*args, **kwargs)

    bounded._bounded = True  # type: ignore[attr-defined]
    command.callback = bounded
    return command


def _load(where: tuple[str, str] | Callable[[], Any]) -> Any:
    """A :data:`LAZY` entry -> its command function or Typer sub-app (imports its module)."""
    if callable(where):
        return where()
    import importlib

    module, attr = where
    return getattr(importlib.import_module(f"toolkit.commands.{module}"), attr)


def _info(name: str, obj: Any) -> Any:
    """A command function or Typer sub-app -> the Typer info :func:`_convert` takes."""
    holder = typer.Typer()
    if isinstance(obj, typer.Typer):
        holder.add_typer(obj, name=name)
        return holder.registered_groups[0]
    holder.command(name)(obj)
    return holder.registered_commands[0]


_ROOT_INFOS: dict[str, Any] = {}


def _root_info(name: str) -> Any:
    """The Typer info of root command ``name`` (defined here or in :data:`LAZY`), or None."""
    if name in _DEFERRED:
        return _DEFERRED[name]
    if name not in LAZY[""]:
        return None
    if name not in _ROOT_INFOS:
        _ROOT_INFOS[name] = _info(name, _load(LAZY[""][name]))
    return _ROOT_INFOS[name]


class _LazyGroup(TyperGroup):
    """A sub-app whose commands from ``toolkit/commands/*.py`` (:data:`LAZY` under the
    group's name) are imported when looked up or listed: ``toolkit replay selections``
    imports the selections commands, not the tier or Engram ones. Listed after the
    group's own commands (before them with ``lazy_first``)."""

    lazy_first = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self._build, self._names, self.commands)

    def _lazy(self) -> dict[str, Any]:
        return LAZY.get(self.name or "", {})

    def _build(self, name: str) -> Any:
        if name not in self._lazy():
            return None
        return _convert(_info(name, _load(self._lazy()[name])))

    def _names(self) -> list[str]:
        own = [n for n in dict.keys(self.commands) if n not in self._lazy()]
        lazy = list(self._lazy())
        return lazy + own if self.lazy_first else own + lazy


def _build_root(name: str) -> Any:
    info = _root_info(name)
    return None if info is None else _convert(info)


def _root_names() -> list[str]:
    """Root commands in :data:`ROOT_HELP`'s order (any missing from it last)."""
    known = [*_DEFERRED, *LAZY[""]]
    return [n for n in ROOT_HELP if n in known] + [n for n in known if n not in ROOT_HELP]


class _LazyRoot(OneLineErrors):
    """The root group: its commands are registered on ``app`` as usual, then handed over
    to :class:`_Commands` at the end of this module (``_defer_commands``); usage errors and
    Ctrl-C print one line (:class:`~toolkit.commands.oneline.OneLineErrors`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # one per conversion: built commands are not shared
        self.commands = _Commands(_build_root, _root_names)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """``toolkit --help``: the command list from :data:`ROOT_HELP`, not from the
        command modules (importing them all to read one line each took ~1-4 s)."""
        from typer.core import TyperCommand

        commands = self.commands
        self.commands = {name: TyperCommand(name=name, help=text)  # type: ignore[assignment]
                         for name, text in ROOT_HELP.items()}
        try:
            super().format_help(ctx, formatter)
        finally:
            self.commands = commands


_DEFERRED: dict[str, Any] = {}

ROOT_HELP: dict[str, str] = {
    "sql": "Run SQL, or a named query, against a store (views: requests, replay_runs, ...).\n"
           "Read-only unless --allow-write; --output FILE exports the rows.",
    "report": "Write a self-contained HTML report of a store plus SVG and PNG of every "
              "chart.",
    "info": "List a store's tables: keys (traces or runs) and rows in each.",
    "demo": "The main job on the bundled real traces: ingest, replay (prefix, tiers, "
            "HiSparse),\nprice on GB200/GB300/MI355X, print summaries, write charts to the "
            "report directory.",
    "cost-at-interactivity": "$/M tokens per (hardware, engine, model, precision, ISL, OSL) "
                             "at a target\ninteractivity: Steffen spline on each series' "
                             "throughput-vs-interactivity Pareto front,\nas InferenceX does.",
    "sweep": "Run every cell of a grid not already in the store (resumable; exit 1 if a "
             "cell\nfailed). Shows a cell counter on a terminal (never with --json).",
    "warm-up": "Compile every kernel the commands use, once (make setup runs it); later "
               "commands\nload them from numba's cache.",
    "ingest": "Ingest a trace file into a store.",
    "replay": "Replay a stored trace through a cache.",
    "synth": "Generate labelled-SYNTHETIC traces.",
    "record": "Record traces: selections (default) or engram lookups.",
    "hardware": "Accelerator specs with provenance.",
    "models": "Model specs (geometry for row bytes, IndexShare, weights) with the source of "
              "every value.",
    "cost": "$ per million tokens: at a given throughput (no subcommand), or `compare` "
            "accelerators from the serving model.",
    "serving": "Serving-performance model: fit efficiencies to measured points, predict TPOT "
               "/ TTFT / throughput per GPU for configurations, cross-validate.",
    "export": "Export a run's timeline (Perfetto) or a whole store (Parquet).",
    "store": "Store maintenance.",
    "plan": "Capacity plan: accelerator, layout, concurrency, HBM split, host DRAM and SSD at "
            "the lowest $/M total tokens within the targets (`explain` says why).",
}
"""Every root command and sub-app in the order ``toolkit --help`` lists them, with the
help text it shows there (the command's docstring, or the sub-app's ``help``). The listing
is drawn from this table so that it imports no command module. A new root command is
registered twice: in :func:`_mount_commands` (or with ``@app.command`` in this module) and
here; ``tests/test_startup.py`` fails, printing the entry to add, when the two differ."""

app = typer.Typer(
    cls=_LazyRoot,  # lazy commands; one-line usage errors and Ctrl-C (OneLineErrors)
    help="Trace-replay toolkit for KV-cache tiering in sparse-attention LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _IngestGroup(_LazyGroup):
    """``toolkit ingest``: one command per registered reader, built when the group is used.

    Listing the readers imports each reader module (Arrow, the store); building their
    commands on first use keeps that out of every other command's start-up.
    """

    lazy_first = True

    def _load_readers(self) -> None:
        if getattr(self, "_readers_loaded", False):
            return
        self._readers_loaded = True
        formats = typer.Typer()
        _register_ingest_commands(formats)
        for name, command in typer.main.get_group(formats).commands.items():
            self.commands.setdefault(name, _bound_ints(command))

    def list_commands(self, ctx):
        self._load_readers()
        return super().list_commands(ctx)

    def get_command(self, ctx, cmd_name):
        self._load_readers()
        return super().get_command(ctx, cmd_name)


ingest_app = typer.Typer(help="Ingest a trace file into a store.", no_args_is_help=True,
                         cls=_IngestGroup)
replay_app = typer.Typer(help="Replay a stored trace through a cache.", no_args_is_help=True,
                         cls=_LazyGroup)
synth_app = typer.Typer(help="Generate labelled-SYNTHETIC traces.", no_args_is_help=True,
                        cls=_LazyGroup)
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
    check_names(model=model)
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
        require_key(s, "requests", trace)  # before the replay's kernels and libraries load
        from toolkit.replay.prefix import replay_prefix, sweep_prefix

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


#: Rows ``toolkit sql`` shows by default, as DuckDB's shell (its ``.maxrows`` is 40).
SQL_ROWS = 40


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
        bool, typer.Option("--list-queries", help="List the named queries, one line each, "
                           "and exit; with --query NAME, describe that one.")
    ] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=0, help="Rows a table or markdown listing shows "
                          "(0: all); csv, json and --output keep every row.")
    ] = SQL_ROWS,
    allow_write: Annotated[
        bool, typer.Option("--allow-write", help="Also run statements that write (COPY, "
                           "ATTACH, CREATE, SET, INSTALL/LOAD...) or touch files outside "
                           "the store; without it the SQL is read-only.")
    ] = False,
) -> None:
    """Run SQL, or a named query, against a store (views: requests, replay_runs, ...).
    Read-only unless --allow-write; --output FILE exports the rows."""
    import duckdb

    from toolkit.store.readonly import WriteRefused

    if list_queries:
        from toolkit.commands.queries import list_named

        typer.echo(list_named(named))
        return
    out = Output.from_options(fmt, as_json, output)
    if store is None:
        fail("--store DIR is required")
    if query == "-":
        from toolkit.runtime.files import read_stdin_text

        query = guard(read_stdin_text)  # a bounded read: never /dev/zero
    if named is None and not (query or "").strip():
        fail("empty query; give a SQL statement, e.g. \"SELECT * FROM requests LIMIT 5\", "
             "or --query NAME")
    with cli_store(store) as s:
        try:
            if named is not None:  # the named queries' module: ~0.3 s, not for plain SQL
                check_trace_param(s, param or [])  # before it loads
                from toolkit.commands.queries import run_named

                df = run_named(s, named, param or [])
            elif out.path is None and out.fmt in ("table", "json"):
                # DuckDB's own rows when they are plain: Polars' import was half the time
                from toolkit.commands.fetched import Fetched

                df = s.query_fetch(query, lambda rel: Fetched.of(rel) or rel.pl(),
                                   allow_write=allow_write)
                if df is None or df.width == 0:  # a statement without a result
                    return
            else:
                df = s.query(query, allow_write=allow_write)
                if df.width == 0:  # a statement without a result (SET, CREATE, COPY)
                    return
        except WriteRefused as e:
            fail(str(e))
        except duckdb.Error as e:
            fail(_sql_error(e, store), code=1)
    out.emit(df, limit=limit, hint="--limit 0 for all")


def _sql_error(e: Exception, store: Path) -> str:
    """DuckDB's first line, and for a wrong table or column name where to look them up."""
    msg = str(e).splitlines()[0]
    if msg.startswith(("Catalog Error", "Binder Error")):
        msg += (f" (`toolkit info --store {store}` lists the tables; `toolkit sql --store "
                f"{store} \"DESCRIBE <table>\"` its columns)")
    return msg


@app.command("report")
def report_cmd(
    store: StoreOpt,
    out: Annotated[Path, typer.Option("--out", help="Report directory (index.html, SVG, PNG).")],
    title: Annotated[str, typer.Option("--title", help="Report title.")] = (
        "KV-cache tiering report"),
) -> None:
    """Write a self-contained HTML report of a store plus SVG and PNG of every chart."""
    with cli_store(store) as s:  # a missing store first: the charts' libraries take seconds
        from toolkit.report import write_report

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
    if out.fmt == "table" and out.path is None:  # the tables that hold something
        full = [r for r in rows if r["keys"]]
        if full:
            out.emit(full)
        empty = len(rows) - len(full)
        if empty:
            typer.echo(f"{empty} empty table(s) not shown (--json lists every table)")
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


def _record_app() -> typer.Typer:
    from toolkit.commands import engram, selections

    record_app = typer.Typer(cls=engram.DefaultSelectionsGroup, no_args_is_help=True,
                             help="Record traces: selections (default) or engram lookups.")
    record_app.command("selections")(selections.record_cmd)
    record_app.command("engram")(engram.record_engram_cmd)
    return record_app


LAZY: dict[str, dict[str, tuple[str, str] | Callable[[], Any]]] = {
    "": {  # the root: commands, then sub-apps (each a typer.Typer)
        "cost-at-interactivity": ("cost", "cost_at_interactivity_cmd"),
        "sweep": ("sweep", "sweep_cmd"),
        "warm-up": ("warmup", "warm_up_cmd"),
        "record": _record_app,
        "hardware": ("cost", "hardware_app"),
        "models": ("models", "models_app"),
        "cost": ("cost", "cost_app"),
        "serving": ("serving", "serving_app"),
        "export": ("export", "export_app"),
        "store": ("sweep", "store_app"),
        "plan": ("plan", "plan_app"),
    },
    "ingest": {"selections": ("selections", "ingest_selections_cmd")},
    "replay": {
        "selections": ("selections", "replay_selections_cmd"),
        "mrc": ("selections", "replay_mrc_cmd"),
        "tiers": ("tiers", "tiers_cmd"),
        "cluster": ("cluster", "cluster_cmd"),
        "engram": ("engram", "replay_engram_cmd"),
    },
    "synth": {
        "selections": ("synth", "synth_selections_cmd"),
        "agentic": ("synth", "synth_agentic_cmd"),
    },
}
"""Commands defined in ``toolkit/commands/*.py``, by the group they are listed in (``""``:
the root): name -> (module under ``toolkit.commands``, attribute: a command function or,
at the root, a ``typer.Typer`` sub-app), or a function building one. Nothing here is
imported until that command runs or its group's commands are listed. To add a command:
one line here and, at the root, its line in :data:`ROOT_HELP`."""


def _defer_commands() -> None:
    """Move the root's commands and sub-apps defined in this module into ``_DEFERRED``:
    the root group built from ``app`` converts each on first use (see :class:`_Commands`)."""
    for info in app.registered_commands:
        _DEFERRED[info.name or typer.main.get_command_name(info.callback.__name__)] = info
    for info in app.registered_groups:
        _DEFERRED[info.name] = info
    app.registered_commands = []
    app.registered_groups = []


_defer_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
