"""Efficiency parameters of the serving model: what is fitted, at which level, and its label.

Why a hierarchy: the measured points are sparse (a few rows per hardware x engine), so one
free parameter set per pair would memorise them and say nothing about a held-out accelerator.
Each parameter is ``transform(global + vendor + family + engine [+ precision])``, with the
non-global terms pulled toward zero (ridge). The **precision** level (the checkpoint's weight
precision, fp4 / fp8) holds on HBM and tensor-core efficiency and the fixed step time: FP4
checkpoints run other kernels (block-scaled NVFP4 / MXFP4 grouped GEMMs, their own fused MoE
paths), and without it every accelerator's FP4 rows came out 1-16% slower than measured and
its FP8 rows up to 16% faster, held out or not (B300 0.84x / 1.03x, B200 0.99x / 1.16x,
MI355X 0.96x / 1.04x under 5-fold); being shared across accelerators and engines it carries
to a held-out one (leave-one-hardware-out throughput 16.4% -> 13.8%, TPOT 16.7% -> 14.1%;
chosen on those same splits, so they are mildly optimistic by that choice). There is no
per-accelerator level: siblings of one family (GB200 and GB300, B200 and B300, H100 and H200,
MI300X and MI325X) share every fitted term and differ only by their specs, so a part without
data (GB300 in the DeepSeek data) is predicted from its specs and its family's efficiencies,
never from half of a sibling's own deviation (with a hardware level, GB300 came out 15%
slower than GB200 at the same engine, which its specs cannot explain).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.runtime.files import file_problem

PARAMS: dict[str, tuple[str, ...]] = {
    "eff_mem": ("global", "vendor", "family", "engine", "precision"),
    "eff_compute": ("global", "vendor", "family", "engine", "precision"),
    "overhead_s": ("global", "vendor", "family", "engine", "precision"),
    "overhead_per_token_s": ("global", "vendor", "engine"),
    "eff_comm": ("global", "vendor", "engine"),
    "eff_prefill": ("global", "vendor", "engine"),
    "collective_latency_s": ("global", "vendor", "engine"),
    "scaleout_collective_latency_s": ("global",),
    "request_overhead_s": ("global", "vendor", "engine"),
    "drift_per_100d": ("global",),
}
"""Parameter -> the levels it has terms at. MTP acceptance is not here: it is a recipe input
(:mod:`toolkit.serving.recipes`), so an engine's term can no longer absorb it; nor are the
client's arrival pattern: TTFT comes from replaying InferenceX's client
(:mod:`toolkit.serving.client`) against the step model, plus one fitted fixed latency per
request (``request_overhead_s``, pinned by TTFT where no queue forms)."""

PARAM_HELP: dict[str, str] = {
    "eff_mem": "achieved share of HBM bandwidth in decode (weights, KV, indexer keys)",
    "eff_compute": "achieved share of dense tensor peak in decode GEMMs and attention",
    "overhead_s": "fixed time per decode step (launches, synchronisation, sampling, scheduler)",
    "overhead_per_token_s": "time per token in a GPU's decode batch outside the kernels' "
                            "rooflines (sampling, scheduling, metadata, launch per request)",
    "eff_comm": "achieved share of link bandwidth for all-reduce / MoE dispatch+combine / KV "
                "transfer",
    "eff_prefill": "achieved share of dense tensor peak in prefill",
    "collective_latency_s": "latency of one collective (all-reduce, MoE dispatch or combine) "
                            "per layer inside one scale-up domain (NVLink / xGMI)",
    "scaleout_collective_latency_s": "latency of one collective of a decode instance that "
                                     "spans more than one scale-up domain (its traffic also "
                                     "crosses the NICs: RDMA round trips); one global term",
    "request_overhead_s": "fixed latency of a request outside the GPUs' work: HTTP, "
                          "tokenisation, scheduling, router, first-token return; fitted on "
                          "TTFT at <= 64 users only, where it is mostly prefill, not queueing",
    "drift_per_100d": "engine software drift: log step-time growth per 100 days of engine age "
                      "before the reference date (older images are slower)",
}

RANGES: dict[str, tuple[float, float]] = {
    "eff_mem": (0.35, 0.95),
    "eff_compute": (0.10, 0.85),
    "eff_comm": (0.50, 0.95),
    "eff_prefill": (0.05, 0.85),
    "overhead_s": (0.5e-3, 40e-3),
    "overhead_per_token_s": (1e-7, 1e-4),
    "collective_latency_s": (2e-6, 100e-6),
    "scaleout_collective_latency_s": (5e-6, 2e-3),
    "request_overhead_s": (1e-3, 2.0),
    "drift_per_100d": (-0.10, 0.40),
}
"""Explicit physical range of every parameter (the fit cannot leave it). Efficiencies stay well
inside (0, 1]: HBM 0.35-0.95 (aiconfigurator's empirical factor is 0.8; STREAM-like kernels
reach ~0.9), tensor cores 0.10-0.85 in decode and 0.05-0.85 in prefill (a 37B-active MoE's
prefill of 1-8K-token prompts spends much of its time in small per-expert GEMMs, routing and
launches: the bundled AMD SGLang rows fit ~12% of dense peak, which a 0.10 floor flagged as
"at a bound"), links 0.50-0.95, so a collective never takes more than 2x
its bytes / link bandwidth plus its latency. Times span 2-3 decades around their priors.
``toolkit serving fit`` fails when a fitted value ends within :data:`BOUND_MARGIN` of an end."""

LOG_SCALED = ("overhead_s", "overhead_per_token_s", "collective_latency_s",
              "scaleout_collective_latency_s", "request_overhead_s")
"""Parameters interpolated on a log scale inside their range (times and variabilities)."""

BOUND_MARGIN = 0.03
"""A value whose position in its range (0 = low end, 1 = high end) is within this of an end
counts as "at a bound"."""

PRIOR: dict[str, float] = {
    "eff_mem": 0.7,
    "eff_compute": 0.4,
    "overhead_s": 0.004,
    "overhead_per_token_s": 5e-6,
    "eff_comm": 0.7,
    "eff_prefill": 0.4,
    "collective_latency_s": 10e-6,
    "scaleout_collective_latency_s": 50e-6,
    "request_overhead_s": 0.05,
    "drift_per_100d": 0.0,
}
"""Starting values (assumed, round numbers inside the ranges) and what an unfitted model uses."""

FORMAT = 2
"""Parameter-file format: 2 = bounded parameters, MTP acceptance and engine age as inputs."""

REFERENCE_DATE = "2026-06-11"
"""Engine age 0: the newest bundled InferenceX row. Predictions without an engine version
describe engines as they ran on this date."""

RIDGE_SIGMA = 0.7
"""Prior scale of each non-global term in transformed space: ~2x either way is plausible."""


def position(name: str, value: np.ndarray) -> np.ndarray:
    """Where ``value`` sits in its range: 0 at the low end, 1 at the high end."""
    lo, hi = RANGES[name]
    v = np.asarray(value, dtype=np.float64)
    if name in LOG_SCALED:
        return (np.log(v) - np.log(lo)) / (np.log(hi) - np.log(lo))
    return (v - lo) / (hi - lo)


def to_z(name: str, value: float) -> float:
    """Inverse of :func:`from_z` for one parameter."""
    s = float(np.clip(position(name, np.array(value)), 1e-9, 1 - 1e-9))
    return float(np.log(s / (1.0 - s)))


def from_z(name: str, z: np.ndarray) -> np.ndarray:
    """A scaled logistic: every parameter lives strictly inside :data:`RANGES`."""
    lo, hi = RANGES[name]
    s = 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))
    if name in LOG_SCALED:
        return np.clip(np.exp(np.log(lo) + s * (np.log(hi) - np.log(lo))), lo, hi)
    return np.clip(lo + s * (hi - lo), lo, hi)


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
        pairs: the ``hardware/engine`` pairs the fit saw (a prediction for any other pair
            rests on shared terms only: its ``basis`` says so).
        bands: cross-validated log-error quantiles per ``hardware/engine`` group, hardware
            and ``all`` (:mod:`toolkit.serving.bands`), from which predictions get low/high.
        reference_date: engine age is counted back from this date (the newest fitted row).
    """

    terms: dict[str, float]
    kind: str = "assumed"
    fitted_on: str = ""
    residuals: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    pairs: tuple[str, ...] = ()
    bands: dict[str, Any] = field(default_factory=dict)
    reference_date: str = REFERENCE_DATE

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

    def at_bounds(self, levels: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """Every parameter whose value for some row group ends within :data:`BOUND_MARGIN`
        of its range: a fit that needs such a value is compensating for something the model
        lacks, so it must not pass silently."""
        vals = self.row_values(levels)
        groups = np.array([f"{h}/{e}" for h, e in zip(levels["hardware"], levels["engine"],
                                                       strict=True)])
        out = []
        for p, v in vals.items():
            pos = position(p, v)
            bad = (pos < BOUND_MARGIN) | (pos > 1 - BOUND_MARGIN)
            for g in sorted(set(groups[bad].tolist())):
                i = int(np.flatnonzero((groups == g) & bad)[0])
                out.append({"parameter": p, "group": g, "value": float(v[i]),
                            "range": RANGES[p], "end": "low" if pos[i] < 0.5 else "high"})
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
        return json.dumps({"format": FORMAT, "kind": self.kind, "fitted_on": self.fitted_on,
                           "source": self.source, "reference_date": self.reference_date,
                           "residuals": self.residuals, "parameters": PARAM_HELP,
                           "ranges": RANGES, "pairs": list(self.pairs), "bands": self.bands,
                           "terms": self.terms}, indent=1)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @staticmethod
    def load(path: str | Path) -> ServingParams:
        """Read a file written by :meth:`save`; errors name the file and key."""
        if (problem := file_problem(path)) is not None:
            raise ParamsError(f"{path}: {problem}")
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ParamsError(f"{path}: not a readable parameter file: {e}") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("terms"), dict):
            raise ParamsError(f"{path}: needs a 'terms' object")
        if raw.get("format") != FORMAT:
            raise ParamsError(f"{path}: parameter file format {raw.get('format', 1)}; this "
                              f"model needs format {FORMAT} (bounded parameters, MTP as an "
                              "input): re-run `toolkit serving fit`")
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
                             residuals=raw.get("residuals", {}), source=str(path),
                             pairs=tuple(raw.get("pairs", ())), bands=raw.get("bands", {}),
                             reference_date=str(raw.get("reference_date", REFERENCE_DATE)))


BUNDLED_FIT = "dsr1_inferencex.json"


def bundled_cv_dir() -> Path:
    """The shipped cross-validation outputs (``toolkit serving validate --out-dir``): held-out
    predictions and error tables per scheme, read by the demo, queries and cost caveats."""
    return Path(str(files("toolkit.serving").joinpath("fitted", "cv")))


def bundled_params() -> ServingParams:
    """The parameters fitted on all bundled InferenceX DeepSeek-R1 points (kind "fitted").

    Falls back to the priors when the file is absent (a fresh checkout before ``serving
    fit`` was ever run), and says so through ``kind``.
    """
    path = Path(str(files("toolkit.serving").joinpath("fitted", BUNDLED_FIT)))
    if not path.is_file():
        return ServingParams.prior()
    return ServingParams.load(path)
