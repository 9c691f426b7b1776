"""Plan for a load: for each accelerator, the layout and the fewest instances of it that meet
the SLOs at that load at the least cost per hour, decided by the cluster replay
(:func:`toolkit.cost.from_replay.run_cluster`: N instances behind a router, each its own
exact tier cache and serving-model step times), then ranked by $/M at the load.

Why a search and not arithmetic: how many instances a load needs depends on the prefix hits
they get, and those depend on how many instances share the sessions and how the router sends
them (round-robin scatters a session's prefix over instances; a cache-aware router chases
it). A single-instance figure divided into the load is only where the search starts.

The search per plan (:func:`fewest_instances`):

1. a start from one instance's capacity at the front point: ``ceil(users / concurrency)``
   for closed-loop users, ``ceil(rate / (tok/s per instance / (ISL + OSL)))`` for a rate;
2. galloping from it (down by 1, 2, 4, ... while the SLOs hold; up by 1, 2, 4, ... while
   they do not), then bisection between the last miss and the first fit. Every probe is one
   cluster replay; a count probed twice is read from the cache.

Which layout (:func:`plan_for_load`): every layout whose own front meets the target
(:func:`layout_variants`), sized by that search, cheapest instance first; one whose single
instance already costs more per hour than the best sized cannot win and is not sized. Within
one accelerator and memory option the bill is proportional to GPUs, so this is the fewest
GPUs; a small load no longer pays a whole instance of the front's largest layout.

It assumes more instances never serve a load worse (monotone in N); the tests check that
the answer's N - 1 misses and N fits, and that more load never needs fewer GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from toolkit.cost.price import MEMORY_PRICES
from toolkit.hardware import get_hardware

LOAD_KEYS = ("instances", "gpus_total", "host_dram_gb_total", "ssd_gb_total", "users",
             "rate_rps", "router", "binding", "usd_per_hour_total")
"""The keys a plan for a load adds after :data:`toolkit.plan.search.PLAN_KEYS` (the issue's
contract), in this order."""


@dataclass(frozen=True)
class Probe:
    """One cluster replay of the search: ``instances`` of the plan's layout at the load."""

    instances: int
    ok: bool
    misses: tuple[str, ...]  # the SLOs it misses ("p90_ttft_s", "interactivity")
    summary: dict[str, Any]
    result: Any


def load_text(cfg: Any) -> str:
    """The load asked, in words (printed beside the answer)."""
    if cfg.users is not None:
        return f"{cfg.users} closed-loop users (sessions with their think times)"
    if cfg.rate_rps is not None:
        return f"the trace's arrivals rescaled to {cfg.rate_rps:g} requests/s (open loop)"
    scale = cfg.rate_scale if cfg.rate_scale is not None else 1.0
    return f"the trace's arrivals at {scale:g}x the recorded rate (open loop)"


