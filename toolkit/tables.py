"""What people read: the one table renderer of every command, the demo and the notebooks.

Numbers with thousands separators and a fixed number of significant digits, units read off
column names (``*_bytes``, ``*_s``, ``*_gb``, ``usd_per_*``, ``tput_per_gpu``) and put in
the headers, no dtype rows, headers wrapped at word boundaries, long text last, and a
table wider than the terminal split into panels of columns. Layout by rich. Programs get
the raw values and names instead (``--format json/csv``, ``--output``).

This module sits at the bottom of the layers (beside :mod:`toolkit.schema`) so the CLI's
commands, the demo and notebooks print through the same code; rich and Polars are
imported only when a table is drawn.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

CELL_CHARS = 80  # longest value shown in a grid or a record


def terminal_columns() -> int | None:
    """Width to fit tables into: ``$COLUMNS`` when set, else the terminal's; ``None``
    (no limit) when stdout is not a terminal and ``COLUMNS`` is unset, so a piped table
    keeps every row on one line for ``grep`` and ``cut``."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((120, 24)).columns
    return None


# --- what people read: numbers with separators and units, never a dtype row -------------

#: Scales for columns named ``*_bytes`` (GB = 1e9 B, as every size in the toolkit) and
#: ``*_s`` (seconds), largest first; a column takes the largest unit its biggest value
#: reaches, so one column reads in one unit.
BYTE_UNITS = (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3), ("B/s", 1.0))

#: Fixed units read off a column's name: (suffix, unit). The name keeps its words; the
#: unit goes in brackets after it, as for the scaled units above.
_SUFFIX_UNITS = (("_gb", "GB"), ("_tb", "TB"), ("_gib", "GiB"), ("_mib", "MiB"),
                 ("_gbps", "GB/s"), ("_tflops", "TFLOPS"), ("_w", "W"), ("_usd", "$"),
                 ("_pct", "%"), ("_us", "µs"), ("_ms", "ms"))
#: Throughputs whose unit people misread: a GPU's throughput counts prompt and output
#: tokens (InferenceX's tput_per_gpu), interactivity is output tokens per user.
_NAMED_UNITS = {"tput_per_gpu": "total tok/s", "tokens_per_s_per_gpu": "total tok/s",
                "output_tokens_per_s_per_gpu": "output tok/s",
                "output_tput_per_gpu": "output tok/s", "interactivity": "tok/s/user",
                "median_intvty": "tok/s/user"}


@dataclass(frozen=True)
class _Column:
    """How one column is shown: its header, the unit its numbers are divided into
    (``None``: as they are) and its alignment."""

    header: str
    unit: str | None = None
    scale: float = 1.0
    numeric: bool = False
    scaled: bool = False  # the unit was chosen by magnitude (bytes, seconds)


def _unit_of(name: str, values: list[Any]) -> tuple[str, str | None, float]:
    """(base name, unit, divisor) for a column whose name carries a scalable unit; a
    band's ends (``p90_ttft_s_low``) take the unit of their figure (``p90_ttft_low (s)``)."""
    for band in ("_low", "_high"):
        if name.endswith(band):
            base, unit, scale = _unit_of(name[: -len(band)], values)
            if unit is not None:
                return base + band, unit, scale
    nums = [abs(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)
            and v == v]
    if name.endswith("_bytes"):
        units, base = BYTE_UNITS, name[: -len("_bytes")]
    elif name.endswith("_bytes_per_s"):
        units, base = RATE_UNITS, name[: -len("_bytes_per_s")]
    elif "_bytes_per_s_" in name:  # host_mem_bandwidth_bytes_per_s_per_cpu
        units, base = RATE_UNITS, name.replace("_bytes_per_s", "")
    elif "_bytes_per_" in name:  # host_mem_bytes_per_gpu
        units, base = BYTE_UNITS, name.replace("_bytes_per_", "_per_")
    elif name.endswith("_s") and "_per_" not in name:
        units, base = TIME_UNITS, name[: -len("_s")]
    else:
        return name, None, 1.0
    top = max(nums, default=0.0)
    unit, scale = next(((u, s) for u, s in units if top >= s),
                       units[0] if top == 0 else units[-1])
    return base, unit, scale


