"""Compiled selection planning, worker threads, streaming synthesis and progress (issue 11)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolkit
from tests.budget import examples
from toolkit.cli import app
from toolkit.ingest import ingest_file
from toolkit.ingest.selections import SelectionColumns, validate
from toolkit.replay.mrc import lru_miss_curve, miss_curve_table
from toolkit.replay.prefix import sweep_prefix
from toolkit.replay.selection_plan import fused_plan
from toolkit.replay.selections import (
    SelectionReplayConfig,
    SelectionRows,
    _order,
    plan,
    replay_selections,
    rows_from_table,
)
from toolkit.synth.selections import SyntheticSelectionConfig
from toolkit.synth.selections_fast import request_table, write_streaming

SMALL = SyntheticSelectionConfig(requests=5, prompt_tokens=150, steps=6, layers=4, k=64,
                                 sinks=4, recent_window=8, seed=11)


@st.composite
def raw_rows(draw):
    """Rows in a random stored order, each list in random (score-like) order."""
    rows = []
    for req in range(draw(st.integers(1, 3))):
        prompt = draw(st.integers(1, 10))
        layers = draw(st.integers(1, 3))
        for step in range(draw(st.integers(1, 8))):
            seq_len = prompt + step + 1
            for layer in range(layers):
                pos = draw(st.lists(st.integers(0, seq_len - 1), unique=True,
                                    max_size=min(5, seq_len)))
                rows.append((req, step, layer, seq_len, pos))
    return draw(st.permutations(rows))


def as_rows(rows, dtype=np.int32) -> SelectionRows:
    lengths = [len(r[4]) for r in rows]
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    vals = np.array([p for r in rows for p in r[4]], dtype=dtype)
    col = [np.array([r[i] for r in rows], dtype=np.int64) for i in range(4)]
    return SelectionRows(col[0], col[1], col[2], col[3], offsets.astype(dtype), vals, 5)


def reference_and_fused_plans(raw: SelectionRows, o, n: int):
    """The NumPy reference plan and the compiled planner's, hisparse from a warm buffer."""
    import pyarrow as pa

    ref = plan(rows_from_table(pa.table({
        "request_id": raw.request_id, "step": raw.step, "layer": raw.layer,
        "seq_len": raw.seq_len,
        "topk": pa.ListArray.from_arrays(pa.array(raw.offsets), pa.array(raw.values))}),
        5), n, "hisparse", "first")
    return ref, fused_plan(raw.values, raw.offsets, o.src, o.seq_len, o.new_group, n,
                           "hisparse", "first")


class TestFusedPlan:
    @pytest.mark.slow
    @settings(max_examples=examples(60), deadline=None)
    @given(rows=raw_rows(), n=st.integers(1, 8), mode=st.sampled_from(["plain", "hisparse"]),
           initial=st.sampled_from(["first", "empty"]))
    def test_equals_numpy_plan(self, rows, n, mode, initial):
        """Differential: the compiled planner on unsorted int32 rows gives the NumPy
        reference plan's stream, segments and per-row split on the sorted int64 rows."""
        raw = as_rows(rows)
        o = _order(raw, None)
        got = fused_plan(raw.values, raw.offsets, o.src, o.seq_len, o.new_group, n, mode,
                         initial)
        import pyarrow as pa

        ref_rows = rows_from_table(pa.table({
            "request_id": raw.request_id, "step": raw.step, "layer": raw.layer,
            "seq_len": raw.seq_len,
            "topk": pa.ListArray.from_arrays(pa.array(raw.offsets), pa.array(raw.values))}), 5)
        ref = plan(ref_rows, n, mode, initial)
        assert got.keys.tolist() == ref.keys.tolist()
        assert got.segments.tolist() == ref.segments.tolist()
        assert got.fast_path.tolist() == ref.fast_path.tolist()
        counted = np.bincount(ref.row_of, minlength=raw.request_id.size)
        assert got.row_policy.tolist() == counted.tolist()
        assert (np.diff(ref_rows.offsets) - counted).tolist() == ref.free_hits.tolist()

    def test_rows_ordered_through_an_index(self):
        """Rows already in (request, layer, step) order are read in place; step-major rows
        (as recorders write them) are visited through a permutation, lists not moved."""
        done = as_rows([(0, 0, 0, 9, [1, 2]), (0, 1, 0, 10, [2, 3]), (0, 0, 1, 9, [4])])
        assert _order(done, None).src.tolist() == [0, 1, 2]
        step_major = as_rows([(0, 0, 0, 9, [1]), (0, 0, 1, 9, [2]), (0, 1, 0, 10, [3])])
        o = _order(step_major, None)
        assert o.src.tolist() == [0, 2, 1]
        assert o.new_group.tolist() == [True, False, True]


