"""Serving model v2 and `cost compare`: bounded parameters, recipes as inputs, DSA prefill,
error bands, measured-first answers, reachability and engines side by side."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.cost.compare import EDGE_FRACTION, compare, engines_for, measured_points
from toolkit.cost.config import DEFAULT_MAX_P90_TTFT_S, CompareConfig
from toolkit.cost.interpolate import pareto_front, steffen_interpolate
from toolkit.serving import bundled_params, bundled_points_path, predict, read_points, validate
from toolkit.serving.fit import bound_report, fit
from toolkit.serving.layout import design
from toolkit.serving.model import (
    client,
    decode_terms,
    max_batch,
    mean_rows_attended,
    prefill_terms,
)
from toolkit.serving.params import PARAMS, RANGES, ServingParams, bundled_cv_dir, from_z
from toolkit.serving.predict import levels
from toolkit.serving.recipes import (
    MTP_ACCEPT,
    RecipeError,
    admission_gates,
    instance_gpus,
    length_ratio,
    parse_version,
    prefill_batching,
    version_date,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def points() -> pl.DataFrame:
    return read_points(bundled_points_path())


def _row(**kw) -> dict:
    row = dict(hardware="b200", framework="sglang", model="dsr1", precision="fp8",
               spec_method="none", disagg=False, is_multinode=False, isl=8192, osl=1024,
               conc=64, num_prefill_gpu=8, num_decode_gpu=8, prefill_tp=8, prefill_ep=1,
               prefill_dp_attention=False, decode_tp=8, decode_ep=1, decode_dp_attention=False)
    row.update(kw)
    return row


def _frame(*rows: dict) -> pl.DataFrame:
    return validate(pl.DataFrame(list(rows), infer_schema_length=None))


class TestBounds:
    @settings(max_examples=200, deadline=None)
    @given(name=st.sampled_from(sorted(PARAMS)), z=st.floats(-60, 60))
    def test_every_value_inside_its_range(self, name, z):
        """Whatever the fit does to a term, the value stays inside the parameter's range."""
        v = float(from_z(name, np.array(z)))
        lo, hi = RANGES[name]
        assert lo <= v <= hi

    def test_efficiencies_well_inside_unit_interval(self):
        for name in ("eff_mem", "eff_compute", "eff_comm", "eff_prefill"):
            lo, hi = RANGES[name]
            assert 0.05 <= lo < hi <= 0.95, name

    def test_bundled_fit_ends_at_no_bound(self, points):
        """The shipped parameters are interior for every (hardware, engine) of their data."""
        assert bound_report(bundled_params(), points) == []

    def test_bound_report_names_a_parameter_pinned_by_impossible_data(self, points):
        """SYNTHETIC targets 100x faster than any physical step: HBM efficiency is pushed to
        the top of its range and the report names it."""
        sub = points.filter(pl.col("hardware") == "b200").head(20)
        base = predict(sub, ServingParams.prior(), bands=False)
        fast = sub.with_columns((base["pred_median_tpot"] / 100).alias("median_tpot"),
                                (base["pred_tput_per_gpu"] * 100).alias("tput_per_gpu"),
                                base["pred_median_ttft"].alias("median_ttft"))
        got = bound_report(fit(fast, max_nfev=40), fast)
        pinned = {(b["parameter"], b["end"]) for b in got}
        assert ("eff_mem", "high") in pinned or ("overhead_s", "low") in pinned, pinned

    def test_fit_cli_exits_1_naming_the_bound(self, points, tmp_path):
        sub = points.filter(pl.col("hardware") == "b200").head(20)
        base = predict(sub, ServingParams.prior(), bands=False)
        src = tmp_path / "fast.csv"
        sub.with_columns((base["pred_median_tpot"] / 100).alias("median_tpot"),
                         (base["pred_tput_per_gpu"] * 100).alias("tput_per_gpu")).write_csv(src)
        res = runner.invoke(app, ["serving", "fit", "--points", str(src), "--no-bands",
                                  "--max-nfev", "40", "--out", str(tmp_path / "p.json")])
        assert res.exit_code == 1, res.output
        assert "ended at a bound" in res.output and ("(high end" in res.output
                                                      or "(low end" in res.output)

    def test_collectives_within_2x_of_bytes_over_link(self, points):
        """At the fitted values every step's communication time is within 2x of its bytes /
        link bandwidth plus one latency per collective (the latency at its fitted value)."""
        d = design(points, reference_date=bundled_params().reference_date)
        th = bundled_params().row_values(levels(d))
        for batch in (1.0, 16.0, 256.0):
            t = decode_terms(d, th, np.full(d.n, batch))
            lat = np.where(d.dec_beyond_domain, th["scaleout_collective_latency_s"],
                           th["collective_latency_s"])
            np.testing.assert_array_equal(t["collective_latency_s"], lat)  # --breakdown's term
            ideal = t["comm_bytes"] / t["link_bytes_per_s"] + t["n_collectives"] * lat
            ok = ideal > 0
            ratio = t["t_comm_s"][ok] / ideal[ok]
            assert ratio.max() <= 2.0 + 1e-9 and ratio.min() >= 1.0 - 1e-9

    def test_breakdown_shows_peaks_and_fractions(self, points):
        p = predict(points.head(30), breakdown=True)
        for c in ("term_peak_hbm_bytes_per_s", "term_eff_mem", "term_peak_flops_per_s",
                  "term_link_bytes_per_s", "term_collective_latency_s",
                  "term_achieved_hbm_fraction",
                  "term_achieved_compute_fraction", "term_achieved_link_fraction"):
            assert c in p.columns, c
        assert (p["term_achieved_hbm_fraction"] <= p["term_eff_mem"] + 1e-9).all()
        assert (p["term_achieved_link_fraction"] <= 1.0).all()


