"""Which known trace format a record or header looks like, for hints in refusals.

A reader that meets keys or columns it does not expect asks :func:`looks_like`; when the
record matches another built-in format the error says which reader fits instead of
leaving the user to guess.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from toolkit.errors import TraceFormatError

# Keys (JSON) or header columns (CSV) that identify each format; the first match wins,
# so the more specific signatures come first.
SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("agentic", frozenset({"id", "block_size", "hash_id_scope", "requests"})),
    ("bailian", frozenset({"chat_id", "parent_chat_id", "timestamp", "hash_ids"})),
    ("mooncake", frozenset({"timestamp", "input_length", "output_length", "hash_ids"})),
    ("dsa-jsonl", frozenset({"event", "selected_token_pos"})),
    ("burstgpt", frozenset({"Timestamp", "Model", "Request tokens", "Response tokens"})),
    ("azure", frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"})),
)

COMMANDS = {"dsa-jsonl": "`toolkit ingest selections --format dsa-jsonl`"}


def looks_like(keys: Iterable[str], *, not_: str) -> str | None:
    """The built-in format whose signature ``keys`` carry (other than ``not_``), or None."""
    have = {str(k).strip() for k in keys}
    for fmt, sig in SIGNATURES:
        if sig <= have:
            return None if fmt == not_ else fmt
    return None


def line_looks_like(text: str, *, not_: str) -> str | None:
    """The format a file's first line (a JSON object or a CSV header) belongs to."""
    text = text.strip().removeprefix("\ufeff")
    if text.startswith("{"):
        try:
            rec = json.loads(text)
        except ValueError:
            return None
        return looks_like(rec, not_=not_) if isinstance(rec, dict) else None
    return looks_like(text.split(","), not_=not_)


def hint(fmt: str | None) -> str:
    """`` (looks like ...: use ...)`` for an error message, or an empty string."""
    if fmt is None:
        return ""
    cmd = COMMANDS.get(fmt, f"`toolkit ingest {fmt}`")
    return f"; this looks like the {fmt} format: use {cmd}"


def extra_note(path: object, extra: Iterable[str], reads: Iterable[str], what: str) -> str:
    """The one ingest note listing ignored keys/columns."""
    shown = ", ".join(repr(k) for k in sorted(extra))
    return f"{path}: ignoring {what} {shown} (reads only {', '.join(reads)})"


def require_fields(rec: dict, fields: tuple[str, ...], path: object, line: int, fmt: str,
                   extra: set[str]) -> None:
    """Stop at the first missing field of a JSONL record (naming the reader a record of
    another format fits); collect keys outside ``fields`` into ``extra`` for one note."""
    for field in fields:
        if field not in rec:
            raise TraceFormatError(path, line, field,
                                   "missing" + hint(looks_like(rec, not_=fmt)))
    if len(rec) > len(fields):
        extra.update(k for k in rec if k not in fields)


def csv_header(path: object, rows: Iterator[list[str]], columns: tuple[str, ...],
               fmt: str) -> list[str]:
    """Read and check a CSV header: every column present, else one line naming the first
    missing one (and the reader the header looks like)."""
    header = next(rows, None)
    if header is None:
        raise TraceFormatError(path, None, None, "empty file")
    header = [h.strip() for h in header]
    for col in columns:
        if col not in header:
            raise TraceFormatError(path, 1, col, f"missing column; header is {header}"
                                   + hint(looks_like(header, not_=fmt)
                                        or line_looks_like(",".join(header), not_=fmt)))
    check_unique(path, header, 1)
    return header


def duplicate_column(header: list[str]) -> str | None:
    """The first column name that appears twice in ``header`` (blank names aside)."""
    seen: set[str] = set()
    for h in header:
        if h in seen and h:
            return h
        seen.add(h)
    return None


def check_unique(path: object, header: list[str], line: int | None) -> None:
    """Refuse a header naming a column twice: readers took the first one silently."""
    if (h := duplicate_column(header)) is not None:
        raise TraceFormatError(path, line, h, "column appears twice in the header; "
                               "which one holds the data is ambiguous")

