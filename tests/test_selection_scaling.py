"""The measured selection-scaling fit (toolkit.replay.selection_scaling): exact on a known
power law, the shipped table's provenance, and scale_misses' rules."""

from __future__ import annotations

import math

import polars as pl
import pytest

from toolkit.replay.selection_scaling import DATA, bundled_fit, fit_table, scale_misses


def power_law(noise: float = 0.0) -> pl.DataFrame:
    rows = []
    for i, ctx in enumerate((512, 1024, 2048, 4096)):
        for j, k in enumerate((16, 32, 64, 128)):
            for r, a in ((2, 0.5), (4, 0.3)):
                wobble = noise * (1 if (i + j) % 2 else -1)
                rows.append({"k": k, "context_tokens": ctx, "buffer_ratio": r,
                             "miss_ratio": a * k ** -0.2 * ctx ** 0.1 * math.exp(wobble)})
    return pl.DataFrame(rows)


def test_fit_recovers_a_power_law():
    fits = fit_table(power_law())
    assert set(fits) == {2.0, 4.0}
    f = fits[2.0]
    assert (f.k_slope, f.context_slope) == pytest.approx((-0.2, 0.1), abs=1e-9)
    assert math.exp(f.intercept) == pytest.approx(0.5)
    assert f.band_log == pytest.approx((0.0, 0.0), abs=1e-9)  # exact data: no held-out error
    assert (f.k_range, f.context_range, f.cells) == ((16, 128), (512, 4096), 16)


def test_band_is_held_out_and_brackets():
    f = fit_table(power_law(noise=0.1))[2.0]
    assert f.band_log[0] < 0 < f.band_log[1] and f.cv_median_abs_log > 0


def test_scale_misses_rules():
    fits = fit_table(power_law())
    same = scale_misses(0.1, trace_k=2048, model_k=2048, buffer_ratio=2, context_tokens=30000,
                        target_context_tokens=30500, fits=fits)
    assert same.rows == same.rows_low == same.rows_high == pytest.approx(204.8)
    assert same.label.startswith("measured")
    s = scale_misses(0.1, trace_k=64, model_k=2048, buffer_ratio=2, context_tokens=2176,
                     target_context_tokens=33792, fits=fits)
    factor = (2048 / 64) ** -0.2 * (33792 / 2176) ** 0.1
    assert s.factor == pytest.approx(factor) and s.rows == pytest.approx(0.1 * factor * 2048)
    assert "extrapolation" in s.label and "k 2048 beyond the measured 16-128" in s.label
    assert "context 33,792 beyond" in s.label
    near = scale_misses(0.1, trace_k=64, model_k=2048, buffer_ratio=3.5, context_tokens=2176,
                        fits=fits)  # nearest measured ratio: 4x
    assert near.factor == pytest.approx((2048 / 64) ** -0.2) and "nearest" in near.label
    capped = scale_misses(0.9, trace_k=16, model_k=2048, buffer_ratio=2, context_tokens=512,
                          target_context_tokens=1e9, fits=fits)
    assert capped.rows_high <= 2048  # a miss ratio never exceeds 1


def test_shipped_table_and_fit():
    """The bundled table is the benchmark's output, with its provenance beside it."""
    df = pl.read_csv(DATA)
    assert {"text", "context_tokens", "k", "buffer_ratio", "miss_ratio"} <= set(df.columns)
    assert (DATA.parent / "SOURCE.txt").read_text().startswith("smollm2_relu.csv")
    fits = bundled_fit()
    assert set(fits) == {2.0, 4.0}
    for f in fits.values():
        assert f.band_log[0] <= 0 <= f.band_log[1]


def test_row_scale_carries_trace_misses_to_the_model_k():
    """``row_scale`` multiplies one trace-scale miss count to the model's k: model k / trace
    k x the fit's factor, at the fit and at its band's ends, so per-sample pricing
    (``cost_of_replay``) lands on ``rows`` when nothing saturates; no scaling -> 1."""
    s = scale_misses(0.05, trace_k=64, model_k=2048, buffer_ratio=2.0, context_tokens=1_000,
                     target_context_tokens=2_000)
    assert s.row_scale[0] == pytest.approx(32 * s.factor, rel=1e-12)
    for scale, rows in zip(s.row_scale, (s.rows, s.rows_low, s.rows_high), strict=True):
        assert 0.05 * 64 * scale == pytest.approx(rows, rel=1e-12)
    same = scale_misses(0.05, trace_k=2048, model_k=2048, buffer_ratio=2.0,
                        context_tokens=1_000)
    assert same.row_scale == (1.0, 1.0, 1.0)
