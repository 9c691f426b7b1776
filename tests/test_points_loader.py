"""Measured points wherever they are (issue 38, point 2): bench files and a store's
``measured_points`` table go straight into ``serving fit`` / ``validate``, ``cost compare``
and ``cost-at-interactivity`` through one loader, their servers' layout from flags.

The bench samples under tests/data/ are hand-written (not real measurements); every figure
asserted is worked out in the docstring. No test runs a serving fit: the fit and
cross-validation commands are checked up to the frame they hand to the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.cost.compare import compare, measured_points
from toolkit.cost.config import CompareConfig
from toolkit.cost.interpolate import cost_at_interactivity, read_measurements
from toolkit.ingest.bench_layout import BenchLayout
from toolkit.serving.layout import design
from toolkit.serving.measurements import MeasurementSource, load_measurements
from toolkit.serving.points import (
    CONFIG_COLUMNS,
    MEASURED_COLUMNS,
    PointsError,
    PointsScope,
    bundled_points_path,
    read_points,
)

DATA = Path(__file__).resolve().parent / "data"
SGLANG = DATA / "sglang_bench_sample.jsonl"
VLLM = DATA / "vllm_bench_sample.json"
IX_JSON = DATA / "inferencex_points_sample.json"
H200_8 = BenchLayout(hardware="h200", model="dsr1", precision="fp8", gpus=8, tp=8)
FLAGS_8 = ("--hardware", "h200", "--model", "dsr1", "--precision", "fp8", "--gpus", "8",
           "--tp", "8")
COMPARED = [*CONFIG_COLUMNS, *MEASURED_COLUMNS, "date"]
runner = CliRunner()


def cli(*args: object) -> str:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.stdout


def refused(*args: object) -> str:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.output
    return lines[0]


def ingest(tmp_path: Path, path: Path, name: str, *flags: object) -> Path:
    store = tmp_path / "store"
    cli("ingest", "points", path, "--store", store, "--name", name, *flags)
    return store


class TestFitInput:
    def test_sglang_bench(self):
        """Line 1: (2048 + 512) tok/s on 8 GPUs = 320 tok/s/GPU, TPOT 16 ms; line 2:
        (10 + 5) / 8 = 1.875, TPOT 25 ms. One aggregated TP8 instance, engine defaults for
        EP, DP attention and speculative decoding (noted)."""
        notes: list[str] = []
        df = load_measurements(MeasurementSource(str(SGLANG), layout=H200_8), notes=notes)
        assert df["tput_per_gpu"].to_list() == [320.0, 1.875]
        assert df["median_tpot"].to_list() == [0.016, 0.025]
        assert df.select("isl", "osl", "conc").rows() == [(1024, 256, 8), (10, 5, 2)]
        assert df.select("hardware", "framework", "model", "precision", "spec_method",
                         "disagg", "num_prefill_gpu", "num_decode_gpu", "prefill_tp",
                         "decode_tp", "decode_ep", "decode_dp_attention").unique().rows() == [
            ("h200", "sglang", "dsr1", "fp8", "none", False, 8, 8, 8, 8, 1, False)]
        assert len(notes) == 1 and "--ep 1, --dp-attention false, --spec-method none" in notes[0]
        assert design(df).n == 2  # the fit's own resolution of the rows accepts them

    def test_vllm_bench(self):
        """model_id deepseek-ai/DeepSeek-R1 resolves through the alias deepseek-r1; the date
        20260102-101500 becomes 2026-01-02; 165 tok/s on 1 GPU; flags override defaults."""
        lay = BenchLayout(hardware="h200", precision="fp8", gpus=1, tp=1, ep=1,
                          dp_attention=False, spec_method="none")
        notes: list[str] = []
        df = load_measurements(MeasurementSource(str(VLLM), layout=lay), notes=notes)
        assert df.select("model", "framework", "date", "tput_per_gpu", "median_tpot").row(0) \
            == ("dsr1", "vllm", "2026-01-02", 165.0, 0.05)
        assert notes == []

    def test_inferencex_json_needs_no_flags(self):
        df = load_measurements(IX_JSON)
        assert df["conc"].to_list() == [4, 16, 64] and df["decode_tp"].to_list() == [8] * 3
        assert df["tput_per_gpu"].to_list() == [100.0, 300.0, 700.0]

    def test_bundled_csv_exactly_as_before(self):
        """An InferenceX CSV reaches the model through read_points, unchanged."""
        path = bundled_points_path()
        assert load_measurements(path).equals(read_points(path))

    @pytest.mark.parametrize("path, flags, layout", [
        (SGLANG, FLAGS_8, H200_8),
        (VLLM, ("--hardware", "h200", "--precision", "fp8", "--gpus", "1", "--tp", "1"),
         BenchLayout(hardware="h200", precision="fp8", gpus=1, tp=1)),
        (IX_JSON, (), BenchLayout()),
    ])
    def test_store_table_equals_file(self, tmp_path, path, flags, layout):
        """Ingested with the same flags, the stored table loads to the rows the file does,
        and needs no flags again."""
        store = ingest(tmp_path, path, "pts", *flags)
        from_store = load_measurements(MeasurementSource(store=str(store), name="pts"))
        from_file = load_measurements(MeasurementSource(str(path), layout=layout))
        assert from_store.select(COMPARED).equals(from_file.select(COMPARED))

    def test_bundled_csv_through_a_store(self, tmp_path):
        store = ingest(tmp_path, bundled_points_path(), "ix")
        from_store = load_measurements(MeasurementSource(store=str(store), name="ix"))
        from_file = read_points(bundled_points_path())
        assert from_store.height == 300
        assert from_store.select(COMPARED).equals(from_file.select(COMPARED))

    def test_layout_given_at_use_time(self, tmp_path):
        """A table stored with only --gpus takes the rest of the layout when used."""
        store = ingest(tmp_path, SGLANG, "sg", "--gpus", "8", "--hardware", "h200")
        src = MeasurementSource(store=str(store), name="sg", layout=BenchLayout(
            model="dsr1", precision="fp8", tp=8))
        assert load_measurements(src).select(COMPARED).equals(
            load_measurements(MeasurementSource(str(SGLANG), layout=H200_8)).select(COMPARED))

    def test_serving_fit_and_validate_get_the_loaded_rows(self, tmp_path, monkeypatch):
        """`serving fit --points BENCH` and `serving validate --store S --measured-points N`
        hand the model the loader's frame (the fit itself is stubbed: not run here)."""
        import toolkit.serving.crossval as crossval
        import toolkit.serving.fit as fit_mod
        from toolkit.serving.params import ServingParams

        seen: list[pl.DataFrame] = []

        def fake_fit(df, **kw):
            seen.append(df)
            return ServingParams.prior()

        def fake_cv(df, scheme, **kw):
            seen.append(df)
            raise ValueError("stub: no cross-validation in this test")

        monkeypatch.setattr(fit_mod, "fit", fake_fit)
        monkeypatch.setattr(fit_mod, "bound_report", lambda params, df: [])
        monkeypatch.setattr(crossval, "cross_validate", fake_cv)
        want = load_measurements(MeasurementSource(str(SGLANG), layout=H200_8))
        cli("serving", "fit", "--points", SGLANG, *FLAGS_8, "--no-bands")
        store = ingest(tmp_path, SGLANG, "sg", *FLAGS_8)
        res = runner.invoke(app, ["serving", "validate", "--store", str(store),
                                  "--measured-points", "sg", "--scheme", "hardware"])
        assert "stub: no cross-validation" in res.output
        assert [d.select(COMPARED).equals(want.select(COMPARED)) for d in seen] == [True, True]
        cli("serving", "fit", "--points", SGLANG, *FLAGS_8, "--ep", "8", "--dp-attention",
            "--spec-method", "mtp", "--no-bands")
        assert seen[-1].select("decode_ep", "prefill_dp_attention", "spec_method").unique(
            ).rows() == [(8, True, "mtp")]


