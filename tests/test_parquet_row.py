"""toolkit.store.parquet.row against Arrow: every file it writes reads back (Arrow, DuckDB, the
store) as the row Arrow would have built, and whatever it does not take is left to Arrow."""

from __future__ import annotations

import io
import math

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolkit
from tests.budget import examples
from toolkit import schema
from toolkit.store.parquet.row import encode_row

RUN_TABLES = ("replay_runs", "selection_runs", "engram_runs", "decode_costs", "tier_runs",
              "sweeps", "compare_runs")

VALUES = {
    "int64": st.integers(-(2**63), 2**63 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "double": st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**53), 2**53),
    "bool": st.booleans(),
    "string": st.text(max_size=40),
}


@st.composite
def rows(draw: st.DrawFn) -> tuple[str, dict[str, object]]:
    table = draw(st.sampled_from(RUN_TABLES))
    row: dict[str, object] = {}
    for f in schema.TABLES[table]:
        value = draw(VALUES[str(f.type)])
        row[f.name] = None if f.nullable and draw(st.booleans()) else value
    return table, row


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal, NaN equal to NaN."""
    if not a.schema.equals(b.schema):
        return False
    for x, y in zip(a.to_pylist()[0].values(), b.to_pylist()[0].values(), strict=True):
        if not (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y))):
            return False
    return True


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None)
@given(rows())
def test_reads_back_as_arrow_would_build_it(case):
    table, row = case
    want = schema.TABLES[table]
    payload = encode_row(want, row)
    assert payload is not None
    got = pq.read_table(io.BytesIO(payload))
    assert same(got, pa.Table.from_pylist([row], schema=want))
    assert pq.ParquetFile(io.BytesIO(payload)).metadata.num_rows == 1


def test_duckdb_and_the_store_read_it(tmp_path):
    row = {f.name: {"int64": -7, "int32": 3, "double": 0.5, "bool": True,
                    "string": "dé"}[str(f.type)] for f in schema.TABLES["selection_runs"]}
    row["model"] = None  # a nullable column left null
    path = tmp_path / "r.parquet"
    path.write_bytes(encode_row(schema.TABLES["selection_runs"], row))
    got = duckdb.sql(f"SELECT * FROM read_parquet('{path}')").fetchall()[0]
    assert list(got) == [row[f.name] for f in schema.TABLES["selection_runs"]]
    with toolkit.open_store(tmp_path / "s", create=True) as store:
        store.write_row("selection_runs", "r", row)
        assert (store.root / "selection_runs" / "r.parquet").read_bytes() == path.read_bytes()
        assert store.read("selection_runs", "r").to_pylist() == [row]
        q = store.query("SELECT mode, model, buffer_tokens FROM selection_runs")
        assert q.rows() == [(row["mode"], None, -7)]


@pytest.mark.parametrize(("column", "value"), [
    ("block_hits", True),  # a bool in an int column: Arrow's call
    ("block_hits", 2**63),  # out of int64's range
    ("block_hits", 1.0),  # a float in an int column
    ("block_hit_ratio", 2**53 + 1),  # an int no double holds exactly
    ("trace", b"bytes"),
    ("trace", "\ud800"),  # a lone surrogate
    ("block_hits", np.float64(2.0)),
])
def test_values_it_does_not_take_go_to_arrow(column, value):
    want = schema.TABLES["replay_runs"]
    row = {f.name: {"int64": 1, "double": 0.5, "string": "x"}[str(f.type)] for f in want}
    assert encode_row(want, {**row, column: value}) is None
    assert encode_row(want, row) is not None


def test_numpy_scalars_and_required_nulls():
    want = schema.TABLES["replay_runs"]
    row = {f.name: {"int64": np.int64(4), "double": np.float32(0.5), "string": "x"}[
        str(f.type)] for f in want}
    got = pq.read_table(io.BytesIO(encode_row(want, row)))
    assert got.column("block_hits").to_pylist() == [4]
    assert got.column("block_hit_ratio").to_pylist() == [0.5]
    with pytest.raises(ValueError, match="'kind' has 1 null"):
        encode_row(want, {**row, "kind": None})


def test_other_types_are_left_to_arrow():
    assert encode_row(pa.schema([pa.field("x", pa.int16())]), {"x": 1}) is None
    assert encode_row(pa.schema([pa.field("x", pa.list_(pa.int32()))]), {"x": [1]}) is None
