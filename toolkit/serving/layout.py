"""From configuration rows to the per-row numbers the step model needs (NumPy arrays).

Everything here is read from specs or from the row; nothing is fitted. The conventions that
turn InferenceX's layout columns into pools and instances are written down once, here:

* **Aggregated** rows (``disagg`` false): one instance of ``decode_tp`` GPUs does prefill and
  decode (InferenceX divides throughput by ``decode_tp``; ``num_*_gpu`` hold tp x ep there).
* **Disaggregated** rows: a prefill pool of ``num_prefill_gpu`` and a decode pool of
  ``num_decode_gpu`` GPUs, split into instances of ``max(tp, ep)`` GPUs, widened to the
  smallest power of two (up to the pool) that holds the weights in HBM, because some rows
  report ``tp = 1`` for a wide-EP deployment. Where the recipe states the width, it is used
  as stated (:data:`toolkit.serving.recipes.INSTANCE_GPUS`: the December 2025 GB200
  Dynamo-SGLang runs exported ``tp = ep = 1`` for instances of 4 to 48 GPUs; the optional
  columns ``prefill_instance_gpus`` / ``decode_instance_gpus``). Eight early GB200 rows
  without ``image`` repeat the total GPU count in both fields: there the total counts once,
  split evenly.
* ``scaleup_domain_gpus`` decides the link an instance's collectives use: inside the domain
  (NVL72 rack, 8-GPU node) the scale-up bandwidth, beyond it the per-GPU scale-out NIC.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.serving.params import REFERENCE_DATE
from toolkit.serving.recipes import (
    KV_DTYPE,
    KV_DTYPES,
    RecipeError,
    admission_gates,
    age_days,
    engine_caps,
    instance_gpus,
    length_ratio,
    mtp_inputs,
    prefill_batching,
)
from toolkit.serving.transfer import sm_kernel_bandwidth_bytes_per_s

HBM_RESERVE_FRACTION = 0.15
"""Share of usable HBM kept out of the weights when sizing an instance that a row's layout
leaves too small for them (assumed: SGLang's ``mem_fraction_static`` is ~0.85 on 80-288 GB
GPUs). The KV pool itself is sized by :data:`toolkit.serving.model.KV_FREE_FRACTION`."""

HARDWARE_FAMILY: dict[str, str] = {
    "gb200": "blackwell-nvl72", "gb300": "blackwell-nvl72",
    "b200": "blackwell-hgx", "b300": "blackwell-hgx",
    "h100": "hopper", "h200": "hopper",
    "mi300x": "cdna3", "mi325x": "cdna3", "mi355x": "cdna4",
}
"""Architecture + system family: fitted terms shared by siblings (an unknown part is its own
family)."""

ROUTED_WEIGHT_BYTES = {"fp4": 0.5625, "fp8": 1.0, "bf16": 2.0}
"""Bytes per routed-expert parameter: FP4 is 4 bits + one 8-bit scale per 16 values."""
DENSE_WEIGHT_BYTES = {"fp4": 1.0, "fp8": 1.0, "bf16": 2.0}
"""FP4 checkpoints keep attention, shared experts and dense layers in FP8 (assumed from the
NVFP4 DeepSeek-R1 recipe, which quantises only the MoE GEMMs)."""


@dataclass(frozen=True)
class Design:
    """Per-row arrays (one entry per configuration) in SI units; see module docstring."""

    n: int
    hardware: np.ndarray
    vendor: np.ndarray
    family: np.ndarray
    engine: np.ndarray
    precision: np.ndarray  # weight precision of the checkpoint (fp4, fp8, bf16)
    disagg: np.ndarray
    mtp: np.ndarray
    mtp_draft: np.ndarray  # draft tokens verified per step (0 without MTP)
    mtp_accept: np.ndarray  # tokens accepted per step (1 without MTP)
    age_days: np.ndarray  # engine age before the parameters' reference date
    max_running: np.ndarray  # engine cap on decoding requests per instance (inf = none)
    sglang_default_cap: np.ndarray  # SGLang's own cap applies (sized from the KV pool)
    context_len: np.ndarray  # the model's context length (SGLang sizes its request pool by it)
    gate_iters: np.ndarray  # iterations a waiting prompt may be held before prefill (1 = none)
    gate_kind: np.ndarray  # 0: SGLang receive interval; 1: TensorRT-LLM attention-DP balance
    gate_ranks: np.ndarray  # attention-DP ranks the balance waits for (kind 1)
    pre_chunk_tokens: np.ndarray  # tokens one disaggregated prefill forward may take
    pre_max_prompts: np.ndarray  # prompts one disaggregated prefill forward may take
    range_ratio: np.ndarray  # client's --random-range-ratio: lengths uniform in [r L, L]
    isl: np.ndarray
    osl: np.ndarray
    conc: np.ndarray
    # pools
    total_gpus: np.ndarray  # InferenceX's divisor for tput_per_gpu
    decode_gpus: np.ndarray  # divisor for output_tput_per_gpu
    g_dec: np.ndarray  # GPUs per decode instance
    n_dec: np.ndarray  # decode instances
    g_pre: np.ndarray  # GPUs per prefill instance (aggregated: the same instance)
    n_pre: np.ndarray
    dp_attn: np.ndarray
    pre_dp_attn: np.ndarray  # prefill instance runs attention data-parallel (aggregated: dp_attn)
    ep_moe: np.ndarray  # expert parallel (dispatch/combine) vs tensor-parallel MoE
    pre_ep_moe: np.ndarray  # the prefill instance's MoE (aggregated: ep_moe)
    # hardware
    hbm_bw: np.ndarray
    hbm_usable: np.ndarray
    peak_w: np.ndarray  # FLOP/s at the weight precision
    peak_attn: np.ndarray  # FLOP/s for attention math (the FP8 peak: a labelled assumption)
    link_bw_dec: np.ndarray  # collective bandwidth of a decode instance
    dec_beyond_domain: np.ndarray  # decode instance spans more than one scale-up domain
    link_bw_pre: np.ndarray
    pre_beyond_domain: np.ndarray  # prefill instance spans more than one scale-up domain
    xfer_bw: np.ndarray  # prefill -> decode KV transfer bandwidth per GPU
    # model
    layers: np.ndarray
    moe_layers: np.ndarray
    hidden: np.ndarray
    heads: np.ndarray
    experts: np.ndarray
    topk_experts: np.ndarray
    active_params: np.ndarray
    dense_bytes: np.ndarray
    routed_bytes: np.ndarray
    kv_row_bytes: np.ndarray  # per token per layer
    idx_row_bytes: np.ndarray  # indexer key per token per indexer layer
    idx_layers: np.ndarray
    idx_flops_per_ctx: np.ndarray  # indexer FLOPs per context token per query (per layer)
    sparse_topk: np.ndarray  # 0 = dense attention
    attn_decode_flops_per_ctx: np.ndarray  # per query token, per context token, per layer
    attn_prefill_flops_per_ctx: np.ndarray
    # what-if inputs (HiSparse offload / prefix reuse), per row
    miss_rows_per_layer: np.ndarray  # host rows fetched per request per layer per step
    hisparse_overlap: np.ndarray  # fetches hidden behind the layer's work (plan-then-IO)
    device_buffer_tokens: np.ndarray  # HiSparse device buffer per request per layer; 0 = off
    miss_bw: np.ndarray  # SM gather-kernel bandwidth over the host link (all GPUs loading)
    miss_fixed_s: np.ndarray  # one host round trip per layer that fetches
    h2d_bw: np.ndarray  # bulk host -> device (prefix pages from host DRAM)
    host_mem_per_gpu: np.ndarray
    cached_prefix_fraction: np.ndarray  # prompt tokens served by a prefix cache (any tier)
    host_prefix_fraction: np.ndarray  # of which loaded from host DRAM
    # what-if inputs of ``toolkit plan``'s HBM split (0 = off)
    prefix_reserve_fraction: np.ndarray  # of the KV pool kept from running requests
    engram_hbm_bytes: np.ndarray  # per GPU: Engram rows in HBM, out of the KV budget
    engram_miss_bytes: np.ndarray  # per token per Engram layer, fetched from host DRAM
    engram_layers: np.ndarray  # Engram layers of the backbone


def _mixed_link(g: np.ndarray, dom: np.ndarray, up: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Per-GPU collective bandwidth of an instance of ``g`` GPUs: with traffic spread evenly
    over peers, the share ``dom / g`` stays on the scale-up fabric and the rest crosses the
    NIC, so the time per byte is the traffic-weighted mix of the two links."""
    inside = np.minimum(dom / np.maximum(g, 1.0), 1.0)
    return 1.0 / (inside / up + (1.0 - inside) / out)