class PlannedLRU:
    """LRU without its fused row kernel: replay then plans a key stream, runs the LRU
    kernel on it and folds the hits back into rows (the path every other policy takes)."""

    name = "lru"

    def simulate(self, *args, **kwargs):
        from toolkit.policies.lru import LRU

        return LRU().simulate(*args, **kwargs)


class TestFusedLRU:
    """LRU's fused row kernel (planning, policy and fold in one pass) against the planned
    path through the plain LRU kernel: the same per-row hits, fast-path flags and
    evictions on unsorted rows and lists, both modes, both initial states, IndexShare."""

    @pytest.mark.slow
    @settings(max_examples=examples(80), deadline=None)
    @given(rows=raw_rows(), n=st.integers(1, 8), mode=st.sampled_from(["plain", "hisparse"]),
           initial=st.sampled_from(["first", "empty"]), share=st.booleans(),
           dtype=st.sampled_from([np.int32, np.int64]))
    def test_equals_planned_path(self, rows, n, mode, initial, share, dtype):
        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        raw = as_rows(rows, dtype)
        full = (0,) if share and mode == "hisparse" else None
        cfg = SelectionReplayConfig("t", "lru", n, mode=mode, initial=initial,
                                    full_layers=full)
        try:
            o = _order(raw, full)
        except toolkit.ToolkitError:  # IndexShare without the Full layer's row
            return
        n_keys = int(max(raw.seq_len.max(initial=0), 1))
        got = _replay_part(raw, o, 0, o.src.size, n, n_keys, cfg, policies.get("lru"))
        want = _replay_part(raw, o, 0, o.src.size, n, n_keys, cfg, PlannedLRU())
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()
        assert got[2] == want[2]

    def test_replay_results_equal(self, store, monkeypatch):
        """Through replay_selections, on the bundled real trace: the whole summary."""
        from pathlib import Path

        from toolkit.policies import policies

        ingest_file(store, "bundle", Path(__file__).resolve().parents[1] / "traces" / "smollm2",
                     "smollm2", select="smollm2-softmax-sum")
        for mode in ("plain", "hisparse"):
            cfg = SelectionReplayConfig("smollm2", "lru", 96, mode=mode)
            fused = replay_selections(store, cfg, save=False, progress=False, workers=1)
            with monkeypatch.context() as m:
                m.setitem(policies._items, "lru", PlannedLRU())
                planned = replay_selections(store, cfg, save=False, progress=False,
                                            workers=1)
            for key in ("hits", "misses", "evictions", "fast_path_rows", "accesses"):
                assert fused[key] == planned[key], key

    def test_newest_token_twice_is_free_on_both_paths(self):
        """Rows not from the store may repeat a position; every copy of the newest token
        is a free hit on both paths and in the NumPy reference (a row of only the newest
        token, twice, used to put one key outside every segment)."""

        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        rows = [(0, 0, 0, 6, [1, 2, 3]), (0, 1, 0, 7, [6, 3, 6]), (0, 2, 0, 8, [7, 7]),
                (1, 0, 0, 6, [5, 5]), (1, 1, 0, 7, [0, 6, 1, 6])]
        raw = as_rows(rows)
        o = _order(raw, None)
        cfg = SelectionReplayConfig("t", "lru", 2, mode="hisparse")
        got = _replay_part(raw, o, 0, o.src.size, 2, 8, cfg, policies.get("lru"))
        want = _replay_part(raw, o, 0, o.src.size, 2, 8, cfg, PlannedLRU())
        assert got[0].tolist() == want[0].tolist() and got[2] == want[2]
        ref, p = reference_and_fused_plans(raw, o, 2)
        assert p.keys.tolist() == ref.keys.tolist()
        assert p.segments.tolist() == ref.segments.tolist()
        assert (got[0] - want[0]).tolist() == [0] * len(rows)
        assert got[0].tolist()[3] == 2  # [5, 5] at seq_len 6: both the newest token

    def test_newest_token_before_later_positions(self):
        """An ascending row from a caller may hold positions past its newest token; the
        newest is then not last, and the shortcut that looks only at the last position
        must not apply: planner and fused kernel agree with the NumPy reference."""

        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        rows = [(0, 0, 0, 6, [1, 5, 7]), (0, 1, 0, 7, [0, 6]), (0, 2, 0, 9, [2, 8]),
                (0, 3, 0, 10, [3, 9])]
        raw = as_rows(rows)
        o = _order(raw, None)
        cfg = SelectionReplayConfig("t", "lru", 2, mode="hisparse")
        got = _replay_part(raw, o, 0, o.src.size, 2, 10, cfg, policies.get("lru"))
        ref, p = reference_and_fused_plans(raw, o, 2)
        assert p.keys.tolist() == ref.keys.tolist()
        # warm-up 0, 1; then 1 7 (5, the newest, is free), 0, 2, 3 (6, 8, 9 free)
        assert p.keys.tolist() == [0, 1, 1, 7, 0, 2, 3]
        # by hand, 2 slots: row 0 hits 1 and gets 5 free; each later row only its newest
        assert got[0].tolist() == [2, 1, 1, 1] and got[2] == 4

    @pytest.mark.parametrize("lists", [[[0, 2**32 + 1]], [[2**32 + 1, 0, 1]]])
    def test_positions_beyond_int32_refused(self, lists):
        """int64 rows (the NumPy path, rows= from a caller): a position the int32 key
        stream cannot hold is refused on both paths, never narrowed to another key."""
        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        raw = as_rows([(0, 0, 0, 2**33, lists[0])], np.int64)
        o = _order(raw, None)
        cfg = SelectionReplayConfig("t", "lru", 1, mode="plain")
        for policy in (policies.get("lru"), PlannedLRU()):
            with pytest.raises(ValueError):
                _replay_part(raw, o, 0, o.src.size, 1, 2**33, cfg, policy)

    def test_position_out_of_range_is_refused(self):
        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        raw = as_rows([(0, 0, 0, 4, [1, 2]), (0, 1, 0, 5, [0, 9])])  # 9 >= max seq_len
        o = _order(raw, None)
        cfg = SelectionReplayConfig("t", "lru", 2, mode="plain")
        with pytest.raises(ValueError, match="request 0, layer 0, step 1"):
            _replay_part(raw, o, 0, o.src.size, 2, 5, cfg, policies.get("lru"))

    def test_sparse_key_space_takes_the_planned_path(self):
        """Positions near 10**9 in a few rows: the fused kernel would size its links by
        the key space; the planned path compacts the keys instead."""
        from toolkit.policies import policies
        from toolkit.replay.selections import _replay_part

        big = 10**9
        raw = as_rows([(0, 0, 0, big, [5, big - 2]), (0, 1, 0, big + 1, [5, big])])
        o = _order(raw, None)
        cfg = SelectionReplayConfig("t", "lru", 1, mode="plain")
        got = _replay_part(raw, o, 0, o.src.size, 1, big + 1, cfg, policies.get("lru"))
        assert got[0].tolist() == [0, 0] and got[2] == 3


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(-3, 40)),
                     max_size=60),
       step_major=st.booleans(), wide=st.booleans())
