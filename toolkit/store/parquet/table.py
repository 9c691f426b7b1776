"""Flat tables of integers, booleans and one-value string columns written as Parquet
without Arrow's writer: the per-row results of a selection replay.

Why: a replay of the real 2M-access SmolLM2 trace writes 30,720 result rows, and Arrow's
writer took 2.0-3.3 ms of the replay's ~18 ms for ~200 KB (lz4; its per-column writer
setup and page machinery, not the compression: uncompressed was no faster, and writing
the 1.4 MB of PLAIN values costs 1.5 ms on the project VM's page cache). Here one
compiled pass per column DELTA_BINARY_PACKED-encodes the integers (~160 KB, as Arrow's
delta encoding gives), booleans are bit-packed PLAIN, and a string column holding one
value (a replay's ``run_id`` and ``trace``) is a one-entry dictionary page plus one RLE
run. Row groups are written as they come (the sink streams), with min/max statistics, v1
data pages, no compression; a string column of several values is written PLAIN. Any other
column type or a nullable column makes :func:`writable` say no, and the caller uses Arrow
(``tests/test_parquet_table.py`` reads every file back with Arrow, DuckDB and Polars
against Arrow's own table).
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from toolkit.schema import null_refused
from toolkit.store.parquet.row import (
    _BOOLEAN,
    _BYTE_ARRAY,
    _INT32,
    _INT64,
    _PLAIN,
    _REQUIRED,
    _RLE,
    _T_BINARY,
    _T_I32,
    _T_I64,
    _T_LIST,
    _T_STRUCT,
    _UTF8,
    _binary,
    _field,
    _list,
    _varint,
    _zz,
)

CREATED_BY = b"kvtier-toolkit parquet_table"
_DELTA, _RLE_DICTIONARY = 5, 8  # Encoding
_DATA_PAGE, _DICTIONARY_PAGE = 0, 2  # PageType
_INT_8, _INT_16 = 15, 16  # ConvertedType
_T_BYTE, _T_TRUE = 3, 1  # Thrift compact: a byte; a bool field whose value is true
_BLOCK, _MINI = 128, 4  # values per delta block; miniblocks per block (32 values each)

_KINDS = {pa.int64(): "int64", pa.int32(): "int32", pa.int16(): "int16", pa.int8(): "int8",
          pa.bool_(): "bool", pa.string(): "string",
          pa.dictionary(pa.int32(), pa.string()): "string"}
_PHYSICAL = {"int64": _INT64, "int32": _INT32, "int16": _INT32, "int8": _INT32,
             "bool": _BOOLEAN, "string": _BYTE_ARRAY}


def writable(schema: pa.Schema) -> bool:
    """Whether this module writes files of ``schema``: flat, every column required and
    of a type it encodes."""
    return all(not f.nullable and f.type in _KINDS for f in schema)


def _one_type(values: np.ndarray) -> np.ndarray:
    """int64 as it is, any other integer column as int32, read-only either way: the
    encoder is compiled for these two array types only (it was for seven: four dtypes, each
    read-only from Arrow or writable, ~3 s of compiling each). Widening an int16 or int8
    column copies it; those are short per-row columns of a replay's results."""
    if values.dtype != np.int64 and values.dtype != np.int32:
        values = values.astype(np.int32)
    if values.flags.writeable:
        values = values.view()
        values.flags.writeable = False
    return values


