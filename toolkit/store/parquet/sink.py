"""How the store writes Parquet: codecs and encodings per column, row-group sizes, and
:class:`ParquetSink`, which streams tables into one file."""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.store.parquet.table import FlatWriter, writable

TINY_TABLE_BYTES = 16 << 10  # below this a table is written plain (see parquet_options)
ROW_GROUP_BYTES = 32 << 20  # ~32 MB per row group: selective reads of big list columns


def write_parquet(table: str, data: pa.Table, where: object, nbytes: int | None = None
                   ) -> None:
    """``data`` of ``table`` as one Parquet file at ``where`` (a path or a buffer), with
    the store's row groups and encodings."""
    pq.write_table(data, where, row_group_size=row_group_rows(data, nbytes),
                   **parquet_options(data.schema, data, table_codec(table), nbytes))


def table_codec(table: str) -> str:
    return "lz4" if table in FAST_CODEC_TABLES else "zstd"


FAST_CODEC_TABLES = frozenset({"selection_replay"})
"""Per-row replay results, written on the replay's own path and read rarely: lz4 instead
of zstd. On the real SmolLM2 trace's 30,720 rows that writes in 2.0 ms against 3.1 (a
fifth of that replay) and reads faster, for 1.9x the bytes (~7 bytes a row). Streamed,
their string columns may also arrive dictionary-encoded (see ``ParquetSink``)."""


