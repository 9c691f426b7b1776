"""Selection replay (plain and HiSparse modes) against a plain-Python model of the rules."""

from __future__ import annotations

import json
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolkit
from tests.budget import examples
from toolkit.errors import ToolkitError
from toolkit.ingest import ingest_file
from toolkit.replay.selections import SelectionReplayConfig, replay_selections


def reference(rows, n, mode, initial="first"):
    """Per-row hits, one OrderedDict LRU per (request, layer); rows = (req, step, layer,
    seq_len, positions), any order."""
    hits = {}
    groups: dict[tuple[int, int], list] = {}
    for r in rows:
        groups.setdefault((r[0], r[2]), []).append(r)
    for g in groups.values():
        cache: OrderedDict[int, None] | None = OrderedDict() if mode == "plain" else None
        for req, step, layer, seq_len, pos in sorted(g, key=lambda r: r[1]):
            h = 0
            if mode == "hisparse" and seq_len <= n:
                hits[(req, step, layer)] = len(pos)
                continue
            if cache is None:
                cache = OrderedDict((i, None) for i in range(n)) if initial == "first" else \
                    OrderedDict()
            for p in sorted(pos):
                if mode == "hisparse" and p == seq_len - 1:
                    h += 1
                elif p in cache:
                    h += 1
                    cache.move_to_end(p)
                else:
                    cache[p] = None
                    if len(cache) > n:
                        cache.popitem(last=False)
            hits[(req, step, layer)] = h
    return hits


def make_store(tmp_path, rows, k):
    lines = [json.dumps({"event": "dsa_topk", "request_id": r, "layer_id": la, "step_idx": s,
                         "seq_len_current": sl, "selected_token_pos": list(p)})
             for r, s, la, sl, p in rows]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    store = toolkit.open_store(tmp_path / "store", create=True)
    ingest_file(store, "dsa-jsonl", path, "t", k=k, replace=True)
    return store


@st.composite
def traces(draw):
    rows = []
    for req in range(draw(st.integers(1, 2))):
        prompt = draw(st.integers(1, 12))
        layers = draw(st.integers(1, 3))
        for step in range(draw(st.integers(1, 12))):
            seq_len = prompt + step + 1
            for layer in range(layers):
                pos = draw(st.sets(st.integers(0, seq_len - 1), max_size=min(4, seq_len)))
                rows.append((req, step, layer, seq_len, tuple(pos)))
    return rows


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(rows=traces(), n=st.integers(1, 10), mode=st.sampled_from(["plain", "hisparse"]),
       initial=st.sampled_from(["first", "empty"]))
def test_per_row_hits_match_reference(tmp_path_factory, rows, n, mode, initial):
    """Property: every (request, step, layer) row's hit count equals the reference model's."""
    store = make_store(tmp_path_factory.mktemp("sel"), rows, k=4)
    with store:
        cfg = SelectionReplayConfig("t", buffer_tokens=n, mode=mode,
                                    initial=initial if mode == "hisparse" else "first")
        s = replay_selections(store, cfg)
        got = {(r, st_, la): h for r, st_, la, h in store.query(
            f"SELECT request_id, step, layer, hits FROM selection_replay "
            f"WHERE run_id = '{s['run_id']}'").rows()}
    assert got == reference(rows, n, mode, initial if mode == "hisparse" else "first")
    assert s["hits"] + s["misses"] == s["accesses"] == sum(len(r[4]) for r in rows)
    assert s["bytes_h2d"] == s["misses"] * 656


class TestHiSparseRules:
    def test_fast_path_and_newest_slot(self, tmp_path):
        """N=2: steps at seq_len <= 2 are free; the newest token never misses."""
        rows = [(0, 0, 0, 2, (0, 1)), (0, 1, 0, 3, (0, 2)), (0, 2, 0, 4, (2, 3)),
                (0, 3, 0, 5, (1, 2))]
        with make_store(tmp_path, rows, k=2) as store:
            s = replay_selections(store, SelectionReplayConfig("t", buffer_tokens=2))
            per = store.query("SELECT step, hits, misses, fast_path FROM selection_replay "
                              "ORDER BY step").rows()
        # step 1: buffer {0,1} (first N tokens), 0 hits, 2 is newest. step 2: 2 was the newest
        # token last step, now only on host -> miss (evicts 1); 3 newest. step 3: 1 miss, 2 hit.
        assert per == [(0, 2, 0, True), (1, 2, 0, False), (2, 1, 1, False), (3, 1, 1, False)]
        assert s["fast_path_rows"] == 1 and s["evictions"] == 2

    def test_default_buffer_is_twice_k(self, tmp_path):
        rows = [(0, 0, 0, 9, (0, 8)), (0, 1, 0, 10, (1, 9))]
        with make_store(tmp_path, rows, k=2) as store:
            assert replay_selections(store, SelectionReplayConfig("t"))["buffer_tokens"] == 4

    def test_indexshare_shared_layer_replays_full_layer(self, tmp_path):
        """With Full layer 0, layer 1's own (different) selection is ignored: same misses."""
        rows = [(0, s, la, 6 + s, (0, 5) if la == 0 else (1, 2)) for s in range(5)
                for la in range(2)]
        rows = [(r, s, la, sl, tuple(sorted({p if p < sl else sl - 1 for p in pos} | {s + 1})))
                for r, s, la, sl, pos in rows]
        with make_store(tmp_path, rows, k=3) as store:
            replay_selections(store, SelectionReplayConfig("t", buffer_tokens=2,
                                                           full_layers=(0,)))
            per = store.query("SELECT layer, list(misses ORDER BY step) AS m FROM "
                              "selection_replay GROUP BY layer ORDER BY layer").rows()
        assert per[0][1] == per[1][1]

    def test_indexshare_missing_anchor_layer(self, tmp_path):
        rows = [(0, 0, 1, 6, (0,)), (0, 0, 2, 6, (1,))]
        with make_store(tmp_path, rows, k=1) as store, pytest.raises(
                ToolkitError, match="needs Full layer 0"):
            replay_selections(store, SelectionReplayConfig("t", full_layers=(0, 2)))

    def test_unknown_trace(self, tmp_path):
        with toolkit.open_store(tmp_path / "s", create=True) as store, pytest.raises(
                ToolkitError, match="no selection trace 'x'"):
            replay_selections(store, SelectionReplayConfig("x"))


