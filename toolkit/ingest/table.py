"""Any table of requests (CSV, JSONL or Parquet) mapped onto the request-timeline schema.

In the spirit of libCacheSim's CSV reader: the user names the columns that hold the arrival
time, the prompt and output token counts and, optionally, the prefix-block hash list and a
session id; everything else in the table is ignored (and said so in a note). The checks are
those of the built-in readers: every row is validated, the first bad one stops the read
with its file, line (or Parquet row) and column, and nothing is written.

Block geometry (``partial_block``): a hash list either covers the last, partial block of the
prompt too (``hashed``: ``ceil(input_tokens / block_tokens)`` ids, as Mooncake's traces do) or
only the full blocks (``unhashed``: ``floor(input_tokens / block_tokens)`` ids, as vLLM's
prefix cache hashes them); ``either`` accepts both. Hash ids are int64 integers
(``hash_encoding="int"``) or hexadecimal strings (``"hex"``, e.g. SHA-256 digests), which are
renumbered 0, 1, ... by first appearance of their value: a replay only compares ids, so the
renumbering keeps every hit and miss exactly.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.azure import _count, _text_lines
from toolkit.ingest.fields import (
    INT64_MAX,
    MonotonicClock,
    as_count,
    as_hash_list,
    as_time,
    jsonl_objects,
    requests_table,
)
from toolkit.ingest.parquet import read_parquet
from toolkit.ingest.sniff import check_unique, extra_note, hint, looks_like

FORMATS = ("csv", "jsonl", "parquet")
TIME_UNITS = {"s": 1.0, "ms": 1e3, "us": 1e6}  # units per second
PARTIAL_BLOCK = ("hashed", "unhashed", "either")
HASH_ENCODINGS = ("int", "hex")
SUFFIX_FORMAT = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl",
                 ".parquet": "parquet", ".pq": "parquet"}
_NUMBER = re.compile(r"\s*[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*",
                     re.ASCII)
_HEX = re.compile(r"(?:0[xX])?[0-9a-fA-F]+", re.ASCII)
_SPLIT = re.compile(r"[\s,;|]+")


@dataclass(frozen=True)
class TableColumns:
    """Which column holds what, and how to read it (the ``ingest table`` flags)."""

    time_col: str
    input_tokens_col: str
    output_tokens_col: str
    time_unit: str = "s"
    hash_col: str | None = None
    block_tokens: int | None = None
    hash_encoding: str = "int"
    session_col: str | None = None
    partial_block: str = "hashed"

    def check(self, path: Path) -> None:
        """Refuse option combinations that cannot describe a table (file-level errors)."""
        def bad(msg: str) -> TraceFormatError:
            return TraceFormatError(path, None, None, msg)

        if self.time_unit not in TIME_UNITS:
            raise bad(f"time_unit must be one of {', '.join(TIME_UNITS)}, got {self.time_unit!r}")
        if self.partial_block not in PARTIAL_BLOCK:
            raise bad(f"partial_block must be one of {', '.join(PARTIAL_BLOCK)}, "
                      f"got {self.partial_block!r}")
        if self.hash_encoding not in HASH_ENCODINGS:
            raise bad(f"hash_encoding must be int or hex, got {self.hash_encoding!r}")
        for name in ("time_col", "input_tokens_col", "output_tokens_col"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise bad(f"{name} must name a column")
        bt = self.block_tokens
        if self.hash_col is None and bt is not None:
            raise bad("block_tokens applies to a hash column: give hash_col too")
        if self.hash_col is not None and (isinstance(bt, bool) or not isinstance(bt, int)
                                          or not 1 <= bt <= (1 << 31) - 1):
            raise bad(f"hash_col needs block_tokens, a positive integer < 2^31, got {bt!r}")
        names = [c for c in (self.time_col, self.input_tokens_col, self.output_tokens_col,
                             self.hash_col, self.session_col) if c is not None]
        if len(set(names)) != len(names):
            raise bad(f"one column named for two meanings: {names}")

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.time_col, self.input_tokens_col, self.output_tokens_col,
                                 self.hash_col, self.session_col) if c is not None)


def detect_format(path: Path, fmt: str | None) -> str:
    """``fmt`` as given, else from the file's extension."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise TraceFormatError(path, None, None,
                                   f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        return fmt
    found = SUFFIX_FORMAT.get(path.suffix.lower())
    if found is None:
        raise TraceFormatError(path, None, None, "cannot tell the format from the extension "
                               f"{path.suffix!r}: pass --format csv, jsonl or parquet")
    return found


