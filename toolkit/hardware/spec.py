"""Accelerator specs: a frozen dataclass per GPU, loaded from TOML with provenance.

Units are SI and in the field names: bytes, bytes/s, seconds, watts, TFLOPS (1e12 FLOP/s,
dense), USD per GPU-hour. "Per GPU" unless the name says otherwise. Decimal prefixes:
8 TB/s is ``8e12``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from toolkit.hardware.provenance import (
    Sourced,
    SpecError,
    SpecRegistry,
    build_spec,
    read_toml,
)

PriceTier = Literal["hyperscaler", "neocloud", "rental"]
PRICE_TIERS: tuple[str, ...] = ("hyperscaler", "neocloud", "rental")


@dataclasses.dataclass(frozen=True)
class PricePoint:
    """$/GPU-hr of one earlier InferenceX survey; tiers a survey lacks are None."""

    survey: str
    hyperscaler_usd_per_gpu_hour: float | None
    neocloud_usd_per_gpu_hour: float | None
    rental_usd_per_gpu_hour: float | None
    source: str


@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    """One accelerator, per GPU. Every field but the first three has a provenance entry.

    Fields whose quantity does not exist on the part (FP4 on Hopper) are None.
    """

    name: str
    label: str
    vendor: str
    # memory
    hbm_bytes: float
    hbm_usable_bytes: float
    hbm_bandwidth_bytes_per_s: float
    # compute, dense
    dense_fp4_tflops: float | None
    dense_fp8_tflops: float
    dense_bf16_tflops: float
    # host memory and link
    host_mem_bytes_per_gpu: float
    host_mem_gpus_sharing: int
    host_mem_bandwidth_bytes_per_s_per_cpu: float | None
    host_link: str
    host_link_peak_bytes_per_s: float
    host_link_gpus_sharing: int
    h2d_single_bytes_per_s: float
    h2d_concurrent_bytes_per_s: float
    h2d_concurrent_gpus: int
    d2h_single_bytes_per_s: float | None
    # transfer fixed costs per mechanism
    ce_call_fixed_s: float
    batch_descriptor_fixed_s: float
    sm_kernel_rtt_s: float
    sm_kernel_bytes_in_flight_per_cta: float
    sm_kernel_ctas: int
    # storage, scale-up, power
    nvme_read_bytes_per_s_per_gpu: float
    scaleup_domain_gpus: int
    scaleup_bandwidth_bytes_per_s: float
    scaleout_bandwidth_bytes_per_s: float
    tdp_w: float
    power_all_in_w: float
    # price (current survey; earlier surveys in price_history)
    price_hyperscaler_usd_per_gpu_hour: float
    price_neocloud_usd_per_gpu_hour: float
    price_rental_usd_per_gpu_hour: float
    provenance: Mapping[str, Sourced] = dataclasses.field(repr=False, compare=False)
    price_history: tuple[PricePoint, ...] = dataclasses.field(default=(), repr=False)

    def sourced(self, field: str) -> Sourced:
        """The value of ``field`` with its kind and source."""
        return self.provenance[field]

    def price_usd_per_gpu_hour(self, tier: str = "hyperscaler", survey: str | None = None) -> float:
        """$/GPU-hr for a tier, from the current survey or a named earlier one."""
        if tier not in PRICE_TIERS:
            raise SpecError(f"price tier must be one of {', '.join(PRICE_TIERS)}; got {tier!r}")
        if survey is None or survey == self.price_vintage(tier):
            return float(getattr(self, f"price_{tier}_usd_per_gpu_hour"))
        for p in self.price_history:
            if p.survey == survey:
                v = getattr(p, f"{tier}_usd_per_gpu_hour")
                if v is None:
                    break
                return float(v)
        known = [self.price_vintage(tier)] + [p.survey for p in self.price_history]
        raise SpecError(f"{self.name}: no {tier} price for survey {survey!r}; known: {known}")

    def price_vintage(self, tier: str = "hyperscaler") -> str:
        """The survey the current price of ``tier`` comes from."""
        return self.provenance[f"price_{tier}_usd_per_gpu_hour"].vintage


_PLAIN = ("name", "label", "vendor")


def load_hardware(path_or_dict: str | Path | Mapping[str, Any]) -> HardwareSpec:
    """Build a :class:`HardwareSpec` from a TOML file or an equivalent dict (not registered).

    Raises:
        SpecError: a field is missing, unknown, or lacks kind/source; the message names it.
    """
    data, where = read_toml(path_or_dict)
    for key in _PLAIN:
        if not isinstance(data.get(key), str):
            raise SpecError(f"{where}: top-level {key!r} must be a string")
    plain = {k: data[k] for k in _PLAIN}
    plain["name"] = plain["name"].lower()
    history = tuple(
        _price_point(p, f"{where}: price_history[{i}]")
        for i, p in enumerate(data.get("price_history", []))
    )
    spec = build_spec(HardwareSpec, data, where, plain)
    for tier in PRICE_TIERS:
        if not spec.price_vintage(tier):
            raise SpecError(f"{where}: price_{tier}_usd_per_gpu_hour needs a 'vintage' (survey)")
    return dataclasses.replace(spec, price_history=history)


def _price_point(raw: Any, where: str) -> PricePoint:
    try:
        return PricePoint(
            survey=raw["survey"],
            hyperscaler_usd_per_gpu_hour=raw.get("hyperscaler_usd_per_gpu_hour"),
            neocloud_usd_per_gpu_hour=raw.get("neocloud_usd_per_gpu_hour"),
            rental_usd_per_gpu_hour=raw.get("rental_usd_per_gpu_hour"),
            source=raw["source"],
        )
    except (KeyError, TypeError, AttributeError) as e:
        raise SpecError(f"{where}: needs survey, source and tier prices ({e})") from None


HARDWARE: SpecRegistry[HardwareSpec] = SpecRegistry("hardware", "toolkit.hardware",
                                                     load_hardware)


def register_hardware(spec: HardwareSpec | str | Path | Mapping[str, Any]) -> HardwareSpec:
    """Register a spec (or a TOML path / dict) under its name; duplicates raise."""
    if not isinstance(spec, HardwareSpec):
        spec = load_hardware(spec)
    return HARDWARE.add(spec)


def get_hardware(name: str, overrides: Mapping[str, Any] | None = None) -> HardwareSpec:
    """The registered spec ``name`` (case-insensitive), optionally with fields overridden.

    Example: ``get_hardware("gb200", overrides={"price_hyperscaler_usd_per_gpu_hour": 2.0})``.
    """
    return HARDWARE.spec(name, overrides)


def hardware_names() -> list[str]:
    """Names of all registered accelerators, sorted."""
    return HARDWARE.names()