def test_layer_major_equals_lexsort(rows, step_major, wide):
    """The counting sort of step-major rows gives lexsort's (request, layer, step) order,
    ties included; rows in any other order are refused (then lexsort runs)."""
    from toolkit.replay.selection_plan import layer_major

    if step_major:
        rows = sorted(rows, key=lambda r: (r[0], r[1]))  # layers of a step left unsorted
    rid = np.array([r[0] for r in rows], dtype=np.int64)
    step = np.array([r[1] for r in rows], dtype=np.int32)
    layer = np.array([r[2] * (2000 if wide else 1) for r in rows], dtype=np.int16 if not
                     wide else np.int32)
    perm, ok = layer_major(rid, layer, step)
    want = np.lexsort((step, layer, rid))
    is_step_major = all((rid[i], step[i]) >= (rid[i - 1], step[i - 1])
                        for i in range(1, len(rows)))
    assert ok == (is_step_major and not (wide and any(
        np.ptp(layer[rid == r]) >= 65_536 for r in set(rid.tolist()))))
    if ok:
        assert perm.tolist() == want.tolist()


def _per_row(store, run_id):
    return store.query(f"SELECT * EXCLUDE (run_id) FROM selection_replay WHERE run_id = "
                       f"'{run_id}' ORDER BY request_id, layer, step")