def _fixed_unit(name: str) -> tuple[str, str | None]:
    """(header, unit) for names whose unit is fixed: ``usd_per_mtok_total`` ->
    ("$/Mtok_total", None), ``host_dram_gb`` -> ("host_dram", "GB"),
    ``tput_per_gpu`` -> ("tput_per_gpu", "total tok/s")."""
    if name in _NAMED_UNITS:
        return name, _NAMED_UNITS[name]
    for key in ("tput_per_gpu", "tokens_per_s_per_gpu"):  # _low / _high bands too
        if name.startswith(key + "_") and name.endswith(("_low", "_high")):
            return name, _NAMED_UNITS[key]
    if "usd_per_" in name:  # the $ in the name itself: usd_per_mtok_total -> $/Mtok_total
        return (name.replace("usd_per_mtok", "$/Mtok").replace("usd_per_million_", "$/M_")
                .replace("usd_per_", "$/")), None
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], unit
    return name, None


def _is_ratio(name: str) -> bool:
    return name.endswith(("_ratio", "_share", "_fraction", "_over_a", "_err")) or \
        "_ratio_" in name or "_share_" in name


def _number(v: float, integral: bool) -> str:
    """Integers (and integral floats) with thousands separators; other numbers to four
    significant digits, kept (0.1700, not 0.17), or whole with separators from 1,000 up."""
    if integral or abs(v) >= 1000:
        return f"{v:,.0f}"
    if v == 0:
        return "0"
    s = f"{v:#.4g}"
    return s[:-1] if s.endswith(".") else s


_NUMERIC_TEXT = None  # compiled on first use (re is cheap, but keep import-time minimal)


def _as_number(s: str) -> float | int | None:
    """The number a text cell spells (``'1000.0'``, ``'0.0445'``), else ``None``."""
    global _NUMERIC_TEXT
    if _NUMERIC_TEXT is None:
        import re

        _NUMERIC_TEXT = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
    if not _NUMERIC_TEXT.fullmatch(s):
        return None
    v = float(s)
    return int(v) if v.is_integer() and abs(v) < 1e15 else v


def _plain(v: Any) -> Any:
    """A DuckDB DECIMAL or HUGEINT (``sum()`` of integers: Polars' Decimal) as the int
    (no fractional digits: ``DECIMAL(38, 0)``) or float (``0.903``, ``6.000``) it is, so it
    gets separators and significant digits like any number."""
    if isinstance(v, Decimal):
        exponent = v.as_tuple().exponent
        whole = isinstance(exponent, int) and exponent >= 0 and abs(v) < 10**15
        return int(v) if whole else float(v)
    return v


def _cell(v: Any, col: _Column, integral: bool, limit: int | None = CELL_CHARS) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        if isinstance(v, float) and v != v:
            return "NaN"
        if col.scaled:
            x = v / col.scale  # three decimals below 10 of the unit, fewer above
            return f"{x:.3f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 1000 else f"{x:,.0f}"
        return _number(v, isinstance(v, int) or integral)
    if isinstance(v, list | dict | tuple):
        s = json.dumps(v, default=str)
    else:
        s = str(v)
    return s if limit is None or len(s) <= limit else s[: limit - 1] + "…"


def _columns(df: Any) -> list[tuple[_Column, bool]]:
    """Each column's display and whether its numbers are all whole (then shown as such)."""
    out = []
    scales: dict[str, tuple[str | None, float]] = {}
    for name, dtype in df.schema.items():
        values = [_plain(v) for v in df.get_column(name).to_list()]
        numeric = dtype.is_numeric()
        base, unit, scale = _unit_of(name, values) if numeric else (name, None, 1.0)
        scales[name] = (unit, scale)
        stem = name.removesuffix("_low").removesuffix("_high")
        if unit is not None and stem != name and scales.get(stem, (None,))[0] is not None:
            unit, scale = scales[stem]  # a band's ends read in their figure's unit
        scaled = unit is not None
        if numeric and unit is None:
            base, unit = _fixed_unit(name)
        header = f"{base} ({unit})" if unit else base
        integral = numeric and not _is_ratio(name) and all(
            v is None or (isinstance(v, int | float) and v == v and float(v).is_integer()
                          and abs(v) < 1e15) for v in values)
        out.append((_Column(header, unit, scale, numeric, scaled), integral))
    return out


