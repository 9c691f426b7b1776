"""Agentic coding sessions in the Weka trace format that InferenceX's agentic benchmark
replays (JSONL, one session per line).

Field definitions follow the replayer's loader, ``aiperf`` ``src/aiperf/dataset/loader/
weka_trace_models.py`` (ai-dynamo/aiperf commit 90f31d18c57a), and the converter that
builds the published traces, InferenceX ``utils/agentic/datasets/proxy_to_weka.py``
(SemiAnalysisAI/InferenceX commit 843c6254ff69). A session object has ``id``, ``models``,
``block_size`` (tokens per hashed block, > 0), ``hash_id_scope`` (``"local"``: ids are
per session), ``requests`` and optional ``tool_tokens``, ``system_tokens``, ``totals``.
A request is ``{"type": "n"|"s", "t", "model", "in", "out", "hash_ids", ...}`` with
optional ``think_time``, ``api_time``, ``ttft`` (seconds), ``input_types``,
``output_types``, ``stop``; a ``{"type": "subagent", "t", "agent_id", "subagent_type",
"status", "models", "requests": [...]}`` marker nests its own requests.

Mapping: every API call (top level or inside a subagent, in list order) is one request;
``session_id`` is the session's 0-based line order and ``turn`` the call's 0-based
position in it; ``arrival_s`` is ``t`` minus the session's first ``t`` (seconds from
the session's start: every session starts at 0, as the replayer's users do);
``block_tokens`` is the session's ``block_size``. Because the ids are local, they are
renumbered so that two sessions never share a block. ``in`` may cover fewer tokens than
``len(hash_ids) * block_size`` (the converter uses the proxy's hashed-token count), so no
block-count rule is imposed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.fields import (
    as_count,
    as_hash_list,
    as_time,
    jsonl_objects,
    labels_table,
    requests_table,
)
from toolkit.ingest.sniff import extra_note, hint, looks_like

SESSION_FIELDS = ("id", "models", "block_size", "hash_id_scope", "requests")
SESSION_OPTIONAL = ("tool_tokens", "system_tokens", "totals")
CALL_FIELDS = ("t", "type", "model", "in", "out")
CALL_OPTIONAL = ("hash_ids", "input_types", "output_types", "stop", "api_time",
                 "think_time", "ttft")
SUBAGENT_FIELDS = ("t", "type", "agent_id", "subagent_type", "status", "requests", "models")
SUBAGENT_OPTIONAL = ("duration_ms", "total_tokens", "tool_use_count", "tool_tokens",
                     "system_tokens")
NOT_STORED = ("think_time", "api_time", "ttft")  # implied by t, or measured replies


class _Session:
    """Columns of one session's calls."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.inp: list[int] = []
        self.out: list[int] = []
        self.ids: list[list[int]] = []
        self.models: list[str] = []
        self.kinds: list[str] = []


def _strings(value: object, path: Path, line: int, field: str) -> None:
    """Refuse anything but a list of strings (``models``)."""
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        shown = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
        raise TraceFormatError(path, line, field, f"expected a list of strings, got {shown}")


def _text(value: object, path: Path, line: int, field: str) -> None:
    if not isinstance(value, str):
        raise TraceFormatError(path, line, field, f"expected a string, got {value!r}")


def _objects(path: Path):
    """JSONL sessions, or one pretty-printed session object (a per-session .json file)."""
    try:
        yield from jsonl_objects(path)
    except TraceFormatError as e:
        if e.line != 1 or "invalid JSON" not in e.message:
            raise
        try:
            rec = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise e from None
        if not isinstance(rec, dict):
            raise e from None
        yield 1, rec