class TestRefusals:
    @pytest.mark.parametrize("drop, field, flag", [
        ("hardware", "hardware", "--hardware"), ("model", "model", "--model"),
        ("precision", "precision", "--precision"), ("tp", "decode_tp", "--tp"),
    ])
    def test_missing_layout_named(self, drop, field, flag):
        lay = BenchLayout(**{k: v for k, v in H200_8.given().items() if k != drop})
        with pytest.raises(PointsError) as err:
            load_measurements(MeasurementSource(str(SGLANG), layout=lay))
        text = str(err.value)
        assert text.startswith(f"{SGLANG}: line 1 field '{field}'") and text.endswith(
            f"pass {flag}") and "\n" not in text, text

    def test_missing_gpus_named(self):
        with pytest.raises(PointsError, match=r"sglang_bench_sample.jsonl.*pass --gpus N"):
            load_measurements(MeasurementSource(str(SGLANG), layout=BenchLayout(
                hardware="h200", model="dsr1", precision="fp8", tp=8)))

    def test_cost_compare_spelling(self):
        """cost compare's messages name its own flags (--measured-tp, --measured-gpus)."""
        for lay, flag in ((BenchLayout(hardware="h200", model="dsr1", precision="fp8",
                                       gpus=8), "--measured-tp"),
                          (BenchLayout(hardware="h200", model="dsr1", precision="fp8", tp=8),
                           "--measured-gpus")):
            with pytest.raises(PointsError, match=f"pass {flag}"):
                load_measurements(MeasurementSource(str(SGLANG), layout=lay,
                                                    flag_prefix="--measured-"))

    def test_tp_must_cover_the_gpus(self):
        lay = BenchLayout(**{**H200_8.given(), "tp": 4})
        with pytest.raises(PointsError, match=r"line 1 fields 'decode_tp', 'num_decode_gpu': "
                           r"--tp 4 on --gpus 8"):
            load_measurements(MeasurementSource(str(SGLANG), layout=lay))

    def test_unknown_model_id(self, tmp_path):
        rec = json.loads(VLLM.read_text())
        rec["model_id"] = "acme/unknown-7b"
        path = tmp_path / "v.json"
        path.write_text(json.dumps(rec))
        lay = BenchLayout(hardware="h200", precision="fp8", gpus=1, tp=1)
        with pytest.raises(PointsError, match=r"v.json: line 1 field 'model'.*"
                           r"'acme/unknown-7b' names no registered model.*pass --model"):
            load_measurements(MeasurementSource(str(path), layout=lay))
        df = load_measurements(MeasurementSource(str(path), layout=BenchLayout(
            **lay.given(), model="dsr1")))
        assert df["model"].to_list() == ["dsr1"]

    def test_request_rate_run(self, tmp_path):
        lines = SGLANG.read_text().splitlines()
        rec = json.loads(lines[1])
        rec["max_concurrency"] = None
        path = tmp_path / "s.jsonl"
        path.write_text(lines[0] + "\n" + json.dumps(rec) + "\n")
        with pytest.raises(PointsError, match=r"s.jsonl: line 2 field 'max_concurrency': "
                           r"null"):
            load_measurements(MeasurementSource(str(path), layout=H200_8))

    def test_stored_gpus_disagree(self, tmp_path):
        store = ingest(tmp_path, SGLANG, "sg", *FLAGS_8)
        with pytest.raises(PointsError, match=r"measured_points/sg: line 1 field "
                           r"'num_decode_gpu': the row was stored with 8 GPU"):
            load_measurements(MeasurementSource(store=str(store), name="sg",
                                                layout=BenchLayout(gpus=4)))

    def test_cli_refusals(self, tmp_path):
        assert "pass --hardware" in refused("serving", "fit", "--points", SGLANG, "--gpus", "8")
        assert "--tp: these describe a bench result" in refused("serving", "validate", "--tp",
                                                                "8")
        assert "not both" in refused("serving", "fit", "--points", SGLANG, "--store",
                                     tmp_path, "--measured-points", "x")
        assert "go together" in refused("cost", "compare", "--model", "dsr1",
                                        "--measured-points", "x")
        assert "no store at" in refused("serving", "fit", "--store", tmp_path / "none",
                                        "--measured-points", "x")
        assert "pass --measured-model" in refused(
            "cost", "compare", "--model", "dsr1", "--measurements", SGLANG,
            "--measured-hardware", "h200", "--measured-gpus", "8")
        assert "give --tp N with them" in refused("ingest", "points", SGLANG, "--store",
                                                  tmp_path / "s", "--gpus", "8", "--ep", "8")


