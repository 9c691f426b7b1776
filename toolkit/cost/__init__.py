"""Cost layer: $/M tokens, interpolation at a target interactivity, prices of modelled steps.

Reads specs (``toolkit.hardware``, ``toolkit.models``), the serving model's times and
replay results; never replays. Times (transfer paths, decode steps) are
:mod:`toolkit.serving`'s.
"""

from toolkit.cost.decode import DecodePrice, price_decode
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

__all__ = [
    "CostQuote",
    "DecodePrice",
    "MeasurementError",
    "cost_at_interactivity",
    "cost_matrix",
    "cost_ratio",
    "pareto_front",
    "quote",
    "price_decode",
    "read_measurements",
    "steffen_interpolate",
    "steffen_slopes",
    "tokens_per_s_per_gpu_for_cost",
    "usd_per_million_tokens",
]
