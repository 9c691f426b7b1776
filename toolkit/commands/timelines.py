"""CLI: request-timeline ingest commands that take format options; mounted by cli.py.

Formats without options get the generic command built in cli.py.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from toolkit.commands.common import StoreOpt, cli_store, fail, guard

if TYPE_CHECKING:
    from toolkit.store import Store

PathArg = Annotated[Path, typer.Argument(help="Trace file to read.")]
NameOpt = Annotated[
    str | None, typer.Option("--name", help="Trace name; defaults to the file stem.")]
ReplaceOpt = Annotated[
    bool, typer.Option("--replace", help="Overwrite a trace of the same name.")]


def run_ingest(fmt: str, path: Path, store: Path, name: str | None, replace: bool,
               **options: object) -> None:
    """Ingest, print the reader's notes on stderr and the summary line on stdout."""
    from toolkit.ingest import ingest_file
    from toolkit.runtime.progress import status

    with cli_store(store, create=True) as s, status(f"ingest {path.name}"):
        res = guard(ingest_file, s, fmt, path, name, replace=replace, **options)
        if res.table == "requests":
            _build_stream_index(s, res.trace)
    for n in res.notes:
        typer.echo(f"note: {n}", err=True)
    if res.found:
        typer.echo(res.found)
    typer.echo(
        f"ingested {res.rows:,} {'selection rows' if res.table == 'selections' else 'rows'} "
        f"from {path} as {res.table}/{res.trace} "
        f"in {res.elapsed_s:.2f} s"
    )


def _build_stream_index(store: Store, trace: str) -> None:
    """Flatten the new timeline once now, so that its first prefix replay reads the
    stream index instead of decoding the hash lists (see ``prefix.load_stream``)."""
    from toolkit.errors import ToolkitError
    from toolkit.replay.prefix import load_stream

    with contextlib.suppress(ToolkitError):  # a timeline without hashes has no stream
        load_stream(store, trace)


def ingest_mooncake_cmd(
    path: PathArg,
    store: StoreOpt,
    name: NameOpt = None,
    replace: ReplaceOpt = False,
    block_tokens: Annotated[
        int, typer.Option("--block-tokens", min=1, help="Tokens per hashed block; every row "
                          "must carry ceil(input_length / N) hash_ids.")] = 512,
    time_unit: Annotated[
        str, typer.Option("--time-unit", help="Unit of `timestamp`: ms or s.")] = "ms",
) -> None:
    """Mooncake FAST'25 JSONL (hash_ids of 512-token blocks, ms timestamps)."""
    if time_unit not in ("ms", "s"):
        fail(f"--time-unit must be 'ms' or 's', got {time_unit!r}")
    run_ingest("mooncake", path, store, name, replace, block_tokens=block_tokens,
               time_unit=time_unit)


def ingest_burstgpt_cmd(
    path: PathArg,
    store: StoreOpt,
    name: NameOpt = None,
    replace: ReplaceOpt = False,
    model: Annotated[
        str | None, typer.Option("--model", help="Keep only this Model's rows (e.g. GPT-4).")
    ] = None,
) -> None:
    """BurstGPT CSV (second timestamps, Model and Log Type labels, no prefix hashes)."""
    run_ingest("burstgpt", path, store, name, replace, model=model)


#: format name -> command, for the formats whose command is not the generic one.
COMMANDS = {"mooncake": ingest_mooncake_cmd, "burstgpt": ingest_burstgpt_cmd}
