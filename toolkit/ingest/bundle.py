"""A selection trace saved as a directory of the store's own three tables.

``selections.parquet``, ``selection_traces.parquet`` and ``selection_requests.parquet``
(the layout of ``traces/smollm2/``). The metadata is taken from the files rather than the
command line, and the selections are validated like any other ingest. A bundle may hold
several traces (e.g. one per score); ``select`` names the one to ingest.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest import parquet as parquet_reader
from toolkit.ingest.selections import INT32_MAX, ORDERS, SelectionError, as_int64
from toolkit.runtime.files import file_problem

FILES = ("selections", "selection_traces", "selection_requests")
#: Metadata columns a bundle must carry, and the Arrow type family each must have.
META_COLUMNS = {"trace": pa.types.is_string, "model": pa.types.is_string,
                "k": pa.types.is_integer, "score": pa.types.is_string,
                "order": pa.types.is_string, "synthetic": pa.types.is_boolean,
                "source": pa.types.is_string}
REQUEST_COLUMNS = {"trace": pa.types.is_string, "request_id": pa.types.is_integer,
                   "prompt_tokens": pa.types.is_integer}


def _check_columns(table: pa.Table, path: Path, wanted: dict) -> None:
    """Every wanted column present, of the right type family, without nulls."""
    for name, is_type in wanted.items():
        if name not in table.column_names:
            raise TraceFormatError(path, None, name, f"missing column; file has "
                                   f"{table.column_names}")
        col = table.column(name)
        if not is_type(col.type):
            raise TraceFormatError(path, None, name, f"wrong type {col.type}")
        if col.null_count:
            row = int(np.flatnonzero(pc.is_null(col).to_numpy(zero_copy_only=False))[0])
            raise TraceFormatError(path, row + 1, name, "null value", unit="row")


def _note_extra(table: pa.Table, path: Path, kept: pa.Schema) -> None:
    extra = sorted(set(table.column_names) - set(kept.names))
    if extra:
        note(f"{path}: ignoring column(s) {', '.join(map(repr, extra))} (kept: "
             f"{', '.join(kept.names)})")


def read(path: Path, trace: str, select: str | None = None,
         **options: object) -> dict[str, pa.Table]:
    if not path.is_dir():
        raise TraceFormatError(path, None, None, "expected a directory holding "
                               + ", ".join(f"{f}.parquet" for f in FILES))
    files = {f: path / f"{f}.parquet" for f in FILES}
    for f in files.values():
        if (problem := file_problem(f)) is not None:  # a FIFO in a bundle: not read
            raise TraceFormatError(f, None, None, "missing bundle file" if not f.exists()
                                   else problem)
    meta_t = parquet_reader.read_parquet(files["selection_traces"])
    _check_columns(meta_t, files["selection_traces"], META_COLUMNS)
    _note_extra(meta_t, files["selection_traces"], schema.SELECTION_TRACES)
    meta = meta_t.to_pylist()
    names = [m["trace"] for m in meta]
    if select is None and len(meta) == 1:
        select = names[0]
    if select not in names:
        raise TraceFormatError(files["selection_traces"], None, "trace",
                               f"choose one of the bundle's traces with select/--select: "
                               f"{', '.join(names)}" if select is None else
                               f"no trace {select!r}; the bundle holds {', '.join(names)}")
    if names.count(select) > 1:
        raise TraceFormatError(files["selection_traces"], None, "trace",
                               f"trace {select!r} is described {names.count(select)} times")
    i = names.index(select)
    m = meta[i]
    if not 1 <= m["k"] <= INT32_MAX:
        raise TraceFormatError(files["selection_traces"], i + 1, "k",
                               f"must be in [1, {INT32_MAX}], got {m['k']}", unit="row")
    if m["order"] not in ORDERS:
        raise TraceFormatError(files["selection_traces"], i + 1, "order",
                               f"must be 'score' or 'position', got {m['order']!r}", unit="row")
    opts = {"model": m["model"], "k": m["k"], "score": m["score"], "order": m["order"],
            "synthetic": m["synthetic"], **options}
    sel = parquet_reader.read_parquet(files["selections"])
    if "trace" not in sel.column_names or not pa.types.is_string(sel.schema.field("trace").type):
        raise TraceFormatError(files["selections"], None, "trace",
                               "missing string column (which trace each row belongs to)")
    mask = pc.fill_null(pc.equal(sel.column("trace"), select), False)
    rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
    tables = parquet_reader.read_table(sel.filter(mask), files["selections"], trace, rows=rows,
                                       **opts)
    tables["selection_traces"] = tables["selection_traces"].set_column(
        7, "source", pa.array([m["source"]], pa.string()))
    tables["selection_requests"] = _requests(files["selection_requests"], select, trace,
                                             tables["selections"].column("request_id"))
    return tables


def _requests(path: Path, select: str, trace: str, selected_ids: pa.ChunkedArray) -> pa.Table:
    """The bundle's request rows of ``select``: one per request that has selections."""
    req = parquet_reader.read_parquet(path)
    _check_columns(req, path, REQUEST_COLUMNS)
    _note_extra(req, path, schema.SELECTION_REQUESTS)
    mask = pc.equal(req.column("trace"), select).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(mask)
    req = req.filter(pa.array(mask))
    try:
        ids, prompt = (as_int64(req.column(c).to_numpy(), c) if rows.size else
                       np.zeros(0, dtype=np.int64) for c in ("request_id", "prompt_tokens"))
    except SelectionError as e:
        raise TraceFormatError(path, int(rows[e.row]) + 1 if e.row >= 0 else None, e.field,
                               e.message, unit="row") from None
    have = np.unique(selected_ids.to_numpy())
    for bad, why in ((~np.isin(ids, have), "has no selections in selections.parquet"),
                     ((prompt < 0) | (prompt > INT32_MAX),
                      f"prompt_tokens must be in [0, {INT32_MAX}]")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            field = "request_id" if "selections" in why else "prompt_tokens"
            raise TraceFormatError(path, int(rows[i]) + 1, field,
                                   f"request {ids[i]} {why}" if field == "request_id" else
                                   f"{why}, got {prompt[i]}", unit="row")
    uniq, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if (counts > 1).any():
        r = uniq[counts > 1][0]
        i = int(np.flatnonzero(ids == r)[1])
        raise TraceFormatError(path, int(rows[i]) + 1, "request_id",
                               f"request {r} listed twice", unit="row")
    req = req.set_column(req.schema.get_field_index("trace"), "trace",
                         pa.array([trace] * req.num_rows, pa.string()))
    return schema.conform(req, schema.SELECTION_REQUESTS)
READER = Reader("bundle", "selections", read, "Directory of selection Parquet tables",
                directory=True)
