"""Every table of a store as one Parquet file, with a README.md of the schemas, so a store can
be handed to someone who has only DuckDB (``SELECT * FROM 'DIR/requests.parquet'``).

The column meanings come from the one place they are written down, the comments beside each
field in :mod:`toolkit.schema` (read from its source, so the README cannot drift from the
schema); units follow from the names (``_s`` seconds, ``_bytes`` bytes, ``_tokens`` tokens,
...), the project's naming rule.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from toolkit import schema
from toolkit.errors import ToolkitError
from toolkit.store import Store
from toolkit.version import __version__

BATCH_ROWS = 1 << 16
_FIELD = re.compile(r'pa\.field\("([A-Za-z0-9_]+)"[^#\n]*#\s*(.+)$')
_TABLE_DOC = re.compile(r"^#:\s?(.*)$")
_ASSIGN = re.compile(r"^([A-Z_]+)\s*=\s*pa\.schema\(")
#: Units by name ending (the project puts units in names), longest ending first.
UNITS = (
    ("_usd_per_gpu_hour", "USD per GPU-hour"), ("usd_per_gpu_hour", "USD per GPU-hour"),
    ("_per_million_total_tokens", "USD per million tokens"),
    ("_per_million_output_tokens", "USD per million tokens"),
    ("_per_million_tokens", "USD per million tokens"), ("_usd_per_mtok", "USD per million tokens"),
    ("usd_per_mtok_total", "USD per million tokens"),
    ("usd_per_mtok_output", "USD per million tokens"),
    ("tokens_per_s_per_gpu", "tokens/s per GPU"), ("tput_per_gpu", "tokens/s per GPU"),
    ("tokens_per_usd", "tokens per USD"), ("_tok_s_user", "tokens/s per user"),
    ("_intvty", "tokens/s per user"), ("interactivity", "tokens/s per user"),
    ("_bytes_per_token", "bytes per token"), ("_bytes", "bytes"), ("_gbps", "GB/s"),
    ("_tokens", "tokens"), ("_blocks", "blocks"), ("_pages", "pages"), ("_s", "seconds"),
    ("_ratio", "fraction"), ("_rate", "fraction"), ("_share", "fraction"),
    ("_fraction", "fraction"), ("_w", "watts"),
)
#: InferenceX latencies carry no suffix (their names are InferenceX's): seconds.
SECONDS = {"median_tpot", "median_ttft", "p90_ttft", "p99_ttft", "median_e2el", "p90_e2el",
           "median_itl"}


#: Meanings of the columns many tables share, where the schema has no comment beside them.
COMMON = {
    "run_id": "the run's key: a fingerprint of its normalised config",
    "trace": "name of the request, selection or lookup trace",
    "request_id": "0-based position of the request in its trace file",
    "hardware": "accelerator spec name (toolkit hardware list)",
    "model": "model spec name (toolkit models list)",
    "policy": "cache eviction policy",
    "config_json": "the run's full config as canonical JSON",
    "toolkit_version": "toolkit version that wrote the row",
    "elapsed_s": "wall time of the run",
    "requests": "requests in the run",
    "prompt_tokens": "prompt (input) tokens",
    "output_tokens": "output tokens",
}


def unit_of(column: str) -> str:
    if column in SECONDS:
        return "seconds"
    for end, unit in UNITS:
        if column.endswith(end):
            return unit
    return ""


def schema_notes() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(table doc by schema constant, {schema constant: {column: comment}}) from the source
    of :mod:`toolkit.schema`."""
    table_doc: dict[str, str] = {}
    columns: dict[str, dict[str, str]] = {}
    doc: list[str] = []
    current: str | None = None
    for line in inspect.getsource(schema).splitlines():
        s = line.strip()
        if m := _TABLE_DOC.match(s):
            doc.append(m.group(1))
            continue
        if m := _ASSIGN.match(s):
            current = m.group(1)
            table_doc[current] = " ".join(doc)
            columns[current] = {}
        doc = [] if not s.startswith("#") else doc
        if current and (m := _FIELD.search(s)):
            columns[current][m.group(1)] = m.group(2).strip()
        if s in ("])", ")"):
            current = None
    return table_doc, columns


