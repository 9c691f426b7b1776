"""The store: Parquet + DuckDB views, atomic writes, clear refusals."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import toolkit
from toolkit import schema
from toolkit.errors import StoreError
from toolkit.ingest import ingest_file

from .conftest import AZURE, MOONCAKE


class TestOpenStore:
    def test_empty_store_has_typed_empty_views(self, store):
        """Every table is queryable before anything is ingested, with its schema's types."""
        assert store.tables() == sorted(schema.TABLES)
        df = store.query("SELECT * FROM requests")
        assert df.height == 0
        assert df.schema["block_hashes"] == pl.List(pl.Int64)
        assert df.schema["turn"] == pl.Int32

    def test_context_manager_closes(self, tmp_path):
        """Queries after the with-block fail with a StoreError, not a crash."""
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            pass
        with pytest.raises(StoreError, match="closed"):
            s.query("SELECT 1")

    def test_catalog_file_has_the_views(self, store):
        """catalog.duckdb lets the DuckDB CLI query the store directly."""
        ingest_file(store, "azure", AZURE, "az")
        with duckdb.connect(str(store.root / "catalog.duckdb"), read_only=True) as con:
            assert con.sql("SELECT count(*) FROM requests").fetchall() == [(8819,)]


class TestWrite:
    def test_refuses_existing_key_without_replace(self, store):
        ingest_file(store, "azure", AZURE, "az")
        with pytest.raises(StoreError, match="already exists.*--replace"):
            ingest_file(store, "azure", AZURE, "az")

    def test_replace_overwrites(self, store):
        ingest_file(store, "azure", AZURE, "t")
        ingest_file(store, "mooncake", MOONCAKE, "t", replace=True)
        assert store.query("SELECT count(*) AS n FROM requests")["n"][0] == 12031

    def test_schema_mismatch_writes_nothing(self, store):
        """A table missing a column is refused before any file appears."""
        bad = pa.table({"trace": ["x"]})
        with pytest.raises(ValueError, match="lacks column"):
            store.write("requests", "x", bad)
        assert store.keys("requests") == []

    def test_source_stamp_sees_a_rewrite_of_equal_size_and_mtime(self, store):
        """Caches keyed by a file's stamp (stream index, trace facts, sweep streams) must
        not take a rewritten file for the old one when its size is equal and its mtime
        set back (copies, coarse clocks) and the inode is reused: the ctime moves."""
        import os

        ingest_file(store, "azure", AZURE, "az")
        path = store.root / "requests" / "az.parquet"
        before, st = store.source_stamp("requests", "az"), path.stat()
        store.write("requests", "az", store.read("requests", "az"), replace=True)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = store.source_stamp("requests", "az")
        assert after is not None and before is not None and after != before
        assert after[:2] == before[:2]  # same size, same mtime: only the ctime tells
        assert store.source_stamp("requests", "absent") is None

    def test_read_of_an_older_file_fills_a_nullable_column_added_since(self, store):
        """A file written before a nullable column existed reads with that column null
        (the dataset path), and a current file reads as written (the direct path)."""
        import pyarrow.parquet as pq

        row = {f.name: 1 for f in schema.REPLAY_RUNS if pa.types.is_integer(f.type)} | {
            f.name: 0.5 for f in schema.REPLAY_RUNS if pa.types.is_floating(f.type)} | {
            f.name: "x" for f in schema.REPLAY_RUNS if pa.types.is_string(f.type)}
        full = schema.conform(pa.Table.from_pylist([row]), schema.REPLAY_RUNS)
        store.write("replay_runs", "now", full)
        old = full.drop_columns(["capacity_blocks"])
        (store.root / "replay_runs").mkdir(exist_ok=True)
        pq.write_table(old, store.root / "replay_runs" / "old.parquet")
        got = store.read("replay_runs", "old")
        assert got.schema == schema.REPLAY_RUNS
        assert got.column("capacity_blocks").to_pylist() == [None]
        assert got.drop_columns(["capacity_blocks"]).equals(old)
        assert store.read("replay_runs", "now").equals(full)
        assert store.read("replay_runs", "old", columns=["run_id", "capacity_blocks"]
                          ).to_pylist() == [{"run_id": "x", "capacity_blocks": None}]

    def test_read_of_a_foreign_file_with_nulls_in_a_required_column(self, store):
        """A file another tool wrote with a null where the schema has none is read as it
        is (as the dataset layer always did), not refused with a bare ValueError."""
        import pyarrow.parquet as pq

        row = {f.name: 1 for f in schema.REPLAY_RUNS if pa.types.is_integer(f.type)} | {
            f.name: 0.5 for f in schema.REPLAY_RUNS if pa.types.is_floating(f.type)} | {
            f.name: "x" for f in schema.REPLAY_RUNS if pa.types.is_string(f.type)}
        t = pa.Table.from_pylist([row, row | {"requests": None}])
        (store.root / "replay_runs").mkdir(exist_ok=True)
        pq.write_table(t, store.root / "replay_runs" / "ext.parquet")
        got = store.read("replay_runs", "ext")
        assert got.column("requests").to_pylist() == [1, None]
        assert got.schema.names == schema.REPLAY_RUNS.names

    @pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "x" * 200, "semi;colon"])
    def test_bad_names_refused(self, store, name):
        with pytest.raises(StoreError, match="invalid trace name"):
            ingest_file(store, "azure", AZURE, name)

    def test_read_columns_and_parts(self, store):
        """``columns`` reads a subset with the schema's types; an unknown column is refused
        by name; the row-group readers of ``read_parts`` add up to ``read``."""
        ingest_file(store, "mooncake", MOONCAKE, "mc")
        full = store.read("requests", "mc")
        sub = store.read("requests", "mc", columns=["request_id", "block_hashes"])
        assert sub.schema.names == ["request_id", "block_hashes"]
        assert sub.equals(full.select(["request_id", "block_hashes"]))
        with pytest.raises(StoreError, match="no column.*nope"):
            store.read("requests", "mc", columns=["request_id", "nope"])
        with pytest.raises(StoreError, match="no column.*nope"):
            store.read_parts("requests", "mc", columns=["nope"])
        parts = [read() for read in store.read_parts("requests", "mc", ["input_tokens"])]
        assert pa.concat_tables(parts).equals(full.select(["input_tokens"]))

    def test_read_unknown_key_lists_known(self, store):
        ingest_file(store, "azure", AZURE, "az")
        with pytest.raises(StoreError, match="known: az"):
            store.read("requests", "nope")