class TestWorkers:
    @pytest.mark.parametrize("policy", ["lru", "s3fifo", "opt"])
    def test_selection_results_identical_for_any_workers(self, store, policy):
        """1, 2 and 3 threads, chunks of one request, with or without the read-ahead
        thread, and a one-chunk trace whose buffers the workers split: the same rows and
        totals."""
        write_streaming(store, SMALL, "syn")
        for mode, full in (("plain", None), ("hisparse", None), ("hisparse", (0, 2))):
            cfg = SelectionReplayConfig("syn", policy, 100, mode=mode, full_layers=full)
            base = replay_selections(store, cfg, workers=1)
            base_rows = _per_row(store, base["run_id"])
            for workers, max_rows, ahead in ((2, None, True), (3, None, True), (2, 24, True),
                                             (1, 24, False), (2, 24, False), (2, None, False),
                                             (3, None, False)):
                got = replay_selections(store, cfg, workers=workers, max_rows=max_rows,
                                        read_ahead=ahead)
                assert {k: v for k, v in got.items() if k != "elapsed_s"} == {
                    k: v for k, v in base.items() if k != "elapsed_s"}
                assert _per_row(store, got["run_id"]).equals(base_rows)
            assert base["misses"] > 0 and base["hits"] > 0

    def test_replaced_trace_is_not_replayed_from_kept_facts(self, store):
        """A trace's k and footer are kept per process, keyed by both files' identity: a
        trace rewritten under the same name (other k, other shape) replays as itself."""
        import dataclasses

        from toolkit.replay import selections as sel

        cfg = SelectionReplayConfig("syn", "lru", 100)
        write_streaming(store, SMALL, "syn")
        first = replay_selections(store, cfg, workers=1, save=False)
        bigger = dataclasses.replace(SMALL, k=32, requests=3, steps=9)
        write_streaming(store, bigger, "syn", replace=True)
        again = replay_selections(store, cfg, workers=1, save=False)
        sel._FACTS.clear()
        fresh = replay_selections(store, cfg, workers=1, save=False)
        assert {k: v for k, v in again.items() if k != "elapsed_s"} == {
            k: v for k, v in fresh.items() if k != "elapsed_s"}
        assert again["accesses"] == 3 * 9 * 4 * 32 != first["accesses"]

    def test_exact_counts_small_trace(self, store):
        """Pinned figures of the SMALL synthetic trace (HiSparse LRU, 100 slots, 2 threads),
        equal to the OrderedDict reference model of test_selection_replay."""
        from tests.test_selection_replay import reference

        write_streaming(store, SMALL, "syn")
        s = replay_selections(store, SelectionReplayConfig("syn", "lru", 100), workers=2)
        assert (s["accesses"], s["hits"], s["misses"], s["evictions"]) == (7680, 6481, 1199,
                                                                            1199)
        rows = [(x["request_id"], x["step"], x["layer"], x["seq_len"], tuple(x["topk"]))
                for x in store.read("selections", "syn").to_pylist()]
        ref = reference(rows, 100, "hisparse", "first")
        got = {(r, st_, la): h for r, st_, la, h in store.query(
            "SELECT request_id, step, layer, hits FROM selection_replay").rows()}
        assert got == ref
        assert s["fast_path_rows"] == 0  # prompt 150 > 100 slots

    def test_mrc_identical_for_any_workers(self, store, monkeypatch):
        """Same curve for 1 or 2 threads, one chunk or one request per chunk, and equal
        to per-size plain replays."""
        from toolkit.replay import selections as sel

        write_streaming(store, SMALL, "syn")
        one = miss_curve_table(store, "syn", "selections", 300, save=False, workers=1)
        two = miss_curve_table(store, "syn", "selections", 300, save=False, workers=2)
        monkeypatch.setattr(sel, "CHUNK_ACCESSES", 64 * 24)  # one request per chunk
        chunked = miss_curve_table(store, "syn", "selections", 300, save=False, workers=2)
        assert one.equals(two) and one.equals(chunked)
        for n in (1, 64, 150, 300):
            run = replay_selections(store, SelectionReplayConfig("syn", buffer_tokens=n,
                                                                 mode="plain"), save=False)
            stop = one.num_rows - 1  # the curve stops at the distinct positions, flat after
            assert one.column("misses")[min(n, stop)].as_py() == run["misses"]
        keys = np.array([0, 1, 0, 2, 1, 0, 3, 3, 1], dtype=np.int32)
        seg = np.array([0, 3, 5])
        assert lru_miss_curve(keys, 4, 4, seg, workers=3).tolist() == \
            lru_miss_curve(keys, 4, 4, seg, workers=1).tolist()

    def test_prefix_sweep_identical_for_any_workers(self, mooncake_store):
        caps = [100, 1_000, 10_000, None]
        one = sweep_prefix(mooncake_store, "conv", caps, workers=1, save=False)
        two = sweep_prefix(mooncake_store, "conv", caps, workers=2, save=False)
        drop = ("elapsed_s",)
        assert [{k: v for k, v in r.items() if k not in drop} for r in one] == \
            [{k: v for k, v in r.items() if k not in drop} for r in two]
        assert two[1]["block_hits"] == 12_831 and two[2]["block_hits"] == 60_921

    def test_bad_workers(self, store):
        write_streaming(store, SMALL, "syn")
        with pytest.raises(ValueError, match="workers must be"):
            replay_selections(store, SelectionReplayConfig("syn"), workers=-1)