def _text_cells(values: list[Any], col: _Column, limit: int | None = CELL_CHARS) -> list[str]:
    """A text column's cells; in a column that mixes words and numbers (``run_compare``'s
    ``a`` and ``b``), the numbers are shown as numbers are everywhere else."""
    cells = [_cell(v, col, False, limit) for v in values]
    nums = [_as_number(c) if isinstance(v, str) else None for c, v in zip(cells, values,
                                                                         strict=True)]
    if any(n is not None for n in nums) and any(
            n is None and isinstance(v, str) for n, v in zip(nums, values, strict=True)):
        cells = [c if n is None else _number(n, isinstance(n, int))
                 for c, n in zip(cells, nums, strict=True)]
    return cells


def _header_lines(header: str, width: int) -> list[str]:
    """``header`` wrapped at word boundaries (spaces, and after ``_``) into lines
    of at most ``width`` characters where it can be; a word is never split."""
    words, word = [], ""
    for ch in header:
        if ch == " ":
            if word:
                words.append(word)
            word = ""
            continue
        word += ch
        if ch == "_":
            words.append(word)
            word = ""
    if word:
        words.append(word)
    lines: list[str] = []
    for w in words:
        if lines and len(lines[-1]) + len(w) + (0 if lines[-1].endswith("_") else 1) <= width:
            sep = "" if lines[-1].endswith("_") else " "
            lines[-1] += sep + w
        else:
            lines.append(w)
    return lines or [""]


def _header_width(header: str, lines: int) -> int:
    """Narrowest width at which ``header`` wraps into at most ``lines`` lines."""
    w = max(len(x) for x in _header_lines(header, 1))
    while len(_header_lines(header, w)) > lines:
        w += 1
    return w


@dataclass
class _Grid:
    """The cells of a table, ready for laying out: headers, cells, alignment."""

    headers: list[str]
    cells: list[list[str]]  # per column
    numeric: list[bool]

    def natural(self, i: int) -> int:
        return max([len(self.headers[i]), *(len(c) for c in self.cells[i])])

    def floor(self, i: int) -> int:
        """Narrowest the column goes by wrapping its header (never its numbers)."""
        longest_word = max(len(w) for w in _header_lines(self.headers[i], 1))
        return max([longest_word, *(len(c) for c in self.cells[i])])


def _grid(df: Any, text_limit: int | None = CELL_CHARS) -> _Grid:
    cols = _columns(df)
    rows = list(df.iter_rows())
    cells = []
    for j, (c, integral) in enumerate(cols):
        values = [_plain(r[j]) for r in rows]
        cells.append([_cell(v, c, integral) for v in values] if c.numeric
                     else _text_cells(values, c, text_limit))
    return _Grid([c.header for c, _ in cols], cells, [c.numeric for c, _ in cols])


def _long_text_last(g: _Grid, long_chars: int = 30) -> list[int]:
    """Column order: the first column stays first (it names the row); text columns with
    values longer than ``long_chars`` go last, in their order."""
    n = len(g.headers)
    long = [i for i in range(1, n) if not g.numeric[i]
            and max((len(c) for c in g.cells[i]), default=0) > long_chars]
    return [i for i in range(n) if i not in long] + long


