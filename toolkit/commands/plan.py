"""CLI: ``toolkit plan`` (a capacity plan for a recorded workload) and ``toolkit plan
explain``; thin layers over :mod:`toolkit.plan`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import (
    check_names,
    check_workers,
    cli_store,
    fail,
    field_default,
    guard,
    require_key,
    ttft_bound,
)
from toolkit.plan.config import PlanConfig
from toolkit.tables import render_table

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
    max_p90_ttft_s: Annotated[str, typer.Option(
        "--max-p90-ttft-s", help="p90 TTFT bound in seconds; 'none' lifts it.")] = (
        "none" if _d("max_p90_ttft_s") is None else f"{_d('max_p90_ttft_s'):g}"),
    ttft_confidence: Annotated[float, typer.Option(
        "--ttft-confidence", help="Confidence at which a plan meets the p90 TTFT bound: 0.5, "
        "0.8 or 0.9 (the upper end of the predicted p90 TTFT's central band).")
    ] = _d("ttft_confidence"),
    users: Annotated[int | None, typer.Option(
        "--users", help="Plan for N closed-loop users over the cluster (default: the trace "
        "as recorded).")] = _d("users"),
    rate: Annotated[float | None, typer.Option(
        "--rate", help="Plan for the trace's arrivals rescaled to R requests/s.")
    ] = _d("rate_rps"),
    rate_scale: Annotated[float | None, typer.Option(
        "--rate-scale", help="Plan for the trace's arrivals at X times its recorded rate.")
    ] = _d("rate_scale"),
    router: Annotated[str, typer.Option(
        "--router", help="Router in front of the instances: round-robin, least-load, "
        "cache-aware, ...")] = _d("router"),
    max_instances: Annotated[int, typer.Option(
        "--max-instances", help="Instance search ceiling per accelerator.")
    ] = _d("max_instances"),
    load_candidates: Annotated[int, typer.Option(
        "--load-candidates", help="Plans per accelerator (its best at the front) sized for "
        "the load.")] = _d("load_candidates"),
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
    workers: Annotated[int, typer.Option(
        "--workers", min=0, callback=check_workers, help="Parallel exact evaluations and "
        "accelerators sized at the load (threads with local, Ray CPUs with ray); 0 = every "
        "core (default); same plans as one.")] = 0,
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
    check_names(hardware=hardware, model=model)  # names first: a typo costs no search start-up
    cfg = guard(PlanConfig, trace=trace, model=model, hardware=_names(hardware),
                interactivity=interactivity, selections=selections, engram=engram,
                max_p90_ttft_s=ttft_bound(max_p90_ttft_s), ttft_confidence=ttft_confidence,
                price_tier=price_tier,
                host_dram_gb=_floats(host_dram_gb, "--host-dram-gb"),
                ssd_gb=_floats(ssd_gb, "--ssd-gb"), policy=_names(policy),
                engram_hbm_gb=_floats(engram_hbm_gb, "--engram-hbm-gb"),
                engram_table_gb=engram_table_gb,
                prefix_reserve=_floats(prefix_reserve, "--prefix-reserve"),
                exhaustive=exhaustive, top=top, users=users, rate_rps=rate,
                rate_scale=rate_scale, router=router, max_instances=max_instances,
                load_candidates=load_candidates)
    with cli_store(store) as s:
        require_key(s, "requests", trace)  # names first: a typo costs no search start-up
        if selections is not None:
            require_key(s, "selections", selections, "selection trace")
        if engram is not None:
            require_key(s, "engram_traces", engram, "Engram lookup trace")
        from toolkit.plan import search
        from toolkit.plan.load import load_text

        res = guard(search.plan, s, cfg, executor=engine, workers=workers)
    caveat = _dsa_caveat(model)
    if as_json:
        typer.echo(json.dumps(res.to_json() | ({"dsa_caveat": caveat} if caveat else {}),
                              default=str))
        return
    from toolkit.models import get_model

    if get_model(cfg.model).index_topk > 0:
        from toolkit.serving.crossval import dsa_caveat

        typer.echo(f"({dsa_caveat()})")
    typer.echo(f"plan {res.plan_id}: {res.searched} candidates, {res.evaluated_exactly} "
               f"evaluated exactly, {res.feasible} feasible, {res.cluster_replays} cluster "
               f"replays, {res.elapsed_s:.1f} s")
    typer.echo(f"at {load_text(cfg)}, {cfg.router} router, {cfg.interactivity:g} tok/s/user, "
               f"p90 TTFT <= {cfg.max_p90_ttft_s} s: best per accelerator")
    typer.echo(render_table(best_table(res.by_hardware)))
    typer.echo("ranked plans:")
    typer.echo(render_table(plan_table(res.plans)))
    typer.echo("assumptions:")
    for a in res.assumptions:
        typer.echo(f"  - {a}")
    if caveat:
        typer.echo(f"dsa_caveat: {caveat}")


def _dsa_caveat(model: str) -> str | None:
    """What the one measured DSA check says of the serving model's answers (the same text
    as ``cost compare``'s ``dsa_caveat``), for a sparse-attention model; None for a dense
    one."""
    from toolkit.models import get_model
    from toolkit.serving.crossval import dsa_caveat

    return dsa_caveat() if get_model(model).index_topk > 0 else None


@plan_app.command("explain")
def explain_cmd(
    store: Annotated[Path, typer.Option("--store", help="Store with plan_runs.")],
    plan: Annotated[str, typer.Option(
        "--plan", help="Plan id (from toolkit plan), optionally /RANK (default 1).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Why a plan was chosen: the binding constraint and, per dimension, the next-best
    alternative and what it would cost."""
    with cli_store(store) as s:  # the id first: a typo costs no search start-up
        require_key(s, "plan_runs", plan.partition("/")[0], "plan")
        from toolkit.plan.explain import explain, explain_text

        out = guard(explain, s, plan)
    if as_json:
        typer.echo(json.dumps(out, default=str))
        return
    lines = explain_text(out).splitlines()
    typer.echo("\n".join(lines[:4]))  # the plan, binding constraint, runs, the table's title
    typer.echo(render_table(alternatives_table(out), wrap_text=True))


