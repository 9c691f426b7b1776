"""CLI: ``toolkit replay cluster``, a thin layer over :func:`toolkit.cost.from_replay.run_cluster`.

N instances of one serving layout behind a router, each with its own exact tier cache
(``docs/cluster.md``). Every flag is a field of
:class:`~toolkit.replay.tiers.config.ClusterReplayConfig` or of its per-instance
:class:`~toolkit.replay.tiers.config.TierReplayConfig`, so defaults and checks live once.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from toolkit.commands.common import StoreOpt, choices, cli_store, fail, field_default
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError
from toolkit.replay.tiers.config import ROUTERS, ClusterReplayConfig, TierReplayConfig


def _t(name: str) -> Any:
    return field_default(TierReplayConfig, name)


def _c(name: str) -> Any:
    return field_default(ClusterReplayConfig, name)


def cluster_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Request timeline with hashes.")],
    hardware: Annotated[str, typer.Option(
        "--hardware", help=f"Accelerator: {choices('hardware')}.")] = _t("hardware"),
    model: Annotated[str, typer.Option("--model", help=f"Model spec: {choices('model')}.")]
    = _t("model"),
    layout: Annotated[str, typer.Option(
        "--layout", help="Instance layout: tpN (N GPUs, tensor-parallel, one prefix cache), "
                         "dpN (DP attention: a prefix cache per rank), disagg:P/D (prefill "
                         "side P and decode pool D, each tpN or dpN), +mtp; default tp8.")]
    = "tp8",
    instances: Annotated[int, typer.Option(
        "--instances", min=1, help="Serving instances behind the router.")] = _c("instances"),
    router: Annotated[str, typer.Option(
        "--router", help=f"{', '.join(ROUTERS)} (cache-aware: SGLang's router; kv-router: "
                         "Dynamo's KV router; docs/cluster.md).")] = _c("router"),
    affinity_ttl: Annotated[float, typer.Option(
        "--session-affinity-ttl-s", min=0.0, max=1e9,
        help="Keep a session's turns on the cache its last turn went to if routed within "
             "this many seconds (Dynamo's --router-session-affinity-ttl-secs); 0 off.")]
    = _c("session_affinity_ttl_s"),
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", "--users", min=1,
        help="Closed loop: N users over the cluster (sessions with their think times).")]
    = None,
    rate: Annotated[float | None, typer.Option(
        "--rate", help="Open loop: the trace's arrivals rescaled to a mean of R requests/s.")]
    = None,
    rate_scale: Annotated[float | None, typer.Option(
        "--rate-scale", help="Open loop: the trace's arrival rate times X.")] = None,
    device_tokens: Annotated[int | None, typer.Option(
        "--device-tokens", help="KV pool per prefix cache (instance, or DP rank) in tokens; -1 "
                                "unbounded; default: the layout's HBM left after weights.")]
    = None,
    host_tokens: Annotated[int | None, typer.Option(
        "--host-tokens", help="Host (DRAM) tier per prefix cache in tokens; -1 unbounded; "
                              "default --host-ratio x device.")] = None,
    host_ratio: Annotated[float, typer.Option(
        "--host-ratio", min=0.0, max=1e6, help="Host pool / device pool.")] = _t("host_ratio"),
    storage_tokens: Annotated[int, typer.Option(
        "--storage-tokens", help="Storage (SSD) tier per prefix cache in tokens; 0 off, -1 "
                                 "unbounded.")] = _t("storage_tokens"),
    engine_semantics: Annotated[str, typer.Option(
        "--engine-semantics", help="sglang (SGLang's RadixCache + HiCache) or vllm (vLLM v1's "
                                   "block pool).")] = _t("engine_semantics"),
    page_tokens: Annotated[int | None, typer.Option(
        "--page-tokens", help="Page size: divides or is a multiple of the trace's block.")]
    = None,
    max_running: Annotated[int, typer.Option(
        "--max-running", min=0, help="Running-request cap per prefix cache (and per decode "
                                     "pool); 0 none.")]
    = _t("max_running"),
    offload_policy: Annotated[str, typer.Option(
        "--offload-policy", help="vLLM's CPU tier (with --engine-semantics vllm): none, lru "
                                 "or arc.")] = _t("offload_policy"),
    price_tier: Annotated[str, typer.Option(
        "--price-tier", help="hyperscaler, neocloud or rental.")] = _t("price_tier"),
    no_save: Annotated[bool, typer.Option(
        "--no-save", help="Do not write cluster_runs / cluster_requests.")] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Replay a timeline over N serving instances behind a router (one event loop, each
    instance its own exact GPU / host / storage prefix cache)."""
    from toolkit.commands.common import check_key, check_names

    check_names(hardware=hardware, model=model)  # names first: a typo costs no import
    check_key(store, "requests", trace)
    from dataclasses import replace

    from toolkit.cost.from_replay import run_cluster
    from toolkit.replay.tiers import cluster_json
    from toolkit.runtime.progress import compile_notice

    out = Output.from_options(fmt, as_json, output)
    quiet = False if out.quiet else None
    try:
        if sum(x is not None for x in (concurrency, rate, rate_scale)) > 1:
            raise ValueError("give one of --concurrency/--users, --rate, --rate-scale")
        arrivals = "trace"
        if rate is not None and not rate > 0:
            raise ValueError(f"--rate must be > 0 requests/s, got {rate}")
        if rate_scale is not None:
            if not rate_scale > 0:
                raise ValueError(f"--rate-scale must be > 0, got {rate_scale}")
            arrivals = f"scaled:{rate_scale:g}"
        from toolkit.plan.pool import cluster_layout

        lay = cluster_layout(layout)
        base = TierReplayConfig(trace=trace)
        tiers = TierReplayConfig(
            trace=trace, hardware=hardware, model=model, concurrency=concurrency,
            arrivals=arrivals, device_tokens=device_tokens, host_tokens=host_tokens,
            host_ratio=host_ratio, storage_tokens=storage_tokens, page_tokens=page_tokens,
            engine_semantics=engine_semantics, max_running=max_running,
            offload_policy=offload_policy, price_tier=price_tier,
            assumptions=lay.assumptions(base.assumptions),
        )
        dec = None if lay.decode is None else replace(lay.decode, max_running=max_running)
        cfg = ClusterReplayConfig(tiers, instances=instances, router=router, rate_rps=rate,
                                  ranks=lay.ranks, decode=dec,
                                  session_affinity_ttl_s=affinity_ttl)
        with cli_store(store) as s, compile_notice(quiet):
            res = run_cluster(s, cfg, save=not no_save, progress=quiet)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    out.emit(cluster_json(res))
