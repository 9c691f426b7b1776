"""The accelerator comparison's config as a plain frozen dataclass, apart from the serving
model so the CLI reads its field defaults (its option defaults) without importing it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from toolkit.config import check_number

if TYPE_CHECKING:
    from toolkit.serving.measurements import MeasurementSource

DEFAULT_MAX_P90_TTFT_S = 10.0
"""Default p90 TTFT bound of ``cost compare`` (assumed: an interactive service rarely
tolerates a first token later than 10 s; InferenceX plots every point, so its fronts at low
interactivity include queues of minutes that no operator would run). ``None`` lifts it."""


DEFAULT_TTFT_CONFIDENCE = 0.8
"""The p90 TTFT bound applies to the upper end of the predicted p90 TTFT's central band at
this confidence (0.8: the 80% band's upper end, its 90th percentile); 0.5 the 50% band's."""
TTFT_CONFIDENCES = (0.5, 0.8, 0.9)


@dataclass(frozen=True)
class CompareConfig:
    """One comparison; every field has the CLI flag of the same name (``-`` for ``_``).

    ``mtp``: "on" lets the front use MTP layouts (with the recipe's drafts and acceptance),
    "off" forbids speculative decoding. ``engine_versions``: hardware -> engine version (an
    image tag of the bundled rows or a date) the model predicts for. ``measured``: answer
    from bundled (and ``measurements``) points where they cover the question.
    """

    model: str
    hardware: tuple[str, ...]
    interactivity: tuple[float, ...] = (100.0, 150.0)
    max_p90_ttft_s: float | None = DEFAULT_MAX_P90_TTFT_S
    price_tier: str = "hyperscaler"
    precision: str = "fp8"
    isl: int = 8192
    osl: int = 1024
    cached_prefix_fraction: float = 0.0
    engines: dict[str, str] = field(default_factory=dict)
    mtp: str = "on"
    mtp_draft_tokens: int | None = None
    mtp_accept: float | None = None
    kv_dtype: str = "fp8"
    engine_versions: dict[str, str] = field(default_factory=dict)
    all_engines: bool = False
    measured: bool = True
    measurements: str | MeasurementSource | None = None
    ttft_confidence: float = DEFAULT_TTFT_CONFIDENCE

    def __post_init__(self) -> None:
        if isinstance(self.mtp, bool):  # older configs said mtp = true/false
            object.__setattr__(self, "mtp", "on" if self.mtp else "off")
        if self.mtp not in ("on", "off"):
            raise ValueError(f"mtp must be 'on' or 'off', got {self.mtp!r}")
        if self.kv_dtype not in ("fp8", "bf16"):
            raise ValueError(f"kv_dtype must be 'fp8' or 'bf16', got {self.kv_dtype!r}")
        if not self.hardware:
            raise ValueError("hardware: give at least one accelerator")
        if not self.interactivity:
            raise ValueError("interactivity: give at least one target")
        for v in self.interactivity:
            check_number("interactivity", v, lo=0.0, lo_open=True)
        if self.max_p90_ttft_s is not None:
            check_number("max_p90_ttft_s", self.max_p90_ttft_s, lo=0.0, lo_open=True)
        if self.ttft_confidence not in TTFT_CONFIDENCES:
            raise ValueError(f"ttft_confidence (--ttft-confidence) must be one of "
                             f"{TTFT_CONFIDENCES}, got "
                             f"{self.ttft_confidence!r}")
        check_number("isl", self.isl, lo=1)
        check_number("osl", self.osl, lo=2)
        check_number("cached_prefix_fraction", self.cached_prefix_fraction, lo=0.0, hi=1.0)
        if self.mtp_accept is not None:
            check_number("mtp_accept", self.mtp_accept, lo=1.0)
        if self.mtp_draft_tokens is not None:
            check_number("mtp_draft_tokens", self.mtp_draft_tokens, lo=1)
