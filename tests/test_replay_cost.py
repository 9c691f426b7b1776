"""A selection replay priced by the serving model: each (request, step) sample is the
scenario API's decode step at its context and misses; throughput adds the model's prefill."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit.cost.from_replay import cost_of_replay
from toolkit.cost.price import usd_per_million_tokens
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.serving.scenario import Deployment, decode, prefill
from toolkit.synth.selections import SyntheticSelectionConfig, generate

MODEL, HW = get_model("glm-5.2"), get_hardware("gb200")
DEP = Deployment("glm-5.2", "gb200")


@pytest.fixture
def replayed(store):
    """SYNTHETIC trace: 6 steps of one request over 3 layers, replayed through LRU."""
    cfg = SyntheticSelectionConfig(prompt_tokens=6_000, steps=6, layers=3, k=512, sinks=16,
                                   recent_window=128, seed=1)
    store.write_many(generate(cfg, "syn"), "syn")
    run = replay_selections(store, SelectionReplayConfig("syn"))
    misses = store.query(
        "SELECT step, layer, misses FROM selection_replay WHERE run_id = $r ORDER BY step, layer",
        {"r": run["run_id"]})
    return store, run["run_id"], misses


def test_each_sample_is_the_scenario_step(replayed):
    """Model layer j takes trace layer floor(3j / 78); the step prices their mean."""
    store, run_id, misses = replayed
    c = cost_of_replay(store, run_id, MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6, miss_scale=1.0)
    assert c.steps.height == 6 and c.layers.height == 78
    for step in range(6):
        row = c.steps.row(step, named=True)
        trace = misses.filter(misses["step"] == step)["misses"].to_list()
        per_layer = tuple(float(trace[(j * 3) // 78]) for j in range(78))
        ref = decode(DEP, batch_per_gpu=4, context_tokens=row["seq_len"],
                     misses_per_layer=per_layer)
        assert row["tpot_s"] == pytest.approx(ref.tpot_s[0], rel=1e-12)
        assert row["t_miss_s"] == pytest.approx(ref.t_miss_s[0], rel=1e-12)
    assert c.steps["t_miss_s"].sum() > 0  # the replay really missed


def test_priced_tpot_at_the_mean_misses(replayed):
    """The replay's mean TPOT equals the scenario step's mean over the samples' contexts at
    the replay's mean misses (synchronous: the miss term is linear once rows are fetched)."""
    store, run_id, misses = replayed
    c = cost_of_replay(store, run_id, MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6, miss_scale=1.0)
    assert (c.steps["misses_per_layer"] > 0).all()
    ctx = c.steps["seq_len"].to_numpy()
    at_mean = decode(DEP, batch_per_gpu=4, context_tokens=ctx,
                     misses_per_layer=float(c.steps["misses_per_layer"].mean()))
    assert c.summary["mean_tpot_s"] == pytest.approx(float(at_mean.tpot_s.mean()), rel=1e-12)