class TestRecipes:
    def test_admission_gates_follow_inferencex_scripts(self):
        """SGLang on B200/B300 polls every 30 decode iterations at >= 16 users and every 10
        below (10 on a TP4 FP8 instance, off with DP attention); H200 and AMD SGLang, every
        disaggregated row and TensorRT-LLM without DP attention have no gate; TensorRT-LLM
        with DP attention balances its ranks for up to 60 iterations."""
        rows = [_row(conc=16), _row(conc=8), _row(conc=64, decode_dp_attention=True),
                _row(conc=64, decode_tp=4, prefill_tp=4), _row(conc=64, precision="fp4"),
                _row(hardware="h200"), _row(hardware="mi355x"),
                _row(framework="dynamo-sglang", disagg=True),
                _row(framework="trt"), _row(framework="trt", decode_dp_attention=True)]
        iters, kind, ranks = admission_gates(_frame(*rows))
        assert iters.tolist() == [30, 10, 1, 10, 30, 1, 1, 1, 1, 60]
        assert kind.tolist() == [0] * 9 + [1]
        assert ranks.tolist() == [1] * 9 + [8]

    def test_admission_gate_columns_override_and_refuse_below_one(self):
        df = _frame(_row(scheduler_recv_interval=5), _row(scheduler_recv_interval=None))
        assert admission_gates(df)[0].tolist() == [5, 30]
        df = _frame(_row(framework="trt", decode_dp_attention=True, adp_balance_timeout_iters=1))
        assert admission_gates(df)[0].tolist() == [1]
        with pytest.raises(RecipeError, match="row 2: scheduler_recv_interval 0 must be >= 1"):
            admission_gates(_frame(_row(), _row(scheduler_recv_interval=0)))

    def test_prefill_batches_follow_inferencex_trt_recipes(self):
        """A disaggregated Dynamo-TRT row takes its recipe's ctx worker batch (GB200 FP8:
        16,384 tokens / 16 prompts at 1K/1K, 16,384 / 2 at 8K/1K; B200 FP8 8K/1K: 8,320 / 1);
        every other engine, and a shape without a recipe, keeps one 8,192-token chunk of as
        many prompts as fit; the optional columns override, and refuse values below 1."""
        trt = {"framework": "dynamo-trt", "disagg": True}
        rows = [_row(hardware="gb200", isl=1024, **trt), _row(hardware="gb200", **trt),
                _row(hardware="b200", **trt), _row(hardware="gb200", isl=1024, osl=8192, **trt),
                _row(hardware="gb200", framework="dynamo-sglang", disagg=True), _row()]
        tokens, prompts = prefill_batching(_frame(*rows))
        assert tokens.tolist() == [16384, 16384, 8320, 8192, 8192, 8192]
        assert prompts.tolist() == [16, 2, 1] + [1 << 30] * 3
        df = _frame(_row(hardware="gb200", prefill_max_tokens=4096, prefill_max_prompts=3,
                         **trt))
        assert [a.tolist() for a in prefill_batching(df)] == [[4096], [3]]
        with pytest.raises(RecipeError, match="row 1: prefill_max_prompts 0 must be >= 1"):
            prefill_batching(_frame(_row(prefill_max_prompts=0)))

    def test_instance_widths_follow_inferencex_configs(self, points):
        """The bundled disaggregated rows that report ``tp = 1`` take the width their config
        states (GB200 Dynamo-SGLang FP4 1K/1K at 2,048 users: one DEP48 decode worker over 12
        trays; at 4 users two DEP4 workers; FP8 8K/1K at 512 users: 5 DEP8 prefill workers and
        one DEP32 decode worker; MI355X MoRI-SGLang: 8-GPU workers); no other row is in the
        table, and the early GB200 rows without image keep their halved pools."""
        disagg = points["disagg"].to_numpy()
        tp1 = disagg & ((points["decode_tp"] == 1) | (points["prefill_tp"] == 1)).to_numpy()
        pools = points["num_prefill_gpu"].to_numpy(), points["num_decode_gpu"].to_numpy()
        pre, dec = instance_gpus(points, *pools)
        assert np.array_equal(np.isfinite(dec), tp1) and np.array_equal(np.isfinite(pre), tp1)
        assert tp1.sum() == 15
        d = design(points)

        def at(hw, prec, isl, conc):
            rows = np.flatnonzero(tp1 & (points["hardware"] == hw).to_numpy()
                                  & (points["precision"] == prec).to_numpy()
                                  & (points["isl"] == isl).to_numpy()
                                  & (points["conc"] == conc).to_numpy())
            assert len(rows) == 1
            i = int(rows[0])
            return d.g_pre[i], d.n_pre[i], d.g_dec[i], d.n_dec[i]

        assert at("gb200", "fp4", 1024, 2048) == (4, 4, 48, 1)
        assert at("gb200", "fp4", 1024, 4) == (4, 1, 4, 2)
        assert at("gb200", "fp8", 8192, 512) == (8, 5, 32, 1)
        assert at("gb200", "fp8", 1024, 16) == (4, 1, 4, 4)
        assert at("mi355x", "fp8", 1024, 1024) == (8, 1, 8, 2)
        assert at("mi355x", "fp4", 1024, 256) == (8, 1, 8, 2)
        early = np.flatnonzero((points["hardware"] == "gb200").to_numpy() & disagg
                               & points["image"].is_null().to_numpy())
        assert len(early) == 8 and not np.isfinite(dec[early]).any()
        assert (d.total_gpus[early] == points["num_decode_gpu"].to_numpy()[early]).all()

    def test_instance_width_columns_override_and_refuse_bad_values(self):
        """``prefill_instance_gpus`` / ``decode_instance_gpus`` set a disaggregated row's
        instances (over the table and the widening rule, which stays for other rows); a value
        outside 1 .. its pool, fractional, unreadable, too few GPUs for the weights, or on an
        aggregated row is refused naming the row and field."""
        dis = dict(hardware="gb200", framework="dynamo-sglang", disagg=True, precision="fp4",
                   num_prefill_gpu=8, num_decode_gpu=32, prefill_tp=1, prefill_ep=1,
                   decode_tp=1, decode_ep=1)
        d = design(_frame(_row(**dis, prefill_instance_gpus=8, decode_instance_gpus=16),
                          _row(**dis)))
        assert d.g_pre.tolist() == [8, 4] and d.n_pre.tolist() == [1, 2]
        assert d.g_dec.tolist() == [16, 4] and d.n_dec.tolist() == [2, 8]
        table_row = dict(dis, isl=1024, osl=1024, num_prefill_gpu=16, num_decode_gpu=48)
        d = design(_frame(_row(**table_row), _row(**table_row, decode_instance_gpus=12)))
        assert d.g_dec.tolist() == [48, 12] and d.n_dec.tolist() == [1, 4]
        other = _frame(_row(**table_row, model="glm-5"))  # the table is DeepSeek-R1's configs
        assert not np.isfinite(instance_gpus(other, np.array([16]), np.array([48]))[1]).any()
        for kw, msg in (({"decode_instance_gpus": 0}, "row 2: decode_instance_gpus 0 must be "
                         "a whole number of GPUs in 1 .. 32"),
                        ({"decode_instance_gpus": 64}, "row 2: decode_instance_gpus 64 must"),
                        ({"prefill_instance_gpus": 2.5}, "row 2: prefill_instance_gpus 2.5 "
                         "must be a whole number of GPUs in 1 .. 8"),
                        ({"decode_instance_gpus": 1}, "row 2: decode_instance_gpus 1: 1 GPUs "
                         "cannot hold")):
            with pytest.raises(RecipeError, match=msg):
                design(_frame(_row(**dis), _row(**dis, **kw)))
        with pytest.raises(RecipeError, match="row 1: decode_instance_gpus applies to "
                                              "disaggregated rows only"):
            design(_frame(_row(decode_instance_gpus=8), _row(**dis)))
        rows = validate(pl.DataFrame([_row(**dis), _row(**dis)]).with_columns(
            decode_instance_gpus=pl.Series(["8", "eight"])))
        with pytest.raises(RecipeError, match="row 2: decode_instance_gpus 'eight' is not a "
                                              "number"):
            design(rows)

    def test_length_spread_is_an_input(self):
        """``random_range_ratio`` (the client's --random-range-ratio) sets the lengths the
        replayed client sends: at 1 every prompt is exactly ``isl`` (input tokens = prompts x
        isl, exact), by default 0.8 (InferenceX's configs: fewer); outside (0, 1] refused."""
        rows = _frame(_row(conc=4, random_range_ratio=1.0), _row(conc=4))
        assert length_ratio(rows).tolist() == [1.0, 0.8]
        d = design(rows)
        res = client(d, bundled_params().row_values(levels(d)), max_batch(d))
        dur = res["benchmark_duration_s"]
        tokens = res["tput_per_gpu"] * dur * d.total_gpus  # input + output tokens
        n = 4 * 10  # conc x InferenceX's 10 prompts per user
        assert tokens[0] == pytest.approx(n * (8192 + 1024), rel=1e-9)
        assert tokens[1] < 0.95 * tokens[0]
        with pytest.raises(RecipeError, match="row 2: random_range_ratio 1.5 must be in"):
            length_ratio(_frame(_row(), _row(random_range_ratio=1.5)))

    def test_versions_parsed_from_images(self):
        assert parse_version("lmsysorg/sglang:v0.5.12-rocm700-mi35x") == "0.5.12"
        assert parse_version("nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2") == \
            "1.1.0rc2.post2"
        assert parse_version("lmsysorg/sglang:v0.5.8.post1-cu130-amd64") == "0.5.8.post1"
        assert parse_version(None) is None and parse_version("rocm/atom:latest") is None

    def test_version_date_from_bundled_rows(self, points):
        rows = points.filter(pl.col("framework") == "sglang").select("image", "date")
        img, date = next((i, d) for i, d in rows.iter_rows() if parse_version(i))
        v = parse_version(img)
        want = min(d for i, d in rows.iter_rows() if parse_version(i) == v)
        assert version_date("sglang", v) == want
        assert version_date("sglang", "2026-01-31") == "2026-01-31"
        with pytest.raises(RecipeError, match="known"):
            version_date("sglang", "9.9.9")

    def test_mtp_acceptance_is_an_input(self):
        """Accepted tokens divide the step: TPOT scales as 1 / accept at a fixed batch."""
        dis = dict(framework="dynamo-sglang", disagg=True, is_multinode=True)  # no prefill share
        d1 = design(_frame(_row(spec_method="mtp", mtp_accept=1.5, **dis)))
        d2 = design(_frame(_row(spec_method="mtp", mtp_accept=1.8, **dis)))
        th = bundled_params().row_values(levels(d1))
        a = decode_terms(d1, th, np.array([8.0]))
        b = decode_terms(d2, th, np.array([8.0]))
        assert a["t_step_s"][0] == pytest.approx(b["t_step_s"][0])
        assert a["tpot_s"][0] / b["tpot_s"][0] == pytest.approx(1.8 / 1.5)
        assert design(_frame(_row(spec_method="mtp"))).mtp_accept[0] == MTP_ACCEPT

    def test_bad_recipe_values_named(self):
        with pytest.raises(RecipeError, match="row 1: mtp_accept 3"):
            design(_frame(_row(spec_method="mtp", mtp_accept=3.0)))
        with pytest.raises(RecipeError, match="kv_dtype 'int3'"):
            design(_frame(_row(kv_dtype="int3")))

    def test_older_engine_is_slower(self):
        """Engine age multiplies the step by the fitted drift (non-negative in the fit)."""
        p = bundled_params()
        new = predict(_frame(_row(engine_date=p.reference_date)), p)
        old = predict(_frame(_row(engine_date="2025-11-01")), p)
        drift = float(from_z("drift_per_100d", np.array(p.terms["drift_per_100d|global|"])))
        assert drift >= 0
        assert old["pred_median_tpot"][0] >= new["pred_median_tpot"][0]

    def test_kv_dtype_changes_kv_bytes(self):
        d8 = design(_frame(_row(kv_dtype="fp8")))
        d16 = design(_frame(_row(kv_dtype="bf16")))
        assert d16.kv_row_bytes[0] > d8.kv_row_bytes[0]


