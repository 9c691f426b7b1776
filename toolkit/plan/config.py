"""What ``toolkit plan`` is asked: a frozen dataclass, stdlib only, so the CLI reads its
defaults (the options' defaults) without loading the replays or the serving model."""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.config import check_number

DEFAULT_MAX_P90_TTFT_S = 10.0
"""The p90 TTFT bound when none is given: ``cost compare``'s (an assumption stated there),
so a plan with the host tiers and HiSparse forbidden answers what ``cost compare`` does."""

HISPARSE_MULTIPLES = (1, 2, 4)
"""HiSparse device buffers searched, in multiples of the recording's top-k (HiSparse's own
default is 2 x k)."""

PREFIX_RESERVE = (0.0, 0.5)
"""Shares of each GPU's KV pool kept for the prefix cache: 0 is SGLang's shared pool (running
requests and the radix cache take what they need); 0.5 caps running requests at half the
pool (SGLang's ``--max-running-requests``) so the other half only ever holds cached
prefixes. A reserve cannot add hits at the same users; it changes a plan through the serving
model's admission cap and the tier replay's running cap, and every reserve plan is still
replayed exactly. ``--prefix-reserve 0`` searches the shared pool alone (half the
candidates); ``--prefix-reserve 0,0.25,0.5`` a finer split."""

ENGRAM_HBM_GB = (0.5, 2.0, 8.0, 25.0)
"""Engram HBM options per GPU (GB); 25 GB holds the assumed 200 GB table over 8 GPUs whole
(any option at or above a GPU's share of the table places the whole table in HBM)."""

PLAN_KEYS = (
    "rank", "hardware", "engine", "layout", "gpus", "concurrency", "device_prefix_tokens",
    "hisparse_buffer_tokens", "engram_hbm_gb", "host_dram_gb", "ssd_gb", "policy",
    "gpu_hit_share", "host_hit_share", "storage_hit_share", "interactivity", "p90_ttft_s",
    "tput_per_gpu", "usd_per_mtok_total", "usd_per_mtok_total_low", "usd_per_mtok_total_high",
    "usd_breakdown", "run_ids")
"""The keys of each plan, in order (the issue's contract); extra keys follow them."""

ROUTER = "cache-aware"
"""The router in front of the planned instances: SGLang's cache-aware router (prefix overlap
against load, its published default weights), what a deployment that relies on prefix hits
runs (``--router round-robin`` or ``least-load`` plan for a router that scatters sessions)."""

MAX_INSTANCES = 512
"""The instance search gives up (naming the closest miss) beyond this many instances of one
accelerator: a load no cluster this size serves is a question for another layout."""

LOAD_CANDIDATES = 1
"""Plans sized for the load per accelerator and memory option (host DRAM, SSD): the best at
the front of each option, so the load decides between memory splits (more hits can mean
fewer instances) and more options never cost more; each costs an instance search (a few
cluster replays, warm-started at the count the same layout needed with another option)."""

ENGRAM_TABLE_GB = 200.0
"""All Engram tables of the planned model (GB): ``toolkit cost engram``'s assumption
(:data:`toolkit.cost.engram.DEFAULT_TABLE_BYTES`: a 100 B-parameter table in BF16)."""


