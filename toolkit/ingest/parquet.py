"""A Parquet table already in the selection schema (``toolkit.schema.SELECTIONS``).

The ``trace`` column, if present, is replaced by the ingest name; the other columns are
validated like any other selection trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.selections import (
    SelectionColumns,
    SelectionError,
    TraceMeta,
    as_int64,
    build_tables,
)

COLUMNS = ("request_id", "step", "layer", "seq_len", "topk")


def read_parquet(path: Path, **kwargs: object) -> pa.Table:
    """``pq.read_table`` with a located error for anything that is not readable Parquet."""
    try:
        return pq.read_table(path, **kwargs)  # type: ignore[arg-type]
    except (OSError, pa.ArrowException) as e:
        raise TraceFormatError(path, None, None,
                               f"not a readable Parquet file: {str(e).splitlines()[0]}") from None


def read(path: Path, trace: str, **options: object) -> dict[str, pa.Table]:
    return read_table(read_parquet(path), path, trace, **options)


def _first_null_row(col: pa.ChunkedArray | pa.Array) -> int:
    return int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])


def read_table(table: pa.Table, path: Path, trace: str, rows: np.ndarray | None = None,
               **options: object) -> dict[str, pa.Table]:
    """Validate an in-memory table in the selection schema (``path`` names it in errors;
    ``rows`` maps its rows to the file's 0-based rows when it is a filtered part)."""
    row_no = (lambda r: r + 1) if rows is None else (lambda r: int(rows[r]) + 1)
    extra = sorted(set(table.column_names) - set(COLUMNS) - {"trace"})
    if extra:
        note(f"{path}: ignoring column(s) {', '.join(map(repr, extra))} (read: "
             f"{', '.join(COLUMNS)})")
    for c in COLUMNS:
        if c not in table.column_names:
            raise TraceFormatError(path, None, c, f"missing column; file has {table.column_names}")
    for c in COLUMNS[:4]:
        col = table.column(c)
        if not pa.types.is_integer(col.type):
            raise TraceFormatError(path, None, c, f"expected integers, got {col.type}")
        if col.null_count:
            raise TraceFormatError(path, row_no(_first_null_row(col)), c, "null value",
                                   unit="row")
    topk = table.column("topk").combine_chunks()
    if not (pa.types.is_list(topk.type) or pa.types.is_large_list(topk.type)) or not \
            pa.types.is_integer(topk.type.value_type):
        raise TraceFormatError(path, None, "topk", f"expected list<int32>, got {topk.type}")
    if topk.null_count:
        raise TraceFormatError(path, row_no(_first_null_row(topk)), "topk", "null list",
                               unit="row")
    lengths = pc.list_value_length(topk).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(topk)
    if flat.null_count:
        i = _first_null_row(flat)
        r = int(np.searchsorted(offsets, i, side="right")) - 1
        raise TraceFormatError(path, row_no(r), "topk", f"null at list index {i - offsets[r]}",
                               unit="row")

    def locate(e: SelectionError) -> TraceFormatError:
        if e.row < 0:
            return TraceFormatError(path, None, e.field, e.message)
        return TraceFormatError(path, row_no(e.row), e.field, e.message, unit="row")

    try:
        values = as_int64(flat.to_numpy(zero_copy_only=False), "topk")
    except SelectionError as e:  # the row is the list holding value e.row
        r = int(np.searchsorted(offsets, e.row, side="right")) - 1
        raise locate(SelectionError(r, "topk", e.message)) from None
    try:
        cols = {c: as_int64(table.column(c).to_numpy(), c) for c in COLUMNS[:4]}
    except SelectionError as e:
        raise locate(e) from None
    data = SelectionColumns(**cols, offsets=offsets, values=values)
    meta = TraceMeta(source=f"ingested from {path.name} (parquet)", **options)  # type: ignore[arg-type]
    return build_tables(trace, data, meta, locate)


READER = Reader("parquet", "selections", read, "Parquet table in the selection schema")