def plan_table(plans: list[dict]) -> object:
    """The printed plans, one row each: cost and band, throughput, latency, the tiers and
    what each serves; the layout and run ids (long text) last."""
    import polars as pl

    cols = ("rank", "hardware", "engine", "instances", "gpus_total", "usd_per_mtok_total",
            "usd_per_mtok_total_low",
            "usd_per_mtok_total_high", "tput_per_gpu", "p90_ttft_s", "p90_ttft_s_low",
            "p90_ttft_s_high", "device_prefix_tokens", "hisparse_buffer_tokens", "engram_hbm_gb",
            "host_dram_gb", "ssd_gb", "policy", "gpu_hit_share", "host_hit_share",
            "storage_hit_share", "binding", "layout")
    cols = tuple(c for c in cols if any(p.get(c) is not None for p in plans))
    return pl.DataFrame([{**{c: p.get(c) for c in cols}, "runs": ", ".join(p["run_ids"])}
                         for p in plans], infer_schema_length=None, strict=False)


def best_table(by_hardware: list[dict]) -> object:
    """The best plan per accelerator at the load, one row each, with the margin to the next
    cheapest accelerator and whether that win is larger than the band (else a tie)."""
    import polars as pl

    rows = []
    for h in by_hardware:
        margin = ("" if h["next_hardware"] is None else
                  f"{h['ratio_to_next']:.2f}x cheaper than {h['next_hardware']} "
                  + ("(beyond the band)" if h["beyond_band"] else "(within the band: a tie)"))
        rows.append({"hardware": h["hardware"], "instances": h["instances"],
                     "gpus_total": h["gpus_total"],
                     "host_dram_gb_total": h["host_dram_gb_total"],
                     "ssd_gb_total": h["ssd_gb_total"],
                     "usd_per_hour_total": h["usd_per_hour_total"],
                     "usd_per_mtok_total": h["usd_per_mtok_total"],
                     "usd_per_mtok_total_low": h["usd_per_mtok_total_low"],
                     "usd_per_mtok_total_high": h["usd_per_mtok_total_high"],
                     "p90_ttft_s": h["p90_ttft_s"], "binding": h["binding"],
                     "margin_to_next": margin, "layout": h["layout"]})
    return pl.DataFrame(rows, infer_schema_length=None, strict=False)


def alternatives_table(out: dict) -> object:
    """``plan explain``'s next-best alternative per dimension, one row each."""
    import polars as pl

    p, rows = out["plan"], []
    for dim, a in out["alternatives"].items():
        rows.append({"dimension": dim, "chosen": "none" if p[dim] is None else str(p[dim]),
                     "alternative": "none" if a.get("value") is None else str(a["value"]),
                     "usd_per_mtok_total": a.get("usd_per_mtok_total"),
                     "cost_ratio": a.get("ratio"), "delta_usd_per_mtok": a.get(
                         "delta_usd_per_mtok"), "why": a.get("why", "")})
    return pl.DataFrame(rows, schema={"dimension": pl.String, "chosen": pl.String,
                                      "alternative": pl.String,
                                      "usd_per_mtok_total": pl.Float64, "cost_ratio": pl.Float64,
                                      "delta_usd_per_mtok": pl.Float64, "why": pl.String})
