"""Frozen run configurations and their fingerprints (the key of a run in the store)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any


def config_json(cfg: Any) -> str:
    """Canonical JSON of a frozen dataclass: sorted keys, no whitespace."""
    return json.dumps(dataclasses.asdict(cfg), sort_keys=True, separators=(",", ":"))


def fingerprint(cfg: Any, length: int = 12) -> str:
    """Stable hex digest of a config; same config, same run id, so re-runs are idempotent."""
    text = type(cfg).__name__ + config_json(cfg)
    return hashlib.sha256(text.encode()).hexdigest()[:length]
