"""toolkit.store.parquet.table against Arrow: every file it writes reads back (Arrow, DuckDB,
Polars, the store) as the table it was given, with statistics readers can use, whatever
the values (extremes, wrap-around deltas, several row groups, several strings)."""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolkit
from tests.budget import examples
from toolkit import schema
from toolkit.ingest import ingest_file
from toolkit.store.parquet.sink import with_dictionary_strings
from toolkit.store.parquet.table import FlatWriter, writable

SCHEMA = pa.schema([
    pa.field("run_id", pa.dictionary(pa.int32(), pa.string()), nullable=False),
    pa.field("name", pa.string(), nullable=False),
    pa.field("a64", pa.int64(), nullable=False),
    pa.field("a32", pa.int32(), nullable=False),
    pa.field("a16", pa.int16(), nullable=False),
    pa.field("a8", pa.int8(), nullable=False),
    pa.field("flag", pa.bool_(), nullable=False),
])
PLAIN = schema.TABLES["selection_replay"]


def ints(dtype: type, n: int, how: str, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    if how == "extreme":  # full range: deltas wrap at the column's width
        return rng.choice(np.array([info.min, info.max, 0, -1, 1], dtype=dtype), n)
    if how == "random":
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if how == "runs":  # what replay rows look like: constant runs and counters
        return np.repeat(rng.integers(0, 50, max(n // 7 + 1, 1)), 7)[:n].astype(dtype)
    return np.arange(n, dtype=np.int64).astype(dtype)


@st.composite
def tables(draw: st.DrawFn) -> tuple[pa.Table, int]:
    n = draw(st.integers(0, 700))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    how = {c: draw(st.sampled_from(["extreme", "random", "runs", "count"]))
           for c in ("a64", "a32", "a16", "a8")}
    run = draw(st.text(max_size=20))
    names = draw(st.lists(st.text(max_size=8), min_size=1, max_size=3))
    data = {
        "run_id": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                                 pa.array([run])),
        "name": pa.array([names[i % len(names)] for i in range(n)], pa.string()),
        "a64": ints(np.int64, n, how["a64"], rng), "a32": ints(np.int32, n, how["a32"], rng),
        "a16": ints(np.int16, n, how["a16"], rng), "a8": ints(np.int8, n, how["a8"], rng),
        "flag": rng.random(n) < draw(st.floats(0, 1)),
    }
    return pa.table(data, schema=SCHEMA), draw(st.integers(1, 800))


def plain_types(t: pa.Table) -> pa.Table:
    """What a reader sees: strings, not dictionaries (no Arrow schema is stored)."""
    return t.cast(pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(
        f.type) else f.type, nullable=False) for f in t.schema]))


