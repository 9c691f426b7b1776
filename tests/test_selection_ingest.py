"""Selection readers (dsa-jsonl, npz, parquet): exact round trips and located errors."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file

from .conftest import snapshot


def ev(rid, layer, step, seq_len, pos, event="dsa_topk"):
    return json.dumps({"event": event, "request_id": rid, "layer_id": layer, "step_idx": step,
                       "seq_len_current": seq_len, "selected_token_pos": pos})


GOOD = [
    json.dumps({"event": "prefill_done", "request_id": "a"}),
    ev("a", 0, 0, 5, [4, 0, 2, -1]),
    ev("a", 1, 0, 5, [3, 1, 4, -1]),
    ev("a", 0, 1, 6, [5, 0, 1, 2]),
    ev("b", 0, 0, 3, [0, 1, 2, -1]),
    ev("a", 1, 1, 6, [0, 5, 3, 4]),
]


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


class TestDsaJsonl:
    def test_round_trip(self, store, tmp_path):
        """Other events ignored, -1 dropped, string ids made dense in order of appearance."""
        p = write_lines(tmp_path / "dsa.jsonl", GOOD)
        res = ingest_file(store, "dsa-jsonl", p, "dsa", model="DeepSeek-V3.2", score="indexer")
        assert res.rows == 5
        rows = store.query(
            "SELECT request_id, step, layer, seq_len, topk FROM selections "
            "ORDER BY request_id, layer, step").rows()
        assert rows == [
            (0, 0, 0, 5, [4, 0, 2]), (0, 1, 0, 6, [5, 0, 1, 2]),
            (0, 0, 1, 5, [3, 1, 4]), (0, 1, 1, 6, [0, 5, 3, 4]), (1, 0, 0, 3, [0, 1, 2]),
        ]
        meta = store.query("SELECT * FROM selection_traces").row(0, named=True)
        assert meta == {"trace": "dsa", "model": "DeepSeek-V3.2", "k": 4, "score": "indexer",
                        "order": "score", "n_layers": 2, "synthetic": False,
                        "source": "ingested from dsa.jsonl (dsa-jsonl)"}
        req = store.query("SELECT request_id, prompt_tokens, external_id FROM selection_requests "
                          "ORDER BY 1").rows()
        assert req == [(0, 4, "a"), (1, 2, "b")]

    @pytest.mark.parametrize(
        ("bad", "field", "msg"),
        [
            (ev(0, 0, 5, 4, [1, 4]), "selected_token_pos", "outside [0, seq_len=4)"),
            (ev(0, 0, 5, 9, [1, 1]), "selected_token_pos", "selected twice"),
            (ev(0, 0, 5, 9, [1, -2]), "selected_token_pos", "position -2 outside"),
            (ev(0, 0, 5, 9, [0, 1, 2, 3, 4]), "selected_token_pos", "more than k=4"),
            (ev(0, 0, 0, 9, [1]), "step_idx", "does not follow step 1"),
            (ev(0, 0, 5, 9, [1, "x"]), "selected_token_pos", "expected integers"),
            (ev(0, 0, 5, 9, [1.5]), "selected_token_pos", "expected integers"),
            (ev(0, -1, 5, 9, [1]), "layer_id", "must be >= 0"),
            ('{"event": "dsa_topk", "request_id": 0}', "layer_id", "missing"),
            ("{oops", None, "invalid JSON"),
        ],
    )
    def test_errors_name_line_and_field_and_lose_nothing(self, store, tmp_path, bad, field, msg):
        p0 = write_lines(tmp_path / "ok.jsonl", [ev(0, 0, 0, 9, [1, 2])])
        ingest_file(store, "dsa-jsonl", p0, "kept")
        before = snapshot(store.root)
        lines = [ev(0, 0, 0, 9, [1, 2, 3, 4]), ev(0, 0, 1, 9, [0, 8]), bad, ev(0, 0, 9, 12, [1])]
        p = write_lines(tmp_path / "bad.jsonl", lines)
        with pytest.raises(TraceFormatError) as err:
            ingest_file(store, "dsa-jsonl", p, "bad", k=4)
        assert (err.value.line, err.value.field) == (3, field)
        assert msg in str(err.value) and f"{p}:3" in str(err.value)
        assert snapshot(store.root) == before

    def test_no_events(self, store, tmp_path):
        p = write_lines(tmp_path / "e.jsonl", [json.dumps({"event": "other"})])
        with pytest.raises(TraceFormatError, match="no 'dsa_topk' events"):
            ingest_file(store, "dsa-jsonl", p)


class TestNpz:
    def test_one_request_per_file(self, store, tmp_path):
        topk = np.array([[[0, 1], [1, -1]], [[2, 0], [2, 1]]])  # [steps=2, layers=2, k=2]
        np.savez(tmp_path / "r.npz", topk=topk, seq_len=np.array([3, 4]))
        ingest_file(store, "npz", tmp_path / "r.npz", "r", model="m")
        rows = store.query("SELECT step, layer, seq_len, topk FROM selections ORDER BY 1, 2").rows()
        assert rows == [(0, 0, 3, [0, 1]), (0, 1, 3, [1]), (1, 0, 4, [2, 0]), (1, 1, 4, [2, 1])]
        assert store.query("SELECT prompt_tokens FROM selection_requests").item() == 2

    def test_request_id_array_and_located_error(self, store, tmp_path):
        topk = np.array([[[0]], [[1]], [[0]], [[7]]])
        np.savez(tmp_path / "m.npz", topk=topk, seq_len=np.array([2, 3, 2, 3]),
                 request_id=np.array([5, 5, 6, 6]))
        with pytest.raises(TraceFormatError, match="at step index 3, layer 0: position 7"):
            ingest_file(store, "npz", tmp_path / "m.npz")
        topk[3, 0, 0] = 2
        np.savez(tmp_path / "m.npz", topk=topk, seq_len=np.array([2, 3, 2, 3]),
                 request_id=np.array([5, 5, 6, 6]))
        ingest_file(store, "npz", tmp_path / "m.npz")
        assert store.query("SELECT request_id, step FROM selections ORDER BY 1, 2").rows() == [
            (5, 0), (5, 1), (6, 0), (6, 1)]

    def test_missing_array(self, store, tmp_path):
        np.savez(tmp_path / "x.npz", topk=np.zeros((1, 1, 1), dtype=int))
        with pytest.raises(TraceFormatError, match="'seq_len': missing array"):
            ingest_file(store, "npz", tmp_path / "x.npz")


class TestParquet:
    def test_round_trip_and_order_inference(self, store, tmp_path):
        t = pa.table({"request_id": [0, 0], "step": [0, 1], "layer": [0, 0], "seq_len": [4, 5],
                      "topk": pa.array([[0, 2, 3], [1, 4]], pa.list_(pa.int32()))})
        pq.write_table(t, tmp_path / "s.parquet")
        ingest_file(store, "parquet", tmp_path / "s.parquet", "s", k=3)
        assert store.query("SELECT k, \"order\" FROM selection_traces").row(0) == (3, "position")
        assert store.query("SELECT topk FROM selections ORDER BY step")["topk"].to_list() == [
            [0, 2, 3], [1, 4]]

    def test_error_names_row(self, store, tmp_path):
        t = pa.table({"request_id": [0, 0, 0], "step": [0, 1, 2], "layer": [0, 0, 0],
                      "seq_len": [4, 5, 6], "topk": [[0], [1], [9]]})
        pq.write_table(t, tmp_path / "s.parquet")
        with pytest.raises(TraceFormatError, match=r"s\.parquet:3 \(row 3\): field 'topk'"):
            ingest_file(store, "parquet", tmp_path / "s.parquet")

    def test_missing_column(self, store, tmp_path):
        pq.write_table(pa.table({"request_id": [0]}), tmp_path / "s.parquet")
        with pytest.raises(TraceFormatError, match="'step': missing column"):
            ingest_file(store, "parquet", tmp_path / "s.parquet")


def test_cli_ingest_selections(tmp_path):
    from typer.testing import CliRunner

    from toolkit.cli import app

    p = write_lines(tmp_path / "dsa.jsonl", GOOD)
    r = CliRunner().invoke(app, ["ingest", "selections", str(p), "--format", "dsa-jsonl",
                                 "--store", str(tmp_path / "s"), "--model", "m", "--k", "4"])
    assert r.exit_code == 0, r.output
    assert "ingested 5 selection rows" in r.output
    r = CliRunner().invoke(app, ["ingest", "selections", str(p), "--format", "mooncake",
                                 "--store", str(tmp_path / "s")])
    assert r.exit_code == 2 and "request-timeline format" in r.output


def test_bundle_round_trip_keeps_metadata(store, tmp_path):
    """A directory of the three tables ingests with its own metadata (synthetic flag kept)."""
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    tables = generate(SyntheticSelectionConfig(prompt_tokens=300, steps=3, layers=2, k=64,
                                               sinks=4, recent_window=8), "orig")
    d = tmp_path / "bundle"
    d.mkdir()
    for name, t in tables.items():
        pq.write_table(t, d / f"{name}.parquet")
    ingest_file(store, "bundle", d, "b")
    meta = store.query("SELECT trace, model, k, synthetic, source FROM selection_traces").row(0)
    assert meta[:4] == ("b", "synthetic", 64, True) and meta[4].startswith("SYNTHETIC")
    assert store.query("SELECT count(*) FROM selections WHERE trace = 'b'").item() == 6
    assert store.query("SELECT source_text FROM selection_requests").item() == "synthetic"
    with pytest.raises(TraceFormatError, match="missing bundle file"):
        (d / "selection_requests.parquet").unlink()
        ingest_file(store, "bundle", d, "c")