# -- value parsers: (raw value, path, line, field) -> value; typed (JSON/Parquet) or text ---

def _time_text(text: str, path: Path, line: int, field: str) -> float:
    if not _NUMBER.fullmatch(text):
        shown = repr(text) if len(text) <= 40 else f"{text[:37]!r}..."
        raise TraceFormatError(path, line, field, f"expected a number, got {shown}",
                               unit="line")
    return as_time(float(text), path, line, field)


def _hash_ints_text(text: str, path: Path, line: int, field: str) -> list:
    text = text.strip()
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError:
            raise TraceFormatError(path, line, field, "a list starting with '[' must be a "
                                   "JSON array") from None
        return value
    return [t for t in _SPLIT.split(text) if t]


class _HexIds:
    """Hex-string ids -> 0, 1, ... by first appearance of their value."""

    def __init__(self) -> None:
        self.codes: dict[int, int] = {}

    def __call__(self, value: object, path: Path, line: int, field: str) -> list[int]:
        if not isinstance(value, list):
            raise TraceFormatError(path, line, field,
                                   f"expected a list of hex strings, got {_shown(value)}")
        out = []
        for i, h in enumerate(value):
            if not isinstance(h, str) or not _HEX.fullmatch(h.strip()):
                raise TraceFormatError(path, line, f"{field}[{i}]",
                                       f"expected a hexadecimal string, got {_shown(h)}")
            out.append(self.codes.setdefault(int(h.strip(), 16), len(self.codes)))
        return out


def _int_ids_text(value: list, path: Path, line: int, field: str) -> list[int]:
    """Text tokens (CSV) as int64 ids; JSON arrays inside CSV go through the typed check."""
    out = []
    for i, h in enumerate(value):
        if isinstance(h, str):
            if not re.fullmatch(r"[-+]?[0-9]+", h, re.ASCII):
                more = "; hex ids need --hash-encoding hex" if _HEX.fullmatch(h) else ""
                raise TraceFormatError(path, line, f"{field}[{i}]",
                                       f"expected an int64 block id, got {_shown(h)}{more}")
            h = int(h)
        out.append(h)
    return as_hash_list(out, path, line, field)


def _int_ids(value: object, path: Path, line: int, field: str) -> list[int]:
    try:
        return as_hash_list(value, path, line, field)
    except TraceFormatError as e:
        bad = value[int(e.field.rsplit("[", 1)[1][:-1])] if isinstance(value, list) \
            and e.field and e.field.endswith("]") else None
        if isinstance(bad, str) and _HEX.fullmatch(bad.strip()):
            raise TraceFormatError(path, line, e.field, e.message
                                   + "; hex-string ids need --hash-encoding hex") from None
        raise


def _shown(value: object) -> str:
    r = repr(value)
    return r if len(r) <= 40 else f"{r[:37]}..."


# -- row sources: yield (line or row number, {column: raw value}) --------------------------

def _csv_rows(path: Path, cols: TableColumns) -> Iterator[tuple[int, dict[str, Any]]]:
    at = [0]
    with open(path, "rb") as f:
        rows = csv.reader(_text_lines(path, f, at))
        try:
            header = next(rows, None)
            if header is None:
                raise TraceFormatError(path, None, None, "empty file")
            header = [h.strip() for h in header]
            _check_columns(path, header, cols, 1)
            idx = {c: header.index(c) for c in cols.columns}
            width = len(header)
            for row in rows:
                line = rows.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != width:
                    raise TraceFormatError(path, line, None,
                                           f"expected {width} columns, got {len(row)}")
                yield line, {c: row[i] for c, i in idx.items()}
        except csv.Error as e:
            raise TraceFormatError(path, at[0], None, f"malformed CSV: {e}") from None


def _jsonl_rows(path: Path, cols: TableColumns) -> Iterator[tuple[int, dict[str, Any]]]:
    extra: set[str] = set()
    for line, rec in jsonl_objects(path):
        for c in cols.columns:
            if c not in rec:
                raise TraceFormatError(path, line, c, "missing key; the record has "
                                       f"{sorted(map(str, rec))[:12]}"
                                       + hint(looks_like(rec, not_="")))
        extra.update(k for k in rec if k not in cols.columns)
        yield line, rec
    if extra:
        note(extra_note(path, extra, cols.columns, "key(s)"))