def _delta_bytes(values: np.ndarray, bits: int) -> tuple[bytes, int, int]:
    from toolkit.store.parquet.table_kernels import delta_encode

    n = values.size
    # header <= 40 bytes; per block a min delta (<= 10), 4 widths, 4 x 32 x 8 bytes at most
    out = np.empty(40 + (n // _BLOCK + 1) * (14 + _BLOCK * 8), dtype=np.uint8)
    used, lo, hi = delta_encode(_one_type(values), bits, out)
    return out[:used].tobytes(), int(lo), int(hi)


def _one_string(col: pa.ChunkedArray) -> bytes | None:
    """The single value of a string column (dictionary-encoded or not), as UTF-8; None
    if it holds more than one (or a null)."""
    chunks = [c for c in col.chunks if len(c)]
    if not chunks:
        return None
    if len(col) == 1 and not pa.types.is_dictionary(chunks[0].type):
        # a run's summary row: no compute kernel (nor pyarrow.compute's ~0.08 s import)
        v = chunks[0].cast(pa.string())[0].as_py()
        return None if v is None else v.encode("utf-8")
    if all(pa.types.is_dictionary(c.type) for c in chunks):
        first = None
        for c in chunks:
            if c.null_count:
                return None  # a null row: several values (refused on the PLAIN path)
            if len(c.dictionary) == 1:  # a valid array's every index is 0 (a replay's)
                v = c.dictionary[0].as_py()
            else:  # min == max: one index used (unique() was 0.13 ms for 30,720 rows)
                import pyarrow.compute as pc  # ~0.08 s to import: only when needed

                used = pc.min_max(c.indices)
                if used["min"] != used["max"]:
                    return None
                v = c.dictionary[used["min"].as_py()].as_py()
            if v is None or (first is not None and v != first):
                return None  # a null entry (refused on the PLAIN path), or another value
            first = v
        return first.encode("utf-8") if first is not None else None
    import pyarrow.compute as pc

    values = pc.unique(col.cast(pa.string()))
    return values[0].as_py().encode("utf-8") if len(values) == 1 else None


def _plain_bools(col: pa.ChunkedArray) -> bytes:
    """PLAIN BOOLEAN values: bit-packed, least significant bit first, as Arrow holds
    them, so a whole chunk's bitmap is taken as it is (unpacking it to bytes and packing
    them again was 37 us of a 30,720-row group); bits past the last value are zero."""
    if col.num_chunks == 1 and col.null_count == 0:
        arr = col.chunk(0)
        if arr.offset % 8 == 0:
            n = len(arr)
            body = bytearray(memoryview(arr.buffers()[1])[arr.offset // 8:
                                                          arr.offset // 8 + (n + 7) // 8])
            if n % 8:
                body[-1] &= (1 << (n % 8)) - 1
            return bytes(body)
    bits = col.combine_chunks().to_numpy(zero_copy_only=False)
    return np.packbits(bits, bitorder="little").tobytes()


def _plain_strings(col: pa.ChunkedArray, name: str) -> bytes:
    """PLAIN BYTE_ARRAY values (a 4-byte length, then the bytes) of a string column."""
    from toolkit.store.parquet.table_kernels import plain_kernel

    arr = col.cast(pa.string()).combine_chunks()
    if arr.null_count:  # e.g. a dictionary entry that is null: a required column
        raise null_refused(name, arr.null_count)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset:arr.offset + len(arr)
                                                               + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8) if arr.buffers()[2] is not None \
        else np.zeros(0, np.uint8)
    out = np.empty(4 * len(arr) + int(offsets[-1] - offsets[0]), dtype=np.uint8)
    plain_kernel(offsets, data, out)
    return out.tobytes()


def _page(kind: int, body: bytes, head_fields: bytes) -> bytes:
    """A page header (uncompressed) then its body; ``head_fields``: its type's header."""
    n = _zz(len(body))
    return b"".join((_field(1, _T_I32), _zz(kind), _field(1, _T_I32), n, _field(1, _T_I32),
                     n, head_fields, b"\x00", body))


@functools.lru_cache(maxsize=256)
def _meta_head(kind: str, encodings: tuple[int, ...], name: str) -> bytes:
    """ColumnMetaData fields 1-4 (type, encodings, path, codec): the same for a column in
    every row group, so built once (~0.1 ms of Python a 11-column group)."""
    return b"".join((
        _field(1, _T_I32), _zz(_PHYSICAL[kind]),  # 1 type
        _field(1, _T_LIST), _list(len(encodings), _T_I32),
        b"".join(_zz(e) for e in encodings),  # 2 encodings
        _field(1, _T_LIST), _list(1, _T_BINARY), _binary(name.encode("utf-8")),  # 3 path
        _field(1, _T_I32), _zz(0)))  # 4 codec: uncompressed


@functools.lru_cache(maxsize=256)
def _data_header(rows: int, encoding: int) -> bytes:
    # 5 data_page_header: 1 num_values, 2 encoding, 3/4 level encodings (RLE; none here)
    return (_field(2, _T_STRUCT) + _field(1, _T_I32) + _zz(rows) + _field(1, _T_I32)
            + _zz(encoding) + _field(1, _T_I32) + _zz(_RLE) + _field(1, _T_I32) + _zz(_RLE)
            + b"\x00")


def _stats(lo: bytes, hi: bytes) -> bytes:
    # 12 statistics: 3 null_count, 5 max_value, 6 min_value
    return (_field(3, _T_I64) + _zz(0) + _field(2, _T_BINARY) + _binary(hi)
            + _field(1, _T_BINARY) + _binary(lo) + b"\x00")


class FlatWriter:
    """Writes row groups of one flat schema to ``path`` (see :func:`writable`)."""

    def __init__(self, path: str | Path, schema: pa.Schema) -> None:
        if not writable(schema):
            raise ValueError(f"not a schema this writer takes: {schema}")
        self.schema = schema
        self._kinds = [_KINDS[f.type] for f in schema]
        self._groups: list[bytes] = []
        self._rows = 0
        self._f: BinaryIO = open(path, "wb")  # closed by close()
        self._f.write(b"PAR1")
        self._at = 4

    def write(self, table: pa.Table, row_group_size: int | None = None) -> None:
        """Append ``table`` (of this schema's columns and types) as row groups of at most
        ``row_group_size`` rows."""
        if not table.schema.equals(self.schema):
            raise ValueError("table schema differs from the writer's")
        step = row_group_size or max(table.num_rows, 1)
        for a in range(0, table.num_rows, step):
            self._write_group(table.slice(a, step))

    def _write_group(self, t: pa.Table) -> None:
        rows = t.num_rows
        chunks, pages, total = [], [], 0
        for i, (f, kind) in enumerate(zip(self.schema, self._kinds, strict=True)):
            col = t.column(i)
            start = self._at
            dict_at = None
            value = _one_string(col) if kind == "string" else None
            if kind == "string" and value is None:  # several values: PLAIN byte arrays
                page = _page(_DATA_PAGE, _plain_strings(col, f.name), _data_header(rows, _PLAIN))
                encodings = (_PLAIN, _RLE)
                stats = b""
            elif kind == "string":
                dict_at = start
                dpage = _page(_DICTIONARY_PAGE, struct.pack("<I", len(value)) + value,
                              _field(4, _T_STRUCT) + _field(1, _T_I32) + _zz(1)
                              + _field(1, _T_I32) + _zz(_PLAIN) + b"\x00")
                # RLE_DICTIONARY: bit width 1, one RLE run of index 0 over every row
                body = b"\x01" + _varint(rows << 1) + b"\x00"
                page = dpage + _page(_DATA_PAGE, body, _data_header(rows, _RLE_DICTIONARY))
                encodings = (_PLAIN, _RLE, _RLE_DICTIONARY)
                stats = _stats(value, value)
            elif kind == "bool":
                body = _plain_bools(col)
                page = _page(_DATA_PAGE, body, _data_header(rows, _PLAIN))
                encodings = (_PLAIN, _RLE)
                stats = b""
            else:
                values = col.to_numpy()
                width = 64 if kind == "int64" else 32
                body, lo, hi = _delta_bytes(values, width)
                page = _page(_DATA_PAGE, body, _data_header(rows, _DELTA))
                encodings = (_DELTA, _RLE)
                fmt = "<q" if width == 64 else "<i"
                stats = _stats(struct.pack(fmt, lo), struct.pack(fmt, hi)) if rows else b""
            pages.append(page)
            size = len(page)
            self._at += size
            total += size
            meta = b"".join((
                _meta_head(kind, encodings, f.name),  # 1-4
                _field(1, _T_I64), _zz(rows),  # 5 num_values
                _field(1, _T_I64), _zz(size), _field(1, _T_I64), _zz(size),  # 6, 7 sizes
                _field(2, _T_I64), _zz(start if dict_at is None else start + len(dpage)),
                # 9 data_page_offset; 11 dictionary_page_offset; 12 statistics
                (_field(2, _T_I64) + _zz(dict_at)) if dict_at is not None else b"",
                (_field(1 if dict_at is not None else 3, _T_STRUCT) + stats) if stats else b"",
                b"\x00"))
            # ColumnChunk: 2 file_offset, 3 meta_data
            chunks.append(_field(2, _T_I64) + _zz(start) + _field(1, _T_STRUCT) + meta
                          + b"\x00")
        self._f.write(b"".join(pages))  # one call a row group, not one a column
        self._groups.append(_field(1, _T_LIST) + _list(len(chunks), _T_STRUCT)
                            + b"".join(chunks) + _field(1, _T_I64) + _zz(total)
                            + _field(1, _T_I64) + _zz(rows) + b"\x00")
        self._rows += rows

    def _schema_list(self) -> bytes:
        elements = [_field(4, _T_BINARY) + _binary(b"schema") + _field(1, _T_I32)
                    + _zz(len(self.schema)) + b"\x00"]
        for f, kind in zip(self.schema, self._kinds, strict=True):
            el = (_field(1, _T_I32) + _zz(_PHYSICAL[kind]) + _field(2, _T_I32) + _zz(_REQUIRED)
                  + _field(1, _T_BINARY) + _binary(f.name.encode("utf-8")))
            if kind == "string":  # converted_type UTF8 (6), logicalType STRING (10: 1)
                el += (_field(2, _T_I32) + _zz(_UTF8) + _field(4, _T_STRUCT)
                       + _field(1, _T_STRUCT) + b"\x00" + b"\x00")
            elif kind in ("int16", "int8"):  # INT_16 / INT_8, logicalType INTEGER (10)
                width = 16 if kind == "int16" else 8
                el += (_field(2, _T_I32) + _zz(_INT_16 if width == 16 else _INT_8)
                       + _field(4, _T_STRUCT) + _field(10, _T_STRUCT)
                       + _field(1, _T_BYTE) + bytes([width]) + _field(1, _T_TRUE)
                       + b"\x00" + b"\x00")
            elements.append(el + b"\x00")
        return _field(1, _T_LIST) + _list(len(elements), _T_STRUCT) + b"".join(elements)

    def close(self) -> None:
        """Write the footer and close the file."""
        if self._f.closed:
            return
        try:
            footer = (_field(1, _T_I32) + _zz(1) + self._schema_list()  # 1 version, 2 schema
                      + _field(1, _T_I64) + _zz(self._rows)  # 3 num_rows
                      + _field(1, _T_LIST) + _list(len(self._groups), _T_STRUCT)
                      + b"".join(self._groups)  # 4 row_groups
                      + _field(2, _T_BINARY) + _binary(CREATED_BY)  # 6 created_by
                      # 7 column_orders, TYPE_ORDER each: without them readers ignore the
                      # statistics' min_value / max_value
                      + _field(1, _T_LIST) + _list(len(self.schema), _T_STRUCT)
                      + (_field(1, _T_STRUCT) + b"\x00\x00") * len(self.schema) + b"\x00")
            self._f.write(footer + struct.pack("<I", len(footer)) + b"PAR1")
        finally:
            self._f.close()

    def abort(self) -> None:
        """Close without a footer (the file is being discarded)."""
        self._f.close()
