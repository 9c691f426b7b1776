"""A decoder of our own for the ``topk`` column chunks of a selections file, as the store
writes them: data pages v1, uncompressed, repetition and definition levels RLE-encoded,
values ``DELTA_BINARY_PACKED`` (``toolkit.store.parquet_options``).

Why: Arrow assembles a ``list<int32>`` column from per-value level arrays, ~2.75 ns a
position, as long as replaying the position; with every core replaying that
decoding cannot hide on a spare core. Here one compiled pass per page writes the values
and the row offsets straight from the page bytes. Any chunk in another layout (other
writer, compression, encoding, page version) returns None and the caller uses Arrow,
so this is a fast path, never a second reader to trust: tests compare it with Arrow.
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit.runtime.aot import intrinsic, ir, nb, types
from toolkit.runtime.jit import U

# Parquet enums (parquet.thrift)
_DATA_PAGE, _RLE, _DELTA_BINARY_PACKED = 0, 3, 5
# Thrift compact protocol type ids
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = (
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)


class _Compact:
    """Just enough of the Thrift compact protocol to read a page header."""

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.buf[self.pos]
            self.pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t: int) -> object:
        if t in (_TRUE, _FALSE):
            return t == _TRUE
        if t == _BYTE:
            self.pos += 1
            return self.buf[self.pos - 1]
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _DOUBLE:
            self.pos += 8
            return None
        if t == _BINARY:
            n = self.varint()
            self.pos += n
            return None
        if t in (_LIST, _SET):
            head = self.buf[self.pos]
            self.pos += 1
            size = head >> 4 if head >> 4 != 15 else self.varint()
            return [self.value(head & 0x0F) for _ in range(size)]
        if t == _MAP:
            size = self.varint()
            if size:
                kv = self.buf[self.pos]
                self.pos += 1
                for _ in range(size):
                    self.value(kv >> 4)
                    self.value(kv & 0x0F)
            return None
        if t == _STRUCT:
            return self.struct()
        raise ValueError(f"thrift type {t}")

    def struct(self) -> dict[int, object]:
        out: dict[int, object] = {}
        fid = 0
        while True:
            head = self.buf[self.pos]
            self.pos += 1
            t = head & 0x0F
            if t == _STOP:
                return out
            fid = fid + (head >> 4) if head >> 4 else self.zigzag()
            out[fid] = self.value(t)


@nb.njit(cache=True, nogil=True)
def _uleb(buf, pos):  # pragma: no cover - compiled
    out = 0
    shift = 0
    while True:
        b = np.int64(buf[U(pos)])
        pos += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, pos
        shift += 7


@nb.njit(cache=True, nogil=True)
def _levels(buf, pos, end, n, out):  # pragma: no cover - compiled
    """RLE / bit-packed hybrid of bit width 1 -> ``out[:n]`` (0/1 bytes)."""
    i = 0
    while i < n and pos < end:
        head, pos = _uleb(buf, pos)
        if head & 1:  # bit-packed groups of 8
            count = (head >> 1) * 8
            for j in range(count):
                if i + j < n:
                    out[U(i + j)] = (buf[U(pos + (j >> 3))] >> (j & 7)) & 1
            pos += count >> 3
            i += count
        else:  # a run of one value (one byte for bit width 1)
            count = head >> 1
            v = buf[U(pos)] & 1
            pos += 1
            for j in range(min(count, n - i)):
                out[U(i + j)] = v
            i += count
    return i >= n


@intrinsic
def _load_u64(typingctx, arr, idx):
    """The 8 bytes at ``arr[idx:]`` as one unaligned little-endian load (``read_topk``
    runs this decoder on little-endian machines only)."""
    sig = types.uint64(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


MAX_WIDTH = 57
"""Widest delta this decoder unpacks: one 8-byte load at a byte offset holds 57 bits past
any bit offset within its first byte. Wider miniblocks (int64 deltas past 2**57) make the
caller fall back to Arrow."""


@intrinsic
def _unpack32(typingctx, w, buf, pos, last, min_delta, out, at):
    """One full miniblock of 32 deltas of ``w`` (0..32) bits at ``buf[pos:]`` ->
    ``out[at:at+32]``; returns the running value after them. Each value is one unaligned
    8-byte load, shift and mask of its own (no bit buffer carried from value to value), so
    the only loop-carried chain is the running sum; reads up to 7 bytes past the body.

    Emitted as LLVM IR, one straight-line case per width with its shifts and masks as
    constants (as Arrow generates its ``unpack32``; 1.5x faster than one loop taking the
    width at run time). The same code written in Python and inlined by numba
    (``inline="always"``), 33 copies of a 32-step loop, spent ~20 s of numba's own IR
    copying in every compile of :func:`_delta`; as IR it costs LLVM well under a second
    (``benchmarks/compile_bench.py``)."""
    sig = types.int64(types.int64, buf, types.int64, types.int64, types.int64, out,
                      types.int64)

    def codegen(context, builder, signature, args):
        w_v, buf_v, pos_v, last_v, min_delta_v, out_v, at_v = args
        i64, i32 = ir.IntType(64), ir.IntType(32)
        src = context.make_array(signature.args[1])(context, builder, buf_v)
        dst = context.make_array(signature.args[5])(context, builder, out_v)
        base = builder.gep(src.data, [pos_v])
        obase = builder.gep(dst.data, [at_v])
        entry = builder.block
        done = builder.append_basic_block("unpack32_done")
        switch = builder.switch(w_v, done)
        incoming = [(last_v, entry)]
        for width in range(33):
            block = builder.append_basic_block(f"unpack32_w{width}")
            switch.add_case(ir.Constant(i64, width), block)
            builder.position_at_end(block)
            cur = last_v
            for j in range(32):
                b = j * width
                if width:
                    ptr = builder.bitcast(builder.gep(base, [ir.Constant(i64, b >> 3)]),
                                          i64.as_pointer())
                    v = builder.and_(builder.lshr(builder.load(ptr, align=1),
                                                  ir.Constant(i64, b & 7)),
                                     ir.Constant(i64, (1 << width) - 1))
                    cur = builder.add(cur, builder.add(min_delta_v, v))
                else:
                    cur = builder.add(cur, min_delta_v)
                # the int32 store wraps as the writer's arithmetic did
                builder.store(builder.trunc(cur, i32),
                              builder.gep(obase, [ir.Constant(i64, j)]))
            builder.branch(done)
            incoming.append((cur, builder.block))
        builder.position_at_end(done)
        phi = builder.phi(i64)
        for value, block in incoming:
            phi.add_incoming(value, block)
        return phi

    return sig, codegen


@nb.njit(cache=True, nogil=True)
def _delta(buf, pos, end, out, at, ids):  # pragma: no cover - compiled
    """DELTA_BINARY_PACKED values -> int32 ``out[at:]``: their count, or -1 if malformed.

    ``ids=False``: an INT32 column; the int32 store wraps as the writer's arithmetic did.
    ``ids=True``: an INT64 column of ids kept only if every one is in ``[0, 2**31)``
    (else -1, and the caller falls back). ``buf`` must hold 8 bytes past ``end``."""
    block, pos = _uleb(buf, pos)
    per_block, pos = _uleb(buf, pos)
    total, pos = _uleb(buf, pos)
    z, pos = _uleb(buf, pos)
    if per_block <= 0 or block % per_block or (block // per_block) % 8:
        return -1
    if total == 0:
        return 0
    if at + total > out.shape[0] or end + 8 > buf.shape[0]:
        return -1
    per_mini = block // per_block
    max_w = MAX_WIDTH if ids else 32
    last = (z >> 1) ^ -(z & 1)
    bad = last >> 31
    out[U(at)] = last
    i = 1
    while i < total:
        if pos >= end:
            return -1
        zd, pos = _uleb(buf, pos)
        min_delta = (zd >> 1) ^ -(zd & 1)
        widths = pos
        pos += per_block
        for m in range(per_block):
            if i >= total:
                break  # miniblocks past the last value have a width byte and no body
            w = np.int64(buf[U(widths + m)])
            body = per_mini * w >> 3  # a miniblock body is whole even when partly used
            if w > max_w or pos + body > end:
                return -1
            if not ids and per_mini == 32 and total - i >= 32:
                last = _unpack32(w, buf, pos, last, min_delta, out, at + i)
                i += 32
            else:  # ids, any other miniblock size, or the last values
                mask = (np.uint64(1) << np.uint64(w)) - np.uint64(1)
                for j in range(min(per_mini, total - i)):
                    b = j * w
                    last += min_delta + np.int64(
                        (_load_u64(buf, pos + (b >> 3)) >> np.uint64(b & 7)) & mask)
                    bad |= last >> 31
                    out[U(at + i)] = last
                    i += 1
            pos += body
    return -1 if ids and bad else total


@nb.njit(cache=True, nogil=True)
def _all_present(buf, pos, end, n, level):  # pragma: no cover - compiled
    """Whether definition levels at ``pos`` are one run of n or more ``level``s (the
    column's maximum: no empty list, no null element)."""
    if pos >= end:
        return False
    head, q = _uleb(buf, pos)
    return (head & 1) == 0 and (head >> 1) >= n and q < end and buf[U(q)] == level


@nb.njit(cache=True, nogil=True)
def _row_starts(buf, pos, end, n, offsets, rat, vat):  # pragma: no cover - compiled
    """Repetition levels (bit width 1) straight to row offsets when every level carries a
    value: level j starts a row iff it is 0, at value ``vat + j``. Returns rows started,
    or -1 if malformed."""
    j = 0
    r = rat
    while j < n:
        if pos >= end:
            return -1
        head, pos = _uleb(buf, pos)
        if head & 1:
            count = (head >> 1) * 8
            for t in range(min(count, n - j)):
                if ((buf[U(pos + (t >> 3))] >> (t & 7)) & 1) == 0:
                    if r >= offsets.shape[0] - 1:
                        return -1
                    offsets[U(r)] = vat + j + t
                    r += 1
            pos += count >> 3
        else:
            count = head >> 1
            v = buf[U(pos)] & 1
            pos += 1
            if v == 0:
                for t in range(min(count, n - j)):
                    if r >= offsets.shape[0] - 1:
                        return -1
                    offsets[U(r)] = vat + j + t
                    r += 1
        j += count
    return r - rat


@nb.njit(cache=True, nogil=True)
def _page_levels(buf, pos, end, n_levels, rep, dfn, offsets, vat,
                 rat, ids):  # pragma: no cover - compiled
    """One data page's levels: rows start where the repetition level is 0. Returns (where
    its values start, rows started, values present), (-1, -1, -1) if the page is
    malformed or not decodable here, or (-2, -2, -2) if it has empty lists and
    ``rep``/``dfn`` are too small to hold its levels. ``ids``: see :func:`_delta`; such a
    column (optional elements, so definition levels up to 2) is decoded only when no list
    is empty and no id null.

    The values are left to the caller's :func:`_delta`: compiled into this kernel, its 33
    unrolled miniblock copies were optimised again in every caller (and twice, once per
    call site), which made this kernel take longer to compile than any other."""
    if pos + 4 > end:
        return -1, -1, -1
    n_rep = np.int64(buf[U(pos)]) | np.int64(buf[U(pos + 1)]) << 8 \
        | np.int64(buf[U(pos + 2)]) << 16 | np.int64(buf[U(pos + 3)]) << 24
    pos += 4
    rep_at = pos
    pos += n_rep
    if pos + 4 > end:
        return -1, -1, -1
    n_def = np.int64(buf[U(pos)]) | np.int64(buf[U(pos + 1)]) << 8 \
        | np.int64(buf[U(pos + 2)]) << 16 | np.int64(buf[U(pos + 3)]) << 24
    pos += 4
    if _all_present(buf, pos, pos + n_def, n_levels, 2 if ids else 1):  # the usual case
        started = _row_starts(buf, rep_at, rep_at + n_rep, n_levels, offsets, rat, vat)
        if started < 0:
            return -1, -1, -1
        return pos + n_def, started, n_levels
    if ids:
        return -1, -1, -1
    if rep.shape[0] < n_levels or dfn.shape[0] < n_levels:
        return -2, -2, -2  # the caller retries with scratch arrays for the levels
    if not (_levels(buf, rep_at, rep_at + n_rep, n_levels, rep)
            and _levels(buf, pos, pos + n_def, n_levels, dfn)):
        return -1, -1, -1
    present = 0
    v = vat
    r = rat
    for j in range(n_levels):
        if rep[U(j)] == 0:
            if r >= offsets.shape[0] - 1:
                return -1, -1, -1
            offsets[U(r)] = v
            r += 1
        v += dfn[U(j)]
        present += dfn[U(j)]
    return pos + n_def, r - rat, present


def _page(buf: np.ndarray, pos: int, end: int, n_levels: int, rep: np.ndarray,
          dfn: np.ndarray, values: np.ndarray, vat: int, offsets: np.ndarray, rat: int,
          ids: bool) -> tuple[int, int]:
    """One data page: levels (:func:`_page_levels`), then values (:func:`_delta`).
    Returns (values written, rows started), (-1, -1) if the page is malformed or not
    decodable here, or (-2, -2) if ``rep``/``dfn`` are too small for its levels. Two
    kernel calls a page (~1 MB of values) instead of one cost ~1 us of its ~0.3 ms."""
    at, started, present = _page_levels(buf, pos, end, n_levels, rep, dfn, offsets, vat,
                                        rat, ids)
    if at < 0:
        return at, at
    n_vals = _delta(buf, at, end, values, vat, ids)
    if n_vals != present:
        return -1, -1
    return n_vals, started


def _readonly(a: np.ndarray) -> np.ndarray:
    """``a`` as a read-only view: the kernels are called with read-only buffers only (a
    mapped file is read-only), so each is compiled for one buffer type, not two."""
    if not a.flags.writeable:
        return a
    view = a.view()
    view.flags.writeable = False
    return view


class Scratch:
    """Buffers one thread decodes into again and again. Fresh arrays of a chunk's size
    (~33 MB for a k = 2048 request of 16 layers) cost a page fault per 4 KiB written,
    ~0.25 ns a position; a caller that is done with a chunk's values before it reads the
    next (read, replay, read, ... on one thread) passes the same Scratch each time."""

    def __init__(self) -> None:
        self.values = np.empty(0, dtype=np.int32)
        self.pages = np.empty(0, dtype=np.uint8)

    def take(self, values: int, page_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        if self.values.size < values:
            self.values = np.empty(values, dtype=np.int32)
        if self.pages.size < page_bytes:
            self.pages = np.empty(page_bytes, dtype=np.uint8)
        return self.values[:values], self.pages


def _mapped(f: BinaryIO, at: int, size: int, file_bytes: int) -> np.ndarray | None:
    """``size`` bytes of ``f`` from ``at``, mapped rather than copied (the copy out of the
    page cache was 0.06 ns a position and, with every core decoding, a second pass
    through the shared cache); None if the file is too short or cannot be mapped. The
    mapping lives as long as the array, so memory stays bounded by one column chunk."""
    if at + size > file_bytes:
        return None
    lo = at - at % mmap.ALLOCATIONGRANULARITY
    try:
        mm = mmap.mmap(f.fileno(), at + size - lo, offset=lo, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    return np.frombuffer(mm, dtype=np.uint8, count=size, offset=at - lo)


def _data_pages(raw: memoryview, size_all: int) -> list[tuple[int, int, int, dict]] | None:
    """``(body start, stored bytes, plain bytes, data page header)`` of each page of a
    column chunk, or None if one is not a v1 data page (a dictionary page, v2, ...)."""
    pages = []
    pos = 0
    while pos < size_all:
        head = _Compact(raw, pos)
        try:
            h = head.struct()
        except (IndexError, ValueError):
            return None
        pos = head.pos
        size, plain = h.get(3), h.get(2)
        dp = h.get(5)
        if h.get(1) != _DATA_PAGE or not isinstance(dp, dict) or not isinstance(
                size, int) or not isinstance(plain, int) or size < 0 or plain < 0 \
                or pos + size > size_all:
            return None
        pages.append((pos, size, plain, dp))
        pos += size
    return pages


def _column_chunk(buf: np.ndarray, size_all: int, values: np.ndarray, vat: int,
                  offsets: np.ndarray, rat: int, ids: bool = False,
                  codec: pa.Codec | None = None) -> tuple[int, int] | None:
    """Decode the data pages in ``buf[:size_all]`` into ``values[vat:]`` and
    ``offsets[rat:]``: the new (vat, rat), or None if a page is not in our layout.
    ``codec``: the pages are compressed with it (each is decompressed into a buffer with
    the 8 bytes of slack the unpacking reads past the end)."""
    raw = memoryview(buf)[:size_all]
    levels = np.empty((2, 0), dtype=np.uint8)
    page = np.empty(0, dtype=np.uint8)
    pages = _data_pages(raw, size_all)
    if pages is None:
        return None
    for pos, size, plain, dp in pages:
        if (dp.get(2), dp.get(3), dp.get(4)) != (_DELTA_BINARY_PACKED, _RLE, _RLE):
            return None
        n_levels = int(dp.get(1, -1))
        if n_levels < 0:
            return None
        if codec is None:
            if plain != size:
                return None
            src, at, end = buf, pos, pos + size
        else:
            try:
                out = codec.decompress(raw[pos:pos + size], decompressed_size=plain)
            except (pa.ArrowException, ValueError):
                return None
            if page.size < plain + 8:
                page = np.empty(plain + 8, dtype=np.uint8)
            page[:plain] = np.frombuffer(out, dtype=np.uint8)
            src, at, end = _readonly(page), 0, plain
        got, started = _page(src, at, end, n_levels, levels[0], levels[1], values, vat,
                             offsets, rat, ids)
        if got == -2:  # levels with empty lists: decode them through scratch arrays
            levels = np.empty((2, n_levels), dtype=np.uint8)
            got, started = _page(src, at, end, n_levels, levels[0], levels[1], values, vat,
                                 offsets, rat, ids)
        if got < 0:
            return None
        vat += got
        rat += started
    return vat, rat


def _chunk_bytes(f: BinaryIO, at: int, size_all: int, file_bytes: int,
                 pages: np.ndarray) -> np.ndarray | None:
    """A column chunk's ``size_all`` bytes at ``at`` plus 8 readable bytes past them (the
    unpacking reads ahead): mapped, else read into ``pages`` (zeroed slack)."""
    buf = _mapped(f, at, size_all + 8, file_bytes)
    if buf is not None:
        return buf
    buf = pages[:size_all + 8]
    buf[size_all:] = 0
    f.seek(at)
    if f.readinto(memoryview(buf)[:size_all]) != size_all:
        return None
    return _readonly(buf)


def read_topk(path: Path, groups: list[int], scratch: Scratch | None = None,
              pf: pq.ParquetFile | pq.FileMetaData | None = None,
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(values int32, offsets int64)`` of ``topk`` over row groups ``groups``, or None
    if a chunk is not in the layout this decoder reads (the caller then uses Arrow).
    With ``scratch``, the values are a view of its buffer, valid until its next use;
    ``pf``: the file already open, or its parsed footer (not parsed again)."""
    return _read_lists(path, "topk", groups, scratch, pf, ids=False)


def read_small_ids(path: Path, column: str, groups: list[int],
                   pf: pq.ParquetFile | None = None,
                   out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """``(ids int32, offsets int64)`` of a ``list<int64>`` column of small ids (the
    ``block_hashes`` of a trace with renumbered blocks: delta-encoded, zstd or
    uncompressed, as ``parquet_options`` writes them) over row groups ``groups``. None if
    a chunk is in another layout, has an empty list or a null, or an id outside
    ``[0, 2**31)``: the caller then reads it with Arrow. Arrow's list assembly took 7.8 ns
    a lookup, plus a pass to narrow the ids; this is one compiled pass after zstd.

    ``out``: an int32 array of :func:`leaf_counts` of these groups to decode into (e.g.
    the groups' slice of a whole stream, so that nobody concatenates the parts after)."""
    return _read_lists(path, column, groups, None, pf, ids=True, out=out)


def leaf_counts(path: Path, column: str, pf: pq.ParquetFile | None = None) -> list[int] | None:
    """Values of the list column ``column`` per row group, from the footer (an empty list
    or a null counts one: the decoders refuse those), or None without such a column."""
    pf = pf or pq.ParquetFile(path)
    md = pf.metadata
    leaf = f"{column}.list.element"
    names = [pf.schema.column(i).path for i in range(md.num_columns)]
    if leaf not in names:
        return None
    col = names.index(leaf)
    return [md.row_group(g).column(col).num_values for g in range(md.num_row_groups)]


def _footer(path: Path, pf: pq.ParquetFile | pq.FileMetaData | None) -> pq.FileMetaData:
    if isinstance(pf, pq.FileMetaData):
        return pf
    return pf.metadata if pf is not None else pq.read_metadata(path)


_FLAT_TYPES = {("INT64", "NONE"): np.int64, ("INT32", "NONE"): np.int32,
               ("INT32", "INT_16"): np.int16, ("INT32", "INT_8"): np.int8}
"""Arrow's type of a flat required column, by (physical, converted) type."""


def read_flat(path: Path, columns: list[str], groups: list[int],
              metadata: pq.FileMetaData | None = None) -> dict[str, np.ndarray] | None:
    """Flat required integer columns over row groups ``groups``, as NumPy arrays of
    Arrow's types, from delta pages as ``parquet_options`` writes a selections file's
    per-row columns; None if any column is in another layout (or an INT64 value is
    outside ``[0, 2**31)``), and the caller reads them with Arrow. Arrow took 0.54 ms
    for the four columns of a 30,720-row chunk (zstd + PLAIN), and building its reader
    another 0.2."""
    if sys.byteorder != "little":
        return None
    md = metadata if metadata is not None else pq.read_metadata(path)
    names = {md.schema.column(i).path: i for i in range(md.num_columns)}
    rows = sum(md.row_group(g).num_rows for g in groups)
    out: dict[str, np.ndarray] = {}
    pages = np.empty(0, dtype=np.uint8)
    with open(path, "rb") as f:
        file_bytes = os.fstat(f.fileno()).st_size
        for name in columns:
            col = names.get(name)
            if col is None:
                return None
            desc = md.schema.column(col)
            dtype = _FLAT_TYPES.get((desc.physical_type, desc.converted_type))
            if dtype is None or desc.max_definition_level or desc.max_repetition_level:
                return None
            values = np.empty(rows, dtype=np.int32)
            vat = 0
            for g in groups:
                meta = md.row_group(g).column(col)
                if meta.compression != "UNCOMPRESSED" or meta.dictionary_page_offset \
                        is not None or "DELTA_BINARY_PACKED" not in meta.encodings:
                    return None
                size_all = meta.total_compressed_size
                if pages.size < size_all + 8:
                    pages = np.empty(size_all + 8, dtype=np.uint8)
                buf = _chunk_bytes(f, meta.data_page_offset, size_all, file_bytes, pages)
                if buf is None:
                    return None
                chunk_pages = _data_pages(memoryview(buf)[:size_all], size_all)
                if chunk_pages is None:
                    return None
                for pos, size, plain, dp in chunk_pages:
                    n = dp.get(1, -1)
                    # a count the page cannot hold is refused before decoding (the
                    # decoder's own failure, -1, must not pass for a count of -1)
                    if not isinstance(n, int) or n < 0 or size != plain \
                            or dp.get(2) != _DELTA_BINARY_PACKED or _delta(
                                buf, pos, pos + size, values, vat, dtype == np.int64) != n:
                        return None
                    vat += n
                del buf, chunk_pages  # unmaps a mapped chunk
            if vat != rows:
                return None
            out[name] = values if dtype == np.int32 else values.astype(dtype)
    return out


_LAYOUTS = {False: ((1, 1, "INT32"), ("UNCOMPRESSED",)),
            True: ((2, 1, "INT64"), ("UNCOMPRESSED", "ZSTD"))}


def _read_lists(path: Path, column: str, groups: list[int], scratch: Scratch | None,
                pf: pq.ParquetFile | pq.FileMetaData | None, ids: bool,
                out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    if sys.byteorder != "little":  # the unpacking loads 8 bytes as one little-endian word
        return None
    md = _footer(path, pf)
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    leaf = f"{column}.list.element"
    if leaf not in names:
        return None
    col = names.index(leaf)
    desc = md.schema.column(col)
    levels_type, codecs = _LAYOUTS[ids]
    if (desc.max_definition_level, desc.max_repetition_level, desc.physical_type) != (
            levels_type):
        return None
    rows = sum(md.row_group(g).num_rows for g in groups)
    levels = sum(md.row_group(g).column(col).num_values for g in groups)
    metas = [md.row_group(g).column(col) for g in groups]
    page_bytes = max((m.total_compressed_size for m in metas), default=0) + 16
    values, pages = (scratch or Scratch()).take(0 if out is not None else levels, page_bytes)
    if out is not None:
        if out.dtype != np.int32 or out.size < levels:
            raise ValueError(f"out holds {out.size} {out.dtype} values; {levels} int32 needed")
        values = out[:levels]
    offsets = np.empty(rows + 1, dtype=np.int64)
    vat = rat = 0
    with open(path, "rb") as f:
        file_bytes = os.fstat(f.fileno()).st_size
        for meta in metas:
            if meta.compression not in codecs or meta.dictionary_page_offset is not None:
                return None
            codec = pa.Codec("zstd") if meta.compression == "ZSTD" else None
            buf = _chunk_bytes(f, meta.data_page_offset, meta.total_compressed_size,
                               file_bytes, pages)
            if buf is None:
                return None
            done = _column_chunk(buf, meta.total_compressed_size, values, vat, offsets, rat,
                                 ids, codec)
            del buf  # unmaps a mapped chunk
            if done is None:
                return None
            vat, rat = done
    if rat != rows:
        return None
    offsets[rows] = vat
    return values[:vat], offsets
