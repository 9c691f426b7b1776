"""Cost at a target interactivity, the way the InferenceX calculator computes it.

InferenceX (``docs/tco-calculator.md``): take each (hardware, engine) series' Pareto front
of throughput/GPU vs interactivity, fit a monotone cubic Hermite spline (Steffen 1990) to
**throughput**, clamp the target into the measured range (flagging it), clamp the result
at >= 0, and re-derive $/M from the interpolated throughput (never spline $/M itself).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import polars as pl

from toolkit.cost.price import usd_per_million_tokens
from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware
from toolkit.runtime.files import file_problem

if TYPE_CHECKING:
    from toolkit.serving.measurements import MeasurementSource

MEASUREMENT_COLUMNS: dict[str, type[pl.DataType]] = {
    "hardware": pl.String,
    "engine": pl.String,
    "concurrency": pl.Int64,
    "tput_per_gpu": pl.Float64,
    "median_interactivity": pl.Float64,
    "p90_ttft_s": pl.Float64,
}
#: Columns that split points into separate fronts where a table has them: a front mixes
#: neither models, weight precisions nor request shapes (ISL/OSL).
SERIES_COLUMNS: dict[str, type[pl.DataType]] = {
    "model": pl.String,
    "precision": pl.String,
    "isl": pl.Int64,
    "osl": pl.Int64,
}


class MeasurementError(ToolkitError):
    """A measurements table is missing a column or holds an unusable value."""


def steffen_slopes(x: npt.ArrayLike, y: npt.ArrayLike) -> np.ndarray:
    """Node derivatives of Steffen's monotone interpolant (A&A 239, 443, 1990, eqs. 11-27).

    Each slope is limited so the cubic on every interval stays within its end values:
    no overshoot, monotone wherever the data are.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    if n < 2:
        return np.zeros(n)
    h = np.diff(x)
    s = np.diff(y) / h
    if n == 2:
        return np.array([s[0], s[0]])
    d = np.empty(n)
    p = (s[:-1] * h[1:] + s[1:] * h[:-1]) / (h[:-1] + h[1:])
    d[1:-1] = (np.sign(s[:-1]) + np.sign(s[1:])) * np.minimum.reduce(
        [np.abs(s[:-1]), np.abs(s[1:]), 0.5 * np.abs(p)]
    )
    d[0] = _end_slope(s[0], s[1], h[0], h[1])
    d[-1] = _end_slope(s[-1], s[-2], h[-1], h[-2])
    return d


def _end_slope(s0: float, s1: float, h0: float, h1: float) -> float:
    p0 = s0 * (1 + h0 / (h0 + h1)) - s1 * h0 / (h0 + h1)
    if p0 * s0 <= 0:
        return 0.0
    if abs(p0) > 2 * abs(s0):
        return 2 * s0
    return p0