class TestDsaPrefill:
    def test_mean_rows_attended_exact(self):
        """Hand-computed means: dense = mid-point; sparse = k beyond the first k tokens."""
        assert mean_rows_attended(np.array(0.0), np.array(100.0), np.array(0.0)) == 50.0
        assert mean_rows_attended(np.array(0.0), np.array(100.0), np.array(200.0)) == 50.0
        assert mean_rows_attended(np.array(50.0), np.array(100.0), np.array(10.0)) == 10.0
        # k = 20 over 0..100: (20^2 / 2 + 20 * 80) / 100 = 18
        assert float(mean_rows_attended(np.array(0.0), np.array(100.0),
                                        np.array(20.0))) == pytest.approx(18.0)

    @settings(max_examples=100, deadline=None)
    @given(c=st.floats(0, 1e5), n=st.floats(1, 1e5), k=st.floats(1, 1e5))
    def test_sparse_never_exceeds_k_or_dense(self, c, n, k):
        sparse = float(mean_rows_attended(np.array(c), np.array(c + n), np.array(k)))
        dense = float(mean_rows_attended(np.array(c), np.array(c + n), np.array(0.0)))
        assert sparse <= k * (1 + 1e-9) and sparse <= dense * (1 + 1e-9)

    def test_dsa_prefill_cheaper_than_dense_at_long_context(self):
        """GLM-5 (DSA, top-2048) prefill of a 64K prompt: attention FLOPs at most top-k rows
        per query, plus the indexer over the whole prefix."""
        f = _frame(_row(model="glm-5", isl=65536, osl=512))
        d = design(f)
        th = bundled_params().row_values(levels(d))
        sparse = prefill_terms(d, th)
        dense_d = d.__class__(**{**d.__dict__, "sparse_topk": np.zeros(1)})
        dense = prefill_terms(dense_d, th)
        assert sparse["prefill_flops"][0] < 0.5 * dense["prefill_flops"][0]
        no_idx = d.__class__(**{**d.__dict__, "idx_flops_per_ctx": np.zeros(1)})
        assert prefill_terms(no_idx, th)["prefill_flops"][0] < sparse["prefill_flops"][0]


    def test_dsa_prefill_attention_is_absorbed(self):
        """DSA prefill attends in absorbed (MQA) form, 576-dim keys and 512-dim values per
        head, as the sparse MLA kernels run it: by hand from GLM-5's geometry (indexer off)."""
        from toolkit.models import get_model

        d = design(_frame(_row(model="glm-5", isl=4096, osl=512)))
        no_idx = d.__class__(**{**d.__dict__, "idx_flops_per_ctx": np.zeros(1)})
        got = prefill_terms(no_idx, bundled_params().row_values(levels(d)))["prefill_flops"][0]
        m = get_model("glm-5")
        rows = float(mean_rows_attended(np.array(0.0), np.array(4096.0), np.array(2048.0)))
        per_row = 2.0 * m.num_query_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        want = 2.0 * m.active_params * 4096 + 4096 * m.num_layers * rows * per_row
        assert got == pytest.approx(want, rel=1e-12)

    def test_indexer_is_replicated_on_tensor_parallel_ranks(self):
        """The engines replicate the lightning indexer on every TP rank (``indexer_split``):
        its decode FLOPs per GPU are 8x those of the same 8-GPU instance with DP attention,
        where each rank scores only its own requests' keys; MLA attention splits either way.
        Prefill under TP is slower for the same reason; a dense model (no indexer) is not."""
        def per_gpu(model, dp, key, fn):
            d = design(_frame(_row(model=model, isl=32768, osl=512, decode_dp_attention=dp,
                                   prefill_dp_attention=dp)))
            th = bundled_params().row_values(levels(d))
            no_idx = d.__class__(**{**d.__dict__, "idx_flops_per_ctx": np.zeros(1)})
            return fn(d, th)[key][0], fn(no_idx, th)[key][0]

        def dec(d, th):
            return decode_terms(d, th, np.full(1, 16.0))

        (tp, tp_mla), (dp, dp_mla) = (per_gpu("glm-5", f, "attention_flops", dec)
                                      for f in (False, True))
        assert tp_mla == pytest.approx(dp_mla, rel=1e-12)
        assert tp - tp_mla == pytest.approx(8.0 * (dp - dp_mla), rel=1e-12)
        pre = "t_prefill_flops_s"  # the FLOPs' time, without the forward's collectives

        def pre_fn(d, th):
            t = prefill_terms(d, th)
            return {pre: t["t_prefill_compute_s"] - t["t_prefill_comm_s"]}

        assert per_gpu("glm-5", False, pre, pre_fn)[0] > per_gpu("glm-5", True, pre, pre_fn)[0]
        assert per_gpu("dsr1", False, pre, pre_fn)[0] == pytest.approx(
            per_gpu("dsr1", True, pre, pre_fn)[0], rel=1e-12)
        # TP attention adds one all-reduce per layer to the prefill forward
        def comm(dp):
            return per_gpu("dsr1", dp, "t_prefill_comm_s", prefill_terms)[0]

        assert comm(False) > comm(True) > 0


