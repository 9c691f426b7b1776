"""Run identity of selection replays (issue 13 point 6): defaults are filled in before the
config is fingerprinted, and model / initial / kv_dtype are columns of selection_runs."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolkit
from tests.budget import examples
from toolkit.cli import app
from toolkit.ingest import ingest_file
from toolkit.models import get_model
from toolkit.replay.selections import SelectionReplayConfig, model_config, replay_selections

from .conftest import ROOT

runner = CliRunner()
SMOLLM2 = ROOT / "traces" / "smollm2"


@pytest.fixture
def sm_store(tmp_path):
    """The bundled real SmolLM2 selections (k = 64, 30 layers) as ``sm``."""
    with toolkit.open_store(tmp_path / "s", create=True) as s:
        ingest_file(s, "bundle", SMOLLM2, "sm", select="smollm2-softmax-sum")
        yield s


class TestDefaultsFilledBeforeFingerprint:
    def test_default_buffer_and_explicit_2k_are_one_run(self, sm_store):
        """No --buffer-tokens and --buffer-tokens 128 (= 2 x k) give one row, not two."""
        a = replay_selections(sm_store, SelectionReplayConfig("sm"), progress=False)
        b = replay_selections(sm_store, SelectionReplayConfig("sm", buffer_tokens=128),
                              progress=False)
        assert a["run_id"] == b["run_id"] and a["buffer_tokens"] == 128
        assert sm_store.query("SELECT count(*) FROM selection_runs").item() == 1
        assert sm_store.keys("selection_replay") == [a["run_id"]]
        assert (a["accesses"], a["misses"]) == (b["accesses"], b["misses"]) == (1_966_080,
                                                                              307_873)

    def test_cli_default_and_explicit_are_one_row(self, sm_store):
        """The same through the CLI."""
        base = ["replay", "selections", "--store", str(sm_store.root), "--trace", "sm", "--json"]
        assert runner.invoke(app, base).exit_code == 0
        assert runner.invoke(app, [*base, "--buffer-tokens", "128"]).exit_code == 0
        assert sm_store.query("SELECT count(*) FROM selection_runs").item() == 1
        assert runner.invoke(app, [*base, "--buffer-tokens", "64"]).exit_code == 0
        assert sm_store.query("SELECT count(*) FROM selection_runs").item() == 2

    @pytest.mark.slow
    @settings(max_examples=examples(50), deadline=None, derandomize=True)
    @given(k=st.integers(1, 1 << 20), mode=st.sampled_from(["plain", "hisparse"]),
           initial=st.sampled_from(["first", "empty"]))
    def test_resolved_config_is_the_fingerprinted_one(self, k, mode, initial):
        """For any k, leaving the buffer out and giving 2 x k yield the same run id, and a
        different buffer a different one."""
        cfg = SelectionReplayConfig("t", mode=mode, initial=initial)
        explicit = dataclasses.replace(cfg, buffer_tokens=2 * k)
        assert cfg.resolved(k).run_id() == explicit.resolved(k).run_id()
        other = dataclasses.replace(cfg, buffer_tokens=2 * k + 1)
        assert other.resolved(k).run_id() != explicit.resolved(k).run_id()


class TestColumns:
    def test_model_initial_kv_dtype_are_columns(self, sm_store):
        """A model-derived run records its model, start state and row format as columns."""
        replay_selections(sm_store, SelectionReplayConfig("sm"), progress=False)
        cfg = model_config(sm_store, "sm", get_model("glm-5.2"), kv_dtype="bf16", initial="empty")
        run = replay_selections(sm_store, cfg, progress=False)
        rows = sm_store.query(
            "SELECT model, initial, kv_dtype, row_bytes, indexshare FROM selection_runs "
            "ORDER BY model NULLS FIRST").rows()
        assert rows == [(None, "first", "fp8", 656, False),
                        ("glm-5.2", "empty", "bf16", 1152, True)]
        assert run["bytes_h2d"] == run["misses"] * 1152

    def test_cli_model_columns(self, sm_store):
        """`replay selections --model glm-5.2 --kv-dtype bf16` lands as columns."""
        res = runner.invoke(app, ["replay", "selections", "--store", str(sm_store.root),
                                  "--trace", "sm", "--model", "glm-5.2", "--kv-dtype", "bf16",
                                  "--json"])
        assert res.exit_code == 0, res.output
        assert sm_store.query("SELECT model, initial, kv_dtype FROM selection_runs").rows() == [
            ("glm-5.2", "first", "bf16")]

    def test_old_runs_without_the_columns_still_read(self, sm_store):
        """A summary written before the columns existed reads back with nulls."""
        import pyarrow as pa

        run = replay_selections(sm_store, SelectionReplayConfig("sm"), progress=False)
        old = sm_store.read("selection_runs", run["run_id"]).drop_columns(
            ["model", "initial", "kv_dtype"])
        sm_store.write("selection_runs", "old-run", old.set_column(
            0, "run_id", pa.array(["old-run"])), replace=True)
        assert sm_store.query("SELECT count(*) FROM selection_runs WHERE initial IS NULL"
                              ).item() == 1
