"""The accelerator comparison's config as a plain frozen dataclass, apart from the serving
model so the CLI reads its field defaults (its option defaults) without importing it."""

from __future__ import annotations

from dataclasses import dataclass, field

from toolkit.config import check_number


@dataclass(frozen=True)
class CompareConfig:
    """One comparison; every field has the CLI flag of the same name (``-`` for ``_``)."""

    model: str
    hardware: tuple[str, ...]
    interactivity: tuple[float, ...] = (100.0, 150.0)
    max_p90_ttft_s: float | None = None
    price_tier: str = "hyperscaler"
    precision: str = "fp8"
    isl: int = 8192
    osl: int = 1024
    cached_prefix_fraction: float = 0.0
    engines: dict[str, str] = field(default_factory=dict)
    mtp: bool = True

    def __post_init__(self) -> None:
        if not self.hardware:
            raise ValueError("hardware: give at least one accelerator")
        if not self.interactivity:
            raise ValueError("interactivity: give at least one target")
        for v in self.interactivity:
            check_number("interactivity", v, lo=0.0, lo_open=True)
        if self.max_p90_ttft_s is not None:
            check_number("max_p90_ttft_s", self.max_p90_ttft_s, lo=0.0, lo_open=True)
        check_number("isl", self.isl, lo=1)
        check_number("osl", self.osl, lo=2)
        check_number("cached_prefix_fraction", self.cached_prefix_fraction, lo=0.0, hi=1.0)