def _per_row(rows: int, start: int = 0) -> pa.Table:
    """A selection_replay table of ``rows`` rows with distinct values."""
    i = pa.array(range(start, start + rows), pa.int64())
    return pa.table({
        "run_id": ["r"] * rows, "trace": ["t"] * rows, "request_id": i,
        "step": pa.array(range(rows), pa.int32()), "layer": pa.array([3] * rows, pa.int16()),
        "seq_len": pa.array(range(rows), pa.int32()), "accesses": pa.array([5] * rows, pa.int32()),
        "hits": pa.array([2] * rows, pa.int32()), "misses": pa.array([3] * rows, pa.int32()),
        "bytes_h2d": pa.array([30] * rows, pa.int64()), "fast_path": [False] * rows})


class TestSink:
    def test_small_writes_land_as_one_row_group(self, store):
        """Writes smaller than a row group are held and written together; a write of a
        group or more goes out as its own groups; every row lands once, in order."""
        import pyarrow.parquet as pq

        from toolkit.store import row_group_rows

        big = row_group_rows(_per_row(1_000))
        with store.writer("selection_replay", "k") as sink:
            for j in range(10):
                sink.write(_per_row(100, 100 * j))
            sink.write(_per_row(big, 1_000))
            sink.write(_per_row(7, 1_000 + big))
        path = store.root / "selection_replay" / "k.parquet"
        sizes = [pq.ParquetFile(path).metadata.row_group(g).num_rows
                 for g in range(pq.ParquetFile(path).num_row_groups)]
        assert sizes == [1_000, big, 7]
        got = store.read("selection_replay", "k").column("request_id").to_pylist()
        assert got == list(range(1_000 + big + 7))

    def test_flush_ends_a_row_group(self, store):
        import pyarrow.parquet as pq

        with store.writer("selection_replay", "k") as sink:
            for j in range(3):
                sink.write(_per_row(4, 4 * j))
                sink.flush()
        path = store.root / "selection_replay" / "k.parquet"
        assert pq.ParquetFile(path).num_row_groups == 3

    def test_close_writes_what_is_held(self, tmp_path):
        """A sink used on its own (as compaction does) loses nothing at close."""
        import pyarrow.parquet as pq

        from toolkit.store import ParquetSink

        sink = ParquetSink(tmp_path / "x.parquet", schema.TABLES["selection_replay"])
        sink.write(_per_row(3))
        sink.close()
        assert pq.read_table(tmp_path / "x.parquet").num_rows == 3

    def test_dictionary_sink_takes_other_string_types(self, store):
        """string_view and large_string columns (Polars' newer output) have no cast to a
        dictionary: the sink takes them as strings first."""
        t = _per_row(3)
        views = t.set_column(0, "run_id", t.column("run_id").cast(pa.string_view())).set_column(
            1, "trace", t.column("trace").cast(pa.large_string()))
        with store.writer("selection_replay", "v") as sink:
            sink.write(views)
        assert store.read("selection_replay", "v").equals(
            schema.conform(t, schema.TABLES["selection_replay"]))

    def test_per_row_results_read_back_as_plain_strings(self, store):
        """``selection_replay`` streams its string columns dictionary-encoded and writes
        no Arrow schema: a replay's rows and a caller's plain strings land in one file that
        every reader (the store, Parquet alone, DuckDB, compaction) sees with the table's
        own types and the values as given."""
        import numpy as np
        import pyarrow.parquet as pq

        from toolkit.replay.selections import _constant

        plain = _per_row(3)
        coded = _per_row(2).set_column(0, "run_id", _constant("k", 2)).set_column(
            1, "trace", _constant("t2", 2))
        with store.writer("selection_replay", "k") as sink:
            sink.write(plain)
            sink.write(coded)
        want = schema.TABLES["selection_replay"]
        got = store.read("selection_replay", "k")
        assert got.schema == want
        expect = pa.concat_tables([schema.conform(plain, want), schema.conform(
            coded.set_column(0, "run_id", pa.array(["k"] * 2)).set_column(
                1, "trace", pa.array(["t2"] * 2)), want)]).combine_chunks()
        assert got.equals(expect)
        raw = pq.read_table(store.root / "selection_replay" / "k.parquet")
        assert raw.schema.field("run_id").type == pa.string() and raw.equals(expect)
        df = store.query("SELECT trace, count(*) AS n FROM selection_replay GROUP BY 1 "
                         "ORDER BY 1")
        assert df.rows() == sorted(zip(*np.unique(expect.column("trace").to_numpy(
            zero_copy_only=False), return_counts=True), strict=True))
        store.compact(["selection_replay"])
        assert store.read("selection_replay", "k").equals(expect)

    def test_held_rows_are_not_written_after_an_error(self, store):
        with pytest.raises(RuntimeError), store.writer("selection_replay", "k") as sink:
            sink.write(_per_row(5))
            raise RuntimeError("replay failed")
        assert store.keys("selection_replay") == []


class TestConform:
    def test_casts_other_types_and_keeps_right_ones(self):
        t = _per_row(3).set_column(3, "step", pa.array([1, 2, 3], pa.int64()))
        out = schema.conform(t, schema.TABLES["selection_replay"])
        assert out.schema == schema.TABLES["selection_replay"]
        assert out.column("step").to_pylist() == [1, 2, 3]
        assert out.drop_columns(["step"]).to_pydict() == t.drop_columns(["step"]).to_pydict()

    def test_refuses_nulls_in_a_required_column_and_unsafe_casts(self):
        req = [f.name for f in schema.TABLES["selection_replay"] if not f.nullable]
        assert "hits" in req
        t = _per_row(2).set_column(7, "hits", pa.array([1, None], pa.int32()))
        with pytest.raises(ValueError, match="'hits' has 1 null"):
            schema.conform(t, schema.TABLES["selection_replay"])
        t = _per_row(2).set_column(3, "step", pa.array([1, 2**40], pa.int64()))
        with pytest.raises(pa.ArrowInvalid):
            schema.conform(t, schema.TABLES["selection_replay"])
