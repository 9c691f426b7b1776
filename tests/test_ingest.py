"""Readers: exact figures on the bundled real traces, and clear errors that lose nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.errors import StoreError, TraceFormatError
from toolkit.ingest import ingest_file, readers
from toolkit.ingest.azure import parse_timestamp

from .conftest import AZURE, MOONCAKE, snapshot


class TestMooncake:
    def test_exact_figures(self, mooncake_store):
        """Totals of the 12,031-line conversation trace, checked against the raw file."""
        with MOONCAKE.open() as f:
            raw = [json.loads(line) for line in f]
        df = mooncake_store.query(
            "SELECT count(*) n, sum(input_tokens)::BIGINT i, sum(output_tokens)::BIGINT o, "
            "sum(len(block_hashes))::BIGINT b, max(arrival_s) t FROM requests"
        ).row(0)
        assert df == (
            12031,
            sum(r["input_length"] for r in raw),
            sum(r["output_length"] for r in raw),
            sum(len(r["hash_ids"]) for r in raw),
            raw[-1]["timestamp"] / 1000,
        )
        assert df[:4] == (12031, 144_793_823, 4_122_048, 288_500)

    def test_first_row(self, mooncake_store):
        row = mooncake_store.query("SELECT * FROM requests WHERE request_id = 3").row(0, named=True)
        assert row == {
            "trace": "conv", "request_id": 3, "arrival_s": 0.0, "input_tokens": 2290,
            "output_tokens": 316, "block_tokens": 512, "block_hashes": [0, 42, 43, 44, 45],
            "session_id": None, "turn": None,
        }


class TestAzure:
    def test_exact_figures(self, store):
        ingest_file(store, "azure", AZURE)
        n, i, o, t = store.query(
            "SELECT count(*), sum(input_tokens)::BIGINT, sum(output_tokens)::BIGINT, "
            "max(arrival_s) FROM requests WHERE trace = 'AzureLLMInferenceTrace_code'"
        ).row(0)
        assert (n, i, o) == (8819, 18_059_974, 245_896)
        # last row 2023-11-16 19:14:19.9280160 minus first 18:17:03.9799600
        assert t == pytest.approx(3435.948056, abs=1e-9)

    def test_seven_fractional_digits_kept(self):
        ns = parse_timestamp("2023-11-16 18:17:03.9799601", Path("x"), 2)
        assert ns % 1000 == 100


def _mooncake_line(ts=0, inp=1024, out=5, hashes=(1, 2), **over):
    rec = {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": list(hashes)}
    rec.update(over)
    return json.dumps(rec)


MOONCAKE_BAD = {
    "bad_json": ('{"timestamp": 5, "input_length": ', None, "invalid JSON"),
    "missing_field": (json.dumps({"timestamp": 5, "input_length": 1, "output_length": 1}),
                      "hash_ids", "missing"),
    "negative_length": (_mooncake_line(ts=5, inp=-3), "input_length", "must be >= 0"),
    "non_integer_length": (_mooncake_line(ts=5, out=2.5), "output_length", "expected an integer"),
    "string_length": (_mooncake_line(ts=5, inp="12"), "input_length", "non-negative integer"),
    "bad_hash_type": (_mooncake_line(ts=5, hashes=(1, "x")), "hash_ids[1]", "int64 block id"),
    "hash_not_list": (_mooncake_line(ts=5, hash_ids=7), "hash_ids", "list of integers"),
    "non_monotonic": (_mooncake_line(ts=-1), "timestamp", "earlier than"),
    "not_an_object": ("[1, 2, 3]", None, "JSON object"),
}


class TestBadInput:
    @pytest.mark.parametrize("case", sorted(MOONCAKE_BAD))
    def test_mooncake_error_names_file_line_field_and_store_unchanged(self, store, tmp_path, case):
        """Each malformed line stops the ingest; the store keeps its previous contents."""
        ingest_file(store, "azure", AZURE, "before")
        before = snapshot(store.root)
        bad_line, field, msg = MOONCAKE_BAD[case]
        path = tmp_path / "bad.jsonl"
        lines = [_mooncake_line(ts=0), _mooncake_line(ts=1), bad_line, _mooncake_line(ts=9)]
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(TraceFormatError) as err:
            ingest_file(store, "mooncake", path)
        e = err.value
        assert (e.path, e.line, e.field) == (str(path), 3, field)
        assert str(path) in str(e) and ":3 " in str(e) and msg in str(e)
        assert snapshot(store.root) == before
        assert store.traces() == ["before"]

    def test_corrupt_line_in_middle_of_large_file(self, store, tmp_path):
        """200,000 lines with one bad record at line 100,001: error there, nothing written."""
        path = tmp_path / "big.jsonl"
        good = _mooncake_line(ts=7, inp=2048, hashes=range(4))
        with path.open("w") as f:
            for i in range(200_000):
                f.write(_mooncake_line(ts=7, inp=-1) if i == 100_000 else good)
                f.write("\n")
        with pytest.raises(TraceFormatError, match=r"big\.jsonl:100001 .*'input_length'"):
            ingest_file(store, "mooncake", path)
        assert store.traces() == []
        assert list((store.root / ".staging").glob("*")) == []

    @pytest.mark.parametrize(
        ("row", "field", "msg"),
        [
            ("2023-11-16 18:17:04.1,12,x", "GeneratedTokens", "non-negative integer"),
            ("2023-11-16 18:17:04.1,-5,3", "ContextTokens", "must be >= 0"),
            ("yesterday,5,3", "TIMESTAMP", "expected 'YYYY-MM-DD"),
            ("2023-11-16 18:17:02.0,5,3", "TIMESTAMP", "earlier than"),
            ("2023-13-16 18:17:05.0,5,3", "TIMESTAMP", "month"),
        ],
    )
    def test_azure_errors(self, store, tmp_path, row, field, msg):
        path = tmp_path / "az.csv"
        path.write_text(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n"
            + row + "\n"
        )
        with pytest.raises(TraceFormatError, match=msg) as err:
            ingest_file(store, "azure", path)
        assert (err.value.line, err.value.field) == (3, field)
        assert store.traces() == []

    def test_azure_missing_column(self, store, tmp_path):
        path = tmp_path / "az.csv"
        path.write_text("TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,4808\n")
        with pytest.raises(TraceFormatError, match="GeneratedTokens.*missing column"):
            ingest_file(store, "azure", path)

    def test_existing_name_refused_before_parsing(self, store, tmp_path):
        """--replace is required, and the refusal comes before reading a (bad) file."""
        ingest_file(store, "azure", AZURE, "t")
        bad = tmp_path / "t.jsonl"
        bad.write_text("not json\n")
        with pytest.raises(StoreError, match="already exists"):
            ingest_file(store, "mooncake", bad, "t")

    def test_missing_file(self, store, tmp_path):
        with pytest.raises(TraceFormatError, match="no such file or directory"):
            ingest_file(store, "mooncake", tmp_path / "nope.jsonl")

    def test_unknown_format_lists_known(self, store):
        known = ("known: agentic, azure, bailian, bundle, burstgpt, dsa-jsonl, mooncake, "
                 "npz, parquet")
        with pytest.raises(KeyError, match=known):
            ingest_file(store, "bogus", AZURE)


def test_registry_refuses_duplicates():
    with pytest.raises(KeyError, match="already registered"):
        readers.register("mooncake", readers.get("mooncake"))


class TestBinaryJunk:
    def test_mooncake_non_utf8_line(self, store, tmp_path):
        """A corrupt byte sequence is reported at its line, not as a Python traceback."""
        path = tmp_path / "junk.jsonl"
        path.write_bytes(_mooncake_line(ts=0).encode() + b"\n\xff\xfe\x00garbage\n")
        with pytest.raises(TraceFormatError, match=r"junk\.jsonl:2 .*not UTF-8"):
            ingest_file(store, "mooncake", path)
        assert store.traces() == []

    def test_azure_non_utf8_row(self, store, tmp_path):
        path = tmp_path / "junk.csv"
        path.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
                         b"2023-11-16 18:17:03.9799600,4808,10\n\xff\xfe,1,2\n")
        with pytest.raises(TraceFormatError, match="not UTF-8"):
            ingest_file(store, "azure", path)
        assert store.traces() == []


@pytest.mark.parametrize(("text", "ns"), [
    ("2023-11-16 18:17:03.9799601", 1700158623_979960100),
    ("2023-11-16T18:17:03.9799601Z", 1700158623_979960100),
    ("2023-11-16 20:17:03.5+02:00", 1700158623_500000000),
    ("2023-11-16 18:17:03", 1700158623_000000000),
])
def test_azure_timestamp_forms(text, ns):
    """Seven fractional digits kept; Z and +HH:MM offsets honoured; no zone means UTC."""
    assert parse_timestamp(text, Path("x"), 2) == ns