def _fit(g: _Grid, order: list[int], width: int | None) -> tuple[dict[int, int], list[list[int]]]:
    """Widths per column and the column panels that fit ``width``: headers wrap first,
    then long text is shortened (to 16 characters at least), then the columns are split
    into panels, each repeating the first column."""
    widths = {i: g.natural(i) for i in order}
    if width is None:
        return widths, [order]

    def total(cols: list[int]) -> int:
        return sum(widths[i] for i in cols) + 2 * (len(cols) - 1)

    if total(order) > width:  # wrap headers into as few lines as make the table fit
        for lines in (2, 3, 4):
            widths = {i: max(g.floor(i), _header_width(g.headers[i], lines),
                             *(len(c) for c in g.cells[i])) for i in order}
            if total(order) <= width:
                break
    texts = [i for i in order if not g.numeric[i]
             and (i != order[0] or widths[i] > width // 2)]  # the row's name stays whole
    for i in sorted(texts, key=lambda i: -widths[i]):
        if total(order) <= width:
            break
        least = max(16, max(len(w) for w in _header_lines(g.headers[i], 1)))
        widths[i] = min(widths[i], max(least, widths[i] - (total(order) - width)))
    if total(order) <= width or len(order) < 2:
        return widths, [order]
    key, rest = order[0], order[1:]
    panels: list[list[int]] = [[key]]
    for i in rest:
        if len(panels[-1]) > 1 and total([*panels[-1], i]) > width:
            panels.append([key])
        panels[-1].append(i)
    return widths, panels


def render_table(df: Any, width: int | None = -1, title: str | None = None,
                 wrap_text: bool = False) -> str:
    """Rows as a table for people, the one look of every command's text output.

    Whole numbers with thousands separators (integral floats too), other numbers to four
    significant digits, ``*_bytes`` in GB (or MB, TB), ``*_s`` in s, ms or µs, ``$`` and
    units in the headers (``usd_per_mtok_total ($/M tok)``, ``tput_per_gpu (total
    tok/s)``), no dtype row. Headers wrap at word boundaries (``_``, spaces), never
    mid-word; long text columns go last; a table wider than the terminal (or
    ``$COLUMNS``) is split into panels of columns, each repeating the first. Laid out by
    rich (box drawing, alignment); plain text when stdout is not a terminal.

    Args:
        df: a Polars frame (or :class:`~toolkit.commands.fetched.Fetched` rows).
        width: columns to fit; ``-1`` (default) = :func:`terminal_columns`, ``None`` = no
            limit.
        title: a line printed above the table.
        wrap_text: long text wraps at word boundaries over several lines (a source, a
            note) instead of being cut with an ellipsis.

    Returns:
        The table as text (no trailing newline).

    Example::

        from toolkit.commands.output import render_table
        typer.echo(render_table(df))            # or Output(...).emit(df)
    """
    if df.width == 0:
        return "(no columns)"
    width = terminal_columns() if width == -1 else width
    blocks = [title] if title else []
    g = _grid(df, None if wrap_text else CELL_CHARS)
    if width is not None and df.height > 1 and df.width > 2 and \
            sum(g.natural(i) + 2 for i in range(df.width)) > width:
        # values every row shares go above the grid, once, to make room
        same = [i for i in range(1, df.width) if len(set(g.cells[i])) == 1]
        if same and len(same) < df.width - 1:
            blocks.append(_wrap_pairs([f"{df.columns[i]}: {g.cells[i][0]}" for i in same],
                                      width))
            keep = [i for i in range(df.width) if i not in same]
            g = _Grid([g.headers[i] for i in keep], [g.cells[i] for i in keep],
                      [g.numeric[i] for i in keep])
    order = _long_text_last(g)
    widths, panels = _fit(g, order, width)
    if len(panels) > 1 and df.height == 1:  # one wide row reads best as field / value
        row = next(iter(df.iter_rows()))
        return "\n".join([*blocks, format_record(dict(zip(df.columns, row, strict=True)))])
    grids = [_rich_grid(g, panel, widths, df.height, wrap_text) for panel in panels]
    return "\n".join([*blocks, "\n\n".join(grids)])


def _wrap_pairs(pairs: list[str], width: int) -> str:
    lines = [""]
    for p in pairs:
        if lines[-1] and len(lines[-1]) + 2 + len(p) > width:
            lines.append("")
        lines[-1] += ("  " if lines[-1] else "") + p
    return "\n".join(lines)


def _rich_grid(g: _Grid, cols: list[int], widths: dict[int, int], height: int,
               wrap_text: bool = False) -> str:
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    tty = sys.stdout.isatty() and os.environ.get("NO_COLOR") is None
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  header_style="bold" if tty else "", collapse_padding=True)
    for i in cols:
        w = widths[i]
        head = "\n".join(_header_lines(g.headers[i], w))
        wrap = wrap_text and not g.numeric[i]
        table.add_column(Text(head), justify="right" if g.numeric[i] else "left",
                         width=w, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    for r in range(height):
        table.add_row(*(Text(g.cells[i][r]) for i in cols))
    buf = io.StringIO()
    total = sum(widths[i] for i in cols) + 3 * len(cols) + 2
    console = Console(file=buf, width=total, force_terminal=tty, color_system="standard"
                      if tty else None, highlight=False, emoji=False, markup=False,
                      legacy_windows=False, soft_wrap=False, force_jupyter=False)
    console.print(table)
    lines = [ln.rstrip() for ln in buf.getvalue().splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    return "\n".join(lines).rstrip("\n")


def format_table(df: Any) -> str:
    """:func:`render_table` with no width limit (every column in one grid)."""
    return render_table(df, width=None)


def format_record(row: dict[str, Any]) -> str:
    """One record (a run summary) as aligned ``key  value`` lines, numbers formatted as in
    :func:`render_table` with the unit after the value (``config_json`` left out: it is in
    ``--format json``)."""

    shown = {k: v for k, v in row.items() if k != "config_json"}
    width = max((len(k) for k in shown), default=0)
    lines = [f"{k:<{width}}  {value_text(k, v)}" for k, v in shown.items()]
    return "\n".join(lines)


def value_text(name: str, v: Any) -> str:
    """One value of column ``name`` on its own, with its unit."""
    v = _plain(v)
    if isinstance(v, int | float) and not isinstance(v, bool):
        _, unit, scale = _unit_of(name, [v])
        scaled = unit is not None
        if unit is None:
            _, unit = _fixed_unit(name)
        integral = not _is_ratio(name) and (
            isinstance(v, int) or (v == v and float(v).is_integer() and abs(v) < 1e15))
        return _cell(v, _Column(name, unit, scale, True, scaled), integral) + (f" {unit}" if unit
                                                                       else "")
    if isinstance(v, list | dict):
        v = json.dumps(v, default=str)
    return _cell(v, _Column(name), False)


def display_cells(df: Any) -> tuple[list[str], list[str], list[list[str]], list[bool]]:
    """(names, headers, cells per column, numeric per column) of ``df`` in display order
    (long text last), formatted as :func:`render_table` formats them: for other renderers
    of the same table (the HTML report, notebooks)."""
    g = _grid(df, None)
    order = _long_text_last(g)
    return ([df.columns[i] for i in order], [g.headers[i] for i in order],
            [g.cells[i] for i in order], [g.numeric[i] for i in order])


class Table:
    """A frame shown in a notebook as the commands print it: ``Table(df)`` as the last
    expression of a cell renders an HTML table (units and $ in the headers, separators,
    four significant digits, long text last, numbers right-aligned) and, as text, the
    terminal table; both are deterministic, so nbval compares them.

    Args:
        df: a Polars frame.
        limit: rows shown (the rest counted in a note).
        percent: columns holding shares (0.903) to show as percentages: the values times
            100, the header marked ``(%)`` (``gpu`` -> ``gpu (%)``, 90.30).
    """

    def __init__(self, df: Any, limit: int = 40, percent: tuple[str, ...] | list[str] = ()) -> None:
        if percent:
            import polars as pl

            missing = [c for c in percent if c not in df.columns]
            if missing:
                raise ValueError(f"Table: no column {missing[0]!r} to show as a percentage "
                                 f"(columns: {', '.join(df.columns)})")
            df = df.with_columns([pl.col(c) * 100 for c in percent]).rename(
                {c: f"{c}_pct" for c in percent})
        self.df = df
        self.limit = limit

    def _note(self) -> str:
        n = self.df.height - self.limit
        return f"{n:,} more rows" if n > 0 else ""

    def __repr__(self) -> str:
        note = self._note()
        return render_table(self.df.head(self.limit), width=None) + (f"\n{note}" if note
                                                                      else "")

    def _repr_html_(self) -> str:
        import html

        names, headers, cells, numeric = display_cells(self.df.head(self.limit))
        head = "".join(
            f"<th title='{html.escape(n)}' style='text-align:{'right' if num else 'left'}'>"
            f"{html.escape(h.replace('_', ' '))}</th>"
            for n, h, num in zip(names, headers, numeric, strict=True))
        rows = "".join(
            "<tr>" + "".join(
                f"<td style='text-align:{'right' if num else 'left'};white-space:nowrap'>"
                f"{html.escape(c[r])}</td>" for c, num in zip(cells, numeric, strict=True))
            + "</tr>" for r in range(min(self.limit, self.df.height)))
        note = self._note()
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
                + (f"<p>{note}</p>" if note else ""))
