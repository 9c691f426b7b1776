"""Cost layer: $/M tokens, interpolation at a target interactivity, prices of replays.

Reads specs (``toolkit.hardware``, ``toolkit.models``), the serving model's times and
replay results; never replays itself. Every time (decode and prefill steps, transfer paths)
is :mod:`toolkit.serving`'s, the decode step through :mod:`toolkit.serving.scenario`.
"""

from typing import Any

# Public name -> the module that defines it. Loaded on first use (PEP 562), so reading a
# config (``toolkit.cost.config``, which the CLI imports for its option defaults) does not
# load the pricing modules, the serving model or the Engram replay's kernels.
_LAZY = {
    "MeasurementError": "interpolate", "cost_at_interactivity": "interpolate",
    "pareto_front": "interpolate", "read_measurements": "interpolate",
    "steffen_interpolate": "interpolate", "steffen_slopes": "interpolate",
    "CostQuote": "price", "cost_matrix": "price", "cost_ratio": "price", "quote": "price",
    "tokens_per_s_per_gpu_for_cost": "price", "usd_per_million_tokens": "price",
    "missed_rows_per_token_for": "engram", "run_engram": "engram",
    "run_tiers": "from_replay", "cost_of_replay": "from_replay",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit.cost' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"toolkit.cost.{module}"), name)
