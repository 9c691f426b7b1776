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
        with toolkit.open_store(tmp_path / "b") as store:
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

    def test_config_defaults_come_from_the_dataclass(self, tmp_path):
        """An unknown keyword is refused by the config, not silently dropped."""
        with toolkit.open(tmp_path / "s", create=True) as ws:
            ws.ingest(MOONCAKE, "mooncake", "conv")
            with pytest.raises(TypeError, match="capacity"):
                ws.replay_prefix("conv", capacity=64)


def test_import_toolkit_stays_light():
    """``import toolkit`` loads no DuckDB, Polars, Arrow or numba (the facade is lazy)."""
    code = ("import sys, toolkit\n"
            "print(','.join(m for m in ('duckdb', 'polars', 'pyarrow', 'numba')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == ""
