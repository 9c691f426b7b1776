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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from toolkit.cost.compare import CompareConfig, compare, engines_for
from toolkit.cost.price import MEMORY_PRICES, usd_per_million_tokens
from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.plan.config import DEFAULT_MAX_P90_TTFT_S, PLAN_KEYS, PlanConfig
from toolkit.plan.pool import PrefixPool, prefix_pool
from toolkit.replay.tiers import TierReplayConfig, page_stream
from toolkit.replay.tiers.config import ServiceAssumptions
from toolkit.serving.tier_service import kv_bytes_per_token
from toolkit.store import Store

MAX_ROUNDS = 4



class PlanError(ToolkitError):
    """No configuration meets the targets (the message names the closest miss), or the
    question cannot be planned (unknown trace, selections or names)."""


@dataclass(frozen=True)
class Candidate:
    """One point of the search space (trace-scale HiSparse buffer; ``None`` = off;
    ``reserve``: share of the device KV pool kept for the prefix cache; ``engram_gb``:
    Engram HBM per GPU, ``None`` without ``--engram``)."""

    hardware: str
    engine: str
    buffer: int | None
    policy: str
    host_dram_gb: float
    ssd_gb: float
    reserve: float = 0.0
    engram_gb: float | None = None

    def label(self) -> str:
        hs = f"HiSparse {self.buffer}" if self.buffer else "no HiSparse"
        extra = f", prefix reserve {self.reserve:g}" if self.reserve else ""
        if self.engram_gb is not None:
            extra += f", Engram {self.engram_gb:g} GB/GPU"
        return (f"{self.hardware} {self.engine}, {hs}, {self.policy}, host "
                f"{self.host_dram_gb:g} GB, SSD {self.ssd_gb:g} GB{extra}")


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
    by_hardware: list[dict[str, Any]] = field(default_factory=list)
    cluster_replays: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"plans": self.plans, "searched": self.searched,
                "evaluated_exactly": self.evaluated_exactly, "feasible": self.feasible,
                "elapsed_s": self.elapsed_s, "plan_id": self.plan_id,
                "assumptions": self.assumptions, "by_hardware": self.by_hardware,
                "cluster_replays": self.cluster_replays}


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
        self.pools: dict[tuple, PrefixPool] = {}
        # the front picks layout and memory split at the target interactivity under a fixed
        # p90 TTFT bound (cost compare's 10 s, or the asked one when looser); the asked bound
        # is judged by the cluster replay at the load (toolkit.plan.load), so a looser bound
        # up to 10 s only lets fewer instances pass, never changes which plans are sized
        self.front_bound: float | None = (
            None if cfg.max_p90_ttft_s is None
            else max(cfg.max_p90_ttft_s, DEFAULT_MAX_P90_TTFT_S))
        self.clusters: dict[Any, Any] = {}
        self.cluster_stream: Any = None
        self.cluster_s = 0.0
        arr = req["arrival_s"].to_numpy()
        span = float(arr.max() - arr.min()) if arr.size > 1 else 0.0
        self._recorded_rps = (arr.size - 1) / span if span > 0 else math.inf
        self.serve_cache: dict[tuple, dict] = {}
        self.layout_cache: dict[tuple, list[dict]] = {}
        self.serve_s = 0.0
        self.selections: dict[int, dict] = {}
        self.k = 0
        self.miss_scale = 1.0
        if cfg.selections is not None:
            self._load_selections()
        self.engrams: dict[tuple[str, float], dict] = {}
        if cfg.engram is not None:
            self._load_engram()

    def _load_engram(self) -> None:
        from toolkit.replay.engram import load_dense

        try:
            st = load_dense(self.store, self.cfg.engram)
        except Exception as e:
            raise PlanError(f"--engram {self.cfg.engram!r}: {e}") from None
        bad = [i for i in st.layer_ids if not 0 <= i < self.model.num_layers]
        if bad:
            raise PlanError(f"--engram {self.cfg.engram!r}: Engram layers {bad} outside "
                            f"{self.model.name}'s {self.model.num_layers} layers")
        self.eng_row_bytes = int(st.row_bytes)
        self.eng_layers = len(st.layer_ids)
        self.eng_lookups = int(st.lookups_per_token_layer)
        self.eng_distinct = int(st.n_distinct)

    def engram_share_gb(self) -> float:
        """A GPU's share of the Engram tables when they sit whole in HBM (sharded over the
        instance's GPUs, as ``toolkit cost engram``'s HBM placement)."""
        return self.cfg.engram_table_gb / self.cfg.gpus_per_replica

    def engram(self, hw: str, gb: float) -> dict:
        """Engram at ``gb`` of HBM per GPU on ``hw``: the whole table in HBM (no misses, no
        replay needed), or an LRU row cache whose hit ratio is the exact Engram replay of
        the recorded lookups, over the table in host DRAM (one copy per host-memory domain
        of the instance, as ``toolkit cost engram`` checks its DRAM placement)."""
        key = (hw, float(gb))
        if key in self.engrams:
            return self.engrams[key]
        cfg = self.cfg
        if gb >= self.engram_share_gb():
            out = {"in_hbm": True, "hbm_bytes": self.engram_share_gb() * 1e9,
                   "miss_bytes": 0.0, "dram_gb": 0.0, "hit_ratio": 1.0, "run": None}
        else:
            from toolkit.cost.engram import run_engram
            from toolkit.replay.engram import EngramReplayConfig

            ecfg = EngramReplayConfig(cfg.engram, gb * 1e9, "dram", "lru", hw, cfg.model,
                                      cfg.engram_table_gb * 1e9, price_tier=cfg.price_tier)
            try:
                row = run_engram(self.store, ecfg, save=False)
            except Exception as e:
                raise PlanError(f"--engram {cfg.engram!r} on {hw}: {e}") from None
            spec = get_hardware(hw)
            copies = max(1, math.ceil(cfg.gpus_per_replica / spec.host_mem_gpus_sharing))
            out = {"in_hbm": False, "hbm_bytes": gb * 1e9,
                   "miss_bytes": self.eng_lookups * (1.0 - row["hit_ratio"])
                   * self.eng_row_bytes,
                   "dram_gb": cfg.engram_table_gb * copies, "hit_ratio": row["hit_ratio"],
                   "run": row}
        self.engrams[key] = out
        return out

    def pool(self, hw: str, layout: str | None, engram_hbm_bytes: float) -> PrefixPool:
        """The prefix pool of ``layout`` on ``hw`` (:mod:`toolkit.plan.pool`); without a
        layout (no front point yet), one ``gpus_per_replica``-GPU TP instance's."""
        key = (hw, layout, float(engram_hbm_bytes))
        if key not in self.pools:
            text = layout or f"TP{self.cfg.gpus_per_replica} EP{self.cfg.gpus_per_replica}"
            self.pools[key] = prefix_pool(text, hw, self.cfg.model,
                                          precision=self.cfg.precision,
                                          kv_dtype=self.cfg.kv_dtype,
                                          mem_fraction=self.assume.mem_fraction,
                                          engram_hbm_bytes=engram_hbm_bytes)
        return self.pools[key]

    def cluster_stream_for(self, ccfg: Any) -> Any:
        """The trace as the cluster replays read it, flattened once per search."""
        if self.cluster_stream is None:
            from toolkit.replay.tiers.cluster import stream_for

            self.cluster_stream = stream_for(self.store, ccfg)
        return self.cluster_stream

    def cluster(self, ccfg: Any) -> Any:
        """The cluster replay of ``ccfg`` (:func:`toolkit.cost.from_replay.run_cluster`),
        once per config; the trace's stream is flattened once per search. Called from the
        load stage's threads: each config is one accelerator's, so no two threads ask for
        the same one (a repeat would only replay it twice)."""
        if ccfg not in self.clusters:
            from toolkit.cost.from_replay import run_cluster

            stream = self.cluster_stream_for(ccfg)
            t0 = time.perf_counter()
            self.clusters[ccfg] = run_cluster(self.store, ccfg, stream=stream, save=False)
            self.cluster_s += time.perf_counter() - t0
        return self.clusters[ccfg]

    @property
    def recorded_rps(self) -> float:
        """The trace's recorded arrival rate: requests after the first over its span."""
        return self._recorded_rps

    def _load_selections(self) -> None:
        from toolkit.replay.selections import load_rows

        try:
            self.rows = load_rows(self.store, self.cfg.selections)
        except Exception as e:
            raise PlanError(f"--selections {self.cfg.selections!r}: {e}") from None
        self.k = int(self.rows.k)
        self.miss_scale = self.model.index_topk / self.k  # buffers keep buffer / k
        self.sel_context = float(np.mean(self.rows.seq_len)) if self.rows.seq_len.size else 2.0

    def selection(self, buffer: int) -> dict:
        """The exact selection replay at ``buffer`` (trace-scale tokens), HiSparse mode,
        LRU (HiSparse's buffer policy)."""
        if buffer not in self.selections:
            from toolkit.replay.selections import SelectionReplayConfig, replay_selections

            scfg = SelectionReplayConfig(self.cfg.selections, "lru", buffer)
            self.selections[buffer] = {"cfg": scfg, **replay_selections(
                self.store, scfg, save=False, rows=self.rows, progress=False)}
        return self.selections[buffer]

    def scaled_misses(self, buffer: int):
        """The exact replay's miss ratio at ``buffer`` carried to the model's top-k and the
        workload's mean context (ISL + OSL / 2) by the measured scaling fit
        (:func:`toolkit.replay.selection_scaling.scale_misses`), with its band."""
        from toolkit.replay.selection_scaling import scale_misses

        sel = self.selection(buffer)
        ratio = sel["misses"] / sel["accesses"] if sel["accesses"] else 0.0
        return scale_misses(ratio, trace_k=self.k, model_k=self.model.index_topk,
                            buffer_ratio=buffer / self.k, context_tokens=self.sel_context,
                            target_context_tokens=self.isl + self.osl / 2.0)

    def misses(self, buffer: int | None) -> float:
        """HiSparse host rows per (request, decode step, layer) at the model's top-k
        (:meth:`scaled_misses`; 0 without HiSparse)."""
        return self.scaled_misses(buffer).rows if buffer else 0.0

    def tier(self, hw: str, policy: str, users: int | None, host_tokens: int,
             storage_tokens: int, *, sequential: bool = False,
             device_tokens: int | None = None, max_running: int = 0) -> dict:
        from toolkit.cost.from_replay import run_tiers

        tcfg = TierReplayConfig(self.cfg.trace, hw, self.cfg.model, concurrency=users,
                                device_tokens=device_tokens, host_tokens=host_tokens,
                                storage_tokens=storage_tokens, policy=policy,
                                max_running=max_running,
                                sequential=sequential, price_tier=self.cfg.price_tier,
                                assumptions=self.assume)
        if tcfg not in self.tiers:
            res = run_tiers(self.store, tcfg, stream=self.stream, save=False)
            self.tiers[tcfg] = {"cfg": tcfg, "result": res, **res.summary}
        return self.tiers[tcfg]

    def serve(self, hw: str, engine: str, cached: float, host: float, miss: float,
              buffer_model: float, *, ttft: float | None | bool = True, reserve: float = 0.0,
              engram: dict | None = None) -> dict:
        """``cost compare``'s answer for ``hw`` at the target with these shares (and the
        HBM split: the prefix reserve and the Engram rows and misses, when asked)."""
        bound = self.front_bound if ttft is True else ttft
        eng_hbm = engram["hbm_bytes"] if engram else 0.0
        eng_miss = engram["miss_bytes"] if engram else 0.0
        key = (hw, engine, cached, host, miss, buffer_model, bound, reserve, eng_hbm, eng_miss)
        if key not in self.serve_cache:
            what_if = self._what_if(host, miss, buffer_model, reserve, eng_hbm, eng_miss)
            ccfg = self.compare_config(hw, engine, cached, bound)
            t0 = time.perf_counter()
            row = compare(ccfg, what_if=what_if or None).row(0, named=True)
            self.serve_s += time.perf_counter() - t0
            self.serve_cache[key] = row
        return self.serve_cache[key]

    def _what_if(self, host: float, miss: float, buffer_model: float, reserve: float,
                 eng_hbm: float, eng_miss: float) -> dict[str, float]:
        what_if = {k: v for k, v in (("host_prefix_fraction", host),
                                     ("miss_rows_per_layer", miss),
                                     ("device_buffer_tokens", buffer_model),
                                     ("prefix_reserve_fraction", reserve),
                                     ("engram_hbm_bytes", eng_hbm),
                                     ("engram_miss_bytes", eng_miss)) if v}
        if eng_miss:
            what_if["engram_layers"] = float(self.eng_layers)
        return what_if

    def layouts(self, ev: dict) -> list[dict]:
        """Every layout whose own front meets the target at ``ev``'s plan's hit shares and
        HBM split, the same question :meth:`serve` asked for its best one
        (:func:`toolkit.cost.compare.layout_answers`); cached."""
        from toolkit.cost.compare import layout_answers

        c, p, eng = ev["candidate"], ev["plan"], ev.get("engram")
        g, h, s = p["gpu_hit_share"], p["host_hit_share"], p["storage_hit_share"]
        buf_model = c.buffer * self.miss_scale if c.buffer else 0.0
        eng_hbm = eng["hbm_bytes"] if eng else 0.0
        eng_miss = eng["miss_bytes"] if eng else 0.0
        key = (c.hardware, c.engine, g + h + s, h + s, p["hisparse_misses_per_layer"],
               buf_model, c.reserve, eng_hbm, eng_miss)
        if key not in self.layout_cache:
            what_if = self._what_if(h + s, p["hisparse_misses_per_layer"], buf_model,
                                    c.reserve, eng_hbm, eng_miss)
            ccfg = self.compare_config(c.hardware, c.engine, g + h + s, self.front_bound)
            self.layout_cache[key] = layout_answers(ccfg, what_if=what_if or None)
        return self.layout_cache[key]

    def compare_config(self, hw: str, engine: str, cached: float,
                       bound: float | None) -> CompareConfig:
        c = self.cfg
        return CompareConfig(model=c.model, hardware=(hw,), interactivity=(c.interactivity,),
                             max_p90_ttft_s=bound, price_tier=c.price_tier,
                             precision=c.precision, isl=self.isl, osl=self.osl,
                             cached_prefix_fraction=cached, engines={hw: engine}, mtp=c.mtp,
                             kv_dtype=c.kv_dtype, measured=False,
                             ttft_confidence=c.ttft_confidence)

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
    """Users of ``gpus_per_replica`` GPUs at the front point ``ans`` runs: the deployment's
    concurrency spread evenly over its GPUs (what HiSparse's host pool holds per host)."""
    return max(1, round(ans["conc"] * cfg.gpus_per_replica / ans["gpus"]))