def cluster_config(ctx: Any, ev: dict, instances: int) -> Any:
    """The cluster replay of ``instances`` deployments of ``ev``'s plan at the load: the
    plan's layout with one prefix cache per DP-attention rank (each its layout's per-GPU
    pool and its share of the host DRAM and SSD, the plan's running cap per rank), and, for
    a disaggregated layout, its prefill side holding the caches and its decode pool timed
    as its own layout; the engine and eviction policy, behind the configured router."""
    from toolkit.plan.pool import decode_side
    from toolkit.replay.tiers import TierReplayConfig
    from toolkit.replay.tiers.config import ClusterReplayConfig, DecodePool, ServiceAssumptions

    cfg, c, p = ctx.cfg, ev["candidate"], ev["plan"]
    eng = ev.get("engram")
    pool = ctx.pool(c.hardware, p["layout"], eng["hbm_bytes"] if eng else 0.0)
    lay = pool.layout
    # one cache's share of the host DRAM and SSD (options are per gpus_per_replica GPUs)
    share = lay.cache_gpus / cfg.gpus_per_replica / pool.ranks
    hs_pool = p.get("host_pool_gb") or 0.0
    eng_dram = p.get("engram_dram_gb") or 0.0
    host = ctx.tokens(max(c.host_dram_gb - hs_pool - eng_dram, 0.0) * share)
    decode = None
    if lay.disagg:  # the prefill side: its P GPUs with DPA and EP, as the recipes build it
        g, dpa, ep, mtp = decode_side(lay)
        decode = DecodePool(gpus=g, dp_attention=dpa, expert_parallel=ep, mtp=mtp)
        assume = ServiceAssumptions(gpus_per_replica=lay.cache_gpus, kv_dtype=cfg.kv_dtype,
                                    weight_precision=cfg.precision, engine=c.engine,
                                    dp_attention=lay.cache_dp_attention,
                                    expert_parallel=lay.cache_gpus > 1)
    else:  # the instance: its GPUs, DPA, expert parallelism and MTP, the engine's terms
        assume = ServiceAssumptions(gpus_per_replica=lay.gpus, kv_dtype=cfg.kv_dtype,
                                    weight_precision=cfg.precision, engine=c.engine,
                                    dp_attention=lay.cache_dp_attention,
                                    expert_parallel=_ep(lay.text) > 1, mtp="+MTP" in lay.text)
    tiers = TierReplayConfig(
        cfg.trace, c.hardware, cfg.model, concurrency=cfg.users,
        arrivals=(f"scaled:{cfg.rate_scale:g}" if cfg.rate_scale is not None else "trace"),
        device_tokens=pool.tokens_per_rank, host_tokens=host,
        storage_tokens=ctx.tokens(c.ssd_gb * share), policy=c.policy,
        max_running=p.get("max_running") or 0, price_tier=cfg.price_tier,
        assumptions=assume)
    return ClusterReplayConfig(tiers=tiers, instances=instances, router=cfg.router,
                               rate_rps=cfg.rate_rps, ranks=pool.ranks, decode=decode)


def _ep(text: str) -> int:
    import re

    m = re.search(r"EP(\d+)", text)
    return int(m[1]) if m else 1


def misses(cfg: Any, summary: dict) -> tuple[str, ...]:
    """The SLOs a cluster run misses: p90 TTFT above the bound; median interactivity (1 /
    median TPOT, InferenceX's median tok/s/user) below the target."""
    out = []
    if cfg.max_p90_ttft_s is not None and not summary["p90_ttft_s"] <= cfg.max_p90_ttft_s:
        out.append("p90_ttft_s")
    tpot = summary.get("median_tpot_s")
    if tpot is None or not tpot > 0 or 1.0 / tpot < cfg.interactivity:
        out.append("interactivity")
    return tuple(out)


def start_instances(ctx: Any, ev: dict, recorded_rps: float) -> int:
    """One instance's capacity at the plan's front point divided into the load (the
    search's start, not its answer)."""
    cfg, p = ctx.cfg, ev["plan"]
    if cfg.users is not None:
        return max(1, math.ceil(cfg.users / max(p["concurrency"], 1)))
    rate = cfg.rate_rps if cfg.rate_rps is not None else recorded_rps * (
        cfg.rate_scale if cfg.rate_scale is not None else 1.0)
    per_instance_rps = p["tput_per_gpu"] * p["gpus"] / (ctx.isl + ctx.osl)
    return max(1, math.ceil(rate / per_instance_rps))


