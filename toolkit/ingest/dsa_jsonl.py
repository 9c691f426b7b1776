"""DSA top-k events as JSONL, the instrumented DeepSeek-V3.2 reference format.

One JSON object per line; lines whose ``event`` is ``"dsa_topk"`` carry ``request_id``
(int or string), ``layer_id``, ``step_idx``, ``seq_len_current`` and
``selected_token_pos``. Other events are ignored. ``-1`` entries (vLLM's padding) are
dropped. String request ids are mapped to dense integers in order of first appearance and
kept as ``selection_requests.external_id``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.fields import INT64_MAX, as_count, jsonl_records, require
from toolkit.ingest.selections import SelectionColumns, SelectionError, TraceMeta, build_tables
from toolkit.ingest.sniff import extra_note, hint, looks_like

EVENT = "dsa_topk"
FIELDS = ("request_id", "layer_id", "step_idx", "seq_len_current", "selected_token_pos")


def _positions(value: object, path: Path, line: int, maybe_bool: bool) -> np.ndarray:
    field = "selected_token_pos"
    if not isinstance(value, list):
        raise TraceFormatError(path, line, field, f"expected a list of integers, got {value!r}")
    # NumPy turns JSON true/false into 1/0; only a line containing them needs the (C-speed,
    # but not free) per-element type check
    only_ints = not maybe_bool or set(map(type, value)) <= {int}
    try:
        arr = np.asarray(value) if value and only_ints else np.zeros(0, dtype=np.int64)
    except ValueError:  # ragged nested lists
        arr = np.zeros((0, 0))
    if not only_ints or arr.ndim != 1 or arr.dtype.kind != "i":
        # error path only: name the first element that is not an int64
        bad = next((x for x in value if isinstance(x, bool) or not isinstance(x, int)
                    or not -INT64_MAX - 1 <= x <= INT64_MAX), value)
        what = "integers" if isinstance(bad, bool) or not isinstance(bad, int) else \
            "an integer that fits in int64"
        raise TraceFormatError(path, line, field, f"expected {what}, got {bad!r}")
    return arr.astype(np.int64)


def read(path: Path, trace: str, **options: object) -> dict[str, pa.Table]:
    """Parse every ``dsa_topk`` event, then validate the whole trace at once."""
    ids: dict[object, int] = {}
    cols: dict[str, list[int]] = {"request_id": [], "step": [], "layer": [], "seq_len": []}
    lists: list[np.ndarray] = []
    lines: list[int] = []
    extra: set[str] = set()
    first: dict | None = None
    for lineno, rec, raw in jsonl_records(path):
        if first is None:
            first = rec
        if rec.get("event") != EVENT:
            continue
        require(rec, FIELDS, path, lineno)
        if len(rec) > len(FIELDS) + 1:
            extra.update(k for k in rec if k not in FIELDS and k != "event")
        rid = rec["request_id"]
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            raise TraceFormatError(
                path, lineno, "request_id", f"expected int or string, got {rid!r}"
            )
        cols["request_id"].append(ids.setdefault(rid, len(ids)))
        cols["layer"].append(as_count(rec["layer_id"], path, lineno, "layer_id"))
        cols["step"].append(as_count(rec["step_idx"], path, lineno, "step_idx"))
        seq_len = as_count(rec["seq_len_current"], path, lineno, "seq_len_current")
        cols["seq_len"].append(seq_len)
        lists.append(_positions(rec["selected_token_pos"], path, lineno,
                                b"true" in raw or b"false" in raw))
        lines.append(lineno)
    if not lists:
        raise TraceFormatError(path, None, None, f"no {EVENT!r} events in file"
                               + hint(looks_like(first or {}, not_="dsa-jsonl")))
    if extra:
        note(extra_note(path, extra, FIELDS, f"{EVENT} key(s)"))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([a.size for a in lists], out=offsets[1:])
    data = SelectionColumns(
        **{k: np.asarray(v, dtype=np.int64) for k, v in cols.items()},
        offsets=offsets,
        values=np.concatenate(lists),
    )
    names = {"step": "step_idx", "layer": "layer_id", "seq_len": "seq_len_current",
             "topk": "selected_token_pos"}

    def locate(e: SelectionError) -> TraceFormatError:
        line = lines[e.row] if e.row >= 0 else None
        return TraceFormatError(path, line, names.get(e.field, e.field), e.message)

    meta = TraceMeta(source=f"ingested from {path.name} (dsa-jsonl)", **options)  # type: ignore[arg-type]
    external = [str(r) for r in ids]
    return build_tables(trace, data, meta, locate, external_ids=external)


READER = Reader("dsa-jsonl", "selections", read, "DSA top-k JSONL events (dsa_topk)")
