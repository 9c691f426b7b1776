"""Step-level model of one serving deployment under a closed loop of ``conc`` users.

Decode step of one instance (per GPU; ``B`` requests decoding, ``q = 1 + drafts`` tokens
verified each, ``a`` accepted: MTP drafts and acceptance are recipe inputs,
:mod:`toolkit.serving.recipes`)::

    t_step = (overhead + t_token + t_dense + t_moe + t_attention + t_comm + t_prefill_share)
             x age + t_miss
    t_token     = per-token time outside the rooflines (sampling, scheduling, metadata)
    t_dense     = max(dense weight bytes / (HBM bandwidth x eff_mem),
                      dense GEMM FLOPs / (peak at the weight precision x eff_compute))
    t_moe       = the same roofline for the routed experts the batch touches
    t_attention = max((KV rows + indexer keys) / (HBM x eff_mem),
                      attention FLOPs / (FP8 peak x eff_compute))
                  (kernels run one after another, each bound by its own roofline)
    t_comm      = (MoE dispatch+combine, or TP all-reduce bytes) / (link x eff_comm)
                  + one latency per collective; the link is the scale-up fabric inside
                  ``scaleup_domain_gpus``, else the per-GPU scale-out NIC
    t_prefill_share = aggregated instances: the prompt tokens of the requests replacing
                  finished ones (``B a isl / osl`` per step) at the prefill chunk's cost
    age         = exp(drift x engine age / 100 days): older engine images are slower
    t_miss      = HiSparse host fetches: one round trip per layer + miss rows x row bytes /
                  gather bandwidth; exposed in full (synchronous) or only beyond the layers'
                  work (overlapped, plan-then-IO prefetch)
    TPOT        = t_step / a

Every efficiency lies in an explicit range (:data:`toolkit.serving.params.RANGES`). Prefill
of one request: FLOPs / (peak x eff_prefill) plus one weight read and one overhead per 8K
chunk; attention per query covers the whole prefix for dense models and at most the
indexer's top-k rows for DSA models (in absorbed MQA form, as the sparse kernels run it),
plus the indexer itself, which every rank of a tensor-parallel instance runs whole
(:func:`indexer_split`; in decode too). Disaggregated runs add the KV transfer to the
decode pool.

Two ways to run a deployment: :func:`solve`, a fast steady state (the batch per decode
instance solves ``conc = n_dec B + X TTFT`` with Poisson arrivals at a G/D/c prefill queue),
which the fit uses; and :func:`client`, a replay of InferenceX's benchmark client against
the same step times (:mod:`toolkit.serving.client`), which predictions use.

Labelled assumptions: every context is ``isl + osl / 2`` tokens on average; FP4 checkpoints
keep non-expert weights in FP8; attention math runs at the FP8 peak (FP8 KV caches).
"""

from __future__ import annotations

import numpy as np

from toolkit.serving.layout import Design
from toolkit.serving.recipes import (
    SGLANG_REQ_POOL_MAX,
    SGLANG_REQ_POOL_MIN,
    SGLANG_REQ_POOL_PER_CONTEXT,
)

KV_FREE_FRACTION = 0.9
"""Share of the HBM left after the weights that holds KV: TensorRT-LLM's
``KvCacheConfig.free_gpu_memory_fraction`` default (0.9, "90% of free GPU memory for KV
cache": nvidia.github.io/TensorRT-LLM/examples/kvcacheconfig.html); assumed for SGLang and
vLLM too, whose recipes tune their total-memory fraction until the layout runs. A fixed 15%
of all HBM made DeepSeek-R1 FP8 on 4x B200 (168 GB of weights per 186 GB GPU) hold no
request at all, where InferenceX measured it at 32 users; with this rule the 5-fold held-out
throughput error fell from 14.7% / 49.1% (median / p90) to 14.2% / 40.5%."""
PREFILL_CHUNK_TOKENS = 8192.0
"""Chunked-prefill size (assumed: SGLang's default for large-memory GPUs)."""
P90_WAIT_FACTOR = 2.3
"""p90 / mean of an exponential queueing wait (ln 10)."""
BISECTION_STEPS = 32
EP_BYTES_PER_VALUE = 4.0
"""Bytes per hidden value of one token's expert-parallel dispatch plus combine: BF16 both ways
(assumed: DeepEP's normal-mode kernels and SGLang's default dispatch carry BF16; FP8 dispatch
would be 3)."""