def fewest_instances(ctx: Any, ev: dict, recorded_rps: float, *, on_probe: Any = None,
                     start: int | None = None) -> tuple[Probe | None, list[Probe]]:
    """The fewest instances of ``ev``'s plan whose cluster replay meets the SLOs at the
    load (module docstring: the search), and every probe made; ``None`` when even
    ``max_instances`` (or a count past which the SLO stops improving) misses."""
    cfg = ctx.cfg
    probes: dict[int, Probe] = {}

    def probe(n: int) -> Probe:
        if n not in probes:
            ccfg = cluster_config(ctx, ev, n)
            res = ctx.cluster(ccfg)
            s = res.summary
            m = misses(cfg, s)
            probes[n] = Probe(n, not m, m, s, res)
            if on_probe is not None:
                on_probe(probes[n])
        return probes[n]

    n0 = min(start or start_instances(ctx, ev, recorded_rps), cfg.max_instances)
    first = probe(n0)
    if first.ok:
        hi, step, lo = n0, 1, 0
        while hi - step >= 1:
            if probe(hi - step).ok:
                hi -= step
                step *= 2
            else:
                lo = hi - step
                break
    else:
        lo, step, hi = n0, 1, None
        while hi is None:
            n = min(lo + step, cfg.max_instances)
            if n == lo:
                break
            pr = probe(n)
            if pr.ok:
                hi = n
            else:
                if _stalled(probes[lo], pr, cfg) and n >= 2 * n0:
                    break
                lo, step = n, step * 2
        if hi is None:
            return None, sorted(probes.values(), key=lambda x: x.instances)
    while hi - lo > 1:  # lo misses (or is 0), hi meets
        mid = (lo + hi) // 2
        if probe(mid).ok:
            hi = mid
        else:
            lo = mid
    return probes[hi], sorted(probes.values(), key=lambda x: x.instances)


def _stalled(a: Probe, b: Probe, cfg: Any) -> bool:
    """More instances (``b``) improved neither missed SLO by 1% over ``a``: the layout cannot
    meet the target at any count (an unloaded instance is already too slow)."""
    def tok(s: dict) -> float:
        t = s.get("median_tpot_s")
        return 1.0 / t if t and t > 0 else 0.0
    better_ttft = b.summary["p90_ttft_s"] < 0.99 * a.summary["p90_ttft_s"]
    better_int = tok(b.summary) > 1.01 * tok(a.summary)
    return not (better_ttft or better_int)


def binding(cfg: Any, best: Probe, probes: list[Probe]) -> str:
    """What binds at the answer: the SLO(s) the count one below misses, or ``one instance``
    when one already meets them (the smallest deployment of the layout is the floor)."""
    if best.instances == 1:
        return "one instance"
    below = next((p for p in probes if p.instances == best.instances - 1), None)
    if below is None or not below.misses:
        return "instances (N - 1 not probed)"
    return "+".join(below.misses)


def usd_per_hour(cfg: Any, ev: dict, instances: int) -> dict[str, float]:
    """The cluster's hourly bill: GPUs at the accelerator's $/GPU-hour, host DRAM and SSD at
    :data:`~toolkit.cost.price.MEMORY_PRICES` (options per ``gpus_per_replica`` GPUs)."""
    c, p = ev["candidate"], ev["plan"]
    gpus = instances * int(p["gpus"])
    dram_gb = c.host_dram_gb * gpus / cfg.gpus_per_replica
    ssd_gb = c.ssd_gb * gpus / cfg.gpus_per_replica
    gpu = gpus * get_hardware(c.hardware).price_usd_per_gpu_hour(cfg.price_tier)
    dram = dram_gb * MEMORY_PRICES["dram"].usd_per_gb_hour
    ssd = ssd_gb * MEMORY_PRICES["ssd"].usd_per_gb_hour
    return {"gpus": gpus, "dram_gb": dram_gb, "ssd_gb": ssd_gb, "gpu": gpu, "dram": dram,
            "ssd": ssd, "total": gpu + dram + ssd}


