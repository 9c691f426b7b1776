"""sglang-indexer-topk: SGLang's ``meta_info.indexer_topk`` read exactly (SYNTHETIC sample
written by tests/sglang_capture.py the way SGLang encodes it), and located refusals."""

from __future__ import annotations

import base64
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file

from . import sglang_capture as cap


def expected(requests=cap.REQUESTS, layers=cap.LAYERS, k=cap.K):
    """Decode and prefill rows computed independently of the reader: struct, not NumPy."""
    dec, pre = [], []
    for r, (p, c) in enumerate(requests):
        raw = base64.b64decode(cap.encode(cap.topk_tensor(p, c, layers, k)))
        vals = struct.unpack(f"<{len(raw) // 4}i", raw)
        for row in range(p + c - 1):
            for layer in range(layers):
                a = (row * layers + layer) * k
                sel = [v for v in vals[a:a + k] if v != -1]
                if row < p:
                    pre.append((r, row, layer, sel))
                else:
                    dec.append((r, row - p, layer, row + 1, sel))
    return sorted(dec), sorted(pre)


def rows(store, trace):
    dec = store.query("SELECT request_id, step, layer, seq_len, topk FROM selections "
                      f"WHERE trace = '{trace}' ORDER BY 1, 2, 3").rows()
    pre = store.query("SELECT request_id, position, layer, topk FROM selection_prefill "
                      f"WHERE trace = '{trace}' ORDER BY 1, 2, 3").rows()
    return [tuple(r) for r in dec], [tuple(r) for r in pre]


def test_generate_json_exact(store, tmp_path):
    """Every decode step and prompt position, -1 dropped, seq_len = row + 1; the
    request's own prompt_tokens; k and layers from --k alone; SYNTHETIC marker kept."""
    p = cap.write(tmp_path / "cap.json")
    res = ingest_file(store, "sglang-indexer-topk", p, "cap", k=cap.K)
    assert res.rows == 10 * cap.LAYERS  # (6-1) + (4-1) + (3-1) decode steps
    assert res.found == ("found 3 request(s), 3 indexer layer(s), k = 8: 41 prompt (prefill) "
                         "position(s) -> selection_prefill, 10 decode step(s) -> selections")
    assert rows(store, "cap") == expected()
    meta = store.query("SELECT model, k, score, n_layers, synthetic FROM selection_traces").row(0)
    assert meta == ("unknown", 8, "indexer", 3, True)
    req = store.query("SELECT request_id, prompt_tokens, external_id FROM selection_requests "
                      "ORDER BY 1").rows()
    assert [tuple(r) for r in req] == [(0, 12, "synthetic-0"), (1, 9, "synthetic-1"),
                                       (2, 20, "synthetic-2")]


def test_openai_jsonl_and_directory_match(store, tmp_path):
    """OpenAI-compatible JSONL (payload in sglext, counts in usage) reads the same; a
    directory of files reads its .json/.jsonl files in name order."""
    cap.write(tmp_path / "a.jsonl", openai=True, requests=cap.REQUESTS[:2])
    cap.write(tmp_path / "b.json", requests=cap.REQUESTS[2:], first=2)
    (tmp_path / "notes.txt").write_text("ignored")
    ingest_file(store, "sglang-indexer-topk", tmp_path / "a.jsonl", "oa", indexer_layers=3)
    ingest_file(store, "sglang-indexer-topk", tmp_path, "dir", indexer_layers=3)
    dec, pre = expected()
    assert rows(store, "dir") == (dec, pre)
    assert rows(store, "oa") == expected(cap.REQUESTS[:2])


def test_no_prefill_and_replace_leaves_nothing_stale(store, tmp_path):
    p = cap.write(tmp_path / "cap.json")
    ingest_file(store, "sglang-indexer-topk", p, "cap", k=cap.K)
    ingest_file(store, "sglang-indexer-topk", p, "cap", k=cap.K, prefill=False, replace=True)
    assert rows(store, "cap") == (expected()[0], [])


