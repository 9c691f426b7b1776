"""Cost layer: transfer time, $/M tokens, interpolation at a target interactivity, decode step.

Reads specs (``toolkit.hardware``, ``toolkit.models``) and numbers; never replays.
"""

from toolkit.cost.decode import DecodeResult, DecodeScenario, decode_step
from toolkit.cost.interpolate import (
    MeasurementError,
    cost_at_interactivity,
    pareto_front,
    read_measurements,
    steffen_interpolate,
    steffen_slopes,
)
from toolkit.cost.price import (
    CostQuote,
    cost_matrix,
    cost_ratio,
    quote,
    tokens_per_s_per_gpu_for_cost,
    usd_per_million_tokens,
)
from toolkit.cost.transfer import (
    MECHANISMS,
    TransferPath,
    bw_eff,
    link_bandwidth_bytes_per_s,
    sm_kernel_bandwidth_bytes_per_s,
    transfer_path,
)

__all__ = [
    "MECHANISMS",
    "CostQuote",
    "DecodeResult",
    "DecodeScenario",
    "MeasurementError",
    "TransferPath",
    "bw_eff",
    "cost_at_interactivity",
    "cost_matrix",
    "cost_ratio",
    "decode_step",
    "link_bandwidth_bytes_per_s",
    "pareto_front",
    "quote",
    "read_measurements",
    "sm_kernel_bandwidth_bytes_per_s",
    "steffen_interpolate",
    "steffen_slopes",
    "tokens_per_s_per_gpu_for_cost",
    "transfer_path",
    "usd_per_million_tokens",
]