def _pow2_at_least(x: np.ndarray) -> np.ndarray:
    return 2 ** np.ceil(np.log2(np.maximum(x, 1)))


def design(df: pl.DataFrame, kv_dtype: str = KV_DTYPE,
           reference_date: str | None = None, engine_defaults: bool = True) -> Design:
    """Resolve validated configuration rows (``points.validate``) into a :class:`Design`.

    Optional per-row columns (see :mod:`toolkit.serving.reuse` for reading them from stored
    replays): ``device_buffer_tokens`` (HiSparse device buffer per request per layer; 0 = all
    KV in HBM), ``miss_rows_per_layer`` (host fetches per request per layer per decode step),
    ``hisparse_overlap`` (fetches overlapped with compute), ``cached_prefix_fraction`` (share
    of prompt tokens served from a prefix cache) and ``host_prefix_fraction`` (the part of it
    loaded from host DRAM); ``toolkit plan``'s HBM split: ``prefix_reserve_fraction`` (share
    of the KV pool kept for the prefix cache, not running requests), ``engram_hbm_bytes``
    (Engram rows per GPU, out of the KV budget), ``engram_miss_bytes`` and ``engram_layers``
    (Engram row bytes each token fetches from host DRAM per Engram layer). Recipe columns
    (MTP drafts and acceptance, ``kv_dtype``, ``max_running_requests``, ``engine_date``,
    ``prefill_instance_gpus`` / ``decode_instance_gpus``) are read by
    :mod:`toolkit.serving.recipes`. ``engine_defaults=False``: no engine's own cap on
    running requests, only HBM and a given ``max_running_requests`` (what-if capacity, as
    :mod:`toolkit.serving.scenario` reports it).
    """
    n = df.height
    # each spec value is computed once per distinct accelerator / model and spread over the
    # rows by index (a planner's sweep has tens of thousands of rows of one or two models)
    hw_keys, hw_of_row = np.unique(df["hardware"].to_numpy().astype(str), return_inverse=True)
    mod_keys, mod_of_row = np.unique(df["model"].to_numpy().astype(str), return_inverse=True)
    hws = {h: get_hardware(h) for h in hw_keys.tolist()}
    mods = {m: get_model(m) for m in mod_keys.tolist()}

    def hw_col(fn):
        return np.array([fn(hws[h]) for h in hw_keys.tolist()], dtype=np.float64)[hw_of_row]

    def mod_col(fn):
        return np.array([fn(mods[m]) for m in mod_keys.tolist()], dtype=np.float64)[mod_of_row]

    prec = df["precision"].to_list()
    disagg = df["disagg"].to_numpy().astype(bool)
    tp_d, ep_d = df["decode_tp"].to_numpy(), df["decode_ep"].to_numpy()
    tp_p, ep_p = df["prefill_tp"].to_numpy(), df["prefill_ep"].to_numpy()
    npg, ndg = df["num_prefill_gpu"].to_numpy(), df["num_decode_gpu"].to_numpy()
    # the early-GB200 quirk is recognised only in InferenceX exports (an image column present
    # but empty); a user's own disaggregated 8+8 layout is never halved
    no_image = (df["image"].cast(pl.String).fill_null("").to_numpy() == ""
                if "image" in df.columns else np.zeros(n, dtype=bool))
    is_gb200 = (df["hardware"] == "gb200").to_numpy()
    repeated = disagg & (npg == ndg) & (tp_p == npg) & (tp_d == ndg) & no_image & is_gb200
    pool_p = np.where(repeated, np.maximum(npg // 2, 1), npg).astype(np.float64)
    pool_d = np.where(repeated, np.maximum(ndg - npg // 2, 1), ndg).astype(np.float64)
    total = np.where(disagg, np.where(repeated, ndg, npg + ndg), tp_d).astype(np.float64)
    decode_gpus = np.where(disagg, np.where(repeated, ndg, ndg), tp_d).astype(np.float64)

    dense_b = np.array([mods[m].dense_params * DENSE_WEIGHT_BYTES[p]
                        for m, p in zip(df["model"], prec, strict=True)])
    routed_b = np.array([mods[m].routed_expert_params * ROUTED_WEIGHT_BYTES[p]
                         for m, p in zip(df["model"], prec, strict=True)])
    hbm_usable = hw_col(lambda h: h.hbm_usable_bytes)
    room = hbm_usable * (1 - HBM_RESERVE_FRACTION)
    need = np.ceil((dense_b + routed_b) / (0.8 * room))  # leave >= 20% for KV

    def instance(tp, ep, pool):
        g = np.maximum(np.maximum(tp, ep), 1).astype(np.float64)
        g = np.where(g < need, _pow2_at_least(need), g)
        return np.minimum(g, pool)  # an instance never spans more than its pool

    # a stated width (a recipe column, or the recipe's own config: ``INSTANCE_GPUS``) is the
    # deployment's; only an unstated one is derived from tp/ep and the weights
    stated_pre, stated_dec = instance_gpus(df, pool_p, pool_d)
    for name, g in (("prefill_instance_gpus", stated_pre), ("decode_instance_gpus", stated_dec)):
        short = np.isfinite(g) & ((dense_b + routed_b) / np.where(np.isfinite(g), g, 1.0)
                                  > hbm_usable)
        if short.any():
            i = int(np.flatnonzero(short)[0])
            raise RecipeError(f"row {i + 1}: {name} {g[i]:g}: {g[i]:g} GPUs cannot hold the "
                              f"model's weights in HBM")
    g_dec = np.where(disagg, np.where(np.isfinite(stated_dec), stated_dec,
                                      instance(tp_d, ep_d, pool_d)), tp_d.astype(np.float64))
    g_pre = np.where(disagg, np.where(np.isfinite(stated_pre), stated_pre,
                                      instance(tp_p, ep_p, pool_p)), g_dec)
    n_dec = np.where(disagg, np.maximum(np.floor(pool_d / g_dec), 1), 1.0)
    n_pre = np.where(disagg, np.maximum(np.floor(pool_p / g_pre), 1), 1.0)

    peak_w = np.array([
        float(getattr(hws[h], f"dense_{p}_tflops") or hws[h].dense_fp8_tflops) * 1e12
        for h, p in zip(df["hardware"], prec, strict=True)
    ])
    dom = hw_col(lambda h: h.scaleup_domain_gpus)
    up = hw_col(lambda h: h.scaleup_bandwidth_bytes_per_s)
    out = hw_col(lambda h: h.scaleout_bandwidth_bytes_per_s)
    span = np.where(disagg, pool_p + pool_d, g_dec)

    kv_dt = (df["kv_dtype"].cast(pl.String).fill_null(kv_dtype).to_list()
             if "kv_dtype" in df.columns else [kv_dtype] * n)
    bad = [i for i, k in enumerate(kv_dt) if k not in KV_DTYPES]
    if bad:
        raise RecipeError(f"row {bad[0] + 1}: kv_dtype {kv_dt[bad[0]]!r}; known: "
                          f"{', '.join(KV_DTYPES)}")
    kv_row = np.array([mods[m].mla_row_bytes(k) for m, k in zip(df["model"], kv_dt,
                                                                 strict=True)], dtype=np.float64)
    drafts, accept = mtp_inputs(df)
    gate_iters, gate_kind, gate_ranks = admission_gates(df)
    pre_chunk, pre_prompts = prefill_batching(df)
    heads = mod_col(lambda m: m.num_query_heads)
    lora = mod_col(lambda m: m.kv_lora_rank)
    rope = mod_col(lambda m: m.qk_rope_head_dim)
    nope = mod_col(lambda m: m.qk_nope_head_dim)
    vdim = mod_col(lambda m: m.v_head_dim)

    hbm_total = hw_col(lambda h: h.hbm_bytes)
    max_running, sglang_cap = engine_caps(df, g_dec, hbm_total,
                                          df["hardware"].to_numpy().astype(str))
    if not engine_defaults:  # HBM alone (a given ``max_running_requests`` still applies)
        given = (df["max_running_requests"].cast(pl.Float64, strict=False).to_numpy()
                 if "max_running_requests" in df.columns else np.full(n, np.nan))
        max_running = np.where(np.isfinite(given), max_running, np.inf)
        sglang_cap = np.zeros(n, dtype=bool)

    ep_moe = (np.maximum(ep_d, 1) > 1) | (g_dec > np.maximum(tp_d, 1))

    def opt(col: str, default: float) -> np.ndarray:
        if col in df.columns:
            return df[col].cast(pl.Float64).fill_null(default).to_numpy()
        return np.full(n, default)

    return Design(
        n=n,
        hardware=df["hardware"].to_numpy(),
        vendor=np.array([hws[h].vendor for h in df["hardware"].to_list()]),
        family=np.array([HARDWARE_FAMILY.get(h, h) for h in df["hardware"].to_list()]),
        engine=df["framework"].to_numpy(),
        precision=np.array(prec, dtype=str),
        disagg=disagg,
        mtp=(df["spec_method"] == "mtp").to_numpy(),
        mtp_draft=drafts,
        mtp_accept=accept,
        age_days=age_days(df, reference_date or REFERENCE_DATE),
        max_running=max_running,
        sglang_default_cap=sglang_cap,
        context_len=mod_col(lambda m: m.max_position_embeddings or 0),
        gate_iters=gate_iters,
        gate_kind=gate_kind,
        gate_ranks=gate_ranks,
        pre_chunk_tokens=pre_chunk,
        pre_max_prompts=pre_prompts,
        range_ratio=length_ratio(df),
        isl=df["isl"].to_numpy().astype(np.float64),
        osl=df["osl"].to_numpy().astype(np.float64),
        conc=df["conc"].to_numpy().astype(np.float64),
        total_gpus=total,
        decode_gpus=decode_gpus,
        g_dec=g_dec,
        n_dec=n_dec,
        g_pre=g_pre,
        n_pre=n_pre,
        dp_attn=df["decode_dp_attention"].to_numpy().astype(bool),
        pre_dp_attn=np.where(disagg, df["prefill_dp_attention"].to_numpy().astype(bool),
                             df["decode_dp_attention"].to_numpy().astype(bool)),
        ep_moe=ep_moe,
        pre_ep_moe=np.where(disagg, (np.maximum(ep_p, 1) > 1) | (g_pre > np.maximum(tp_p, 1)),
                            ep_moe),
        hbm_bw=hw_col(lambda h: h.hbm_bandwidth_bytes_per_s),
        hbm_usable=hbm_usable,
        peak_w=peak_w,
        peak_attn=hw_col(lambda h: h.dense_fp8_tflops * 1e12),
        link_bw_dec=_mixed_link(g_dec, dom, up, out),
        dec_beyond_domain=g_dec > dom,
        link_bw_pre=_mixed_link(g_pre, dom, up, out),
        pre_beyond_domain=g_pre > dom,
        xfer_bw=np.where(span <= dom, up, out),
        layers=mod_col(lambda m: m.num_layers),
        moe_layers=mod_col(lambda m: m.num_layers - m.num_dense_layers),
        hidden=mod_col(lambda m: m.hidden_size),
        heads=heads,
        experts=mod_col(lambda m: m.n_routed_experts),
        topk_experts=mod_col(lambda m: m.experts_per_token),
        active_params=mod_col(lambda m: m.active_params),
        dense_bytes=dense_b,
        routed_bytes=routed_b,
        kv_row_bytes=kv_row,
        idx_row_bytes=mod_col(lambda m: m.indexer_row_bytes),
        idx_layers=mod_col(lambda m: len(m.indexer_layers)),
        idx_flops_per_ctx=mod_col(lambda m: 2.0 * m.index_n_heads * m.index_head_dim),
        sparse_topk=mod_col(lambda m: m.index_topk),
        attn_decode_flops_per_ctx=2.0 * heads * (2 * lora + rope),
        attn_prefill_flops_per_ctx=2.0 * heads * (nope + rope + vdim),
        miss_rows_per_layer=opt("miss_rows_per_layer", 0.0),
        hisparse_overlap=opt("hisparse_overlap", 0.0) > 0,
        device_buffer_tokens=opt("device_buffer_tokens", 0.0),
        miss_bw=hw_col(lambda h: sm_kernel_bandwidth_bytes_per_s(h, concurrent=True)),
        miss_fixed_s=hw_col(lambda h: h.sm_kernel_rtt_s),
        h2d_bw=hw_col(lambda h: h.h2d_concurrent_bytes_per_s),
        host_mem_per_gpu=hw_col(lambda h: h.host_mem_bytes_per_gpu),
        cached_prefix_fraction=np.clip(opt("cached_prefix_fraction", 0.0), 0.0, 1.0),
        host_prefix_fraction=np.clip(opt("host_prefix_fraction", 0.0), 0.0, 1.0),
        prefix_reserve_fraction=np.clip(opt("prefix_reserve_fraction", 0.0), 0.0, 1.0),
        engram_hbm_bytes=opt("engram_hbm_bytes", 0.0),
        engram_miss_bytes=opt("engram_miss_bytes", 0.0),
        engram_layers=opt("engram_layers", 0.0),
    )
