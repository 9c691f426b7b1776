"""CLI: labelled-SYNTHETIC generators (selections, agentic sessions); mounted by cli.py."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit.commands.common import StoreOpt, check_workers, cli_store, fail, guard


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
    workers: Annotated[
        int | None, typer.Option(
            "--workers", min=0, callback=check_workers,
            help="Generator threads (default: all cores).")
    ] = None,
) -> None:
    """Generate a SYNTHETIC selection trace (sinks + recency + retained + fresh picks),
    streamed to the store request batch by request batch (bounded memory, any size)."""
    import time

    from toolkit.runtime.progress import compile_notice, progress
    from toolkit.store import check_key
    from toolkit.synth.selections import SyntheticSelectionConfig
    from toolkit.synth.selections_fast import write_streaming

    cfg = guard(SyntheticSelectionConfig, requests, prompt_tokens, steps, layers, k, sinks,
                 recent_window, step_retention, layer_retention, seed)
    guard(check_key, name)
    total = sum(min(prompt_tokens + s + 1, k) for s in range(steps)) * layers * requests
    t0 = time.perf_counter()
    with cli_store(store, create=True) as s, compile_notice():
        if name in s.keys("selections") and not replace:
            fail(f"selections {name!r} already exists in {s.root}; pass --replace to overwrite")
        with progress(total, f"synth {name}") as bar:
            rows = guard(write_streaming, s, cfg, name, replace=replace, workers=workers,
                         on_batch=bar.update)
    dt = time.perf_counter() - t0
    typer.echo(f"wrote SYNTHETIC selection trace {name!r}: {rows:,} rows, {total:,} positions "
               f"in {dt:.1f} s ({total / dt / 1e6:.1f} M positions/s)")


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

    from toolkit.synth.agentic import PRESETS, write_agentic

    if preset not in PRESETS:
        fail(f"--preset must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    over = {"seed": seed} | ({"sessions": sessions} if sessions else {}) | (
        {"page_tokens": page_tokens} if page_tokens else {})
    cfg = dataclasses.replace(PRESETS[preset], **over)
    with cli_store(store, create=True) as s:
        table = guard(write_agentic, s, cfg, name, replace=replace)
    typer.echo(f"wrote SYNTHETIC request timeline {name!r}: {table.num_rows:,} requests")
