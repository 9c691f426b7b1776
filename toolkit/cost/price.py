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

from toolkit.config import MAX_TPUT_PER_GPU, check_number
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
    check_number("tokens_per_s_per_gpu", tokens_per_s_per_gpu, lo=0.0, lo_open=True,
                 hi=MAX_TPUT_PER_GPU)  # 1e308 was priced at $0.0/M
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


@dataclass(frozen=True)
class MemoryPrice:
    """$ per GB-hour of a memory or storage tier, with where the figure comes from.

    ``kind``: ``survey`` (a published market price, converted) or ``assumption`` (a labelled
    estimate); ``vintage``: when the underlying price was quoted.
    """

    tier: str
    usd_per_gb_hour: float
    kind: str
    source: str
    vintage: str


AMORTISATION_HOURS = 36 * 730.0
"""Purchase prices become $/GB-hour over 36 months of 730 hours (assumed: the three-year
depreciation InferenceX's hyperscaler TCO uses for the servers themselves)."""

MEMORY_PRICES: dict[str, MemoryPrice] = {
    "dram": MemoryPrice(
        "dram", 885.0 / 64.0 / AMORTISATION_HOURS, "survey",
        "CFM (China Flash Market) server DDR5 64GB RDIMM contract price $820-950, midpoint "
        "$885 = $13.83/GB (chinaflashmarket.com/a/183609), amortised over 36 months",
        "2026-Q1"),
    "ssd": MemoryPrice(
        "ssd", 2.0 * 25.0 / 128.0 / AMORTISATION_HOURS, "assumption",
        "enterprise NVMe at 2x the raw NAND price (assumed factor for controller, "
        "over-provisioning and margin); raw NAND from CFM's 1Tb TLC flash wafer quote of "
        "$25 = $0.195/GB (chinaflashmarket.com/a/183609), amortised over 36 months",
        "2026-Q1"),
}
"""Host DRAM (HiCache host tier and HiSparse host pool) and NVMe (HiCache storage tier):
the marginal price of the capacity a plan buys beyond what the GPU's $/hour already
includes. Memory prices moved by 2-3x within 2025-26, so every plan prints these."""


def memory_usd_per_gb_hour(tier: str) -> float:
    """$/GB-hour of ``dram`` or ``ssd`` (:data:`MEMORY_PRICES`)."""
    try:
        return MEMORY_PRICES[tier].usd_per_gb_hour
    except KeyError:
        raise ValueError(f"memory tier must be one of {', '.join(MEMORY_PRICES)}; "
                         f"got {tier!r}") from None
