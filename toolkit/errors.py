"""Errors a user can act on: each names the input, the place in it and the field."""

from __future__ import annotations

from pathlib import Path


class ToolkitError(Exception):
    """Base class for errors the CLI prints without a traceback."""


class TraceFormatError(ToolkitError):
    """A trace file holds a record the toolkit refuses to ingest.

    Args:
        path: the file being read.
        line: 1-based line (text formats) or row (tabular formats); None if file-level.
        field: the offending field, or None when the whole record is bad.
        message: what is wrong and, where possible, how to fix it.
        unit: "line" or "row", as the user would count it.
    """

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        field: str | None,
        message: str,
        unit: str = "line",
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = self.path if line is None else f"{self.path}:{line} ({unit} {line})"
        what = f" field {field!r}:" if field else ""
        super().__init__(f"{where}:{what} {message}")


class StoreError(ToolkitError):
    """A store operation was refused (name taken, unknown trace, bad name)."""