def _tokens(d: Design) -> tuple[np.ndarray, np.ndarray]:
    """Tokens accepted and tokens verified per decode step (recipe inputs, not fitted)."""
    return d.mtp_accept, 1.0 + d.mtp_draft


def _age_factor(d: Design, th: dict[str, np.ndarray]) -> np.ndarray:
    """Step-time multiplier of an engine ``age_days`` older than the reference date."""
    return np.exp(th["drift_per_100d"] * d.age_days / 100.0)


def indexer_split(g: np.ndarray, dp_attn: np.ndarray) -> np.ndarray:
    """Ranks that share one instance's lightning-indexer FLOPs: all ``g`` under DP attention
    (each rank scores its own requests' keys), one under tensor parallelism. The engines
    replicate the indexer on every TP rank: its projections are ``ReplicatedLinear`` and each
    rank scores all of its heads over every key, in vLLM (``models/deepseek_v2.py``
    ``Indexer``: "no tensor parallel, just replicated"), SGLang (``nsa_indexer.py``), ATOM and
    TensorRT-LLM (``n_heads = index_n_heads`` per rank). Its projections (~1 GFLOP per token
    for GLM-5) stay in the active parameters, split like every GEMM."""
    return np.where(dp_attn, g, 1.0)


def mean_rows_attended(first: np.ndarray, last: np.ndarray, topk: np.ndarray) -> np.ndarray:
    """Mean KV rows a query attends to over positions ``first .. last`` (uniform): the whole
    prefix for dense attention (``topk = 0``), else at most the indexer's ``topk`` rows (DSA
    attends densely only within the first k tokens)."""
    c = np.asarray(first, dtype=np.float64)
    L = np.maximum(np.asarray(last, dtype=np.float64), c + 1e-9)
    k = np.where(topk > 0, topk, L + 1.0)
    dense = 0.5 * (c + L)
    part = (0.5 * (np.minimum(k, L) ** 2 - c ** 2) + k * np.maximum(L - k, 0.0)) / (L - c)
    return np.where(k >= L, dense, np.where(k <= c, k, part))