class TestStreamingSynth:
    def test_valid_labelled_and_independent_of_workers(self, tmp_path):
        """Every row passes the ingest validator; 1 or 2 threads write the same file."""
        tables = []
        for w in (1, 2):
            with toolkit.open_store(tmp_path / f"s{w}", create=True) as s:
                assert write_streaming(s, SMALL, "syn", workers=w) == 5 * 6 * 4
                tables.append(s.read("selections", "syn"))
                meta = s.read("selection_traces", "syn").to_pylist()[0]
        assert tables[0].equals(tables[1])
        assert meta["synthetic"] and meta["source"].startswith("SYNTHETIC")
        t = tables[0]
        topk = t.column("topk").combine_chunks()
        cols = SelectionColumns(*(t.column(c).to_numpy().astype(np.int64) for c in
                                  ("request_id", "step", "layer", "seq_len")),
                                topk.offsets.to_numpy().astype(np.int64),
                                topk.values.to_numpy().astype(np.int64))
        assert validate(cols, 64)[2] == 64
        assert (np.diff(cols.offsets) == 64).all()

    def test_retention_shapes_overlap(self):
        """Consecutive steps of a layer share about step_retention of the middle set."""
        cfg = SyntheticSelectionConfig(requests=1, prompt_tokens=4000, steps=20, layers=1,
                                       k=512, sinks=16, recent_window=32, step_retention=0.9,
                                       layer_retention=0.0)
        t = request_table(cfg, "x", 0).column("topk").to_pylist()
        mid = [set(r[16:-32]) for r in t]
        shares = [len(a & b) / len(a) for a, b in zip(mid, mid[1:], strict=False)]
        assert 0.85 <= float(np.mean(shares)) <= 0.95

    def test_topk_is_delta_encoded(self, store):
        write_streaming(store, SMALL, "syn")
        meta = pq.ParquetFile(store.root / "selections" / "syn.parquet").metadata
        col = meta.row_group(0).column(5)
        assert col.path_in_schema == "topk.list.element"
        assert "DELTA_BINARY_PACKED" in col.encodings


