"""One output convention for every command: ``--format``, ``--json`` (its alias) and
``--output FILE``.

A command builds an :class:`Output` from its options *before* doing any work (so a bad
``--output`` name fails in a second, not after a long replay) and hands its result to
:meth:`Output.emit`: one record (a run summary, a dict) or rows (a list of dicts or a
Polars frame). ``table`` is for people (aligned ``key  value`` lines for a record; a grid
for rows, shown one record per block when too wide for the terminal, long results cut with
a note); ``markdown``, ``csv`` and ``json`` are for pasting and for programs. ``--output``
writes the rows to a file whose type follows its extension, atomically.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit.commands.common import fail

FORMATS = ("table", "markdown", "csv", "json")
FILE_TYPES = (".csv", ".json", ".parquet")
TABLE_ROWS = 100  # rows a table/markdown listing shows before it stops with a note
CELL_CHARS = 80  # longest value shown in a grid or a record

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

    def emit(self, data: Rows, table_columns: Sequence[str] | None = None) -> None:
        """Print ``data`` in this format, or write it to :attr:`path`.

        Args:
            data: a record (dict), rows (list of dicts) or a Polars frame.
            table_columns: the columns the ``table`` view shows, in order (those ``data``
                lacks are skipped); the other formats and files keep every column.
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
            typer.echo(_markdown(_record_frame(data) if record else df))
        else:
            if table_columns is not None:
                keep = [c for c in table_columns if c in df.columns]
                df, data = df.select(keep), {k: data[k] for k in keep} if record else data
            typer.echo(format_record(data) if record else _table(df))


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


def _head(df: Any) -> tuple[Any, str | None]:
    if df.height <= TABLE_ROWS:
        return df, None
    return df.head(TABLE_ROWS), (f"... {df.height - TABLE_ROWS:,} more row(s) not shown; "
                                 "use --output FILE, --format csv/json, or LIMIT")


def _markdown(df: Any) -> str:
    import polars as pl

    df, cut = _head(df)
    with pl.Config(tbl_formatting="MARKDOWN", tbl_hide_column_data_types=True,
                   tbl_hide_dataframe_shape=True, tbl_rows=-1, tbl_cols=-1,
                   tbl_width_chars=30_000, fmt_str_lengths=30_000):
        text = str(df)
    return text + (f"\n\n{cut}" if cut else "")


def terminal_columns() -> int:
    """Width to fit tables into: the terminal's, ``$COLUMNS``, or 120 when piped."""
    return shutil.get_terminal_size((120, 24)).columns


def _table(df: Any) -> str:
    """A grid if it fits the terminal, else one block per row (``psql``'s expanded view)."""
    if df.width == 0:
        return "(no columns)"
    df, cut = _head(df)
    text = format_table(df)
    cols = terminal_columns()
    if df.width > 1 and _widest(text) > cols:
        # values every row shares go above the grid, once, to make room
        same = [c for c in df.columns if df.height > 1 and df.get_column(c).n_unique() == 1
                and not df.schema[c].is_nested()]
        if same and len(same) < df.width:
            note = "  ".join(f"{c}: {_value_text(c, df.get_column(c)[0])}" for c in same)
            text = f"{note}\n{format_table(df.drop(same))}"
        if _widest(text) > cols:
            text = _vertical(df, cols)
    return text + (f"\n{cut}" if cut else "")


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _vertical(df: Any, cols: int) -> str:
    width = max(len(c) for c in df.columns)
    room = max(cols - width - 3, 20)
    shown = _columns(df)
    lines, cut = [], 0
    for i, row in enumerate(df.iter_rows(), 1):
        lines.append(f"-[ row {i} ]".ljust(min(cols, width + 3 + 20), "-"))
        for k, v, (col, integral) in zip(df.columns, row, shown, strict=True):
            s = _cell(v, col, integral, None)
            if col.unit and v is not None:
                s += f" {col.unit}"
            if len(s) > room:
                s, cut = s[: room - 1] + "…", cut + 1
            lines.append(f"{k:<{width}} | {s}")
    if cut:
        lines.append(f"({cut} long value(s) cut at {room} characters; --format json or "
                     "--output FILE shows them whole)")
    return "\n".join(lines)


# --- what people read: numbers with separators and units, never a dtype row -------------

#: Scales for columns named ``*_bytes`` (GB = 1e9 B, as every size in the toolkit) and
#: ``*_s`` (seconds), largest first; a column takes the largest unit its biggest value
#: reaches, so one column reads in one unit.
BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