def _parquet_rows(path: Path, cols: TableColumns) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow.parquet as pq

    try:
        schema_names = pq.read_schema(path).names
    except (OSError, pa.ArrowException) as e:
        raise TraceFormatError(path, None, None,
                               f"not a readable Parquet file: {str(e).splitlines()[0]}") from None
    _check_columns(path, schema_names, cols, None)
    table = read_parquet(path, columns=list(cols.columns))
    data: dict[str, list] = {}
    for c in cols.columns:
        col = table.column(c)
        if pa.types.is_timestamp(col.type) and c == cols.time_col:
            per_s = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[col.type.unit]
            data[c] = [None if v is None else v / per_s
                       for v in col.cast(pa.int64()).to_pylist()]
            if cols.time_unit != "s":
                note(f"{path}: {c!r} is a Parquet timestamp; its own unit is used, not "
                     f"time_unit {cols.time_unit!r}")
        else:
            data[c] = col.to_pylist()
    for i in range(table.num_rows):
        yield i + 1, {c: data[c][i] for c in cols.columns}


def _check_columns(path: Path, header: list[str], cols: TableColumns, line: int | None) -> None:
    check_unique(path, header, line)
    for c in cols.columns:
        if c not in header:
            shown = header if len(header) <= 20 else [*header[:20], "..."]
            raise TraceFormatError(path, line, c, f"missing column; the table has {shown}"
                                   + hint(looks_like(header, not_="")))
    extra = [h for h in header if h not in cols.columns]
    if extra:
        note(extra_note(path, extra, cols.columns, "column(s)"))


SOURCES: dict[str, Callable[[Path, TableColumns], Iterator[tuple[int, dict[str, Any]]]]] = {
    "csv": _csv_rows, "jsonl": _jsonl_rows, "parquet": _parquet_rows}


def read(path: Path, trace: str, *, format: str | None = None,
         time_col: str, input_tokens_col: str, output_tokens_col: str,
         time_unit: str = "s", hash_col: str | None = None, block_tokens: int | None = None,
         hash_encoding: str = "int", session_col: str | None = None,
         partial_block: str = "hashed") -> dict[str, pa.Table]:
    """Parse and validate every row; raise on the first bad one."""
    cols = TableColumns(time_col, input_tokens_col, output_tokens_col, time_unit, hash_col,
                        block_tokens, hash_encoding, session_col, partial_block)
    cols.check(path)
    fmt = detect_format(path, format)
    text = fmt == "csv"
    unit = "row" if fmt == "parquet" else "line"

    def err(line: int, field: str | None, msg: str) -> TraceFormatError:
        return TraceFormatError(path, line, field, msg, unit=unit)

    hex_ids = _HexIds() if hash_encoding == "hex" else None
    clock = MonotonicClock(path, time_col)
    arrival: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[list[int]] = []
    raw_sessions: list[object] = []
    bt = block_tokens or 0
    try:
        for line, rec in SOURCES[fmt](path, cols):
            v = rec[time_col]
            if v is None or (text and not v.strip()):
                raise err(line, time_col, "empty")
            t = _time_text(v, path, line, time_col) if text and isinstance(v, str) \
                else as_time(v, path, line, time_col)
            clock.check(t, line, str(v).strip())
            counts = []
            for c in (input_tokens_col, output_tokens_col):
                v = rec[c]
                if v is None or (text and not str(v).strip()):
                    raise err(line, c, "empty")
                counts.append(_count(v, path, line, c) if text and isinstance(v, str)
                              else as_count(v, path, line, c))
            n_in = counts[0]
            if hash_col is not None:
                v = rec[hash_col]
                if v is None:
                    raise err(line, hash_col, "null; an empty list is [] (or an empty cell)")
                if text and isinstance(v, str):
                    v = _hash_ints_text(v, path, line, hash_col)
                    ids = hex_ids(v, path, line, hash_col) if hex_ids \
                        else _int_ids_text(v, path, line, hash_col)
                else:
                    ids = hex_ids(v, path, line, hash_col) if hex_ids \
                        else _int_ids(v, path, line, hash_col)
                _check_geometry(err, line, hash_col, len(ids), n_in, bt, partial_block)
                hashes.append(ids)
            if session_col is not None:
                v = rec[session_col]
                raw_sessions.append(None if v is None or (isinstance(v, str) and not v.strip())
                                    else v)
            arrival.append(t)
            inp.append(n_in)
            out.append(counts[1])
    except TraceFormatError as e:  # Parquet rows are rows, not lines
        if unit == "row" and e.line is not None and "(line " in str(e):
            raise TraceFormatError(e.path, e.line, e.field, e.message, unit="row") from None
        raise
    if not arrival:
        raise TraceFormatError(path, None, None, "no requests in file")
    div = TIME_UNITS[time_unit]
    t0 = arrival[0]
    arrival_s = [(t - t0) / div for t in arrival]
    if not all(math.isfinite(a) for a in arrival_s):
        raise TraceFormatError(path, None, time_col, "arrival times overflow float64 once "
                               "made relative to the first")
    sessions, turns, names = _sessions(raw_sessions, session_col, path) if session_col \
        else (None, None, {})
    if hex_ids is not None:
        note(f"{path}: {len(hex_ids.codes):,} distinct hex block id(s) renumbered 0.. by first "
             "appearance (a replay compares ids only)")
    tables = {"requests": requests_table(trace, arrival_s, inp, out,
                                         block_tokens if hash_col else None,
                                         hashes if hash_col else None, sessions, turns)}
    if names:  # every session id exactly as written, beside the integer the requests carry
        tables["request_sessions"] = pa.table(
            {"trace": pa.array([trace] * len(names), pa.string()),
             "session_id": pa.array(list(names.values()), pa.int64()),
             "session": pa.array(list(names), pa.string())}, schema=schema.REQUEST_SESSIONS)
    return tables


