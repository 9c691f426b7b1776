"""Hints that name the flags which would make a near-miss file load.

A refusal that only says "use the other reader" sends a user in a circle when the other
reader refuses the file too (a Mooncake-shaped file with 16-token blocks and second
timestamps is neither Mooncake's default geometry nor Bailian's keys). These helpers look
at the record that was refused and spell out the command that reads it: the built-in
reader with ``--block-tokens`` / ``--time-unit``, or ``toolkit ingest table`` with
``--partial-block unhashed`` (hash lists of full blocks only, as vLLM hashes them) or
``--hash-encoding hex`` (hex-string ids).
"""

from __future__ import annotations

from pathlib import Path

from toolkit.errors import TraceFormatError
from toolkit.ingest.fields import as_hash_list
from toolkit.ingest.sniff import hint, looks_like, require_fields

BLOCK_SIZES = (16, 32, 64, 128, 256, 512, 1024)
MOONCAKE_COLUMNS = ("timestamp", "input_length", "output_length", "hash_ids")


def _fractional(ts: object) -> bool:
    return isinstance(ts, float) and not ts.is_integer()


def _is_hex(value: object) -> bool:
    if not isinstance(value, str) or not value.strip():
        return False
    text = value.strip().removeprefix("0x").removeprefix("0X")
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def table_command(path: object, rec: dict, *, block_tokens: int, partial: str | None = None,
                  hex_ids: bool = False) -> str:
    """The ``toolkit ingest table`` command for a Mooncake-shaped JSONL record."""
    unit = "s" if _fractional(rec.get("timestamp")) else "ms"
    flags = [f"toolkit ingest table {path} --format jsonl --time-col timestamp",
             f"--time-unit {unit}", "--input-tokens-col input_length",
             "--output-tokens-col output_length", "--hash-col hash_ids",
             f"--block-tokens {block_tokens}"]
    if hex_ids:
        flags.append("--hash-encoding hex")
    if partial:
        flags.append(f"--partial-block {partial}")
    return "`" + " ".join(flags) + "`"


def mooncake_geometry(path: object, rec: dict, n_ids: int, tokens: int, block_tokens: int,
                      time_unit: str) -> str:
    """Why a Mooncake-shaped row's id count does not fit, and the flags that read it."""
    other = looks_like(rec, not_="mooncake")
    if other:
        return hint(other)
    seconds = time_unit == "ms" and _fractional(rec.get("timestamp"))
    unit_flag = " --time-unit s" if seconds else ""
    for bt in BLOCK_SIZES:
        if bt != block_tokens and tokens and n_ids == -(-tokens // bt):
            why = f"; the ids fit {bt}-token blocks"
            if seconds:
                why += " and the timestamps have fractions of a unit (seconds?)"
            return f"{why}: pass `--block-tokens {bt}{unit_flag}`"
    for bt in (block_tokens, *BLOCK_SIZES):
        if tokens and n_ids == tokens // bt != -(-tokens // bt):
            return (f"; the ids cover only the full {bt}-token blocks (floor(input_length / "
                    f"{bt}), as vLLM hashes them): read it with "
                    + table_command(path, rec, block_tokens=bt, partial="unhashed"))
    return ""


def mooncake_hash_list(rec: dict, path: Path, line: int, block_tokens: int) -> list[int]:
    """``as_hash_list`` of ``hash_ids``, naming ``--hash-encoding hex`` for hex strings."""
    value = rec["hash_ids"]
    try:
        return as_hash_list(value, path, line, "hash_ids")
    except TraceFormatError as e:
        if isinstance(value, list) and value and all(_is_hex(h) for h in value):
            raise TraceFormatError(
                path, line, e.field, e.message + "; the ids are hexadecimal strings: read "
                "them with " + table_command(path, rec, block_tokens=block_tokens,
                                             hex_ids=True)) from None
        raise


def bailian_fields(rec: dict, fields: tuple[str, ...], path: Path, line: int,
                   extra: set[str]) -> None:
    """``require_fields`` for Bailian; a Mooncake-shaped record gets the full mooncake
    command (block size and time unit) instead of a bare "use mooncake"."""
    try:
        require_fields(rec, fields, path, line, "bailian", extra)
    except TraceFormatError as e:
        if looks_like(rec, not_="bailian") != "mooncake":
            raise
        raise TraceFormatError(path, line, e.field, "missing" + mooncake_command(path, rec)) \
            from None


def mooncake_command(path: object, rec: dict) -> str:
    """``; this looks like the mooncake format: use `toolkit ingest mooncake ...``` with the
    block size the ids fit and the time unit the timestamps suggest."""
    ids, tokens = rec.get("hash_ids"), rec.get("input_length")
    flags = ""
    if isinstance(ids, list) and isinstance(tokens, int) and not isinstance(tokens, bool) \
            and tokens > 0:
        if ids and all(_is_hex(h) and not isinstance(h, int) for h in ids):
            bt = next((b for b in BLOCK_SIZES if len(ids) in (-(-tokens // b), tokens // b)),
                      512)
            return ("; this looks like the mooncake format with hexadecimal ids: use "
                    + table_command(path, rec, block_tokens=bt, hex_ids=True,
                                    partial=None if len(ids) == -(-tokens // bt)
                                    else "unhashed"))
        fit = next((b for b in BLOCK_SIZES if len(ids) == -(-tokens // b)), None)
        if fit is None:
            floor = next((b for b in BLOCK_SIZES if len(ids) == tokens // b), None)
            if floor is not None:
                return ("; this looks like the mooncake format with ids of full blocks only: "
                        "use " + table_command(path, rec, block_tokens=floor,
                                               partial="unhashed"))
        elif fit != 512:
            flags += f" --block-tokens {fit}"
    if _fractional(rec.get("timestamp")):
        flags += " --time-unit s"
    return f"; this looks like the mooncake format: use `toolkit ingest mooncake {path}{flags}`"
