"""Run a tier replay: trace -> page stream -> the compiled loop -> ``tier_runs`` rows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit.config import config_json
from toolkit.errors import ToolkitError
from toolkit.replay.keys import dense_ids
from toolkit.replay.tiers.config import (
    POLICY_CODES,
    UNBOUNDED,
    WRITE_CODES,
    ServiceTimes,
    TierReplayConfig,
    TierService,
)
from toolkit.replay.tiers.loop import C_OVER, COUNTERS, ClusterRoute
from toolkit.replay.tiers.page import simulate_page, simulate_page_cluster
from toolkit.replay.tiers.pieces import radix_pieces, sub_pages
from toolkit.replay.tiers.radix import simulate_radix, simulate_radix_cluster
from toolkit.replay.tiers.vllm_blocks import OFFLOAD_CODES, simulate_vllm
from toolkit.schema import TIER_REQUESTS, TIER_RUNS
from toolkit.store import Store
from toolkit.version import __version__

SUMMARY_KEYS = (
    "gpu_hit_rate", "host_hit_rate", "storage_hit_rate", "overall_hit_rate",
    "p50_ttft_s", "p90_ttft_s",
)
TOKEN_KEYS = ("prompt_tokens", "gpu_hit_tokens", "host_hit_tokens", "storage_hit_tokens")



@dataclass(frozen=True)
class PageStream:
    """A request timeline as pages, in replay order (see :func:`page_stream`)."""

    keys: np.ndarray  # dense page ids, one per (request, page)
    n_keys: int
    tokens: np.ndarray  # tokens each page covers
    starts: np.ndarray
    lengths: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    arrival_s: np.ndarray  # trace times (sorted)
    request_id: np.ndarray
    session_id: np.ndarray  # -1 where the trace has none
    turn: np.ndarray
    page_tokens: int
    semantics: str = "page"
    key_tokens: np.ndarray | None = None  # sglang: tokens per piece id
    parent: np.ndarray | None = None  # sglang: parent piece per piece id (-1: root)


def page_stream(requests: pa.Table, page_tokens: int | None = None,
                semantics: str = "sglang", flag: str = "--page-tokens") -> PageStream:
    """Sort by (arrival, request id), flatten the hashes, regroup blocks into pages.

    A page of ``m`` blocks is keyed by its last block's chained hash (which identifies
    the whole prefix) and covers the tokens of its blocks; a page smaller than a block
    is a sub-page of it. ``semantics="sglang"`` cuts page-aligned prompts into radix
    pieces instead (:func:`toolkit.replay.tiers.pieces.radix_pieces`).

    ``flag``: the option that set ``page_tokens``, named when it does not fit the trace.

    Raises:
        ToolkitError: no hashes, ``page_tokens`` neither divides nor is a multiple of the
            block size, or (sglang) the hashes are not chained.
    """
    order = pc.sort_indices(requests, [("arrival_s", "ascending"), ("request_id", "ascending")])
    t = requests.take(order)
    hashes = t.column("block_hashes").combine_chunks()
    lengths = pc.list_value_length(hashes).to_numpy(zero_copy_only=False).astype(np.int64)
    if lengths.sum() == 0:
        raise ToolkitError("trace has no prefix-block hashes; tier replay needs them")
    bt_col = t.column("block_tokens").drop_null()
    block = int(bt_col[0].as_py()) if len(bt_col) else 0
    flat = hashes.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    prompt = t.column("input_tokens").to_numpy().astype(np.int64)
    page = page_tokens or block
    if page % block and block % page:
        raise ToolkitError(
            f"{flag} {page} neither divides nor is a multiple of the trace's "
            f"{block}-token blocks; regenerate a synthetic trace with that page size instead"
        )
    m = page // block
    tokens = np.zeros(0, np.int64)
    if m > 1 or (semantics != "sglang" and page == block):
        starts = np.zeros(lengths.size, np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        req_of = np.repeat(np.arange(lengths.size), lengths)
        pos = np.arange(flat.size, dtype=np.int64) - starts[req_of]
        tokens = np.clip(prompt[req_of] - block * pos, 0, block)
    if m > 1:
        first = pos % m == 0
        grp = np.flatnonzero(first)
        last = np.append(grp[1:], flat.size) - 1
        tokens = np.add.reduceat(tokens, grp)
        flat = flat[last]
        lengths = np.bincount(req_of[grp], minlength=lengths.size).astype(np.int64)
    extra: dict[str, Any] = {}
    if semantics == "sglang":
        pcs = radix_pieces(flat, lengths, prompt, max(block, page), page)
        keys, n_keys, lengths = pcs["keys"], pcs["n_keys"], pcs["lengths"]
        tokens = pcs["key_tokens"][keys]
        extra = {"semantics": "sglang", "key_tokens": pcs["key_tokens"],
                 "parent": pcs["parent"]}
    else:
        if page < block:
            flat, tokens, lengths = sub_pages(flat, lengths, prompt, block, page)
        keys, n_keys = dense_ids(flat)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])

    def col(name: str, fill: int) -> np.ndarray:
        return t.column(name).fill_null(fill).to_numpy().astype(np.int64)

    return PageStream(
        keys=keys, n_keys=n_keys, tokens=tokens.astype(np.int64),
        starts=starts, lengths=lengths, prompt=prompt, output=col("output_tokens", 0),
        arrival_s=t.column("arrival_s").to_numpy().astype(np.float64),
        request_id=col("request_id", 0), session_id=col("session_id", -1),
        turn=col("turn", 0), page_tokens=page, **extra,
    )


def block_stream(requests: pa.Table, block_tokens: int = 16) -> PageStream:
    """vLLM's view of a timeline: each prompt's full ``block_tokens`` blocks, keyed by
    their chained hash (a partial last block is never hashed, so it is left out).

    ``lengths`` counts full blocks; the partial block still takes a slot while its
    request runs (:func:`run_kernel` counts it from the prompt length).
    """
    from dataclasses import replace

    ps = page_stream(requests, block_tokens, "page", "--block-tokens")
    full = ps.tokens == block_tokens
    req_of = np.repeat(np.arange(ps.lengths.size), ps.lengths)
    lengths = np.bincount(req_of[full], minlength=ps.lengths.size).astype(np.int64)
    keys, n_keys = dense_ids(ps.keys[full])
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return replace(ps, keys=keys, n_keys=n_keys, tokens=ps.tokens[full], starts=starts,
                   lengths=lengths, semantics="vllm")


def _sessions(ps: PageStream) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Closed-loop order: sessions by first arrival, turns in order; think gaps per turn."""
    n = ps.prompt.size
    sid = np.where(ps.session_id >= 0, ps.session_id, -1 - np.arange(n))  # lone requests
    order = np.lexsort((ps.turn, ps.arrival_s, sid))
    s_sorted = sid[order]
    brk = np.flatnonzero(np.diff(s_sorted)) + 1
    sess_start = np.concatenate([[0], brk]).astype(np.int64)
    sess_len = np.diff(np.append(sess_start, n)).astype(np.int64)
    first_t = ps.arrival_s[order][sess_start]
    sess_order = np.argsort(first_t, kind="stable")
    req = np.concatenate([order[sess_start[s]: sess_start[s] + sess_len[s]] for s in sess_order])
    new_len = sess_len[sess_order]
    new_start = np.zeros_like(new_len)
    np.cumsum(new_len[:-1], out=new_start[1:])
    gap = np.zeros(n)
    nxt = req[1:]
    same = np.ones(n - 1, bool)
    same[new_start[1:] - 1] = False
    gap[req[:-1][same]] = np.maximum(ps.arrival_s[nxt[same]] - ps.arrival_s[req[:-1][same]], 0)
    return req.astype(np.int64), new_start, new_len, gap


