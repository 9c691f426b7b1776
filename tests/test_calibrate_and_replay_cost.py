"""Calibration recovers known factors; replay cost follows the decode model's arithmetic."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from toolkit.cost.calibrate import calibrate_decode
from toolkit.cost.from_replay import cost_of_replay
from toolkit.cost.price import usd_per_million_tokens
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.serving.step import DecodeScenario, decode_step
from toolkit.synth.selections import SyntheticSelectionConfig, generate

MODEL, HW = get_model("glm-5.2"), get_hardware("gb200")


def points_from_model(eff, t0, concurrency, ctx=32_768):
    tpot = [decode_step(DecodeScenario(MODEL, HW, max(1, c // 8), ctx,
                                       hbm_efficiency=eff)).tpot_s + t0 for c in concurrency]
    return pl.DataFrame({"hardware": "gb200", "engine": "x", "concurrency": concurrency,
                         "tput_per_gpu": 1.0, "median_interactivity": [1 / t for t in tpot],
                         "p90_ttft_s": 1.0})


class TestCalibrate:
    def test_recovers_factors_it_was_given(self):
        pts = points_from_model(0.62, 0.004, [8, 64, 256, 512])
        cal = calibrate_decode(pts, MODEL, HW, context_tokens=32_768)
        assert cal.identifiable
        assert cal.hbm_efficiency == pytest.approx(0.62)
        assert cal.fixed_latency_s == pytest.approx(0.004, rel=1e-6)
        assert cal.rmse_log_after < 1e-9 < cal.rmse_log_before
        assert np.allclose(cal.points["model_tpot_s_after"], cal.points["measured_tpot_s"])

    def test_single_batch_size_fits_latency_only(self):
        pts = points_from_model(0.5, 0.0, [64])
        cal = calibrate_decode(pts, MODEL, HW, context_tokens=32_768)
        assert not cal.identifiable and cal.hbm_efficiency == 0.8
        assert cal.rmse_log_after == pytest.approx(0.0, abs=1e-12)

    def test_no_points(self):
        with pytest.raises(ValueError, match="no measured points for hardware 'gb200'"):
            calibrate_decode(points_from_model(0.8, 0, [8]).with_columns(hardware=pl.lit("x")),
                             MODEL, HW, context_tokens=1_000)


def test_cost_of_replay_arithmetic(store):
    """SYNTHETIC trace: per-step TPOT = sum over layers of work + miss time (synchronous)."""
    cfg = SyntheticSelectionConfig(prompt_tokens=6_000, steps=6, layers=3, k=512, sinks=16,
                                   recent_window=128, seed=1)
    store.write_many(generate(cfg, "syn"), "syn")
    run = replay_selections(store, SelectionReplayConfig("syn"))
    c = cost_of_replay(store, run["run_id"], MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6)
    assert c.steps.height == 6 and c.layers.height == 78
    first = c.steps.row(0, named=True)
    misses = store.query(
        f"SELECT layer, misses FROM selection_replay WHERE run_id = '{run['run_id']}' "
        "AND step = 0 ORDER BY layer")["misses"].to_list()
    per_layer = tuple(float(misses[(j * 3) // 78]) for j in range(78))
    ref = decode_step(DecodeScenario(MODEL, HW, 4, first["seq_len"], per_layer))
    assert first["tpot_s"] == pytest.approx(ref.tpot_s, rel=1e-9)
    s = c.summary
    gpu_s = 6 * c.steps["tpot_s"].mean() / 4 + 2 * MODEL.active_params * 6_000 / (
        HW.dense_fp8_tflops * 1e12 * 0.5)
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(6_006 / gpu_s)
    assert s["usd_per_million_output_tokens_hyperscaler"] == pytest.approx(
        usd_per_million_tokens(1.86, 6 / gpu_s))
    assert s["p50_tpot_s"] <= s["p90_tpot_s"] <= s["p99_tpot_s"]


def test_hbm_budget_arithmetic():
    """GLM-5.2 on GB200 at 40K context: budget, bytes per request and both batch limits."""
    from toolkit.cost.capacity import hbm_budget

    ctx = 40_960
    b = hbm_budget(MODEL, HW, ctx)
    budget = HW.hbm_usable_bytes * 0.9 - MODEL.weight_bytes("fp8") / 8
    assert b.kv_budget_bytes == pytest.approx(budget)
    assert b.bytes_per_request_full == ctx * (51_168 + 2_772)
    assert b.bytes_per_request_offload == 4_097 * 51_168 + ctx * 2_772
    assert b.max_batch_full == int(budget // (ctx * (51_168 + 2_772)))
    assert b.max_batch_offload == min(b.max_batch_offload_hbm,
                                      int(HW.host_mem_bytes_per_gpu // (ctx * 51_168)))
    assert b.max_batch_offload > b.max_batch_full
    short = hbm_budget(MODEL, HW, 1_000)  # shorter than the buffer: nothing to offload
    assert short.bytes_per_request_offload == short.bytes_per_request_full
