"""How a trace's HiSparse misses are carried to a model's top-k and context: a measured fit.

Why: a selection trace recorded with a small top-k (the bundled SmolLM2 recording has
k = 64, prompts of ~2K tokens) is priced at a DSA model's k (2048) and context (32K+).
Keeping the trace's miss ratio (misses scaled by ``model k / trace k``) assumed locality
does not move with k or context. ``benchmarks/selection_scaling.py`` measured it instead:
real SmolLM2-135M selections (ReLU score) at contexts 512-8K and k 16-512, replayed in
HiSparse mode (LRU) at buffers of 2x and 4x k (``toolkit/data/selection_scaling/``,
provenance in its SOURCE.txt). Per buffer ratio the fit is a power law,
``log(miss ratio) = a + b log(k) + c log(context)``, least squares over every (text,
context, k) cell; its band is the 10th-90th percentile of cross-validated residuals
(each context and each k left out in turn, predicted by the fit on the rest), so it says how
far an unseen k or context has landed, not how well the fit matches what it saw.

:func:`scale_misses` moves a trace's measured miss ratio along the fit:
``ratio(model k, target context) = ratio_trace x fit(model k, target) / fit(trace k,
trace context)``. Every answer that prices a trace at another k (``cost compare
--selections``, ``plan``, the serving what-ifs, notebook 03) goes through it, and its label
says the figure is an extrapolation from a 135M dense model's selections and how far it
reaches beyond the measured range.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

#: The measured table (``benchmarks/selection_scaling.py``).
DATA = Path(str(files("toolkit").joinpath("data", "selection_scaling", "smollm2_relu.csv")))
BAND_QUANTILES = (0.1, 0.9)


@dataclass(frozen=True)
class ScalingFit:
    """``log(miss ratio) = intercept + k_slope log(k) + context_slope log(context)`` at one
    buffer/k ratio, with its cross-validated residual band (log units)."""

    buffer_ratio: float
    intercept: float
    k_slope: float
    context_slope: float
    band_log: tuple[float, float]  # held-out residual quantiles (low, high), log units
    cv_median_abs_log: float  # median |held-out residual|, log units
    cells: int
    k_range: tuple[int, int]
    context_range: tuple[int, int]

    def log_ratio(self, k: float, context: float) -> float:
        return self.intercept + self.k_slope * math.log(k) + self.context_slope * math.log(
            context)


def _lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a = np.column_stack([np.ones(len(y)), *x.T])
    return np.linalg.lstsq(a, y, rcond=None)[0]


def fit_table(table) -> dict[float, ScalingFit]:
    """One :class:`ScalingFit` per buffer ratio of ``table`` (columns ``k``,
    ``context_tokens``, ``buffer_ratio``, ``miss_ratio``; polars or anything with
    ``to_dict(as_series=False)``)."""
    cols = table.to_dict(as_series=False) if hasattr(table, "to_dict") else dict(table)
    k = np.asarray(cols["k"], dtype=float)
    ctx = np.asarray(cols["context_tokens"], dtype=float)
    r = np.asarray(cols["buffer_ratio"], dtype=float)
    y = np.asarray(cols["miss_ratio"], dtype=float)
    out = {}
    for ratio in sorted(set(r.tolist())):
        m = (r == ratio) & (y > 0)
        x = np.column_stack([np.log(k[m]), np.log(ctx[m])])
        ly = np.log(y[m])
        coef = _lstsq(x, ly)
        resid = []
        for values in (ctx[m], k[m]):  # leave one context out, then one k
            for v in np.unique(values):
                held = values == v
                if held.all() or (~held).sum() < 4:
                    continue
                c = _lstsq(x[~held], ly[~held])
                resid.extend(ly[held] - (c[0] + x[held] @ c[1:]))
        res = np.asarray(resid) if resid else np.zeros(1)
        out[ratio] = ScalingFit(
            ratio, float(coef[0]), float(coef[1]), float(coef[2]),
            (float(np.quantile(res, BAND_QUANTILES[0])),
             float(np.quantile(res, BAND_QUANTILES[1]))),
            float(np.median(np.abs(res))), int(m.sum()),
            (int(k[m].min()), int(k[m].max())), (int(ctx[m].min()), int(ctx[m].max())))
    return out


@functools.cache
def bundled_fit() -> dict[float, ScalingFit]:
    """The fit of the shipped table (read once)."""
    import polars as pl

    return fit_table(pl.read_csv(DATA))


@dataclass(frozen=True)
class ScaledMisses:
    """Host rows fetched per (request, decode step, layer) at the model's k, with a band."""

    rows: float
    rows_low: float
    rows_high: float
    label: str
    factor: float = 1.0  # miss-ratio multiplier the fit applied (1 = none)
    #: multipliers that carry one trace-scale miss count (rows fetched at the trace's k) to
    #: the model's k: ``model k / trace k x factor`` at the fit and at its band's two ends.
    #: Per-sample pricing (``toolkit.cost.from_replay.cost_of_replay``) applies them and clips
    #: each sample at the model's k, so its mean matches ``rows`` unless a sample saturates.
    row_scale: tuple[float, float, float] = (1.0, 1.0, 1.0)


