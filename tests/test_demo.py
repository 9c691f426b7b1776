"""`make demo` end to end on the bundled traces, so CI catches a broken main job."""

from __future__ import annotations

import re

from toolkit.demo import run_demo

from .conftest import ROOT


def test_demo_writes_report_and_summaries(tmp_path, monkeypatch):
    # xdist workers set COLUMNS=80, where the table renderer wraps cells mid-phrase
    monkeypatch.setenv("COLUMNS", "400")
    lines: list[str] = []
    html = run_demo(tmp_path / "store", tmp_path / "report", ROOT / "traces", echo=lines.append)
    out = "\n".join(lines)
    assert html.is_file() and html.stat().st_size > 100_000  # JS inlined: works offline
    assert html.name == "index.html"
    for stem in ("prefix_hit_ratio", "miss_ratio_curve", "tier_reuse", "step_time",
                 "cost_vs_interactivity_decode", "cost_vs_interactivity_tiers",
                 "model_vs_measured", "cost_compare_band"):
        assert (tmp_path / "report" / f"{stem}.svg").is_file()
        assert (tmp_path / "report" / f"{stem}.png").is_file()
    assert "ingested 12,031 requests" in out and "ingested 8,819 requests" in out
    assert "0.3664" in out and "0.3736" in out  # unbounded block / token hit ratio
    # tiers under SGLang radix semantics (the default since issue 16; page: 0.0671 / 0.0787),
    # timed by the fitted serving model
    assert "GPU hit 0.0689, host hit 0.0804, overall 0.1493" in out
    assert "0.1566" in out  # HiSparse LRU miss ratio at 2k on the real SmolLM2 trace
    # serving model: held-out errors over all 300 InferenceX points, then GLM-5.2 $/M
    assert "leave-one-hardware-out" in out and re.search(r"^all +300 ", out, re.M)
    assert "GLM-5.2 $/M tokens (agentic mix" in out and "reachable" in out
    assert "edge = true: within 15% of the front's end" in out
    # the DSA caveat states each measured source's direction and size, not a fixed word
    assert "sparse-attention (DSA) model" in out and "(over by " in out
    # one cost story: the HiSparse replay priced by the same model, against no offload
    assert "every time below" in out and "The same model with HiSparse offload" in out
    assert out.count("no offload") >= 3 and "overlapped" in out
    # its misses reach k = 2048 by the measured scaling fit, with its band and range, not
    # by the constant k ratio (x32)
    assert "extrapolation from a 135M dense model's selections" in out
    assert "k 2048 beyond the measured 16-512" in out and "$/Mtok_total_high" in out
    assert "scaled to k = 2048: an assumption" not in out
    for hw in ("gb200", "gb300", "mi355x"):
        assert hw in out


def test_demo_with_a_wrong_traces_dir_creates_nothing(tmp_path):
    """Every bundled input is checked before the store is opened: exit 2, one line, and
    neither the store nor the report directory exists afterwards."""
    from typer.testing import CliRunner

    from toolkit.cli import app

    res = CliRunner().invoke(app, ["demo", "--store", str(tmp_path / "s"), "--report",
                                   str(tmp_path / "r"), "--traces", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "no bundled trace at" in res.output
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()