def test_segments_restart_cold():
    """Two (request, layer) buffers never share state: same stream twice, same hits."""
    from toolkit.replay.selections import SelectionRows, plan

    vals = np.array([0, 1, 2, 0, 1, 2], dtype=np.int64)
    rows = SelectionRows(np.array([0, 1]), np.array([0, 0]), np.array([0, 0]),
                         np.array([9, 9]), np.array([0, 3, 6]), vals, 3)
    p = plan(rows, 2, "plain", "first")
    assert p.segments.tolist() == [0, 3]


def test_miss_curve_equals_per_size_replays(store):
    """SYNTHETIC trace: the one-pass curve equals plain-mode replays at every probed size."""
    from toolkit.replay.mrc import miss_curve_table
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    cfg = SyntheticSelectionConfig(requests=2, prompt_tokens=900, steps=12, layers=3, k=128,
                                   sinks=8, recent_window=32, seed=3)
    store.write_many(generate(cfg, "syn"), "syn")
    curve = miss_curve_table(store, "syn", "selections", 600)
    stop = curve.num_rows - 1  # at most 600, and the trace's distinct positions
    positions = {p for t in store.read("selections", "syn").column("topk").to_pylist()
                 for p in t}
    assert stop == min(600, len(positions))
    assert store.query("SELECT count(*) FROM miss_curves").item() == stop + 1
    for n in (1, 100, 128, 200, 256, 600):
        run = replay_selections(store, SelectionReplayConfig("syn", buffer_tokens=n,
                                                             mode="plain"), save=False)
        assert curve.column("misses")[min(n, stop)].as_py() == run["misses"]


def test_prefix_miss_curve_matches_golden(mooncake_store):
    """Mooncake blocks: the curve at 1,000 and 10,000 blocks equals the golden LRU counts."""
    from toolkit.replay.mrc import miss_curve_table

    curve = miss_curve_table(mooncake_store, "conv", "prefix", 10_000, save=False)
    misses = curve.column("misses").to_numpy()
    assert misses[1_000] == 288_500 - 12_831 and misses[10_000] == 288_500 - 60_921


def test_chunked_replay_equals_whole(store):
    """Replaying in chunks of whole requests (bounded memory) changes no count or row."""
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    cfg = SyntheticSelectionConfig(requests=5, prompt_tokens=700, steps=6, layers=4, k=64,
                                   sinks=4, recent_window=16, seed=9)
    store.write_many(generate(cfg, "syn"), "syn")
    for mode, shared in (("plain", None), ("hisparse", (0, 2))):
        c = SelectionReplayConfig("syn", "opt", 100, mode=mode, full_layers=shared)
        whole = replay_selections(store, c, max_rows=10**9)
        per_whole = store.query(f"SELECT * FROM selection_replay WHERE run_id = "
                                f"'{whole['run_id']}' ORDER BY request_id, layer, step")
        chunked = replay_selections(store, c, max_rows=7)  # one request (24 rows) per chunk
        per_chunked = store.query(f"SELECT * FROM selection_replay WHERE run_id = "
                                  f"'{chunked['run_id']}' ORDER BY request_id, layer, step")
        drop = ("elapsed_s",)
        assert {k: v for k, v in whole.items() if k not in drop} == {
            k: v for k, v in chunked.items() if k not in drop}
        assert per_whole.equals(per_chunked)


def test_failed_replay_leaves_no_partial_results(store, monkeypatch):
    """An error mid-replay writes neither the run row nor a partial per-row file."""
    from toolkit.replay import selections as sel
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    store.write_many(generate(SyntheticSelectionConfig(requests=3, prompt_tokens=300, steps=2,
                                                       layers=2, k=32, sinks=2,
                                                       recent_window=4), "syn"), "syn")
    calls = {"n": 0}
    real = sel._replay_chunk

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(sel, "_replay_chunk", flaky)
    with pytest.raises(RuntimeError, match="disk full"):
        replay_selections(store, SelectionReplayConfig("syn"), max_rows=1)
    assert store.keys("selection_replay") == [] and store.keys("selection_runs") == []
