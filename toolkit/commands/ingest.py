"""CLI: ``toolkit ingest table`` (any table of requests) and ``toolkit ingest points``
(measured serving points); mounted by cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import StoreOpt, fail
from toolkit.commands.measured import DpaOpt, EpOpt, SpecOpt, TpOpt
from toolkit.commands.timelines import NameOpt, PathArg, ReplaceOpt, run_ingest


def ingest_table_cmd(
    path: PathArg,
    store: StoreOpt,
    time_col: Annotated[str, typer.Option("--time-col", help="Column of arrival times "
                                          "(numbers; sorted ascending).")],
    input_tokens_col: Annotated[str, typer.Option("--input-tokens-col",
                                                  help="Column of prompt token counts.")],
    output_tokens_col: Annotated[str, typer.Option("--output-tokens-col",
                                                   help="Column of output token counts.")],
    fmt: Annotated[str | None, typer.Option(
        "--format", help="csv, jsonl or parquet (default: from the extension).")] = None,
    time_unit: Annotated[str, typer.Option("--time-unit", help="Unit of --time-col: s, ms "
                                           "or us.")] = "s",
    hash_col: Annotated[str | None, typer.Option(
        "--hash-col", help="Column of prefix-block hash lists (JSON array, or ids separated "
        "by spaces, ';' or '|' in a CSV cell).")] = None,
    block_tokens: Annotated[int | None, typer.Option(
        "--block-tokens", min=1, help="Tokens per hashed block (with --hash-col).")] = None,
    hash_encoding: Annotated[str, typer.Option(
        "--hash-encoding", help="int (int64 ids) or hex (hex strings, renumbered by first "
        "appearance).")] = "int",
    session_col: Annotated[str | None, typer.Option(
        "--session-col", help="Column of session ids (integers kept; other values numbered "
        "by first appearance); turns count each session's rows.")] = None,
    partial_block: Annotated[str, typer.Option(
        "--partial-block", help="hashed: ceil(input/N) ids (the partial last block hashed, as "
        "Mooncake); unhashed: floor(input/N) (full blocks only, as vLLM); either.")] = "hashed",
    name: NameOpt = None,
    replace: ReplaceOpt = False,
) -> None:
    """Any CSV/JSONL/Parquet table of requests, its columns named by flags (docs/ingest.md)."""
    if hash_col is None and block_tokens is not None:
        fail("--block-tokens applies to --hash-col; give both")
    if hash_col is not None and block_tokens is None:
        fail("--hash-col needs --block-tokens N (tokens per hashed block)")
    run_ingest("table", path, store, name, replace, format=fmt, time_col=time_col,
               input_tokens_col=input_tokens_col, output_tokens_col=output_tokens_col,
               time_unit=time_unit, hash_col=hash_col, block_tokens=block_tokens,
               hash_encoding=hash_encoding, session_col=session_col,
               partial_block=partial_block)


def ingest_points_cmd(
    path: Annotated[Path, typer.Argument(help="InferenceX CSV/JSON/Parquet, "
                                         "sglang.bench_serving JSONL or vllm bench serve JSON.")],
    store: StoreOpt,
    gpus: Annotated[int | None, typer.Option(
        "--gpus", min=1, help="GPUs that served a bench result (divides its throughput into "
        "tput_per_gpu); required for sglang/vllm results.")] = None,
    hardware: Annotated[str | None, typer.Option(
        "--hardware", help="Hardware name for rows without one (bench results).")] = None,
    framework: Annotated[str | None, typer.Option(
        "--framework", "--engine", help="Engine for rows without one (default for bench results: "
        "sglang or vllm).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model for rows without "
                                              "one.")] = None,
    precision: Annotated[str | None, typer.Option("--precision", help="Precision for rows "
                                                  "without one (fp4, fp8, bf16).")] = None,
    name: NameOpt = None,
    replace: ReplaceOpt = False,
    tp: TpOpt = None,
    ep: EpOpt = None,
    dp_attention: DpaOpt = None,
    spec_method: SpecOpt = None,
) -> None:
    """Measured serving points into the measured_points table (InferenceX columns and units);
    a bench result's per-request lists also become the request timeline of the same name.
    With --tp, bench rows also store their server's layout (serving fit reads the table
    without further flags)."""
    run_ingest("points", path, store, name, replace, gpus=gpus, hardware=hardware,
               framework=framework, model=model, precision=precision, tp=tp, ep=ep,
               dp_attention=dp_attention, spec_method=spec_method)


#: format name -> command, for cli.py's ingest group.
COMMANDS = {"table": ingest_table_cmd, "points": ingest_points_cmd}
