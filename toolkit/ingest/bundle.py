"""A selection trace saved as a directory of the store's own three tables.

``selections.parquet``, ``selection_traces.parquet`` and ``selection_requests.parquet``
(the layout of ``traces/smollm2/``). The metadata is taken from the files rather than the
command line, and the selections are validated like any other ingest. A bundle may hold
several traces (e.g. one per score); ``select`` names the one to ingest.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader
from toolkit.ingest import parquet as parquet_reader

FILES = ("selections", "selection_traces", "selection_requests")


def read(path: Path, trace: str, select: str | None = None,
         **options: object) -> dict[str, pa.Table]:
    if not path.is_dir():
        raise TraceFormatError(path, None, None, "expected a directory holding "
                               + ", ".join(f"{f}.parquet" for f in FILES))
    for f in FILES:
        if not (path / f"{f}.parquet").is_file():
            raise TraceFormatError(path / f"{f}.parquet", None, None, "missing bundle file")
    meta = pq.read_table(path / "selection_traces.parquet").to_pylist()
    names = [m["trace"] for m in meta]
    if select is None and len(meta) == 1:
        select = names[0]
    if select not in names:
        raise TraceFormatError(path / "selection_traces.parquet", None, "trace",
                               f"choose one of the bundle's traces with select/--select: "
                               f"{', '.join(names)}" if select is None else
                               f"no trace {select!r}; the bundle holds {', '.join(names)}")
    m = meta[names.index(select)]
    opts = {"model": m["model"], "k": m["k"], "score": m["score"], "order": m["order"],
            "synthetic": m["synthetic"], **options}
    only = ("trace", "=", select)
    tables = parquet_reader.read_table(pq.read_table(path / "selections.parquet", filters=[only]),
                                       path / "selections.parquet", trace, **opts)
    tables["selection_traces"] = tables["selection_traces"].set_column(
        7, "source", pa.array([m["source"]], pa.string()))
    req = pq.read_table(path / "selection_requests.parquet", filters=[only])
    req = req.set_column(req.schema.get_field_index("trace"), "trace",
                         pa.array([trace] * req.num_rows, pa.string()))
    tables["selection_requests"] = schema.conform(req, schema.SELECTION_REQUESTS)
    return tables


READER = Reader("bundle", "selections", read, "Directory of selection Parquet tables")
