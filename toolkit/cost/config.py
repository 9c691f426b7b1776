"""The accelerator comparison's config as a plain frozen dataclass, apart from the serving
model so the CLI reads its field defaults (its option defaults) without importing it."""

from __future__ import annotations

from dataclasses import dataclass, field


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
