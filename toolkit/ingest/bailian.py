"""Qwen-Bailian usage traces (JSONL; Wang et al., "KVCache Cache in the Wild", ATC'25).

One JSON object per line: ``chat_id``, ``parent_chat_id`` (-1 for a first turn),
``timestamp`` (seconds since the trace start, float), ``input_length``,
``output_length``, ``type`` (text/search/image/file), ``turn`` and ``hash_ids``, one id
per 16-token block. The ids are salted SipHashes of each block's own tokens remapped to
integers, so unlike Mooncake's they are not chained: the same id can follow different
prefixes. ``session_id`` is the ``chat_id`` at the root of the parent chain (or the
missing parent's id when the chain starts before the file does); ``turn`` is kept and
``type`` goes to ``request_labels.request_type``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.fields import (
    INT64_MAX,
    MonotonicClock,
    as_count,
    as_hash_list,
    as_time,
    jsonl_objects,
    labels_table,
    requests_table,
)
from toolkit.ingest.hints import bailian_fields
from toolkit.ingest.sniff import extra_note

BLOCK_TOKENS = 16
FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length", "type",
          "turn", "hash_ids")
INT32_MAX = (1 << 31) - 1


def _chat_id(value: object, path: Path, line: int, field: str, *, root_ok: bool) -> int:
    """A chat id: an int64 >= 0 (or -1 where ``root_ok``)."""
    ok = not isinstance(value, bool) and isinstance(value, int) \
        and (-1 if root_ok else 0) <= value <= INT64_MAX
    if not ok:
        want = "an integer >= 0, or -1 for a first turn" if root_ok else "an integer >= 0"
        raise TraceFormatError(path, line, field, f"expected {want}, got {value!r}")
    return value  # type: ignore[return-value]


def read(path: Path, trace: str) -> dict[str, pa.Table]:
    """Parse and validate every line; raise on the first bad one."""
    arrival: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[list[int]] = []
    sessions: list[int | None] = []
    turns: list[int | None] = []
    types: list[str | None] = []
    root: dict[int, int] = {}  # chat_id -> session root
    seen_at: dict[int, int] = {}  # chat_id -> line
    orphans = 0
    extra: set[str] = set()
    clock = MonotonicClock(path, "timestamp")
    for lineno, rec in jsonl_objects(path):
        bailian_fields(rec, FIELDS, path, lineno, extra)
        chat = _chat_id(rec["chat_id"], path, lineno, "chat_id", root_ok=False)
        if chat in seen_at:
            raise TraceFormatError(path, lineno, "chat_id",
                                   f"{chat} repeats the chat_id of line {seen_at[chat]}")
        parent = _chat_id(rec["parent_chat_id"], path, lineno, "parent_chat_id", root_ok=True)
        if parent == chat:
            raise TraceFormatError(path, lineno, "parent_chat_id", "a chat cannot be its own "
                                   "parent")
        ts = as_time(rec["timestamp"], path, lineno, "timestamp")
        clock.check(ts, lineno, str(rec["timestamp"]))
        n_in = as_count(rec["input_length"], path, lineno, "input_length")
        n_out = as_count(rec["output_length"], path, lineno, "output_length")
        kind = rec["type"]
        if not isinstance(kind, str):
            raise TraceFormatError(path, lineno, "type", f"expected a string, got {kind!r}")
        turn = as_count(rec["turn"], path, lineno, "turn")
        if turn > INT32_MAX:
            raise TraceFormatError(path, lineno, "turn", f"{turn} does not fit in int32")
        ids = as_hash_list(rec["hash_ids"], path, lineno, "hash_ids")
        lo, hi = n_in // BLOCK_TOKENS, -(-n_in // BLOCK_TOKENS)
        if not lo <= len(ids) <= hi:
            want = str(hi) if lo == hi else f"{lo} or {hi}"
            other = "" if len(ids) != -(-n_in // 512) or not n_in else \
                "; 512-token blocks and millisecond timestamps look like the mooncake " \
                "format: use `toolkit ingest mooncake`"
            raise TraceFormatError(
                path, lineno, "hash_ids",
                f"{len(ids)} block ids for input_length {n_in}, expected {want} "
                f"({BLOCK_TOKENS}-token blocks; the last may be partial){other}")
        if parent == -1:
            session = chat
        elif parent in root:
            session = root[parent]
        else:  # the chain began before the file did
            session = parent
            orphans += 1
        root[chat] = session
        seen_at[chat] = lineno
        arrival.append(ts)
        inp.append(n_in)
        out.append(n_out)
        hashes.append(ids)
        sessions.append(session)
        turns.append(turn)
        types.append(kind)
    if not arrival:
        raise TraceFormatError(path, None, None, "no requests in file")
    if extra:
        note(extra_note(path, extra, FIELDS, "key(s)"))
    if orphans:
        note(f"{path}: {orphans} request(s) name a parent_chat_id that is not on an earlier "
             "line; their session is the missing parent's id")
    t0 = arrival[0]
    arrival_s = [t - t0 for t in arrival]
    n = len(arrival_s)
    return {
        "requests": requests_table(trace, arrival_s, inp, out, BLOCK_TOKENS, hashes,
                                   sessions, turns),
        "request_labels": labels_table(trace, n, request_type=types),
    }


READER = Reader("bailian", "requests", read,
                "Qwen-Bailian usage trace JSONL (16-token hash_ids, second timestamps, "
                "sessions)")