class TestBands:
    def test_bands_bracket_predictions(self, points):
        p = predict(points.head(40))
        for c in ("pred_tput_per_gpu", "pred_median_tpot", "pred_median_ttft",
                  "pred_median_intvty"):
            assert (p[f"{c}_low"] <= p[c] * (1 + 1e-12)).all(), c
            assert (p[f"{c}_high"] >= p[c] * (1 - 1e-12)).all(), c
        assert set(p["basis"]) == {"fitted-pair"}

    def test_unseen_pair_is_shared_terms_with_its_pools_band(self):
        """An unseen pair's band comes from the shared-terms pool (leave-one-hardware-out and
        the time split's unseen pairs), a seen pair's from the fitted-pair pool."""
        import numpy as np

        from toolkit.serving.calibration import REGIMES, band_logs, bundled_calibration, regime

        p = predict(_frame(_row(hardware="gb300", framework="sglang", precision="fp4"),
                           _row(hardware="b200", framework="sglang")))
        assert p["basis"].to_list() == ["shared-terms", "fitted-pair"]
        width = (p["pred_tput_per_gpu_high"] / p["pred_tput_per_gpu_low"]).to_numpy()
        reg = regime(p["conc"].to_numpy(), p["disagg"].to_numpy(), REGIMES["tput_per_gpu"])
        _, lo, hi = band_logs(bundled_calibration(), "tput_per_gpu", p["basis"].to_numpy(), reg)
        np.testing.assert_allclose(width, np.exp(hi - lo), rtol=1e-9)

    def test_bands_cover_held_out_rows_about_80_percent(self, points):
        """The bands are calibrated 80% central intervals of cross-validated residuals: on
        the bundled rows (in-sample predictions, so a check of the stored quantiles, not a
        validation: tests/test_calibration.py has the held-out one) most measured throughputs
        fall inside."""
        p = predict(points)
        m = p["tput_per_gpu"]
        inside = ((m >= p["pred_tput_per_gpu_low"]) & (m <= p["pred_tput_per_gpu_high"])).mean()
        assert 0.6 <= inside <= 1.0


