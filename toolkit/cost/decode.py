"""The price of a modelled decode step (:func:`toolkit.serving.step.decode_step`)."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.cost.price import usd_per_million_tokens
from toolkit.hardware import HardwareSpec
from toolkit.serving.step import DecodeResult


@dataclass(frozen=True)
class DecodePrice:
    """$ per GPU-hour of a price tier and $ per million output tokens at the step's rate."""

    usd_per_gpu_hour: float
    usd_per_million_output_tokens: float


def price_decode(step: DecodeResult, hw: HardwareSpec,
                 price_tier: str = "hyperscaler") -> DecodePrice:
    """Price ``step`` on ``hw`` at ``price_tier`` (decode throughput counts output tokens)."""
    price = hw.price_usd_per_gpu_hour(price_tier)
    return DecodePrice(price, float(usd_per_million_tokens(price, step.tokens_per_s_per_gpu)))
