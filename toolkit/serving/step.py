"""A first-order decode-step model with every number visible.

Per layer and GPU, one decode step reads weights, indexer keys (132 B x context on indexer
layers only), the top-k MLA rows (k x row bytes), and pulls ``misses`` rows from host
through a transfer mechanism. A layer takes ``max(HBM time, compute time)``; the miss
transfer adds to it (synchronous, HiSparse v1) or hides behind the previous layer
(overlapped, plan-then-IO prefetch) as ``max(layer, transfer)``.

Labelled assumptions (each is a field of :class:`DecodeScenario`, so it can be changed):

* HBM efficiency 0.8: ai-dynamo/aiconfigurator's ``mem_bw_empirical_scaling_factor``.
* Compute efficiency 0.5: assumed; FlashMLA sparse decode reaches ~350-410 TFLOPS of
  989-2,250 dense BF16, i.e. 0.16-0.41, so 0.5 is optimistic for attention.
* Weights split evenly over layers and over ``gpus_per_replica`` GPUs; a step touches the
  fraction ``1 - (1 - active/total)^(tokens in the replica's batch)`` of them (tokens route
  independently; shared experts and dense layers treated like routed ones).
* Attention math runs in BF16 (FlashMLA dequantises FP8 rows), the indexer in FP8, weight
  GEMMs at the weight precision.
* Throughput counts decode (output) tokens only (what :mod:`toolkit.cost.decode` prices).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from toolkit.hardware import HardwareSpec
from toolkit.models import ModelSpec
from toolkit.serving.transfer import transfer_path


@dataclass(frozen=True)
class DecodeScenario:
    """Inputs of one decode step (per GPU; the replica is ``gpus_per_replica`` GPUs).

    Attributes:
        batch_per_gpu: requests decoding concurrently per GPU (DP attention).
        context_tokens: history length L of every request.
        misses_per_layer: MLA rows per request per layer fetched from host this step: one
            number for every layer, or one per model layer (e.g. from a selection replay).
    """

    model: ModelSpec
    hardware: HardwareSpec
    batch_per_gpu: int
    context_tokens: int
    misses_per_layer: float | tuple[float, ...] = 0.0
    kv_dtype: str = "fp8"
    weight_precision: str = "fp8"
    gpus_per_replica: int = 8
    mechanism: str = "sm_kernel"
    concurrent_link: bool = True
    overlap: bool = False
    hbm_efficiency: float = 0.8
    compute_efficiency: float = 0.5


@dataclass(frozen=True)
class DecodeResult:
    """Per-layer breakdown plus the step-level figures."""

    layers: pl.DataFrame = field(repr=False)
    tpot_s: float
    interactivity_tok_s_user: float
    tokens_per_s_per_gpu: float

    def totals(self) -> dict[str, float]:
        """Column sums of the byte, FLOP and time terms over all layers."""
        num = [c for c, t in self.layers.schema.items() if t.is_numeric() and c != "layer"]
        return {c: float(self.layers[c].sum()) for c in num}


def _tflops(hw: HardwareSpec, precision: str) -> float:
    value = getattr(hw, f"dense_{precision}_tflops")
    if value is None:  # e.g. FP4 on Hopper: fall back to FP8 units
        value = hw.dense_fp8_tflops
    return float(value) * 1e12


def decode_step(sc: DecodeScenario) -> DecodeResult:
    """Model one decode step of ``sc``; see the module docstring for the assumptions."""
    m, hw, b = sc.model, sc.hardware, sc.batch_per_gpu
    if b < 1 or sc.context_tokens < 1:
        raise ValueError("batch_per_gpu and context_tokens must be >= 1")
    k = min(m.index_topk, sc.context_tokens)
    row = m.mla_row_bytes(sc.kv_dtype)
    touched = 1 - (1 - m.active_params / m.total_params) ** (b * sc.gpus_per_replica)
    w_bytes = m.weight_bytes(sc.weight_precision) / sc.gpus_per_replica / m.num_layers * touched
    w_flops = 2 * m.active_params / m.num_layers * b
    attn_flops = 2 * m.num_query_heads * k * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * b
    idx_flops_one = 2 * m.index_n_heads * m.index_head_dim * sc.context_tokens * b
    hbm_bw = hw.hbm_bandwidth_bytes_per_s * sc.hbm_efficiency
    path = transfer_path(hw, sc.mechanism, concurrent=sc.concurrent_link)
    indexer = set(m.indexer_layers)
    misses = sc.misses_per_layer
    if isinstance(misses, tuple) and len(misses) != m.num_layers:
        raise ValueError(f"misses_per_layer has {len(misses)} entries; {m.name} has "
                         f"{m.num_layers} layers")
    rows = []
    for layer in range(m.num_layers):
        has_idx = layer in indexer
        idx_bytes = m.indexer_row_bytes * sc.context_tokens * b if has_idx else 0
        idx_flops = idx_flops_one if has_idx else 0
        kv_bytes = k * row * b
        t_hbm = (w_bytes + idx_bytes + kv_bytes) / hbm_bw
        t_comp = (
            w_flops / _tflops(hw, sc.weight_precision)
            + attn_flops / _tflops(hw, "bf16")
            + idx_flops / _tflops(hw, "fp8")
        ) / sc.compute_efficiency
        n_miss = (misses[layer] if isinstance(misses, tuple) else misses) * b
        t_miss = float(path.time_s(n_miss, row))
        t_work = max(t_hbm, t_comp)
        rows.append(
            {
                "layer": layer,
                "indexer_layer": has_idx,
                "weight_bytes": w_bytes,
                "indexer_bytes": float(idx_bytes),
                "sparse_kv_bytes": float(kv_bytes),
                "miss_bytes": n_miss * row,
                "weight_flops": w_flops,
                "indexer_flops": float(idx_flops),
                "attention_flops": float(attn_flops),
                "t_hbm_s": t_hbm,
                "t_compute_s": t_comp,
                "t_miss_s": t_miss,
                "t_layer_s": max(t_work, t_miss) if sc.overlap else t_work + t_miss,
            }
        )
    layers = pl.DataFrame(rows)
    tpot = float(layers["t_layer_s"].sum())
    return DecodeResult(
        layers=layers,
        tpot_s=tpot,
        interactivity_tok_s_user=1000.0 / (tpot * 1000.0),
        tokens_per_s_per_gpu=b / tpot,
    )
