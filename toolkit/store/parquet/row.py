"""One row of a flat schema encoded as a complete Parquet file, without Arrow's writer.

Why: every replay writes its summary as a one-row file (a run row). Arrow builds the
table (0.07-0.2 ms from a dict) and writes it (0.2-0.5 ms on the project VM, mostly its
per-column writer setup) for ~2 KB of output: a third of a replay of the real 288K-lookup
Mooncake trace, whose kernel takes ~1.2 ms. This module writes the same kind of file
directly: v1 data pages, PLAIN values, uncompressed, no statistics or dictionaries (what
``parquet_options`` gives a table this small anyway), a Thrift compact-protocol footer,
in ~0.03 ms. Everything it does not handle exactly as Arrow would (another column type, a
value Arrow would have to convert or reject) returns None, and the caller uses Arrow,
which raises its own error or converts; so a row lands the same either way
(``tests/test_parquet_row.py`` reads every file back with Arrow and DuckDB).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa

from toolkit.schema import null_refused

CREATED_BY = b"kvtier-toolkit parquet_row"

# Parquet's enums (parquet.thrift)
_BOOLEAN, _INT32, _INT64, _DOUBLE, _BYTE_ARRAY = 0, 1, 2, 5, 6
_REQUIRED, _OPTIONAL = 0, 1
_PLAIN, _RLE = 0, 3
_UTF8 = 0  # ConvertedType
# Thrift compact protocol field types
_T_I32, _T_I64, _T_BINARY, _T_LIST, _T_STRUCT = 5, 6, 8, 9, 12

_INT64_RANGE = (-(2**63), 2**63)
_INT32_RANGE = (-(2**31), 2**31)
_EXACT_DOUBLE = 2**53  # larger ints Arrow refuses to turn into doubles: let it say so


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@functools.lru_cache(maxsize=8192)
def _zz(n: int) -> bytes:
    """A zigzag varint (Thrift compact i32/i64); sizes and offsets repeat, so cached."""
    return _varint((n << 1) ^ (n >> 63))


@functools.lru_cache(maxsize=256)
def _field(delta: int, kind: int) -> bytes:
    """A field header, ``delta`` (1-15) after the previous field id of its struct."""
    return bytes([(delta << 4) | kind])


def _list(size: int, kind: int) -> bytes:
    return bytes([(size << 4) | kind]) if size < 15 else bytes([0xF0 | kind]) + _varint(size)


def _binary(b: bytes) -> bytes:
    return _varint(len(b)) + b


def _plain(kind: str) -> Callable[[object], bytes | None]:
    """PLAIN encoder of one value for a column of Arrow type ``kind``; None = not ours."""
    def int_of(lo: int, hi: int, fmt: str) -> Callable[[object], bytes | None]:
        def enc(v: object) -> bytes | None:
            if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
                return None
            i = int(v)
            return struct.pack(fmt, i) if lo <= i < hi else None
        return enc

    def double(v: object) -> bytes | None:
        if isinstance(v, bool | np.bool_):
            return None
        if isinstance(v, float | np.floating):
            return struct.pack("<d", float(v))
        if isinstance(v, int | np.integer) and abs(int(v)) <= _EXACT_DOUBLE:
            return struct.pack("<d", float(v))
        return None

    def boolean(v: object) -> bytes | None:
        return (b"\x01" if v else b"\x00") if isinstance(v, bool | np.bool_) else None

    def string(v: object) -> bytes | None:
        if not isinstance(v, str):
            return None
        try:
            b = v.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: Arrow's call
            return None
        return struct.pack("<I", len(b)) + b

    return {"int64": int_of(*_INT64_RANGE, "<q"), "int32": int_of(*_INT32_RANGE, "<i"),
            "double": double, "bool": boolean, "string": string}[kind]


_I32, _I64_1, _I64_2, _STRUCT_1 = (_field(1, _T_I32), _field(1, _T_I64), _field(2, _T_I64),
                                   _field(1, _T_STRUCT))
_PAGE_HEAD = _I32 + _zz(0) + _I32  # PageHeader 1 type DATA_PAGE, 2 (its size follows)
_PAGE_TAIL = (_field(2, _T_STRUCT)  # 5 data_page_header: one value, PLAIN, RLE levels
              + _I32 + _zz(1) + _I32 + _zz(_PLAIN) + _I32 + _zz(_RLE) + _I32 + _zz(_RLE)
              + b"\x00\x00")

_PHYSICAL = {"int64": _INT64, "int32": _INT32, "double": _DOUBLE, "bool": _BOOLEAN,
             "string": _BYTE_ARRAY}


@functools.lru_cache(maxsize=64)
def _layout(schema: pa.Schema) -> tuple[list, bytes] | None:
    """Per column (name, nullable, encoder, constant head of its ColumnMetaData), and the
    footer's schema list; None if a column's type is not one this module writes."""
    cols = []
    elements = [_field(4, _T_BINARY) + _binary(b"schema") + _field(1, _T_I32)
                + _zz(len(schema)) + b"\x00"]
    for f in schema:
        kind = str(f.type)
        if kind not in _PHYSICAL:
            return None
        name = f.name.encode("utf-8")
        rep = _OPTIONAL if f.nullable else _REQUIRED
        el = (_field(1, _T_I32) + _zz(_PHYSICAL[kind]) + _field(2, _T_I32) + _zz(rep)
              + _field(1, _T_BINARY) + _binary(name))
        if kind == "string":  # converted_type UTF8 (6) and logicalType STRING (10)
            el += _field(2, _T_I32) + _zz(_UTF8) + _field(4, _T_STRUCT) + _field(
                1, _T_STRUCT) + b"\x00" + b"\x00"
        elements.append(el + b"\x00")
        head = (_field(1, _T_I32) + _zz(_PHYSICAL[kind])  # 1 type
                + _field(1, _T_LIST) + _list(2, _T_I32) + _zz(_PLAIN) + _zz(_RLE)  # 2 encodings
                + _field(1, _T_LIST) + _list(1, _T_BINARY) + _binary(name)  # 3 path
                + _field(1, _T_I32) + _zz(0)  # 4 codec: uncompressed
                + _field(1, _T_I64) + _zz(1))  # 5 num_values
        cols.append((f.name, f.nullable, _plain(kind), head))
    schema_list = _field(1, _T_LIST) + _list(len(elements), _T_STRUCT) + b"".join(elements)
    return cols, schema_list


def encode_row(schema: pa.Schema, row: Mapping[str, object]) -> bytes | None:
    """``row`` (keys the schema lacks are ignored, absent ones are null) as the bytes of
    a one-row Parquet file of ``schema``; None if Arrow should write it instead.

    Raises:
        ValueError: a required column is null or absent (as ``schema.conform`` says).
    """
    layout = _layout(schema)
    if layout is None:
        return None
    cols, schema_list = layout
    out = [b"PAR1"]
    at = 4
    sizes = 0
    chunks: list[bytes] = []
    for name, nullable, enc, head in cols:
        v = row.get(name)
        if v is None:
            if not nullable:
                raise null_refused(name, 1)
            body = b"\x02\x00\x00\x00\x02\x00"  # definition levels: one RLE run of 0
        else:
            value = enc(v)
            if value is None:
                return None
            body = (b"\x02\x00\x00\x00\x02\x01" + value) if nullable else value
        n = _zz(len(body))
        page = b"".join((_PAGE_HEAD, n, _I32, n, _PAGE_TAIL))
        size = len(page) + len(body)
        out += (page, body)
        z_size, z_at = _zz(size), _zz(at)
        # ColumnChunk: 2 file_offset, 3 meta_data (its 6, 7 sizes and 9 data_page_offset)
        chunks.append(b"".join((_I64_2, z_at, _STRUCT_1, head, _I64_1, z_size, _I64_1,
                                z_size, _I64_2, z_at, b"\x00\x00")))
        sizes += size
        at += size
    group = (_field(1, _T_LIST) + _list(len(chunks), _T_STRUCT) + b"".join(chunks)
             + _field(1, _T_I64) + _zz(sizes)  # 2 total_byte_size
             + _field(1, _T_I64) + _zz(1) + b"\x00")  # 3 num_rows
    footer = (_field(1, _T_I32) + _zz(1) + schema_list  # 1 version, 2 schema
              + _field(1, _T_I64) + _zz(1)  # 3 num_rows
              + _field(1, _T_LIST) + _list(1, _T_STRUCT) + group  # 4 row_groups
              + _field(2, _T_BINARY) + _binary(CREATED_BY) + b"\x00")  # 6 created_by
    out += (footer, struct.pack("<I", len(footer)), b"PAR1")
    return b"".join(out)