def _bench_cfg(source) -> CompareConfig:
    return CompareConfig("dsr1", ("h200",), (50.0, 100.0), max_p90_ttft_s=None, isl=1024,
                         osl=256, mtp="off", engines={"h200": "sglang"}, measured=False,
                         measurements=source)


class TestCostCompare:
    def test_bench_file_answers_measured(self):
        """The sample's 1K/256 line is one front point (62.5 tok/s/user, 320 tok/s/GPU on
        TP8): one point never answers by itself (measured needs 3+ bracketing the target), so
        at 50 and 100 (both within 2x of it) the model's answer is corrected by its residual
        (blended), with a band wider than zero."""
        cfg = _bench_cfg(MeasurementSource(str(SGLANG), layout=H200_8))
        assert measured_points(cfg).height == 1  # the 10/5 line is another shape
        rows = compare(cfg).to_dicts()
        for r in rows:
            if not r["reachable"]:
                continue
            assert r["source"] == "blended" and r["blend_points"] == 1
            shift = r["tput_per_gpu"] / r["model_tput_per_gpu"]
            assert shift == pytest.approx(np.exp(r["blend_log_shift"]))
            assert r["tput_per_gpu_low"] < r["tput_per_gpu"] < r["tput_per_gpu_high"]
        assert rows[0]["reachable"]

    def test_store_table_same_answer(self, tmp_path):
        store = ingest(tmp_path, SGLANG, "sg", *FLAGS_8)
        by_file = compare(_bench_cfg(MeasurementSource(str(SGLANG), layout=H200_8)))
        by_store = compare(_bench_cfg(MeasurementSource(store=str(store), name="sg")))
        assert by_store.equals(by_file)

    def test_inferencex_csv_store_same_answer(self, tmp_path):
        """The bundled B200 SGLang FP8 8K/1K rows as a CSV, and the same CSV ingested."""
        mine = read_points(bundled_points_path()).filter(
            (pl.col("hardware") == "b200") & (pl.col("framework") == "sglang")
            & (pl.col("isl") == 8192) & (pl.col("precision") == "fp8"))
        assert mine.height == 5
        src = tmp_path / "mine.csv"
        mine.write_csv(src)
        store = ingest(tmp_path, src, "mine")
        cfg = CompareConfig("dsr1", ("b200",), (float(mine["median_intvty"].min()),),
                            engines={"b200": "sglang"}, measured=False, max_p90_ttft_s=None)
        by_file = compare(CompareConfig(**{**cfg.__dict__, "measurements": str(src)}))
        by_store = compare(CompareConfig(**{**cfg.__dict__, "measurements":
                                            MeasurementSource(store=str(store), name="mine")}))
        assert by_file["source"][0] == "blended" and by_store.equals(by_file)

    def test_inferencex_model_names_match_the_registry_model(self, tmp_path):
        """An export naming the model as InferenceX shows it (``DeepSeek-R1-0528``) answers
        ``--model dsr1`` from its measured rows, as the same rows named ``dsr1`` do."""
        mine = read_points(bundled_points_path()).filter(
            (pl.col("hardware") == "b200") & (pl.col("framework") == "sglang")
            & (pl.col("isl") == 8192) & (pl.col("precision") == "fp8"))
        (tmp_path / "a.csv").write_text(mine.write_csv())
        (tmp_path / "b.csv").write_text(
            mine.with_columns(model=pl.lit("DeepSeek-R1-0528")).write_csv())
        cfg = CompareConfig("dsr1", ("b200",), (float(mine["median_intvty"].min()),),
                            engines={"b200": "sglang"}, measured=False, max_p90_ttft_s=None)
        got = [compare(CompareConfig(**{**cfg.__dict__, "measurements": str(tmp_path / f)}))
               for f in ("a.csv", "b.csv")]
        assert got[1]["source"][0] == "blended" and got[1].equals(got[0])

    def test_a_dashboard_export_answers_for_its_rows_in_scope(self, tmp_path):
        """An export holding other models, accelerators and engines the toolkit does not
        know (as InferenceX's holds every model it measured) answers from the rows the
        question is about, as a file of those rows alone does; the rest are counted in a
        note, never validated."""
        raw = pl.read_csv(bundled_points_path(), infer_schema_length=0)
        mine = raw.filter((pl.col("hardware") == "b200") & (pl.col("framework") == "sglang")
                          & (pl.col("isl") == "8192") & (pl.col("precision") == "fp8"))
        others = pl.concat([
            mine.head(2).with_columns(model=pl.lit("gptoss")),       # a model not modelled
            mine.head(1).with_columns(hardware=pl.lit("tpu-v7")),    # an accelerator likewise
            mine.head(1).with_columns(framework=pl.lit("lmdeploy")),  # an engine likewise
            mine.head(1).with_columns(hardware=pl.lit("h100"), conc=pl.lit("x")),  # not asked
        ])
        (tmp_path / "mine.csv").write_text(mine.write_csv())
        (tmp_path / "all.csv").write_text(pl.concat([others, mine]).write_csv())
        cfg = CompareConfig("dsr1", ("b200",), (50.0,), engines={"b200": "sglang"},
                            measured=False, max_p90_ttft_s=None)
        got = [compare(CompareConfig(**{**cfg.__dict__, "measurements": str(tmp_path / f)}))
               for f in ("mine.csv", "all.csv")]
        assert got[1]["source"][0] == "blended" and got[1].equals(got[0])
        notes: list[str] = []
        rows = load_measurements(tmp_path / "all.csv", notes=notes,
                                 scope=PointsScope("dsr1", ("b200",), "fp8"))
        assert rows.height == mine.height
        assert [n.split(": ", 1)[1] for n in notes] == [
            "4 of 10 rows are for other models, accelerators or precisions: left out",
            "1 rows name engines the toolkit does not model (lmdeploy; known: atom, "
            "dynamo-sglang, dynamo-trt, dynamo-vllm, mori-sglang, sglang, trt, vllm): left out"]
        out = runner.invoke(app, ["cost", "compare", "--model", "dsr1", "--hardware", "b200",
                                  "--interactivity", "50", "--measurements",
                                  str(tmp_path / "all.csv"), "--json"])
        assert out.exit_code == 0, out.output
        assert "4 of 10 rows are for other models" in out.stderr

    def test_a_bad_value_in_scope_names_the_files_row(self, tmp_path):
        """A row the question is about is validated in full, and the error names its row
        in the file, not among the rows kept."""
        raw = pl.read_csv(bundled_points_path(), infer_schema_length=0)
        b200 = raw.filter((pl.col("hardware") == "b200") & (pl.col("precision") == "fp8"))
        bad = pl.concat([raw.filter(pl.col("hardware") == "mi355x").head(3),
                         b200.head(1).with_columns(conc=pl.lit("x"))])
        (tmp_path / "bad.csv").write_text(bad.write_csv())
        with pytest.raises(PointsError, match=r"bad\.csv: row 4 field 'conc': 'x' is not a "
                                              r"valid integer"):
            load_measurements(tmp_path / "bad.csv",
                              scope=PointsScope("dsr1", ("b200",), "fp8"))

    def test_cli(self, tmp_path):
        args = ("cost", "compare", "--model", "dsr1", "--hardware", "h200", "--engine",
                "h200=sglang", "--isl", "1024", "--osl", "256", "--interactivity", "50",
                "--max-p90-ttft-s", "none", "--mtp", "off", "--model-only", "--json")
        flags = ("--measured-hardware", "h200", "--measured-model", "dsr1",
                 "--measured-precision", "fp8", "--measured-gpus", "8", "--measured-tp", "8")
        by_file = json.loads(cli(*args, "--measurements", SGLANG, *flags))["rows"]
        store = ingest(tmp_path, SGLANG, "sg", *FLAGS_8)
        by_store = json.loads(cli(*args, "--store", store, "--measured-points", "sg"))["rows"]
        # one measured point: the model's answer corrected by its residual (blended)
        assert by_file[0]["source"] == "blended" and by_file[0]["blend_points"] == 1
        assert by_store == by_file


