"""Cluster replay: N instances of one serving layout behind a router, one event loop.

Each instance is the tier replay of :class:`~toolkit.replay.tiers.config.TierReplayConfig`
(its own exact device/host/storage cache, SGLang or vLLM semantics, its own FCFS queue,
prefill lane, running cap and batch-dependent TPOT); the router in front sends each
arriving request to one prefix cache. With DP attention an instance has a cache per rank
(``ranks``), sharing its prefill lane and decode batch; a disaggregated instance is that
prefill side plus a decode pool (:class:`~toolkit.replay.tiers.config.DecodePool`) the
request moves to when its prefill ends (``docs/cluster.md``). It is
:func:`toolkit.replay.tiers.loop.event_loop`, the same compiled loop a single-instance
replay runs (one instance *is* that replay, event for event: ``tests/test_cluster.py``
checks it request by request).

Routers (``docs/cluster.md`` has the sources and what each sees):

* ``round-robin``: arrival ``k`` goes to instance ``k mod N``;
* ``least-load``: fewest outstanding requests (routed, not finished), lowest index on ties;
* ``cache-aware``: SGLang's router (sgl-model-gateway ``cache_aware`` policy,
  ``sgl-router/src/policies/cache_aware.rs``): when loads are imbalanced (max - min >
  ``balance_abs_threshold`` and max > ``balance_rel_threshold`` x min) the least loaded;
  else the instance whose *router-side* tree matches the longest prefix if the match
  exceeds ``cache_threshold`` of the prompt, else the instance with the smallest tree. The
  router's tree holds every prompt it sent to an instance and never forgets (SGLang's
  default ``max_tree_size`` of 2^26 characters is not reached by the bundled traces);
* ``kv-router``: Dynamo's KV router (``lib/llm/src/kv_router/scheduler.rs``): lowest
  ``overlap_score_weight x prefill_blocks + decode_blocks``, where the overlap is the
  instance's *actual* device-cache prefix (KV events), prefill blocks are the uncached
  tokens of this request plus those routed there and not yet admitted, and decode blocks
  the prompt blocks of the instance's outstanding requests plus this one's new blocks.

Service times come from the caller (:func:`toolkit.cost.from_replay.run_cluster`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from toolkit.config import config_json
from toolkit.errors import ToolkitError
from toolkit.replay.tiers.config import (
    ROUTERS,
    UNBOUNDED,
    ClusterReplayConfig,
    ServiceTimes,
    TierService,
)
from toolkit.replay.tiers.loop import ClusterRoute
from toolkit.replay.tiers.run import (
    PageStream,
    _open_arrivals,
    block_stream,
    capacities,
    page_stream,
    run_kernel,
)
from toolkit.schema import CLUSTER_REQUESTS, CLUSTER_RUNS
from toolkit.store import Store
from toolkit.version import __version__

#: The cluster_runs keys the issue names, in its order (the row has more after them).
RUN_KEYS = ("run_id", "instances", "router", "users", "rate_rps", "device_hit_tokens",
            "host_hit_tokens", "storage_hit_tokens", "gpu_hit_share", "host_hit_share",
            "storage_hit_share", "p50_ttft_s", "p90_ttft_s", "median_tpot_s", "tput_per_gpu",
            "gpus")


@dataclass(frozen=True)
class ClusterReplayResult:
    """A cluster run's ``cluster_runs`` row (a dict) and its ``cluster_requests`` rows."""

    summary: dict[str, Any]
    requests: pa.Table

    @property
    def runs(self) -> pa.Table:
        return pa.Table.from_pylist([self.summary], schema=CLUSTER_RUNS)


def stream_for(store: Store, cfg: ClusterReplayConfig) -> PageStream:
    """The trace as the instances' cache sees it (independent of instances, router and
    load, so one stream serves a whole instance search)."""
    t = cfg.tiers
    reqs = store.read("requests", t.trace)
    if t.engine_semantics == "vllm":
        return block_stream(reqs, t.block_tokens)
    return page_stream(reqs, t.page_tokens, t.radix_semantics)


