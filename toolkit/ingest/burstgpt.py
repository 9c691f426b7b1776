"""BurstGPT traces (CSV; Wang et al., "BurstGPT", arXiv 2401.17644, HPMLL/BurstGPT).

Columns ``Timestamp`` (seconds since 0:00:00 of the trace's first day), ``Model``
(``ChatGPT``, ``GPT-4``), ``Request tokens``, ``Response tokens``, ``Total tokens``
(request + response), ``Log Type`` (``Conversation log`` / ``API log``) and, in the newer
releases, ``Session ID``. No prefix hashes: these traces drive arrival timelines and length
distributions. Failed requests (0 response tokens) are kept and counted; ``Model`` and
``Log Type`` go to ``request_labels`` so a query can filter on them. Session ids land in
``requests.session_id`` (plain integers as they are, other strings numbered) and, exactly as
written, in ``request_sessions``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.azure import _count, _text_lines
from toolkit.ingest.fields import (
    INT64_MAX,
    MonotonicClock,
    labels_table,
    requests_table,
)
from toolkit.ingest.sniff import csv_header, extra_note

COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
           "Log Type")
SESSION = "Session ID"
_SECONDS = re.compile(r"\s*[0-9]+(?:\.[0-9]+)?\s*", re.ASCII)


def _seconds(text: str, path: Path, line: int) -> float:
    if not _SECONDS.fullmatch(text):
        shown = repr(text) if len(text) <= 40 else f"{text[:37]!r}..."
        raise TraceFormatError(path, line, "Timestamp",
                               f"expected seconds as a non-negative decimal number, got {shown}")
    t = float(text)
    if not math.isfinite(t):
        raise TraceFormatError(path, line, "Timestamp",
                               f"a {len(text.strip())}-character number is beyond float64")
    return t


def read(path: Path, trace: str, *, model: str | None = None) -> dict[str, pa.Table]:
    """Parse and validate every row; raise on the first bad one. ``model`` keeps only the
    rows of that model (request ids stay the rows' positions in the file)."""
    at = [0]
    with open(path, "rb") as f:
        rows = csv.reader(_text_lines(path, f, at))
        try:
            return _read(path, trace, rows, model)
        except csv.Error as e:
            raise TraceFormatError(path, at[0], None, f"malformed CSV: {e}") from None


def _read(path: Path, trace: str, rows: Iterator[list[str]],
          model: str | None) -> dict[str, pa.Table]:
    header = csv_header(path, rows, COLUMNS, "burstgpt")
    idx = [header.index(c) for c in COLUMNS]
    sidx = header.index(SESSION) if SESSION in header else None
    extra = [h for h in header if h not in COLUMNS and h != SESSION]
    if extra:
        note(extra_note(path, extra, (*COLUMNS, SESSION), "column(s)"))
    clock = MonotonicClock(path, "Timestamp")
    arrival: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    ids: list[int] = []
    models: list[str] = []
    logs: list[str] = []
    sess_raw: list[str | None] = []
    seen_models: dict[str, int] = {}
    failed = 0
    row_no = -1
    for row in rows:
        line = rows.line_num  # type: ignore[attr-defined]
        if not row or all(not c.strip() for c in row):
            continue
        row_no += 1
        if len(row) != len(header):
            raise TraceFormatError(path, line, None,
                                   f"expected {len(header)} columns, got {len(row)}")
        t = _seconds(row[idx[0]], path, line)
        clock.check(t, line, row[idx[0]].strip())
        name = row[idx[1]].strip()
        if not name:
            raise TraceFormatError(path, line, "Model", "empty")
        seen_models[name] = seen_models.get(name, 0) + 1
        n_req = _count(row[idx[2]], path, line, COLUMNS[2])
        n_resp = _count(row[idx[3]], path, line, COLUMNS[3])
        total = _count(row[idx[4]], path, line, COLUMNS[4])
        if total != n_req + n_resp:
            raise TraceFormatError(path, line, "Total tokens", f"{total} is not Request tokens "
                                   f"+ Response tokens = {n_req} + {n_resp}")
        log = row[idx[5]].strip()
        if not log:
            raise TraceFormatError(path, line, "Log Type", "empty")
        sess = row[sidx] if sidx is not None else ""  # as written: " 7" is not "7"
        if model is not None and name != model:
            continue
        failed += n_resp == 0
        arrival.append(t)
        inp.append(n_req)
        out.append(n_resp)
        ids.append(row_no)
        models.append(name)
        logs.append(log)
        sess_raw.append(sess if sess.strip() else None)
    if row_no < 0:
        raise TraceFormatError(path, None, None, "no requests in file")
    if not arrival:
        raise TraceFormatError(path, None, "Model", f"no rows of model {model!r}; the file "
                               f"has {', '.join(map(repr, sorted(seen_models)))}")
    if failed:
        note(f"{path}: kept {failed:,} failed request(s) (0 response tokens) of "
             f"{len(arrival):,}")
    if model is not None:
        note(f"{path}: kept {len(arrival):,} {model!r} row(s) of {row_no + 1:,}")
    sessions, turns, names = _sessions(sess_raw)
    t0 = arrival[0]
    table = requests_table(trace, [t - t0 for t in arrival], inp, out, None, None,
                           sessions, turns)
    table = table.set_column(1, "request_id", pa.array(ids, pa.int64()))
    labels = labels_table(trace, len(ids), model=models, log_type=logs)
    labels = labels.set_column(1, "request_id", pa.array(ids, pa.int64()))
    out = {"requests": table, "request_labels": labels}
    if names:
        out["request_sessions"] = pa.table(
            {"trace": pa.array([trace] * len(names), pa.string()),
             "session_id": pa.array(list(names.values()), pa.int64()),
             "session": pa.array(list(names), pa.string())},
            schema=schema.REQUEST_SESSIONS)
    return out


def _sessions(raw: list[str | None]) -> tuple[list[int | None] | None,
                                             list[int | None] | None, dict[str, int]]:
    """Session ids for ``requests.session_id``, each request's ``turn`` (its session's
    requests counted from 0) and every identifier as written -> its id (for
    ``request_sessions``). Ids that are all plain integers ("7", not "007", " 7" or "7.0")
    keep their value; otherwise each distinct string is numbered 0, 1, ... by first
    appearance. None, None, {} when no row has a session."""
    if all(s is None for s in raw):
        return None, None, {}
    numeric = all(s is None or (s.isascii() and s.isdigit() and str(int(s)) == s
                                and int(s) <= INT64_MAX) for s in raw)
    codes: dict[str, int] = {}
    next_turn: dict[int, int] = {}
    sessions: list[int | None] = []
    turns: list[int | None] = []
    for s in raw:
        if s is None:
            sessions.append(None)
            turns.append(None)
            continue
        sid = codes.setdefault(s, int(s) if numeric else len(codes))
        sessions.append(sid)
        turns.append(next_turn.get(sid, 0))
        next_turn[sid] = next_turn.get(sid, 0) + 1
    if not numeric:
        note("Session ID values are not all plain integers: requests.session_id numbers "
             "each distinct string 0, 1, ... by first appearance (\"007\" is not \"7\"); "
             "request_sessions keeps every one exactly as written")
    return sessions, turns, codes


READER = Reader("burstgpt", "requests", read,
                "BurstGPT CSV (second timestamps, Model and Log Type labels, no prefix hashes)")
