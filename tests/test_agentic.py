"""Synthetic agentic sessions: schema, determinism, chaining, and calibration targets."""

from __future__ import annotations

import numpy as np
import pytest

from toolkit import schema
from toolkit.policies import policies
from toolkit.replay.prefix import block_stream, summarize
from toolkit.synth.agentic import PRESETS, AgenticConfig, describe, generate


def _cache_ratio(table):
    s = block_stream(table)
    sim = policies.get("lru").simulate(s.keys, s.n_keys, s.n_keys)
    return summarize(s, sim.hits)["prefix_token_hit_ratio"]


class TestGenerate:
    def test_schema_and_labels(self):
        """Emits the requests schema with session ids and turns; the config says synthetic."""
        t = generate(AgenticConfig(sessions=3, seed=1), "a")
        assert t.schema == schema.REQUESTS
        assert t["session_id"].null_count == 0 and t["turn"].null_count == 0
        assert describe(AgenticConfig())["synthetic"] is True

    def test_seeded(self):
        """Same seed, same table; another seed, another table."""
        a = generate(AgenticConfig(sessions=5, seed=3))
        assert a.equals(generate(AgenticConfig(sessions=5, seed=3)))
        assert not a.equals(generate(AgenticConfig(sessions=5, seed=4)))

    def test_turns_extend_previous_context(self):
        """Turn t+1's pages start with turn t's full pages; sessions share system pages."""
        cfg = AgenticConfig(sessions=2, turns_min=3, turns_max=3, seed=2)
        rows = generate(cfg).to_pylist()
        by = {(r["session_id"], r["turn"]): r for r in rows}
        a, b = by[(0, 0)], by[(0, 1)]
        full = a["input_tokens"] // cfg.page_tokens
        assert b["block_hashes"][:full] == a["block_hashes"][:full]
        assert b["input_tokens"] > a["input_tokens"]
        sys_pages = cfg.system_prompt_tokens // cfg.page_tokens
        assert by[(1, 0)]["block_hashes"][:sys_pages] == a["block_hashes"][:sys_pages]
        assert by[(1, 0)]["block_hashes"][sys_pages] != a["block_hashes"][sys_pages]
        assert len(a["block_hashes"]) == -(-a["input_tokens"] // cfg.page_tokens)


class TestCalibration:
    def test_toolagent_matches_mooncake_table2(self):
        """Mooncake tool&agent: mean input 8,596 (within 5%), output 182 (5%), cache 59% (2 pp)."""
        t = generate(PRESETS["toolagent"])
        assert np.mean(t["input_tokens"]) == pytest.approx(8_596, rel=0.05)
        assert np.mean(t["output_tokens"]) == pytest.approx(182, rel=0.05)
        assert _cache_ratio(t) == pytest.approx(0.59, abs=0.02)

    def test_coding_is_long_and_reused(self):
        """Coding agents: ISL/OSL >> 100 and most prompt tokens reusable (exact, seeded)."""
        t = generate(PRESETS["coding"])
        isl_osl = np.sum(t["input_tokens"]) / np.sum(t["output_tokens"])
        assert isl_osl > 100
        assert t.num_rows == 5_199
        assert _cache_ratio(t) == pytest.approx(0.9452, abs=1e-4)