def route_of(cfg: ClusterReplayConfig, ps: PageStream, svc: ServiceTimes | None = None,
             decode: tuple[int, ServiceTimes] | None = None) -> ClusterRoute:
    """The loop's router and topology for ``cfg`` (block size: the stream's page): its
    prefix caches (instances x ranks) and, when disaggregated, the prefill side's KV
    transfer (``svc``) and the decode pools' ``(KV tokens, service times)``."""
    base = dict(
        instances=cfg.caches, router=ROUTERS[cfg.router], ranks=cfg.ranks,
        affinity_ttl_s=float(cfg.session_affinity_ttl_s),
        params=(cfg.cache_threshold, float(cfg.balance_abs_threshold),
                cfg.balance_rel_threshold, cfg.overlap_score_weight, float(ps.page_tokens)))
    if cfg.decode is None or decode is None:
        return ClusterRoute(**base)
    tokens, dsvc = decode
    xfer = svc.kv_transfer_s_per_token if svc is not None else 0.0
    return ClusterRoute(**base, disagg=True, transfer_s=(0.0, xfer), decode_tokens=tokens,
                        decode_max_running=cfg.decode.max_running,
                        decode_tpot_s=dsvc.tpot_by_batch_s)


def _arrivals(store: Store, cfg: ClusterReplayConfig, ps: PageStream) -> np.ndarray:
    t = cfg.tiers
    if t.concurrency is not None:
        return np.zeros(0)
    if cfg.rate_rps is None:
        return _open_arrivals(store, t, ps)
    rel = ps.arrival_s - ps.arrival_s[0]
    span = float(rel[-1]) if rel.size else 0.0
    if rel.size < 2 or span <= 0:
        raise ToolkitError(f"trace {t.trace!r}: all requests arrive at once; --rate needs "
                           "a span of arrival times to rescale")
    recorded = (rel.size - 1) / span
    return rel * (recorded / cfg.rate_rps)


def _watch(prog: np.ndarray, total: int, enabled: bool | None, label: str) -> Any:
    """A progress bar fed from ``prog[0]`` (written by the kernel, which runs without the
    GIL) by a polling thread; returns a stop function."""
    from toolkit.runtime.progress import progress

    stop = threading.Event()
    cm = progress(total, label, enabled, unit="req")
    bar = cm.__enter__()

    def poll() -> None:
        seen = 0
        while not stop.wait(0.25):
            now = int(prog[0])
            if now > seen:
                bar.update(now - seen)
                seen = now
        now = int(prog[0])
        if now > seen:
            bar.update(now - seen)

    th = threading.Thread(target=poll, daemon=True)
    th.start()

    def finish() -> None:
        stop.set()
        th.join()
        cm.__exit__(None, None, None)

    return finish


def decode_tokens(cfg: ClusterReplayConfig, decode: TierService) -> int:
    """KV tokens one decode pool holds: ``cfg.decode.device_tokens``, else its GPUs' free
    HBM (each DP-attention rank its own pool; else one GPU's, every GPU holding every
    token)."""
    d = cfg.decode
    if d is None:
        return UNBOUNDED
    if d.device_tokens is not None:
        return int(d.device_tokens)
    per = int(decode.default_device_tokens())
    return per * (d.gpus if d.dp_attention else 1)


def replay_cluster(store: Store, cfg: ClusterReplayConfig, service: TierService, *,
                   decode: TierService | None = None, stream: PageStream | None = None,
                   progress: bool | None = False) -> ClusterReplayResult:
    """Replay ``cfg`` with ``service``'s per-instance times (the prefill side's when
    disaggregated, ``decode``'s for the decode pools); nothing priced or saved.

    ``progress``: None shows a bar on a terminal (``toolkit.runtime.progress``), False
    never. Pass ``stream`` (:func:`stream_for`) to reuse one flattened trace.

    Raises:
        ValueError: a disaggregated ``cfg`` without a ``decode`` service.
    """
    t = cfg.tiers
    ps = stream if stream is not None else stream_for(store, cfg)
    want = "vllm" if t.engine_semantics == "vllm" else t.radix_semantics
    if ps.semantics != want:
        raise ValueError(f"stream is for {ps.semantics} semantics, config asks {want}")
    if cfg.decode is not None and decode is None:
        raise ValueError("a disaggregated cluster replay needs the decode pool's service times")
    n = max(1, ps.prompt.size)
    max_batch = min(t.concurrency or (t.max_running or 1024), n)
    svc = service.times(int(ps.prompt.mean()), max_batch)
    caps = capacities(t, service, ps.page_tokens)
    t_open = _arrivals(store, cfg, ps)
    dec = None
    if cfg.decode is not None and decode is not None:
        d_tok = decode_tokens(cfg, decode)
        d_batch = min(t.concurrency or (cfg.decode.max_running or 4096), n)
        dec = (d_tok, decode.times(int(ps.prompt.mean()), d_batch))
    route = route_of(cfg, ps, svc, dec)
    finish = _watch(route.prog, int(ps.prompt.size), progress,
                    f"replay cluster x{cfg.instances}") if progress is not False else None
    try:
        out = run_kernel(t, ps, svc, caps, t_open, route)
    finally:
        if finish is not None:
            finish()
    return _assemble(cfg, ps, svc, caps, out, t_open, dec)


