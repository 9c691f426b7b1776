"""Serving model: reader errors, InferenceX conventions, model properties, fit, CV, CLI."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.ingest import ingest_file
from toolkit.serving import (
    PointsError,
    ServingParams,
    bundled_params,
    bundled_points_path,
    predict,
    read_points,
    validate,
)
from toolkit.serving.crossval import cross_validate, error_table
from toolkit.serving.fit import fit
from toolkit.serving.layout import design
from toolkit.serving.model import decode_terms
from toolkit.serving.params import FORMAT, ParamsError, to_z
from toolkit.serving.predict import levels

runner = CliRunner()


@pytest.fixture(scope="module")
def points() -> pl.DataFrame:
    return read_points(bundled_points_path())


def _row(**kw) -> dict:
    row = dict(hardware="gb200", framework="dynamo-sglang", model="dsr1", precision="fp8",
               spec_method="none", disagg=True, is_multinode=True, isl=1024, osl=1024, conc=64,
               num_prefill_gpu=8, num_decode_gpu=16, prefill_tp=8, prefill_ep=8,
               prefill_dp_attention=True, decode_tp=16, decode_ep=16, decode_dp_attention=True)
    row.update(kw)
    return row


def _frame(*rows: dict) -> pl.DataFrame:
    return validate(pl.DataFrame(list(rows)))


class TestPoints:
    def test_bundled_points_read(self, points):
        """All 300 bundled InferenceX rows validate, with measured columns as floats."""
        assert points.height == 300
        assert points["tput_per_gpu"].dtype == pl.Float64
        assert set(points["hardware"].unique()) == {
            "b200", "b300", "gb200", "h100", "h200", "mi300x", "mi325x", "mi355x"}

    @pytest.mark.parametrize("field,value,needle", [
        ("hardware", "tpu9", "row 2 field 'hardware': unknown hardware 'tpu9'"),
        ("framework", "llamacpp", "row 2 field 'framework': unknown framework 'llamacpp'"),
        ("model", "gpt-9", "row 2 field 'model': unknown model 'gpt-9'"),
        ("disagg", "maybe", "row 2 field 'disagg'"),
        ("conc", "many", "row 2 field 'conc'"),
        ("conc", "0", "row 2 field 'conc' must be >= 1"),
    ])
    def test_bad_value_names_row_and_field(self, tmp_path, field, value, needle):
        """A bad value stops the read at its row (1-based, header excluded) and field."""
        rows = [_row(), _row()]
        df = pl.DataFrame(rows).with_columns(pl.all().cast(pl.String))
        df = df.with_columns(pl.when(pl.int_range(pl.len()) == 1).then(pl.lit(value))
                             .otherwise(pl.col(field)).alias(field))
        path = tmp_path / "p.csv"
        df.write_csv(path)
        with pytest.raises(PointsError, match=needle):
            read_points(path)

    @pytest.mark.parametrize("old,new", [("sglang-disagg", "mori-sglang"), ("trtllm", "trt"),
                                         ("dynamo-trtllm", "dynamo-trt"),
                                         (" Dynamo-TRTLLM ", "dynamo-trt")])
    def test_older_framework_names_read_as_today(self, old, new):
        """InferenceX renamed three engines; rows exported under the old names read (and
        predict) as the new ones, the way InferenceX's own dashboard maps them."""
        from toolkit.serving.predict import predict

        got = _frame(_row(framework=old), _row(framework=new))
        assert got["framework"].to_list() == [new, new]
        pred = predict(got)
        assert pred["pred_tput_per_gpu"][0] == pred["pred_tput_per_gpu"][1]

    @pytest.mark.parametrize(("key", "name"), [("glm5", "glm-5"), ("glm5.1", "glm-5"),
                                               ("glm5.2", "glm-5.2"),
                                               ("DeepSeek-R1-0528", "dsr1")])
    def test_inferencex_model_keys_read_as_registry_models(self, key, name):
        """InferenceX names GLM-5 ``glm5`` / ``glm5.1`` and GLM-5.2 ``glm5.2`` (its database
        keys) and DeepSeek-R1 ``DeepSeek-R1-0528`` (its display name): each predicts as the
        registry's model."""
        from toolkit.serving.predict import predict

        got = _frame(_row(model=key), _row(model=name))
        assert got["model"].to_list() == [name, name]
        pred = predict(got)
        assert pred["pred_tput_per_gpu"][0] == pred["pred_tput_per_gpu"][1]
        assert pred["pred_median_ttft"][0] == pred["pred_median_ttft"][1]

    def test_fp4_on_hopper_refused(self):
        """H100 has no FP4 tensor cores: an FP4 row is refused, not silently run at FP8."""
        with pytest.raises(PointsError, match="field 'precision': h100 has no FP4"):
            _frame(_row(hardware="h100", precision="fp4"))

    def test_missing_column_and_file(self, tmp_path):
        """Missing columns are listed; a missing file is named."""
        with pytest.raises(PointsError, match="missing column"):
            validate(pl.DataFrame({"hardware": ["gb200"]}))
        with pytest.raises(PointsError, match="no such file"):
            read_points(tmp_path / "nope.csv")


