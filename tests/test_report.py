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


@pytest.fixture(scope="module")
def messy_store(tmp_path_factory):
    """A store as a real user's looks after a few sessions: two traces, closed-loop tier
    runs at 8 and 16 users on two accelerators, and a capacity plan per trace whose
    replays (other host and SSD sizes, other users) join tier_runs; a cost compare run."""
    import toolkit
    from toolkit.cost.compare import CompareConfig
    from toolkit.cost.from_replay import run_tiers
    from toolkit.ingest import ingest_file
    from toolkit.plan.search import PlanConfig, plan
    from toolkit.replay.prefix import sweep_prefix
    from toolkit.replay.tiers import TierReplayConfig
    from toolkit.sweep.kinds import run_compare

    root = tmp_path_factory.mktemp("messy") / "store"
    with toolkit.open_store(root, create=True) as s:
        for name in ("mc_a", "mc_b"):
            ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", name)
            sweep_prefix(s, name, [1_000, 10_000])
            for hw in ("gb200", "mi355x"):
                for users in (8, 16):
                    run_tiers(s, TierReplayConfig(name, hw, "glm-5.2", concurrency=users))
            plan(s, PlanConfig(name, "glm-5.2", ("gb200", "mi355x"),
                               host_dram_gb=(0.0, 512.0), ssd_gb=(0.0, 4096.0),
                               prefix_reserve=(0.0,), policy=("lru",)), progress=False)
        run_compare(s, CompareConfig(model="glm-5.2", hardware=("gb200", "mi355x"),
                                     interactivity=(60.0, 100.0)))
        yield s


@pytest.fixture(scope="module")
def messy_report(messy_store, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("messy_report") / "report"
    write_report(messy_store, out, title="A real user's store")
    return out


def _datasets(spec: dict) -> dict[str, list[dict]]:
    return spec.get("datasets", {})


class TestRealUsersStore:
    """Issue 51 point 1: a store with several traces, plans and tier configurations."""

    def test_no_stacked_share_exceeds_one(self, messy_store):
        """Every stacked share chart (tier reuse, plan hit shares) sums to at most 100% per
        bar: a bar is one run or one plan, never several stacked."""
        figs = {f.stem: f for f in build_report(messy_store).figures}
        assert {"tier_reuse", "plan_cost", "plan_hits"} <= set(figs)
        for stem, key in (("tier_reuse", ("trace", "hardware", "run_id")),
                          ("plan_hits", ("trace", "hardware", "plan_id"))):
            rows = [r for d in _datasets(figs[stem].chart.to_dict()).values() for r in d]
            sums: dict[tuple, float] = {}
            for r in rows:
                k = tuple(r[c] for c in key)
                sums[k] = sums.get(k, 0.0) + r["share"]
            assert sums and max(sums.values()) <= 1.0 + 1e-9, (stem, max(sums.values()))
            assert len({k[0] for k in sums}) == 2  # both traces drawn, in their own panels
        spec = figs["tier_reuse"].chart.to_dict()
        assert spec["facet"]["row"]["field"] == "trace"
        assert spec["facet"]["column"]["field"] == "hardware"

    def test_fronts_never_join_traces(self, messy_store):
        """The cost fronts are drawn per (source, trace): the line's detail names both."""
        figs = {f.stem: f for f in build_report(messy_store).figures}
        spec = figs["cost_vs_interactivity_tiers"].chart.to_dict()
        lines = [lyr for lyr in spec["layer"] if lyr["mark"]["type"] == "line"]
        assert lines and lines[0]["encoding"]["detail"]["field"] == "front"
        rows = _datasets(spec)[lines[0]["data"]["name"]]
        assert all(r["front"] == f"{r['source']} {r['trace']}" for r in rows)

    def test_like_for_like_captions(self, messy_store):
        """The load sentence compares only runs that differ in users alone, and names
        them; the plan section names each trace's plan and target."""
        figs = {f.stem: f.explanation for f in build_report(messy_store).figures}
        assert re.search(r"between runs that differ only in their number of users",
                         figs["tier_reuse"])
        assert "mc_a (plan plan-mc_a-" in figs["plan_cost"]
        assert "mc_b (plan plan-mc_b-" in figs["plan_cost"]
        assert "target 100 tok/s/user" in figs["plan_cost"]

    def test_plan_section_and_toc(self, messy_report):
        """The capacity-plan section has its charts and the best plan per accelerator
        (headline and section); the page opens with a table of contents linking every
        section and chart; charts carry legend selections and drop-downs."""
        page = (messy_report / "index.html").read_text()
        toc = page[page.index("<nav id='toc'>"):page.index("</nav>")]
        for key in ("headline", "prefix", "tiers", "cost", "plan", "provenance", "runs"):
            assert f"href='#{key}'" in toc
        for stem in ("plan_cost", "plan_hits", "tier_reuse", "cost_compare_band"):
            assert f"href='#chart-{stem}'" in toc
        assert page.count("Capacity plan: best plan per accelerator") == 1
        assert "Best plan per accelerator (latest plan of each trace" in page
        assert '"bind": "legend"' in page and '"input": "select"' in page
        assert '"input": "range"' in page  # the target-interactivity slider

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
        # the terminal tables' header ($ in the name), broken between words
        assert "overflow-x: auto" in page and "<th title='usd_per_mtok_total'>$/Mtok "\
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
        assert divs == [f"chart-{f.stem}" for f in figs] and len(divs) == 15  # 2 of the plan
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


@pytest.mark.parametrize("which", ["report_dir", "messy_report"])
def test_renders_in_headless_chromium(which, request):
    """Chromium runs the page offline: every chart div holds an SVG with marks, no chart is
    taller than 1,600 px or wider than 1,400 px (a real user's store: two traces, plans,
    several tier configurations), and the console stays silent; the screenshot is kept in
    build/test-artifacts/."""
    report_dir = request.getfixturevalue(which)
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
        size = re.search(r'<svg[^>]*width="([\d.]+)"[^>]*height="([\d.]+)"', m.group(0))
        assert size and float(size.group(1)) <= 1400 and float(size.group(2)) <= 1600, (
            div, size and size.groups())
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{which}.png"
    subprocess.run([*flags, "--window-size=1200,7000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:4] == b"\x89PNG"
