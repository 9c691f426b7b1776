"""``toolkit record engram`` and ``toolkit replay engram``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from toolkit.commands.common import (
    MAX_GB,
    StoreOpt,
    check_key,
    check_names,
    choices,
    cli_store,
    fail,
    field_default,
    guard,
)
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.replay.config import EngramReplayConfig
from toolkit.runtime.files import file_problem


class DefaultSelectionsGroup(TyperGroup):
    """``toolkit record`` group whose default subcommand is ``selections``, so the older
    ``toolkit record --store S --name N ...`` keeps working next to ``record engram``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["selections", *args]
        return super().parse_args(ctx, args)


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        fail(f"{what} must be comma-separated integers; got {text!r}")
        raise  # pragma: no cover - fail exits


def record_engram_cmd(
    store: StoreOpt,
    name: Annotated[str, typer.Option("--name", help="Trace name.")],
    text: Annotated[
        list[Path] | None,
        typer.Option("--text", help="UTF-8 text file, one request each (repeat). Default: "
                     "the texts bundled in traces/smollm2/texts/ (run from the repo root).")
    ] = None,
    tokenizer: Annotated[str, typer.Option(help="Backbone tokenizer.")] = "smollm2",
    ngram: Annotated[str, typer.Option("--ngram", help="N-gram orders, e.g. 2,3.")] = "2,3",
    heads: Annotated[int, typer.Option("--heads", min=1, help="Hash heads per order.")] = 8,
    table_rows: Annotated[
        int | None,
        typer.Option("--table-rows", min=2, help="Rows per head table (next prime above); "
                     "default 5 x tokenizer vocabulary, as the reference.")
    ] = None,
    layers: Annotated[int, typer.Option("--layers", min=1, help="Number of Engram layers "
                                        "(at backbone layers 1, 15, 29, ...).")] = 2,
    layer_ids: Annotated[
        str | None, typer.Option("--layer-ids", help="Explicit backbone layer ids, e.g. 1,15.")
    ] = None,
    seed: int = 0,
    replace: Annotated[bool, typer.Option("--replace")] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Compute the Engram table rows every token of real text reads (deepseek-ai/Engram
    hashing; see toolkit/engram/hashing.py for the commit followed and the deviations)."""
    from toolkit.engram.hashing import EngramConfig, default_layer_ids
    from toolkit.engram.record import record_engram
    from toolkit.runtime.progress import compile_notice, status

    out = Output.from_options(fmt, as_json, output)
    ids = _ints(layer_ids, "--layer-ids") if layer_ids else guard(default_layer_ids, layers)
    cfg = guard(EngramConfig, ngram_orders=_ints(ngram, "--ngram"), heads=heads,
                table_rows=table_rows, layer_ids=ids, seed=seed, tokenizer=tokenizer)
    if not text:
        bundled = Path("traces/smollm2/texts")
        text = sorted(p for p in bundled.glob("*.txt") if p.name != "LICENSES.txt")
        if not text:
            fail("give --text FILE (no bundled texts under ./traces/smollm2/texts)")
    for path in text:
        if (problem := file_problem(path)) is not None:
            fail(f"{path}: {problem}")
    quiet = False if out.quiet else None
    with cli_store(store, create=True) as s, compile_notice(quiet), \
            status(f"record engram {name}", quiet):
        res = guard(record_engram, s, name, text, cfg, replace=replace)
    out.emit(res.as_dict())


_TABLE_GB = field_default(EngramReplayConfig, "table_bytes") / 1e9


def replay_engram_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Engram lookup trace name.")],
    hbm_cache_gb: Annotated[float, typer.Option("--hbm-cache-gb", min=0.0, max=MAX_GB,
                                                help="HBM row cache per GPU, GB (1e9 B).")],
    backing: Annotated[str, typer.Option("--backing", help="dram or ssd.")] = (
        field_default(EngramReplayConfig, "backing")),
    hardware: Annotated[str, typer.Option("--hardware", help=f"Accelerator: "
                                          f"{choices('hardware')}.")] = (
        field_default(EngramReplayConfig, "hardware")),
    model: Annotated[str, typer.Option("--model", help=f"Backbone model spec: "
                                       f"{choices('model')}.")] = (
        field_default(EngramReplayConfig, "model")),
    policy: Annotated[str, typer.Option("--policy", help=f"Cache policy: {choices('policy')}.")]
    = field_default(EngramReplayConfig, "policy"),
    table_gb: Annotated[float, typer.Option(
        "--table-gb", min=0.0, max=MAX_GB,
        help=f"Engram table size of the priced model, GB (assumed {_TABLE_GB:g}).")] = _TABLE_GB,
    context_tokens: Annotated[int, typer.Option("--context-tokens", min=1)] = (
        field_default(EngramReplayConfig, "context_tokens")),
    max_batch: Annotated[int, typer.Option("--max-batch", min=1,
                                           help="Batch cap per GPU (assumed).")] = (
        field_default(EngramReplayConfig, "max_batch_per_gpu")),
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Replay Engram lookups through an HBM row cache over DRAM or SSD and price the
    placement (hits, misses, bytes per token per tier, reuse, tokens per dollar)."""
    check_names(hardware=hardware, model=model)  # names first: a typo costs no import
    check_key(store, "engram_traces", trace, "Engram lookup trace")
    from toolkit.cost.engram import run_engram
    from toolkit.runtime.progress import compile_notice, status

    out = Output.from_options(fmt, as_json, output)
    cfg = guard(EngramReplayConfig, trace, hbm_cache_gb * 1e9, backing, policy, hardware,
                model, table_gb * 1e9, context_tokens, max_batch)
    quiet = False if out.quiet else None
    with cli_store(store) as s, compile_notice(quiet), status(f"replay engram {trace}", quiet):
        row = guard(run_engram, s, cfg)
    out.emit(row)
    if row["capacity_rows"] >= row["distinct_rows"]:
        typer.echo(f"warning: the HBM cache ({row['capacity_rows']:,} rows) holds all "
                   f"{row['distinct_rows']:,} distinct rows of {trace!r}: every miss is a "
                   "first touch, so the hit ratio reflects the trace's length, not the cache "
                   "size; give a smaller --hbm-cache-gb or a longer trace", err=True)