def test_model_spec_gives_the_shape(store, tmp_path):
    """--model glm-5.2: 78 layers x k 2048 per row; a capture of another shape is refused
    naming file, request and field."""
    p = cap.write(tmp_path / "cap.json")
    with pytest.raises(TraceFormatError) as e:
        ingest_file(store, "sglang-indexer-topk", p, "cap", model="glm-5.2")
    assert str(e.value) == (
        f"{p}:1 (request 1): field 'meta_info.indexer_topk': request synthetic-0: 408 int32 "
        "values, expected (17 rows = prompt_tokens + completion_tokens - 1) x 78 layers x "
        "2048 = 2,715,648; check --model, --indexer-layers and --k against the server's config")
    assert "cap" not in store.keys("selections") and "cap" not in store.keys("selection_prefill")


def _one(tmp_path, mutate, name="x.json"):
    rec = cap.generate_response(0, 4, 3, cap.topk_tensor(4, 3))
    mutate(rec)
    p = tmp_path / name
    p.write_text(json.dumps([rec]))
    return p


def _bad_position(rec):
    t = cap.topk_tensor(4, 3)
    t[5, 2, 0] = 6  # decode step 1 (row 5) sees positions 0..5
    rec["meta_info"]["indexer_topk"] = cap.encode(t)


@pytest.mark.parametrize(("mutate", "field", "msg"), [
    (lambda r: r["meta_info"].pop("indexer_topk"), "meta_info.indexer_topk",
     "request synthetic-0: no indexer top-k; start the server with --enable-return-indexer-topk"),
    (lambda r: r["meta_info"].update(indexer_topk="@@@="), "meta_info.indexer_topk",
     "request synthetic-0: not base64"),
    (lambda r: r["meta_info"].update(indexer_topk=base64.b64encode(b"abcde").decode()),
     "meta_info.indexer_topk", "request synthetic-0: 5 bytes is not a whole number of int32"),
    (lambda r: r["meta_info"].pop("completion_tokens"), "meta_info.completion_tokens",
     "request synthetic-0: missing"),
    (lambda r: r["meta_info"].update(prompt_tokens=5), "meta_info.indexer_topk",
     "request synthetic-0: 144 int32 values, expected a multiple of 7 rows"),
    (_bad_position, "meta_info.indexer_topk", "request synthetic-0, decode step 1 (query "
     "position 5), layer 2: position 6 outside [0, seq_len=6)"),
])
def test_refusals_name_file_request_field(store, tmp_path, mutate, field, msg):
    p = _one(tmp_path, mutate)
    with pytest.raises(TraceFormatError) as e:
        ingest_file(store, "sglang-indexer-topk", p, "x", k=cap.K)
    assert e.value.path == str(p) and e.value.line == 1 and e.value.field == field
    assert e.value.message.startswith(msg), e.value.message
    assert store.keys("selections") == []


def test_shape_flags_needed(store, tmp_path):
    p = _one(tmp_path, lambda r: None)
    with pytest.raises(TraceFormatError, match="pass --model .* --indexer-layers or --k"):
        ingest_file(store, "sglang-indexer-topk", p, "x")


@settings(max_examples=8, deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(1, 9), st.integers(2, 5)), min_size=1, max_size=3,
                     unique_by=lambda t: t),
       layers=st.integers(1, 3), k=st.integers(1, 6))
def test_round_trip_property(tmp_path_factory, reqs, layers, k):
    """Any shape: what SGLang encodes is what the store holds (decode and prefill)."""
    from toolkit.store import Store

    d = tmp_path_factory.mktemp("prop")
    recs = [cap.generate_response(i, p, c, cap.topk_tensor(p, c, layers, k))
            for i, (p, c) in enumerate(reqs)]
    (d / "c.json").write_text(json.dumps(recs))
    with Store(d / "store", create=True) as s:
        ingest_file(s, "sglang-indexer-topk", d / "c.json", "c", k=k, indexer_layers=layers)
        assert rows(s, "c") == expected(reqs, layers, k)
