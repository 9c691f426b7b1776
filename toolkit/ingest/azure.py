"""Azure LLM inference traces (2023 Splitwise / 2024 week-long CSV).

Columns ``TIMESTAMP`` (``YYYY-MM-DD HH:MM:SS.fffffff``, up to 9 fractional digits),
``ContextTokens`` and ``GeneratedTokens``. No prefix hashes: these traces drive arrival
timelines and length distributions, not prefix-cache reuse.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.fields import MonotonicClock, as_count, requests_table
from toolkit.ingest.sniff import csv_header

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_TS = re.compile(
    r"^(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$",
    re.ASCII,  # \d must not accept other scripts' digits
)
_COUNT = re.compile(r"\s*-?[0-9]+\s*")  # int() would also take "1_000", "+5" and "١٢"


def parse_timestamp(text: str, path: Path, line: int) -> int:
    """Nanoseconds since the epoch, keeping the 7 fractional digits Python drops.

    A trailing ``Z`` or ``+HH:MM`` offset is honoured; without one the time is taken as UTC.
    """
    m = _TS.match(text.strip())
    if not m:
        raise TraceFormatError(
            path, line, "TIMESTAMP", f"expected 'YYYY-MM-DD HH:MM:SS[.fffffff]', got {text!r}"
        )
    zone = m.group(3) or "Z"
    offset = "+00:00" if zone == "Z" else zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        base = datetime.fromisoformat(m.group(1).replace("T", " ") + offset)
    except ValueError as e:
        raise TraceFormatError(path, line, "TIMESTAMP", str(e)) from None
    frac = (m.group(2) or "").ljust(9, "0")
    return int(base.timestamp()) * 1_000_000_000 + int(frac)


def _count(text: str, path: Path, line: int, field: str) -> int:
    if not _COUNT.fullmatch(text):
        shown = repr(text) if len(text) <= 40 else f"{text[:37]!r}..."
        raise TraceFormatError(
            path, line, field, f"expected a non-negative integer (ASCII digits), got {shown}"
        )
    return as_count(int(text), path, line, field)


def _text_lines(path: Path, f: BinaryIO, at: list[int]) -> Iterator[str]:
    """Decode line by line so a bad byte is reported on its own line; ``at[0]`` is the
    physical line last read (csv's line_num counts records' lines the same way)."""
    for lineno, raw in enumerate(f, start=1):
        at[0] = lineno
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceFormatError(path, lineno, None, f"not UTF-8 text: {e.reason} at byte "
                                   f"{e.start} of the line") from None
        yield text.removeprefix("\ufeff") if lineno == 1 else text


def read(path: Path, trace: str) -> dict[str, pa.Table]:
    """Parse and validate every row; raise on the first bad one."""
    arrival_ns: list[int] = []
    inp: list[int] = []
    out: list[int] = []
    clock = MonotonicClock(path, "TIMESTAMP")
    at = [0]
    with open(path, "rb") as f:
        rows = csv.reader(_text_lines(path, f, at))
        try:
            _read_rows(path, rows, clock, arrival_ns, inp, out)
        except csv.Error as e:
            raise TraceFormatError(path, at[0], None, f"malformed CSV: {e}") from None
    if not arrival_ns:
        raise TraceFormatError(path, None, None, "no requests in file")
    t0 = arrival_ns[0]
    arrival_s = [(t - t0) / 1e9 for t in arrival_ns]
    return {"requests": requests_table(trace, arrival_s, inp, out, None, None)}


def _read_rows(path: Path, rows: Iterator[list[str]], clock: MonotonicClock,
               arrival_ns: list[int], inp: list[int], out: list[int]) -> None:
    """Validate the header and every row, appending the parsed columns."""
    header = csv_header(path, rows, COLUMNS, "azure")
    idx = [header.index(c) for c in COLUMNS]
    extra = [h for h in header if h not in COLUMNS]
    if extra:
        note(f"{path}: ignoring column(s) {', '.join(map(repr, extra))} "
             f"(reads only {', '.join(COLUMNS)})")
    for row in rows:
        line = rows.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < len(header):
            raise TraceFormatError(
                path, line, COLUMNS[0] if len(row) <= idx[0] else None,
                f"expected {len(header)} columns, got {len(row)}",
            )
        t = parse_timestamp(row[idx[0]], path, line)
        clock.check(t, line, row[idx[0]].strip())
        arrival_ns.append(t)
        inp.append(_count(row[idx[1]], path, line, COLUMNS[1]))
        out.append(_count(row[idx[2]], path, line, COLUMNS[2]))


READER = Reader("azure", "requests", read, "Azure LLM inference CSV (no prefix hashes)")