def scale_misses(miss_ratio: float, *, trace_k: int, model_k: int, buffer_ratio: float,
                 context_tokens: float, target_context_tokens: float | None = None,
                 fits: dict[float, ScalingFit] | None = None) -> ScaledMisses:
    """Misses per row at ``model_k`` and ``target_context_tokens`` from a trace's
    ``miss_ratio`` (misses / accesses) at ``buffer_ratio`` (device buffer / k), ``trace_k``
    and mean ``context_tokens``.

    A trace at the model's own k and context is used as measured. Otherwise the ratio moves
    along the fit of the nearest measured buffer ratio (2x or 4x k), clipped to [0, 1], and
    the band is the fit's held-out residual band; the label names every extrapolation.
    """
    target = float(target_context_tokens or context_tokens)
    if trace_k == model_k and abs(target - context_tokens) <= 0.05 * context_tokens:
        rows = miss_ratio * model_k
        return ScaledMisses(rows, rows, rows, f"measured at the model's k = {model_k} (no "
                            "scaling)")
    fits = fits if fits is not None else bundled_fit()
    ratio_key = min(fits, key=lambda r: abs(math.log(r / max(buffer_ratio, 1e-9))))
    f = fits[ratio_key]
    log_factor = f.log_ratio(model_k, target) - f.log_ratio(trace_k, max(context_tokens, 2.0))
    factor = math.exp(log_factor)

    def rows_at(log_shift: float) -> float:
        return min(1.0, miss_ratio * math.exp(log_factor + log_shift)) * model_k

    beyond = []
    if not f.k_range[0] <= model_k <= f.k_range[1]:
        beyond.append(f"k {model_k} beyond the measured {f.k_range[0]}-{f.k_range[1]}")
    if not f.context_range[0] <= target <= f.context_range[1]:
        beyond.append(f"context {target:,.0f} beyond the measured "
                      f"{f.context_range[0]:,}-{f.context_range[1]:,}")
    near = "" if abs(ratio_key - buffer_ratio) < 1e-9 else (
        f", fit of the nearest measured buffer ratio {ratio_key:g}x k")
    label = (f"extrapolation from a 135M dense model's selections (SmolLM2 ReLU score, "
             f"benchmarks/selection_scaling.py): the trace's miss ratio {miss_ratio:.4f} at "
             f"buffer/k {buffer_ratio:g} (k {trace_k}, context {context_tokens:,.0f}) moved "
             f"to k {model_k}, context {target:,.0f} by x{factor:.3g} (miss ratio ~ "
             f"k^{f.k_slope:.2f} context^{f.context_slope:.2f}{near}); band = held-out "
             f"residuals 10-90%" + (f"; {'; '.join(beyond)}" if beyond else ""))
    k_ratio = model_k / trace_k
    return ScaledMisses(rows_at(0.0), rows_at(f.band_log[0]), rows_at(f.band_log[1]), label,
                        factor, tuple(k_ratio * math.exp(log_factor + shift)
                                      for shift in (0.0, *f.band_log)))
