"""What a tier replay is asked to do: frozen dataclasses and name tables, stdlib only.

Kept free of NumPy, Arrow and numba so the CLI (and anything listing defaults) can read
the fields without loading the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from toolkit.config import check_count, check_number, fingerprint

UNBOUNDED = -1  # a capacity of -1 tokens means "never evicts"
SEMANTICS = ("sglang", "page")
ENGINES = ("sglang", "vllm")  # --engine-semantics; radix_semantics applies to sglang
# SGLang's evict_policy.py: lru = last access; lfu = (hit count, last access);
# sglang-slru = SLRUStrategy(protected_threshold=2), i.e. (hit_count >= 2, last access);
# priority = (request priority, last access). Traces carry no request priority, so every
# page has priority 0 and "priority" orders exactly as lru. Values are the kernel codes.
# Not the policy registry's "slru" (libCacheSim's segmented LRU), hence its own name;
# "slru" is still accepted here and normalised before the config is fingerprinted.
POLICY_CODES = {"lru": 0, "lfu": 1, "sglang-slru": 2, "priority": 0}
POLICY_ALIASES = {"slru": "sglang-slru"}
WRITE_CODES = {"write_through": 0, "write_through_selective": 1, "write_back": 2}
# --offload-policy: vLLM's CPU offloading tier (none = no host tier under vllm)
OFFLOAD_POLICIES = ("none", "lru", "arc")


def sglang_host_tokens(device_tokens: int, ratio: float, page_tokens: int) -> int:
    """SGLang's host KV pool for ``--hicache-ratio ratio`` over a ``device_tokens`` pool.

    SGLang 0.5.23 ``mem_cache/pool_host/base.py`` (``HostKVCache.__init__``): ``size =
    int(device * ratio)``, then ``page_num = size // page + 1`` and ``size = page_num *
    page``: whole pages plus one padding page, all of it usable (``available_size``). So
    ratio 2 over 204,800 tokens at 64-token pages is 409,664 tokens, and ratio 0.25 at
    1-token pages is 51,201. Why mirror it: at a host smaller than the device, write-through
    backups fail and one page decides which (``tests/test_tiers_sglang_host.py``).
    """
    if page_tokens < 1:
        raise ValueError(f"page_tokens must be >= 1, got {page_tokens}")
    return (int(device_tokens * ratio) // page_tokens + 1) * page_tokens


@dataclass(frozen=True)
class ServiceAssumptions:
    """The knobs of the service-time model (:mod:`toolkit.serving.tier_service`).

    Attributes:
        gpus_per_replica: GPUs of one serving instance (8: GLM-5.x FP8 needs > 4 GB200s).
        kv_dtype: fp8 (656 B MLA rows) or bf16.
        weight_precision: fp8 | bf16 | fp4, for weight bytes and GEMM peak.
        mem_fraction: share of usable HBM for weights + KV (sglang ``mem_fraction_static``-like;
            assumed 0.9).
        engine: engine whose fitted serving-model terms time the instance (``sglang``).
        mechanism: host-load transfer path (``toolkit.serving.transfer.transfer_path``).
        dp_attention, expert_parallel, mtp: the instance's layout beyond its width
            (data-parallel attention, expert-parallel MoE, multi-token prediction), as
            ``toolkit plan`` sizes the layout its front point runs; off: SGLang's TP layout.
    """

    gpus_per_replica: int = 8
    kv_dtype: str = "fp8"
    weight_precision: str = "fp8"
    mem_fraction: float = 0.9
    engine: str = "sglang"
    mechanism: str = "sm_kernel"
    dp_attention: bool = False
    expert_parallel: bool = False
    mtp: bool = False

    def __post_init__(self) -> None:
        check_number("assumptions.gpus_per_replica", self.gpus_per_replica, lo=1, hi=1 << 16)
        check_number("assumptions.mem_fraction", self.mem_fraction, lo=0.0, hi=1.0,
                     lo_open=True)
        if not isinstance(self.engine, str) or not self.engine:
            raise ValueError(f"assumptions.engine must be an engine name, got {self.engine!r}")


@dataclass(frozen=True)
class ServiceTimes:
    """Coefficients the compiled loop times requests with (seconds).

    The replay counts and schedules; these numbers come from its caller (the serving
    model, :mod:`toolkit.serving.tier_service`), so the replay never models hardware.
    """

    kv_bytes_per_token: int
    prefill_s_per_token: float
    prefill_s_per_token_context: float
    host_fixed_s: float
    host_s_per_token: float
    storage_fixed_s: float
    storage_s_per_token: float
    tpot_by_batch_s: Any  # float64 array, index = running requests (index 0 unused)
    context_tokens: int
    kv_transfer_s_per_token: float = 0.0  # to a decode pool, when the instance is a prefill


class TierService(Protocol):
    """What :func:`toolkit.replay.tiers.replay_tiers` asks of a service-time model."""

    def times(self, context_tokens: int, max_batch: int) -> ServiceTimes:
        """Service times at a mean prompt of ``context_tokens`` for up to ``max_batch``
        running requests."""
        ...

    def default_device_tokens(self) -> int:
        """The device KV pool in tokens when the config leaves it to the hardware."""
        ...


#: Bounds of F in ``arrivals = "scaled:F"`` (F x the trace's request rate): a million-fold
#: either way covers any load study; ``scaled:1e-300`` stored inf bytes and a 0 s TTFT.
MIN_RATE_SCALE = 1e-6
MAX_RATE_SCALE = 1e6


@dataclass(frozen=True)
class TierReplayConfig:
    """One tier replay. Capacities in tokens; ``None`` derives them, ``-1`` is unbounded.

    Attributes:
        trace: stored request timeline (with prefix hashes).
        hardware, model: spec names; they set capacities, service times and price.
        concurrency: run closed-loop with this many users (sessions); ``None`` replays
            arrivals open-loop.
        arrivals: open-loop times: ``trace``; ``scaled:F`` (arrival_s / F, F x the rate);
            ``from:NAME`` (the inter-arrival gaps of another stored trace, e.g. Azure).
        device_tokens: KV pool; default from HBM left after weights.
        host_tokens: host pool in tokens, used as given (``--host-tokens``); ``None``
            sizes it from ``host_ratio`` (:meth:`host_pool_tokens`).
        host_ratio: SGLang's ``--hicache-ratio``: the host pool SGLang allocates for it,
            whole pages plus its one padding page (:func:`sglang_host_tokens`); under vllm
            ``host_ratio`` x device tokens (vLLM sizes its CPU tier in bytes, with no
            padding); 0 = no host tier.
        storage_tokens: L3 capacity; 0 disables it.
        page_tokens: page size; default the trace's block size; a divisor of it (blocks
            split into sub-pages covering the same tokens) or a multiple of it.
        radix_semantics: sglang (SGLang's RadixCache, default) | page (page-granular).
        sequential: one request at a time in arrival order, no decode pages.
        engine_semantics: sglang (default: ``radix_semantics`` picks the device tier) |
            vllm (vLLM v1's block pool and prefix cache, ``block_tokens`` blocks; no
            host tier; see :mod:`toolkit.replay.tiers.vllm_blocks`).
        block_tokens: vLLM's block size (its default 16); read only under vllm.
        offload_policy: vLLM's CPU offloading tier under vllm: none (default: no host
            tier) | lru | arc (its ``eviction_policy``); the tier holds ``host_tokens`` (or
            ``host_ratio`` x device) in ``block_tokens`` blocks. See
            :mod:`toolkit.replay.tiers.vllm_blocks`.
        policy: device eviction: lru | lfu | sglang-slru | priority (sglang
            evict_policy.py; with no request priorities in a trace, priority orders exactly
            as lru). ``slru`` is an alias of sglang-slru, stored as sglang-slru.
        write_policy: write_through | write_through_selective | write_back.
        write_through_threshold: hits before a selective backup (sglang uses 2).
        max_running: cap on running requests; 0 = none.
        price_tier: hyperscaler | neocloud | rental, for $/M tokens.
    """

    trace: str
    hardware: str = "gb200"
    model: str = "glm-5.2"
    concurrency: int | None = None
    arrivals: str = "trace"
    device_tokens: int | None = None
    host_tokens: int | None = None
    host_ratio: float = 2.0
    storage_tokens: int = 0
    page_tokens: int | None = None
    policy: str = "lru"
    write_policy: str = "write_through"
    write_through_threshold: int = 2
    max_running: int = 0
    radix_semantics: str = "sglang"
    sequential: bool = False
    engine_semantics: str = "sglang"
    block_tokens: int = 16
    offload_policy: str = "none"
    price_tier: str = "hyperscaler"
    assumptions: ServiceAssumptions = ServiceAssumptions()

    def __post_init__(self) -> None:
        if self.policy in POLICY_ALIASES:
            object.__setattr__(self, "policy", POLICY_ALIASES[self.policy])
        if self.policy not in POLICY_CODES:
            raise ValueError(
                f"policy must be one of {', '.join(POLICY_CODES)}; got {self.policy!r}"
            )
        if self.radix_semantics not in SEMANTICS:
            raise ValueError(
                f"radix_semantics must be sglang or page; got {self.radix_semantics!r}"
            )
        if self.engine_semantics not in ENGINES:
            raise ValueError(
                f"engine_semantics must be sglang or vllm; got {self.engine_semantics!r}"
            )
        if self.offload_policy not in OFFLOAD_POLICIES:
            raise ValueError(f"offload_policy must be none, lru or arc; got "
                             f"{self.offload_policy!r}")
        if self.offload_policy != "none" and self.engine_semantics != "vllm":
            raise ValueError("offload_policy applies to engine_semantics vllm (vLLM's CPU "
                             "offloading connector); SGLang's host tier is HiCache")
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {self.block_tokens}")
        if self.page_tokens is not None and self.page_tokens < 1:
            raise ValueError(f"page_tokens must be >= 1, got {self.page_tokens}")
        if self.write_policy not in WRITE_CODES:
            raise ValueError(f"write_policy must be one of {', '.join(WRITE_CODES)}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not (self.arrivals == "trace" or self.arrivals.startswith(("scaled:", "from:"))):
            raise ValueError(
                f"arrivals must be trace, scaled:F or from:TRACE; got {self.arrivals!r}"
            )
        if self.arrivals.startswith("scaled:"):
            try:
                factor = float(self.arrivals[7:])
            except ValueError:
                raise ValueError(f"arrivals {self.arrivals!r}: F in scaled:F must be a number, "
                                 "e.g. scaled:2") from None
            if not MIN_RATE_SCALE <= factor <= MAX_RATE_SCALE:  # NaN, inf and 0 too
                raise ValueError(f"arrivals {self.arrivals!r}: scaled:F needs "
                                 f"{MIN_RATE_SCALE:g} <= F <= {MAX_RATE_SCALE:g} (beyond, "
                                 "arrival times overflow to inf or collapse to 0)")
        for name in ("device_tokens", "host_tokens"):
            v = getattr(self, name)
            if v is not None and v < UNBOUNDED:
                raise ValueError(f"{name} must be >= 0, -1 (unbounded) or None (default)")
        if self.storage_tokens < UNBOUNDED:
            raise ValueError("storage_tokens must be >= 0 or -1 (unbounded)")
        for name in ("device_tokens", "host_tokens", "storage_tokens", "page_tokens",
                     "block_tokens", "concurrency"):
            v = getattr(self, name)
            if v is not None:
                check_count(name, v, lo=UNBOUNDED)
        check_number("host_ratio", self.host_ratio, lo=0.0, hi=1e6)
        check_number("write_through_threshold", self.write_through_threshold, lo=0)
        check_number("max_running", self.max_running, lo=0)

    def host_pool_tokens(self, device_tokens: int, page_tokens: int | None) -> int:
        """The host pool in tokens for a ``device_tokens`` pool of ``page_tokens`` pages:
        ``host_tokens`` when set, else from ``host_ratio`` as the engine sizes it (see the
        attributes). The one definition the CLI, the Python API and sweep grids share.

        Raises:
            ValueError: SGLang sizing needs the page size and none is known.
        """
        if self.host_tokens is not None:
            return int(self.host_tokens)
        if device_tokens == UNBOUNDED:
            return UNBOUNDED
        if self.host_ratio == 0:
            return 0
        if self.engine_semantics == "vllm":
            return int(self.host_ratio * device_tokens)
        page = page_tokens if page_tokens is not None else self.page_tokens
        if page is None:
            raise ValueError("host_ratio: SGLang's host pool is sized in pages; pass the "
                             "stream's page_tokens (or set page_tokens or host_tokens)")
        return sglang_host_tokens(int(device_tokens), self.host_ratio, int(page))

    @property
    def arrival_label(self) -> str:
        if self.sequential:
            return "sequential"
        return "closed" if self.concurrency is not None else self.arrivals

    @property
    def run_id(self) -> str:
        from toolkit.store import bounded_key  # here: the store loads Arrow

        load = f"c{self.concurrency}" if self.concurrency else self.arrivals.replace(":", "")
        load = "seq" if self.sequential else load
        return bounded_key(f"tiers-{self.trace}-{self.hardware}-{load}-{fingerprint(self)[:8]}")


# --router: round-robin; least-load (fewest outstanding requests); cache-aware (SGLang's
# router, sgl-model-gateway's cache_aware policy); kv-router (Dynamo's KV router). Values
# are the loop's codes (toolkit.replay.tiers.loop.R_*).
ROUTERS = {"round-robin": 0, "least-load": 1, "cache-aware": 2, "kv-router": 3}
# SGLang router (sgl-model-gateway) cache_aware defaults, from its CLI defaults in
# sgl-project/sglang ``sgl-router/src/main.rs`` (CliArgs: cache_threshold 0.3,
# balance_abs_threshold 64, balance_rel_threshold 1.5; the same in
# ``sgl-router/src/config/types.rs`` PolicyConfig::CacheAware)
SGLANG_CACHE_THRESHOLD = 0.3
SGLANG_BALANCE_ABS_THRESHOLD = 64
SGLANG_BALANCE_REL_THRESHOLD = 1.5
# Dynamo KV router defaults, ai-dynamo/dynamo ``lib/llm/src/kv_router/config.rs``
# (KvRouterConfig::default: overlap_score_weight 1.0, router_temperature 0.0 = always the
# lowest-cost worker); the cost is ``lib/llm/src/kv_router/scheduler.rs``'s
# ``overlap_weight * prefill_blocks + decode_blocks``
DYNAMO_OVERLAP_SCORE_WEIGHT = 1.0


@dataclass(frozen=True)
class DecodePool:
    """The decode side of one disaggregated deployment (SGLang PD, Dynamo): its layout
    times the decode steps; it holds each request's whole KV (prompt + output) while it
    decodes and keeps no prefix cache (SGLang's PD decode server runs without a radix
    cache; the prefix caches are the prefill side's).

    Attributes:
        gpus: GPUs of the decode pool.
        dp_attention, expert_parallel, mtp: its layout (the serving model's decode step).
        device_tokens: KV tokens the pool holds across its GPUs; None: from the HBM its
            weights leave (per GPU with DP attention, else one GPU's, as the caller sizes).
        max_running: cap on requests decoding in the pool; 0 none.
    """

    gpus: int
    dp_attention: bool = True
    expert_parallel: bool = True
    mtp: bool = False
    device_tokens: int | None = None
    max_running: int = 0

    def __post_init__(self) -> None:
        check_number("decode.gpus", self.gpus, lo=1, hi=1 << 16)
        if self.device_tokens is not None:
            check_count("decode.device_tokens", self.device_tokens, lo=UNBOUNDED)
        check_count("decode.max_running", self.max_running)


@dataclass(frozen=True)
class ClusterReplayConfig:
    """N instances of one serving layout behind a router: a cluster replay.

    Every instance is the tier replay of ``tiers`` (its own device/host/storage caches,
    service times, running cap); what the tier config means for the cluster:

    * ``tiers.concurrency``: closed-loop users over the whole cluster (sessions with their
      think times); None replays open-loop arrivals from the trace's timestamps
      (``tiers.arrivals``: ``scaled:F`` multiplies the rate by F, i.e. ``--rate-scale``);
    * ``tiers.device_tokens`` / ``host_tokens`` / ``storage_tokens``: per prefix cache
      (per instance, or per DP-attention rank when ``ranks`` > 1);
    * ``tiers.max_running``: per prefix cache (per rank);
    * ``tiers.assumptions``: the instance's layout (the prefill side's when disaggregated):
      ``gpus_per_replica`` GPUs, DP attention, expert parallelism, MTP.

    A deployment ("instance") is aggregated, with ``ranks`` prefix caches (1: tensor-parallel
    attention, every GPU holds every token; ``gpus_per_replica`` with DP attention, each rank
    its own requests' KV and radix tree), one prefill lane and one decode batch; or, with
    ``decode``, disaggregated: those caches and lane are its prefill side, and a
    :class:`DecodePool` decodes. The router addresses every cache (Dynamo's KV router and
    SGLang's router route to ``(worker, dp_rank)``).

    Attributes:
        tiers: the per-instance tier replay (trace, hardware, model, tiers, load).
        instances: serving instances behind the router.
        router: round-robin | least-load | cache-aware (SGLang) | kv-router (Dynamo).
        rate_rps: open loop: rescale the trace's arrival times to a mean of this many
            requests per second (replaces ``tiers.arrivals``); None keeps them.
        cache_threshold, balance_abs_threshold, balance_rel_threshold: SGLang router's
            cache_aware knobs (defaults: its published defaults).
        overlap_score_weight: Dynamo KV router's weight on prefill blocks (default 1.0).
        ranks: prefix caches per instance (DP-attention ranks; needs
            ``tiers.assumptions.dp_attention`` when > 1).
        decode: the decode pool of a disaggregated instance; None: aggregated.
        session_affinity_ttl_s: > 0: a request whose session was routed within the last
            this many seconds goes to that session's cache, whatever the router would
            choose (Dynamo's ``--router-session-affinity-ttl-secs``, a sticky layer in
            front of any router here); each routing renews the binding; 0 off.
    """

    tiers: TierReplayConfig
    instances: int = 1
    router: str = "round-robin"
    rate_rps: float | None = None
    cache_threshold: float = SGLANG_CACHE_THRESHOLD
    balance_abs_threshold: float = SGLANG_BALANCE_ABS_THRESHOLD
    balance_rel_threshold: float = SGLANG_BALANCE_REL_THRESHOLD
    overlap_score_weight: float = DYNAMO_OVERLAP_SCORE_WEIGHT
    ranks: int = 1
    decode: DecodePool | None = None
    session_affinity_ttl_s: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.tiers, TierReplayConfig):
            raise ValueError("tiers must be a TierReplayConfig")
        check_number("instances", self.instances, lo=1, hi=1 << 16)
        if self.router not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)}; got {self.router!r}")
        if self.tiers.sequential:
            raise ValueError("a cluster replay cannot be sequential (one request at a time)")
        if self.rate_rps is not None:
            check_number("rate_rps", self.rate_rps, lo=0.0, hi=1e9, lo_open=True)
            if self.tiers.concurrency is not None:
                raise ValueError("give either users (concurrency, closed loop) or rate_rps "
                                 "(open loop), not both")
        check_number("cache_threshold", self.cache_threshold, lo=0.0, hi=1.0)
        check_number("balance_abs_threshold", self.balance_abs_threshold, lo=0.0, hi=1e9)
        check_number("balance_rel_threshold", self.balance_rel_threshold, lo=0.0, hi=1e9)
        check_number("overlap_score_weight", self.overlap_score_weight, lo=0.0, hi=1e9)
        check_number("session_affinity_ttl_s", self.session_affinity_ttl_s, lo=0.0, hi=1e9)
        g = self.tiers.assumptions.gpus_per_replica
        check_number("ranks", self.ranks, lo=1, hi=g)
        if self.ranks > 1 and not self.tiers.assumptions.dp_attention:
            raise ValueError(f"ranks {self.ranks}: separate prefix caches per instance are "
                             "DP-attention ranks; set assumptions.dp_attention")
        if self.decode is not None and not isinstance(self.decode, DecodePool):
            raise ValueError("decode must be a DecodePool or None")
        if self.instances * self.ranks > 1 << 16:
            raise ValueError(f"instances x ranks = {self.instances * self.ranks:,} prefix "
                             "caches; at most 65,536")

    @property
    def caches(self) -> int:
        """Prefix caches the router chooses among: instances x ranks."""
        return self.instances * self.ranks

    @property
    def gpus_per_instance(self) -> int:
        """GPUs of one deployment: its instance, plus its decode pool when disaggregated."""
        g = self.tiers.assumptions.gpus_per_replica
        return g + (self.decode.gpus if self.decode is not None else 0)

    @property
    def gpus(self) -> int:
        return self.instances * self.gpus_per_instance

    @property
    def run_id(self) -> str:
        from toolkit.store import bounded_key  # here: the store loads Arrow

        t = self.tiers
        load = f"u{t.concurrency}" if t.concurrency else (
            f"r{self.rate_rps:g}" if self.rate_rps else t.arrivals.replace(":", ""))
        return bounded_key(f"cluster-{t.trace}-{t.hardware}-x{self.instances}-{self.router}-"
                           f"{load}-{fingerprint(self)[:8]}")
