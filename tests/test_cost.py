"""Cost layer: transfer model vs published measurements, InferenceX arithmetic, Steffen
interpolation on a Pareto front, and the CLI commands (the decode step: test_scenario.py)."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.budget import examples
from toolkit.commands.cost import cost_cmd, hardware_app
from toolkit.cost import (
    MeasurementError,
    cost_at_interactivity,
    cost_matrix,
    cost_ratio,
    pareto_front,
    quote,
    read_measurements,
    steffen_interpolate,
    tokens_per_s_per_gpu_for_cost,
    usd_per_million_tokens,
)
from toolkit.hardware import get_hardware
from toolkit.serving.transfer import bw_eff, sm_kernel_bandwidth_bytes_per_s, transfer_path


class TestTransfer:
    def test_formula(self):
        """BW_eff(s) = s / (t_fixed + s / BW_peak), exactly."""
        assert bw_eff(8192, 0.5e-6, 52e9) == pytest.approx(8192 / (0.5e-6 + 8192 / 52e9))
        assert np.allclose(bw_eff([1e12], 1e-6, 10e9), 10e9, rtol=1e-6)

    def test_pcie_gen5_8kib_batched(self):
        """H100 PCIe Gen5, 8 KiB pages with batched descriptors: measured 12.5-15 GB/s
        (vllm PR #48434); the fit gives 12.46 GB/s."""
        bw = transfer_path(get_hardware("h100"), "batch_descriptor").bw_eff(8192)
        assert bw == pytest.approx(12.46e9, rel=1e-3)
        assert bw == pytest.approx(12.5e9, rel=0.03)

    def test_gb300_large_h2d(self):
        """GB300 copy engine, 256 MiB: ~211 GB/s one GPU, 168.6-175.4 all GPUs (#6491)."""
        hw = get_hardware("gb300")
        single = transfer_path(hw, "ce_call").bw_eff(256 * 2**20)
        assert single == pytest.approx(211e9, rel=0.005)
        conc = transfer_path(hw, "ce_call", concurrent=True).bw_eff(256 * 2**20)
        assert 168.6e9 <= conc <= 175.4e9

    def test_gb200_tray_concurrency(self):
        """All GPUs of a GB200 tray share the Grace link: 170 vs 200 GB/s per GPU."""
        hw = get_hardware("gb200")
        assert transfer_path(hw, "ce_call", concurrent=True).bw_peak_bytes_per_s == 170e9
        assert transfer_path(hw, "ce_call").bw_peak_bytes_per_s == 200e9

    def test_sm_kernel_per_cta(self):
        """GB300 register-staging kernel: 64 KB in flight / 1.3 µs = 50.4 GB/s per CTA
        (published 'about 48'); the default 2 CTAs give 100.8 (published ~90); 5 saturate."""
        hw = get_hardware("gb300")
        assert sm_kernel_bandwidth_bytes_per_s(hw, ctas=1) == pytest.approx(48e9, rel=0.06)
        assert sm_kernel_bandwidth_bytes_per_s(hw) == pytest.approx(65536 * 2 / 1.3e-6)
        assert sm_kernel_bandwidth_bytes_per_s(hw) == pytest.approx(90e9, rel=0.15)
        assert sm_kernel_bandwidth_bytes_per_s(hw, ctas=8) == 211.5e9

    def test_row_gathers_need_kernels(self):
        """A 656 B row per descriptor moves at ~1.3 GB/s; a gather kernel at ~100 GB/s."""
        hw = get_hardware("gb300")
        dma = transfer_path(hw, "batch_descriptor").bw_eff(656)
        assert dma == pytest.approx(656 / (0.5e-6 + 656 / 211.5e9))
        kernel = transfer_path(hw, "sm_kernel").bw_eff(656, n_runs=2048)
        assert kernel / dma > 50

    def test_time_zero_runs(self):
        """Nothing to move costs nothing, even for a per-call mechanism."""
        assert transfer_path(get_hardware("gb300"), "sm_kernel").time_s(0, 656) == 0.0

    def test_unknown_mechanism(self):
        """A mechanism typo lists the valid ones."""
        with pytest.raises(ValueError, match="sm_kernel"):
            transfer_path(get_hardware("gb300"), "nvlink")


class TestPrice:
    def test_gb200_0044(self):
        """GB200 at $1.86/GPU-hr and 11,742 tok/s/GPU is $0.0440/M (published GLM-5.3)."""
        assert round(usd_per_million_tokens(1.86, 11_742), 4) == 0.0440
        assert usd_per_million_tokens(1.86, 11_742) == pytest.approx(1.86 / 42.2712, rel=1e-12)
        assert usd_per_million_tokens(1.86, 11_742) == pytest.approx(0.0440016, abs=5e-8)

    def test_inverse(self):
        """$0.044/M at $1.86/GPU-hr needs 11,742.4 tok/s/GPU."""
        assert tokens_per_s_per_gpu_for_cost(1.86, 0.044) == pytest.approx(11_742.42, abs=0.01)

    def test_gb300_vs_gb200(self):
        """17.5% more throughput at $2.31 vs $1.86 leaves GB300 5.70% dearer per token."""
        r = cost_ratio(2.31, 1.175, 1.86, 1.0)
        assert r == (2.31 / 1.86) / 1.175
        assert round(r, 4) == 1.0570
        gb200 = quote(get_hardware("gb200"), 11_742)
        gb300 = quote(get_hardware("gb300"), 11_742 * 1.175)
        assert gb300.usd_per_million_tokens / gb200.usd_per_million_tokens == pytest.approx(r)

    def test_output_token_cost(self):
        """$5.92/M output at $1.86 means 87.3 output tok/s/GPU; total/output ratio ~134."""
        assert tokens_per_s_per_gpu_for_cost(1.86, 5.92) == pytest.approx(87.27, abs=0.01)
        assert 5.92 / 0.044 == pytest.approx(134.5, abs=0.1)

    def test_quote_tiers(self):
        """Each tier uses its own price and names its survey."""
        hw = get_hardware("gb200")
        q = quote(hw, 11_742, "rental")
        assert (q.usd_per_gpu_hour, q.survey) == (4.00, "2026-07")
        assert q.usd_per_million_tokens == pytest.approx(4.00 / (11_742 * 0.0036))
        assert quote(hw, 11_742, "neocloud").usd_per_gpu_hour == 2.26
        assert quote(hw, 11_742, survey="2025-08").usd_per_gpu_hour == 2.21

    def test_cost_matrix(self):
        """3 tiers x 3 token types; the output row divides by output throughput."""
        df = cost_matrix(get_hardware("gb200"), 11_742, 11_654.6, 87.4)
        assert df.height == 9
        row = df.filter(
            (pl.col("price_tier") == "hyperscaler") & (pl.col("token_type") == "output")
        )
        assert row["usd_per_million_tokens"][0] == pytest.approx(1.86 / (87.4 * 0.0036))

    def test_nonpositive_throughput(self):
        """Zero throughput is an error, not an infinite cost."""
        with pytest.raises(ValueError, match="> 0"):
            usd_per_million_tokens(1.86, 0)


class TestSteffen:
    X = np.array([20.0, 50.0, 100.0, 150.0, 300.0])
    Y = np.array([30_000.0, 22_000.0, 15_000.0, 11_742.0, 2_000.0])

    def test_passes_through_points(self):
        """The interpolant equals the data at every knot."""
        assert np.allclose(steffen_interpolate(self.X, self.Y, self.X), self.Y, rtol=1e-12)

    def test_monotone_between_points(self):
        """Decreasing data give a decreasing curve with no overshoot."""
        grid = np.linspace(self.X[0], self.X[-1], 2001)
        y = steffen_interpolate(self.X, self.Y, grid)
        assert np.all(np.diff(y) <= 1e-9)
        assert y.max() <= self.Y.max() and y.min() >= self.Y.min()

    def test_linear_data_stay_linear(self):
        """Collinear points are reproduced exactly between knots."""
        x = np.array([0.0, 1.0, 3.0, 4.0])
        assert steffen_interpolate(x, 2 * x + 1, 2.5) == pytest.approx(6.0)

    def test_clamps_outside_range(self):
        """Targets outside the knots take the nearest edge value (InferenceX clamps)."""
        assert steffen_interpolate(self.X, self.Y, [0.0, 1e6]).tolist() == [30_000.0, 2_000.0]

    @pytest.mark.slow
    @settings(max_examples=examples(60), deadline=None)
    @given(
        st.lists(st.floats(0.1, 100.0), min_size=2, max_size=12),
        st.lists(st.floats(0.0, 1000.0), min_size=12, max_size=12),
    )
    def test_monotone_property(self, dx, dy):
        """Any increasing data give an increasing interpolant within the data range."""
        x = np.cumsum(dx)
        y = np.cumsum(dy[: len(dx)])
        grid = np.linspace(x[0], x[-1], 400)
        v = steffen_interpolate(x, y, grid)
        assert np.all(np.diff(v) >= -1e-9 * max(1.0, y.max()))
        assert v.min() >= y.min() - 1e-9 and v.max() <= y.max() + 1e-9 * max(1.0, y.max())


class TestPareto:
    def test_front(self):
        """Dominated points drop out; the front is sorted by interactivity."""
        x = np.array([10, 20, 20, 30, 40, 15.0])
        y = np.array([100, 90, 80, 95, 50, 60.0])
        # (20,90) and (15,60) are beaten by (30,95); (20,80) by (20,90)
        idx = pareto_front(x, y)
        assert list(zip(x[idx], y[idx], strict=True)) == [(10, 100), (30, 95), (40, 50)]


def _points(tmp_path, ext="csv"):
    df = pl.DataFrame(
        {
            "hardware": ["gb200"] * 4 + ["gb300"] * 3 + ["mi355x"] * 2,
            "engine": ["dynamo-sglang"] * 4 + ["dynamo-trt"] * 3 + ["atom"] * 2,
            "concurrency": [256, 128, 64, 32, 256, 128, 64, 128, 64],
            "tput_per_gpu": [
                20_000.0,
                11_742.0,
                6_000.0,
                5_000.0,
                23_500.0,
                11_742 * 1.175,
                7_000.0,
                12_000.0,
                9_000.0,
            ],
            "median_interactivity": [80.0, 150.0, 200.0, 190.0, 80.0, 150.0, 220.0, 90.0, 160.0],
            "p90_ttft_s": [19.0, 14.0, 8.0, 9.0, 10.0, 6.0, 3.0, 1.2, 1.1],
        }
    )
    path = tmp_path / f"points.{ext}"
    df.write_parquet(path) if ext == "parquet" else df.write_csv(path)
    return path


class TestCostAtInteractivity:
    def test_knot_reproduces_published_cost(self, tmp_path):
        """At a measured 150 tok/s/user, GB200 costs $0.0440/M and GB300/GB200 = 1.0570."""
        df = cost_at_interactivity(read_measurements(_points(tmp_path)), 150.0)
        gb200 = df.filter(pl.col("hardware") == "gb200").row(0, named=True)
        gb300 = df.filter(pl.col("hardware") == "gb300").row(0, named=True)
        assert gb200["n_points"] == 4 and gb200["n_front"] == 3  # (190, 5000) dominated
        assert gb200["tput_per_gpu"] == pytest.approx(11_742.0)
        assert round(gb200["usd_per_million_tokens"], 4) == 0.0440
        assert not gb200["clamped"] and gb200["survey"] == "2026-07"
        ratio = gb300["usd_per_million_tokens"] / gb200["usd_per_million_tokens"]
        assert ratio == pytest.approx((2.31 / 1.86) / 1.175)

    def test_between_knots_and_clamped(self, tmp_path):
        """Between knots the value lies between neighbours; outside the range it clamps."""
        m = read_measurements(_points(tmp_path, "parquet"))
        at120 = cost_at_interactivity(m, 120.0)
        row = at120.filter(pl.col("hardware") == "gb200").row(0, named=True)
        assert 11_742.0 < row["tput_per_gpu"] < 20_000.0
        at200 = cost_at_interactivity(m, 200.0)
        mi = at200.filter(pl.col("hardware") == "mi355x").row(0, named=True)
        assert mi["clamped"] and mi["tput_per_gpu"] == 9_000.0

    def test_ttft_filter_and_prices(self, tmp_path):
        """max_p90_ttft_s drops slow points before the front; prices can be overridden."""
        m = read_measurements(_points(tmp_path))
        df = cost_at_interactivity(
            m, 150.0, max_p90_ttft_s=2.0, prices_usd_per_gpu_hour={"mi355x": 1.0}
        )
        assert df["hardware"].to_list() == ["mi355x"]
        assert df["usd_per_gpu_hour"][0] == 1.0 and df["survey"][0] == "user supplied"

    def test_missing_column_named(self, tmp_path):
        """A file without a required column names the file and the column."""
        path = tmp_path / "bad.csv"
        pl.DataFrame({"hardware": ["gb200"], "engine": ["x"]}).write_csv(path)
        with pytest.raises(MeasurementError, match="bad.csv.*tput_per_gpu"):
            read_measurements(path)


@pytest.fixture
def cli():
    app = typer.Typer()
    app.add_typer(hardware_app, name="hardware")
    app.command("cost")(cost_cmd)
    return app


class TestCli:
    def test_list(self, cli):
        """hardware list shows every accelerator."""
        res = CliRunner().invoke(cli, ["hardware", "list"])
        assert res.exit_code == 0, res.output
        for name in ("gb200", "gb300", "mi355x", "h100"):
            assert name in res.output

    def test_show(self, cli):
        """hardware show prints value, kind and source."""
        res = CliRunner().invoke(cli, ["hardware", "show", "gb300"])
        assert res.exit_code == 0, res.output
        line = next(x for x in res.output.splitlines() if x.startswith("h2d_single_bytes_per_s"))
        # the value in its unit (211.5 GB/s = 2.115e11 B/s); the source may sit in a panel of
        # its own when the table is wider than the terminal
        assert "211.5 GB/s" in line and "measured" in line and "Megatron-LM" in res.output

    def test_show_unknown(self, cli):
        """An unknown name fails with the known names, no traceback."""
        res = CliRunner().invoke(cli, ["hardware", "show", "tpu"])
        assert res.exit_code == 2 and "gb200" in res.output

    def test_cost_json(self, cli):
        """cost --json prints exactly the documented keys and the $0.0440/M figure."""
        res = CliRunner().invoke(
            cli, ["cost", "--hardware", "gb200", "--tokens-per-s-per-gpu", "11742", "--json"]
        )
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert set(out) == {
            "hardware",
            "price_tier",
            "survey",
            "usd_per_gpu_hour",
            "usd_per_million_tokens",
        }
        assert out["usd_per_gpu_hour"] == 1.86 and out["survey"] == "2026-07"
        assert round(out["usd_per_million_tokens"], 4) == 0.0440

    def test_cost_tier_text(self, cli):
        """--price-tier rental uses $4.00/GPU-hr."""
        res = CliRunner().invoke(
            cli,
            [
                "cost",
                "--hardware",
                "GB200",
                "--tokens-per-s-per-gpu",
                "11742",
                "--price-tier",
                "rental",
            ],
        )
        assert res.exit_code == 0, res.output
        assert "usd_per_gpu_hour        4\n" in res.output

    def test_cost_bad_tier(self, cli):
        """A bad tier is a one-line error."""
        res = CliRunner().invoke(
            cli,
            ["cost", "--hardware", "gb200", "--tokens-per-s-per-gpu", "1", "--price-tier", "spot"],
        )
        assert res.exit_code == 2 and "hyperscaler" in res.output
