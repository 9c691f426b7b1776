"""`toolkit report`: one offline index.html with a section per analysis, plus SVG and PNG
per chart; opened in headless Chromium to check that every chart really renders."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.report import build_report, chart_divs, write_report

from .conftest import ROOT

ARTIFACTS = ROOT / "build" / "test-artifacts"
runner = CliRunner()


@pytest.fixture(scope="module")
def report_dir(analysis_store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report"
    write_report(analysis_store, out, title="Test report")
    return out


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class TestReportFiles:
    def test_sections_headline_provenance_runs(self, report_dir, analysis_store):
        """Every analysis present gets its section; headline rows name their runs; every
        hardware used has provenance rows; every run is listed."""
        page = (report_dir / "index.html").read_text()
        for key in ("prefix", "selections", "tiers", "cost", "engram", "model_vs_measured",
                    "provenance", "runs"):
            assert f"<h2 id='{key}'>" in page
        for caption in ("Best online policy per buffer size", "Hit rates per tier",
                        "Lowest $ per M total tokens per hardware"):
            assert caption in page
        assert "sel-smollm2-hisparse-lru-64-" in page  # the best policy's run id
        assert page.count("<td>survey</td>") >= 2  # gb200 and mi355x prices
        for run_id in analysis_store.query("SELECT run_id FROM tier_runs")["run_id"]:
            assert run_id in page

    def test_headline_says_what_it_compared(self, report_dir, analysis_store):
        """The best-policy headline names the online policies it chose among."""
        page = (report_dir / "index.html").read_text()
        online = analysis_store.query("SELECT DISTINCT policy FROM selection_runs WHERE "
                                      "policy NOT IN ('opt', 'opt-bypass')")["policy"]
        if len(online) == 1:
            assert (f"Best online policy per buffer size (only {online[0]} was replayed, "
                    "so nothing was compared)") in page
        else:
            assert f"of the {len(online)} online policies replayed" in page

    def test_every_chart_says_what_it_shows_from_the_data(self, analysis_store):
        """Each figure's sentence carries a figure computed from the store; the tier chart
        says how reuse moves with load and the latency CDF names its assumption."""
        figs = {f.stem: f.explanation for f in build_report(analysis_store).figures}
        assert all(re.search(r"\d", text) for text in figs.values()), figs
        assert re.search(r"Across 8/16 users overall reuse moves by (at most|up to) "
                         r"\d+\.\d+ points", figs["tier_reuse"])
        assert re.search(r"assumed \d\.\d\d µs round trip is \d+\.\d% of the median",
                         figs["miss_latency_cdf"])

    def test_tables_readable_and_provenance_collapsed(self, report_dir):
        """Numbers carry separators and units; the provenance table sits in a collapsed
        section; wide tables scroll instead of overflowing; headers break between words."""
        page = (report_dir / "index.html").read_text()
        prov = page[page.index("<h2 id='provenance'>"):page.index("<h2 id='runs'>")]
        assert "<details><summary>Every field of the 2 hardware spec(s)" in prov
        assert "8,000 GB/s" in prov and "8000000000000.0" not in prov
        assert "206 GB (192 GiB)" in prov and "1.3 µs" in prov
        assert "overflow-x: auto" in page and "<th title='usd_per_mtok_total'>usd per mtok "\
            "total</th>" in page

    def test_self_contained(self, report_dir):
        """All JavaScript inline: no script or stylesheet is fetched from anywhere."""
        page = (report_dir / "index.html").read_text()
        assert not re.search(r"<script[^>]+src=", page)
        assert not re.search(r"<link[^>]+href=", page)
        assert "vegaEmbed" in page and len(page) > 500_000

    def test_svg_and_png_per_chart(self, report_dir, analysis_store):
        """One SVG and one PNG per chart div, each non-trivial."""
        figs = build_report(analysis_store).figures
        divs = chart_divs((report_dir / "index.html").read_text())
        assert divs == [f"chart-{f.stem}" for f in figs] and len(divs) == 13
        for f in figs:
            assert (report_dir / f"{f.stem}.svg").read_text().startswith("<svg")
            assert (report_dir / f"{f.stem}.png").read_bytes()[:4] == b"\x89PNG"

    def test_cli(self, analysis_store, tmp_path):
        """`toolkit report --store DIR --out DIR --title T`."""
        res = runner.invoke(app, ["report", "--store", str(analysis_store.root), "--out",
                                  str(tmp_path / "r"), "--title", "CLI title"])
        assert res.exit_code == 0, res.output
        assert "<h1>CLI title</h1>" in (tmp_path / "r" / "index.html").read_text()

    def test_missing_store_is_an_error(self, tmp_path):
        """A store that does not exist is an error, and no report is written."""
        res = runner.invoke(app, ["report", "--store", str(tmp_path / "none"), "--out",
                                  str(tmp_path / "r")])
        assert res.exit_code == 2 and not (tmp_path / "r").exists()


def test_renders_in_headless_chromium(report_dir):
    """Chromium runs the page offline: every chart div holds an SVG with marks and the
    console stays silent; the screenshot is kept in build/test-artifacts/report.png."""
    exe = _chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed and could not be (make test installs "
                    "it with apt-get when run as root)")
    page = (report_dir / "index.html").resolve()
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--virtual-time-budget=30000", "--enable-logging=stderr", "--v=0"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True)
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    divs = chart_divs(page.read_text())
    for div in divs:
        m = re.search(rf'<div id="{div}"[^>]*>(.*?)</svg>', dom.stdout, re.S)
        assert m, f"{div}: no SVG rendered"
        assert len(re.findall(r'class="mark-', m.group(1))) >= 2, f"{div}: no marks"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    subprocess.run([*flags, "--window-size=1200,7000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:4] == b"\x89PNG"