@pytest.mark.slow
@settings(max_examples=examples(120), deadline=None)
@given(tables())
def test_reads_back_as_given(tmp_path_factory, case):
    t, group = case
    path = tmp_path_factory.mktemp("flat") / "t.parquet"
    w = FlatWriter(path, SCHEMA)
    w.write(t.slice(0, t.num_rows // 2), group)  # two writes: row groups appended
    w.write(t.slice(t.num_rows // 2), group)
    w.close()
    want = plain_types(t)
    got = pq.read_table(path)
    assert got.equals(want)
    md = pq.ParquetFile(path).metadata
    assert md.num_rows == t.num_rows
    assert all(md.row_group(g).num_rows <= group for g in range(md.num_row_groups))
    # statistics as the values are: a reader that skips row groups by them is right
    for g in range(md.num_row_groups):
        rg = pq.ParquetFile(path).read_row_group(g)
        for c in ("a64", "a32", "a16", "a8"):
            col = md.row_group(g).column(SCHEMA.get_field_index(c))
            assert col.statistics.has_min_max
            assert col.statistics.min == min(rg.column(c).to_pylist())
            assert col.statistics.max == max(rg.column(c).to_pylist())
    if t.num_rows:
        lo = int(np.min(t.column("a64").to_numpy()))
        n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{path}') WHERE a64 = {lo}"
                       ).fetchall()[0][0]
        assert n == int(np.sum(t.column("a64").to_numpy() == lo))
        got_sql = duckdb.sql(f"SELECT sum(a32), sum(a16), count(DISTINCT name), "
                             f"min(run_id), count_if(flag) FROM read_parquet('{path}')")
        assert got_sql.fetchall()[0] == (
            int(np.sum(t.column("a32").to_numpy().astype(np.int64))),
            int(np.sum(t.column("a16").to_numpy().astype(np.int64))),
            len(set(t.column("name").to_pylist())), t.column("run_id")[0].as_py(),
            int(np.sum(t.column("flag").to_numpy(zero_copy_only=False))))
    assert pl.read_parquet(path).equals(pl.from_arrow(want))


def test_writable_only_flat_required_columns():
    assert writable(SCHEMA)
    assert writable(with_dictionary_strings(PLAIN))
    assert not writable(pa.schema([pa.field("x", pa.int64())]))  # nullable
    assert not writable(pa.schema([pa.field("x", pa.float64(), nullable=False)]))
    assert not writable(pa.schema([pa.field("x", pa.list_(pa.int32()), nullable=False)]))
    with pytest.raises(ValueError, match="not a schema"):
        FlatWriter("/nonexistent/never", pa.schema([pa.field("x", pa.float64())]))


def test_other_schema_refused(tmp_path):
    w = FlatWriter(tmp_path / "t.parquet", SCHEMA)
    with pytest.raises(ValueError, match="differs"):
        w.write(pa.table({"x": [1]}))
    w.abort()


def test_replay_results_land_as_arrow_writes_them(tmp_path):
    """The store's per-row results go through this writer; the table read back is the
    replay's own, through Arrow and through SQL."""
    from pathlib import Path

    from toolkit.replay.selections import SelectionReplayConfig, replay_selections

    smollm2 = Path(__file__).resolve().parents[1] / "traces" / "smollm2"
    with toolkit.open_store(tmp_path / "s", create=True) as store:
        ingest_file(store, "bundle", smollm2, "smollm2", select="smollm2-softmax-sum")
        out = replay_selections(store, SelectionReplayConfig("smollm2", "lru", 128),
                                workers=1, progress=False)
        path = store.key_file("selection_replay", out["run_id"])
        assert pq.ParquetFile(path).metadata.created_by.startswith("kvtier-toolkit")
        rows = store.read("selection_replay", out["run_id"])
        assert rows.schema.equals(PLAIN)
        assert rows.num_rows == out["rows"]
        assert int(np.sum(rows.column("misses").to_numpy())) == out["misses"]
        assert store.query("SELECT sum(hits) FROM selection_replay WHERE run_id = $r",
                           {"r": out["run_id"]}).item() == out["hits"]


def test_null_dictionary_entry_refused(tmp_path):
    """A dictionary entry that is null passes a null count of 0; the column is required,
    so the writer refuses it instead of writing another value or an empty string."""
    sch = pa.schema([pa.field("s", pa.dictionary(pa.int32(), pa.string()), nullable=False)])
    col = pa.chunked_array([
        pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array([None], pa.string())),
        pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["x"]))])
    w = FlatWriter(tmp_path / "t.parquet", sch)
    with pytest.raises(ValueError, match="null"):
        w.write(pa.table({"s": col}, schema=sch))
    w.abort()


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 30_720, 30_721])
@pytest.mark.parametrize("offset", [0, 3, 8, 16])
def test_bool_pages_are_the_bitmap_packed_again(n, offset):
    """A boolean column's PLAIN bytes taken from Arrow's bitmap (whole chunks at a byte
    offset) are the bytes of unpacking and packing it again, padding bits zero."""
    from toolkit.store.parquet.table import _plain_bools

    bits = np.random.default_rng(n + offset).random(n + offset + 5) < 0.5
    bits[-5:] = True  # set bits past the slice: they must not leak into the padding
    col = pa.chunked_array([pa.array(bits).slice(offset, n)])
    assert _plain_bools(col) == np.packbits(bits[offset:offset + n], bitorder="little").tobytes()


@pytest.mark.parametrize("values", [["only"], [None], ["a", None]])
def test_one_or_few_string_rows(tmp_path, values):
    """A one-row string column (a run's summary row) is written as a one-value dictionary
    without Arrow's compute kernels; a null in a required column is refused by name."""
    sch = pa.schema([pa.field("s", pa.string(), nullable=False)])
    t = pa.Table.from_arrays([pa.array(values, pa.string())], schema=sch)
    w = FlatWriter(tmp_path / "a.parquet", sch)
    if None in values:
        with pytest.raises(ValueError, match="column 's' has 1 null"):
            w.write(t)
        w.abort()
        return
    w.write(t)
    w.close()
    assert pq.read_table(tmp_path / "a.parquet").column("s").to_pylist() == values