def steffen_interpolate(x: npt.ArrayLike, y: npt.ArrayLike, xq: npt.ArrayLike) -> np.ndarray:
    """Evaluate Steffen's interpolant through (x, y) at ``xq`` (clamped into [x0, xn]).

    Raises:
        ValueError: x is not strictly increasing.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    q = np.clip(np.asarray(xq, dtype=np.float64), x[0], x[-1])
    if x.size == 1:
        return np.full(q.shape, y[0])
    if np.any(np.diff(x) <= 0):
        raise ValueError("x must be strictly increasing")
    d = steffen_slopes(x, y)
    i = np.clip(np.searchsorted(x, q, side="right") - 1, 0, x.size - 2)
    h = x[i + 1] - x[i]
    t = (q - x[i]) / h
    h00 = (1 + 2 * t) * (1 - t) ** 2
    h10 = t * (1 - t) ** 2
    h01 = t**2 * (3 - 2 * t)
    h11 = t**2 * (t - 1)
    return h00 * y[i] + h10 * h * d[i] + h01 * y[i + 1] + h11 * h * d[i + 1]


def pareto_front(interactivity: npt.ArrayLike, tput: npt.ArrayLike) -> np.ndarray:
    """Indices of points no other point beats on both axes, by increasing interactivity.

    Both axes are "higher is better"; along the returned front throughput strictly
    decreases as interactivity increases.
    """
    x = np.asarray(interactivity, dtype=np.float64)
    y = np.asarray(tput, dtype=np.float64)
    order = np.lexsort((-y, -x))  # interactivity descending, ties: best throughput first
    keep, best = [], -np.inf
    for j in order:
        if y[j] > best:
            keep.append(j)
            best = y[j]
    return np.array(keep[::-1], dtype=np.int64)


def read_measurements(source: str | Path | MeasurementSource | pl.DataFrame, *,
                      notes: list[str] | None = None) -> pl.DataFrame:
    """Measured points with the columns in ``MEASUREMENT_COLUMNS`` (and those of
    ``SERIES_COLUMNS`` the source has), from any file ``toolkit ingest points`` reads
    (InferenceX CSV/JSON/Parquet as exported, e.g. the bundled ``dsr1_serving_points.csv``;
    sglang.bench_serving JSONL and vllm bench serve JSON with their GPU count and hardware
    given in a :class:`~toolkit.serving.measurements.MeasurementSource`; the renamed layout
    of ``MEASUREMENT_COLUMNS``), a store's ``measured_points`` table (a ``MeasurementSource``
    naming it) or such a frame. Files and tables go through
    :func:`toolkit.serving.measurements.load_measurements`, the loader every command shares.

    InferenceX's ``framework``, ``conc``, ``median_intvty`` and ``p90_ttft`` (seconds)
    become ``engine``, ``concurrency``, ``median_interactivity`` and ``p90_ttft_s``.

    Raises:
        MeasurementError: unreadable file, a missing column or an unusable value (the
            message names the file, row and column).
    """
    from toolkit.errors import TraceFormatError
    from toolkit.ingest.points import read_measured_points
    from toolkit.serving.measurements import as_source, load_measurements

    if isinstance(source, pl.DataFrame):
        try:
            return validate_measurements(read_measured_points(source), "<frame>")
        except TraceFormatError as e:
            raise MeasurementError(str(e)) from None
    src = as_source(source)
    if src.path is not None and (problem := file_problem(src.path)) is not None:
        raise MeasurementError(f"{src.path}: {problem}")
    try:
        points = load_measurements(src, for_model=False, notes=notes)
    except ToolkitError as e:
        raise MeasurementError(str(e)) from None
    return validate_measurements(points, src.label)


def _measurement_layout(df: pl.DataFrame) -> pl.DataFrame:
    """InferenceX / ``measured_points`` columns -> the ``MEASUREMENT_COLUMNS`` names."""
    renames = {new: old for old, new in (("engine", "framework"), ("concurrency", "conc"),
                                         ("median_interactivity", "median_intvty"),
                                         ("p90_ttft_s", "p90_ttft"))
               if old not in df.columns and new in df.columns}
    return df.rename(renames)


def validate_measurements(df: pl.DataFrame, where: str = "<frame>") -> pl.DataFrame:
    """Check columns and cast them to their types; the error names the file and column.

    Takes InferenceX's column names as well (see :func:`read_measurements`)."""
    df = _measurement_layout(df)
    missing = [c for c in MEASUREMENT_COLUMNS if c not in df.columns]
    if missing:
        raise MeasurementError(
            f"{where}: missing column(s) {missing}; need {list(MEASUREMENT_COLUMNS)} "
            "or InferenceX's hardware, framework, conc, tput_per_gpu, median_intvty, p90_ttft"
        )
    df = df.select([pl.col(c).cast(t) for c, t in MEASUREMENT_COLUMNS.items()]
                   + [pl.col(c).cast(t) for c, t in SERIES_COLUMNS.items() if c in df.columns])
    for c in ("tput_per_gpu", "median_interactivity"):
        bad = df.with_row_index("row").filter(pl.col(c).is_null() | (pl.col(c) <= 0))
        if bad.height:
            row = int(bad["row"][0]) + 1
            raise MeasurementError(f"{where}: row {row} column {c!r} must be a positive number")
    for c in ("hardware", "engine"):
        bad = df[c].is_null().arg_true()
        if bad.len():
            raise MeasurementError(f"{where}: row {int(bad[0]) + 1} column {c!r} is empty; "
                                   "every point needs one (ingest bench results with "
                                   "--hardware / --framework)")
    return df


def cost_at_interactivity(
    measurements: pl.DataFrame,
    target_interactivity: float,
    price_tier: str = "hyperscaler",
    max_p90_ttft_s: float | None = None,
    prices_usd_per_gpu_hour: dict[str, float] | None = None,
) -> pl.DataFrame:
    """Interpolated throughput and $/M total tokens per series at a target: one series per
    (hardware, engine) and, where the table has them, model, precision, ISL and OSL (a
    front never mixes request shapes: an 8K/1K point is not a faster 1K/1K point).

    Args:
        measurements: points as returned by :func:`read_measurements`.
        target_interactivity: tok/s/user (= 1000 / TPOT_ms).
        price_tier: hyperscaler | neocloud | rental, from each hardware's spec.
        max_p90_ttft_s: drop points whose p90 TTFT exceeds this before the front.
        prices_usd_per_gpu_hour: per-hardware prices that replace the spec's.

    Returns:
        One row per series: hardware, engine, the ``SERIES_COLUMNS`` the table has,
        n_points, n_front, target_interactivity,
        clamped (target outside the front's range), tput_per_gpu, usd_per_gpu_hour,
        usd_per_million_tokens, price_tier, survey.
    """
    df = validate_measurements(measurements)
    if max_p90_ttft_s is not None:
        df = df.filter(pl.col("p90_ttft_s") <= max_p90_ttft_s)
    rows = []
    series = ["hardware", "engine", *(c for c in SERIES_COLUMNS if c in df.columns)]
    for key, g in df.group_by(series, maintain_order=True):
        hw_name = key[0]
        x = g["median_interactivity"].to_numpy()
        y = g["tput_per_gpu"].to_numpy()
        front = pareto_front(x, y)
        fx, fy = x[front], y[front]
        tput = max(0.0, float(steffen_interpolate(fx, fy, target_interactivity)))
        if prices_usd_per_gpu_hour and hw_name in prices_usd_per_gpu_hour:
            price, survey = prices_usd_per_gpu_hour[hw_name], "user supplied"
        else:
            spec = get_hardware(hw_name)
            price, survey = spec.price_usd_per_gpu_hour(price_tier), spec.price_vintage(price_tier)
        rows.append(
            {
                **dict(zip(series, key, strict=True)),
                "n_points": g.height,
                "n_front": int(front.size),
                "target_interactivity": float(target_interactivity),
                "clamped": not (fx[0] <= target_interactivity <= fx[-1]),
                "tput_per_gpu": tput,
                "usd_per_gpu_hour": price,
                "usd_per_million_tokens": (
                    float(usd_per_million_tokens(price, tput)) if tput > 0 else float("inf")
                ),
                "price_tier": price_tier,
                "survey": survey,
            }
        )
    return pl.DataFrame(rows, infer_schema_length=None)