class TestCompare:
    def test_default_ttft_bound(self):
        cfg = CompareConfig("glm-5.2", ("gb200",), (100.0,))
        assert cfg.max_p90_ttft_s == DEFAULT_MAX_P90_TTFT_S == 10.0
        df = compare(cfg)
        assert all(t <= 10.0 for t in df["p90_ttft_s"].drop_nulls())

    @pytest.mark.parametrize("bound", [2.0, 10.0])
    def test_ttft_prune_drops_only_points_beyond_the_bound(self, bound):
        """Points the surrogate puts beyond TTFT_PRUNE x the bound are not replayed; replayed
        anyway, none of them meets the bound (so no answer can change), and they are most of
        the replay's users."""
        from toolkit.cost.compare import sweep, ttft_plausible

        rows = sweep(CompareConfig("glm-5.2", ("gb200",), (100.0,)))
        keep = ttft_plausible(rows, bundled_params(), bound)
        dropped = rows.filter(pl.Series(~keep))
        assert dropped.height > 0 and dropped["conc"].sum() > rows["conc"].sum() / 2
        # the dropped points nearest the bound (lowest concurrency per layout) are the ones
        # that could meet it; replaying them all costs minutes
        edge = dropped.sort("conc").group_by(
            [c for c in dropped.columns if c != "conc"], maintain_order=True).head(1)
        assert predict(edge)["pred_p90_ttft"].min() > bound
        assert ttft_plausible(rows, bundled_params(), None).all()

    def test_measured_first_matches_the_front(self):
        """dsr1 FP8 8k/1k on MI355X at 100 tok/s/user, p90 TTFT <= 1 s at 0.9 confidence:
        the model meets the bound at no point, so the bundled ATOM rows answer, interpolated
        along their own front (computed here independently), with a band and a note that
        two points do not bracket the target densely. (At 2 s and the default 0.8 the model
        meets the bound and the answer is blended.)"""
        cfg = CompareConfig("dsr1", ("mi355x",), (100.0,), max_p90_ttft_s=1.0,
                            ttft_confidence=0.9)
        row = compare(cfg).to_dicts()[0]
        assert row["source"] == "measured" and row["basis"] == "measured"
        loose = compare(CompareConfig("dsr1", ("mi355x",), (100.0,), max_p90_ttft_s=2.0))
        assert loose["source"].to_list() == ["blended"]
        pts = read_points(bundled_points_path()).filter(
            (pl.col("hardware") == "mi355x") & (pl.col("framework") == "atom")
            & (pl.col("model") == "dsr1") & (pl.col("precision") == "fp8")
            & (pl.col("isl") == 8192) & (pl.col("osl") == 1024) & (pl.col("p90_ttft") <= 1.0))
        x, y = pts["median_intvty"].to_numpy(), pts["tput_per_gpu"].to_numpy()
        t = pts["p90_ttft"].to_numpy()
        f = pareto_front(x, y)
        inferencex = float(steffen_interpolate(x[f], y[f], 100.0))
        # the best of the fronts of the points within each TTFT threshold (so a looser
        # bound never answers less; at 2 s a tighter threshold's front bent higher)
        best = 0.0
        for tau in np.unique(t):
            k = np.flatnonzero(t <= tau)
            fk = k[pareto_front(x[k], y[k])]
            if x[fk][-1] >= 100.0:
                best = max(best, float(steffen_interpolate(x[fk], y[fk], 100.0)))
        assert row["tput_per_gpu"] == pytest.approx(best) and best >= inferencex
        assert row["tput_per_gpu"] > 900  # the row at 113 tok/s/user reaches 992
        assert row["model_tput_per_gpu"] is None and row["gpus"] == 8
        assert "not dense" in row["note"]
        assert row["tput_per_gpu_low"] < row["tput_per_gpu"] < row["tput_per_gpu_high"]
        assert row["usd_per_mtok_total"] == pytest.approx(
            row["usd_per_gpu_hour"] / (row["tput_per_gpu"] * 3600 / 1e6))

    def test_bundled_glm5_points_answer_measured_first(self):
        """GLM-5 FP8 8K/128 on 8x H200 with vLLM: the bundled decode-SLO runs answer, along
        their own front (computed here from the CSV), keeping only runs whose p99 TTFT (they
        record no p90) is within the bound, and the row says p99 stands in for p90."""
        raw = pl.read_csv(bundled_points_path("token_position_decode_slo.csv")).filter(
            (pl.col("model") == "zai-org/GLM-5-FP8") & (pl.col("isl") == 8192)
            & (pl.col("p99_ttft_s") <= 10.0))
        x = 1.0 / raw["median_tpot_s"].to_numpy()
        y = ((raw["input_tok_s"] + raw["output_tok_s"]) / 8.0).to_numpy()
        f = pareto_front(x, y)
        near = x[f][(x[f] >= 20.0 / 1.25) & (x[f] <= 20.0 * 1.25)]
        target = 20.0
        if not (near.size >= 3 and near.min() <= 20.0 <= near.max()):  # not dense at 20:
            mid = np.sort(x[f])[len(f) // 2]  # a target inside the densest part instead
            target = float(mid)
        cfg = CompareConfig("glm-5", ("h200",), (target,), isl=8192, osl=128, mtp="on",
                            engines={"h200": "vllm"})  # the runs' server: MTP, one draft
        row = compare(cfg).to_dicts()[0]
        xs = x[f]
        near = xs[(xs >= target / 1.25) & (xs <= target * 1.25)]
        dense = near.size >= 3 and near.min() <= target <= near.max()
        assert row["source"] == ("measured" if dense else "blended")
        if dense:
            assert "p99" in row["note"]
            assert row["tput_per_gpu"] == pytest.approx(
                float(steffen_interpolate(x[f], y[f], target)))
            assert row["model_tput_per_gpu"] > row["tput_per_gpu"]  # the model is optimistic
        assert row["tput_per_gpu_low"] < row["tput_per_gpu"] < row["tput_per_gpu_high"]

    def test_dsa_answers_carry_the_dsa_check(self):
        """A sparse-attention model's cost answer says what each measured DSA source says
        (median model / measured, its direction and size, computed from the shipped held-out
        file); a dense model's does not."""
        args = ["cost", "compare", "--hardware", "gb200", "--interactivity", "100", "--json"]
        dsa = json.loads(runner.invoke(app, [*args, "--model", "glm-5.2"]).stdout)
        heldout = pl.read_csv(bundled_cv_dir() / "heldout_dsa.csv", infer_schema_length=None)
        assert heldout["source"].n_unique() >= 3
        for src, g in heldout.group_by("source"):  # total throughput, else output
            ratio = g.select(pl.coalesce(
                pl.col("pred_tput_per_gpu") / pl.col("tput_per_gpu"),
                pl.col("pred_output_tput_per_gpu") / pl.col("output_tput_per_gpu")).median()
            ).item()
            word = "over" if ratio > 1 else "under"
            runs = f"{g.height} run" + ("s" if g.height != 1 else "")
            assert (f"{src[0]} ({runs}): throughput {ratio:.2f}x ({word} by "
                    f"{abs(ratio - 1):.0%})") in dsa["dsa_caveat"]
        dense = json.loads(runner.invoke(app, [*args, "--model", "dsr1"]).stdout)
        assert "dsa_caveat" not in dense

    def test_beyond_the_front_is_unreachable_with_no_price(self):
        df = compare(CompareConfig("dsr1", ("mi355x",), (100.0, 10_000.0), measured=False))
        far = df.filter(pl.col("interactivity") == 10_000.0).to_dicts()[0]
        assert far["reachable"] is False and far["usd_per_mtok_total"] is None
        near = df.filter(pl.col("interactivity") == 100.0).to_dicts()[0]
        assert near["source"] == "model" and near["reachable"] is True
        assert near["usd_per_mtok_total_low"] <= near["usd_per_mtok_total"] \
            <= near["usd_per_mtok_total_high"]

    def test_edge_flag(self):
        base = compare(CompareConfig("dsr1", ("mi355x",), (100.0,), measured=False))
        end = base["front_max_interactivity"][0]
        df = compare(CompareConfig("dsr1", ("mi355x",), (0.99 * end, 0.5 * end),
                                   measured=False))
        assert df["edge"].to_list() == [True, False]
        assert 0.99 * end >= (1 - EDGE_FRACTION) * end

    def test_answer_is_the_best_layout_not_a_chord_across_layouts(self):
        """Fronts are interpolated along one layout's concurrencies only: SYNTHETIC points, a
        layout A at 172 and 123 tok/s/user and a layout B at 150 only. At 150 the answer is
        the better of A's own curve there and B's point; a front through all three points
        would bend down through B, below what A alone can run."""
        from toolkit.cost.compare import _at_target, _series

        ycols = {"tput_per_gpu": "y", "output_tput_per_gpu": "y", "p90_ttft_s": "t"}
        a = pl.DataFrame({"x": [172.0, 123.0], "y": [10_500.0, 15_000.0], "t": [0.3, 0.6]})
        b = pl.DataFrame({"x": [150.0], "y": [11_500.0], "t": [0.4]})
        a_alone = float(steffen_interpolate(np.array([123.0, 172.0]),
                                            np.array([15_000.0, 10_500.0]), 150.0))
        ans = _at_target([_series(a, "x", ycols), _series(b, "x", ycols)], 150.0)
        assert ans["tput_per_gpu"] == pytest.approx(max(a_alone, 11_500.0)) and a_alone > 11_500
        chord = _at_target(_series(pl.concat([a, b]), "x", ycols), 150.0)["tput_per_gpu"]
        assert chord == pytest.approx(11_500.0) and chord < ans["tput_per_gpu"]
        assert ans["front_max_interactivity"] == 172.0 and ans["reachable"]
        # beyond every layout's end: unreachable, judged against the farthest end
        far = _at_target([_series(a, "x", ycols), _series(b, "x", ycols)], 200.0)
        assert far["reachable"] is False and far["front_max_interactivity"] == 172.0

    def test_gb300_never_below_gb200_at_a_matched_engine(self):
        """GB300 has GB200's HBM bandwidth and FP8 peak and more HBM: at the same engine its
        answer is never lower (it runs every GB200 layout at the same speed, and more)."""
        cfg = CompareConfig("glm-5.2", ("gb200", "gb300"), (100.0, 150.0), isl=65536,
                            osl=512, cached_prefix_fraction=0.95, all_engines=True)
        df = compare(cfg).filter(pl.col("reachable"))
        wide = df.pivot(on="hardware", index=["engine", "interactivity"],
                        values="tput_per_gpu").drop_nulls()
        assert wide.height >= 10
        assert (wide["gb300"] >= wide["gb200"] * (1 - 1e-3)).all(), wide

    def test_all_engines_per_vendor(self):
        cfg = CompareConfig("dsr1", ("gb200", "mi355x"), (50.0,), all_engines=True)
        assert "atom" not in engines_for(cfg, "gb200") and "trt" in engines_for(cfg, "gb200")
        assert "trt" not in engines_for(cfg, "mi355x") and "atom" in engines_for(cfg, "mi355x")
        df = compare(cfg)
        assert df.filter(pl.col("hardware") == "gb200")["engine"].n_unique() >= 4

    def test_tighter_ttft_never_cheaper(self):
        loose = compare(CompareConfig("glm-5.2", ("gb200",), (50.0,), max_p90_ttft_s=None,
                                      measured=False))
        tight = compare(CompareConfig("glm-5.2", ("gb200",), (50.0,), max_p90_ttft_s=2.0,
                                      measured=False))
        if tight["reachable"][0]:
            assert tight["usd_per_mtok_total"][0] >= loose["usd_per_mtok_total"][0] * (1 - 1e-9)

    def test_measurements_file_in_inferencex_columns(self, tmp_path, points):
        """--measurements takes InferenceX's own export columns; its rows answer first."""
        mine = points.filter((pl.col("hardware") == "b200") & (pl.col("framework") == "sglang")
                             & (pl.col("isl") == 8192) & (pl.col("precision") == "fp8"))
        assert mine.height == 5  # the bundled B200 SGLang FP8 8K/1K rows
        src = tmp_path / "mine.csv"
        mine.with_columns(pl.col("tput_per_gpu") * 3).write_csv(src)
        cfg = CompareConfig("dsr1", ("b200",), (float(mine["median_intvty"].min()),),
                            engines={"b200": "sglang"}, measured=False, measurements=str(src),
                            max_p90_ttft_s=None)
        assert measured_points(cfg).height == mine.height
        row = compare(cfg).to_dicts()[0]
        # the target is the front's slowest point: nothing brackets it from below, so the
        # answer is blended: the best of the measured front and the model's points, each
        # corrected by the residuals (measured / modelled, same configuration) of its
        # nearest measured runs, here about 3x; never below the measured point at the target
        assert row["source"] == "blended" and row["blend_points"] >= 1
        assert row["blend_log_shift"] > np.log(2.0)
        at = mine.filter(pl.col("median_intvty") == pl.col("median_intvty").min())
        assert row["tput_per_gpu"] >= 3 * at["tput_per_gpu"][0] * (1 - 1e-9)
        assert row["tput_per_gpu"] > 1.2 * row["model_tput_per_gpu"]
        assert row["tput_per_gpu_low"] < row["tput_per_gpu"] < row["tput_per_gpu_high"]

    def test_cli_json_keys_table_and_flags(self):
        res = runner.invoke(app, ["cost", "compare", "--model", "dsr1", "--precision", "fp8",
                                  "--hardware", "mi355x,gb200", "--interactivity", "100",
                                  "--max-p90-ttft-s", "none", "--mtp", "off",
                                  "--engine", "gb200=dynamo-trt@2026-01-01", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["max_p90_ttft_s"] is None and out["mtp"] == "off"
        keys = {"hardware", "engine", "interactivity", "clamped", "tput_per_gpu",
                "output_tput_per_gpu", "p90_ttft_s", "layout", "usd_per_gpu_hour",
                "price_survey", "usd_per_mtok_total", "usd_per_mtok_output",
                "cost_ratio_total_vs_first", "reachable", "edge", "source", "basis",
                "tput_per_gpu_low", "tput_per_gpu_high", "usd_per_mtok_total_low",
                "usd_per_mtok_total_high", "gpus"}
        for r in out["rows"]:
            assert keys <= set(r), keys - set(r)
            assert "+MTP" not in (r["layout"] or "")
        table = runner.invoke(app, ["cost", "compare", "--model", "dsr1", "--hardware",
                                    "mi355x", "--interactivity", "100"])
        assert table.exit_code == 0
        for col in ("source", "reachable", "edge", "tput_per_gpu_low", "gpus"):
            assert col in table.output
        bad = runner.invoke(app, ["cost", "compare", "--model", "dsr1", "--max-p90-ttft-s",
                                  "-1"])
        assert bad.exit_code == 2 and "'none'" in bad.output
        bad = runner.invoke(app, ["cost", "compare", "--model", "dsr1", "--engine",
                                  "gb200=sglang@9.9.9"])
        assert bad.exit_code == 2 and "9.9.9" in bad.output

    def test_gb300_vs_gb200_physically_bounded_at_matched_engine(self):
        """Same engine on both: GB300 (same HBM bandwidth, more HBM, more FP4) is never
        slower and never more than ~2x faster than GB200 per GPU."""
        df = compare(CompareConfig("glm-5.2", ("gb200", "gb300"), (100.0,),
                                   engines={"gb200": "dynamo-sglang", "gb300": "dynamo-sglang"},
                                   measured=False))
        r = df.filter(pl.col("hardware") == "gb300")["tput_ratio_vs_first"][0]
        assert r is not None and 0.95 <= r <= 2.0


def test_fully_cached_prompt_is_finite():
    """cached_prefix_fraction = 1.0 (the top of its validated range): no prefill FLOPs, and
    every prediction stays finite (it once divided zero by zero)."""
    rows = [_row(cached_prefix_fraction=c, disagg=d, framework="dynamo-sglang" if d else
                 "sglang", is_multinode=d) for c in (0.99, 1.0) for d in (False, True)]
    p = predict(_frame(*rows))
    for c in ("pred_median_ttft", "pred_tput_per_gpu", "pred_median_tpot"):
        assert p[c].is_finite().all() and (p[c] > 0).all(), c


def test_prefill_collectives_follow_the_prefill_link():
    """A prefill forward's expert dispatch/combine and all-reduces cross the prefill instance's
    link: a 16-GPU H100 prefill instance (two 8-GPU NVLink domains, the rest over 400 Gb/s
    NICs) pays far more per prompt token than one 8-GPU instance inside NVLink, and a
    single-GPU instance pays nothing."""
    rows = [_row(hardware="h100", framework="dynamo-trt", disagg=True, num_prefill_gpu=16,
                 prefill_tp=16, prefill_ep=16, prefill_dp_attention=True),
            _row(hardware="h100", framework="dynamo-trt", disagg=True, num_prefill_gpu=8,
                 prefill_tp=8, prefill_ep=8, prefill_dp_attention=True)]
    d = design(_frame(*rows))
    th = bundled_params().row_values(levels(d))
    t = prefill_terms(d, th)
    per_gpu_bytes = t["prefill_comm_bytes"]
    # same bytes per GPU up to the shard factor (15/16 vs 7/8) and tokens per GPU (1/16 vs 1/8)
    np.testing.assert_allclose(per_gpu_bytes[0] / per_gpu_bytes[1], (15 / 16) / (7 / 8) / 2)
    per_byte = t["t_prefill_comm_s"] / per_gpu_bytes
    assert per_byte[0] > 3 * per_byte[1]  # NIC-bound vs NVLink
    assert (t["t_prefill_comm_s"] < t["t_prefill_compute_s"]).all()
