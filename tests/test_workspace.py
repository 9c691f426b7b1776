"""The notebook facade: ``toolkit.open(path)`` and its verbs hand off to the library."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit
from toolkit.errors import StoreError, ToolkitError

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"


class TestOpen:
    def test_missing_path_is_an_error_and_creates_nothing(self, tmp_path):
        """Without create=True a typo in the path names the path and the fix."""
        where = tmp_path / "nope"
        with pytest.raises(StoreError, match=r"nope.*create=True"):
            toolkit.open(where)
        assert not where.exists()

    def test_create_makes_an_empty_store(self, tmp_path):
        """create=True starts a new store; reopening it needs no flag."""
        with toolkit.open(tmp_path / "s", create=True) as ws:
            assert ws.traces() == {"requests": [], "selections": []}
        with toolkit.open(tmp_path / "s") as ws:
            assert ws.store.root == (tmp_path / "s").resolve()

    def test_ingest_needs_a_format(self, tmp_path):
        """Formats share extensions, so the facade does not guess one."""
        with toolkit.open(tmp_path / "s", create=True) as ws, \
                pytest.raises(ToolkitError, match="format=.*mooncake"):
            ws.ingest(MOONCAKE)


class TestVerbs:
    def test_replay_and_query_equal_the_direct_calls(self, tmp_path):
        """ingest, replay_prefix, query and sql give what the library functions give."""
        from toolkit.analysis.queries import run_query
        from toolkit.ingest import ingest_file
        from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix

        with toolkit.open(tmp_path / "a", create=True) as ws:
            res = ws.ingest(MOONCAKE, "mooncake", "conv")
            assert (res.trace, res.table) == ("conv", "requests")
            assert ws.traces()["requests"] == ["conv"]
            got = ws.replay_prefix("conv", capacity_blocks=64)
            got_q = ws.query("prefix_runs")
            got_sql = ws.sql("SELECT count(*) AS n FROM requests WHERE trace = $t",
                             {"t": "conv"})
        with toolkit.open_store(tmp_path / "b", create=True) as store:
            ingest_file(store, "mooncake", MOONCAKE, "conv")
            want = replay_prefix(store, PrefixReplayConfig("conv", capacity_blocks=64))
            want_q = run_query(store, "prefix_runs")
            n = store.query("SELECT count(*) AS n FROM requests WHERE trace = 'conv'")
        def timeless(d):
            return {k: v for k, v in d.items() if k != "elapsed_s"}

        assert timeless(got) == timeless(want)
        drop = [c for c in got_q.columns if "elapsed" in c]
        assert got_q.drop(drop).equals(want_q.drop(drop))
        assert got_sql.equals(n) and got_sql["n"][0] > 0

    def test_tier_selection_engram_and_curve_verbs_equal_the_direct_calls(self, tmp_path):
        """replay_tiers/replay_engram time and price like cost's run_tiers/run_engram;
        replay_selections and miss_curve give the replay functions' results."""
        from toolkit.cost.engram import run_engram
        from toolkit.cost.from_replay import run_tiers
        from toolkit.engram.hashing import EngramConfig
        from toolkit.engram.record import record_engram
        from toolkit.replay.config import EngramReplayConfig, SelectionReplayConfig
        from toolkit.replay.mrc import miss_curve_table
        from toolkit.replay.selections import replay_selections
        from toolkit.replay.tiers import TierReplayConfig, summary_json

        def timeless(d):  # wall times (elapsed_s, load_s) differ between any two runs
            return {k: v for k, v in d.items() if "elapsed" not in k and k != "load_s"}

        with toolkit.open(tmp_path / "s", create=True) as ws:
            ws.ingest(MOONCAKE, "mooncake", "mc")
            ws.ingest(ROOT / "traces" / "smollm2", "bundle", "sm",
                      select="smollm2-softmax-sum")
            record_engram(ws.store, "heapq", [ROOT / "traces/smollm2/texts/heapq.py.txt"],
                          EngramConfig())
            st = ws.store
            tiers = ws.replay_tiers("mc", hardware="mi355x", concurrency=8)
            assert timeless(summary_json(tiers)) == timeless(summary_json(run_tiers(
                st, TierReplayConfig("mc", "mi355x", concurrency=8), save=False)))
            assert summary_json(tiers)["usd_per_million_total_tokens"] is not None
            sel = ws.replay_selections("sm", policy="opt", buffer_tokens=96, mode="plain")
            assert timeless(sel) == timeless(replay_selections(
                st, SelectionReplayConfig("sm", "opt", 96, mode="plain"), save=False))
            eng = ws.replay_engram("heapq", 1e6, backing="ssd")
            assert timeless(eng) == timeless(run_engram(
                st, EngramReplayConfig("heapq", 1e6, backing="ssd"), save=False))
            curve = ws.miss_curve("sm", "selections", 200, save=False)
            assert curve.equals(miss_curve_table(st, "sm", "selections", 200, save=False))
            assert st.keys("tier_runs") and st.keys("engram_runs")

    def test_sweep_verbs_equal_the_direct_calls(self, tmp_path):
        """sweep_prefix, sweep and sweep_query give what the sweep functions give."""
        from toolkit.analysis import sweep_query
        from toolkit.ingest import ingest_file
        from toolkit.replay.prefix import sweep_prefix
        from toolkit.sweep import run

        grid = tmp_path / "g.toml"
        grid.write_text('kind = "prefix"\ntrace = "conv"\n[axes]\n'
                        'policy = ["lru", "fifo"]\ncapacity_blocks = [16, 64]\n')
        with toolkit.open(tmp_path / "a", create=True) as ws:
            ws.ingest(MOONCAKE, "mooncake", "conv")
            got = ws.sweep_prefix("conv", [16, None], workers=1)
            res = ws.sweep(grid, workers=1)
            got_q = ws.sweep_query("sweep_cells", res.sweep_id)
        with toolkit.open_store(tmp_path / "b", create=True) as store:
            ingest_file(store, "mooncake", MOONCAKE, "conv")
            want = sweep_prefix(store, "conv", [16, None], workers=1)
            want_res = run(store, grid, workers=1)
            want_q = sweep_query(store, "sweep_cells", want_res.sweep_id)
        assert [_timeless(r) for r in got] == [_timeless(r) for r in want]
        # the lru cell at 16 blocks is sweep_prefix's run, so the sweep skips it
        assert (res.cells, res.ran, res.skipped) == (want_res.cells, want_res.ran,
                                                     want_res.skipped) == (4, 3, 1)
        assert got_q.drop("seconds").equals(want_q.drop("seconds")) and got_q.height == 4

    def test_synth_verbs_store_what_the_generators_make(self, tmp_path):
        """synth_selections stores generate()'s tables; synth_agentic the preset's timeline
        with overrides, labelled SYNTHETIC in request_traces as the CLI labels it."""
        import dataclasses

        import polars as pl

        from toolkit.synth import agentic, selections

        with toolkit.open(tmp_path / "s", create=True) as ws:
            rows = ws.synth_selections("syn", prompt_tokens=300, steps=4, layers=2, k=128,
                                       sinks=4, recent_window=16)
            want = selections.generate(selections.SyntheticSelectionConfig(
                prompt_tokens=300, steps=4, layers=2, k=128, sinks=4, recent_window=16), "syn")
            assert rows == want["selections"].num_rows == 8
            for table, data in want.items():
                assert ws.store.read(table, "syn").equals(data), table
            n = ws.synth_agentic("agents", "toolagent", sessions=5, seed=3)
            cfg = dataclasses.replace(agentic.PRESETS["toolagent"], sessions=5, seed=3)
            assert ws.store.read("requests", "agents").equals(agentic.generate(cfg, "agents"))
            assert n == ws.store.read("requests", "agents").num_rows
            meta = pl.from_arrow(ws.store.read("request_traces", "agents")).row(0, named=True)
            assert meta["synthetic"] and meta["source"].startswith("SYNTHETIC")
            with pytest.raises(KeyError, match="coding"):
                ws.synth_agentic("x", "nope")

    def test_load_verbs_and_rows_reuse_equal_the_direct_calls(self, tmp_path):
        """load_rows/load_dense read what the replay modules read; replaying preloaded rows
        gives the replay that reads them itself; record_engram stores what the recorder
        stores."""
        import numpy as np

        from toolkit.engram.hashing import EngramConfig
        from toolkit.engram.record import record_engram
        from toolkit.replay.engram import load_dense
        from toolkit.replay.selections import load_rows

        text = ROOT / "traces/smollm2/texts/heapq.py.txt"
        with toolkit.open(tmp_path / "s", create=True) as ws:
            ws.ingest(ROOT / "traces" / "smollm2", "bundle", "sm",
                      select="smollm2-softmax-sum")
            rows = ws.load_rows("sm")
            want = load_rows(ws.store, "sm")
            assert rows.k == want.k and np.array_equal(rows.values, want.values)
            cfg = dict(policy="lru", buffer_tokens=2 * rows.k, save=False)
            assert _timeless(ws.replay_selections("sm", rows=rows, **cfg)) == _timeless(
                ws.replay_selections("sm", **cfg))
            res = ws.record_engram("heapq", [str(text)], heads=4)
            record_engram(ws.store, "heapq2", [text], EngramConfig(heads=4))
            assert res.lookups == ws.store.read("engram_lookups", "heapq2").num_rows
            dense = ws.load_dense("heapq")
            assert np.array_equal(dense.keys, load_dense(ws.store, "heapq2").keys)

    def test_pricing_verbs_equal_the_direct_calls(self, tmp_path):
        """hardware/model look specs up; compare, record_serving_fronts, record_replay_cost,
        hisparse_columns and prefix_columns hand off with the configs the keywords make."""
        from toolkit.cost.compare import compare
        from toolkit.cost.config import CompareConfig
        from toolkit.cost.records import (
            DecodeCostConfig,
            record_replay_cost,
            record_serving_fronts,
        )
        from toolkit.hardware import get_hardware
        from toolkit.models import get_model
        from toolkit.serving.reuse import hisparse_columns, prefix_columns

        with toolkit.open(tmp_path / "s", create=True) as ws:
            assert ws.hardware("gb200") == get_hardware("gb200")
            assert ws.model("glm-5.2") == get_model("glm-5.2")
            cfg = CompareConfig(model="dsr1", hardware=("gb200", "mi355x"),
                                interactivity=(100.0,), max_p90_ttft_s=5.0)
            got = ws.compare("dsr1", ["gb200", "mi355x"], interactivity=[100.0],
                             max_p90_ttft_s=5.0)
            assert got.equals(compare(cfg))
            assert ws.compare("dsr1", "gb200,mi355x", interactivity=[100.0],
                              max_p90_ttft_s=5.0).equals(got)
            run_id = ws.record_serving_fronts("dsr1", ["gb200", "mi355x"],
                                              interactivity=[100.0], max_p90_ttft_s=5.0)
            fronts = ws.store.read("serving_fronts", run_id)
            assert record_serving_fronts(ws.store, cfg) == run_id
            assert ws.store.read("serving_fronts", run_id).equals(fronts)

            ws.ingest(ROOT / "traces" / "smollm2", "bundle", "sm",
                      select="smollm2-softmax-sum")
            sel = ws.replay_selections("sm", policy="lru")
            cost = ws.record_replay_cost(sel["run_id"], hardware="mi355x", batch_per_gpu=8,
                                         miss_scale=32.0)
            assert cost == record_replay_cost(ws.store, DecodeCostConfig(
                sel["run_id"], hardware="mi355x", batch_per_gpu=8, miss_scale=32.0))
            assert ws.hisparse_columns(sel["run_id"], "glm-5.2") == hisparse_columns(
                ws.store, sel["run_id"], get_model("glm-5.2"))

            ws.ingest(MOONCAKE, "mooncake", "mc")
            tiers = ws.replay_tiers("mc", concurrency=4)
            run_id = tiers.summary["run_id"]
            assert ws.prefix_columns(run_id) == prefix_columns(ws.store, run_id)

    def test_config_defaults_come_from_the_dataclass(self, tmp_path):
        """An unknown keyword is refused by the config, not silently dropped."""
        with toolkit.open(tmp_path / "s", create=True) as ws:
            ws.ingest(MOONCAKE, "mooncake", "conv")
            with pytest.raises(TypeError, match="capacity"):
                ws.replay_prefix("conv", capacity=64)


def _timeless(d):
    """A run summary without its wall times, which differ between any two runs."""
    return {k: v for k, v in d.items() if "elapsed" not in k and k != "load_s"}


def test_import_toolkit_stays_light():
    """``import toolkit`` loads no DuckDB, Polars, Arrow or numba (the facade is lazy)."""
    code = ("import sys, toolkit\n"
            "print(','.join(m for m in ('duckdb', 'polars', 'pyarrow', 'numba')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == ""