def _constant_of(table: str) -> str | None:
    target = schema.TABLES[table]
    for name, value in vars(schema).items():
        if name.isupper() and value is target:
            return name
    return None


def _type(t: pa.DataType) -> str:
    return str(t).replace("element: ", "")


def readme(store: Store, rows: dict[str, int]) -> str:
    """The README.md of an export: one section per table with its columns."""
    table_doc, columns = schema_notes()
    out = [
        "# Trace store export",
        "",
        f"Every table of the store `{store.root}` as one Parquet file, written by toolkit "
        f"{__version__} (`toolkit export store`). Read them with DuckDB, e.g. "
        "`SELECT * FROM 'requests.parquet' LIMIT 5`, or join them as the toolkit's named "
        "queries do (docs/sql.md). Runs are keyed by `run_id`, traces by `trace`.",
        "Units follow the column names (`_s` seconds, `_bytes` bytes, `_tokens` tokens, "
        "`_gbps` GB/s); `measured_points` keeps InferenceX's names and units (latencies in "
        "seconds, throughputs in tokens/s per GPU, interactivity = 1000 / TPOT_ms).",
        "",
        "| table | rows | file |",
        "| --- | --- | --- |",
        *(f"| `{t}` | {n:,} | `{t}.parquet` |" for t, n in rows.items()),
    ]
    for t, n in rows.items():
        const = _constant_of(t)
        notes = columns.get(const or "", {})
        out += ["", f"## {t}", ""]
        if table_doc.get(const or ""):
            out += [table_doc[const], ""]
        out += [f"{n:,} rows.", "", "| column | type | nullable | unit | meaning |",
                "| --- | --- | --- | --- | --- |"]
        for f in schema.TABLES[t]:
            meaning = notes.get(f.name, COMMON.get(f.name, "")).replace("|", "\\|")
            out.append(f"| `{f.name}` | {_type(f.type)} | {'yes' if f.nullable else 'no'} | "
                       f"{unit_of(f.name)} | {meaning} |")
    return "\n".join(out) + "\n"


def _exported(name: str) -> bool:
    """A file an export writes (``<table>.parquet``, ``README.md``)."""
    return name == "README.md" or (name.endswith(".parquet") and not name.startswith("."))


def export_store(store: Store, out: str | Path, *, replace: bool = False,
                 progress: Any = None) -> dict[str, Any]:
    """Write every table of ``store`` to ``out/<table>.parquet`` plus ``out/README.md``.

    The files are written into a temporary directory beside ``out`` and moved into place
    at the end, so a failed export leaves nothing half-written.

    ``out``'s parent must exist. ``replace`` replaces an earlier export only: a directory
    holding anything else, a store, or a directory inside or above ``store`` is refused
    (:mod:`toolkit.store.guard`).

    Raises:
        ToolkitError: ``out`` exists and is not an empty directory (unless ``replace``),
            or the path guard refuses it.
    """
    from toolkit.store.guard import check_replace_dir, check_write_path

    out = Path(out)
    check_write_path(out, "--out", store=store.root)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not replace)):
        raise ToolkitError(f"{out}: exists" + (" and is not a directory" if not out.is_dir()
                                               else " and is not empty; pass --replace"))
    if out.exists():  # replace only an earlier export, never a store or someone's files
        check_replace_dir(out, "--out", store=store.root, allowed=_exported)
    if not out.parent.is_dir():
        raise ToolkitError(f"--out {out}: directory {out.parent} does not exist")
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    rows: dict[str, int] = {}
    try:
        for t in sorted(schema.TABLES):
            target = schema.TABLES[t]
            sql = f'SELECT * FROM "{t}"'  # a table name of toolkit.schema, not user input
            reader = store.con.sql(sql).to_arrow_reader(BATCH_ROWS)
            n = 0
            with pq.ParquetWriter(tmp / f"{t}.parquet", target) as w:
                for batch in reader:
                    tbl = schema.conform(pa.Table.from_batches([batch]), target)
                    w.write_table(tbl)
                    n += tbl.num_rows
            rows[t] = n
            if progress is not None:
                progress(t, n)
        (tmp / "README.md").write_text(readme(store, rows))
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp's 0700 is for the temporary name only
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {"path": str(out), "tables": len(rows), "rows": sum(rows.values()),
            "rows_per_table": rows}
