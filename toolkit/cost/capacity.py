"""How many requests fit in HBM, with and without HiSparse offload.

Per GPU, the KV budget is usable HBM capacity minus this GPU's share of the weights (split over
``gpus_per_replica``) minus a reserve for activations and runtime (``reserve_fraction`` of
HBM; 10% assumed). Without offload a request holds its full MLA and indexer rows for
every token. With HiSparse the MLA rows live in host DRAM and only a device buffer of
``buffer_tokens`` (+1 newest-token slot) per layer stays in HBM; the indexer keys stay in
HBM for every token (SGLang HiSparse offloads only the MLA rows), and the full MLA rows
must fit in this GPU's share of host DRAM (``host_mem_bytes_per_gpu``). KV is assumed
replicated per GPU (DP attention), which is how SGLang serves MLA models at high batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.hardware import HardwareSpec
from toolkit.models import ModelSpec

RESERVE_FRACTION = 0.10  # assumed: activations, CUDA graphs, allocator slack


@dataclass(frozen=True)
class HbmBudget:
    """Bytes per GPU and the resulting maximum batch."""

    kv_budget_bytes: float
    bytes_per_request_full: float
    bytes_per_request_offload: float
    max_batch_full: int
    max_batch_offload: int  # min of the HBM and the host-DRAM limits
    host_bytes_per_request: float
    max_batch_offload_hbm: int
    max_batch_offload_host: int


def hbm_budget(model: ModelSpec, hw: HardwareSpec, context_tokens: int, *,
               buffer_tokens: int | None = None, gpus_per_replica: int = 8,
               kv_dtype: str = "fp8", weight_precision: str = "fp8",
               reserve_fraction: float = RESERVE_FRACTION) -> HbmBudget:
    """Max concurrent requests of ``context_tokens`` per GPU, full KV vs HiSparse."""
    n = buffer_tokens or 2 * model.index_topk
    weights = model.weight_bytes(weight_precision) / gpus_per_replica
    budget = hw.hbm_usable_bytes * (1 - reserve_fraction) - weights
    mla_token = model.mla_bytes_per_token(kv_dtype)
    idx_token = model.indexer_bytes_per_token()
    full = context_tokens * (mla_token + idx_token)
    resident = min(context_tokens, n + 1)
    offload = resident * mla_token + context_tokens * idx_token
    host = context_tokens * mla_token
    by_hbm = max(0, int(budget // offload))
    by_host = int(hw.host_mem_bytes_per_gpu // host)
    return HbmBudget(budget, full, offload, max(0, int(budget // full)), min(by_hbm, by_host),
                     host, by_hbm, by_host)
