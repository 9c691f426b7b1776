"""Bad input (issue 10, points 1 and 5): every value lands exactly as given or the ingest
stops with one line naming file, line/row and field, and the store does not change."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file

from .conftest import AZURE, MOONCAKE

runner = CliRunner()


def full_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def refused(store, fmt, path, line, field, msg, **options):
    """Ingest must raise at (line, field) with ``msg`` and leave the store byte-identical."""
    before = full_snapshot(store.root)
    with pytest.raises(TraceFormatError) as err:
        ingest_file(store, fmt, path, "bad", **options)
    assert (err.value.line, err.value.field) == (line, field), str(err.value)
    assert msg in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)
    assert full_snapshot(store.root) == before
    return err.value


@pytest.fixture
def kept(store, tmp_path):
    """A store already holding one selection trace and one timeline, so 'unchanged' is
    checked against real data."""
    p = tmp_path / "ok.jsonl"
    p.write_text(ev(0, 0, 0, 9, [1, 2]) + "\n")
    ingest_file(store, "dsa-jsonl", p, "kept")
    with MOONCAKE.open() as f:
        (tmp_path / "m.jsonl").write_text("".join(next(f) for _ in range(5)))
    ingest_file(store, "mooncake", tmp_path / "m.jsonl", "kept")
    return store


def ev(rid, layer, step, seq_len, pos):
    return json.dumps({"event": "dsa_topk", "request_id": rid, "layer_id": layer,
                       "step_idx": step, "seq_len_current": seq_len, "selected_token_pos": pos})


class TestDsaJsonlLimits:
    @pytest.mark.parametrize(("bad", "field", "msg"), [
        (ev(0, 0, 5, 2**40, [1]), "seq_len_current", "larger than 2147483647"),
        (ev(0, 0, 2**31, 9, [1]), "step_idx", "larger than 2147483647"),
        (ev(0, 32767, 5, 9, [1]), "layer_id", "larger than 32766"),
        (ev(0, 0, 5, 9, [2**63]), "selected_token_pos", "fits in int64"),
        (ev(0, 0, 5, 9, [1, 2**70]), "selected_token_pos", "fits in int64"),
        (ev(0, 0, 5, 9, [True, 2]), "selected_token_pos", "expected integers, got True"),
        (ev(0, 0, 5, 9, [[1], [2]]), "selected_token_pos", "expected integers, got [1]"),
        (ev(0, 0, 5, 9, [[1, 2], [3]]), "selected_token_pos", "expected integers, got [1, 2]"),
        (ev(0, 0, 5, 9, [1, None]), "selected_token_pos", "expected integers, got None"),
        (ev(0, 0, 5, 2**64, [1]), "seq_len_current", "does not fit in int64"),
    ])
    def test_never_wraps(self, kept, tmp_path, bad, field, msg):
        """2^40 used to land as seq_len 0 and step 2^31 as -2147483648, with exit 0."""
        p = tmp_path / "bad.jsonl"
        p.write_text("\n".join([ev(0, 0, 0, 9, [1]), bad]) + "\n")
        refused(kept, "dsa-jsonl", p, 2, field, msg)

    def test_limits_themselves_land_exactly(self, store, tmp_path):
        p = tmp_path / "edge.jsonl"
        p.write_text(ev(0, 32766, 2**31 - 1, 2**31 - 1, [2**31 - 2, 0]) + "\n")
        ingest_file(store, "dsa-jsonl", p, "edge")
        assert store.query("SELECT step, layer, seq_len, topk FROM selections").row(0) == (
            2**31 - 1, 32766, 2**31 - 1, [2**31 - 2, 0])
        assert store.query("SELECT n_layers FROM selection_traces").item() == 32767

    @pytest.mark.parametrize(("opts", "field", "msg"), [
        ({"k": 0}, "k", "k must be in [1, 2147483647], got 0"),
        ({"k": 2**40}, "k", "got 1099511627776"),
        ({"order": "random"}, "order", "must be 'score' or 'position'"),
    ])
    def test_metadata(self, kept, tmp_path, opts, field, msg):
        p = tmp_path / "t.jsonl"
        p.write_text(ev(0, 0, 0, 9, [1]) + "\n")
        refused(kept, "dsa-jsonl", p, None, field, msg, **opts)

    def test_all_padding_is_k_zero(self, kept, tmp_path):
        p = tmp_path / "t.jsonl"
        p.write_text(ev(0, 0, 0, 9, [-1, -1]) + "\n")
        refused(kept, "dsa-jsonl", p, None, "selected_token_pos", "every top-k list is empty")


def save_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


class TestNpz:
    @pytest.mark.parametrize(("arrays", "field", "msg"), [
        ({"seq_len": np.array([2**40])}, "seq_len", "larger than 2147483647"),
        ({"step": np.array([2**31])}, "step", "larger than 2147483647"),
        ({"topk": np.array([[[2**63]]], dtype=np.uint64)}, "topk", "does not fit in int64"),
        ({"seq_len": np.array([2**64 - 1], dtype=np.uint64)}, "seq_len", "does not fit"),
        ({"request_id": np.array(1.5)}, "request_id", "expected an integer scalar, got float64"),
        ({"request_id": np.array([3.0])}, "request_id", "expected int[1], got float64"),
        ({"step": np.array([0.9])}, "step", "got float64"),
        ({"request_id": np.array(["a"])}, "request_id", "got <U1"),
        ({"request_id": np.array([1, 2])}, "request_id", "expected int[1], got int64[2]"),
        ({"topk": np.zeros((0, 1, 1), dtype=int), "seq_len": np.zeros(0, dtype=int)}, "topk",
         "no selections"),
        ({"topk": np.zeros((1, 0, 1), dtype=int)}, "topk", "no selections"),
        ({"topk": np.zeros((1, 1, 0), dtype=int)}, "topk", "no selections"),
        ({"topk": np.zeros((1, 1, 1), dtype=float)}, "topk", "got float64"),
        ({"topk": np.zeros((1, 32768, 1), dtype=int)}, "layer", "layer 32767: 32767 is larger"),
    ])
    def test_refused(self, kept, tmp_path, arrays, field, msg):
        base = {"topk": np.array([[[0]]]), "seq_len": np.array([4])}
        p = save_npz(tmp_path / "bad.npz", **(base | arrays))
        refused(kept, "npz", p, None, field, msg)

    @pytest.mark.parametrize(("content", "msg"), [
        (b"", "empty file"),
        (b"\x93NUMPY\x01\x00", "single .npy array"),
        (gzip.compress(b"data", mtime=0), "gzip-compressed"),
        (b"hello", "no zip header"),
    ])
    def test_not_an_npz(self, kept, tmp_path, content, msg):
        p = tmp_path / "x.npz"
        p.write_bytes(content)
        refused(kept, "npz", p, None, None, msg)

    def test_truncated_and_npy(self, kept, tmp_path):
        good = save_npz(tmp_path / "g.npz", topk=np.zeros((50, 4, 8), dtype=int),
                        seq_len=np.full(50, 9))
        cut = tmp_path / "cut.npz"
        cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
        refused(kept, "npz", cut, None, None, "not a readable .npz archive")
        np.save(tmp_path / "a.npy", np.zeros(3))
        refused(kept, "npz", tmp_path / "a.npy", None, None, "single .npy array")


def write_pq(path, **over):
    cols = {"request_id": [0, 0], "step": [0, 1], "layer": [0, 0], "seq_len": [4, 5],
            "topk": pa.array([[0, 1], [2, 3]], pa.list_(pa.int32()))} | over
    pq.write_table(pa.table(cols), path)
    return path


class TestParquet:
    @pytest.mark.parametrize(("over", "row", "field", "msg"), [
        ({"seq_len": [4, 2**40]}, 2, "seq_len", "larger than 2147483647"),
        ({"step": [0, 2**31]}, 2, "step", "larger than 2147483647"),
        ({"layer": [0, 40000]}, 2, "layer", "larger than 32766"),
        ({"request_id": pa.array([0, 2**63], pa.uint64())}, 2, "request_id", "does not fit"),
        ({"topk": pa.array([[0, 1], [2, None]], pa.list_(pa.int32()))}, 2, "topk",
         "null at list index 1"),
        ({"topk": pa.array([[0, 1], None], pa.list_(pa.int32()))}, 2, "topk", "null list"),
        ({"step": pa.array([0, None], pa.int64())}, 2, "step", "null value"),
        ({"topk": pa.array([[0], [2**63]], pa.list_(pa.uint64()))}, 2, "topk", "does not fit"),
        ({"step": pa.array([0.0, 1.0])}, None, "step", "expected integers, got double"),
        ({"layer": pa.array(["0", "0"])}, None, "layer", "expected integers, got string"),
    ])
    def test_refused(self, kept, tmp_path, over, row, field, msg):
        refused(kept, "parquet", write_pq(tmp_path / "bad.parquet", **over), row, field, msg)

    def test_zero_rows(self, kept, tmp_path):
        p = write_pq(tmp_path / "e.parquet", request_id=pa.array([], pa.int64()),
                     step=pa.array([], pa.int64()), layer=pa.array([], pa.int64()),
                     seq_len=pa.array([], pa.int64()), topk=pa.array([], pa.list_(pa.int32())))
        refused(kept, "parquet", p, None, "topk", "no selection rows")

    def test_not_parquet(self, kept, tmp_path):
        p = tmp_path / "x.parquet"
        p.write_bytes(gzip.compress(b"x"))
        refused(kept, "parquet", p, None, None, "not a readable Parquet file")


def bundle(d: Path, sel=None, traces=None, requests=None) -> Path:
    d.mkdir(exist_ok=True)
    base_sel = {"trace": ["t", "t", "u"], "request_id": [0, 1, 0], "step": [0, 0, 0],
                "layer": [0, 0, 0], "seq_len": [4, 4, 4],
                "topk": pa.array([[0, 1], [2, 3], [1, 2]], pa.list_(pa.int32()))}
    base_traces = {"trace": ["t", "u"], "model": ["m", "m"], "k": [2, 2],
                   "score": ["s", "s"], "order": ["position", "position"],
                   "n_layers": [1, 1], "synthetic": [False, False], "source": ["x", "y"]}
    base_req = {"trace": ["t", "t", "u"], "request_id": [0, 1, 0], "prompt_tokens": [3, 3, 3]}
    for name, base, over in (("selections", base_sel, sel), ("selection_traces", base_traces,
                                                             traces),
                             ("selection_requests", base_req, requests)):
        cols = {k: v for k, v in (base | (over or {})).items() if v is not None}
        pq.write_table(pa.table(cols), d / f"{name}.parquet")
    return d


class TestBundle:
    def test_good_bundle_lands_exactly(self, store, tmp_path):
        ingest_file(store, "bundle", bundle(tmp_path / "b"), "b", select="t")
        assert store.query("SELECT request_id, topk FROM selections ORDER BY 1").rows() == [
            (0, [0, 1]), (1, [2, 3])]
        assert store.query("SELECT request_id, prompt_tokens FROM selection_requests "
                           "ORDER BY 1").rows() == [(0, 3), (1, 3)]

    @pytest.mark.parametrize(("kind", "over", "row", "field", "msg"), [
        ("traces", {"order": ["random", "position"]}, 1, "order", "'score' or 'position'"),
        ("traces", {"k": None}, None, "k", "missing column"),
        ("traces", {"k": ["2", "2"]}, None, "k", "wrong type string"),
        ("traces", {"k": [0, 2]}, 1, "k", "must be in [1, 2147483647], got 0"),
        ("traces", {"model": [1, 2]}, None, "model", "wrong type int64"),
        ("traces", {"synthetic": ["no", "no"]}, None, "synthetic", "wrong type string"),
        ("requests", {"prompt_tokens": None}, None, "prompt_tokens", "missing column"),
        ("requests", {"prompt_tokens": [3, 2**40, 3]}, 2, "prompt_tokens", "must be in [0"),
        ("requests", {"request_id": [0, 7, 0]}, 2, "request_id", "request 7 has no selections"),
        ("requests", {"request_id": [0, 0, 0]}, 2, "request_id", "request 0 listed twice"),
        ("sel", {"trace": None}, None, "trace", "missing string column"),
        ("sel", {"seq_len": [4, 4, 2**40]}, None, None, ""),  # other trace's row: not read
        ("sel", {"seq_len": [4, 2**40, 4]}, 2, "seq_len", "larger than"),
    ])
    def test_refused(self, kept, tmp_path, kind, over, row, field, msg):
        d = bundle(tmp_path / "b", **{kind if kind != "traces" else "traces": over}
                   if kind != "sel" else {"sel": over})
        file = d / {"traces": "selection_traces", "requests": "selection_requests",
                    "sel": "selections"}[kind]
        if msg == "":
            ingest_file(kept, "bundle", d, "ok", select="t")
            return
        err = refused(kept, "bundle", d, row, field, msg, select="t")
        assert err.path == f"{file}.parquet"

    def test_file_given_as_bundle(self, kept, tmp_path):
        p = tmp_path / "f"
        p.write_text("x")
        refused(kept, "bundle", p, None, None, "expected a directory")


class TestRequestTimelines:
    def test_400_digit_timestamp(self, kept, tmp_path):
        p = tmp_path / "m.jsonl"
        p.write_text('{"timestamp": ' + "9" * 400 + ', "input_length": 1, "output_length": 1, '
                     '"hash_ids": []}\n')
        refused(kept, "mooncake", p, 1, "timestamp", "expected a finite number")

    def test_5000_digit_integer(self, kept, tmp_path):
        p = tmp_path / "m.jsonl"
        p.write_text('{"timestamp": 0, "input_length": ' + "1" * 5000 + '}\n')
        refused(kept, "mooncake", p, 1, None, "invalid JSON")

    def test_mooncake_token_count_beyond_int64(self, kept, tmp_path):
        p = tmp_path / "m.jsonl"
        p.write_text(json.dumps({"timestamp": 0, "input_length": 2**64, "output_length": 1,
                                 "hash_ids": []}) + "\n")
        refused(kept, "mooncake", p, 1, "input_length", "does not fit in int64")

    def test_directory_as_input(self, kept, tmp_path):
        refused(kept, "mooncake", tmp_path, None, None, "is a directory")
        refused(kept, "parquet", tmp_path, None, None, "is a directory")

    def test_azure_non_utf8_reported_on_its_line(self, kept, tmp_path):
        """A bad byte on line 7 used to be reported on line 1."""
        lines = AZURE.read_bytes().splitlines(keepends=True)[:10]
        lines[6] = lines[6].replace(b",", b"\xff,", 1)
        p = tmp_path / "a.csv"
        p.write_bytes(b"".join(lines))
        refused(kept, "azure", p, 7, None, "not UTF-8")

    @pytest.mark.parametrize(("row", "field", "msg"), [
        ("2023-11-16 18:17:04.1,1_000,3", "ContextTokens", "ASCII digits"),
        ("2023-11-16 18:17:04.1,\u0661\u0662,3", "ContextTokens", "ASCII digits"),
        ("2023-11-16 18:17:04.1,+5,3", "ContextTokens", "ASCII digits"),
        ("2023-11-16 18:17:04.1,5,\uff13", "GeneratedTokens", "ASCII digits"),
        ("\uff12023-11-16 18:17:04.1,5,3", "TIMESTAMP", "expected 'YYYY"),
        ("2023-11-16 18:17:04.1,5," + "9" * 400, "GeneratedTokens", "400-digit"),
    ])
    def test_azure_digits(self, kept, tmp_path, row, field, msg):
        p = tmp_path / "a.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.0,1,1\n"
                     + row + "\n", encoding="utf-8")
        refused(kept, "azure", p, 3, field, msg)

    def test_azure_says_which_columns_it_ignores(self, tmp_path):
        p = tmp_path / "a.csv"
        p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens,Model,Region\n"
                     "2023-11-16 18:17:04.0,1,2,x,y\n")
        res = runner.invoke(app, ["ingest", "azure", str(p), "--store", str(tmp_path / "s")])
        assert res.exit_code == 0
        assert "note:" in res.stderr and "'Model', 'Region'" in res.stderr


class TestCli:
    @pytest.mark.parametrize("args", [
        ["ingest", "mooncake", "{tmp}"],
        ["ingest", "selections", "{tmp}", "--format", "npz"],
        ["ingest", "selections", "{tmp}/x.npz", "--format", "npz"],
        ["sql", ""],
        ["sql", "   "],
        ["sql", "SELECT [1, 2] AS l", "--format", "csv"],
    ])
    def test_one_line_exit_2(self, tmp_path, args):
        root = tmp_path / "s"
        assert runner.invoke(app, ["ingest", "azure", str(AZURE), "--store", str(root),
                                   "--name", "a"]).exit_code == 0
        (tmp_path / "x.npz").write_bytes(b"")
        res = runner.invoke(app, [a.format(tmp=tmp_path) for a in args] + ["--store", str(root)])
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
        assert "Traceback" not in res.output


# -- serving predict (issue 34, point 6): what-if ranges, layouts, CSV syntax ----------
POINTS_HEAD = ("hardware,framework,model,precision,spec_method,disagg,is_multinode,isl,osl,"
               "conc,num_prefill_gpu,num_decode_gpu,prefill_tp,prefill_ep,"
               "prefill_dp_attention,decode_tp,decode_ep,decode_dp_attention")
POINTS_ROW = "gb200,sglang,dsr1,fp8,none,False,False,1024,1024,4,4,4,4,1,False,4,1,False"


def points_csv(path: Path, extra: dict[str, str] | None = None,
               layout: dict[str, str] | None = None, raw: str | None = None) -> Path:
    head = POINTS_HEAD.split(",") + list(extra or {})
    row = dict(zip(POINTS_HEAD.split(","), POINTS_ROW.split(","), strict=True))
    row |= layout or {}
    body = ",".join([*row.values(), *(extra or {}).values()])
    path.write_text(",".join(head) + "\n" + POINTS_ROW + ","
                    * bool(extra) + ",".join(["0"] * len(extra or {})) + "\n"
                    + (raw if raw is not None else body) + "\n")
    return path


#: (what-if columns, layout changes, raw second row, words in the one-line error)
PREDICT_CASES = [
    ({"cached_prefix_fraction": "2.0"}, None, None, ["row 2", "cached_prefix_fraction",
                                                       "[0, 1]"]),
    ({"cached_prefix_fraction": "NaN"}, None, None, ["row 2", "cached_prefix_fraction",
                                                       "finite"]),
    ({"cached_prefix_fraction": "inf"}, None, None, ["cached_prefix_fraction", "finite"]),
    ({"host_prefix_fraction": "-0.5"}, None, None, ["host_prefix_fraction", "[0, 1]"]),
    ({"device_buffer_tokens": "-1"}, None, None, ["device_buffer_tokens", ">= 0"]),
    ({"miss_rows_per_layer": "nan"}, None, None, ["miss_rows_per_layer", "finite"]),
    ({"miss_rows_per_layer": "lots"}, None, None, ["miss_rows_per_layer", "not a number"]),
    ({"hisparse_overlap": "maybe"}, None, None, ["hisparse_overlap", "true/false"]),
    (None, {"num_decode_gpu": "1000000000"}, None, ["num_decode_gpu", "at most 65,536"]),
    (None, {"decode_tp": "64"}, None, ["decode_tp", "num_decode_gpu = 4"]),
    (None, {"prefill_tp": "16"}, None, ["prefill_tp", "num_prefill_gpu = 4"]),
    (None, None, POINTS_ROW + ",surplus", ["row 2", "19 fields", "18"]),
    (None, None, 'gb200,"sglang,dsr1', ["row 2", "malformed CSV"]),
]


class TestServingPredict:
    @pytest.mark.parametrize("extra, layout, raw, words", PREDICT_CASES)
    def test_refused_in_one_line(self, tmp_path, extra, layout, raw, words):
        """Out-of-range what-if values, layouts beyond their GPUs and broken CSV rows stop
        `serving predict` with one line naming the file, row and field; nothing written."""
        pts = points_csv(tmp_path / "p.csv", extra, layout, raw)
        out = tmp_path / "o.csv"
        res = runner.invoke(app, ["serving", "predict", "--points", str(pts), "--out",
                                  str(out)])
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith(f"error: {pts}") and res.stderr.count("\n") == 1, \
            res.stderr
        for w in words:
            assert w in res.stderr, res.stderr
        assert not out.exists()

    def test_good_what_if_values_run(self, tmp_path):
        """Values inside every range are accepted (0, 0.5, true)."""
        pts = points_csv(tmp_path / "p.csv", {"cached_prefix_fraction": "0.5",
                                              "host_prefix_fraction": "0",
                                              "device_buffer_tokens": "0",
                                              "miss_rows_per_layer": "0",
                                              "hisparse_overlap": "true"})
        out = tmp_path / "o.csv"
        res = runner.invoke(app, ["serving", "predict", "--points", str(pts), "--out",
                                  str(out)])
        assert res.exit_code == 0, res.output
        assert out.exists()


def _cases(fn) -> int:
    """Test items of ``fn``: the product of its parametrizations."""
    n = 1
    for mark in getattr(fn, "pytestmark", []):
        if mark.name == "parametrize":
            n *= len(mark.args[1])
    return n


def test_bad_input_figures_match_the_suite():
    """The round-two table of docs/formats.md counts the case lists of the suite."""
    import re

    from . import test_fuzz_readers, test_memory_bounds, test_sweep

    absurd = test_memory_bounds.TestAbsurdFlags
    counts = {
        "sweep grids": len(test_sweep.GRID_CASES),
        "trace readers": len(test_fuzz_readers.READER_CASES),
        "`serving predict`": len(PREDICT_CASES),
        "user-given sizes": sum(_cases(getattr(absurd, n)) for n in dir(absurd)
                                if n.startswith("test_")),
        "sweep faults": sum(_cases(f) for f in test_sweep.FAULT_TESTS),
    }
    doc = (Path(__file__).parent.parent / "docs" / "formats.md").read_text()
    for surface, n in counts.items():
        m = re.search(rf"^\| {re.escape(surface)} \| (\d+) \| (\d+) \|", doc, re.M)
        assert m, surface
        assert (int(m[1]), int(m[2])) == (n, n), (surface, n)