def _collectives(d: Design, th: dict[str, np.ndarray], tok: np.ndarray, g: np.ndarray,
                 dp_attn: np.ndarray, ep_moe: np.ndarray, beyond_domain: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One forward's collectives over ``tok`` tokens on an instance of ``g`` GPUs, per GPU:
    expert dispatch + combine bytes, all-reduce bytes (TP attention, TP MoE), the number of
    collectives and the latency of each. Decode steps and prefill forwards share it: the
    same kernels move the same activations, only over their own instance's link."""
    shard = np.maximum(g - 1.0, 0.0) / np.maximum(g, 1.0)
    ep_bytes = np.where(ep_moe, d.moe_layers * tok / g * d.topk_experts * d.hidden
                        * EP_BYTES_PER_VALUE * shard, 0.0)
    n_allreduce = np.where(dp_attn, 0.0, 1.0) + np.where(ep_moe, 0.0, 1.0)
    ar_bytes = n_allreduce * d.layers * tok * d.hidden * 2.0 * 2.0 * shard
    n_coll = np.where(ep_moe, 2.0 * d.moe_layers, 0.0) + n_allreduce * d.layers
    n_coll = np.where(g > 1, n_coll, 0.0)
    # a collective of an instance beyond one scale-up domain also crosses the NICs: its
    # latency is a term of its own (fitted; it was an assumed 2x of the in-domain latency,
    # under which a whole accelerator held out missed by up to 85%: H100's multi-node
    # instances against H200's single-node ones)
    lat = np.where(beyond_domain, th["scaleout_collective_latency_s"],
                   th["collective_latency_s"])
    return ep_bytes, ar_bytes, n_coll, lat


def decode_terms(d: Design, th: dict[str, np.ndarray], batch: np.ndarray) -> dict[str, np.ndarray]:
    """Every term of one decode step at ``batch`` requests per decode instance (per GPU)."""
    g = d.g_dec
    a, q = _tokens(d)
    ctx = d.isl + d.osl / 2.0
    rows_read = np.where(d.sparse_topk > 0, np.minimum(ctx, d.sparse_topk), ctx)
    isl_new = d.isl * (1.0 - d.cached_prefix_fraction)
    # aggregated instances also prefill the prompts of the requests that replace finished
    # ones: ``B a isl / osl`` tokens per step on average, each at the prefill chunk's cost
    # (the same per-token cost the client replay charges a chunk)
    prefill_tok = np.where(d.disagg, 0.0, batch * a * isl_new / d.osl)
    t_prefill_share = prefill_tok * prefill_terms(d, th)["t_prefill_compute_s"] / np.maximum(
        isl_new, 1.0)
    dec_tok = batch * q
    tok = dec_tok
    touched = 1.0 - (1.0 - d.topk_experts / d.experts) ** tok
    attn_split = np.where(d.dp_attn, g, 1.0)  # TP attention: every rank reads all latent rows
    w_dense = d.dense_bytes / np.where(d.dp_attn, 1.0, g)
    w_routed = d.routed_bytes * touched / g
    kv = batch * d.layers * rows_read * d.kv_row_bytes / attn_split
    idx = batch * d.idx_layers * ctx * d.idx_row_bytes / attn_split
    bw = d.hbm_bw * th["eff_mem"]
    dense_frac = np.clip(1.0 - (d.routed_bytes / np.maximum(d.dense_bytes + d.routed_bytes,
                                                             1.0)), 0.0, 1.0)
    gemm = 2.0 * d.active_params * tok / g
    # MLA attention splits its heads over a TP instance; the indexer is replicated
    attn = (dec_tok * d.layers * rows_read * d.attn_decode_flops_per_ctx / g
            + dec_tok * d.idx_layers * ctx * d.idx_flops_per_ctx / indexer_split(g, d.dp_attn))
    peak_w = d.peak_w * th["eff_compute"]
    peak_a = d.peak_attn * th["eff_compute"]
    # one roofline per kernel family, run one after another: dense GEMMs, MoE GEMMs, attention
    t_dense = np.maximum(w_dense / bw, gemm * dense_frac / peak_w)
    t_moe = np.maximum(w_routed / bw, gemm * (1.0 - dense_frac) / peak_w)
    t_attn = np.maximum((kv + idx) / bw, attn / peak_a)
    t_hbm = (w_dense + w_routed + kv + idx) / bw
    t_comp = gemm / peak_w + attn / peak_a
    ep_bytes, ar_bytes, n_coll, lat = _collectives(d, th, tok, g, d.dp_attn, d.ep_moe,
                                                   d.dec_beyond_domain)
    t_comm_bw = (ep_bytes + ar_bytes) / (d.link_bw_dec * th["eff_comm"])
    t_comm_lat = n_coll * lat
    t_comm = t_comm_bw + t_comm_lat
    miss_b = batch / attn_split * d.layers * d.miss_rows_per_layer * d.kv_row_bytes
    t_miss = np.where(miss_b > 0, d.layers * d.miss_fixed_s + miss_b / d.miss_bw, 0.0)
    work = t_dense + t_moe + t_attn
    # plan-then-IO prefetch hides fetches behind the layers' own work
    t_miss_exposed = np.where(d.hisparse_overlap, np.maximum(t_miss - work, 0.0), t_miss)
    # Engram row-cache misses: each Engram layer waits for its own gather of the step's
    # tokens' missed rows over the host link (``toolkit.cost.engram``'s sync placement:
    # the same SM gather path, one round trip per Engram layer), per GPU's tokens
    eng_b = tok / g * d.engram_miss_bytes
    t_engram = np.where(eng_b > 0, d.engram_layers * (d.miss_fixed_s + eng_b / d.miss_bw), 0.0)
    t_miss_exposed = t_miss_exposed + t_engram
    age = _age_factor(d, th)
    t_token = th["overhead_per_token_s"] * tok / attn_split
    t_step = ((th["overhead_s"] + t_token + work + t_comm + t_prefill_share) * age
              + t_miss_exposed)
    return {
        "weight_bytes": w_dense + w_routed, "kv_bytes": kv, "indexer_bytes": idx,
        "gemm_flops": gemm, "attention_flops": attn, "comm_bytes": ep_bytes + ar_bytes,
        "miss_bytes": miss_b, "engram_miss_bytes": eng_b * d.engram_layers,
        "t_engram_s": t_engram,
        "t_overhead_s": th["overhead_s"] + 0.0 * batch, "t_per_token_s": t_token,
        "t_prefill_share_s": t_prefill_share,
        "t_hbm_s": t_hbm, "t_compute_s": t_comp,
        "t_dense_gemm_s": t_dense, "t_moe_gemm_s": t_moe, "t_attention_s": t_attn,
        "t_comm_s": t_comm, "t_miss_s": t_miss_exposed, "t_step_s": t_step, "tpot_s": t_step / a,
        "prefill_tokens_per_step": prefill_tok,
        # peaks used and the fractions achieved (the fitted efficiencies at work)
        "n_collectives": n_coll, "collective_latency_s": lat + 0.0 * batch,
        "t_comm_bandwidth_s": t_comm_bw, "t_comm_latency_s": t_comm_lat,
        "peak_hbm_bytes_per_s": d.hbm_bw + 0.0 * batch, "eff_mem": th["eff_mem"] + 0.0 * batch,
        "peak_flops_per_s": d.peak_w + 0.0 * batch,
        "eff_compute": th["eff_compute"] + 0.0 * batch,
        "link_bytes_per_s": d.link_bw_dec + 0.0 * batch, "eff_comm": th["eff_comm"] + 0.0 * batch,
        "achieved_hbm_fraction": (w_dense + w_routed + kv + idx) / np.maximum(work, 1e-12)
        / d.hbm_bw,
        "achieved_compute_fraction": (gemm / d.peak_w + attn / d.peak_attn)
        / np.maximum(work, 1e-12),
        "achieved_link_fraction": np.where(t_comm > 0, (ep_bytes + ar_bytes)
                                           / np.maximum(t_comm, 1e-12) / d.link_bw_dec, 0.0),
        "age_factor": age + 0.0 * batch,
    }


def prefill_terms(d: Design, th: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Service time of one request's prefill on one prefill instance, and its KV transfer."""
    g = d.g_pre
    new = d.isl * (1.0 - d.cached_prefix_fraction)
    ctx_avg = d.isl - new / 2.0
    rows = mean_rows_attended(d.isl - new, d.isl, d.sparse_topk)  # DSA: at most top-k rows
    idx = new * d.idx_layers * ctx_avg * d.idx_flops_per_ctx
    # DSA prefill runs the sparse MLA kernels in absorbed (MQA) form, 576-dim keys and
    # 512-dim values per head, as decode does (FlashMLA's sparse prefill kernel; vLLM's
    # ``flashmla_sparse`` backend: the FP8 decode kernel or the BF16 prefill kernel, both
    # absorbed); dense MLA prefill expands K/V per head (192 + 128 dims)
    per_row = np.where(d.sparse_topk > 0, d.attn_decode_flops_per_ctx,
                       d.attn_prefill_flops_per_ctx)
    flops = (2.0 * d.active_params * new
             + new * d.layers * rows * per_row
             + idx)
    # FLOPs the instance executes: the indexer's are repeated on every rank of a TP instance
    # (:func:`indexer_split`)
    run = flops - idx + idx * (g / indexer_split(g, d.pre_dp_attn))
    # FLOP-weighted peak of the GEMMs (weight precision) and attention (FP8); a fully cached
    # prompt (no new tokens) has no FLOPs and keeps the GEMM peak
    peak = np.where(run > 0, (2.0 * d.active_params * new * d.peak_w
                              + (run - 2.0 * d.active_params * new) * d.peak_attn)
                    / np.maximum(run, 1.0), d.peak_w)
    t_comp = run / (g * peak * th["eff_prefill"])
    chunks = np.maximum(np.ceil(new / PREFILL_CHUNK_TOKENS), 1.0)
    weights_pg = (d.dense_bytes + d.routed_bytes) / g
    # the prefill forward's collectives, as a decode step's, over the prefill instance's own
    # link: bytes scale with the new tokens, one latency per collective per chunk (not
    # overlapped with the GEMMs: assumed, as in decode)
    ep_bytes, ar_bytes, n_coll, lat = _collectives(d, th, new, g, d.pre_dp_attn, d.pre_ep_moe,
                                                   d.pre_beyond_domain)
    t_comm = (ep_bytes + ar_bytes) / (d.link_bw_pre * th["eff_comm"])
    t_comp = t_comp + t_comm
    t_chunks = chunks * (th["overhead_s"] + weights_pg / (d.hbm_bw * th["eff_mem"])
                         + n_coll * lat)
    kv_per_token = d.layers * d.kv_row_bytes + d.idx_layers * d.idx_row_bytes
    kv_total = d.isl * kv_per_token
    t_xfer = np.where(d.disagg, kv_total / (g * d.xfer_bw * th["eff_comm"]), 0.0)
    # prefix pages found in host DRAM are loaded before the new tokens are computed
    t_host = d.isl * d.host_prefix_fraction * kv_per_token / (g * d.h2d_bw)
    age = _age_factor(d, th)
    return {"t_prefill_s": (t_comp + t_chunks) * age + t_host, "prefill_flops": flops,
            "prefill_comm_bytes": ep_bytes + ar_bytes, "t_prefill_comm_s": t_comm * age,
            "t_prefill_compute_s": t_comp * age, "t_prefill_per_chunk_s": t_chunks / chunks * age,
            "t_kv_transfer_s": t_xfer, "t_host_prefix_load_s": t_host}


def max_batch(d: Design) -> np.ndarray:
    """Requests one decode instance can hold in HBM at full context (``isl + osl``)."""
    g = d.g_dec
    weights_pg = d.dense_bytes / np.where(d.dp_attn, 1.0, g) + d.routed_bytes / g
    ctx = d.isl + d.osl
    # HiSparse keeps only the device buffer (+1 newest-token slot) of each layer's MLA rows in
    # HBM; the indexer keys of every token stay there; the full KV lives in host DRAM
    resident = np.where(d.device_buffer_tokens > 0, np.minimum(ctx, d.device_buffer_tokens + 1),
                        ctx)
    per_req = d.layers * resident * d.kv_row_bytes + d.idx_layers * ctx * d.idx_row_bytes
    free = KV_FREE_FRACTION * np.maximum(d.hbm_usable - weights_pg, 0.0)
    # ``toolkit plan``'s split: Engram rows come out of the KV budget, then a share of the
    # pool is kept for the prefix cache (both 0 unless asked)
    free = np.maximum(free - d.engram_hbm_bytes, 0.0) * (1.0 - d.prefix_reserve_fraction)
    share = np.where(d.dp_attn, g, 1.0)
    # SGLang without ``--max-running-requests``: each scheduler's request pool holds
    # ``min(max(KV tokens / context_len x 512, 2048), 4096)`` requests
    # (:data:`toolkit.serving.recipes.SGLANG_REQ_POOL_MIN`)
    kv_tokens = free / np.maximum(d.layers * d.kv_row_bytes + d.idx_layers * d.idx_row_bytes,
                                  1.0)
    pool = np.clip(np.floor(kv_tokens / np.maximum(d.context_len, 1.0)
                            * SGLANG_REQ_POOL_PER_CONTEXT),
                   SGLANG_REQ_POOL_MIN, SGLANG_REQ_POOL_MAX)
    engine = np.where(d.sglang_default_cap & (d.context_len > 0), pool * share, d.max_running)
    cap = np.minimum(free / per_req * share, engine)
    host_cap = d.host_mem_per_gpu * g / (ctx * d.layers * d.kv_row_bytes)
    return np.maximum(np.where(d.device_buffer_tokens > 0, np.minimum(cap, host_cap), cap), 0.0)


def _gdc_wait(service: np.ndarray, rho: np.ndarray, servers: np.ndarray,
              scv: np.ndarray) -> np.ndarray:
    """Mean wait in a G/D/c queue: Sakasegawa's M/M/c approximation scaled by Allen-Cunneen's
    ``(c_a^2 + c_s^2) / 2`` with deterministic service (``c_s^2 = 0``)."""
    rho = np.clip(rho, 0.0, 0.999999)
    return 0.5 * scv * service * rho ** (np.sqrt(2.0 * (servers + 1.0)) - 1.0) / (
        servers * (1.0 - rho))


def gate_wait(d: Design, t_step: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Mean time a prompt waits at an aggregated instance's admission gate
    (:func:`toolkit.serving.recipes.admission_gates`), for the steady-state surrogate: half the
    gate's period, or half the time until the next arrival opens it (SGLang: an arrival's
    prefill iteration polls again; TensorRT-LLM's balance: one prompt per DP rank)."""
    per_inst = np.maximum(x / np.maximum(d.n_dec, 1.0), 1e-12)
    opens_by_arrivals = np.where(d.gate_kind == 1, d.gate_ranks, 1.0) / per_inst
    return np.where(d.gate_iters > 1,
                    0.5 * np.minimum(d.gate_iters * t_step, opens_by_arrivals), 0.0)


def solve(d: Design, th: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Steady-state closed-loop operating point of every row: batch, TPOT, TTFT and
    throughputs, with Poisson arrivals at the prefill queue. Fast (no replay): the fit uses
    it as a surrogate; predictions replace its TTFT, TPOT and throughput with the client
    replay's (:func:`client`)."""
    pre = prefill_terms(d, th)
    s_p = pre["t_prefill_s"]
    # a disaggregated prefill instance batches queued prompts up to a chunk: under load each
    # prompt's share of the per-chunk fixed cost shrinks to its share of the chunk's tokens
    s_cap = np.where(d.disagg, s_p - pre["t_prefill_per_chunk_s"] * (
        np.maximum(np.ceil(d.isl / PREFILL_CHUNK_TOKENS), 1.0)
        - d.isl / PREFILL_CHUNK_TOKENS), s_p)
    cap = np.maximum(max_batch(d), 1e-3)
    hi = np.minimum(d.conc / d.n_dec, cap)
    lo = np.minimum(np.full(d.n, 1e-6), hi)

    def implied(batch: np.ndarray):
        dec = decode_terms(d, th, batch)
        resid = np.maximum(d.osl - 1.0, 1.0) * dec["tpot_s"]
        x = d.n_dec * batch / resid
        rho = x * s_cap / d.n_pre
        wait = _gdc_wait(s_cap, rho, d.n_pre, np.ones(d.n))
        ttft = (th["request_overhead_s"] + s_p + pre["t_kv_transfer_s"] + wait
                + np.where(d.disagg, 0.0, dec["t_step_s"] + gate_wait(d, dec["t_step_s"], x)))
        conc = np.where(rho < 1.0, d.n_dec * batch + x * ttft, np.inf)
        return conc, x, ttft, wait, dec

    for _ in range(BISECTION_STEPS):  # geometric bisection: batches span 1e-6 .. 1e4
        mid = np.sqrt(lo * hi)
        c_mid = implied(mid)[0]
        over = c_mid > d.conc
        hi = np.where(over, mid, hi)
        lo = np.where(over, lo, mid)
    batch = lo
    conc_at, x, ttft, wait, dec = implied(batch)
    queued = np.where(np.isfinite(conc_at), np.maximum(d.conc - conc_at, 0.0), 0.0)
    queue_wait = queued / np.maximum(x, 1e-12)
    ttft = ttft + queue_wait
    base = ttft - wait - queue_wait
    p90 = base + P90_WAIT_FACTOR * wait + queue_wait
    tpot = dec["tpot_s"]
    return {
        **dec,
        "t_prefill_s": s_p,
        "t_kv_transfer_s": pre["t_kv_transfer_s"],
        "prefill_wait_s": wait,
        "hbm_queue_wait_s": queue_wait,
        "batch_per_instance": batch,
        "max_batch_per_instance": cap,
        "requests_per_s": x,
        "median_tpot_s": tpot,
        "median_ttft_s": ttft,
        "p90_ttft_s": p90,
        "median_intvty": 1.0 / tpot,
        "tput_per_gpu": x * (d.isl + d.osl) / d.total_gpus,
        "output_tput_per_gpu": x * d.osl / d.decode_gpus,
    }


BATCH_GRID_POINTS = 28


def client(d: Design, th: dict[str, np.ndarray], cap: np.ndarray) -> dict[str, np.ndarray]:
    """Replay InferenceX's client against every row (:mod:`toolkit.serving.client`): the
    decode step time on a grid of batches (no amortised prefill: the replay schedules the
    chunks itself), prefill and KV-transfer time per prompt token."""
    from dataclasses import replace

    from toolkit.serving.client import replay_client

    dd = replace(d, disagg=np.ones(d.n, dtype=bool))  # pure decode steps
    top = np.maximum(np.floor(cap), 1.0)
    frac = np.concatenate([[0.0], np.geomspace(1.0 / 4096, 1.0, BATCH_GRID_POINTS - 1)])
    grid = np.maximum.accumulate(np.round(top[:, None] * frac[None, :]), axis=1)
    grid = grid + np.arange(BATCH_GRID_POINTS)[None, :] * 1e-6  # strictly increasing
    step = np.stack([decode_terms(dd, th, grid[:, j])["t_step_s"]
                     for j in range(BATCH_GRID_POINTS)], axis=1)
    pre = prefill_terms(d, th)
    # per prompt token (cached or not) the compute; a disaggregated prefill instance also pays
    # a fixed cost per forward chunk (weights read, launches), shared by the prompts it
    # batches; an aggregated chunk rides on a decode step that already reads the weights
    per_tok = (pre["t_prefill_compute_s"] + pre["t_host_prefix_load_s"]) / np.maximum(d.isl, 1.0)
    fixed = np.where(d.disagg, pre["t_prefill_per_chunk_s"], 0.0)
    xfer = pre["t_kv_transfer_s"] / np.maximum(d.isl, 1.0)
    out = replay_client(d.conc, d.isl, d.osl, d.mtp_accept, cap, d.n_dec, d.n_pre, d.disagg,
                        grid, step, per_tok, xfer, prefill_s_per_chunk=fixed,
                        gate_iters=d.gate_iters, gate_kind=d.gate_kind, gate_ranks=d.gate_ranks,
                        chunk_tokens=d.pre_chunk_tokens, max_prompts=d.pre_max_prompts,
                        ratio=d.range_ratio)
    dur = np.maximum(out["duration_s"], 1e-12)
    ovh = th["request_overhead_s"]  # outside the GPUs: latency only, no capacity
    return {
        "median_ttft_s": out["median_ttft_s"] + ovh, "p90_ttft_s": out["p90_ttft_s"] + ovh,
        "p99_ttft_s": out["p99_ttft_s"] + ovh,
        "median_tpot_s": out["median_tpot_s"], "median_intvty": 1.0 / out["median_tpot_s"],
        "tput_per_gpu": (out["input_tokens"] + out["output_tokens"]) / dur / d.total_gpus,
        "output_tput_per_gpu": out["output_tokens"] / dur / d.decode_gpus,
        "requests_per_s": out["completed"] / dur,
        "batch_per_instance": out["mean_batch_per_instance"],
        "benchmark_duration_s": out["duration_s"],
    }