def _open_arrivals(store: Store, cfg: TierReplayConfig, ps: PageStream) -> np.ndarray:
    t = ps.arrival_s - ps.arrival_s[0]
    if cfg.arrivals.startswith("scaled:"):
        return t / float(cfg.arrivals[7:])
    if cfg.arrivals.startswith("from:"):
        other = np.sort(store.read("requests", cfg.arrivals[5:]).column("arrival_s").to_numpy())
        gaps = np.diff(other) if other.size > 1 else np.zeros(1)
        reps = int(np.ceil(max(t.size - 1, 1) / max(gaps.size, 1)))
        return np.concatenate([[0.0], np.cumsum(np.tile(gaps, reps)[: t.size - 1])])
    return t


def capacities(cfg: TierReplayConfig, service: TierService,
               page_tokens: int | None = None) -> tuple[int, int, int]:
    """(device, host, storage) capacities in tokens; -1 unbounded. vLLM semantics have
    no storage tier (0), and a host tier only with an ``offload_policy``. The host pool is
    :meth:`TierReplayConfig.host_pool_tokens` at the stream's ``page_tokens`` (default
    ``cfg.page_tokens``): SGLang pads a ratio-sized pool by one page."""
    dev = cfg.device_tokens
    if dev is None:
        dev = service.default_device_tokens()
    if cfg.engine_semantics == "vllm" and cfg.offload_policy == "none":
        return int(dev), 0, 0
    host = cfg.host_pool_tokens(int(dev), page_tokens)
    if cfg.engine_semantics == "vllm":
        return int(dev), int(host), 0
    return int(dev), int(host), int(cfg.storage_tokens)


