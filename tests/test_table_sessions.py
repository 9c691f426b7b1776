"""``ingest table --session-col``: session ids land exactly as written in
``request_sessions`` ("007", "7" and " 7" are three sessions), beside the integer ids the
requests carry; plain integers keep their value."""

from __future__ import annotations

import csv

from toolkit.ingest import ingest_file


def _write(path, sessions):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "isl", "osl", "sess"])
        for i, s in enumerate(sessions):
            w.writerow([i, 100 + i, 10, s])
    return path


OPTS = dict(time_col="t", input_tokens_col="isl", output_tokens_col="osl", session_col="sess")


def test_strings_kept_as_written(store, tmp_path):
    raw = ["007", "7", " 7", "007", "a-b", "7"]
    ingest_file(store, "table", _write(tmp_path / "s.csv", raw), "s", **OPTS)
    req = store.read("requests", "s").to_pydict()
    names = store.read("request_sessions", "s").to_pydict()
    by_id = dict(zip(names["session_id"], names["session"], strict=True))
    assert [by_id[i] for i in req["session_id"]] == raw  # every value lands as given
    assert len(set(names["session"])) == 4 and len(set(names["session_id"])) == 4
    assert req["turn"] == [0, 0, 0, 1, 0, 1]


def test_plain_integers_keep_their_value(store, tmp_path):
    ingest_file(store, "table", _write(tmp_path / "i.csv", ["12", "5", "12"]), "i", **OPTS)
    assert store.read("requests", "i").column("session_id").to_pylist() == [12, 5, 12]
    names = store.read("request_sessions", "i").to_pydict()
    assert dict(zip(names["session"], names["session_id"], strict=True)) == {"12": 12, "5": 5}


def test_replacing_without_sessions_leaves_none(store, tmp_path):
    ingest_file(store, "table", _write(tmp_path / "a.csv", ["x", "y"]), "r", **OPTS)
    opts = {k: v for k, v in OPTS.items() if k != "session_col"}
    ingest_file(store, "table", _write(tmp_path / "b.csv", ["x", "y"]), "r", replace=True,
                **opts)
    assert "r" not in store.keys("request_sessions") or \
        store.read("request_sessions", "r").num_rows == 0



def test_agentic_session_ids_kept(store):
    """The agentic reader's session ids (its ``id`` field) land as written, keyed by the
    line-order session_id the requests carry."""
    import json
    from pathlib import Path

    sample = Path(__file__).parent / "data" / "agentic_sample.jsonl"
    ids = [json.loads(line)["id"] for line in sample.read_text().splitlines() if line.strip()]
    ingest_file(store, "agentic", sample, "a")
    names = store.read("request_sessions", "a").to_pydict()
    assert names["session"] == ids and names["session_id"] == list(range(len(ids)))
    assert set(store.read("requests", "a").column("session_id").to_pylist()) == set(
        range(len(ids)))