class TestCli:
    def test_workers_and_json_are_quiet(self, tmp_path):
        """--workers on all three replays; --json prints JSON only, nothing on stderr."""
        root = str(tmp_path / "s")
        runner = CliRunner()
        res = runner.invoke(app, ["synth", "selections", "--store", root, "--name", "syn",
                                  "--requests", "2", "--prompt-tokens", "150", "--steps", "4",
                                  "--layers", "2", "--k", "64", "--sinks", "4",
                                  "--recent-window", "8", "--workers", "2"])
        assert res.exit_code == 0, res.output
        assert "SYNTHETIC" in res.output and "16 rows" in res.output
        outs = []
        for w in ("1", "2"):
            res = runner.invoke(app, ["replay", "selections", "--store", root, "--trace",
                                      "syn", "--workers", w, "--json"])
            assert res.exit_code == 0, res.output
            outs.append(json.loads(res.stdout))
            assert res.stderr == ""
        assert outs[0]["misses"] == outs[1]["misses"] > 0
        res = runner.invoke(app, ["replay", "mrc", "--store", root, "--trace", "syn",
                                  "--max-capacity", "64", "--workers", "2", "--json"])
        assert res.exit_code == 0 and res.stderr == ""

    def test_prefix_sweep(self, tmp_path):
        from tests.conftest import MOONCAKE

        root = str(tmp_path / "s")
        runner = CliRunner()
        assert runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", root,
                                   "--name", "conv"]).exit_code == 0
        res = runner.invoke(app, ["replay", "prefix", "--store", root, "--trace", "conv",
                                  "--capacity-blocks", "1000", "--capacity-blocks", "10000",
                                  "--workers", "2", "--json"])
        assert res.exit_code == 0, res.output
        rows = json.loads(res.stdout)  # several sizes: one JSON array of run summaries
        assert [r["block_hits"] for r in rows] == [12_831, 60_921]


class TestProgress:
    def test_quiet_unless_interactive(self, capsys):
        from toolkit.runtime.progress import _interactive, progress

        assert not _interactive()
        with progress(100, "x") as bar:
            bar.update(100)
        assert capsys.readouterr().err == ""

    def test_shows_accesses_rate_eta_when_enabled(self, capsys, monkeypatch):
        from toolkit.runtime import progress as prog

        monkeypatch.setattr(prog, "DELAY_S", 0.0)
        with prog.progress(1000, "replay t", enabled=True) as bar:
            bar.update(400)
            bar.refresh()
            err = capsys.readouterr().err
        assert "replay t" in err and "400/1.00k" in err and "acc/s" in err


