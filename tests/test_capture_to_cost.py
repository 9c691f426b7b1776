"""From an engine capture to a cost answer, all from the CLI (docs/selections.md walkthrough):
ingest the SYNTHETIC SGLang capture, replay it, price it with ``cost compare --selections``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.cli import app

from . import sglang_capture as cap

runner = CliRunner()


def ok(args):
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    d = tmp_path_factory.mktemp("capture")
    # longer requests than the default sample, so a buffer of 2 x k is outgrown
    path = cap.write(d / "responses.json", requests=((40, 30), (25, 20)))
    store = d / "store"
    out = ok(["ingest", "selections", str(path), "--format", "sglang-indexer-topk", "--k", "8",
              "--store", str(store), "--name", "cap"])
    assert out.splitlines()[0] == ("found 2 request(s), 3 indexer layer(s), k = 8: 65 prompt "
                                   "(prefill) position(s) -> selection_prefill, 48 decode "
                                   "step(s) -> selections")
    return store


def test_capture_replay_price(captured):
    """The replay's misses are the ones cost compare prices: miss ratio x the model's k per
    row; capacity gain and fetch cost decompose the HiSparse answer exactly."""
    rep = json.loads(ok(["replay", "selections", "--store", str(captured), "--trace", "cap",
                         "--mode", "hisparse", "--buffer-tokens", "16", "--model", "glm-5.2",
                         "--json"]))
    assert rep["rows"] == 48 * 3
    res = json.loads(ok(["cost", "compare", "--model", "glm-5.2", "--hardware", "gb200",
                         "--interactivity", "50", "--store", str(captured),
                         "--selections", "cap", "--buffer-tokens", "4096", "--json"]))
    sel = res["selections"]
    assert (sel["trace_buffer_tokens"], sel["rows"], sel["misses"]) == (16, 144, rep["misses"])
    from toolkit.replay.selection_scaling import scale_misses

    want = scale_misses(rep["misses"] / rep["accesses"], trace_k=8, model_k=2048,
                        buffer_ratio=2.0, context_tokens=sel["mean_seq_len"],
                        target_context_tokens=8192 + 1024 / 2)  # cost compare's isl, osl
    assert sel["miss_rows_per_layer"] == pytest.approx(want.rows)
    assert (sel["miss_rows_per_layer_low"], sel["miss_rows_per_layer_high"]) == pytest.approx(
        (want.rows_low, want.rows_high))
    assert "extrapolation" in sel["scaling"] and res["hisparse_overlap"] is False
    assert res["dsa_caveat"]
    (row,) = res["rows"]
    assert row["capacity_gain_usd_per_mtok"] == pytest.approx(
        row["usd_per_mtok_total"] - row["usd_per_mtok_total_buffer_only"])
    assert row["fetch_cost_usd_per_mtok"] == pytest.approx(
        row["usd_per_mtok_total_hisparse"] - row["usd_per_mtok_total_buffer_only"])
    assert row["fetch_cost_usd_per_mtok"] > 0  # misses cost time: never free
    # the extrapolated misses' band is priced too (no ordering asserted: cost compare's
    # per-target front choice is not monotone in misses, see the report of issue 52)
    assert row["usd_per_mtok_total_misses_low"] > 0 and row["usd_per_mtok_total_misses_high"] > 0


def test_selections_flags_refused(captured):
    base = ["cost", "compare", "--model", "glm-5.2", "--hardware", "gb200"]
    res = runner.invoke(app, [*base, "--buffer-tokens", "4096"])
    assert res.exit_code == 2 and "apply to --selections" in res.output
    res = runner.invoke(app, [*base, "--selections", "cap"])
    assert res.exit_code == 2 and "--selections needs --store" in res.output
    res = runner.invoke(app, [*base, "--selections", "nope", "--store", str(captured)])
    assert res.exit_code == 2 and "no selection trace named 'nope'" in res.output
    res = runner.invoke(app, [*base[:3], "dsr1", "--hardware", "gb200", "--selections", "cap",
                              "--store", str(captured)])
    assert res.exit_code == 2 and "dense model" in res.output