@dataclass(frozen=True)
class _Column:
    """How one column is shown: its header, the unit its numbers are divided into
    (``None``: as they are) and its alignment."""

    header: str
    unit: str | None = None
    scale: float = 1.0
    numeric: bool = False


def _unit_of(name: str, values: list[Any]) -> tuple[str, str | None, float]:
    """(base name, unit, divisor) for a column whose name carries a scalable unit."""
    nums = [abs(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and v == v]
    if name.endswith("_bytes"):
        units, base = BYTE_UNITS, name[: -len("_bytes")]
    elif name.endswith("_s") and "_per_" not in name:
        units, base = TIME_UNITS, name[: -len("_s")]
    else:
        return name, None, 1.0
    top = max(nums, default=0.0)
    unit, scale = next(((u, s) for u, s in units if top >= s),
                       units[0] if top == 0 else units[-1])
    return base, unit, scale


def _number(v: float, integral: bool) -> str:
    """Integers (and integral floats) with thousands separators; other numbers with four
    significant digits, or whole with separators from 1,000 up."""
    if integral or abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def _cell(v: Any, col: _Column, integral: bool, limit: int | None = CELL_CHARS) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if isinstance(v, float) and v != v:
            return "NaN"
        if col.unit is not None:  # three decimals below 10 of the unit, fewer above
            x = v / col.scale
            return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 1000 else f"{x:,.0f}"
        return _number(v, isinstance(v, int) or integral)
    s = str(v)
    return s if limit is None or len(s) <= limit else s[: limit - 1] + "…"


def _columns(df: Any) -> list[tuple[_Column, bool]]:
    """Each column's display and whether its numbers are all whole (then shown as such)."""
    out = []
    for name, dtype in df.schema.items():
        values = df.get_column(name).to_list()
        numeric = dtype.is_numeric()
        base, unit, scale = _unit_of(name, values) if numeric else (name, None, 1.0)
        header = f"{base} ({unit})" if unit else name
        integral = numeric and all(
            v is None or (isinstance(v, int | float) and v == v and float(v).is_integer()
                          and abs(v) < 1e15) for v in values)
        out.append((_Column(header, unit, scale, numeric), integral))
    return out


def format_table(df: Any) -> str:
    """A Polars frame as text for people: whole numbers with thousands separators, other
    numbers to four significant digits, ``*_bytes`` columns in GB (or MB, TB) and ``*_s``
    columns in s, ms or µs with the unit in the header, numbers right-aligned, no dtype
    row; headers never wrap. This is the one table look of every command; ``--format
    json``/``csv`` keep the raw values and names.

    Args:
        df: the rows (any width; see :func:`format_rows` for fitting a terminal).

    Returns:
        The table, one line per row under a header and a rule.
    """
    if df.width == 0:
        return "(no columns)"
    cols = _columns(df)
    cells = [[_cell(v, c, integral) for v, (c, integral) in zip(row, cols, strict=True)]
             for row in df.iter_rows()]
    widths = [max([len(c.header), *(len(r[i]) for r in cells)]) for i, (c, _) in
              enumerate(cols)]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if c.numeric else v.ljust(w)
                         for v, w, (c, _) in zip(values, widths, cols, strict=True)).rstrip()

    head = [c.header for c, _ in cols]
    return "\n".join([line(head), "  ".join("─" * w for w in widths),
                      *(line(r) for r in cells)])


def format_record(row: dict[str, Any]) -> str:
    """One record (a run summary) as aligned ``key  value`` lines, numbers formatted as in
    :func:`format_table` with the unit after a scaled value (``config_json`` left out: it
    is in ``--format json``)."""

    shown = {k: v for k, v in row.items() if k != "config_json"}
    width = max((len(k) for k in shown), default=0)
    lines = [f"{k:<{width}}  {_value_text(k, v)}" for k, v in shown.items()]
    return "\n".join(lines)


def _value_text(name: str, v: Any) -> str:
    """One value of column ``name`` on its own, with its unit when scaled."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        _, unit, scale = _unit_of(name, [v])
        integral = isinstance(v, int) or (v == v and float(v).is_integer() and abs(v) < 1e15)
        return _cell(v, _Column(name, unit, scale, True), integral) + (f" {unit}" if unit
                                                                       else "")
    if isinstance(v, list | dict):
        v = json.dumps(v, default=str)
    return _cell(v, _Column(name), False)