def with_dictionary_strings(table_schema: pa.Schema) -> pa.Schema:
    """``table_schema`` with its string columns as ``dictionary<int32, string>``."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable)
                      if pa.types.is_string(f.type) else f for f in table_schema])


@functools.cache
def sink_schema(table: str) -> pa.Schema:
    """The schema a :meth:`Store.writer` sink of ``table`` holds its tables in: a table
    built with it is taken as it is (for the per-row results of a replay of the real
    SmolLM2 trace, conforming a table built otherwise was 0.3 ms of ~15)."""
    want = schema.TABLES[table]
    return with_dictionary_strings(want) if table in FAST_CODEC_TABLES else want


def parquet_options(table_schema: pa.Schema, data: pa.Table | None = None,
                    codec: str = "zstd", nbytes: int | None = None) -> dict[str, object]:
    """``codec`` (zstd unless the table is in ``FAST_CODEC_TABLES``) everywhere, except for
    two kinds of list column that replays read whole:

    * ``list<int32>`` positions (selections' ``topk``): delta-encoded and uncompressed.
      Ascending positions pack to a few bits each and decode at ~200 M values/s on one
      core, against ~90 M/s for zstd + dictionary, which made reading the store slower
      than replaying it.
      The table's flat integer columns (its per-row request, step, layer and length)
      are written the same way.
    * ``list<int64>`` block hashes, when ``data`` shows they are small non-negative ids
      (Mooncake's and Bailian's are renumbered 0..N): delta-encoded, then zstd, with no
      dictionary. On Mooncake x 40 (11.5M lookups) that is 6.4 MB read at 3.9 ns a
      lookup, against 18.5 MB at 5.9 ns with the dictionary. Random 64-bit hashes keep
      the dictionary: repeats are what compresses them (73.8 vs 93.6 MB).

    Dictionaries only where values repeat as whole strings or lists (names, ids, random
    hashes): on numeric columns zstd finds the repeats anyway, and building their
    dictionaries made writing a 10,001-row miss curve take 2.5 ms instead of 1.3.

    ``nbytes``: ``data.nbytes``, if known.
    """
    if data is not None and (data.nbytes if nbytes is None else nbytes) < TINY_TABLE_BYTES \
            and not any(pa.types.is_nested(f.type) for f in table_schema):
        # a run row or a short curve: nothing to compress, and zstd and dictionaries cost
        # ~0.45 ms of a one-row file's ~0.95 ms to write; nor anything for min/max
        # statistics to skip (a whole file is one read), which cost another 0.09 ms
        return {"compression": "none", "use_dictionary": False, "write_statistics": False}
    delta_none = [f"{f.name}.list.element" for f in table_schema
                  if pa.types.is_list(f.type) and f.type.value_type == pa.int32()]
    delta_zstd = [f"{f.name}.list.element" for f in table_schema
                  if data is not None and pa.types.is_list(f.type)
                  and f.type.value_type == pa.int64() and small_ids(data.column(f.name))]
    # beside positions, a replay reads the per-row integers whole too: zstd + PLAIN cost
    # 0.54 ms of a 30,720-row chunk's read in Arrow, where delta pages (33 KB against
    # 3.3 KB) decode in one compiled pass (topk_pages.read_flat)
    flat_delta = [f.name for f in table_schema if delta_none and f.type in FLAT_INTS]
    plain = {c.split(".")[0] for c in delta_none + delta_zstd} | set(flat_delta)
    dictionary = [f"{f.name}.list.element" if pa.types.is_list(f.type) else f.name
                  for f in table_schema if f.name not in plain and repeats_whole(f.type)]
    if not delta_none and not delta_zstd:
        return {"compression": codec, "use_dictionary": dictionary}
    return {
        # v1 pages: the layout parquet/topk_pages.py decodes (Arrow reads any other)
        "data_page_version": "1.0",
        "compression": {f.name: codec for f in table_schema if f.name not in plain}
        | dict.fromkeys(delta_none + flat_delta, "none") | dict.fromkeys(delta_zstd, "zstd"),
        "use_dictionary": dictionary,
        "column_encoding": dict.fromkeys(delta_none + delta_zstd + flat_delta,
                                         "DELTA_BINARY_PACKED"),
    }


FLAT_INTS = (pa.int16(), pa.int32(), pa.int64())


def repeats_whole(t: pa.DataType) -> bool:
    """String-like or nested: a column whose repeats a dictionary stores once."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_dictionary(t) or pa.types.is_nested(t))


def small_ids(column: pa.ChunkedArray) -> bool:
    """Whether a list<int64> column holds only ids in [0, 2**32) (and at least one)."""
    import pyarrow.compute as pc  # ~0.08 s to import: not for a store that only reads

    values = pc.list_flatten(column)
    if len(values) == 0:
        return False
    lo_hi = pc.min_max(values)
    lo, hi = lo_hi["min"].as_py(), lo_hi["max"].as_py()
    return lo is not None and lo >= 0 and hi < 2**32


def row_group_rows(data: pa.Table, nbytes: int | None = None) -> int:
    """Rows per Parquet row group so that a group holds about ``ROW_GROUP_BYTES``.

    A fixed row count would put a whole k=2048 selection trace in one group, and every
    filtered read (one request at a time) would then decode the whole file.
    """
    per_row = (data.nbytes if nbytes is None else nbytes) / max(data.num_rows, 1)
    return int(max(1_024, min(1 << 17, ROW_GROUP_BYTES // max(per_row, 1))))


class ParquetSink:
    """Appends tables conforming to one schema to a Parquet file (see :meth:`Store.writer`).

    Writes smaller than a row group are held (at most one group's worth) and written
    together: a replay streams its per-row results a chunk at a time (4,096 rows for a
    k = 2048 request), and a row group per chunk cost 3x the writing of one per 64K rows
    (measured), on the thread that the replay workers share the cores with.
    A write of a row group or more goes out as it is, so a writer that writes whole
    requests keeps its row groups aligned with them (what ``chunk_specs`` cuts at)."""

    def __init__(self, path: Path, table_schema: pa.Schema, codec: str = "zstd", *,
                 dictionary_strings: bool = False) -> None:
        """``dictionary_strings``: take string columns dictionary-encoded (a replay's
        ``run_id`` and ``trace``, one value each: built as a one-entry dictionary, they
        are not hashed again row by row, 0.4 of 2.4 ms for 30,720 rows) and write the
        file without the Arrow schema, so that every reader still sees plain strings."""
        self.schema = with_dictionary_strings(table_schema) if dictionary_strings else table_schema
        self._coded = [f.name for f in self.schema if pa.types.is_dictionary(f.type)
                       and not pa.types.is_dictionary(table_schema.field(f.name).type)]
        self.rows = 0
        self._held: list[pa.Table] = []
        self._held_rows = 0
        # per-row replay results: our own encoder (parquet/table.py, ~1.6 against
        # 2.3-3.3 ms for 30,720 rows); the Arrow schema is not stored in either case
        self._flat = FlatWriter(path, self.schema) if dictionary_strings and writable(
            self.schema) else None
        self._writer = None if self._flat else pq.ParquetWriter(
            path, self.schema, store_schema=not dictionary_strings,
            **parquet_options(self.schema, codec=codec))

    def write(self, data: pa.Table) -> None:
        for name in self._coded:  # other string types (string_view, large_string) have no
            i = data.schema.get_field_index(name)  # cast to a dictionary: as strings first
            t = data.schema.field(i).type if i >= 0 else None
            if t is not None and not pa.types.is_dictionary(t) and t != pa.string():
                data = data.set_column(i, data.schema.field(i).with_type(pa.string()),
                                       data.column(i).cast(pa.string()))
        data = schema.conform(data, self.schema)
        self.rows += data.num_rows
        group = row_group_rows(data)
        if data.num_rows >= group:
            self.flush()
            self._put(data, group)
            return
        self._held.append(data)
        self._held_rows += data.num_rows
        if self._held_rows >= group:
            self.flush()

    def flush(self) -> None:
        """Write the held tables as one row group."""
        if self._held:
            held = pa.concat_tables(self._held)
            self._held, self._held_rows = [], 0
            self._put(held, max(held.num_rows, 1))

    def _put(self, data: pa.Table, group: int) -> None:
        if self._flat is not None:
            self._flat.write(data, group)
        else:
            self._writer.write_table(data, row_group_size=group)

    def add_metadata(self, metadata: dict[bytes, bytes]) -> None:
        """Key-value pairs for the file's footer (before :meth:`close`)."""
        if self._writer is None:
            raise ValueError("footer metadata needs the Arrow writer (dictionary_strings=False)")
        self._writer.add_key_value_metadata(metadata)

    def close(self, *, flush: bool = True) -> None:
        """Write what is held (unless ``flush`` is false: the file is being discarded)
        and finish the file."""
        if flush:
            self.flush()
        if self._flat is not None:
            (self._flat.close if flush else self._flat.abort)()
        else:
            self._writer.close()
