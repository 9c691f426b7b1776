"""CLI: ``toolkit replay cluster``, a thin layer over :func:`toolkit.cost.from_replay.run_cluster`.

N instances of one serving layout behind a router, each with its own exact tier cache
(``docs/cluster.md``). Every flag is a field of
:class:`~toolkit.replay.tiers.config.ClusterReplayConfig` or of its per-instance
:class:`~toolkit.replay.tiers.config.TierReplayConfig`, so defaults and checks live once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from toolkit.commands.common import StoreOpt, choices, cli_store, fail, field_default
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError
from toolkit.replay.tiers.config import (
    ROUTERS,
    ClusterReplayConfig,
    DecodePool,
    TierReplayConfig,
)


def _t(name: str) -> Any:
    return field_default(TierReplayConfig, name)


def _c(name: str) -> Any:
    return field_default(ClusterReplayConfig, name)


_SIDE = r"(tp|dp)([1-9][0-9]*)"
LAYOUT_RE = re.compile(rf"{_SIDE}(\+mtp)?")
DISAGG_RE = re.compile(rf"disagg:{_SIDE}/{_SIDE}(\+mtp)?")


@dataclass(frozen=True)
class ClusterLayout:
    """``--layout`` parsed: the instance (the prefill side when disaggregated) and the
    decode pool (None: aggregated)."""

    gpus: int
    dp_attention: bool
    mtp: bool
    decode: DecodePool | None = None

    @property
    def ranks(self) -> int:
        """Prefix caches per instance: one per DP-attention rank, else one."""
        return self.gpus if self.dp_attention else 1


def parse_layout(layout: str) -> ClusterLayout:
    """``--layout``: ``tpN`` (N GPUs, tensor-parallel attention and MoE: one prefix cache, one
    GPU's free HBM, since every GPU holds every token's MLA row), ``dpN`` (N GPUs, DP
    attention and expert-parallel MoE: N prefix caches, one per rank), ``disagg:P/D`` with
    ``P`` and ``D`` each ``tpN`` or ``dpN`` (a prefill side holding the prefix caches and a
    decode pool), ``+mtp`` for multi-token prediction; or a ``cost compare`` layout text
    (``TP8 EP8 DPA+MTP``, ``disagg P8/D16 decode TP16 EP16 DPA``)."""
    text = layout.strip()
    low = text.lower().replace(" ", "")
    m = LAYOUT_RE.fullmatch(low)
    if m:
        return ClusterLayout(int(m[2]), m[1] == "dp", bool(m[3]))
    m = DISAGG_RE.fullmatch(low)
    if m:
        dec = DecodePool(gpus=int(m[4]), dp_attention=m[3] == "dp",
                         expert_parallel=m[3] == "dp", mtp=bool(m[5]))
        return ClusterLayout(int(m[2]), m[1] == "dp", False, dec)
    from toolkit.plan.pool import LayoutError, decode_side
    from toolkit.plan.pool import parse_layout as compare_layout

    try:
        lay = compare_layout(text)
    except LayoutError:
        raise ValueError(f"--layout {layout!r}: expected tpN, dpN, disagg:P/D (P and D each "
                         "tpN or dpN, e.g. disagg:dp8/dp16), optionally +mtp, or a cost "
                         "compare layout text (e.g. 'TP8 EP8 DPA', 'disagg P8/D16 decode "
                         "TP16 EP16 DPA')") from None
    if not lay.disagg:
        return ClusterLayout(lay.cache_gpus, lay.cache_dp_attention, "+MTP" in lay.text)
    g, dpa, ep, mtp = decode_side(lay)
    return ClusterLayout(lay.cache_gpus, lay.cache_dp_attention, False,
                         DecodePool(gpus=g, dp_attention=dpa, expert_parallel=ep, mtp=mtp))


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
        lay = parse_layout(layout)
        base = TierReplayConfig(trace=trace)
        tiers = TierReplayConfig(
            trace=trace, hardware=hardware, model=model, concurrency=concurrency,
            arrivals=arrivals, device_tokens=device_tokens, host_tokens=host_tokens,
            host_ratio=host_ratio, storage_tokens=storage_tokens, page_tokens=page_tokens,
            engine_semantics=engine_semantics, max_running=max_running,
            offload_policy=offload_policy, price_tier=price_tier,
            assumptions=replace(base.assumptions, gpus_per_replica=lay.gpus,
                                dp_attention=lay.dp_attention,
                                expert_parallel=lay.dp_attention, mtp=lay.mtp),
        )
        dec = None if lay.decode is None else replace(lay.decode, max_running=max_running)
        cfg = ClusterReplayConfig(tiers, instances=instances, router=router, rate_rps=rate,
                                  ranks=lay.ranks, decode=dec)
        with cli_store(store) as s, compile_notice(quiet):
            res = run_cluster(s, cfg, save=not no_save, progress=quiet)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    out.emit(cluster_json(res))