class TestCostAtInteractivityFronts:
    def test_one_front_per_shape(self):
        """1K/1K: (50, 1000), (100, 500); 8K/1K: (50, 400), (100, 200). At 100 each shape
        answers from its own front; one front over both would say 500 for the pair."""
        df = pl.DataFrame({"hardware": ["b200"] * 4, "engine": ["sglang"] * 4,
                           "concurrency": [64, 8, 64, 8], "isl": [1024, 1024, 8192, 8192],
                           "osl": [1024] * 4, "tput_per_gpu": [1000.0, 500.0, 400.0, 200.0],
                           "median_interactivity": [50.0, 100.0, 50.0, 100.0],
                           "p90_ttft_s": [1.0] * 4})
        out = cost_at_interactivity(read_measurements(df), 100.0)
        assert out.select("isl", "osl", "n_points", "tput_per_gpu").rows() == [
            (1024, 1024, 2, 500.0), (8192, 1024, 2, 200.0)]

    def test_bundled_fronts_split_by_shape_and_precision(self):
        out = cost_at_interactivity(read_measurements(bundled_points_path()), 50.0)
        b200 = out.filter((pl.col("hardware") == "b200") & (pl.col("engine") == "trt"))
        assert sorted(b200.select("precision", "isl").rows()) == [
            ("fp4", 1024), ("fp4", 8192), ("fp8", 1024), ("fp8", 8192)]
        assert out.select("hardware", "engine", "model", "precision", "isl", "osl"
                          ).is_duplicated().sum() == 0

    def test_bench_file_direct(self, tmp_path):
        """The sglang sample straight in: its two shapes are two fronts of one point."""
        out = json.loads(cli("cost-at-interactivity", "--measurements", SGLANG, "--gpus", "8",
                             "--hardware", "h200", "--interactivity", "40", "--json"))
        assert [(r["isl"], r["osl"], r["tput_per_gpu"]) for r in out] == [
            (1024, 256, 320.0), (10, 5, 1.875)]
        store = ingest(tmp_path, SGLANG, "sg", "--gpus", "8", "--hardware", "h200")
        assert json.loads(cli("cost-at-interactivity", "--store", store, "--measured-points",
                              "sg", "--interactivity", "40", "--json")) == out
