"""Validation and assembly shared by every selection reader (dsa-jsonl, npz, parquet).

Checks are vectorised over the flattened top-k lists, so a trace of millions of rows is
validated at NumPy speed; a violation reports the first offending row, which the reader
translates into its own location (line, row, or step/layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError

INT16_MAX = (1 << 15) - 1
INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
ORDERS = ("score", "position")
#: Largest value each column may hold: the store's type, so nothing wraps on the way in.
#: ``layer`` stops one short of int16's maximum so that ``n_layers`` (int16) fits too.
LIMITS = {"request_id": INT64_MAX, "step": INT32_MAX, "layer": INT16_MAX - 1,
          "seq_len": INT32_MAX}
#: Positions per Arrow list chunk: list<int32> offsets must stay below 2^31.
_CHUNK_VALUES = 1 << 30


@dataclass(frozen=True)
class SelectionColumns:
    """Raw columns as read from a file, one entry per (request, step, layer) row."""

    request_id: np.ndarray  # int64
    step: np.ndarray  # int64
    layer: np.ndarray  # int64
    seq_len: np.ndarray  # int64
    offsets: np.ndarray  # int64, len = rows + 1, into values
    values: np.ndarray  # int64 selected positions, -1 = padding


@dataclass(frozen=True)
class TraceMeta:
    """User-supplied trace metadata; ``None`` fields are inferred from the data."""

    model: str = "unknown"
    k: int | None = None
    score: str = "unknown"
    order: str | None = None  # "score" | "position"; inferred if None
    synthetic: bool = False
    source: str = ""


def as_int64(values: np.ndarray, field: str) -> np.ndarray:
    """An integer column as int64, refusing (not wrapping) unsigned values above int64.

    Raises:
        SelectionError: at the first row holding a non-integer or too large value.
    """
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise SelectionError(-1, field, f"expected integers, got {values.dtype}")
    if values.dtype.kind == "u" and values.dtype.itemsize >= 8 and values.size:
        if (r := _first(values > INT64_MAX)) is not None:
            raise SelectionError(r, field, f"{int(values[r])} does not fit in int64")
    return values.astype(np.int64)


class SelectionError(ValueError):
    """A row violates the selection schema; ``row`` is 0-based in reader order, or -1 when
    the whole trace or its metadata is at fault (no row to name)."""

    def __init__(self, row: int, field: str, message: str) -> None:
        self.row, self.field, self.message = row, field, message
        super().__init__(f"row {row}: {field}: {message}")


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def validate(cols: SelectionColumns, k: int | None) -> tuple[np.ndarray, np.ndarray, int]:
    """Check every rule and drop ``-1`` padding.

    Returns:
        ``(offsets, values, k)`` after padding removal; ``k`` is inferred as the longest
        list when not given.

    Raises:
        SelectionError: the first violated rule, at its first offending row.
    """
    n = cols.request_id.size
    if n == 0:
        raise SelectionError(-1, "topk", "no selection rows (zero steps, layers or requests)")
    if k is not None and not 1 <= k <= INT32_MAX:
        raise SelectionError(-1, "k", f"k must be in [1, {INT32_MAX}], got {k}")
    lengths = np.diff(cols.offsets)
    row_of = np.repeat(np.arange(n, dtype=np.int64), lengths)
    if (r := _first(cols.seq_len < 1)) is not None:
        raise SelectionError(r, "seq_len", f"must be >= 1, got {cols.seq_len[r]}")
    for name, arr in (("step", cols.step), ("layer", cols.layer), ("request_id", cols.request_id)):
        if (r := _first(arr < 0)) is not None:
            raise SelectionError(r, name, f"must be >= 0, got {arr[r]}")
    for name, limit in LIMITS.items():
        arr = getattr(cols, name)
        if (r := _first(arr > limit)) is not None:
            raise SelectionError(r, name, f"{arr[r]} is larger than {limit}, the most the "
                                 "store's column holds")
    v = cols.values
    bad = (v < -1) | (v >= cols.seq_len[row_of])
    if (i := _first(bad)) is not None:
        r = int(row_of[i])
        raise SelectionError(
            r, "topk", f"position {v[i]} outside [0, seq_len={cols.seq_len[r]})"
        )
    keep = v != -1
    values, rows = v[keep], row_of[keep]
    new_len = np.bincount(rows, minlength=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(new_len, out=offsets[1:])
    k_eff = int(new_len.max(initial=0)) if k is None else int(k)
    if k_eff == 0:
        raise SelectionError(-1, "topk", "every top-k list is empty (k = 0)")
    if (r := _first(new_len > k_eff)) is not None:
        raise SelectionError(r, "topk", f"{new_len[r]} positions, more than k={k_eff}")
    order = np.lexsort((values, rows))
    sv, sr = values[order], rows[order]
    dup = (sr[1:] == sr[:-1]) & (sv[1:] == sv[:-1])
    if (i := _first(dup)) is not None:
        raise SelectionError(int(sr[i]), "topk", f"position {sv[i]} selected twice")
    # steps strictly increasing per (request, layer), in reader order
    order = np.lexsort((np.arange(n), cols.layer, cols.request_id))
    same = (cols.request_id[order][1:] == cols.request_id[order][:-1]) & (
        cols.layer[order][1:] == cols.layer[order][:-1]
    )
    not_incr = same & (cols.step[order][1:] <= cols.step[order][:-1])
    if (i := _first(not_incr)) is not None:
        r, prev = int(order[i + 1]), int(order[i])
        raise SelectionError(
            r, "step", f"step {cols.step[r]} does not follow step {cols.step[prev]} "
            f"(row {prev}) for request {cols.request_id[r]}, layer {cols.layer[r]}",
        )
    return offsets, values, k_eff


def _topk_column(offsets: np.ndarray, values: np.ndarray) -> pa.ChunkedArray:
    """``list<int32>`` in chunks of at most ``_CHUNK_VALUES`` positions, so the int32 list
    offsets never wrap however large the trace."""
    n = offsets.size - 1
    starts = [0]
    while starts[-1] < n:
        limit = offsets[starts[-1]] + _CHUNK_VALUES
        end = int(np.searchsorted(offsets, limit, side="right")) - 1
        starts.append(max(end, starts[-1] + 1))
    chunks = []
    for a, b in zip(starts[:-1], starts[1:], strict=True):
        base = offsets[a]
        chunks.append(pa.ListArray.from_arrays(
            pa.array(offsets[a:b + 1] - base).cast(pa.int32()),
            pa.array(values[base:offsets[b]]).cast(pa.int32())))
    return pa.chunked_array(chunks, pa.list_(pa.int32()))


def _is_position_ordered(offsets: np.ndarray, values: np.ndarray) -> bool:
    if values.size < 2:
        return True
    rising = np.diff(values) > 0
    # a step across a row boundary does not count
    boundary = np.zeros(values.size - 1, dtype=bool)
    ends = offsets[1:-1] - 1
    boundary[ends[(ends >= 0) & (ends < values.size - 1)]] = True
    return bool(np.all(rising | boundary))


def build_tables(
    trace: str,
    cols: SelectionColumns,
    meta: TraceMeta,
    locate: Callable[[SelectionError], TraceFormatError],
    external_ids: list[str] | None = None,
) -> dict[str, pa.Table]:
    """Validate and assemble the ``selections``, ``selection_traces`` and
    ``selection_requests`` tables.

    Args:
        locate: turns a :class:`SelectionError` into the reader's own error location.
        external_ids: the engine's request id per dense ``request_id`` (optional).
    """
    if meta.order not in (None, *ORDERS):
        raise locate(SelectionError(-1, "order", f"must be 'score' or 'position', got "
                                    f"{meta.order!r}"))
    try:
        offsets, values, k = validate(cols, meta.k)
    except SelectionError as e:
        raise locate(e) from None
    n = cols.request_id.size
    selections = pa.table(
        {
            "trace": pa.array([trace] * n, pa.string()),
            "request_id": pa.array(cols.request_id, pa.int64()),
            # validated above; a safe cast would still refuse anything that wraps
            "step": pa.array(cols.step).cast(pa.int32()),
            "layer": pa.array(cols.layer).cast(pa.int16()),
            "seq_len": pa.array(cols.seq_len).cast(pa.int32()),
            "topk": _topk_column(offsets, values),
        },
        schema=schema.SELECTIONS,
    )
    order = meta.order or ("position" if _is_position_ordered(offsets, values) else "score")
    n_layers = int(cols.layer.max(initial=-1)) + 1
    traces = pa.table(
        {
            "trace": [trace], "model": [meta.model], "k": [k], "score": [meta.score],
            "order": [order], "n_layers": [n_layers], "synthetic": [meta.synthetic],
            "source": [meta.source],
        },
        schema=schema.SELECTION_TRACES,
    )
    # prompt length inferred from each request's first recorded step: seq_len = prompt+step+1
    by_req = np.lexsort((cols.step, cols.request_id))
    r_sorted = cols.request_id[by_req]
    firsts = by_req[np.r_[True, r_sorted[1:] != r_sorted[:-1]]] if n else by_req
    req_ids = cols.request_id[firsts]
    prompt = np.maximum(cols.seq_len[firsts] - cols.step[firsts] - 1, 0)
    requests = pa.table(
        {
            "trace": [trace] * req_ids.size,
            "request_id": req_ids,
            "prompt_tokens": pa.array(prompt).cast(pa.int32()),
            "source_text": pa.nulls(req_ids.size, pa.string()),
            "external_id": pa.array(
                [external_ids[r] for r in req_ids] if external_ids else [None] * req_ids.size,
                pa.string(),
            ),
        },
        schema=schema.SELECTION_REQUESTS,
    )
    return {
        "selections": selections,
        "selection_traces": traces,
        "selection_requests": requests,
    }
