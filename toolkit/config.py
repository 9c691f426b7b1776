"""Frozen run configurations and their fingerprints (the key of a run in the store)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
from typing import Any


def config_json(cfg: Any) -> str:
    """Canonical JSON of a frozen dataclass: sorted keys, no whitespace."""
    return json.dumps(dataclasses.asdict(cfg), sort_keys=True, separators=(",", ":"))


def fingerprint(cfg: Any, length: int = 12) -> str:
    """Stable hex digest of a config; same config, same run id, so re-runs are idempotent."""
    text = type(cfg).__name__ + config_json(cfg)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


#: Largest integer any count (tokens, blocks, users, rows) may be: 2^53, beyond any machine,
#: exact as a float64, and far inside int64 once multiplied by bytes per token. A count
#: beyond it (e.g. 2^63 - 1) overflowed a kernel's int64 arithmetic with a traceback.
MAX_INT = 1 << 53


MAX_TPUT_PER_GPU = 1e7
"""Most tokens/s per GPU a throughput may be, measured or asked about: ~600x the highest
InferenceX reports (15,868 for DeepSeek-R1); a 1e308 throughput was priced at $0.0/M."""


def check_count(name: str, value: Any, *, lo: int = 0) -> None:
    """A count field: an integer in [lo, :data:`MAX_INT`], named when refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
    if value > MAX_INT:
        raise ValueError(f"{name} must be <= 2^53 ({MAX_INT:,}), got {value:,}")


def check_number(name: str, value: Any, *, lo: float | None = None, hi: float | None = None,
                 lo_open: bool = False) -> None:
    """The one range check of a config field, run by its ``__post_init__``: the CLI flag,
    a sweep grid's key and a Python call all reach it, so each refuses what the others
    refuse. NaN, infinities, booleans and non-numbers are refused with the field's name."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo:g}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be <= {hi:g}, got {value!r}")