class TestConventions:
    def test_divisors(self):
        """tput_per_gpu divides by all GPUs (agg: decode_tp; disagg: P + D); output by D."""
        d = design(_frame(_row(), _row(disagg=False, framework="sglang", decode_tp=8,
                                       num_prefill_gpu=64, num_decode_gpu=64, decode_ep=8,
                                       decode_dp_attention=False)))
        assert d.total_gpus.tolist() == [24.0, 8.0]
        assert d.decode_gpus.tolist() == [16.0, 8.0]

    def test_repeated_total_rows(self):
        """Early GB200 rows without image repeat the total in both fields: counted once."""
        d = design(_frame(_row(num_prefill_gpu=36, num_decode_gpu=36, prefill_tp=36,
                               decode_tp=36, prefill_ep=1, decode_ep=1, image=None)))
        assert d.total_gpus.tolist() == [36.0] and d.decode_gpus.tolist() == [36.0]
        assert d.n_dec[0] * d.g_dec[0] <= 18 and d.n_pre[0] * d.g_pre[0] <= 18
        # a user's own 8 + 8 layout (no image column) is taken as written
        mine = design(_frame(_row(num_prefill_gpu=8, num_decode_gpu=8, prefill_tp=8,
                                  decode_tp=8)))
        assert mine.total_gpus.tolist() == [16.0] and mine.g_dec.tolist() == [8.0]

    def test_scaleup_domain_used(self):
        """A 16-GPU decode instance rides NVLink inside an NVL72 rack, partly the NIC on B200."""
        d = design(_frame(_row(hardware="gb200"), _row(hardware="b200")))
        assert d.link_bw_dec[0] == 900e9
        # B200: half the traffic stays on NVLink, half crosses the 50 GB/s NIC
        assert d.link_bw_dec[1] == pytest.approx(1 / (0.5 / 900e9 + 0.5 / 50e9))
        th = bundled_params().row_values(levels(d))
        t = decode_terms(d, th, np.array([64.0, 64.0]))
        assert t["t_comm_s"][1] > 1.5 * t["t_comm_s"][0]

    def test_hardware_not_a_price_ratio(self):
        """The same deployment on GB200, GB300 and MI355X differs by more than price."""
        rows = [_row(hardware=h, framework="sglang", disagg=False, is_multinode=False,
                     num_prefill_gpu=8, num_decode_gpu=8, prefill_tp=8, decode_tp=8,
                     prefill_ep=8, decode_ep=8, conc=2048, isl=32768, precision="fp4")
                for h in ("gb200", "gb300", "mi355x")]
        p = predict(_frame(*rows))
        tput = dict(zip(p["hardware"], p["pred_tput_per_gpu"], strict=True))
        assert tput["gb300"] > tput["gb200"] * 1.01  # more HBM (batch) and FP4 FLOPs (prefill)
        price = {"gb200": 1.86, "gb300": 2.31, "mi355x": 1.50}
        for h in ("gb300", "mi355x"):
            cost_ratio = (price[h] / tput[h]) / (price["gb200"] / tput["gb200"])
            assert abs(cost_ratio / (price[h] / price["gb200"]) - 1) > 0.01, h


