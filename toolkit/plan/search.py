"""The capacity planner: which accelerator, layout, concurrency, HBM split, host DRAM, SSD
and eviction policy serve a recorded workload at the lowest $ per million total tokens
within an interactivity and a p90 TTFT target.

Every figure of a printed plan comes from the toolkit's exact machinery, nothing is
re-derived here:

* prefix hit shares per tier: the tier replay (:func:`toolkit.cost.from_replay.run_tiers`)
  of the trace, closed-loop at the plan's users per instance, with the plan's device, host
  and storage capacities and eviction policy;
* HiSparse misses per (request, decode step, layer): the selection replay of the recorded
  selections at the plan's buffer, scaled to the model's top-k as ``cost hisparse`` does;
* step times, TTFT, throughput and its band: ``cost compare``'s front
  (:func:`toolkit.cost.compare.compare`) with the cached and host-loaded prefix shares and
  the misses set on every swept row, so with HiSparse and the host tiers forbidden a plan
  *is* ``cost compare``'s answer on the same workload;
* prices: the accelerator's $/GPU-hour (survey and vintage), DRAM and NVMe $/GB-hour
  (:data:`toolkit.cost.price.MEMORY_PRICES`, each ``survey`` or ``assumption``).

Search: every (hardware, HiSparse buffer, policy, host DRAM, SSD) candidate gets a lower
bound on its $/M (the serving front at the trace's largest possible hit share, that of an
unbounded cache replayed one request at a time, with no host loads or HiSparse misses, plus
the candidate's memory price); candidates are evaluated exactly in order of their bound
until the next bound exceeds the ``top``-th best exact plan. ``exhaustive`` evaluates all.

The hit shares depend on the users per instance and the users on the front point the hit
shares select, so an exact evaluation iterates: replay at ``u`` users, answer, replay at the
answer's users, until they agree (``converged``) or at most :data:`MAX_ROUNDS` rounds.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from toolkit.cost.compare import CompareConfig, compare, engines_for
from toolkit.cost.price import MEMORY_PRICES, usd_per_million_tokens
from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.plan.config import PlanConfig
from toolkit.replay.tiers import TierReplayConfig, page_stream
from toolkit.replay.tiers.config import ServiceAssumptions
from toolkit.serving.tier_service import kv_bytes_per_token
from toolkit.store import Store

MAX_ROUNDS = 4

PLAN_KEYS = (
    "rank", "hardware", "engine", "layout", "gpus", "concurrency", "device_prefix_tokens",
    "hisparse_buffer_tokens", "engram_hbm_gb", "host_dram_gb", "ssd_gb", "policy",
    "gpu_hit_share", "host_hit_share", "storage_hit_share", "interactivity", "p90_ttft_s",
    "tput_per_gpu", "usd_per_mtok_total", "usd_per_mtok_total_low", "usd_per_mtok_total_high",
    "usd_breakdown", "run_ids")
"""The keys of each plan, in order (the issue's contract); extra keys follow them."""


class PlanError(ToolkitError):
    """No configuration meets the targets (the message names the closest miss), or the
    question cannot be planned (unknown trace, selections or names)."""


@dataclass(frozen=True)
class Candidate:
    """One point of the search space (trace-scale HiSparse buffer; ``None`` = off)."""

    hardware: str
    engine: str
    buffer: int | None
    policy: str
    host_dram_gb: float
    ssd_gb: float

    def label(self) -> str:
        hs = f"HiSparse {self.buffer}" if self.buffer else "no HiSparse"
        return (f"{self.hardware} {self.engine}, {hs}, {self.policy}, host "
                f"{self.host_dram_gb:g} GB, SSD {self.ssd_gb:g} GB")


@dataclass(frozen=True)
class PlanResult:
    """What :func:`plan` returns: the ranked plans, every candidate (``evaluated``: exact
    evaluations, then the pruned ones with their bound), and the counts."""

    plans: list[dict[str, Any]]
    evaluated: list[dict[str, Any]]
    searched: int
    evaluated_exactly: int
    feasible: int
    elapsed_s: float
    assumptions: list[str]
    plan_id: str

    def to_json(self) -> dict[str, Any]:
        return {"plans": self.plans, "searched": self.searched,
                "evaluated_exactly": self.evaluated_exactly, "feasible": self.feasible,
                "elapsed_s": self.elapsed_s, "plan_id": self.plan_id,
                "assumptions": self.assumptions}


class _Context:
    """What every evaluation shares: the workload, the stream, caches of replays and
    serving answers (exact inputs as keys, so a repeat is the same figure, not a guess)."""

    def __init__(self, store: Store, cfg: PlanConfig) -> None:
        self.store, self.cfg = store, cfg
        try:
            req = store.read("requests", cfg.trace)
        except Exception as e:
            raise PlanError(f"--trace {cfg.trace!r}: {e}") from None
        if req.num_rows == 0:
            raise PlanError(f"--trace {cfg.trace!r}: no requests in {store.root}")
        self.isl = max(1, round(float(np.mean(req["input_tokens"].to_numpy()))))
        self.osl = max(2, round(float(np.mean(req["output_tokens"].to_numpy()))))
        self.stream = page_stream(req, None, "sglang")
        self.model = get_model(cfg.model)
        self.kvb = kv_bytes_per_token(self.model, cfg.kv_dtype)
        self.assume = ServiceAssumptions(gpus_per_replica=cfg.gpus_per_replica,
                                         kv_dtype=cfg.kv_dtype,
                                         weight_precision=cfg.precision)
        self.tiers: dict[TierReplayConfig, dict] = {}
        self.serve_cache: dict[tuple, dict] = {}
        self.serve_s = 0.0
        self.selections: dict[int, dict] = {}
        self.k = 0
        self.miss_scale = 1.0
        if cfg.selections is not None:
            self._load_selections()

    def _load_selections(self) -> None:
        from toolkit.replay.selections import load_rows

        try:
            self.rows = load_rows(self.store, self.cfg.selections)
        except Exception as e:
            raise PlanError(f"--selections {self.cfg.selections!r}: {e}") from None
        self.k = int(self.rows.k)
        self.miss_scale = self.model.index_topk / self.k

    def selection(self, buffer: int) -> dict:
        """The exact selection replay at ``buffer`` (trace-scale tokens), HiSparse mode,
        LRU (HiSparse's buffer policy)."""
        if buffer not in self.selections:
            from toolkit.replay.selections import SelectionReplayConfig, replay_selections

            scfg = SelectionReplayConfig(self.cfg.selections, "lru", buffer)
            self.selections[buffer] = {"cfg": scfg, **replay_selections(
                self.store, scfg, save=False, rows=self.rows, progress=False)}
        return self.selections[buffer]

    def misses(self, buffer: int | None) -> float:
        """HiSparse host rows per (request, decode step, layer) at the model's top-k: the
        exact replay's mean at ``buffer`` times the k scale (0 without HiSparse)."""
        if not buffer:
            return 0.0
        sel = self.selection(buffer)
        return sel["misses"] / sel["rows"] * self.miss_scale if sel["rows"] else 0.0

    def tier(self, hw: str, policy: str, users: int | None, host_tokens: int,
             storage_tokens: int, *, sequential: bool = False,
             device_tokens: int | None = None) -> dict:
        from toolkit.cost.from_replay import run_tiers

        tcfg = TierReplayConfig(self.cfg.trace, hw, self.cfg.model, concurrency=users,
                                device_tokens=device_tokens, host_tokens=host_tokens,
                                storage_tokens=storage_tokens, policy=policy,
                                sequential=sequential, price_tier=self.cfg.price_tier,
                                assumptions=self.assume)
        if tcfg not in self.tiers:
            res = run_tiers(self.store, tcfg, stream=self.stream, save=False)
            self.tiers[tcfg] = {"cfg": tcfg, "result": res, **res.summary}
        return self.tiers[tcfg]

    def serve(self, hw: str, engine: str, cached: float, host: float, miss: float,
              buffer_model: float, *, ttft: float | None | bool = True) -> dict:
        """``cost compare``'s answer for ``hw`` at the target with these shares."""
        bound = self.cfg.max_p90_ttft_s if ttft is True else ttft
        key = (hw, engine, cached, host, miss, buffer_model, bound)
        if key not in self.serve_cache:
            what_if = {k: v for k, v in (("host_prefix_fraction", host),
                                         ("miss_rows_per_layer", miss),
                                         ("device_buffer_tokens", buffer_model)) if v}
            ccfg = self.compare_config(hw, engine, cached, bound)
            t0 = time.perf_counter()
            row = compare(ccfg, what_if=what_if or None).row(0, named=True)
            self.serve_s += time.perf_counter() - t0
            self.serve_cache[key] = row
        return self.serve_cache[key]

    def compare_config(self, hw: str, engine: str, cached: float,
                       bound: float | None) -> CompareConfig:
        c = self.cfg
        return CompareConfig(model=c.model, hardware=(hw,), interactivity=(c.interactivity,),
                             max_p90_ttft_s=bound, price_tier=c.price_tier,
                             precision=c.precision, isl=self.isl, osl=self.osl,
                             cached_prefix_fraction=cached, engines={hw: engine}, mtp=c.mtp,
                             kv_dtype=c.kv_dtype, measured=False)

    def tokens(self, gb: float) -> int:
        return int(gb * 1e9 // self.kvb)

    def host_pool_gb(self, users: int) -> float:
        """HiSparse's host pool: every running request's full KV at its mean decode
        context (ISL + OSL / 2), for ``users`` requests of one instance."""
        return users * (self.isl + self.osl / 2.0) * self.kvb / 1e9


def _memory_usd_per_gpu_hour(cfg: PlanConfig, c: Candidate) -> tuple[float, float]:
    g = cfg.gpus_per_replica
    return (c.host_dram_gb * MEMORY_PRICES["dram"].usd_per_gb_hour / g,
            c.ssd_gb * MEMORY_PRICES["ssd"].usd_per_gb_hour / g)


def _usd(price_per_gpu_hour: float, tput: float | None) -> float | None:
    if tput is None or not tput > 0:
        return None
    return float(usd_per_million_tokens(price_per_gpu_hour, tput))


def _users(cfg: PlanConfig, ans: dict) -> int:
    """Users of one ``gpus_per_replica``-GPU instance at the front point ``ans`` runs: the
    deployment's concurrency spread evenly over its GPUs (assumed)."""
    return max(1, round(ans["conc"] * cfg.gpus_per_replica / ans["gpus"]))


def _space(ctx: _Context) -> list[Candidate]:
    cfg = ctx.cfg
    buffers: list[int | None] = [None]
    if cfg.selections is not None:
        buffers += sorted({m * ctx.k for m in cfg.hisparse_multiples})
    out = []
    for hw in cfg.hardware:
        probe = CompareConfig(model=cfg.model, hardware=(hw,), engines=dict(cfg.engines))
        for engine in engines_for(probe, hw):
            for buf in buffers:
                for pol in cfg.policy:
                    for dram in sorted(cfg.host_dram_gb):
                        for ssd in sorted(cfg.ssd_gb):
                            out.append(Candidate(hw, engine, buf, pol, float(dram),
                                                 float(ssd)))
    return out


def _bound(ctx: _Context, c: Candidate, best_share: float) -> tuple[float, dict]:
    """A lower bound on ``c``'s $/M: the front at the trace's largest hit share with no host
    loads or misses (its smallest device buffer), plus ``c``'s memory price."""
    buf_model = c.buffer * ctx.miss_scale if c.buffer else 0.0
    ans = ctx.serve(c.hardware, c.engine, best_share, 0.0, ctx.misses(c.buffer), buf_model)
    if not ans["reachable"]:
        return math.inf, ans
    price = get_hardware(c.hardware).price_usd_per_gpu_hour(ctx.cfg.price_tier)
    dram, ssd = _memory_usd_per_gpu_hour(ctx.cfg, c)
    return _usd(price + dram + ssd, ans["tput_per_gpu"]) or math.inf, ans


def _evaluate(ctx: _Context, c: Candidate, seed_users: int) -> dict:
    """The exact plan of ``c``: replays and the serving front, iterated on the users."""
    cfg = ctx.cfg
    out: dict[str, Any] = {"candidate": c, "feasible": False}
    if c.ssd_gb > 0 and c.host_dram_gb == 0:
        out["why"] = "an SSD tier needs a host tier (HiCache stages storage through host DRAM)"
        return out
    sel = ctx.selection(c.buffer) if c.buffer else None
    miss = ctx.misses(c.buffer)
    buf_model = c.buffer * ctx.miss_scale if c.buffer else 0.0
    users, seen, ans, tier = seed_users, set(), None, None
    converged = False
    for _ in range(MAX_ROUNDS):
        pool = ctx.host_pool_gb(users) if c.buffer else 0.0
        if pool > c.host_dram_gb:
            out["why"] = (f"HiSparse's host pool needs {pool:.0f} GB of host DRAM at "
                          f"{users} users per instance; {c.host_dram_gb:g} GB allowed")
            out["users"] = users
            return out
        host_tokens = ctx.tokens(c.host_dram_gb - pool)
        tier = ctx.tier(c.hardware, c.policy, users, host_tokens, ctx.tokens(c.ssd_gb))
        g, h, s = tier["gpu_hit_rate"], tier["host_hit_rate"], tier["storage_hit_rate"]
        ans = ctx.serve(c.hardware, c.engine, g + h + s, h + s, miss, buf_model)
        if not ans["reachable"]:
            out.update(why=_miss_reason(ctx, ans), users=users, tier=tier, answer=ans)
            return out
        seen.add(users)
        nxt = _users(cfg, ans)
        if nxt == users:
            converged = True
            break
        if nxt in seen:
            break
        users = nxt
    assert ans is not None and tier is not None
    price = get_hardware(c.hardware).price_usd_per_gpu_hour(cfg.price_tier)
    dram, ssd = _memory_usd_per_gpu_hour(cfg, c)
    tput = ans["tput_per_gpu"]
    usd = {"gpu": _usd(price, tput), "dram": _usd(dram, tput) if dram else 0.0,
           "ssd": _usd(ssd, tput) if ssd else 0.0}
    all_in = price + dram + ssd
    run_ids = [tier["run_id"]] + ([sel["run_id"]] if sel else [])
    out.update(feasible=True, users=users, converged=converged, tier=tier, answer=ans,
               sel=sel, plan={
                   "rank": None, "hardware": c.hardware, "engine": c.engine,
                   "layout": ans["layout"], "gpus": int(ans["gpus"]),
                   "concurrency": int(ans["conc"]),
                   "device_prefix_tokens": int(tier["device_capacity_tokens"]),
                   "hisparse_buffer_tokens": round(buf_model) if c.buffer else None,
                   "engram_hbm_gb": 0.0, "host_dram_gb": c.host_dram_gb, "ssd_gb": c.ssd_gb,
                   "policy": c.policy, "gpu_hit_share": g, "host_hit_share": h,
                   "storage_hit_share": s, "interactivity": cfg.interactivity,
                   "p90_ttft_s": ans["p90_ttft_s"], "tput_per_gpu": tput,
                   "usd_per_mtok_total": _usd(all_in, tput),
                   "usd_per_mtok_total_low": _usd(all_in, ans["tput_per_gpu_high"]),
                   "usd_per_mtok_total_high": _usd(all_in, ans["tput_per_gpu_low"]),
                   "usd_breakdown": usd, "run_ids": run_ids,
                   # beyond the contract: how the figures were reached
                   "users_per_instance": users, "converged": converged,
                   "host_pool_gb": ctx.host_pool_gb(users) if c.buffer else 0.0,
                   "hisparse_misses_per_layer": miss,
                   "host_tier_tokens": int(tier["host_capacity_tokens"]),
                   "storage_tier_tokens": int(tier["storage_capacity_tokens"]),
                   "replay_p90_ttft_s": tier["p90_ttft_s"], "source": ans["source"],
                   "basis": ans["basis"], "edge": bool(ans["edge"]),
                   "usd_per_gpu_hour": price})
    return out


def _miss_reason(ctx: _Context, ans: dict) -> str:
    target = ctx.cfg.interactivity
    if ans.get("front_max_interactivity") is None:
        return str(ans.get("note") or "no serving point meets the p90 TTFT bound")
    return (f"front ends at {ans['front_max_interactivity']:.1f} tok/s/user < target "
            f"{target:g} within p90 TTFT <= {ctx.cfg.max_p90_ttft_s} s")


def assumptions(ctx: _Context) -> list[str]:
    """Every assumption a plan rests on, printed with it."""
    cfg = ctx.cfg
    lines = [
        f"workload: {cfg.trace!r}, mean ISL {ctx.isl} and OSL {ctx.osl} tokens (the serving "
        "model's shape); hit shares are token-weighted over every request of the trace",
        "serving: cost compare's front (serving model fitted on InferenceX points; modelled, "
        "not measured: the bundled measured points are fixed-shape benchmarks, not this "
        f"trace), p90 TTFT <= {cfg.max_p90_ttft_s} s, target {cfg.interactivity:g} tok/s/user",
        "prefix hits skip prefill; host and storage hits are loaded over the host link "
        "(the serving model's host_prefix_fraction; SSD reads are assumed no slower than "
        "the host link, an assumption)",
        f"one tier replay instance = {cfg.gpus_per_replica} GPUs; its closed-loop users = the "
        "front point's concurrency x GPUs per instance / the deployment's GPUs (assumed)",
        "device prefix pool: SGLang's, the HBM left after weights at mem_fraction "
        f"{ctx.assume.mem_fraction} (shared by running requests and the radix cache)",
        f"host DRAM and SSD options are per {cfg.gpus_per_replica}-GPU instance; priced per "
        "GPU as capacity x $/GB-hour / GPUs per instance",
    ]
    for tier in ("dram", "ssd"):
        p = MEMORY_PRICES[tier]
        lines.append(f"{tier} ${p.usd_per_gb_hour:.3g}/GB-hour ({p.kind}, {p.vintage}): "
                     f"{p.source}")
    for hw in cfg.hardware:
        spec = get_hardware(hw)
        lines.append(f"{hw} ${spec.price_usd_per_gpu_hour(cfg.price_tier):.2f}/GPU-hour "
                     f"({cfg.price_tier}, survey {spec.price_vintage(cfg.price_tier)})")
    if cfg.selections is not None:
        lines.append(
            f"HiSparse: selection replay of {cfg.selections!r} (k = {ctx.k}), LRU buffer, "
            f"misses scaled by {ctx.miss_scale:g} = {ctx.model.index_topk} / {ctx.k} to "
            f"{cfg.model}'s top-k (keeps the recording's miss ratio: an assumption); host "
            "pool = users x (ISL + OSL/2) x KV bytes per token, taken from the host DRAM; "
            "fetches synchronous (HiSparse v1)")
    lines.append("engram_hbm_gb: Engram tables are not planned yet (0 GB)")
    return lines


def plan(store: Store, cfg: PlanConfig, *, progress: bool | None = None,
         save: bool = True, executor: str = "local", workers: int | None = None
         ) -> PlanResult:
    """Search ``cfg``'s space, evaluate the best candidates exactly, rank and (``save``)
    write ``plan_runs`` and the replays the plans name, all in one transaction.

    Raises:
        PlanError: nothing meets the targets (naming the closest miss), or bad input.
    """
    from toolkit.runtime.progress import progress as bar

    if executor != "local" or (workers or 1) > 1:
        raise PlanError(f"--engine {executor} --workers {workers}: one plan search runs in "
                        "one process (the bundled traces plan in under a minute); run many "
                        "plans (targets, accelerators, memory options) as a sweep of kind "
                        "\"plan\": toolkit sweep --grid GRID.toml --engine local|ray "
                        "--workers N (docs/plan.md)")
    if cfg.engram is not None:
        raise PlanError("--engram: Engram tables are not planned yet; run `toolkit cost "
                        "engram` for their cost and plan without --engram")
    for hw in cfg.hardware:
        get_hardware(hw).price_usd_per_gpu_hour(cfg.price_tier)
    t0 = time.perf_counter()
    ctx = _Context(store, cfg)
    space = _space(ctx)
    # the largest hit share any capacity or concurrency can give: unbounded, one at a time
    best_share = {hw: ctx.tier(hw, cfg.policy[0], None, -1, 0, sequential=True,
                               device_tokens=-1)["gpu_hit_rate"] for hw in cfg.hardware}
    bounds = []
    with bar(len(space), f"plan bounds {len(space)} candidates", progress, unit="cand") as b:
        for c in space:
            lb, ans = _bound(ctx, c, best_share[c.hardware])
            bounds.append((lb, c, ans))
            b.update(1)
    bounds.sort(key=lambda t: (t[0], t[1].label()))
    done: list[dict] = []
    feasible: list[dict] = []
    pruned: list[dict] = []
    with bar(len(space), "plan exact", progress, unit="cand") as b:
        for i, (lb, c, ans) in enumerate(bounds):
            stop = None
            if not cfg.exhaustive and len(feasible) >= cfg.top:
                worst = sorted(p["plan"]["usd_per_mtok_total"] for p in feasible)[cfg.top - 1]
                if lb > worst:
                    stop = f"pruned: its lower bound ${lb:.4f}/M exceeds plan #{cfg.top}'s"
            if not math.isfinite(lb) and not cfg.exhaustive:
                stop = "pruned: " + _miss_reason(ctx, ans) + " even at the largest hit share"
            if stop is not None:
                pruned = [{"candidate": c2, "feasible": False, "pruned": True, "bound": lb2,
                           "why": stop if j == 0 else (
                               f"pruned: lower bound ${lb2:.4f}/M" if math.isfinite(lb2)
                               else "pruned: " + _miss_reason(ctx, a2)
                               + " even at the largest hit share")}
                          for j, (lb2, c2, a2) in enumerate(bounds[i:])]
                break
            seed = _users(cfg, ans) if ans["reachable"] else 1
            ev = _evaluate(ctx, c, seed)
            ev["bound"] = lb
            done.append(ev)
            if ev["feasible"]:
                feasible.append(ev)
            b.update(1)
    elapsed = time.perf_counter() - t0
    feasible.sort(key=lambda e: (e["plan"]["usd_per_mtok_total"], e["candidate"].label()))
    if not feasible:
        raise PlanError(_closest_miss(ctx, done or [{"candidate": c, "why": "bound",
                                                     "answer": a} for _, c, a in bounds]))
    plans = []
    for rank, ev in enumerate(feasible[:cfg.top], start=1):
        ev["plan"]["rank"] = rank
        plans.append(ev["plan"])
    from toolkit.plan.record import plan_id as make_id
    pid = make_id(cfg, ctx)
    for ev in done + pruned:
        buf = ev["candidate"].buffer
        ev["hisparse_buffer_tokens"] = round(buf * ctx.miss_scale) if buf else None
    result = PlanResult(plans=plans, evaluated=done + pruned, searched=len(space),
                        evaluated_exactly=len(done), feasible=len(feasible),
                        elapsed_s=elapsed, assumptions=assumptions(ctx), plan_id=pid)
    if save:
        from toolkit.plan.record import save_plan

        save_plan(store, cfg, ctx, result)
    return result


def _closest_miss(ctx: _Context, done: list[dict]) -> str:
    """One line: no plan, and the candidate that came closest (the highest reach of the
    interactivity target, or the first reason when nothing reached the serving model)."""
    cfg = ctx.cfg
    best, reach = None, -1.0
    for ev in done:
        ans = ev.get("answer")
        if ans is None:
            continue
        fmax = ans.get("front_max_interactivity") or 0.0
        if fmax > reach:
            best, reach = ev, fmax
    if best is None:
        ev = done[0]
        return (f"no configuration meets {cfg.interactivity:g} tok/s/user with p90 TTFT <= "
                f"{cfg.max_p90_ttft_s} s; closest miss: {ev['candidate'].label()}: "
                f"{ev.get('why')}")
    c = best["candidate"]
    cached = (best.get("tier") or {}).get("overall_hit_rate", 0.0)
    lifted = ctx.serve(c.hardware, c.engine, cached, 0.0, 0.0, 0.0, ttft=None)
    extra = ""
    if lifted["reachable"] and lifted["p90_ttft_s"] is not None:
        extra = (f"; without the TTFT bound it reaches the target at p90 TTFT "
                 f"{lifted['p90_ttft_s']:.2f} s")
    return (f"no configuration meets {cfg.interactivity:g} tok/s/user with p90 TTFT <= "
            f"{cfg.max_p90_ttft_s} s; closest miss: {c.label()}: reaches "
            f"{reach:.1f} tok/s/user{extra}")


def plan_json(result: PlanResult) -> str:
    return json.dumps(result.to_json(), indent=2, default=str)


def with_overrides(cfg: PlanConfig, **kw: Any) -> PlanConfig:
    """``cfg`` with some fields replaced (validated again)."""
    return replace(cfg, **kw)


__all__ = ["PLAN_KEYS", "Candidate", "PlanError", "PlanResult", "assumptions", "plan",
           "plan_json", "with_overrides"]