def _check_geometry(err: Callable[..., TraceFormatError], line: int, field: str, n_ids: int,
                    tokens: int, bt: int, partial: str) -> None:
    full, ceil = tokens // bt, -(-tokens // bt)
    ok = {"hashed": (ceil,), "unhashed": (full,), "either": (full, ceil)}[partial]
    if n_ids in ok:
        return
    want = " or ".join(str(x) for x in sorted(set(ok)))
    rule = {"hashed": f"ceil(input_tokens / {bt}): the last, partial block hashed too",
            "unhashed": f"floor(input_tokens / {bt}): full blocks only",
            "either": f"floor or ceil of input_tokens / {bt}"}[partial]
    fix = ""
    if partial == "hashed" and n_ids == full:
        fix = "; the ids cover only full blocks: pass --partial-block unhashed"
    elif partial == "unhashed" and n_ids == ceil:
        fix = "; the ids cover the partial last block too: pass --partial-block hashed"
    else:
        for other in (16, 32, 64, 128, 256, 512, 1024):
            if other != bt and tokens and n_ids in (-(-tokens // other), tokens // other):
                fix = f"; the ids fit {other}-token blocks: pass --block-tokens {other}"
                break
    raise err(line, field, f"{n_ids} block ids for input_tokens {tokens}, expected {want} "
              f"({rule}){fix}")


def _sessions(raw: list[object], col: str, path: Path
              ) -> tuple[list[int | None], list[int | None], dict[str, int]]:
    """Integer ids kept as they are (strings only in their plain form: "007" and " 7" are not
    7); other ids numbered 0, 1, ... by first appearance; ``turn`` counts each session's
    requests from 0 in file order. Also every id as written -> its integer (for
    ``request_sessions``)."""
    numeric = all(v is None or (not isinstance(v, bool) and isinstance(v, int)
                                and -INT64_MAX - 1 <= v <= INT64_MAX)
                  or (isinstance(v, str) and v.isascii() and v.isdigit()
                      and str(int(v)) == v and int(v) <= INT64_MAX) for v in raw)
    codes: dict[str, int] = {}
    names: dict[str, int] = {}
    sessions: list[int | None] = []
    turns: list[int | None] = []
    nxt: dict[int, int] = {}
    for v in raw:
        if v is None:
            sessions.append(None)
            turns.append(None)
            continue
        name = v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)
        sid = int(v) if numeric else codes.setdefault(name, len(codes))
        names.setdefault(name, sid)
        sessions.append(sid)
        turns.append(nxt.get(sid, 0))
        nxt[sid] = nxt.get(sid, 0) + 1
    if max((t for t in turns if t is not None), default=0) > (1 << 31) - 1:
        raise TraceFormatError(path, None, col, "a session has more than 2^31 requests")
    if not numeric:
        note(f"{path}: {col!r} values are not all plain integers: sessions numbered 0, 1, ... "
             "by first appearance (\"007\" is not \"7\"); request_sessions keeps every id "
             "exactly as written")
    return sessions, turns, names


READER = Reader("table", "requests", read,
                "Any CSV/JSONL/Parquet table of requests, columns named by flags")
