"""How a trace's HiSparse misses are carried to a model's top-k.

Why a function of its own: a selection trace recorded with a small top-k (the bundled
SmolLM2 recording has k = 64) is priced at a DSA model's k (2048). Every answer that does so
(``cost compare --selections``; ``plan`` and the serving what-ifs read the same rule) goes
through :func:`scale_misses`, so the rule and its label live in one place.

The rule here keeps the trace's miss ratio at the same buffer/k ratio (misses per row scale
with k); a trace recorded at the model's own k needs no scaling.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScaledMisses:
    """Host rows fetched per (request, decode step, layer) at the model's k, with a band."""

    rows: float
    rows_low: float
    rows_high: float
    label: str


def scale_misses(miss_ratio: float, *, trace_k: int, model_k: int, buffer_ratio: float,
                 context_tokens: float) -> ScaledMisses:
    """Misses per row at ``model_k`` from a trace's ``miss_ratio`` (misses / (rows x k)) at
    ``buffer_ratio`` (device buffer / k) and mean ``context_tokens``."""
    rows = miss_ratio * model_k
    if trace_k == model_k:
        return ScaledMisses(rows, rows, rows, f"measured at the model's k = {model_k} (no "
                            "scaling)")
    return ScaledMisses(rows, rows, rows, (
        f"extrapolation: the trace's miss ratio {miss_ratio:.4f} at buffer/k = "
        f"{buffer_ratio:g} (k = {trace_k}, mean context {context_tokens:,.0f} tokens) kept at "
        f"k = {model_k} (x{model_k / trace_k:g} rows; assumed constant in k and context)"))