@dataclass(frozen=True)
class PlanConfig:
    """One capacity-planning question; every field has the CLI flag of the same name.

    Attributes:
        trace: stored request trace (with prefix hashes) whose prefix reuse the tiers serve.
        model, hardware: model and accelerators to plan for (registry names).
        interactivity: target tok/s/user (median, InferenceX's definition).
        selections: stored selection trace for HiSparse (``None``: HiSparse is not planned).
        engram: stored Engram lookup trace (``None``: no Engram tables are planned).
        engram_hbm_gb: Engram HBM options per GPU (GB): an LRU row cache over the table in
            host DRAM, or the whole table when an option reaches a GPU's share of it.
        engram_table_gb: size of all Engram tables of the planned model (GB, assumed).
        max_p90_ttft_s: p90 TTFT bound; ``None`` lifts it.
        ttft_confidence: the bound applies to the upper end of the predicted p90 TTFT's
            central band at this confidence (``cost compare --ttft-confidence``).
        host_dram_gb, ssd_gb: host DRAM and NVMe options per serving instance of
            ``gpus_per_replica`` GPUs (0 forbids the tier).
        policy: device eviction policies of the prefix cache (tier replay names).
        hisparse_multiples: HiSparse buffer sizes searched, in multiples of the recording's k.
        prefix_reserve: shares of the device KV pool kept for the prefix cache (running
            requests capped to the rest: SGLang's ``--max-running-requests``); 0 = shared.
        exhaustive: evaluate every candidate exactly instead of pruning by lower bounds.
        top: plans printed (and ranked in ``plan_runs``).
        engines: hardware -> serving engine (default: ``cost compare``'s pairing).
        users: plan for this many closed-loop users (sessions with their think times) over
            the whole cluster.
        rate_rps: plan for open-loop arrivals at this mean rate (requests/s; the trace's
            arrival pattern rescaled).
        rate_scale: plan for the trace's own arrivals at this multiple of its rate. With none
            of ``users``, ``rate_rps``, ``rate_scale``: the trace as recorded (scale 1).
        router: the router in front of the instances (the cluster replay's names).
        max_instances: the instance search's ceiling per accelerator.
        load_candidates: plans per accelerator and memory option (the best at the front)
            that the instance search sizes for the load; also the exact plans kept per
            accelerator and memory option when pruning.
    """

    trace: str
    model: str
    hardware: tuple[str, ...]
    interactivity: float = 100.0
    selections: str | None = None
    engram: str | None = None
    max_p90_ttft_s: float | None = DEFAULT_MAX_P90_TTFT_S
    ttft_confidence: float = 0.8
    price_tier: str = "hyperscaler"
    host_dram_gb: tuple[float, ...] = (0.0, 256.0, 512.0, 1024.0)
    ssd_gb: tuple[float, ...] = (0.0, 4096.0, 16384.0)
    policy: tuple[str, ...] = ("lru",)
    hisparse_multiples: tuple[int, ...] = HISPARSE_MULTIPLES
    prefix_reserve: tuple[float, ...] = PREFIX_RESERVE
    engram_hbm_gb: tuple[float, ...] = ENGRAM_HBM_GB
    engram_table_gb: float = ENGRAM_TABLE_GB
    exhaustive: bool = False
    top: int = 5
    precision: str = "fp8"
    kv_dtype: str = "fp8"
    mtp: str = "on"
    gpus_per_replica: int = 8
    engines: dict[str, str] = field(default_factory=dict)
    users: int | None = None
    rate_rps: float | None = None
    rate_scale: float | None = None
    router: str = ROUTER
    max_instances: int = MAX_INSTANCES
    load_candidates: int = LOAD_CANDIDATES

    def __post_init__(self) -> None:
        for name in ("hardware", "host_dram_gb", "ssd_gb", "policy", "hisparse_multiples",
                     "prefix_reserve", "engram_hbm_gb"):
            v = getattr(self, name)
            if isinstance(v, list | tuple):  # an option given twice is searched once
                object.__setattr__(self, name, tuple(dict.fromkeys(v)))
            if not getattr(self, name):
                raise ValueError(f"{name}: give at least one value")
        check_number("interactivity", self.interactivity, lo=0.0, lo_open=True)
        if self.max_p90_ttft_s is not None:
            check_number("max_p90_ttft_s", self.max_p90_ttft_s, lo=0.0, lo_open=True)
        if self.ttft_confidence not in (0.5, 0.8, 0.9):
            raise ValueError(f"ttft_confidence (--ttft-confidence) must be one of (0.5, 0.8, 0.9), "
                             f"got "
                             f"{self.ttft_confidence!r}")
        for name in ("host_dram_gb", "ssd_gb"):
            for v in getattr(self, name):
                check_number(name, v, lo=0.0)
        for v in self.prefix_reserve:
            check_number("prefix_reserve", v, lo=0.0, hi=0.95)
        for v in self.engram_hbm_gb:
            check_number("engram_hbm_gb", v, lo=0.0)
        check_number("engram_table_gb", self.engram_table_gb, lo=0.0, lo_open=True)
        for v in self.hisparse_multiples:
            check_number("hisparse_multiples", v, lo=1)
        check_number("top", self.top, lo=1)
        check_number("gpus_per_replica", self.gpus_per_replica, lo=1)
        if self.mtp not in ("on", "off"):
            raise ValueError(f"mtp must be 'on' or 'off', got {self.mtp!r}")
        given = [n for n in ("users", "rate_rps", "rate_scale") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one load, not {' and '.join(given)} (users: closed loop; "
                             "rate_rps or rate_scale: the trace's arrivals, rescaled)")
        if self.users is not None:
            check_number("users", self.users, lo=1)
        if self.rate_rps is not None:
            check_number("rate_rps", self.rate_rps, lo=0.0, lo_open=True)
        if self.rate_scale is not None:
            check_number("rate_scale", self.rate_scale, lo=0.0, lo_open=True)
        from toolkit.replay.tiers.config import ROUTERS

        if self.router not in ROUTERS:
            raise ValueError(f"router {self.router!r}: one of {', '.join(ROUTERS)}")
        check_number("max_instances", self.max_instances, lo=1)
        check_number("load_candidates", self.load_candidates, lo=1)
