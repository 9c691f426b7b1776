"""Service times and default capacities of the tier replay, from the serving model.

Decode and prefill times come from the fitted serving model (:mod:`toolkit.serving.scenario`:
model and hardware specs, efficiencies fitted on the bundled InferenceX DeepSeek-R1 points),
host and storage loads from the transfer model (:mod:`toolkit.serving.transfer`); what is
assumed on top is a field of :class:`~toolkit.replay.tiers.ServiceAssumptions`.
:class:`TierServiceModel` hands them to :func:`toolkit.replay.tiers.replay_tiers`.
Labelled simplifications:

* **One serving instance** of ``gpus_per_replica`` GPUs with attention and MoE
  tensor-parallel (SGLang's TP8 DeepSeek layout, ``engine``'s fitted terms): the MLA
  latent row has a single head, so every GPU holds every token's KV and the KV pool is one
  GPU's free HBM: ``hbm_usable x mem_fraction - weights / gpus``.
* **KV bytes per token** = MLA rows of all layers + indexer keys of the indexer layers
  (HiCache moves both).
* **Prefill** of the computed (uncached) tokens runs FCFS on one prefill lane. The replay's
  loop times it as ``n c_tok + n c_ctx (cached + prompt) / 2`` for ``n`` computed tokens;
  both coefficients are read off the serving model's prefill time (one 8K chunk with
  nothing cached, and after the trace's mean prompt cached: :func:`prefill_coefficients`),
  so the chunk overheads and weight reads are spread per token.
* **Host hits** load over the host link with the ``sm_kernel`` transfer path (all GPUs of
  a tray loading: the concurrent figure), overlapped layer by layer with the prefill
  compute (HiCache's layer-wise overlap), so prefill takes ``max(compute, host load)``.
* **Storage hits** are read at the NVMe bandwidth per GPU before the prefill starts
  (HiCache prefetches L3 into host first), no fixed cost.
* **Decode** time per output token is the serving model's decode-only TPOT at
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
from toolkit.serving.layout import DENSE_WEIGHT_BYTES, ROUTED_WEIGHT_BYTES
from toolkit.serving.scenario import Deployment, decode, prefill
from toolkit.serving.transfer import transfer_path

PROBE_TOKENS = 8192.0
"""New tokens of a prefill probe: one chunk of SGLang's default chunked prefill."""


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


def weights_per_gpu_bytes(hw: HardwareSpec, model: ModelSpec, precision: str, gpus: int,
                          dp_attention: bool) -> float:
    """One GPU's weights in a ``gpus``-GPU instance (the serving model's split,
    :func:`toolkit.serving.model.max_batch`): attention and dense layers replicated on DP
    attention ranks and tensor-sharded otherwise; routed experts sharded."""
    prec = precision if (precision != "fp4" or hw.dense_fp4_tflops) else "fp8"
    dense = model.dense_params * DENSE_WEIGHT_BYTES[prec]
    routed = model.routed_expert_params * ROUTED_WEIGHT_BYTES[prec]
    return dense / (1 if dp_attention else gpus) + routed / gpus


def default_device_tokens(hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions) -> int:
    """KV pool of one GPU in tokens: its HBM left after its share of weights (with DP
    attention a rank's pool, its dense weights replicated; else the instance's pool, every
    GPU holding every token's MLA row).

    Raises:
        ValueError: the weights alone do not fit.
    """
    w = (weights_per_gpu_bytes(hw, model, a.weight_precision, a.gpus_per_replica, True)
         if a.dp_attention else model.weight_bytes(a.weight_precision) / a.gpus_per_replica)
    free = hw.hbm_usable_bytes * a.mem_fraction - w
    if free <= 0:
        raise ValueError(
            f"{model.name} {a.weight_precision} weights do not fit on {a.gpus_per_replica} x "
            f"{hw.name} at mem_fraction {a.mem_fraction}; raise gpus_per_replica"
        )
    return int(free // kv_bytes_per_token(model, a.kv_dtype))


def deployment(hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions) -> Deployment:
    """The one instance the tier replay times: ``a.gpus_per_replica`` GPUs, tensor-parallel
    attention and MoE (SGLang's TP8 DeepSeek layout) unless ``a`` asks for DP attention,
    expert parallelism or MTP (``toolkit plan``'s layouts), ``a.engine``'s fitted terms."""
    return Deployment(model.name, hw.name, engine=a.engine, precision=a.weight_precision,
                      kv_dtype=a.kv_dtype, gpus_per_instance=a.gpus_per_replica,
                      dp_attention=a.dp_attention, expert_parallel=a.expert_parallel,
                      mtp=a.mtp)


def tpot_table(
    hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions, context_tokens: int, max_batch: int
) -> np.ndarray:
    """TPOT for batch 0..max_batch running requests of the instance: the serving model's
    decode step on a power-of-two grid, linear in between."""
    grid = [1]
    while grid[-1] < max_batch:
        grid.append(grid[-1] * 2)
    tp = decode(deployment(hw, model, a), batch_per_instance=np.asarray(grid, np.float64),
                context_tokens=max(2, context_tokens)).tpot_s
    b = np.arange(max_batch + 1, dtype=np.float64)
    out = np.interp(b, np.asarray(grid, np.float64), np.asarray(tp))
    out[0] = out[1] if max_batch >= 1 else 0.0
    return out


def prefill_coefficients(hw: HardwareSpec, model: ModelSpec, a: ServiceAssumptions,
                         context_tokens: int) -> tuple[float, float]:
    """``(s per computed token, s per computed token per context token)`` of the replay's
    linear prefill time ``n c_tok + n c_ctx (cached + prompt) / 2``, read off the serving
    model: one chunk of new tokens with nothing cached, and the same chunk after
    ``context_tokens`` cached tokens (both probes are reproduced exactly)."""
    n = PROBE_TOKENS
    c = float(max(context_tokens, n))
    t0, t1 = prefill(deployment(hw, model, a), new_tokens=[n, n], cached_tokens=[0.0, c]).t_s
    per_ctx = max(float(t1 - t0), 0.0) / (n * c)
    per_tok = float(t0) / n - per_ctx * n / 2.0
    return per_tok, per_ctx


def service_model(
    hw: HardwareSpec,
    model: ModelSpec,
    a: ServiceAssumptions,
    context_tokens: int,
    max_batch: int,
) -> ServiceTimes:
    """Build the coefficients for one (hardware, model, assumptions) at a mean context."""
    per_tok, per_ctx = prefill_coefficients(hw, model, a, context_tokens)
    kvb = kv_bytes_per_token(model, a.kv_dtype)
    # the prompt's KV to a decode pool (read by a disaggregated cluster replay): linear in
    # the prompt, read off the model's transfer of one probe chunk
    xfer = prefill(deployment(hw, model, a), new_tokens=PROBE_TOKENS).kv_transfer_s
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
        kv_transfer_s_per_token=float(xfer[0]) / PROBE_TOKENS if xfer is not None else 0.0,
    )