def _memory_key(c: Candidate) -> tuple[str, float, float]:
    """The group a candidate is pruned and sized in: accelerator and memory option."""
    return (c.hardware, c.host_dram_gb, c.ssd_gb)


def _seed(ans: dict) -> tuple[str | None, int]:
    """What an exact evaluation starts from: the bound's front point (layout, concurrency),
    or no layout when the bound found none (the first round then uses TP8's pool)."""
    if not ans.get("reachable") or not ans.get("layout"):
        return None, 1
    return str(ans["layout"]), int(ans["conc"])


def _space(ctx: _Context) -> list[Candidate]:
    cfg = ctx.cfg
    buffers: list[int | None] = [None]
    if cfg.selections is not None:
        buffers += sorted({m * ctx.k for m in cfg.hisparse_multiples})
    engrams: list[float | None] = [None]
    if cfg.engram is not None:
        # every option at or above a GPU's share of the table is the same placement
        engrams = sorted({min(float(v), ctx.engram_share_gb()) for v in cfg.engram_hbm_gb})
    out = []
    for hw in cfg.hardware:
        probe = CompareConfig(model=cfg.model, hardware=(hw,), engines=dict(cfg.engines))
        for engine in engines_for(probe, hw):
            for buf in buffers:
                for pol in cfg.policy:
                    for dram in sorted(cfg.host_dram_gb):
                        for ssd in sorted(cfg.ssd_gb):
                            for res in sorted(set(cfg.prefix_reserve)):
                                for eng in engrams:
                                    out.append(Candidate(hw, engine, buf, pol, float(dram),
                                                         float(ssd), float(res), eng))
    return out


