"""One output convention for every command: ``--format``, ``--json`` (its alias) and
``--output FILE``.

A command builds an :class:`Output` from its options *before* doing any work (so a bad
``--output`` name fails in a second, not after a long replay) and hands its result to
:meth:`Output.emit`: one record (a run summary, a dict) or rows (a list of dicts or a
Polars frame). ``table`` is for people (aligned ``key  value`` lines for a record; rows
through :func:`render_table`, the one table look of every command: separators, units in
headers, headers wrapped at word boundaries, panels of columns when wider than the
terminal, long results cut with a note); ``markdown``, ``csv`` and ``json`` are for
pasting and for programs. ``--output`` writes the rows to a file whose type follows its
extension, atomically.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit.commands.common import fail
from toolkit.tables import (  # noqa: F401  (re-exported: the renderer's home is toolkit.tables)
    CELL_CHARS,
    format_record,
    format_table,
    render_table,
    terminal_columns,
    value_text,
)

FORMATS = ("table", "markdown", "csv", "json")
FILE_TYPES = (".csv", ".json", ".parquet")
TABLE_ROWS = 100  # rows a table/markdown listing shows before it stops with a note

#: What ``replay prefix`` shows per capacity when it replays several: one row each.
PREFIX_TABLE = ("policy", "capacity_blocks", "capacity_tokens", "capacity_gb", "model",
                "token_hit_ratio", "block_hit_ratio", "prefix_token_hit_ratio", "evictions",
                "elapsed_s")

FormatOpt = Annotated[str | None, typer.Option(
    "--format", help=f"Output format: {', '.join(FORMATS)} (default table).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]
OutputOpt = Annotated[Path | None, typer.Option(
    "--output", help="Write the result rows to FILE instead of printing them; the type "
    "follows the extension: .csv, .json (a list of row objects) or .parquet.")]

Rows = dict[str, Any] | list[dict[str, Any]] | Any  # a record, rows, or a polars.DataFrame


@dataclass(frozen=True)
class Output:
    """Where and how a command prints its result.

    Attributes:
        fmt: one of :data:`FORMATS`.
        path: file to write instead of printing, or ``None``.
    """

    fmt: str = "table"
    path: Path | None = None

    @classmethod
    def from_options(cls, fmt: str | None, as_json: bool = False,
                     output: Path | None = None) -> Output:
        """Check the options; exit 2 with one line if they are unusable."""
        if as_json and fmt not in (None, "json"):
            fail(f"--json means --format json; it cannot be combined with --format {fmt}")
        fmt = "json" if as_json else (fmt or "table")
        if fmt not in FORMATS:
            fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if output is not None:
            check_output_file(output, "--output", FILE_TYPES)
        return cls(fmt, output)

    @property
    def quiet(self) -> bool:
        """No progress bars: the output is for a program."""
        return self.fmt == "json"

    def emit(self, data: Rows, table_columns: Sequence[str] | None = None,
             limit: int | None = TABLE_ROWS, hint: str | None = None,
             title: str | None = None) -> None:
        """Print ``data`` in this format, or write it to :attr:`path`.

        Args:
            data: a record (dict), rows (list of dicts) or a Polars frame.
            table_columns: the columns the ``table`` view shows, in order (those ``data``
                lacks are skipped); the other formats and files keep every column.
            limit: rows a ``table``/``markdown`` listing shows (``None`` or 0: all); CSV,
                JSON and files keep every row.
            hint: how to see the rest, in the note under a cut listing.
            title: a line above a ``table`` (not in the other formats).
        """
        from toolkit.commands.fetched import Fetched

        record = isinstance(data, dict)
        if record and self.path is None and self.fmt in ("json", "table"):
            # one record printed as it is: no frame, so no Polars import (~0.3 s)
            if self.fmt == "json":
                typer.echo(json.dumps(data, default=str))
            else:
                keep = list(data) if table_columns is None else [
                    c for c in table_columns if c in data]
                typer.echo(format_record({k: data[k] for k in keep}))
            return
        frame = isinstance(data, Fetched)  # DuckDB's rows (table and JSON): no Polars
        if not frame:
            import polars as pl

            frame = isinstance(data, pl.DataFrame)
        if frame:
            df = data
        else:
            data = data if record else list(data)
            df = pl.from_dicts([data] if record else data, infer_schema_length=None,
                               strict=False)  # mixed values (a spec's) become strings
        if self.path is not None:
            write_file(df, self.path)
            typer.echo(f"wrote {df.height:,} row(s) to {self.path}", err=True)
            return
        if self.fmt == "json":
            payload = df.to_dicts() if frame else data
            typer.echo(json.dumps(payload, default=str))
        elif self.fmt == "csv":
            _check_flat(df, "CSV")
            sys.stdout.write(df.write_csv())
        elif self.fmt == "markdown":
            typer.echo(_markdown(_record_frame(data) if record else df, limit, hint))
        else:
            if table_columns is not None:
                keep = [c for c in table_columns if c in df.columns]
                df, data = df.select(keep), {k: data[k] for k in keep} if record else data
            if title:
                typer.echo(title)
            typer.echo(format_record(data) if record else _table(df, limit, hint))


def check_output_file(path: Path, option: str, suffixes: tuple[str, ...]) -> None:
    """Refuse, before any work, a file a command could not write: wrong extension, a
    directory, a missing parent directory, or a path inside a store (one line, exit 2;
    :mod:`toolkit.store.guard`)."""
    if path.suffix.lower() not in suffixes:
        fail(f"{option} {path}: the extension must be one of {', '.join(suffixes)}, "
             f"got {path.suffix or 'none'!r}")
    if path.is_dir():
        fail(f"{option} {path}: is a directory; give a file name")
    if not path.parent.is_dir():
        fail(f"{option} {path}: directory {path.parent} does not exist")
    from toolkit.store.guard import UnsafePath, check_write_path

    try:
        check_write_path(path, option)
    except UnsafePath as e:
        fail(str(e))


def _check_flat(df: Any, what: str) -> None:
    nested = [c for c, t in df.schema.items() if t.is_nested()]
    if nested:
        fail(f"column(s) {', '.join(nested)} are nested (lists or structs), which {what} "
             "cannot hold; use --format json or table, or select scalar columns")


def write_file(df: Any, path: Path) -> None:
    """Write ``df`` to ``path`` (type by extension) through a temporary file in the same
    directory, so an interrupted write never leaves a half-written file under the name."""
    suffix = path.suffix.lower()
    if suffix == ".csv":
        _check_flat(df, "CSV")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        if suffix == ".csv":
            df.write_csv(tmp)
        elif suffix == ".json":
            Path(tmp).write_text(json.dumps(df.to_dicts(), default=str) + "\n")
        else:
            df.write_parquet(tmp)
        os.replace(tmp, path)
    except OSError as e:
        fail(f"--output {path}: {e.strerror or e}")
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _record_frame(row: dict[str, Any]) -> Any:
    import polars as pl

    shown = {k: v for k, v in row.items() if k != "config_json"}
    return pl.DataFrame({"field": list(shown),
                         "value": [f"{v:.6f}" if isinstance(v, float) else str(v)
                                   for v in shown.values()]})


def _head(df: Any, limit: int | None = TABLE_ROWS, hint: str | None = None
          ) -> tuple[Any, str | None]:
    """The first ``limit`` rows and the note that says how many more there are."""
    if limit is None or limit <= 0 or df.height <= limit:
        return df, None
    n = df.height - limit
    return df.head(limit), (f"... {n:,} more row(s) not shown; use --output FILE, --format "
                            "csv/json, or LIMIT" if hint is None else f"{n:,} more rows ({hint})")


def _markdown(df: Any, limit: int | None = TABLE_ROWS, hint: str | None = None) -> str:
    import polars as pl

    df, cut = _head(df, limit, hint)
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True,
                   tbl_hide_dataframe_shape=True, tbl_rows=-1, tbl_cols=-1,
                   tbl_width_chars=30_000, fmt_str_lengths=30_000):
        text = str(df)
    return text + (f"\n\n{cut}" if cut else "")


def _table(df: Any, limit: int | None = TABLE_ROWS, hint: str | None = None) -> str:
    """The rows as :func:`render_table` shows them, cut at ``limit`` rows with a note."""
    if df.width == 0:
        return "(no columns)"
    df, cut = _head(df, limit, hint)
    return render_table(df) + (f"\n{cut}" if cut else "")
