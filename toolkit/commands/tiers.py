"""CLI: ``toolkit replay tiers``, a thin layer over :func:`toolkit.cost.from_replay.run_tiers`.

Mount in ``toolkit/cli.py`` (after ``replay_app`` exists)::

    from toolkit.commands.tiers import tiers_cmd
    replay_app.command("tiers")(tiers_cmd)
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from toolkit.commands.common import (
    MAX_GB,
    StoreOpt,
    check_names,
    choices,
    cli_store,
    fail,
    field_default,
    require_key,
)
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt
from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError
from toolkit.replay.tiers.config import TierReplayConfig


def _default(name: str) -> Any:
    return field_default(TierReplayConfig, name)


def tiers_cmd(
    store: StoreOpt,
    trace: Annotated[str, typer.Option("--trace", help="Request timeline with hashes.")],
    hardware: Annotated[str, typer.Option(
        "--hardware", help=f"Accelerator: {choices('hardware')}.")] = _default("hardware"),
    model: Annotated[str, typer.Option("--model", help=f"Model spec: {choices('model')}.")]
    = _default("model"),
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", min=1, help="Closed loop with N users.")
    ] = None,
    arrivals: Annotated[
        str, typer.Option("--arrivals", help="Open loop: trace, scaled:F (F x rate), from:TRACE.")
    ] = _default("arrivals"),
    device_tokens: Annotated[
        int | None, typer.Option("--device-tokens", help="KV pool; -1 unbounded; default HBM.")
    ] = None,
    host_ratio: Annotated[
        float, typer.Option("--host-ratio", min=0.0, max=1e6,
                            help="SGLang's --hicache-ratio: the pool SGLang allocates, "
                                 "int(device x R) tokens in whole pages plus its one padding "
                                 "page (vllm: R x device); 0 = no host tier.")
    ] = _default("host_ratio"),
    host_tokens: Annotated[
        int | None, typer.Option("--host-tokens", min=-1,
                                 help="Host pool in tokens, exactly (overrides the ratio; "
                                      "-1 unbounded).")
    ] = None,
    host_gb: Annotated[
        float | None, typer.Option("--host-gb", min=0.0, max=MAX_GB,
                                   help="Host pool in GB (overrides the ratio).")
    ] = None,
    storage_gb: Annotated[
        float, typer.Option("--storage-gb", min=-1.0, max=MAX_GB,
                            help="L3 capacity in GB; 0 off, -1 unbounded.")
    ] = 0.0,
    page_tokens: Annotated[
        int | None, typer.Option(
            "--page-tokens", help="Page size: divides or is a multiple of the trace's block.")
    ] = None,
    radix_semantics: Annotated[
        str, typer.Option("--radix-semantics",
                          help="sglang (SGLang's RadixCache, default) or page (page-granular).")
    ] = _default("radix_semantics"),
    engine_semantics: Annotated[
        str, typer.Option("--engine-semantics",
                          help="sglang (default; --radix-semantics applies) or vllm (vLLM v1's "
                               "block pool and prefix cache; host tier: --offload-policy).")
    ] = _default("engine_semantics"),
    block_tokens: Annotated[
        int, typer.Option("--block-tokens", min=1,
                          help="vLLM block size in tokens (with --engine-semantics vllm).")
    ] = _default("block_tokens"),
    offload_policy: Annotated[
        str, typer.Option("--offload-policy",
                          help="vLLM's CPU offloading tier (with --engine-semantics vllm): none "
                               "(default), lru or arc; sized by --host-gb or --host-ratio.")
    ] = _default("offload_policy"),
    sequential: Annotated[
        bool, typer.Option("--sequential",
                           help="One request at a time in arrival order, no decode pages.")
    ] = _default("sequential"),
    policy: Annotated[str, typer.Option(
        "--policy", help="lru, lfu, sglang-slru or priority (SGLang's evict_policy.py; slru "
                         "is accepted as an alias of sglang-slru).")] = _default("policy"),
    write_policy: Annotated[
        str, typer.Option("--write-policy",
                          help="write_through, write_through_selective or write_back.")
    ] = _default("write_policy"),
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Replay a timeline through GPU / host / storage prefix tiers (HiCache semantics)."""
    check_names(hardware=hardware, model=model)
    with cli_store(store) as s:  # names first: a typo costs no kernel or cost-model import
        require_key(s, "requests", trace)
    from toolkit.models import get_model
    from toolkit.replay.tiers import UNBOUNDED, summary_json
    from toolkit.runtime.progress import compile_notice, status
    from toolkit.serving.tier_service import kv_bytes_per_token

    out = Output.from_options(fmt, as_json, output)
    if storage_gb < 0 and storage_gb != -1:  # -0.5 was read as unbounded
        fail(f"--storage-gb must be >= 0, or -1 for unbounded; got {storage_gb:g}")
    quiet = False if out.quiet else None
    if host_tokens is not None and host_gb is not None:
        fail("--host-tokens and --host-gb both set the host pool; give one of them")
    try:
        kvb = kv_bytes_per_token(get_model(model))

        def gb_tokens(gb: float) -> int:
            return UNBOUNDED if gb < 0 else int(gb * 1e9 // kvb)

        cfg = TierReplayConfig(
            trace=trace, hardware=hardware, model=model, concurrency=concurrency,
            arrivals=arrivals, device_tokens=device_tokens,
            host_tokens=host_tokens if host_gb is None else gb_tokens(host_gb),
            host_ratio=host_ratio,
            storage_tokens=gb_tokens(storage_gb), page_tokens=page_tokens, policy=policy,
            write_policy=write_policy, radix_semantics=radix_semantics, sequential=sequential,
            engine_semantics=engine_semantics, block_tokens=block_tokens,
            offload_policy=offload_policy,
        )
        with cli_store(store) as s, compile_notice(quiet), status(f"replay tiers {trace}",
                                                                   quiet):
            from toolkit.cost.from_replay import run_tiers

            res = run_tiers(s, cfg)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    out.emit(summary_json(res))