class TestThreadMap:
    """The worker pool under every replay: results in input order whatever the timing,
    every item done once, and an error on any thread (the caller's included) raised."""

    @settings(max_examples=30, deadline=None)
    @given(n=st.integers(0, 12), workers=st.integers(1, 4), seed=st.integers(0, 2**16))
    def test_in_order_each_once(self, n, workers, seed):
        import threading
        import time

        from toolkit.runtime.pool import thread_map

        delays = np.random.default_rng(seed).uniform(0, 0.002, n)
        seen = []
        lock = threading.Lock()

        def fn(i):
            time.sleep(delays[i])
            with lock:
                seen.append(i)
            return i * i

        assert thread_map(fn, range(n), workers) == [i * i for i in range(n)]
        assert sorted(seen) == list(range(n))

    def test_caller_takes_the_first_item(self):
        """The calling thread does the first item (its data is in the caller's cache)."""
        import threading

        from toolkit.runtime.pool import thread_map

        for _ in range(20):
            who = thread_map(lambda i: threading.get_ident(), range(4), 2)
            assert who[0] == threading.get_ident()

    @pytest.mark.parametrize("bad", [0, 1, 5])
    def test_error_raised(self, bad):
        from toolkit.runtime.pool import thread_map

        def fn(i):
            if i == bad:
                raise KeyError(i)
            return i

        with pytest.raises(KeyError):
            thread_map(fn, range(6), 2)


class TestSharedPool:
    """One pool of worker threads per process, kept between replays (a worker's decoding
    scratch is then allocated once), that nested or concurrent callers cannot deadlock."""

    def test_same_threads_across_calls(self):
        import threading

        from toolkit.runtime.pool import ordered_results, resolve_workers

        def who():
            return threading.get_ident(), threading.current_thread().name

        # the pool starts its threads lazily, so one call need not meet them all (a loaded
        # machine showed a later call on a thread the first had not used): over six calls
        # the work runs on the caller and at most the shared pool's threads, where a pool
        # per call would bring new ones each time
        seen: set[tuple[int, str]] = set()
        for _ in range(6):
            seen |= set(ordered_results([who] * 8, 2))
        pool = {(i, n) for i, n in seen if i != threading.get_ident()}
        assert all(n.startswith("toolkit-worker") for _, n in pool)
        assert len(pool) <= max(2, resolve_workers(None))

    def test_nested_calls_finish(self):
        """Every pool thread busy in an outer call that itself fans out: the inner
        items that cannot start are run by their callers instead."""
        from toolkit.runtime.pool import ordered_results, resolve_workers, thread_map

        n = resolve_workers(None) + 2

        def outer(i):
            return lambda: sum(thread_map(lambda j: i * j, range(6), n))

        assert list(ordered_results([outer(i) for i in range(3 * n)], n)) == [
            15 * i for i in range(3 * n)]

    def test_abandoned_results_drop_queued_work(self):
        import threading
        import time

        from toolkit.runtime.pool import ordered_results

        ran = []
        lock = threading.Lock()

        def slow(i):
            def f():
                time.sleep(0.01)
                with lock:
                    ran.append(i)
                return i
            return f

        gen = ordered_results((slow(i) for i in range(50)), 2)
        assert next(gen) == 0
        gen.close()
        time.sleep(0.1)
        assert len(ran) <= 4  # the first, what was running, nothing queued after close

    def test_no_more_running_than_workers_in_a_larger_pool(self):
        import threading
        import time

        from toolkit.runtime.pool import ordered_results, shared_pool

        shared_pool(8)
        running, peak = [0], [0]
        lock = threading.Lock()

        def item(i):
            def f():
                with lock:
                    running[0] += 1
                    peak[0] = max(peak[0], running[0])
                time.sleep(0.005)
                with lock:
                    running[0] -= 1
                return i
            return f

        assert list(ordered_results((item(i) for i in range(12)), 2)) == list(range(12))
        assert peak[0] <= 2

    def test_forked_child_gets_its_own_pool(self):
        import os

        from toolkit.runtime.pool import thread_map

        assert thread_map(lambda i: i + 1, range(4), 2) == [1, 2, 3, 4]
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            ok = thread_map(lambda i: i + 1, range(4), 2) == [1, 2, 3, 4]
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
