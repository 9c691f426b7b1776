"""InferenceX cost arithmetic: $ per million tokens from $/GPU-hr and tokens/s/GPU.

``$/M = $/GPU-hr / (tok/s/GPU x 3600 / 1e6)`` (InferenceX-app ``chart-utils.ts``), for
total, input and output tokens and each price tier (InferenceX-app ``gpu-keys.ts``
costh / costn / costr). Throughput per GPU counts input + output tokens; which token type
is the denominator must always be stated, because total and output $/M differ by about the
input/output ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from toolkit.hardware import PRICE_TIERS, HardwareSpec

TOKEN_TYPES: tuple[str, ...] = ("total", "input", "output")


def usd_per_million_tokens(
    usd_per_gpu_hour: npt.ArrayLike, tokens_per_s_per_gpu: npt.ArrayLike
) -> np.ndarray | float:
    """InferenceX: ``usd_per_gpu_hour / (tokens_per_s_per_gpu * 3600 / 1e6)``.

    Raises:
        ValueError: a throughput is not positive (cost would be infinite or negative).
    """
    price = np.asarray(usd_per_gpu_hour, dtype=np.float64)
    tput = np.asarray(tokens_per_s_per_gpu, dtype=np.float64)
    if np.any(tput <= 0):
        raise ValueError("tokens_per_s_per_gpu must be > 0")
    out = price / (tput * 3600.0 / 1e6)
    return float(out) if out.ndim == 0 else out


def tokens_per_s_per_gpu_for_cost(usd_per_gpu_hour: float, usd_per_million: float) -> float:
    """Inverse: the throughput per GPU at which ``usd_per_gpu_hour`` costs ``usd_per_million``."""
    return usd_per_gpu_hour * 1e6 / (usd_per_million * 3600.0)


def cost_ratio(price_a: float, tput_a: float, price_b: float, tput_b: float) -> float:
    """Per-token cost of A relative to B: ``(price_a / price_b) / (tput_a / tput_b)``."""
    return (price_a / price_b) / (tput_a / tput_b)


@dataclass(frozen=True)
class CostQuote:
    """One $/M figure with the inputs that produced it (what the CLI prints)."""

    hardware: str
    price_tier: str
    survey: str
    token_type: str
    tokens_per_s_per_gpu: float
    usd_per_gpu_hour: float
    usd_per_million_tokens: float


def quote(
    hw: HardwareSpec,
    tokens_per_s_per_gpu: float,
    tier: str = "hyperscaler",
    token_type: str = "total",
    survey: str | None = None,
) -> CostQuote:
    """$/M tokens for ``hw`` at a throughput, from the tier's current (or named) survey."""
    if token_type not in TOKEN_TYPES:
        raise ValueError(f"token_type must be one of {', '.join(TOKEN_TYPES)}; got {token_type!r}")
    price = hw.price_usd_per_gpu_hour(tier, survey)
    return CostQuote(
        hardware=hw.name,
        price_tier=tier,
        survey=survey or hw.price_vintage(tier),
        token_type=token_type,
        tokens_per_s_per_gpu=float(tokens_per_s_per_gpu),
        usd_per_gpu_hour=price,
        usd_per_million_tokens=float(usd_per_million_tokens(price, tokens_per_s_per_gpu)),
    )


def cost_matrix(
    hw: HardwareSpec,
    total_tokens_per_s_per_gpu: float,
    input_tokens_per_s_per_gpu: float | None = None,
    output_tokens_per_s_per_gpu: float | None = None,
) -> pl.DataFrame:
    """InferenceX's 3x3 matrix: {hyperscaler, neocloud, rental} x {total, input, output}.

    Input and output rows are omitted when their throughput is not given.
    """
    tputs = {
        "total": total_tokens_per_s_per_gpu,
        "input": input_tokens_per_s_per_gpu,
        "output": output_tokens_per_s_per_gpu,
    }
    rows = [
        quote(hw, t, tier, token_type).__dict__
        for tier in PRICE_TIERS
        for token_type, t in tputs.items()
        if t is not None
    ]
    return pl.DataFrame(rows)
