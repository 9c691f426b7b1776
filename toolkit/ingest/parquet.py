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
from toolkit.ingest import Reader
from toolkit.ingest.selections import SelectionColumns, SelectionError, TraceMeta, build_tables

COLUMNS = ("request_id", "step", "layer", "seq_len", "topk")


def read(path: Path, trace: str, **options: object) -> dict[str, pa.Table]:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as e:
        raise TraceFormatError(path, None, None, f"not a readable Parquet file: {e}") from None
    return read_table(table, path, trace, **options)


def read_table(table: pa.Table, path: Path, trace: str, **options: object
               ) -> dict[str, pa.Table]:
    """Validate an in-memory table in the selection schema (``path`` names it in errors)."""
    for c in COLUMNS:
        if c not in table.column_names:
            raise TraceFormatError(path, None, c, f"missing column; file has {table.column_names}")
    for c in COLUMNS[:4]:
        t = table.schema.field(c).type
        if not pa.types.is_integer(t) or table.column(c).null_count:
            raise TraceFormatError(path, None, c, f"expected non-null integers, got {t}")
    topk = table.column("topk").combine_chunks()
    if not (pa.types.is_list(topk.type) or pa.types.is_large_list(topk.type)) or not \
            pa.types.is_integer(topk.type.value_type) or topk.null_count:
        raise TraceFormatError(path, None, "topk", f"expected list<int32>, got {topk.type}")
    values = pc.list_flatten(topk).to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = pc.list_value_length(topk).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = SelectionColumns(
        **{c: table.column(c).to_numpy().astype(np.int64) for c in COLUMNS[:4]},
        offsets=offsets,
        values=values,
    )

    def locate(e: SelectionError) -> TraceFormatError:
        return TraceFormatError(path, e.row + 1, e.field, e.message, unit="row")

    meta = TraceMeta(source=f"ingested from {path.name} (parquet)", **options)  # type: ignore[arg-type]
    return build_tables(trace, data, meta, locate)


READER = Reader("parquet", "selections", read, "Parquet table in the selection schema")
