"""Field checks shared by the readers, each raising a TraceFormatError that names the spot."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest.sniff import hint, line_looks_like

INT64_MAX = (1 << 63) - 1
EXACT_FLOAT_INT = float(1 << 53)  # from here on a float64 skips integers


def as_count(value: object, path: Path, line: int, field: str) -> int:
    """A non-negative integer (an integral float such as ``512.0`` is accepted)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceFormatError(
            path, line, field, f"expected a non-negative integer, got {value!r}"
        )
    if isinstance(value, float):
        if not value.is_integer():
            raise TraceFormatError(path, line, field, f"expected an integer, got {value!r}")
        if abs(value) >= EXACT_FLOAT_INT:
            # 9007199254740993.0 parses as ...992.0: the digits written are already lost
            raise TraceFormatError(path, line, field, f"{value!r} is a float beyond 2^53, "
                                   "not an exact integer; write it without a decimal point")
        value = int(value)
    if value < 0:
        raise TraceFormatError(path, line, field, f"must be >= 0, got {value}")
    if value > INT64_MAX:
        shown = str(value) if value < 10**40 else f"a {len(str(value))}-digit number"
        raise TraceFormatError(path, line, field, f"{shown} does not fit in int64")
    return value


def as_time(value: object, path: Path, line: int, field: str) -> float:
    """A finite number (int or float) that a float64 can hold."""
    try:
        ok = not isinstance(value, bool) and isinstance(value, int | float) \
            and math.isfinite(float(value))
    except OverflowError:  # an integer beyond float64's range (e.g. 400 digits)
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
        raise TraceFormatError(path, line, field, f"expected a finite number, got {shown}")
    return float(value)  # type: ignore[arg-type]


def as_hash_list(value: object, path: Path, line: int, field: str) -> list[int]:
    """A list of int64 block ids."""
    if not isinstance(value, list):
        raise TraceFormatError(path, line, field, f"expected a list of integers, got {value!r}")
    for i, h in enumerate(value):
        if isinstance(h, bool) or not isinstance(h, int) or not -INT64_MAX - 1 <= h <= INT64_MAX:
            raise TraceFormatError(
                path, line, f"{field}[{i}]", f"expected an int64 block id, got {h!r}"
            )
    return value


def jsonl_objects(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield ``(line number, object)`` for every non-blank line; a line that is not a JSON
    object stops the read with its line number."""
    for lineno, rec, _ in jsonl_records(path):
        yield lineno, rec


def jsonl_records(path: Path) -> Iterator[tuple[int, dict, bytes]]:
    """Like :func:`jsonl_objects`, also yielding each line's raw bytes (a reader can then
    skip a costly check when the text shows it cannot apply, e.g. no ``true``/``false``)."""
    with open(path, "rb") as f:  # bytes: a bad UTF-8 sequence is reported at its line
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise TraceFormatError(path, lineno, None, f"not UTF-8 text: {e.reason}") from None
            except json.JSONDecodeError as e:
                other = hint(line_looks_like(raw.decode("utf-8", "replace"), not_="")) \
                    if lineno == 1 else ""
                raise TraceFormatError(path, lineno, None, f"invalid JSON: {e.msg}{other}") \
                    from None
            except ValueError as e:  # e.g. an integer of more than 4300 digits
                raise TraceFormatError(path, lineno, None, f"invalid JSON: {e}") from None
            except RecursionError:  # brackets nested ~1000 deep: no format nests past 4
                raise TraceFormatError(path, lineno, None, "invalid JSON: nested too deep "
                                       "(no trace record nests more than a few levels)") \
                    from None
            if not isinstance(rec, dict):
                raise TraceFormatError(path, lineno, None, "expected a JSON object")
            yield lineno, rec, raw


def require(rec: dict, fields: tuple[str, ...], path: Path, line: int) -> None:
    """Refuse a record that lacks any of ``fields``, naming the first missing one."""
    for field in fields:
        if field not in rec:
            raise TraceFormatError(path, line, field, "missing")


class MonotonicClock:
    """Refuses an arrival time earlier than the previous one."""

    def __init__(self, path: Path, field: str) -> None:
        self.path, self.field = path, field
        self.prev: float = -math.inf
        self.prev_shown, self.prev_line = "", 0

    def check(self, t: float, line: int, shown: str | None = None) -> None:
        """``shown`` is how the user wrote ``t`` (defaults to ``t`` itself)."""
        shown = str(t) if shown is None else shown
        if t < self.prev:
            raise TraceFormatError(
                self.path,
                line,
                self.field,
                f"{shown} is earlier than {self.prev_shown} on line {self.prev_line}; "
                "request timelines must be sorted by arrival",
            )
        self.prev, self.prev_shown, self.prev_line = t, shown, line


def requests_table(
    trace: str,
    arrival_s: list[float],
    input_tokens: list[int],
    output_tokens: list[int],
    block_tokens: int | list[int] | None,
    hashes: list[list[int]] | None,
    session_id: list[int | None] | None = None,
    turn: list[int | None] | None = None,
) -> pa.Table:
    """Assemble a ``requests`` table from column lists (hashes may be absent).

    ``arrival_s`` must already be relative to the trace start; ``block_tokens`` is one
    value for every row or one per row.
    """
    n = len(arrival_s)
    if hashes is None:
        hash_col = pa.array([[]] * n, type=pa.list_(pa.int64()))
    else:
        hash_col = pa.array(hashes, type=pa.list_(pa.int64()))
    return pa.table(
        {
            "trace": pa.array([trace] * n, pa.string()),
            "request_id": pa.array(range(n), pa.int64()),
            "arrival_s": pa.array(arrival_s, pa.float64()),
            "input_tokens": pa.array(input_tokens, pa.int64()),
            "output_tokens": pa.array(output_tokens, pa.int64()),
            "block_tokens": pa.array(block_tokens if isinstance(block_tokens, list)
                                     else [block_tokens] * n, pa.int32()),
            "block_hashes": hash_col,
            "session_id": pa.array(session_id or [None] * n, pa.int64()),
            "turn": pa.array(turn or [None] * n, pa.int32()),
        },
        schema=schema.REQUESTS,
    )


def labels_table(trace: str, n: int, **columns: list[str | None]) -> pa.Table:
    """A ``request_labels`` table for requests ``0..n-1`` (absent label columns are null)."""
    data: dict[str, pa.Array] = {
        "trace": pa.array([trace] * n, pa.string()),
        "request_id": pa.array(range(n), pa.int64()),
    }
    for f in schema.REQUEST_LABELS:
        if f.name not in data:
            data[f.name] = pa.array(columns.get(f.name, [None] * n), pa.string())
    return pa.table(data, schema=schema.REQUEST_LABELS)