def _bound(ctx: _Context, c: Candidate, best_share: float) -> tuple[float, dict]:
    """A lower bound on ``c``'s $/M: the front at the trace's largest hit share with no host
    loads or misses (its smallest device buffer), plus ``c``'s memory price."""
    buf_model = c.buffer * ctx.miss_scale if c.buffer else 0.0
    eng = ctx.engram(c.hardware, c.engram_gb) if c.engram_gb is not None else None
    ans = ctx.serve(c.hardware, c.engine, best_share, 0.0, ctx.misses(c.buffer), buf_model,
                    reserve=c.reserve, engram=eng)
    if not ans["reachable"]:
        return math.inf, ans
    price = get_hardware(c.hardware).price_usd_per_gpu_hour(ctx.cfg.price_tier)
    dram, ssd = _memory_usd_per_gpu_hour(ctx.cfg, c)
    return _usd(price + dram + ssd, ans["tput_per_gpu"]) or math.inf, ans


def _at_own_layout(ctx: _Context, c: Candidate, layout: str | None, ans: dict,
                   cached: float, host: float, miss: float, buf_model: float,
                   eng: dict | None) -> dict:
    """``ans`` moved to ``layout``'s own front point at the same shares, when the rounds
    ended without converging on a layout whose pool was replayed: at TP8's pool the front
    may prefer TP4, and at TP4's smaller pool TP8, a cycle. Answering with one layout at
    the other's pool printed a TP4 plan with TP8's 3,248,258-token pool; this keeps the
    layout whose pool the shares come from (its own front's answer; unchanged when that
    layout does not meet the target alone)."""
    from toolkit.cost.compare import layout_answers

    if layout is None:
        return ans
    base = layout.rsplit(" conc ", 1)[0]
    if str(ans["layout"]).rsplit(" conc ", 1)[0] == base:
        return ans
    eng_hbm = eng["hbm_bytes"] if eng else 0.0
    eng_miss = eng["miss_bytes"] if eng else 0.0
    what_if = ctx._what_if(host, miss, buf_model, c.reserve, eng_hbm, eng_miss)
    ccfg = ctx.compare_config(c.hardware, c.engine, cached, ctx.front_bound)
    for a in layout_answers(ccfg, what_if=what_if or None):
        if a["layout"].rsplit(" conc ", 1)[0] == base:
            return dict(ans, layout=a["layout"], gpus=a["gpus"], conc=a["conc"],
                        tput_per_gpu=a["tput_per_gpu"],
                        tput_per_gpu_low=a["tput_per_gpu_low"],
                        tput_per_gpu_high=a["tput_per_gpu_high"],
                        p90_ttft_s=a["p90_ttft_s"], p90_ttft_s_low=None,
                        p90_ttft_s_high=None)
    return ans