def _q(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q))


def layout_text(cfg: ClusterReplayConfig) -> str:
    """The deployment in ``--layout``'s words: ``tpN`` (tensor-parallel over N GPUs), ``dpN``
    (DP attention over N GPUs, expert-parallel MoE), or ``disagg:SIDE/SIDE`` (prefill side,
    decode pool; each ``tpN`` or ``dpN``); ``+mtp`` when the decode runs MTP."""
    a = cfg.tiers.assumptions
    side = f"{'dp' if a.dp_attention else 'tp'}{a.gpus_per_replica}"
    if cfg.decode is None:
        return side + ("+mtp" if a.mtp else "")
    d = cfg.decode
    return (f"disagg:{side}/{'dp' if d.dp_attention else 'tp'}{d.gpus}"
            + ("+mtp" if d.mtp else ""))


def _assemble(cfg: ClusterReplayConfig, ps: PageStream, svc: Any, caps: tuple[int, int, int],
              out: dict[str, Any], t_open: np.ndarray,
              dec: tuple[int, Any] | None = None) -> ClusterReplayResult:
    t = cfg.tiers
    run_id = cfg.run_id
    n = ps.prompt.size
    computed = np.maximum(ps.prompt - out["dev"] - out["host"] - out["sto"], 0)
    ttft = out["first"] - out["arr"]
    wait = out["adm"] - out["arr"]
    steps = ps.output - 1
    tpot = np.where(steps > 0, (out["fin"] - out["first"]) / np.maximum(steps, 1), np.nan)
    sid = ps.session_id
    cache = out["inst"].astype(np.int32)
    dinst = out["dinst"].astype(np.int32)
    reqs = pa.table({
        "run_id": pa.array([run_id] * n, pa.string()),
        "request_id": ps.request_id,
        "session_id": pa.array(sid, mask=sid < 0),
        "turn": pa.array(ps.turn.astype(np.int32), mask=sid < 0),
        "instance": cache // cfg.ranks,
        "arrival_s": out["arr"], "admit_s": out["adm"], "first_token_s": out["first"],
        "finish_s": out["fin"], "prompt_tokens": ps.prompt, "output_tokens": ps.output,
        "device_hit_tokens": out["dev"], "host_hit_tokens": out["host"],
        "storage_hit_tokens": out["sto"], "computed_tokens": computed,
        "queue_wait_s": wait, "ttft_s": ttft,
        "tpot_s": pa.array(tpot, mask=np.isnan(tpot)),
        "running_at_admit": out["batch"],
        "rank": cache % cfg.ranks, "prefill_end_s": out["pre"],
        "decode_instance": pa.array(dinst, mask=dinst < 0),
    }, schema=CLUSTER_REQUESTS)
    prompt = int(ps.prompt.sum())
    output = int(ps.output.sum())
    dev, host, sto = (int(out[k].sum()) for k in ("dev", "host", "sto"))

    def share(x: int) -> float:
        return x / prompt if prompt else 0.0

    makespan = max(float(np.max(out["fin"])) - float(np.min(out["arr"])), 1e-12)
    gpus = cfg.gpus
    if t.concurrency is not None:
        rate = n / makespan
        arrivals = "closed"
    else:
        span = float(t_open[-1] - t_open[0]) if n > 1 else 0.0
        rate = (n - 1) / span if span > 0 else 0.0
        arrivals = f"rate:{cfg.rate_rps:g}" if cfg.rate_rps is not None else t.arrivals
    tp_ok = tpot[~np.isnan(tpot)]
    per_inst = np.bincount(cache // cfg.ranks, minlength=cfg.instances)
    # a disaggregated request's wait for a decode slot: admitted at first token - transfer
    xfer = svc.kv_transfer_s_per_token * ps.prompt
    dwait = (out["first"] - xfer - out["pre"]) if cfg.decode is not None else None
    summary: dict[str, Any] = {
        "run_id": run_id, "instances": cfg.instances, "router": cfg.router,
        "users": t.concurrency, "rate_rps": float(rate),
        "device_hit_tokens": dev, "host_hit_tokens": host, "storage_hit_tokens": sto,
        "gpu_hit_share": share(dev), "host_hit_share": share(host),
        "storage_hit_share": share(sto),
        "p50_ttft_s": _q(ttft, 0.5), "p90_ttft_s": _q(ttft, 0.9),
        "median_tpot_s": float(np.median(tp_ok)) if tp_ok.size else None,
        "tput_per_gpu": (prompt + output) / makespan / gpus, "gpus": gpus,
        "trace": t.trace, "hardware": t.hardware, "model": t.model,
        "engine_semantics": t.engine_semantics,
        "gpus_per_instance": cfg.gpus_per_instance, "arrivals": arrivals,
        "requests": int(n), "prompt_tokens": prompt, "output_tokens": output,
        "computed_tokens": int(computed.sum()), "overall_hit_share": share(dev + host + sto),
        "p99_ttft_s": _q(ttft, 0.99),
        "p90_tpot_s": _q(tp_ok, 0.9) if tp_ok.size else None,
        "mean_queue_wait_s": float(wait.mean()), "makespan_s": makespan,
        "output_tokens_per_s_per_gpu": output / makespan / gpus,
        "device_capacity_tokens": caps[0], "host_capacity_tokens": caps[1],
        "storage_capacity_tokens": caps[2], "page_tokens": ps.page_tokens,
        "max_instance_share": float(per_inst.max() / max(n, 1)),
        "layout": layout_text(cfg), "ranks_per_instance": cfg.ranks,
        "decode_gpus_per_instance": cfg.decode.gpus if cfg.decode is not None else 0,
        "mean_decode_wait_s": float(np.maximum(dwait, 0.0).mean()) if dwait is not None
        else None,
        "usd_per_gpu_hour": None, "usd_per_hour_total": None,
        "usd_per_million_total_tokens": None, "usd_per_million_output_tokens": None,
        **out["counters"],
        "elapsed_s": out["elapsed_s"], "config_json": config_json(cfg),
        "toolkit_version": __version__,
    }
    return ClusterReplayResult(summary, reqs)


def save_cluster(store: Store, result: ClusterReplayResult) -> None:
    """Write ``cluster_runs`` and ``cluster_requests`` under the run id, all or nothing."""
    store.write_many({"cluster_runs": result.runs, "cluster_requests": result.requests},
                     result.summary["run_id"], replace=True)


def cluster_json(result: ClusterReplayResult) -> dict[str, Any]:
    """The ``--json`` record: the issue's keys first, then the rest (no config)."""
    s = {k: v for k, v in result.summary.items() if k != "config_json"}
    return {**{k: s[k] for k in RUN_KEYS}, **s}


def with_price(result: ClusterReplayResult, usd_per_gpu_hour: float,
               usd_per_million: Any) -> ClusterReplayResult:
    """Fill the price columns: ``usd_per_million(price, tokens/s/GPU)`` is the caller's
    pricing function (the replay knows no prices)."""
    s = result.summary
    tput = s["tput_per_gpu"]
    out_tput = s["output_tokens_per_s_per_gpu"]
    priced = {
        **s, "usd_per_gpu_hour": usd_per_gpu_hour,
        "usd_per_hour_total": usd_per_gpu_hour * s["gpus"],
        "usd_per_million_total_tokens": float(usd_per_million(usd_per_gpu_hour, tput))
        if tput > 0 else None,
        "usd_per_million_output_tokens": float(usd_per_million(usd_per_gpu_hour, out_tput))
        if out_tput > 0 else None,
    }
    return replace(result, summary=priced)


__all__ = ["RUN_KEYS", "ClusterReplayResult", "cluster_json", "decode_tokens", "layout_text",
           "replay_cluster", "route_of", "save_cluster", "stream_for", "with_price"]
