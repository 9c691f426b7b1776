"""The store: Parquet + DuckDB views, atomic writes, clear refusals."""

from __future__ import annotations

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import toolkit
from toolkit import schema
from toolkit.errors import StoreError

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
        with toolkit.open_store(tmp_path / "s") as s:
            pass
        with pytest.raises(StoreError, match="closed"):
            s.query("SELECT 1")

    def test_catalog_file_has_the_views(self, store):
        """catalog.duckdb lets the DuckDB CLI query the store directly."""
        store.ingest("azure", AZURE, "az")
        with duckdb.connect(str(store.root / "catalog.duckdb"), read_only=True) as con:
            assert con.sql("SELECT count(*) FROM requests").fetchall() == [(8819,)]


class TestWrite:
    def test_refuses_existing_key_without_replace(self, store):
        store.ingest("azure", AZURE, "az")
        with pytest.raises(StoreError, match="already exists.*--replace"):
            store.ingest("azure", AZURE, "az")

    def test_replace_overwrites(self, store):
        store.ingest("azure", AZURE, "t")
        store.ingest("mooncake", MOONCAKE, "t", replace=True)
        assert store.query("SELECT count(*) AS n FROM requests")["n"][0] == 12031

    def test_schema_mismatch_writes_nothing(self, store):
        """A table missing a column is refused before any file appears."""
        bad = pa.table({"trace": ["x"]})
        with pytest.raises(ValueError, match="lacks column"):
            store.write("requests", "x", bad)
        assert store.keys("requests") == []

    @pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden", "x" * 200, "semi;colon"])
    def test_bad_names_refused(self, store, name):
        with pytest.raises(StoreError, match="invalid trace name"):
            store.ingest("azure", AZURE, name)

    def test_read_columns_and_parts(self, store):
        """``columns`` reads a subset with the schema's types; an unknown column is refused
        by name; the row-group readers of ``read_parts`` add up to ``read``."""
        store.ingest("mooncake", MOONCAKE, "mc")
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
        store.ingest("azure", AZURE, "az")
        with pytest.raises(StoreError, match="known: az"):
            store.read("requests", "nope")