def load_plan(ctx: Any, ev: dict, best: Probe, probes: list[Probe]) -> dict:
    """``ev``'s plan at the load: the contract's keys from the cluster replay at the fewest
    instances (hit shares, p90 TTFT, throughput, $/M), then :data:`LOAD_KEYS`, then how."""
    cfg, p = ctx.cfg, dict(ev["plan"])
    s = best.summary
    bill = usd_per_hour(cfg, ev, best.instances)
    tok_per_hour = s["tput_per_gpu"] * bill["gpus"] * 3600.0 / 1e6
    usd = bill["total"] / tok_per_hour if tok_per_hour > 0 else math.inf
    # the serving model's band, carried over as the same relative band
    lo_r = p["tput_per_gpu"] / p["tput_per_gpu_high"] if p.get("tput_per_gpu_high") else 1.0
    hi_r = p["tput_per_gpu"] / p["tput_per_gpu_low"] if p.get("tput_per_gpu_low") else 1.0
    front = {k: p[k] for k in ("tput_per_gpu", "p90_ttft_s", "usd_per_mtok_total",
                               "usd_per_mtok_total_low", "usd_per_mtok_total_high",
                               "gpu_hit_share", "host_hit_share", "storage_hit_share")}
    for k in ("p90_ttft_s_low", "p90_ttft_s_high"):  # the front's band, not the cluster's
        if k in p:
            front[k] = p[k]
            p[k] = None
    p.update(gpu_hit_share=s["gpu_hit_share"], host_hit_share=s["host_hit_share"],
             storage_hit_share=s["storage_hit_share"], p90_ttft_s=s["p90_ttft_s"],
             tput_per_gpu=s["tput_per_gpu"], usd_per_mtok_total=usd,
             usd_per_mtok_total_low=usd * min(lo_r, 1.0),
             usd_per_mtok_total_high=usd * max(hi_r, 1.0),
             usd_breakdown={k: bill[k] / tok_per_hour for k in ("gpu", "dram", "ssd")},
             run_ids=[s["run_id"], *p["run_ids"]])
    from toolkit.plan.config import PLAN_KEYS

    out = {k: p.pop(k) for k in PLAN_KEYS}
    out.update(instances=best.instances, gpus_total=bill["gpus"],
               host_dram_gb_total=bill["dram_gb"], ssd_gb_total=bill["ssd_gb"],
               users=s["users"], rate_rps=s["rate_rps"], router=cfg.router,
               binding=binding(cfg, best, probes), usd_per_hour_total=bill["total"])
    out.update(p)
    tpot = s.get("median_tpot_s")
    out.update(cluster_median_interactivity=1.0 / tpot if tpot else None,
               cluster_p50_ttft_s=s["p50_ttft_s"], cluster_run_id=s["run_id"],
               probes=[{"instances": q.instances, "ok": q.ok, "misses": list(q.misses),
                        "p90_ttft_s": q.summary["p90_ttft_s"],
                        "median_tpot_s": q.summary.get("median_tpot_s"),
                        "run_id": q.summary["run_id"]} for q in probes],
               **{f"front_{k}": v for k, v in front.items()})
    return out