def read(path: Path, trace: str) -> dict[str, pa.Table]:
    """Parse and validate every session; raise on the first bad field."""
    extra: dict[str, set[str]] = {"session": set(), "request": set(), "subagent": set()}
    unused: set[str] = set()
    cols: dict[str, list] = {k: [] for k in ("t", "inp", "out", "ids", "bt", "sess", "turn",
                                             "model", "kind")}
    n_sessions = 0
    names: list[str] = []  # each session's ``id`` as written, by its session_id
    next_key = 0  # first global block id of the next session
    for lineno, rec in _objects(path):
        for field in SESSION_FIELDS:
            if field not in rec:
                raise TraceFormatError(path, lineno, field,
                                       "missing" + hint(looks_like(rec, not_="agentic")))
        extra["session"].update(k for k in rec
                                if k not in SESSION_FIELDS and k not in SESSION_OPTIONAL)
        _text(rec["id"], path, lineno, "id")
        names.append(rec["id"])
        _strings(rec["models"], path, lineno, "models")
        for f in ("tool_tokens", "system_tokens"):
            if f in rec:
                as_count(rec[f], path, lineno, f)
        if rec["hash_id_scope"] != "local":
            raise TraceFormatError(path, lineno, "hash_id_scope",
                                   f"expected 'local' (the only scope the format defines), "
                                   f"got {rec['hash_id_scope']!r}")
        bs = as_count(rec["block_size"], path, lineno, "block_size")
        if not 1 <= bs <= (1 << 31) - 1:
            raise TraceFormatError(path, lineno, "block_size", f"must be 1..2^31-1, got {bs}")
        s = _Session()
        _calls(path, lineno, rec["requests"], "requests", s, extra, unused, inside=None)
        # renumber the session's local ids densely after the previous sessions' ids
        if s.ids:
            flat = np.fromiter((h for ids in s.ids for h in ids), np.int64,
                               sum(len(ids) for ids in s.ids))
            uniq, inv = np.unique(flat, return_inverse=True)
            glob = (inv + next_key).tolist()
            next_key += len(uniq)
            at = 0
            for i, ids in enumerate(s.ids):
                s.ids[i] = glob[at:at + len(ids)]
                at += len(ids)
        n = len(s.t)
        t0 = min(s.t, default=0.0)
        rel = [t - t0 for t in s.t]
        for i, d in enumerate(rel):
            if not math.isfinite(d):  # two finite times, a difference beyond float64
                raise TraceFormatError(path, lineno, "t", f"call {i} at {s.t[i]!r} s is "
                                       f"{d!r} s after the session's first call at {t0!r} s")
        cols["t"] += rel
        cols["inp"] += s.inp
        cols["out"] += s.out
        cols["ids"] += s.ids
        cols["bt"] += [bs] * n
        cols["sess"] += [n_sessions] * n
        cols["turn"] += list(range(n))
        cols["model"] += s.models
        cols["kind"] += s.kinds
        n_sessions += 1
    if not cols["t"]:
        raise TraceFormatError(path, None, None, "no requests in file")
    for where, keys in extra.items():
        if keys:
            note(extra_note(path, keys, {"session": SESSION_FIELDS + SESSION_OPTIONAL,
                                         "request": CALL_FIELDS + CALL_OPTIONAL,
                                         "subagent": SUBAGENT_FIELDS + SUBAGENT_OPTIONAL}
                            [where], f"{where} key(s)"))
    if unused:
        note(f"{path}: not stored: {', '.join(sorted(unused))} (arrivals come from 't')")
    if max(cols["turn"]) > (1 << 31) - 1:
        raise TraceFormatError(path, None, "requests", "a session has more than 2^31 calls")
    n = len(cols["t"])
    return {
        "requests": requests_table(trace, cols["t"], cols["inp"], cols["out"], cols["bt"],
                                   cols["ids"], cols["sess"], cols["turn"]),
        "request_labels": labels_table(trace, n, model=cols["model"],
                                       request_type=cols["kind"]),
        # the sessions' own ids, exactly as written (session_id is the line order)
        "request_sessions": pa.table(
            {"trace": pa.array([trace] * len(names), pa.string()),
             "session_id": pa.array(range(len(names)), pa.int64()),
             "session": pa.array(names, pa.string())}, schema=schema.REQUEST_SESSIONS),
    }


def _calls(path: Path, line: int, value: object, where: str, s: _Session,
           extra: dict[str, set[str]], unused: set[str], inside: str | None) -> None:
    """Append the API calls of a ``requests`` list (recursing once into subagents)."""
    if not isinstance(value, list):
        raise TraceFormatError(path, line, where, f"expected a list, got {type(value).__name__}")
    for i, req in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(req, dict):
            raise TraceFormatError(path, line, at, "expected an object")
        kind = req.get("type")
        if kind == "subagent" and inside is None:
            for f in SUBAGENT_FIELDS:
                if f not in req:
                    raise TraceFormatError(path, line, f"{at}.{f}", "missing")
            extra["subagent"].update(k for k in req if k not in SUBAGENT_FIELDS
                                     and k not in SUBAGENT_OPTIONAL)
            label = req["subagent_type"]
            for f in ("agent_id", "subagent_type", "status"):
                _text(req[f], path, line, f"{at}.{f}")
            _strings(req["models"], path, line, f"{at}.models")
            as_time(req["t"], path, line, f"{at}.t")
            _calls(path, line, req["requests"], f"{at}.requests", s, extra, unused,
                   inside=label)
            continue
        if kind not in ("n", "s"):
            allowed = "'n' or 's'" if inside is not None else "'n', 's' or 'subagent'"
            raise TraceFormatError(path, line, f"{at}.type", f"expected {allowed}, got {kind!r}")
        for f in CALL_FIELDS:
            if f not in req:
                raise TraceFormatError(path, line, f"{at}.{f}", "missing")
        extra["request"].update(k for k in req if k not in CALL_FIELDS and k not in CALL_OPTIONAL)
        unused.update(k for k in NOT_STORED if req.get(k) is not None)
        t = as_time(req["t"], path, line, f"{at}.t")
        model = req["model"]
        _text(model, path, line, f"{at}.model")
        ids = as_hash_list(req.get("hash_ids", []), path, line, f"{at}.hash_ids")
        s.t.append(t)
        s.inp.append(as_count(req["in"], path, line, f"{at}.in"))
        s.out.append(as_count(req["out"], path, line, f"{at}.out"))
        s.ids.append(ids)
        s.models.append(model)
        s.kinds.append(kind if inside is None else f"subagent:{inside}/{kind}")


READER = Reader("agentic", "requests", read,
                "Agentic sessions JSONL in the Weka trace format InferenceX replays "
                "(block_size-token hash_ids, seconds)")
