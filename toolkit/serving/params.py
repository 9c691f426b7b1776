"""Efficiency parameters of the serving model: what is fitted, at which level, and its label.

Why a hierarchy: the measured points are sparse (a few rows per hardware x engine), so one
free parameter set per pair would memorise them and say nothing about a held-out accelerator.
Each parameter is ``transform(global + vendor + family + hardware + engine)``, with the non-global
terms pulled toward zero (ridge). A row whose hardware or engine was never fitted (an
accelerator left out in cross-validation; GB300, absent from the DeepSeek data, shares the
NVL72 family terms of GB200) uses the terms that do exist, so predictions on unseen hardware
come from its specs plus the shared efficiencies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.serving.layout import MTP_DRAFT_TOKENS

PARAMS: dict[str, tuple[str, ...]] = {
    "eff_mem": ("global", "vendor", "family", "hardware", "engine"),
    "eff_compute": ("global", "vendor", "family", "hardware", "engine"),
    "overhead_s": ("global", "vendor", "family", "hardware", "engine"),
    "eff_comm": ("global", "vendor", "engine"),
    "eff_prefill": ("global", "vendor", "engine"),
    "mtp_accept": ("global", "engine"),
    "prefill_overhead_s": ("global", "vendor", "engine"),
    "collective_latency_s": ("global", "vendor", "engine"),
    "arrival_scv": ("global", "engine"),
}
"""Parameter -> the levels it has terms at."""

PARAM_HELP: dict[str, str] = {
    "eff_mem": "achieved share of HBM bandwidth in decode (weights, KV, indexer keys)",
    "eff_compute": "achieved share of dense tensor peak in decode GEMMs and attention",
    "overhead_s": "fixed time per decode step (launches, synchronisation, sampling, scheduler)",
    "eff_comm": "achieved share of link bandwidth for all-reduce / MoE dispatch+combine / KV "
                "transfer",
    "eff_prefill": "achieved share of dense tensor peak in prefill",
    "mtp_accept": f"tokens accepted per MTP step (1 + {MTP_DRAFT_TOKENS} drafts at most)",
    "prefill_overhead_s": "fixed time from request arrival to its first prefill chunk "
                          "(HTTP, tokenisation, scheduling, router)",
    "collective_latency_s": "latency of one collective (all-reduce, MoE dispatch or combine) "
                            "per layer; 2x beyond the scale-up domain (assumed)",
    "arrival_scv": "squared coefficient of variation of arrivals at the prefill queue "
                   "(1 = Poisson; a closed loop of equal-length requests arrives in waves)",
}

PRIOR: dict[str, float] = {
    "eff_mem": 0.6,
    "eff_compute": 0.4,
    "overhead_s": 0.004,
    "eff_comm": 0.4,
    "eff_prefill": 0.4,
    "mtp_accept": 1.8,
    "prefill_overhead_s": 0.05,
    "arrival_scv": 1.0,
    "collective_latency_s": 10e-6,
}
"""Starting values (assumed, round numbers) and what an unfitted model uses."""

RIDGE_SIGMA = 0.7
"""Prior scale of each non-global term in transformed space: ~2x either way is plausible."""


_POSITIVE = ("overhead_s", "prefill_overhead_s", "arrival_scv", "collective_latency_s")


def to_z(name: str, value: float) -> float:
    """Inverse of :func:`from_z` for one parameter."""
    if name in _POSITIVE:
        return float(np.log(value))
    if name == "mtp_accept":
        value = (value - 1.0) / MTP_DRAFT_TOKENS
    return float(np.log(value / (1.0 - value)))


def from_z(name: str, z: np.ndarray) -> np.ndarray:
    """Efficiencies live in (0, 1) (logistic), the overhead in (0, inf) (exp)."""
    if name in _POSITIVE:
        return np.exp(z)
    s = 1.0 / (1.0 + np.exp(-z))
    return 1.0 + MTP_DRAFT_TOKENS * s if name == "mtp_accept" else s


class ParamsError(ToolkitError):
    """A fitted-parameter file is malformed."""


@dataclass(frozen=True)
class ServingParams:
    """Terms in transformed space, keyed ``"<param>|<level>|<key>"`` (key "" for global).

    Attributes:
        terms: the values.
        kind: "fitted" (by ``toolkit serving fit``) or "assumed" (the priors).
        fitted_on: description of the data, e.g. the file and row count.
        residuals: per-target summaries of the in-sample log errors (not a validation).
    """

    terms: dict[str, float]
    kind: str = "assumed"
    fitted_on: str = ""
    residuals: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @staticmethod
    def prior() -> ServingParams:
        """The unfitted starting point: every parameter at its assumed global value."""
        terms = {f"{p}|global|": to_z(p, v) for p, v in PRIOR.items()}
        return ServingParams(terms, kind="assumed", source="toolkit.serving.params.PRIOR")

    def row_values(self, levels: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Per-row parameter values for rows labelled by ``levels`` (vendor/hardware/engine)."""
        n = len(next(iter(levels.values())))
        out = {}
        for p, lv in PARAMS.items():
            z = np.full(n, self.terms.get(f"{p}|global|", to_z(p, PRIOR[p])))
            for level in lv[1:]:
                keys = levels[level]
                for k in np.unique(keys):
                    t = self.terms.get(f"{p}|{level}|{k}")
                    if t is not None:
                        z = z + np.where(keys == k, t, 0.0)
            out[p] = from_z(p, z)
        return out

    def table(self) -> list[dict[str, Any]]:
        """One row per term: parameter, level, key, term (transformed) and kind."""
        rows = []
        for name, t in sorted(self.terms.items()):
            p, level, key = name.split("|")
            row = {"parameter": p, "level": level, "key": key, "term": t, "kind": self.kind}
            if level == "global":
                row["value"] = float(from_z(p, np.array(t)))
            rows.append(row)
        return rows

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "fitted_on": self.fitted_on,
                           "source": self.source, "residuals": self.residuals,
                           "parameters": PARAM_HELP, "terms": self.terms}, indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @staticmethod
    def load(path: str | Path) -> ServingParams:
        """Read a file written by :meth:`save`; errors name the file and key."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ParamsError(f"{path}: not a readable parameter file: {e}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("terms"), dict):
            raise ParamsError(f"{path}: needs a 'terms' object")
        for k, v in raw["terms"].items():
            parts = k.split("|")
            if len(parts) != 3 or parts[0] not in PARAMS or parts[1] not in PARAMS[parts[0]]:
                raise ParamsError(f"{path}: term {k!r} is not '<param>|<level>|<key>' with a "
                                  f"known parameter and level")
            if not isinstance(v, int | float):
                raise ParamsError(f"{path}: term {k!r} must be a number")
        return ServingParams({k: float(v) for k, v in raw["terms"].items()},
                             kind=str(raw.get("kind", "fitted")),
                             fitted_on=str(raw.get("fitted_on", "")),
                             residuals=raw.get("residuals", {}), source=str(path))


BUNDLED_FIT = "dsr1_inferencex.json"


def bundled_params() -> ServingParams:
    """The parameters fitted on all bundled InferenceX DeepSeek-R1 points (kind "fitted").

    Falls back to the priors when the file is absent (a fresh checkout before ``serving
    fit`` was ever run), and says so through ``kind``.
    """
    path = Path(str(files("toolkit.serving").joinpath("fitted", BUNDLED_FIT)))
    if not path.is_file():
        return ServingParams.prior()
    return ServingParams.load(path)