def layout_variants(ctx: Any, ev: dict) -> list[dict]:
    """``ev`` with each layout whose own front meets the target at its hit shares
    (:meth:`toolkit.plan.search._Context.layouts`), the front's best among them: copies of
    ``ev`` whose plan runs that layout at the front point that meets the target (its GPUs,
    concurrency, throughput and band; the pool, running-request cap and HiSparse host pool
    that layout's HBM and users give). Cheapest instance first (one instance's $/hour, then
    the layout text): the order the load search sizes them in. A layout whose HiSparse host
    pool and Engram table need more host DRAM than the option gives is left out."""
    cfg, c, p = ctx.cfg, ev["candidate"], ev["plan"]
    base = p["layout"].rsplit(" conc ", 1)[0]
    out = [dict(ev, layout_source="front")]
    eng = ev.get("engram")
    eng_hbm = eng["hbm_bytes"] if eng else 0.0
    eng_dram = p.get("engram_dram_gb") or 0.0
    for a in ctx.layouts(ev):
        if a["layout"].rsplit(" conc ", 1)[0] == base:
            continue
        pool = ctx.pool(c.hardware, a["layout"], eng_hbm)
        if pool.tokens_per_rank <= 0:
            continue
        host_users = max(1, round(a["conc"] * cfg.gpus_per_replica / pool.layout.gpus))
        hs_pool = ctx.host_pool_gb(host_users) if c.buffer else 0.0
        if hs_pool + eng_dram > c.host_dram_gb:
            continue
        max_running = (max(1, int((1.0 - c.reserve) * pool.tokens_per_rank
                                  // (ctx.isl + ctx.osl))) if c.reserve else 0)
        q = dict(p)
        q.update(layout=a["layout"], gpus=int(a["gpus"]), concurrency=int(a["conc"]),
                 tput_per_gpu=a["tput_per_gpu"], tput_per_gpu_low=a["tput_per_gpu_low"],
                 tput_per_gpu_high=a["tput_per_gpu_high"], p90_ttft_s=a["p90_ttft_s"],
                 p90_ttft_s_low=None, p90_ttft_s_high=None,
                 usd_per_mtok_total=p["usd_per_mtok_total"] * p["tput_per_gpu"]
                 / a["tput_per_gpu"],
                 users_per_instance=pool.users_per_rank(a["conc"]), max_running=max_running,
                 host_pool_gb=hs_pool,
                 device_prefix_tokens=(round(c.reserve * pool.tokens_per_rank) if c.reserve
                                       else pool.tokens_per_rank),
                 device_pool_tokens=pool.tokens_per_rank, device_pool_ranks=pool.ranks,
                 device_pool_layout=pool.layout.text)
        for k in ("usd_per_mtok_total_low", "usd_per_mtok_total_high"):
            q[k] = None
        out.append(dict(ev, plan=q, layout_source="front alternative"))
    out.sort(key=lambda v: (usd_per_hour(cfg, v, 1)["total"], v["plan"]["layout"]))
    return out


def plan_for_load(ctx: Any, feasible: list[dict], progress: bool | None = None
                  ) -> tuple[list[dict], list[tuple[dict, list[Probe]]]]:
    """For each accelerator and memory option (host DRAM, SSD), the best ``load_candidates``
    plans at the front (``feasible``, sorted by $/M there), each sized for the load: every
    layout whose own front meets the target (:func:`layout_variants`) by
    :func:`fewest_instances` (warm-started at the count the same layout needed with another
    option), the cheapest per hour kept (ties: $/M at the load, then the layout). Layouts
    go cheapest instance first, and one whose single instance costs more per hour than the
    cheapest sized so far is not sized (it cannot win: a cluster has at least one
    instance). The load plans are sorted by $/M at the load (ties: hardware, then label).

    Every sized evaluation gets ``ev["load"]``: the chosen layout's probes, and the load
    plan (``plan``) or why none (``why``), and ``layouts`` (what each layout needed, or why
    it was not sized); ``ev["plan"]`` stays the plan at the front.

    Returns the sized plans and the ones no count up to the ceiling serves, with their
    probes (the caller names the closest miss when no plan is sized).
    """
    from toolkit.runtime.progress import progress as bar

    cfg = ctx.cfg
    chosen: list[dict] = []
    out: list[dict] = []
    failed: list[tuple[dict, list[Probe]]] = []
    # per accelerator and memory option (host DRAM, SSD), the best at the front whose
    # cluster replays differ (candidates that differ only where the cluster does not look
    # are sized once): more memory options only add plans to size, never drop one
    seen: dict[tuple, set] = {}
    for e in feasible:  # sorted by $/M at the front
        c = e["candidate"]
        group = seen.setdefault((c.hardware, c.host_dram_gb, c.ssd_gb), set())
        if len(group) >= cfg.load_candidates:
            continue
        key = cluster_config(ctx, e, 1)
        if key not in group:
            group.add(key)
            chosen.append(e)
    with bar(len(chosen), f"instance search at {load_text(cfg)}", progress,
             unit="plan") as b:
        starts: dict[tuple, int] = {}  # a layout's answer warm-starts its other options
        for ev in chosen:
            pick: tuple | None = None
            tried: list[dict] = []
            misses_all: list[tuple[dict, list[Probe]]] = []
            for var in layout_variants(ctx, ev):
                lay = (ev["candidate"].hardware, var["plan"]["layout"].rsplit(" conc ", 1)[0])
                one = usd_per_hour(cfg, var, 1)["total"]
                if pick is not None and one > pick[0][0]:
                    tried.append({"layout": var["plan"]["layout"], "sized": False,
                                  "why": f"one instance ${one:.2f}/h > the best "
                                         f"${pick[0][0]:.2f}/h"})
                    continue
                best, probes = fewest_instances(ctx, var, ctx.recorded_rps,
                                                start=starts.get(lay))
                if best is None:
                    misses_all.append((var, probes))
                    tried.append({"layout": var["plan"]["layout"], "sized": False,
                                  "why": "no count up to the ceiling meets the SLOs"})
                    continue
                starts.setdefault(lay, best.instances)
                lp = load_plan(ctx, var, best, probes)
                lp["layout_source"] = var["layout_source"]
                tried.append({"layout": var["plan"]["layout"], "sized": True,
                              "instances": best.instances, "gpus_total": lp["gpus_total"],
                              "usd_per_hour_total": lp["usd_per_hour_total"]})
                rank = (lp["usd_per_hour_total"], lp["usd_per_mtok_total"],
                        var["plan"]["layout"])
                if pick is None or rank < pick[0]:
                    pick = (rank, best, probes, lp)
            if pick is None:
                ev["load"] = {"probes": misses_all[0][1] if misses_all else [],
                              "best": None, "layouts": tried,
                              "why": closest_miss(cfg, misses_all)}
                failed.extend(misses_all)
            else:
                _, best, probes, lp = pick
                lp["layouts_searched"] = tried
                ev["load"] = {"probes": probes, "best": best, "plan": lp, "layouts": tried}
                out.append(ev)
            b.update(1)
    out.sort(key=lambda e: (e["load"]["plan"]["usd_per_mtok_total"],
                            e["candidate"].hardware, e["candidate"].label()))
    return out, failed


def by_hardware(sized: list[dict]) -> list[dict]:
    """One best load plan per accelerator, cheapest first, each with its margin to the next:
    ``ratio_to_next`` (the next one's $/M over this one's) and ``beyond_band`` (this one's
    high $/M is below the next one's low: the win is larger than the serving model's band)."""
    best: dict[str, dict] = {}
    for ev in sized:  # sorted by $/M at the load
        best.setdefault(ev["candidate"].hardware, ev["load"]["plan"])
    rows = sorted(best.values(), key=lambda p: (p["usd_per_mtok_total"], p["hardware"]))
    out = []
    for i, p in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        out.append({
            "hardware": p["hardware"], "rank": p["rank"], "engine": p["engine"],
            "layout": p["layout"], "instances": p["instances"], "gpus_total": p["gpus_total"],
            "host_dram_gb_total": p["host_dram_gb_total"], "ssd_gb_total": p["ssd_gb_total"],
            "usd_per_hour_total": p["usd_per_hour_total"],
            "usd_per_mtok_total": p["usd_per_mtok_total"],
            "usd_per_mtok_total_low": p["usd_per_mtok_total_low"],
            "usd_per_mtok_total_high": p["usd_per_mtok_total_high"],
            "p90_ttft_s": p["p90_ttft_s"], "binding": p["binding"],
            "next_hardware": nxt["hardware"] if nxt else None,
            "ratio_to_next": (nxt["usd_per_mtok_total"] / p["usd_per_mtok_total"]
                              if nxt else None),
            "beyond_band": (p["usd_per_mtok_total_high"] < nxt["usd_per_mtok_total_low"]
                            if nxt else None)})
    return out


def assumptions(ctx: Any) -> list[str]:
    """What the load planning adds to the plan's assumptions."""
    cfg = ctx.cfg
    return [
        f"load: {load_text(cfg)}; recorded rate {ctx.recorded_rps:.4g} requests/s "
        f"({cfg.trace!r}); router {cfg.router!r} in front of the instances",
        "instances: the fewest of the plan's layout (its GPUs per instance) whose cluster "
        "replay (toolkit replay cluster: every instance its own exact tier cache, the router, "
        "the load) meets the SLOs: p90 TTFT <= the bound and median interactivity (1 / "
        "median TPOT) >= the target; searched from one instance's capacity at the front "
        "point by galloping and bisection, assuming more instances never serve a load worse; "
        f"up to {cfg.max_instances} per accelerator",
        f"per accelerator and memory option (host DRAM, SSD) the best {cfg.load_candidates} "
        "plan(s) at the front are sized, each in every layout whose own front meets the "
        "target at the plan's hit shares (cost compare's best layout and the others), each "
        "layout with its own prefix pool, running-request cap and front point; the cheapest "
        "per hour at the load is kept (ties: $/M, then the layout); layouts go cheapest "
        "instance first and one whose single instance costs more per hour than the best "
        "sized so far is not sized (it cannot win)",
        "cluster instance: the layout, timed by the serving model as that layout (DP "
        "attention, expert parallelism, MTP), one prefix cache per DPA rank (its GPU's pool; "
        "the router addresses each rank) or per TP instance; a disaggregated layout is its "
        "prefill side (the P GPUs' caches and prefill lane) and its decode pool (the D GPUs "
        "timed as the decode layout, holding each request's KV while it decodes, filled "
        "after the prefill and the KV transfer); host DRAM and SSD = the options x the "
        "cache-holding GPUs / 8, split over the ranks (docs/cluster.md)",
        "at the load: hit shares, p90 TTFT, tok/s/GPU and $/M are the cluster replay's at "
        "the answer; $/M = usd_per_hour_total / (tok/s/GPU x GPUs x 3600 / 1e6), its band "
        "the serving model's relative band at the front point; usd_per_hour_total = GPUs x "
        "$/GPU-hour + host DRAM and SSD totals x $/GB-hour; the front's figures are kept "
        "as front_*",
        "not modelled at the load: HiSparse and Engram misses in the instances' step times "
        "(the front prices them), the network between router and instances, KV migration "
        "between instances",
    ]


def closest_miss(cfg: Any, failed: list[tuple[dict, list[Probe]]]) -> str:
    """One line: no accelerator meets the SLOs at the load at any instance count up to the
    ceiling; the probe that came closest (smallest relative shortfall)."""
    best, gap = None, math.inf
    for ev, probes in failed:
        for q in probes:
            s = q.summary
            t = s.get("median_tpot_s")
            short = 0.0
            if cfg.max_p90_ttft_s is not None:
                short = max(short, s["p90_ttft_s"] / cfg.max_p90_ttft_s - 1.0)
            short = max(short, cfg.interactivity * t - 1.0 if t else math.inf)
            if short < gap:
                best, gap = (ev, q), short
    if best is None:
        return "no configuration meets the SLOs at the load (no cluster replay ran)"
    ev, q = best
    s = q.summary
    t = s.get("median_tpot_s")
    return (f"no configuration meets {cfg.interactivity:g} tok/s/user with p90 TTFT <= "
            f"{cfg.max_p90_ttft_s} s at {load_text(cfg)}; closest miss: "
            f"{ev['candidate'].label()} {ev['plan']['layout']} x {q.instances} instances: p90 "
            f"TTFT {s['p90_ttft_s']:.2f} s, {1.0 / t if t else 0.0:.1f} tok/s/user "
            f"(misses {', '.join(q.misses)})")


__all__ = ["LOAD_KEYS", "Probe", "assumptions", "binding", "by_hardware", "closest_miss",
           "cluster_config", "fewest_instances", "load_plan", "load_text", "misses",
           "layout_variants", "plan_for_load", "start_instances", "usd_per_hour"]
