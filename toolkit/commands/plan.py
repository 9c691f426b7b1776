"""CLI: ``toolkit plan`` (a capacity plan for a recorded workload) and ``toolkit plan
explain``; thin layers over :mod:`toolkit.plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import cli_store, fail, field_default, guard
from toolkit.plan.config import PlanConfig

plan_app = typer.Typer(
    help="Capacity plan: accelerator, layout, concurrency, HBM split, host DRAM and SSD at "
    "the lowest $/M total tokens within the targets (`explain` says why).",
    invoke_without_command=True,
)


def _floats(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        fail(f"{flag} {text!r}: give comma-separated numbers, e.g. 0,256,512")
    return ()


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(",") if v.strip())


def _d(name: str):
    return field_default(PlanConfig, name)


@plan_app.callback()
def plan_cmd(
    ctx: typer.Context,
    store: Annotated[Path | None, typer.Option("--store", help="Store with --trace.")] = None,
    trace: Annotated[str | None, typer.Option(
        "--trace", help="Stored request trace (with prefix hashes).")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model to serve.")] = None,
    hardware: Annotated[str, typer.Option(
        "--hardware", help="Accelerators, comma-separated.")] = "gb200,gb300,mi355x",
    interactivity: Annotated[float, typer.Option(
        "--interactivity", help="Target tok/s/user.")] = _d("interactivity"),
    selections: Annotated[str | None, typer.Option(
        "--selections", help="Stored selection trace: plan HiSparse buffers.")] = None,
    engram: Annotated[str | None, typer.Option(
        "--engram", help="Stored Engram lookup trace: plan the HBM given to Engram rows "
        "(the rest of the table in host DRAM).")] = None,
    engram_hbm_gb: Annotated[str, typer.Option(
        "--engram-hbm-gb", help="Engram HBM options per GPU (GB), comma-separated; an option "
        "at or above a GPU's share of the table holds it whole.")
    ] = ",".join(f"{v:g}" for v in _d("engram_hbm_gb")),
    engram_table_gb: Annotated[float, typer.Option(
        "--engram-table-gb", help="All Engram tables of the model, GB (assumed).")
    ] = _d("engram_table_gb"),
    prefix_reserve: Annotated[str, typer.Option(
        "--prefix-reserve", help="Shares of each GPU's KV pool kept for the prefix cache "
        "(running requests capped to the rest), comma-separated; 0 = shared pool.")
    ] = ",".join(f"{v:g}" for v in _d("prefix_reserve")),
    max_p90_ttft_s: Annotated[float | None, typer.Option(
        "--max-p90-ttft-s", help="p90 TTFT bound in seconds.")] = _d("max_p90_ttft_s"),
    ttft_confidence: Annotated[float, typer.Option(
        "--ttft-confidence", help="Confidence at which a plan meets the p90 TTFT bound: 0.5, "
        "0.8 or 0.9 (the upper end of the predicted p90 TTFT's central band).")
    ] = _d("ttft_confidence"),
    price_tier: Annotated[str, typer.Option(
        "--price-tier", help="hyperscaler, neocloud or rental.")] = _d("price_tier"),
    host_dram_gb: Annotated[str, typer.Option(
        "--host-dram-gb", help="Host DRAM options per instance (GB), comma-separated; "
        "0 forbids the host tier.")] = ",".join(f"{v:g}" for v in _d("host_dram_gb")),
    ssd_gb: Annotated[str, typer.Option(
        "--ssd-gb", help="SSD options per instance (GB), comma-separated; 0 forbids it.")
    ] = ",".join(f"{v:g}" for v in _d("ssd_gb")),
    policy: Annotated[str, typer.Option(
        "--policy", help="Prefix-cache eviction policies: lru, lfu, sglang-slru, priority.")
    ] = ",".join(_d("policy")),
    engine: Annotated[str, typer.Option(
        "--engine", help="Where exact evaluations run: local or ray.")] = "local",
    workers: Annotated[int | None, typer.Option(
        "--workers", min=1, help="Parallel exact evaluations (threads with local, Ray CPUs "
        "with ray); same plans as one.")] = None,
    exhaustive: Annotated[bool, typer.Option(
        "--exhaustive", help="Evaluate every candidate exactly (no pruning).")] = False,
    top: Annotated[int, typer.Option("--top", min=1, help="Plans printed.")] = _d("top"),
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Search, per accelerator, layouts and concurrency (serving model), the HBM split, host
    DRAM, SSD and eviction policy; every printed plan was evaluated by exact replays whose
    run ids it names. Plans land in the store's plan_runs table."""
    if ctx.invoked_subcommand:
        return
    if store is None or trace is None or model is None:
        fail("give --store, --trace and --model (or a subcommand: toolkit plan explain)")
    if engine not in ("local", "ray"):
        fail(f"--engine {engine!r}: local or ray")
    from toolkit.plan import search

    cfg = guard(PlanConfig, trace=trace, model=model, hardware=_names(hardware),
                interactivity=interactivity, selections=selections, engram=engram,
                max_p90_ttft_s=max_p90_ttft_s, ttft_confidence=ttft_confidence,
                price_tier=price_tier,
                host_dram_gb=_floats(host_dram_gb, "--host-dram-gb"),
                ssd_gb=_floats(ssd_gb, "--ssd-gb"), policy=_names(policy),
                engram_hbm_gb=_floats(engram_hbm_gb, "--engram-hbm-gb"),
                engram_table_gb=engram_table_gb,
                prefix_reserve=_floats(prefix_reserve, "--prefix-reserve"),
                exhaustive=exhaustive, top=top)
    with cli_store(store) as s:
        res = guard(search.plan, s, cfg, executor=engine, workers=workers)
    if as_json:
        typer.echo(json.dumps(res.to_json(), default=str))
        return
    from toolkit.models import get_model

    if get_model(cfg.model).index_topk > 0:
        from toolkit.serving.crossval import dsa_caveat

        typer.echo(f"({dsa_caveat()})")
    typer.echo(f"plan {res.plan_id}: {res.searched} candidates, {res.evaluated_exactly} "
               f"evaluated exactly, {res.feasible} feasible, {res.elapsed_s:.1f} s")
    for p in res.plans:
        hs = (f"HiSparse {p['hisparse_buffer_tokens']} tok/req/layer"
              if p["hisparse_buffer_tokens"] else "no HiSparse")
        if p["engram_hbm_gb"]:
            hs += f", Engram {p['engram_hbm_gb']:g} GB/GPU"
        typer.echo(
            f"#{p['rank']} {p['hardware']} {p['engine']} {p['layout']} ({p['gpus']} GPUs): "
            f"${p['usd_per_mtok_total']:.4f}/M total "
            f"[{p['usd_per_mtok_total_low']:.4f}-{p['usd_per_mtok_total_high']:.4f}], "
            f"{p['tput_per_gpu']:.0f} tok/s/GPU, p90 TTFT {p['p90_ttft_s']:.2f} s"
            f"{_band(p.get('p90_ttft_s_low'), p.get('p90_ttft_s_high'))}; "
            f"device prefix {p['device_prefix_tokens']:,} tok, {hs}, host "
            f"{p['host_dram_gb']:g} GB, SSD {p['ssd_gb']:g} GB, {p['policy']}; hits GPU "
            f"{p['gpu_hit_share']:.3f} host {p['host_hit_share']:.3f} SSD "
            f"{p['storage_hit_share']:.3f}; runs {', '.join(p['run_ids'])}")
    typer.echo("assumptions:")
    for a in res.assumptions:
        typer.echo(f"  - {a}")


@plan_app.command("explain")
def explain_cmd(
    store: Annotated[Path, typer.Option("--store", help="Store with plan_runs.")],
    plan: Annotated[str, typer.Option(
        "--plan", help="Plan id (from toolkit plan), optionally /RANK (default 1).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Why a plan was chosen: the binding constraint and, per dimension, the next-best
    alternative and what it would cost."""
    from toolkit.plan.explain import explain, explain_text

    with cli_store(store) as s:
        out = guard(explain, s, plan)
    typer.echo(json.dumps(out, default=str) if as_json else explain_text(out))


def _band(lo: float | None, hi: float | None) -> str:
    """`` [lo-hi]`` of a band, or nothing without one."""
    return f" [{lo:.2f}-{hi:.2f}]" if lo is not None and hi is not None else ""
