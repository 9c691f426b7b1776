"""Locality statistics and the synthetic generator, on hand-built and synthetic traces."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from toolkit.analysis.locality import indexshare_overlap, layer_overlap, position_mix, step_overlap
from toolkit.ingest.selections import SelectionColumns, TraceMeta, build_tables
from toolkit.replay.selections import anchor_layers
from toolkit.synth.selections import SyntheticSelectionConfig, generate


def hand_trace(store):
    """2 steps x 2 layers, k=3, seq_len 10/11 (positions hand-picked)."""
    lists = [[0, 1, 9], [0, 5, 9], [0, 1, 10], [2, 5, 10]]  # (s0,l0) (s0,l1) (s1,l0) (s1,l1)
    offsets = np.array([0, 3, 6, 9, 12])
    cols = SelectionColumns(np.zeros(4, np.int64), np.array([0, 0, 1, 1]),
                            np.array([0, 1, 0, 1]), np.array([10, 10, 11, 11]), offsets,
                            np.array(sum(lists, []), dtype=np.int64))
    store.write_many(build_tables("h", cols, TraceMeta(k=3), lambda e: e), "h")


class TestLocality:
    def test_position_mix(self, store):
        hand_trace(store)
        df = position_mix(store, "h", window=2, sinks=1)
        # layer 0: {0,1,9},{0,1,10}: recent (pos >= seq_len-2) = 9, 10 -> 2/6; sinks: 0,0 -> 2/6
        assert df.select("layer", "frac_recent", "frac_sinks", "pos0_rate").rows() == [
            (0, 2 / 6, 2 / 6, 1.0), (1, 2 / 6, 1 / 6, 0.5)]

    def test_layer_and_step_overlap(self, store):
        hand_trace(store)
        lo = layer_overlap(store, "h").row(0, named=True)
        # step 0: {0,1,9}&{0,5,9} = 2 -> J = 2/4; step 1: {0,1,10}&{2,5,10} = 1 -> J = 1/5
        assert lo["pairs"] == 2
        assert lo["jaccard"] == pytest.approx((2 / 4 + 1 / 5) / 2)
        assert lo["overlap_of_k"] == pytest.approx((2 / 3 + 1 / 3) / 2)
        so = step_overlap(store, "h").rows()
        # layer 0: {0,1,9}&{0,1,10} = 2 -> J 2/4; layer 1: {0,5,9}&{2,5,10} = 1 -> J 1/5
        assert so == [("h", 0, 1, pytest.approx(2 / 4), pytest.approx(2 / 3)),
                      ("h", 1, 1, pytest.approx(1 / 5), pytest.approx(1 / 3))]

    def test_indexshare_overlap_matches_layer_overlap_for_adjacent_anchor(self, store):
        hand_trace(store)
        df = indexshare_overlap(store, "h", (0,))
        assert df.rows() == [(1, 0, 2, pytest.approx((2 / 4 + 1 / 5) / 2),
                              pytest.approx((2 / 3 + 1 / 3) / 2))]


def test_anchor_layers_glm52_rule():
    """GLM-5.2 pattern on 10 layers: Full = 0, 1, 2, 6; others reuse the nearest before."""
    full = tuple(i for i in range(10) if i < 3 or (i - 2) % 4 == 0)
    assert anchor_layers(np.arange(10), full).tolist() == [0, 1, 2, 2, 2, 2, 6, 6, 6, 6]


class TestSynthetic:
    def test_labelled_deterministic_and_valid(self):
        cfg = SyntheticSelectionConfig(prompt_tokens=3_000, steps=5, layers=3, k=256, sinks=8,
                                       recent_window=32, seed=7)
        a, b = generate(cfg, "s"), generate(cfg, "s")
        assert a["selections"].equals(b["selections"])
        meta = a["selection_traces"].to_pylist()[0]
        assert meta["synthetic"] is True and meta["source"].startswith("SYNTHETIC")
        assert a["selection_requests"].column("source_text").to_pylist() == ["synthetic"]
        for row in a["selections"].to_pylist():
            topk, n = row["topk"], row["seq_len"]
            assert len(topk) == 256 == len(set(topk)) and max(topk) < n
            assert set(range(8)) | set(range(n - 32, n)) <= set(topk)

    def test_retention_one_keeps_middle_set(self):
        """step_retention=1 and layer_retention=1: the middle set never changes."""
        cfg = SyntheticSelectionConfig(prompt_tokens=2_000, steps=4, layers=2, k=64, sinks=4,
                                       recent_window=8, step_retention=1.0,
                                       layer_retention=1.0)
        rows = generate(cfg, "s")["selections"].to_pylist()
        mids = {frozenset(p for p in r["topk"] if 4 <= p < r["seq_len"] - 8) for r in rows}
        assert len(mids) == 1

    def test_short_context_selects_everything(self):
        t = generate(SyntheticSelectionConfig(prompt_tokens=10, steps=2, layers=1, k=64,
                                              sinks=4, recent_window=8), "s")["selections"]
        assert t.column("topk").to_pylist() == [list(range(11)), list(range(12))]

    def test_bad_config(self):
        with pytest.raises(ValueError, match="sinks \\+ recent_window"):
            SyntheticSelectionConfig(k=10, sinks=8, recent_window=8)


def test_build_tables_types():
    t = generate(SyntheticSelectionConfig(prompt_tokens=5, steps=1, layers=1, k=8, sinks=1,
                                          recent_window=1), "s")["selections"]
    assert t.schema.field("topk").type.value_type == pa.int32()