class TestModelProperties:
    @settings(max_examples=30, deadline=None)
    @given(conc=st.integers(1, 4000), factor=st.integers(2, 8),
           disagg=st.booleans(), mtp=st.booleans(), hw=st.sampled_from(
               ["gb200", "gb300", "mi355x", "b200", "h200"]))
    def test_tpot_grows_with_concurrency(self, conc, factor, disagg, mtp, hw):
        """More users never make a token faster: TPOT is non-decreasing in concurrency."""
        kw = dict(hardware=hw, spec_method="mtp" if mtp else "none", disagg=disagg,
                  framework="dynamo-sglang" if disagg else "sglang")
        p = predict(_frame(_row(conc=conc, **kw), _row(conc=conc * factor, **kw)))
        a, b = p["pred_median_tpot"].to_list()
        # at the HBM cap both runs hold the same batch: only the replay's random prompt
        # lengths (seeded per configuration) move the median, by well under 1%
        assert b >= a * (1 - 1e-2)
        assert (p["pred_tput_per_gpu"] > 0).all() and (p["pred_median_ttft"] > 0).all()

    @settings(max_examples=20, deadline=None)
    @given(batch=st.floats(1, 2000), scale=st.floats(1.1, 4))
    def test_faster_hbm_never_slower(self, batch, scale):
        """Scaling HBM bandwidth up never lengthens a decode step."""
        d = design(_frame(_row()))
        th = bundled_params().row_values(levels(d))
        slow = decode_terms(d, th, np.array([batch]))["t_step_s"][0]
        fast_d = d.__class__(**{**d.__dict__, "hbm_bw": d.hbm_bw * scale})
        fast = decode_terms(fast_d, th, np.array([batch]))["t_step_s"][0]
        assert fast <= slow

    def test_row_order_and_columns_kept(self, points):
        """predict keeps every input column and the row order, adding the pred_* columns."""
        shuffled = points.sample(fraction=1.0, shuffle=True, seed=3)
        p = predict(shuffled)
        assert p["run_url"].to_list() == shuffled["run_url"].to_list()
        assert {"pred_median_tpot", "pred_median_ttft", "pred_p90_ttft", "pred_tput_per_gpu",
                "pred_output_tput_per_gpu", "pred_median_intvty"} <= set(p.columns)
        np.testing.assert_allclose(p["pred_median_intvty"], 1 / p["pred_median_tpot"])



class TestFit:
    def test_recovers_synthetic_parameters(self, points):
        """SYNTHETIC targets made by the model with known globals are fitted back."""
        truth = ServingParams.prior()
        terms = dict(truth.terms)
        terms["overhead_s|global|"] = to_z("overhead_s", 0.012)
        terms["eff_comm|global|"] = 0.0  # the middle of its range
        truth = ServingParams(terms)
        sub = points.filter(pl.col("hardware").is_in(["b200", "mi355x"]))
        made = predict(sub, truth)
        synthetic = sub.with_columns(made["pred_median_tpot"].alias("median_tpot"),
                                     made["pred_tput_per_gpu"].alias("tput_per_gpu"),
                                     made["pred_median_ttft"].alias("median_ttft"))
        got = fit(synthetic, max_nfev=40)
        back = predict(synthetic, got)
        err = np.abs(back["pred_median_tpot"] / synthetic["median_tpot"] - 1)
        assert float(np.median(err)) < 0.02
        assert got.kind == "fitted" and "in-sample" in got.residuals["median_tpot"]["note"]

    def test_fit_can_lower_times(self, points):
        """Calibration moves times down as well as up (the old calibrate could not)."""
        sub = points.filter(pl.col("hardware") == "b200")
        prior = predict(sub, ServingParams.prior())
        faster = sub.with_columns((prior["pred_median_tpot"] * 0.5).alias("median_tpot"),
                                  (prior["pred_tput_per_gpu"] * 2.0).alias("tput_per_gpu"),
                                  prior["pred_median_ttft"].alias("median_ttft"))
        got = predict(faster, fit(faster, max_nfev=30))
        assert float(np.median(got["pred_median_tpot"] / prior["pred_median_tpot"])) < 0.7

    def test_params_roundtrip_and_errors(self, tmp_path):
        """Saved parameters load back equal; a malformed file names the bad term."""
        p = bundled_params()
        assert p.kind == "fitted" and "InferenceX" in p.fitted_on
        p.save(tmp_path / "p.json")
        assert ServingParams.load(tmp_path / "p.json").terms == p.terms
        (tmp_path / "bad.json").write_text(json.dumps({"format": FORMAT,
                                                       "terms": {"speed|global|": 1}}))
        with pytest.raises(ParamsError, match="speed"):
            ServingParams.load(tmp_path / "bad.json")

    def test_cross_validation_holds_out(self, points):
        """Each held-out row is predicted by a fit that never saw its hardware."""
        sub = points.filter(pl.col("hardware").is_in(["mi300x", "mi325x", "h100"]))
        pred = cross_validate(sub, "hardware", max_nfev=3)
        assert pred.height == sub.height and set(pred["fold"]) == {"mi300x", "mi325x", "h100"}
        table = error_table(pred)
        assert table["hardware"].to_list()[-1] == "all"
        assert table.filter(pl.col("hardware") == "all")["rows"][0] == sub.height