def _evaluate(ctx: _Context, c: Candidate, seed: tuple[str | None, int]) -> dict:
    """The exact plan of ``c``: replays and the serving front, iterated on the front point.

    Each round replays one prefix cache of the layout the previous round's front point runs
    (:mod:`toolkit.plan.pool`: that layout's HBM, one cache per DPA rank) at its share of the
    deployment's users, then asks the front with the hit shares; it stops when the front
    point's layout and users repeat (``converged``) or after :data:`MAX_ROUNDS`."""
    cfg = ctx.cfg
    out: dict[str, Any] = {"candidate": c, "feasible": False}
    if c.ssd_gb > 0 and c.host_dram_gb == 0:
        out["why"] = "an SSD tier needs a host tier (HiCache stages storage through host DRAM)"
        return out
    sel = ctx.selection(c.buffer) if c.buffer else None
    miss = ctx.misses(c.buffer)
    buf_model = c.buffer * ctx.miss_scale if c.buffer else 0.0
    eng = ctx.engram(c.hardware, c.engram_gb) if c.engram_gb is not None else None
    out["engram"] = eng
    eng_dram = eng["dram_gb"] if eng else 0.0
    eng_hbm = eng["hbm_bytes"] if eng else 0.0
    (layout, conc), seen, ans, tier = seed, set(), None, None
    converged = False
    users = host_users = 1
    pool = ctx.pool(c.hardware, layout, eng_hbm)
    max_running = 0
    rounds: list[tuple] = []  # each round's replayed layout and what it gave
    for _ in range(MAX_ROUNDS):
        pool = ctx.pool(c.hardware, layout, eng_hbm)
        if pool.tokens_per_rank <= 0:
            why = (f"Engram's {eng_hbm / 1e9:g} GB per GPU and the weights" if eng_hbm
                   else "the weights")
            out.update(why=f"{why} leave no device KV pool on {c.hardware} "
                       f"({pool.layout.text})", answer=ans)
            return out
        users = pool.users_per_rank(conc)
        # users of gpus_per_replica GPUs: HiSparse's host pool is per host
        host_users = max(1, round(conc * cfg.gpus_per_replica / pool.layout.gpus))
        # a reserve caps running requests to the rest of the pool (--max-running-requests)
        max_running = (max(1, int((1.0 - c.reserve) * pool.tokens_per_rank
                                  // (ctx.isl + ctx.osl))) if c.reserve else 0)
        hs_pool = ctx.host_pool_gb(host_users) if c.buffer else 0.0
        if hs_pool + eng_dram > c.host_dram_gb:
            need = " and ".join(x for x in (
                f"HiSparse's host pool {hs_pool:.0f} GB at {host_users} users per "
                f"{cfg.gpus_per_replica} GPUs" if c.buffer else "",
                f"the Engram table {eng_dram:g} GB" if eng_dram else "") if x)
            out["why"] = (f"host DRAM needs {hs_pool + eng_dram:.0f} GB ({need}); "
                          f"{c.host_dram_gb:g} GB allowed")
            out["users"] = users
            return out
        # one cache's share of the host DRAM and SSD (options are per gpus_per_replica GPUs)
        share = pool.layout.cache_gpus / cfg.gpus_per_replica / pool.ranks
        host_tokens = ctx.tokens((c.host_dram_gb - hs_pool - eng_dram) * share)
        storage_tokens = ctx.tokens(c.ssd_gb * share)
        if c.ssd_gb > 0 and host_tokens <= 0:
            out["why"] = ("an SSD tier needs a host tier; the host DRAM left after HiSparse's "
                          "pool and the Engram table holds no KV")
            out["users"] = users
            return out
        tier = ctx.tier(c.hardware, c.policy, users, host_tokens, storage_tokens,
                        device_tokens=pool.tokens_per_rank, max_running=max_running)
        g, h, s = tier["gpu_hit_rate"], tier["host_hit_rate"], tier["storage_hit_rate"]
        ans = ctx.serve(c.hardware, c.engine, g + h + s, h + s, miss, buf_model,
                        reserve=c.reserve, engram=eng)
        if not ans["reachable"]:
            out.update(why=_miss_reason(ctx, ans), users=users, tier=tier, answer=ans)
            return out
        seen.add((layout, conc))
        rounds.append((layout, pool, users, host_users, max_running, tier, g, h, s, ans))
        nxt = (str(ans["layout"]), int(ans["conc"]))
        if nxt == (layout, conc):
            converged = True
            break
        if nxt in seen:
            break
        layout, conc = nxt
    assert ans is not None and tier is not None
    if not converged:
        # a cycle (or the last round): each round's layout answered at its own pool's
        # shares, the one with the most tokens/s/GPU kept (the same price: the least $/M)
        best = None
        for rnd in rounds:
            own = _at_own_layout(ctx, c, rnd[0], rnd[9], rnd[6] + rnd[7] + rnd[8],
                                 rnd[7] + rnd[8], miss, buf_model, eng)
            if best is None or own["tput_per_gpu"] > best[1]["tput_per_gpu"]:
                best = (rnd, own)
        assert best is not None
        (layout, pool, users, host_users, max_running, tier, g, h, s, _), ans = best
    price = get_hardware(c.hardware).price_usd_per_gpu_hour(cfg.price_tier)
    dram, ssd = _memory_usd_per_gpu_hour(cfg, c)
    tput = ans["tput_per_gpu"]
    usd = {"gpu": _usd(price, tput), "dram": _usd(dram, tput) if dram else 0.0,
           "ssd": _usd(ssd, tput) if ssd else 0.0}
    all_in = price + dram + ssd
    run_ids = ([tier["run_id"]] + ([sel["run_id"]] if sel else [])
               + ([eng["run"]["run_id"]] if eng and eng["run"] else []))
    prefix = (round(c.reserve * pool.tokens_per_rank) if c.reserve
              else int(tier["device_capacity_tokens"]))
    out.update(feasible=True, users=users, converged=converged, tier=tier, answer=ans,
               sel=sel, plan={
                   "rank": None, "hardware": c.hardware, "engine": c.engine,
                   "layout": ans["layout"], "gpus": int(ans["gpus"]),
                   "concurrency": int(ans["conc"]),
                   "device_prefix_tokens": prefix,
                   "hisparse_buffer_tokens": round(buf_model) if c.buffer else None,
                   "engram_hbm_gb": eng["hbm_bytes"] / 1e9 if eng else 0.0,
                   "host_dram_gb": c.host_dram_gb, "ssd_gb": c.ssd_gb,
                   "policy": c.policy, "gpu_hit_share": g, "host_hit_share": h,
                   "storage_hit_share": s, "interactivity": cfg.interactivity,
                   "p90_ttft_s": ans["p90_ttft_s"], "tput_per_gpu": tput,
                   "usd_per_mtok_total": _usd(all_in, tput),
                   "usd_per_mtok_total_low": _usd(all_in, ans["tput_per_gpu_high"]),
                   "usd_per_mtok_total_high": _usd(all_in, ans["tput_per_gpu_low"]),
                   "usd_breakdown": usd, "run_ids": run_ids,
                   # beyond the contract: how the figures were reached
                   "users_per_instance": users, "converged": converged,
                   "host_pool_gb": ctx.host_pool_gb(host_users) if c.buffer else 0.0,
                   "hisparse_misses_per_layer": miss,
                   "hisparse_misses_per_layer_band": (
                       [ctx.scaled_misses(c.buffer).rows_low,
                        ctx.scaled_misses(c.buffer).rows_high] if c.buffer else None),
                   "host_tier_tokens": int(tier["host_capacity_tokens"]),
                   "storage_tier_tokens": int(tier["storage_capacity_tokens"]),
                   "replay_p90_ttft_s": tier["p90_ttft_s"], "source": ans["source"],
                   "p90_ttft_s_low": ans.get("p90_ttft_s_low"),
                   "p90_ttft_s_high": ans.get("p90_ttft_s_high"),
                   "ttft_confidence": cfg.ttft_confidence,
                   "basis": ans["basis"], "edge": bool(ans["edge"]),
                   "usd_per_gpu_hour": price,
                   "prefix_reserve_fraction": c.reserve, "max_running": max_running,
                   "device_pool_tokens": int(tier["device_capacity_tokens"]),
                   "device_pool_ranks": pool.ranks,
                   "device_pool_layout": pool.layout.text,
                   "engram_in_hbm": bool(eng["in_hbm"]) if eng else None,
                   "engram_hit_ratio": eng["hit_ratio"] if eng else None,
                   "engram_dram_gb": eng_dram,
                   "engram_miss_bytes_per_token_layer": eng["miss_bytes"] if eng else 0.0})
    return out


def _miss_reason(ctx: _Context, ans: dict) -> str:
    target = ctx.cfg.interactivity
    if ans.get("front_max_interactivity") is None:
        return str(ans.get("note") or "no serving point meets the p90 TTFT bound")
    return (f"front ends at {ans['front_max_interactivity']:.1f} tok/s/user < target "
            f"{target:g}" + (f" within p90 TTFT <= {ctx.front_bound} s"
                             if ctx.front_bound is not None else ""))


def assumptions(ctx: _Context) -> list[str]:
    """Every assumption a plan rests on, printed with it."""
    cfg = ctx.cfg
    lines = [
        f"workload: {cfg.trace!r}, mean ISL {ctx.isl} and OSL {ctx.osl} tokens (the serving "
        "model's shape); hit shares are token-weighted over every request of the trace",
        "serving: cost compare's front (serving model fitted on InferenceX points; modelled, "
        "not measured: the bundled measured points are fixed-shape benchmarks, not this "
        f"trace) at the target {cfg.interactivity:g} tok/s/user with p90 TTFT <= "
        f"{ctx.front_bound} s (cost compare's bound, or the asked one when looser: the layout "
        "and memory split do not depend on a tighter bound); the cluster replay judges p90 "
        f"TTFT <= {cfg.max_p90_ttft_s} s at the load",
        "prefix hits skip prefill; host and storage hits are loaded over the host link "
        "(the serving model's host_prefix_fraction; SSD reads are assumed no slower than "
        "the host link, an assumption)",
        "device prefix pool: the layout's, per cache: HBM usable x mem_fraction "
        f"{ctx.assume.mem_fraction} less one GPU's weights (dense / (1 with DPA, else the "
        "instance's GPUs) + experts / GPUs) less Engram HBM; one cache per DPA rank (SGLang: "
        "a radix tree per DP rank), else one per instance; a disaggregated layout's cache is "
        "its prefill instance's (DPA ranks; SGLang's PD decode side keeps no radix cache); "
        "shared by running requests and the radix cache",
        "the tier replay replays one cache at the front point's concurrency / its caches "
        "(sessions stay on one cache, as a cache-aware router keeps them: assumed); running "
        "requests hold their KV on it until they finish (on a disaggregated prefill rank "
        "they leave after prefill: the replay understates that pool's room)",
        f"host DRAM and SSD options are per {cfg.gpus_per_replica} GPUs; a cache's host and "
        f"SSD tiers are its instance's GPUs / {cfg.gpus_per_replica} of the option, split "
        "evenly over its DPA ranks; priced per GPU as capacity x $/GB-hour / "
        f"{cfg.gpus_per_replica}",
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
            f"HiSparse: selection replay of {cfg.selections!r} (k = {ctx.k}), LRU buffer "
            f"(buffers kept at buffer / k: x{ctx.miss_scale:g}); misses: "
            f"{ctx.scaled_misses(2 * ctx.k).label} (at buffer 2 x k; each buffer uses its "
            "own replay); host pool = users x (ISL + OSL/2) x KV bytes per token, taken from "
            "the host DRAM; fetches synchronous (HiSparse v1)")
    if set(cfg.prefix_reserve) != {0.0}:
        lines.append(
            "prefix reserve R: running requests are capped (SGLang's --max-running-requests) "
            "to (1 - R) of the device pool at mean ISL + OSL tokens each, and the serving "
            "model's batch capacity to (1 - R) of its KV pool; R = 0 is SGLang's shared pool "
            "(the radix cache takes what running requests leave), so a reserve can only bind "
            "concurrency, never add hits at the same users; device_prefix_tokens is R x the "
            "pool (the whole pool when shared)")
    if cfg.engram is None:
        lines.append("engram_hbm_gb: no --engram, no Engram tables planned (0 GB)")
    else:
        lines.append(
            f"Engram: tables of {cfg.engram_table_gb:g} GB (assumed, toolkit cost engram's "
            f"figure); an option of >= {ctx.engram_share_gb():g} GB/GPU holds a GPU's share "
            "of them whole in HBM (no misses); below, an LRU row cache of that size per GPU "
            f"(hit ratio: the exact Engram replay of {cfg.engram!r}, {ctx.eng_lookups} "
            f"lookups per token and layer, {ctx.eng_row_bytes} B rows, {ctx.eng_layers} "
            "Engram layers) over the whole table in host DRAM, one copy per host-memory "
            "domain of the instance, taken from --host-dram-gb; Engram HBM comes out of the "
            "KV budget (the serving model's batch and the tier replay's device pool); misses "
            "are gathered per Engram layer, synchronously, over the SM gather path for each "
            "GPU's tokens of the step (cost engram's sync placement); Engram's own FLOPs are "
            "not modelled; the recorded lookups' backbone tokenizer stands in for the planned "
            "model's (same lookup locality: an assumption)")
        whole = [v for v in cfg.engram_hbm_gb if v < ctx.engram_share_gb()
                 and v * 1e9 // ctx.eng_row_bytes >= ctx.eng_distinct]
        if whole:
            lines.append(
                f"Engram row caches of {', '.join(f'{v:g}' for v in sorted(whole))} GB/GPU "
                f"hold all {ctx.eng_distinct:,} distinct rows of {cfg.engram!r}: their misses "
                "are first touches, bounded by the trace's length, not the cache size (record "
                "a longer trace to tell those sizes apart)")
    return lines


def plan(store: Store, cfg: PlanConfig, *, progress: bool | None = None,
         save: bool = True, executor: str = "local", workers: int | None = None
         ) -> PlanResult:
    """Search ``cfg``'s space, evaluate the best candidates exactly, rank and (``save``)
    write ``plan_runs`` and the replays the plans name, all in one transaction.

    ``executor`` ``local`` with ``workers`` > 1 evaluates candidates on threads (the
    replays are ``nogil`` kernels); ``ray`` as Ray tasks (on the connected cluster, or a
    local Ray of ``workers`` CPUs started for the search). Candidates go out in bound order,
    ``workers`` at a time; the pruning rule is then applied in that order exactly as one
    process would, and evaluations past its stop are discarded, so every executor gives the
    same plans, counts and ``plan_runs`` rows.

    Raises:
        PlanError: nothing meets the targets (naming the closest miss), or bad input.
    """
    from toolkit.runtime.pool import resolve_workers
    from toolkit.runtime.progress import progress as bar

    if executor not in ("local", "ray"):
        raise PlanError(f"--engine {executor!r}: local or ray")
    try:
        # None: one (the Python default); 0: every core (the CLI's default)
        n_workers = (resolve_workers(workers) if executor == "ray" or workers is not None
                     else 1)
    except ValueError as e:
        raise PlanError(str(e)) from None
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

    keep = cfg.load_candidates  # exact plans kept per accelerator and memory option

    def stop_at(lb: float, ans: dict, c: Candidate) -> str | None:
        """Why a candidate is pruned, given the plans found so far (``None``: evaluate it).
        Per accelerator and memory option (host DRAM, SSD): the load stage sizes each
        option's best (:func:`toolkit.plan.load.plan_for_load`), so more options never
        prune an option's best away (a wider question is a superset of a narrower one's)."""
        if not math.isfinite(lb) and not cfg.exhaustive:
            return "pruned: " + _miss_reason(ctx, ans) + " even at the largest hit share"
        mine = [p["plan"]["usd_per_mtok_total"] for p in feasible
                if _memory_key(p["candidate"]) == _memory_key(c)]
        if not cfg.exhaustive and len(mine) >= keep and lb > sorted(mine)[keep - 1]:
            return (f"pruned: its lower bound ${lb:.4f}/M exceeds plan #{keep} of {c.hardware} "
                    f"with host {c.host_dram_gb:g} GB, SSD {c.ssd_gb:g} GB")
        return None

    def prune(lb: float, c: Candidate, why: str) -> None:
        pruned.append({"candidate": c, "feasible": False, "pruned": True, "bound": lb,
                       "why": why})

    runner = _Runner(ctx, executor, n_workers)
    try:
        with bar(len(space), "plan exact", progress, unit="cand") as b:
            i = 0
            while i < len(bounds):
                # the next candidates in bound order that the plans found so far do not
                # prune, as many as there are workers (pruning only grows with more plans,
                # so a candidate pruned now would be pruned in one process's order too)
                batch: list[int] = []
                j = i
                while j < len(bounds) and len(batch) < n_workers:
                    lb, c, ans = bounds[j]
                    if stop_at(lb, ans, c) is None:
                        batch.append(j)
                    j += 1
                results = dict(zip(batch, runner.evaluate(
                    [(bounds[k][1], _seed(bounds[k][2])) for k in batch]), strict=True))
                # apply in bound order exactly as one process would: an evaluation that the
                # plans before it in this batch prune is discarded
                for k in range(i, j):
                    lb, c, ans = bounds[k]
                    why = stop_at(lb, ans, c)
                    if why is not None or k not in results:
                        prune(lb, c, why or "pruned")
                    else:
                        ev = results[k]
                        ev["bound"] = lb
                        done.append(ev)
                        if ev["feasible"]:
                            feasible.append(ev)
                    b.update(1)
                i = j
    finally:
        runner.close()
    elapsed = time.perf_counter() - t0
    feasible.sort(key=lambda e: (e["plan"]["usd_per_mtok_total"], e["candidate"].label()))
    if not feasible:
        raise PlanError(_closest_miss(ctx, done or [{"candidate": c, "why": "bound",
                                                     "answer": a} for _, c, a in bounds]))
    from toolkit.plan.load import plan_for_load

    for ev in done:  # the front's figures, before the load replaces them
        if ev["feasible"]:
            ev["plan"]["tput_per_gpu_low"] = ev["answer"]["tput_per_gpu_low"]
            ev["plan"]["tput_per_gpu_high"] = ev["answer"]["tput_per_gpu_high"]
    # the load: each accelerator's best plans, sized by cluster replays, ranked at the load
    at_load, failed = plan_for_load(ctx, feasible, progress, workers=n_workers)
    if not at_load:
        from toolkit.plan.load import closest_miss

        raise PlanError(closest_miss(cfg, failed))
    elapsed = time.perf_counter() - t0
    plans = []
    for rank, ev in enumerate(at_load[:cfg.top], start=1):
        ev["load"]["plan"]["rank"] = rank
        plans.append(ev["load"]["plan"])
    from toolkit.plan.record import plan_id as make_id
    pid = make_id(cfg, ctx)
    for ev in done + pruned:
        buf = ev["candidate"].buffer
        ev["hisparse_buffer_tokens"] = round(buf * ctx.miss_scale) if buf else None
        eng = ev.get("engram")
        if eng is None and ev["candidate"].engram_gb is not None:
            eng = ctx.engram(ev["candidate"].hardware, ev["candidate"].engram_gb)
        ev["engram_hbm_gb"] = eng["hbm_bytes"] / 1e9 if eng else 0.0
    from toolkit.plan import load

    result = PlanResult(plans=plans, evaluated=done + pruned, searched=len(space),
                        evaluated_exactly=len(done), feasible=len(feasible),
                        elapsed_s=elapsed, assumptions=assumptions(ctx) + load.assumptions(ctx),
                        plan_id=pid, by_hardware=load.by_hardware(at_load),
                        cluster_replays=len(ctx.clusters))
    if save:
        from toolkit.plan.record import save_plan

        save_plan(store, cfg, ctx, result)
    return result


class _Runner:
    """Exact evaluations of candidates, in this process, on threads or as Ray tasks."""

    def __init__(self, ctx: _Context, executor: str, workers: int) -> None:
        self.ctx, self.executor, self.workers = ctx, executor, workers
        self._ray: Any = None
        self._started = False
        if executor == "ray":
            try:
                import ray
            except ImportError:
                raise PlanError("--engine ray needs Ray: pip install "
                                "'kvtier-toolkit[ray]'") from None
            self._ray = ray
            if not ray.is_initialized():
                try:
                    ray.init(address="local", num_cpus=workers, include_dashboard=False,
                             log_to_driver=False, logging_level="ERROR")
                except Exception as e:
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    raise PlanError(f"--engine ray: cannot start a local Ray: {first}") \
                        from None
                self._started = True
            self._remote = ray.remote(num_cpus=1, max_retries=0)(_remote_evaluate)

    def evaluate(self, batch: list[tuple[Candidate, tuple[str | None, int]]]) -> list[dict]:
        ctx = self.ctx
        if self.executor == "ray":
            root = str(ctx.store.root)
            return self._ray.get([self._remote.remote(root, ctx.cfg, c, seed)
                                  for c, seed in batch])
        from toolkit.runtime.pool import thread_map

        return thread_map(lambda t: _evaluate(ctx, *t), batch, self.workers)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False


_WORKER_CONTEXTS: dict[tuple[str, str], _Context] = {}


def _remote_evaluate(root: str, cfg: PlanConfig, c: Candidate,
                     seed: tuple[str | None, int]) -> dict:
    """One exact evaluation in a Ray worker: its own store handle and context (the trace,
    selections and Engram lookups read once per worker and plan)."""
    from toolkit.config import fingerprint
    from toolkit.store import Store

    key = (root, fingerprint(cfg))
    if key not in _WORKER_CONTEXTS:
        _WORKER_CONTEXTS.clear()
        _WORKER_CONTEXTS[key] = _Context(Store(root, create=False), cfg)
    return _evaluate(_WORKER_CONTEXTS[key], c, seed)


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
