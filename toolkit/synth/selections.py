"""Synthetic top-k selection traces, for regimes a small real model cannot show.

SYNTHETIC: nothing here is measured. A selection is the union of attention sinks (the
first ``sinks`` positions), a recency window (the last ``recent_window`` positions), and
"middle" positions: a share ``layer_retention`` carried over from the previous layer at
the same step, a share ``step_retention`` of the rest carried over from the same layer at
the previous step, and fresh uniform picks for what remains. The trace metadata says
``synthetic = true`` and records the full config as its source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from toolkit.config import config_json
from toolkit.errors import TraceFormatError
from toolkit.ingest.selections import SelectionColumns, TraceMeta, build_tables


@dataclass(frozen=True)
class SyntheticSelectionConfig:
    """Knobs of the generator (token counts are positions, not bytes).

    Attributes:
        requests: independent requests.
        prompt_tokens: context before the first decode step.
        steps: decode steps per request (seq_len = prompt_tokens + step + 1).
        layers: layers with their own selection.
        k: selections per (step, layer); all positions while seq_len <= k.
        sinks: leading positions always selected.
        recent_window: trailing positions always selected (includes the newest token).
        step_retention: share of the middle set kept from the previous step (same layer).
        layer_retention: share of the middle set kept from the previous layer (same step).
        seed: RNG seed; the same config always gives the same trace.
    """

    requests: int = 1
    prompt_tokens: int = 8_192
    steps: int = 64
    layers: int = 4
    k: int = 2_048
    sinks: int = 64
    recent_window: int = 512
    step_retention: float = 0.85
    layer_retention: float = 0.7
    seed: int = 0

    def __post_init__(self) -> None:
        if self.sinks + self.recent_window > self.k:
            raise ValueError("sinks + recent_window must not exceed k")
        for name in ("step_retention", "layer_retention"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1]")
        if min(self.requests, self.steps, self.layers, self.k, self.prompt_tokens) < 1:
            raise ValueError("requests, steps, layers, k and prompt_tokens must be >= 1")


def _fresh(rng: np.random.Generator, lo: int, hi: int, n: int, taken: np.ndarray) -> np.ndarray:
    """``n`` distinct positions in [lo, hi) not in ``taken`` (sorted), by rejection."""
    out = np.zeros(0, dtype=np.int64)
    while out.size < n:
        cand = np.unique(rng.integers(lo, hi, size=2 * (n - out.size) + 8))
        cand = np.setdiff1d(np.setdiff1d(cand, taken, assume_unique=True), out,
                            assume_unique=True)
        out = np.concatenate([out, rng.permutation(cand)[: n - out.size]])
    return out


def _middle(cfg: SyntheticSelectionConfig, rng: np.random.Generator, seq_len: int,
            prev_layer: np.ndarray | None, prev_step: np.ndarray | None) -> np.ndarray:
    lo, hi = cfg.sinks, seq_len - cfg.recent_window
    m = cfg.k - cfg.sinks - cfg.recent_window
    chosen = np.zeros(0, dtype=np.int64)
    for prev, share in ((prev_layer, cfg.layer_retention), (prev_step, cfg.step_retention)):
        if prev is None or chosen.size >= m:
            continue
        pool = np.setdiff1d(prev[(prev >= lo) & (prev < hi)], chosen, assume_unique=True)
        want = min(pool.size, round(share * (m - chosen.size)))
        chosen = np.union1d(chosen, rng.choice(pool, size=want, replace=False))
    return np.union1d(chosen, _fresh(rng, lo, hi, m - chosen.size, chosen))


def generate(cfg: SyntheticSelectionConfig, trace: str) -> dict[str, pa.Table]:
    """Build the three selection tables for ``cfg`` (validated like any ingest)."""
    rng = np.random.default_rng(cfg.seed)
    cols: dict[str, list[int]] = {"request_id": [], "step": [], "layer": [], "seq_len": []}
    lists: list[np.ndarray] = []
    for req in range(cfg.requests):
        prev_step: list[np.ndarray | None] = [None] * cfg.layers
        for step in range(cfg.steps):
            seq_len = cfg.prompt_tokens + step + 1
            prev_layer = None
            for layer in range(cfg.layers):
                if seq_len <= cfg.k:
                    sel = np.arange(seq_len, dtype=np.int64)
                    mid = None
                else:
                    mid = _middle(cfg, rng, seq_len, prev_layer, prev_step[layer])
                    sel = np.concatenate([np.arange(cfg.sinks), mid,
                                          np.arange(seq_len - cfg.recent_window, seq_len)])
                prev_layer, prev_step[layer] = mid, mid
                for c, v in zip(cols, (req, step, layer, seq_len), strict=True):
                    cols[c].append(v)
                lists.append(sel)
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([a.size for a in lists], out=offsets[1:])
    data = SelectionColumns(**{c: np.asarray(v, dtype=np.int64) for c, v in cols.items()},
                            offsets=offsets, values=np.concatenate(lists))
    meta = TraceMeta(model="synthetic", k=cfg.k, score="synthetic", order="position",
                     synthetic=True, source="SYNTHETIC toolkit.synth.selections "
                     + config_json(cfg))

    def locate(e: Exception) -> TraceFormatError:  # a bug here, never user input
        return TraceFormatError("<synthetic>", None, None, str(e))

    tables = build_tables(trace, data, meta, locate)
    tables["selection_requests"] = tables["selection_requests"].set_column(
        3, "source_text", pa.array(["synthetic"] * cfg.requests, pa.string()))
    return tables