class TestCli:
    def test_predict_cli(self, tmp_path):
        """serving predict writes IN plus pred_* columns in the same row order."""
        src = tmp_path / "in.csv"
        read_points(bundled_points_path()).head(12).drop("run_url").write_csv(src)
        res = runner.invoke(app, ["serving", "predict", "--points", str(src),
                                  "--out", str(tmp_path / "out.csv")])
        assert res.exit_code == 0, res.output
        out = pl.read_csv(tmp_path / "out.csv")
        assert out.height == 12 and out["conc"].to_list() == pl.read_csv(src)["conc"].to_list()
        assert out["pred_median_tpot"].min() > 0

    def test_predict_cli_unknown_hardware(self, tmp_path):
        """An unknown accelerator is a one-line error naming row and field (exit 2)."""
        src = tmp_path / "in.csv"
        pl.DataFrame([_row(), _row(hardware="abacus")]).write_csv(src)
        res = runner.invoke(app, ["serving", "predict", "--points", str(src),
                                  "--out", str(tmp_path / "o.csv")])
        assert res.exit_code == 2 and "row 2 field 'hardware'" in res.output

    def test_cost_compare_json(self):
        """cost compare prints per-hardware $/M with ratios to the first (its speed is measured
        in benchmarks/serving_speed_bench.py, not here)."""
        res = runner.invoke(app, ["cost", "compare", "--model", "glm-5.2", "--hardware",
                                  "gb200,gb300,mi355x", "--interactivity", "100,150",
                                  "--max-p90-ttft-s", "2", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        rows = out["rows"]
        assert [r["hardware"] for r in rows] == ["gb200"] * 2 + ["gb300"] * 2 + ["mi355x"] * 2
        assert all(r["p90_ttft_s"] <= 2 for r in rows if r["reachable"])
        assert all(r["usd_per_mtok_total"] is None for r in rows if not r["reachable"])
        first = [r for r in rows if r["hardware"] == "gb200"]
        assert all(r["cost_ratio_total_vs_first"] == 1.0 for r in first)
        gb300 = next(r for r in rows if r["hardware"] == "gb300")
        assert gb300["cost_ratio_total_vs_first"] != pytest.approx(2.31 / 1.86, rel=0.01)
        assert out["params_kind"] == "fitted"

    def test_cost_without_subcommand_still_prices(self):
        """`toolkit cost --hardware --tokens-per-s-per-gpu` keeps working next to compare."""
        res = runner.invoke(app, ["cost", "--hardware", "gb200", "--tokens-per-s-per-gpu",
                                  "11742", "--json"])
        assert res.exit_code == 0 and round(json.loads(res.output)[
            "usd_per_million_tokens"], 4) == 0.0440


@pytest.fixture(scope="module")
def smollm2_store(tmp_path_factory):
    """The bundled real SmolLM2 selection trace with one HiSparse LRU replay at 2 x k."""
    from pathlib import Path

    import toolkit
    from toolkit.replay.selections import SelectionReplayConfig, replay_selections

    root = tmp_path_factory.mktemp("smollm2") / "store"
    traces = Path(__file__).resolve().parents[1] / "traces"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "bundle", traces / "smollm2", "smollm2", select="smollm2-softmax-sum")
        summary = replay_selections(s, SelectionReplayConfig("smollm2", "lru", 128))
        yield s, summary["run_id"]


class TestReuse:
    def test_hisparse_columns_from_replay(self, smollm2_store):
        """Misses per layer come from the stored replay's miss ratio, carried from k = 64 to
        k = 2048 (and a 33.8K-token context) by the measured scaling fit; the buffer keeps
        buffer / k."""
        from toolkit.models import get_model
        from toolkit.replay.selection_scaling import scale_misses
        from toolkit.serving.reuse import hisparse_columns

        store, run_id = smollm2_store
        cols = hisparse_columns(store, run_id, get_model("glm-5.2"), 33792)
        m, a, ctx = store.query(
            "SELECT sum(misses)::DOUBLE, sum(accesses)::DOUBLE, avg(seq_len) "
            f"FROM selection_replay WHERE run_id = '{run_id}'").row(0)
        want = scale_misses(m / a, trace_k=64, model_k=2048, buffer_ratio=2.0,
                            context_tokens=ctx, target_context_tokens=33792)
        assert cols["miss_scale"] == 32 and cols["device_buffer_tokens"] == 4096
        assert cols["miss_rows_per_layer"] == pytest.approx(want.rows)
        assert cols["miss_rows_per_layer_low"] <= want.rows <= cols["miss_rows_per_layer_high"]
        assert "extrapolation" in want.label

    def test_offload_in_the_step_and_the_batch(self, smollm2_store):
        """Host fetches slow a step (less when overlapped); offload lifts the HBM batch cap."""
        from toolkit.models import get_model
        from toolkit.serving.reuse import hisparse_columns

        store, run_id = smollm2_store
        cols = hisparse_columns(store, run_id, get_model("glm-5.2"))
        base = _row(model="glm-5.2", isl=32768, osl=1024, conc=512)
        off = {k: cols[k] for k in ("device_buffer_tokens", "miss_rows_per_layer")}
        df = pl.DataFrame([base, base, base]).with_columns(
            pl.Series("device_buffer_tokens", [0.0, off["device_buffer_tokens"]] * 1
                      + [off["device_buffer_tokens"]]),
            pl.Series("miss_rows_per_layer", [0.0, off["miss_rows_per_layer"],
                                              off["miss_rows_per_layer"]]),
            pl.Series("hisparse_overlap", [0.0, 0.0, 1.0]))
        p = predict(validate(df), breakdown=True)
        cap = p["term_max_batch_per_instance"].to_list()
        assert cap[1] > 1.5 * cap[0] and cap[1] == cap[2]
        miss = p["term_t_miss_s"].to_list()
        assert miss[0] == 0 and miss[1] > 0 and miss[2] <= miss[1]

    def test_prefix_columns_from_tier_run(self, mooncake_store):
        """Cached and host-loaded prompt shares come from a stored tier replay."""
        from toolkit.cost.from_replay import run_tiers
        from toolkit.replay.tiers import TierReplayConfig
        from toolkit.serving.reuse import prefix_columns

        res = run_tiers(mooncake_store, TierReplayConfig("conv", device_tokens=300_000))
        cols = prefix_columns(mooncake_store, res.summary["run_id"])
        s = res.summary
        assert cols["cached_prefix_fraction"] == pytest.approx(s["overall_hit_rate"])
        assert cols["host_prefix_fraction"] == pytest.approx(
            s["host_hit_rate"] + s["storage_hit_rate"])
        base = _row(isl=8192)
        df = validate(pl.DataFrame([base, base]).with_columns(
            pl.Series("cached_prefix_fraction", [0.0, cols["cached_prefix_fraction"]]),
            pl.Series("host_prefix_fraction", [0.0, cols["host_prefix_fraction"]])))
        p = predict(df, breakdown=True)
        assert p["term_t_prefill_s"][1] < p["term_t_prefill_s"][0]
