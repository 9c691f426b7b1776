"""HiSparse's published decode gain (sgl-project/sglang#33075) against the serving model's
HiSparse what-if, with nothing fitted to it.

Why: the serving model prices HiSparse two ways (a device buffer shrinks each running
request's resident KV, so more requests fit; host fetches of the buffer's misses add to every
decode step) but had never been held against a measurement. sglang#33075 (comment of
2026-08-02 by the PR's author) measured decode throughput with and without HiSparse on one
8x RTX PRO 6000 decode instance (SM120, TP8, 32K in / 2K out, ``top_k`` 2048, device buffer
4096, host:device 10): 0.92x at batch 1 rising to 3.00x at batch 54, the baseline capped at 6
running requests by its KV pool. :func:`reproduce` asks the model the same question and keeps
every intermediate (resident KV per request, the batch that fits, step and fetch times), so
the ratio's origin and each batch's error are visible.

Inputs, none fitted to this run: the model's efficiencies are the bundled DeepSeek-R1 fit;
hardware and model are their sourced specs (``rtx6000pro``, ``glm-5.1``); the HiSparse misses
per request, layer and step are the caller's (a selection replay). Labelled assumptions of
the setup (the PR does not state them): the model is GLM-5.1 (the PR's path is the one SGLang
picks for GLM DSA models on SM120 with an FP8 KV cache), with NVFP4 weights (FP8 weights, ~750
GB, do not fit 8 x 96 GB), MoE tensor-parallel (no expert parallelism given), attention
tensor-parallel (TP8, no DP attention), KV pool sized for full-length requests (32K + 2K).

How many requests fit is the engine's, not the serving model's (``capacity="sglang"``, the
default): the serving model keeps 90% of the HBM left after its weights for KV (a
TensorRT-LLM default, :data:`toolkit.serving.model.KV_FREE_FRACTION`) and counts 372 GB of
FP4 weights, which fits 20 baseline requests on this node. SGLang sizes its pool as
``mem_fraction_static x GPU memory - everything loaded before it``:
:func:`sglang_mem_fraction_static` is SGLang's own default for a 96 GB GPU at TP8 (0.849), and
what is loaded before the pool (433 GB NVFP4 checkpoint, 54 GB per GPU, plus the loader's and
runtime's own) is read off SGLang's logged pool on the same node and checkpoint (464,768
tokens per rank at 0.85, :data:`ANCHOR_SOURCE`). That pool fits 11 baseline requests; the run
logged 6 (its pool 87% full), which no sourced setting explains (see :func:`capacity_note`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from toolkit.serving.params import ServingParams
from toolkit.serving.scenario import Deployment, decode

SOURCE = ("sgl-project/sglang#33075, comment of 2026-08-02 by gongwei1027: D-side steady decode "
          "throughput, 8x RTX PRO 6000, TP8, flashinfer_sparse_mla, 32K in / 2K out, "
          "--enable-hisparse top_k 2048, device_buffer_size 4096, host_to_device_ratio 10")
#: (target batch, baseline tok/s, baseline running requests, HiSparse tok/s, HiSparse running)
PUBLISHED = ((1, 47.7, 1, 44.1, 2), (2, 84.2, 2, 77.2, 2), (4, 153.3, 4, 144.0, 4),
             (8, 213.3, 6, 252.9, 8), (16, 217.3, 6, 361.0, 16), (32, 215.9, 6, 523.6, 32),
             (54, 214.7, 6, 643.6, 54))
ISL, OSL, TOP_K, BUFFER_TOKENS, HOST_RATIO = 32768, 2048, 2048, 4096, 10
DEPLOYMENT = Deployment("glm-5.1", "rtx6000pro", engine="sglang", precision="fp4",
                        kv_dtype="fp8", gpus_per_instance=8, dp_attention=False,
                        expert_parallel=False)


#: SGLang's rule for ``mem_fraction_static`` when the flag is not given.
MEM_RULE_SOURCE = ("sgl-project/sglang python/sglang/srt/server_args.py@469c63e5, "
                   "ServerArgs._handle_gpu_memory_settings")
#: SGLang's logged KV pool for the same checkpoint on the same node.
ANCHOR_SOURCE = ("SemiAnalysisAI/InferenceX benchmarks/single_node/agentic/"
                 "glm5.2_fp4_rtx6000pro_sglang.sh@c7175de1: nvidia/GLM-5.2-NVFP4 (433 GB, TP8 "
                 "on 8x RTX PRO 6000), SGLang FP8 KV pool of 464,768 tokens per rank (~51 KB per "
                 "token, 78 layers) at --mem-fraction-static 0.85")
ANCHOR_POOL_TOKENS, ANCHOR_MEM_FRACTION = 464_768, 0.85
#: The run's own log: the baseline's pool was ~87% full at 6 running requests.
LOGGED_BASE_USAGE = 0.87


def sglang_mem_fraction_static(gpu_mem_mib: float, tp_size: int, *,
                               chunked_prefill_size: int | None = None,
                               cuda_graph_max_bs: int | None = None) -> float:
    """SGLang's default ``mem_fraction_static`` (:data:`MEM_RULE_SOURCE`): the share of GPU
    memory for weights + KV pool, the rest reserved for activations and CUDA graphs.

    The GPU's memory bucket picks the chunked-prefill size and the largest CUDA-graph batch;
    reserved MiB = 512 + 1.5 x chunk + 2 x graph batch + 1024 x TP / 8 (at least 10 GiB above
    60 GiB of memory); the fraction is ``(memory - reserved) / memory`` to 3 decimals. No
    DP attention, speculative decoding or piecewise graphs (none in sglang#33075's run).
    """
    buckets = ((20, 2048, 8, 8), (35, 2048, 24, 80), (60, 4096, 32, 160), (90, 8192, 256, 512),
               (160, 8192, 256, 512), (float("inf"), 16384, 512, 512))
    _, chunk0, bs_small, bs_tp4 = next(b for b in buckets if gpu_mem_mib < b[0] * 1024)
    chunk = chunked_prefill_size or chunk0
    bs = cuda_graph_max_bs or (bs_tp4 if tp_size >= 4 else bs_small)
    reserved = 512 + max(chunk, 2048) * 1.5 + bs * 2 + tp_size / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def sglang_kv_pool_bytes(dep: Deployment, mem_fraction_static: float | None = None) -> float:
    """KV pool per GPU SGLang allocates for ``dep``: ``fraction x memory - loaded``, where
    ``loaded`` (weights and what the runtime holds before sizing the pool) is the anchor run's
    ``0.85 x memory - its pool`` (:data:`ANCHOR_SOURCE`; the anchor's 656 B FP8 MLA rows on 78
    layers). The fraction defaults to SGLang's own rule for this GPU and TP."""
    hbm = float(dep.hardware_spec.hbm_bytes)
    m = dep.model_spec
    frac = (mem_fraction_static if mem_fraction_static is not None else
            sglang_mem_fraction_static(hbm / 2**20, dep.gpus_per_instance))
    anchor_pool = ANCHOR_POOL_TOKENS * m.num_layers * m.mla_row_bytes(dep.kv_dtype)
    return anchor_pool + (frac - ANCHOR_MEM_FRACTION) * hbm


def capacity_note(dep: Deployment = DEPLOYMENT) -> dict[str, float]:
    """The baseline's capacity three ways: the serving model's, SGLang's sourced pool's, and
    the pool the run's own log implies (6 running at ~87% usage, mean context ISL + OSL / 2),
    with the per-GPU bytes each stands for."""
    full = ISL + OSL
    per_req = resident_bytes_per_request(dep, full)
    per_token = per_req / full
    cap = decode(dep, context_tokens=full - 1, batch_per_instance=1.0)
    pool = sglang_kv_pool_bytes(dep)
    logged_tokens = 6 * (ISL + OSL / 2) / LOGGED_BASE_USAGE
    return {"model_fits": float(np.floor(cap.max_batch_per_gpu[0] * dep.gpus_per_instance)),
            "sglang_mem_fraction_static": sglang_mem_fraction_static(
                dep.hardware_spec.hbm_bytes / 2**20, dep.gpus_per_instance),
            "sglang_pool_gb": pool / 1e9, "sglang_fits": float(np.floor(pool / per_req)),
            "logged_pool_tokens": logged_tokens,
            "logged_pool_gb": logged_tokens * per_token / 1e9,
            "bytes_per_token": per_token}


def published() -> pl.DataFrame:
    """The measured table of sglang#33075, with its ratio."""
    df = pl.DataFrame(PUBLISHED, schema=["batch", "measured_base_tok_s", "measured_base_running",
                                         "measured_hisparse_tok_s",
                                         "measured_hisparse_running"], orient="row")
    return df.with_columns((pl.col("measured_hisparse_tok_s") / pl.col("measured_base_tok_s"))
                           .alias("measured_ratio"))


def resident_bytes_per_request(dep: Deployment, context_tokens: float,
                               buffer_tokens: int = 0) -> float:
    """HBM one running request holds on each GPU: MLA rows of every layer (only the device
    buffer + the newest-token slot under HiSparse) plus the indexer keys of every token (they
    stay in HBM: the indexer scores the whole context each step). With tensor-parallel
    attention every GPU holds the whole latent (MLA has one latent head); the serving model's
    capacity (:func:`toolkit.serving.model.max_batch`) uses the same sum."""
    m = dep.model_spec
    rows = min(context_tokens, buffer_tokens + 1) if buffer_tokens else context_tokens
    return (m.num_layers * rows * m.mla_row_bytes(dep.kv_dtype)
            + len(m.indexer_layers) * context_tokens * m.indexer_row_bytes)


def reproduce(misses_per_layer: float, *, overlap: bool = False,
              params: ServingParams | None = None, dep: Deployment = DEPLOYMENT,
              capacity: str = "sglang") -> pl.DataFrame:
    """Model vs measured, one row per published batch.

    ``misses_per_layer``: HiSparse host rows fetched per request, layer and decode step at
    k = 2048 and a 4096-token buffer (from a selection replay). Each arm runs
    ``min(target batch, requests that fit)``; the step is priced at the mean context
    (ISL + OSL / 2), the capacity at the full one (ISL + OSL). ``model_ratio`` is the
    reproduction; ``model_ratio_at_logged_running`` prices the steps at the running counts
    the run logged (``rr=``), which isolates the step-time side of the ratio (it borrows the
    run's own batch, so it is a diagnosis, not a reproduction).

    ``capacity``: ``"sglang"`` (default) sizes both arms' request counts from SGLang's own
    pool (:func:`sglang_kv_pool_bytes`: its default memory fraction, the anchor's logged pool)
    divided by each arm's resident bytes per request; ``"model"`` uses the serving model's
    capacity (90% of the HBM after its weight count), as before.
    """
    if capacity not in ("sglang", "model"):
        raise ValueError(f"capacity must be 'sglang' or 'model', not {capacity!r}")
    g = dep.gpus_per_instance
    full, mean_ctx = ISL + OSL, ISL + OSL / 2
    pub = published()
    target = pub["batch"].to_numpy().astype(np.float64)
    arms = {"base": {}, "hisparse": {"device_buffer_tokens": BUFFER_TOKENS,
                                     "misses_per_layer": misses_per_layer, "overlap": overlap}}
    out = {}
    for arm, kw in arms.items():
        if capacity == "sglang":
            fits = float(np.floor(sglang_kv_pool_bytes(dep) / resident_bytes_per_request(
                dep, full, kw.get("device_buffer_tokens", 0))))
        else:
            cap_kw = {k: v for k, v in kw.items() if k == "device_buffer_tokens"}
            cap = decode(dep, context_tokens=full - 1, batch_per_instance=1.0, params=params,
                         **cap_kw)
            fits = float(np.floor(cap.max_batch_per_gpu[0] * g))
        running = np.minimum(target, max(fits, 1.0))
        step = decode(dep, context_tokens=mean_ctx, batch_per_instance=running, params=params,
                      **kw)
        out |= {f"{arm}_fits": np.full(target.size, fits), f"{arm}_running": running,
                f"{arm}_resident_mb_per_req": np.full(target.size, resident_bytes_per_request(
                    dep, full, kw.get("device_buffer_tokens", 0)) / 1e6),
                f"{arm}_step_ms": step.t_step_s * 1e3,
                f"{arm}_miss_ms": step.t_miss_s * 1e3,
                f"{arm}_tok_s": running / step.tpot_s}
        # the same step at the running counts the run logged: separates the step-time side
        # of the ratio from the capacity side (uses no model capacity at all)
        logged = pub[f"measured_{arm}_running"].to_numpy().astype(np.float64)
        at = decode(dep, context_tokens=mean_ctx, batch_per_instance=logged, params=params,
                    **kw)
        out[f"{arm}_tok_s_at_logged_running"] = logged / at.tpot_s
    df = pub.with_columns(pl.Series(k, v) for k, v in out.items())
    df = df.with_columns((pl.col("hisparse_tok_s_at_logged_running")
                          / pl.col("base_tok_s_at_logged_running")).alias(
                              "model_ratio_at_logged_running"))
    return df.with_columns((pl.col("hisparse_tok_s") / pl.col("base_tok_s")).alias("model_ratio")
                           ).with_columns((pl.col("model_ratio") / pl.col("measured_ratio") - 1.0)
                                          .alias("ratio_error"))