def _pages(tokens: int, page: int, big: int) -> int:
    return big if tokens == UNBOUNDED else tokens // page


def _schedule(cfg: TierReplayConfig, ps: PageStream) -> tuple[np.ndarray, ...]:
    """Closed-loop sessions; ``sequential`` is one session of every request, one user."""
    r = ps.prompt.size
    if cfg.sequential:
        return (np.arange(r, dtype=np.int64), np.zeros(1, np.int64),
                np.array([r], np.int64), np.zeros(r))
    if cfg.concurrency is not None:
        return _sessions(ps)
    z = np.zeros(0, np.int64)
    return z, z, z, np.zeros(r)


def run_kernel(cfg: TierReplayConfig, ps: PageStream, svc: ServiceTimes,
               caps: tuple[int, int, int], t_open: np.ndarray,
               cluster: ClusterRoute | None = None) -> dict[str, Any]:
    """Call the compiled loop; returns its per-request arrays, counters and integrals.

    ``cluster`` runs that many instances behind its router (the same loop; ``None`` is
    one instance, today's tier replay). ``out["inst"]`` holds each request's cache;
    ``out["dinst"]`` its decode pool (-1 unless disaggregated) and ``out["pre"]`` its
    prefill's end. A disaggregated prefill cache holds no decode slots (the decode pool
    does), as a sequential replay holds none.
    """
    r = ps.prompt.size
    cl = cluster or ClusterRoute()
    page = ps.page_tokens
    closed = cfg.concurrency is not None or cfg.sequential
    sess_req, sess_start, sess_len, gap = _schedule(cfg, ps)
    out = {k: np.zeros(r, np.int64) for k in ("dev", "host", "sto", "host_pages")}
    out |= {k: np.full(r, -1.0) for k in ("arr", "adm", "first", "fin")}
    out["batch"] = np.zeros(r, np.int32)
    out["inst"] = np.zeros(r, np.int32)
    cnt = np.zeros(len(COUNTERS), np.int64)
    areas = np.zeros(2)
    conc = 1 if cfg.sequential else int(cfg.concurrency or 0)
    sched = (closed, t_open, conc, sess_req, sess_start, sess_len, gap, int(cfg.max_running))
    coef = np.array([svc.prefill_s_per_token, svc.prefill_s_per_token_context,
                     svc.host_fixed_s, svc.host_s_per_token, svc.storage_fixed_s,
                     svc.storage_s_per_token], np.float64)
    arrays = tuple(out[k] for k in ("dev", "host", "sto", "arr", "adm", "first", "fin",
                                    "batch", "host_pages", "inst"))
    route = cl.kernel_args(ps)
    out["dinst"], out["pre"] = route[-1][5], route[-1][6]
    n_inst = int(cl.instances)
    no_decode = cfg.sequential or cl.disagg
    rules = (POLICY_CODES[cfg.policy], WRITE_CODES[cfg.write_policy],
             cfg.write_through_threshold)
    t0 = time.perf_counter()
    if ps.semantics == "vllm":
        bt = page
        held = ps.prompt if no_decode else ps.prompt + ps.output
        nblocks = -(-held // bt)
        hitcap = np.minimum(ps.lengths, np.maximum(ps.prompt - 1, 0) // bt)
        big = int(nblocks.sum() + 1)
        # vLLM's pool: device_tokens // block blocks, less the null block
        usable = big if caps[0] == UNBOUNDED else max(caps[0] // bt - 1, 0)
        hcap = 0 if cfg.offload_policy == "none" else (
            ps.n_keys + 1 if caps[1] == UNBOUNDED else caps[1] // bt)
        lim = np.array([ps.n_keys, usable, hcap, 0, bt,
                        OFFLOAD_CODES.get(cfg.offload_policy, 0), 0], np.int64)
        makespan = simulate_vllm(
            ps.keys, ps.starts, hitcap, ps.lengths, nblocks, ps.prompt, ps.output, lim,
            sched, coef, svc.tpot_by_batch_s, arrays, cnt, areas, route, n_inst,
        )
        over = cnt[C_OVER]
        cnt //= page
        cnt[C_OVER] = over
        out["host_pages"] //= page
        areas /= page
    elif ps.semantics == "sglang":
        aligned = ps.prompt // page * page
        rest = ps.prompt - aligned + (0 if no_decode else ps.output)
        trans = -(-rest // page) * page  # partial page (+ decode) slots, whole pages
        big = int(ps.prompt.sum() + trans.sum() + 1)
        dev, host, sto = (big if c == UNBOUNDED else c for c in caps)
        lim = np.array([ps.n_keys, dev, host, sto, *rules], np.int64)
        sim = simulate_radix if n_inst == 1 else simulate_radix_cluster
        makespan = sim(
            ps.keys, ps.starts, ps.lengths, ps.key_tokens, ps.parent, trans, ps.prompt,
            ps.output, lim, sched, coef, svc.tpot_by_batch_s, arrays, cnt, areas, route,
            n_inst, r if n_inst == 1 else cl.heap_requests(r),
        )
        # the radix kernel counts tokens; report pages like the page kernel
        over = cnt[C_OVER]
        cnt //= page
        cnt[C_OVER] = over
        out["host_pages"] //= page
        areas /= page
    else:
        dpages = np.zeros(r, np.int64) if no_decode else -(-ps.output // page)
        big = int(ps.n_keys + dpages.sum() + 1)
        dev, host, sto = (_pages(c, page, big) for c in caps)
        lim = np.array([ps.n_keys, dev, host, sto, *rules], np.int64)
        sim = simulate_page if n_inst == 1 else simulate_page_cluster
        makespan = sim(
            ps.keys, ps.starts, ps.lengths, ps.tokens, dpages, ps.prompt, ps.output, lim,
            sched, coef, svc.tpot_by_batch_s, arrays, cnt, areas, route, n_inst,
        )
    out["elapsed_s"] = time.perf_counter() - t0
    out["makespan_s"] = float(makespan)
    out["counters"] = dict(zip(COUNTERS, cnt.tolist(), strict=True))
    out["areas"] = areas
    return out


@dataclass(frozen=True)
class TierReplayResult:
    """A run's summary (a ``tier_runs`` row as a dict) and its per-request table."""

    summary: dict[str, Any]
    requests: pa.Table

    @property
    def runs(self) -> pa.Table:
        return pa.Table.from_pylist([self.summary], schema=TIER_RUNS)


def replay_tiers(
    store: Store,
    cfg: TierReplayConfig,
    service: TierService,
    *,
    stream: PageStream | None = None,
) -> TierReplayResult:
    """Replay ``cfg`` with ``service``'s times; nothing is priced or saved.

    The summary's price columns are None: the caller prices the run
    (:func:`toolkit.cost.from_replay.price_tier_run`) and saves it (:func:`save_result`).
    Pass ``stream`` to reuse one flattened trace across a sweep.
    """
    vllm = cfg.engine_semantics == "vllm"
    if stream is not None:
        ps = stream
    elif vllm:
        ps = block_stream(store.read("requests", cfg.trace), cfg.block_tokens)
    else:
        ps = page_stream(store.read("requests", cfg.trace), cfg.page_tokens,
                         cfg.radix_semantics)
    want = "vllm" if vllm else cfg.radix_semantics
    pages = cfg.block_tokens if vllm else cfg.page_tokens
    if pages is not None and pages != ps.page_tokens:
        raise ValueError(f"stream has {ps.page_tokens}-token pages, config asks {pages}")
    if ps.semantics != want:
        raise ValueError(f"stream is for {ps.semantics} semantics, config asks {want}")
    # a batch never holds more requests than the trace has: the TPOT table stops there
    max_batch = min(cfg.concurrency or (cfg.max_running or 1024), max(1, ps.prompt.size))
    svc = service.times(int(ps.prompt.mean()), max_batch)
    caps = capacities(cfg, service, ps.page_tokens)
    closed = cfg.concurrency is not None or cfg.sequential
    t_open = np.zeros(0) if closed else _open_arrivals(store, cfg, ps)
    out = run_kernel(cfg, ps, svc, caps, t_open)
    return _assemble(cfg, ps, svc, caps, out)


def _assemble(cfg, ps, svc, caps, out) -> TierReplayResult:
    run_id = cfg.run_id
    computed = ps.prompt - out["dev"] - out["host"] - out["sto"]
    ttft = out["first"] - out["arr"]
    steps = ps.output - 1
    tpot = np.where(steps > 0, (out["fin"] - out["first"]) / np.maximum(steps, 1), np.nan)
    reqs = pa.table({
        "run_id": pa.array([run_id] * ps.prompt.size, pa.string()),
        "trace": pa.array([cfg.trace] * ps.prompt.size, pa.string()),
        "request_id": ps.request_id,
        "session_id": pa.array(ps.session_id, mask=ps.session_id < 0),
        "turn": pa.array(ps.turn.astype(np.int32), mask=ps.session_id < 0),
        "arrival_s": out["arr"], "admit_s": out["adm"], "first_token_s": out["first"],
        "finish_s": out["fin"], "prompt_tokens": ps.prompt, "output_tokens": ps.output,
        "device_tokens": out["dev"], "host_tokens": out["host"], "storage_tokens": out["sto"],
        "computed_tokens": computed, "ttft_s": ttft,
        "tpot_s": pa.array(tpot, mask=np.isnan(tpot)),
        "running_at_admit": out["batch"],
        "host_used_tokens": out["host_pages"] * ps.page_tokens,
    }, schema=TIER_REQUESTS)
    prompt = int(ps.prompt.sum())
    output = int(ps.output.sum())
    sums = {k: int(out[k].sum()) for k in ("dev", "host", "sto")}

    def rate(x: int) -> float:
        return x / prompt if prompt else 0.0

    makespan = max(float(np.max(out["fin"])) - float(np.min(out["arr"])), 1e-12)
    g = cfg.assumptions.gpus_per_replica
    tput = (prompt + output) / makespan / g
    out_tput = output / makespan / g
    kvb = svc.kv_bytes_per_token
    tp_ok = tpot[~np.isnan(tpot)]
    summary = {
        "run_id": run_id, "trace": cfg.trace, "hardware": cfg.hardware, "model": cfg.model,
        "arrivals": cfg.arrival_label, "concurrency": cfg.concurrency, "policy": cfg.policy,
        "write_policy": cfg.write_policy, "radix_semantics": cfg.radix_semantics,
        "sequential": cfg.sequential, "page_tokens": ps.page_tokens,
        "device_capacity_tokens": caps[0], "host_capacity_tokens": caps[1],
        "storage_capacity_tokens": caps[2],
        "requests": int(ps.prompt.size), "prompt_tokens": prompt, "output_tokens": output,
        "device_hit_tokens": sums["dev"], "host_hit_tokens": sums["host"],
        "storage_hit_tokens": sums["sto"], "computed_tokens": int(computed.sum()),
        "gpu_hit_rate": rate(sums["dev"]), "host_hit_rate": rate(sums["host"]),
        "storage_hit_rate": rate(sums["sto"]),
        "overall_hit_rate": rate(sums["dev"] + sums["host"] + sums["sto"]),
        "p50_ttft_s": float(np.quantile(ttft, 0.5)), "p90_ttft_s": float(np.quantile(ttft, 0.9)),
        "p99_ttft_s": float(np.quantile(ttft, 0.99)),
        "p50_tpot_s": float(np.quantile(tp_ok, 0.5)) if tp_ok.size else None,
        "p90_tpot_s": float(np.quantile(tp_ok, 0.9)) if tp_ok.size else None,
        "makespan_s": makespan, "tokens_per_s_per_gpu": tput,
        "output_tokens_per_s_per_gpu": out_tput, "usd_per_gpu_hour": None,
        "usd_per_million_total_tokens": None, "usd_per_million_output_tokens": None,
        "host_used_peak_bytes": float(out["counters"]["peak_host_pages"] * ps.page_tokens * kvb),
        "host_used_mean_bytes": float(out["areas"][0] / out["makespan_s"] * ps.page_tokens * kvb)
        if out["makespan_s"] > 0 else 0.0,
        "device_used_mean_bytes": float(out["areas"][1] / out["makespan_s"] * ps.page_tokens * kvb)
        if out["makespan_s"] > 0 else 0.0,
        **out["counters"],
        "elapsed_s": out["elapsed_s"], "config_json": _config_json(cfg),
        "toolkit_version": __version__,
    }
    return TierReplayResult(summary, reqs)


def _config_json(cfg: TierReplayConfig) -> str:
    return config_json(cfg)


def save_result(store: Store, result: TierReplayResult) -> None:
    """Write the run's ``tier_runs`` row and ``tier_requests`` rows under its run id."""
    store.write_many({"tier_runs": result.runs, "tier_requests": result.requests},
                     result.summary["run_id"], replace=True)


def summary_json(result: TierReplayResult) -> dict[str, Any]:
    """The ``--json`` record: the six headline keys first, then the rest (no config)."""
    s = {k: v for k, v in result.summary.items() if k != "config_json"}
    s["gpu_hit_tokens"] = s["device_hit_tokens"]
    return {**{k: s[k] for k in SUMMARY_KEYS}, **{k: int(s[k]) for k in TOKEN_KEYS}, **s}


__all__ = [
    "PageStream", "TierReplayResult", "block_stream", "capacities", "page_stream", "replay_tiers",
    "run_kernel", "save_result", "summary_json",
]
