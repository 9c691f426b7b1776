"""Service times and default capacities of the tier replay, from the hardware and model specs.

Every number comes from :mod:`toolkit.hardware`, :mod:`toolkit.models` or the serving
step and transfer models (:mod:`toolkit.serving.step`, :mod:`toolkit.serving.transfer`);
what is assumed on top is a field of :class:`~toolkit.replay.tiers.ServiceAssumptions`.
:class:`TierServiceModel` hands them to :func:`toolkit.replay.tiers.replay_tiers`.
Labelled simplifications:

* **One serving instance** of ``gpus_per_replica`` GPUs with attention tensor-parallel:
  the MLA latent row has a single head, so every GPU holds every token's KV and the KV
  pool is one GPU's free HBM: ``hbm_usable x mem_fraction - weights / gpus``.
* **KV bytes per token** = MLA rows of all layers + indexer keys of the indexer layers
  (HiCache moves both).
* **Prefill** of the computed (uncached) tokens runs FCFS on one prefill lane at
  ``compute_efficiency`` of dense peak: weight GEMMs (2 x active params per token, at
  the weight precision), sparse MLA over ``index_topk`` keys per token (BF16; applied
  even when the context is shorter than top-k), and the indexer over the whole context
  on indexer layers (FP8; the context of a computed token is taken as the mean of the
  cached and the full prompt length). Split evenly over the GPUs.
* **Host hits** load over the host link with the ``sm_kernel`` transfer path (all GPUs of
  a tray loading: the concurrent figure), overlapped layer by layer with the prefill
  compute (HiCache's layer-wise overlap), so prefill takes ``max(compute, host load)``.
* **Storage hits** are read at the NVMe bandwidth per GPU before the prefill starts
  (HiCache prefetches L3 into host first), no fixed cost.
* **Decode** time per output token is :func:`toolkit.serving.step.decode_step`'s TPOT at
  ``batch = requests running when the request is admitted`` and ``context`` = the
  trace's mean prompt length, with no host misses (prefix tiers do not touch the decode
  path); one TPOT per request, fixed at admission. Prefill and decode do not slow each
  other (as with PD disaggregation or ideal chunked prefill).
* Output tokens' KV is reserved on the device while the request runs and freed at the
  end, not cached (the next turn recomputes the previous answer).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.hardware import HardwareSpec
from toolkit.models import ModelSpec
from toolkit.replay.tiers.config import ServiceAssumptions, ServiceTimes
from toolkit.serving.step import DecodeScenario, decode_step
from toolkit.serving.transfer import transfer_path


@dataclass(frozen=True)
class TierServiceModel:
    """The service-time model of one (hardware, model, assumptions), as the tier replay
    asks for it (:class:`toolkit.replay.tiers.config.TierService`)."""

    hardware: HardwareSpec
    model: ModelSpec
    assumptions: ServiceAssumptions = ServiceAssumptions()

    def times(self, context_tokens: int, max_batch: int) -> ServiceTimes:
        return service_model(self.hardware, self.model, self.assumptions, context_tokens,
                             max_batch)

    def default_device_tokens(self) -> int:
        return default_device_tokens(self.hardware, self.model, self.assumptions)


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "fp8") -> int:
    """Bytes of one token's KV across all layers: MLA rows plus indexer keys."""
    return model.mla_bytes_per_token(kv_dtype) + model.indexer_bytes_per_token()


def default_device_tokens(hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions) -> int:
    """KV pool of one instance in tokens: one GPU's HBM left after its share of weights.

    Raises:
        ValueError: the weights alone do not fit.
    """
    free = hw.hbm_usable_bytes * a.mem_fraction - model.weight_bytes(a.weight_precision) / (
        a.gpus_per_replica
    )
    if free <= 0:
        raise ValueError(
            f"{model.name} {a.weight_precision} weights do not fit on {a.gpus_per_replica} x "
            f"{hw.name} at mem_fraction {a.mem_fraction}; raise gpus_per_replica"
        )
    return int(free // kv_bytes_per_token(model, a.kv_dtype))


def tpot_table(
    hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions, context_tokens: int, max_batch: int
) -> np.ndarray:
    """TPOT for batch 0..max_batch: decode_step on a power-of-two grid, linear in between."""
    grid = [1]
    while grid[-1] < max_batch:
        grid.append(grid[-1] * 2)
    tp = [
        decode_step(
            DecodeScenario(
                model=model,
                hardware=hw,
                batch_per_gpu=b,
                context_tokens=max(1, context_tokens),
                kv_dtype=a.kv_dtype,
                weight_precision=a.weight_precision,
                gpus_per_replica=a.gpus_per_replica,
            )
        ).tpot_s
        for b in grid
    ]
    b = np.arange(max_batch + 1, dtype=np.float64)
    out = np.interp(b, np.asarray(grid, np.float64), np.asarray(tp))
    out[0] = out[1] if max_batch >= 1 else 0.0
    return out


def service_model(
    hw: HardwareSpec,
    model: ModelSpec,
    a: ServiceAssumptions,
    context_tokens: int,
    max_batch: int,
) -> ServiceTimes:
    """Build the coefficients for one (hardware, model, assumptions) at a mean context."""
    g, eff = a.gpus_per_replica, a.compute_efficiency
    w_peak = _tflops(hw, a.weight_precision)
    attn = (
        model.num_layers
        * 2
        * model.num_query_heads
        * model.index_topk
        * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    )
    per_tok = (2 * model.active_params / w_peak + attn / _tflops(hw, "bf16")) / (g * eff)
    idx = len(model.indexer_layers) * 2 * model.index_n_heads * model.index_head_dim
    per_ctx = idx / _tflops(hw, "fp8") / (g * eff)
    kvb = kv_bytes_per_token(model, a.kv_dtype)
    path = transfer_path(hw, a.mechanism, concurrent=True)
    return ServiceTimes(
        kv_bytes_per_token=kvb,
        prefill_s_per_token=per_tok,
        prefill_s_per_token_context=per_ctx,
        host_fixed_s=path.t_fixed_s,
        host_s_per_token=kvb / path.bw_peak_bytes_per_s,
        storage_fixed_s=0.0,
        storage_s_per_token=kvb / hw.nvme_read_bytes_per_s_per_gpu,
        tpot_by_batch_s=tpot_table(hw, model, a, context_tokens, max(1, max_batch)),
        context_tokens=int(context_tokens),
    )


def _tflops(hw: HardwareSpec, precision: str) -> float:
    value = getattr(hw, f"dense_{precision}_tflops", None)
    if value is None:  # e.g. FP4 on Hopper: FP8 units
        value = hw.dense_fp8_tflops
    return float(value) * 1e12