def test_misses_reach_the_model_k_by_the_scaling_fit(replayed):
    """By default each sample's misses are carried from the trace's k (512) to GLM-5.2's
    (2048) at the workload's mean context by the one shared fit (``scale_misses``, as ``cost
    compare --selections`` and ``plan``), clipped at the model's k; the buffer keeps its
    buffer / k ratio; the band is priced and the label says it is an extrapolation. The old
    constant (misses x 1, or x k ratio) is gone from the default."""
    from toolkit.replay.selection_scaling import scale_misses

    store, run_id, misses = replayed
    run = store.query(
        "SELECT misses, accesses, buffer_tokens FROM selection_runs WHERE run_id = $r",
        {"r": run_id}).row(0, named=True)
    seq = store.query("SELECT avg(seq_len) FROM selection_replay WHERE run_id = $r",
                      {"r": run_id}).item()
    ref = scale_misses(run["misses"] / run["accesses"], trace_k=512, model_k=2048,
                       buffer_ratio=run["buffer_tokens"] / 512, context_tokens=seq,
                       target_context_tokens=6_000 + 6 / 2)
    assert ref.row_scale[1] < ref.row_scale[0] < ref.row_scale[2]
    c = cost_of_replay(store, run_id, MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6)
    s = c.summary
    assert s["miss_scale"] == pytest.approx(ref.row_scale[0], rel=1e-12)
    assert s["miss_scale"] != pytest.approx(2048 / 512) and s["miss_scale"] != 1.0
    assert s["device_buffer_tokens"] == run["buffer_tokens"] * 4
    assert s["miss_scaling"] == ref.label
    assert "extrapolation from a 135M dense model's selections" in s["miss_scaling"]
    for step in range(6):
        row = c.steps.row(step, named=True)
        trace = misses.filter(misses["step"] == step)["misses"].to_list()
        per_layer = tuple(min(float(trace[(j * 3) // 78]) * ref.row_scale[0], 2048.0)
                          for j in range(78))
        want = decode(DEP, batch_per_gpu=4, context_tokens=row["seq_len"],
                      misses_per_layer=per_layer,
                      device_buffer_tokens=run["buffer_tokens"] * 4)
        assert row["tpot_s"] == pytest.approx(want.tpot_s[0], rel=1e-12)
    tier = "hyperscaler"
    lo, mid, hi = (s[f"usd_per_million_total_tokens_{tier}{e}"] for e in ("_low", "", "_high"))
    assert lo < mid < hi  # fewer misses, cheaper tokens
    assert s["total_tokens_per_s_per_gpu_low"] < s["total_tokens_per_s_per_gpu"] < s[
        "total_tokens_per_s_per_gpu_high"]


def test_record_replay_cost_stores_the_fit_and_its_band(replayed):
    """``record_replay_cost`` prices through the fit by default and keeps its label and band
    in ``decode_costs``; an explicit constant is stored as one, with no band."""
    from toolkit.cost.records import DecodeCostConfig, record_replay_cost

    store, run_id, _ = replayed
    row = record_replay_cost(store, DecodeCostConfig(run_id, batch_per_gpu=4, isl_tokens=6_000,
                                                     osl_tokens=6))
    c = cost_of_replay(store, run_id, MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6).summary
    assert row["miss_scale"] == c["miss_scale"] and row["miss_scaling"] == c["miss_scaling"]
    assert (row["usd_per_million_total_tokens_low"] < row["usd_per_million_total_tokens"]
            < row["usd_per_million_total_tokens_high"])
    stored = store.query("SELECT miss_scaling, usd_per_million_total_tokens_high FROM "
                         "decode_costs WHERE run_id = $r", {"r": row["run_id"]}).row(0)
    assert stored == (row["miss_scaling"], row["usd_per_million_total_tokens_high"])
    const = record_replay_cost(store, DecodeCostConfig(run_id, batch_per_gpu=4, miss_scale=4.0,
                                                       isl_tokens=6_000, osl_tokens=6))
    assert const["miss_scale"] == 4.0 and "assumption" in const["miss_scaling"]
    assert const["usd_per_million_total_tokens_low"] == const["usd_per_million_total_tokens"]


def test_throughput_and_price_arithmetic(replayed):
    """GPU-seconds per request = OSL x mean TPOT / batch + the model's prefill of ISL on one
    8-GPU instance; $/M at the hyperscaler price."""
    store, run_id, _ = replayed
    s = cost_of_replay(store, run_id, MODEL, HW, batch_per_gpu=4, isl_tokens=6_000,
                       osl_tokens=6).summary
    gpu_s = 6 * s["mean_tpot_s"] / 4 + float(prefill(DEP, new_tokens=6_000).gpu_s[0])
    assert s["total_tokens_per_s_per_gpu"] == pytest.approx(6_006 / gpu_s)
    assert s["usd_per_million_output_tokens_hyperscaler"] == pytest.approx(
        usd_per_million_tokens(1.86, 6 / gpu_s))
    assert s["p50_tpot_s"] <= s["p90_tpot_s"] <= s["p99_tpot_s"]
    assert "fitted" in str(s["times"])


def test_overlap_and_no_offload_bound_the_sync_cost(replayed):
    """Overlap never costs more than synchronous fetches, nor less than no misses at all
    (``miss_scale = 0``: the same step without offload)."""
    store, run_id, _ = replayed
    kw = {"batch_per_gpu": 16, "isl_tokens": 6_000, "osl_tokens": 6, "miss_scale": 4.0}
    sync = cost_of_replay(store, run_id, MODEL, HW, **kw).steps["tpot_s"].to_numpy()
    over = cost_of_replay(store, run_id, MODEL, HW, overlap=True, **kw).steps["tpot_s"]
    none = cost_of_replay(store, run_id, MODEL, HW, **(kw | {"miss_scale": 0.0}))
    assert np.all(none.steps["tpot_s"].to_numpy() <= over.to_numpy())
    assert np.all(over.to_numpy() <= sync)
    assert none.summary["miss_share_of_step"] == 0.0


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
