"""Mooncake FAST'25 request traces (JSONL).

One JSON object per line: ``timestamp`` (ms since trace start), ``input_length``,
``output_length`` and ``hash_ids``, the chained prefix-block ids of 512-token blocks
(a block id identifies the block *and* everything before it).

The reader is strict about the block geometry: every row must carry exactly
``ceil(input_length / block_tokens)`` ids (true on all 12,031 rows of the bundled real
trace). A file that breaks it is another format or another block size, and ingesting it
anyway would silently store wrong blocks; ``block_tokens`` and ``time_unit`` cover
variants of the format.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.fields import (
    MonotonicClock,
    as_count,
    as_time,
    jsonl_objects,
    requests_table,
)
from toolkit.ingest.hints import mooncake_geometry, mooncake_hash_list
from toolkit.ingest.sniff import extra_note, looks_like, require_fields

BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
TIME_DIVISOR = {"ms": 1000.0, "s": 1.0}  # timestamp units per second


def blocks_for(tokens: int, block_tokens: int) -> int:
    """Blocks covering ``tokens`` (the last one may be partial)."""
    return -(-tokens // block_tokens)


def _geometry_hint(path: Path, rec: dict, n_ids: int, tokens: int, block_tokens: int,
                   time_unit: str) -> str:
    """Name the reader or the flags a row with the wrong id count fits."""
    return mooncake_geometry(path, rec, n_ids, tokens, block_tokens, time_unit)


def read(path: Path, trace: str, *, block_tokens: int = BLOCK_TOKENS,
         time_unit: str = "ms") -> dict[str, pa.Table]:
    """Parse and validate every line; raise on the first bad one."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise TraceFormatError(path, None, None,
                               f"block_tokens must be a positive integer, got {block_tokens!r}")
    if time_unit not in TIME_DIVISOR:
        raise TraceFormatError(path, None, None,
                               f"time_unit must be 'ms' or 's', got {time_unit!r}")
    arrival: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[list[int]] = []
    extra: set[str] = set()
    clock = MonotonicClock(path, "timestamp")
    for lineno, rec in jsonl_objects(path):
        require_fields(rec, FIELDS, path, lineno, "mooncake", extra)
        ts = as_time(rec["timestamp"], path, lineno, "timestamp")
        clock.check(ts, lineno, str(rec["timestamp"]))
        n_in = as_count(rec["input_length"], path, lineno, "input_length")
        ids = mooncake_hash_list(rec, path, lineno, block_tokens)
        want = blocks_for(n_in, block_tokens)
        if len(ids) != want:
            raise TraceFormatError(
                path, lineno, "hash_ids",
                f"{len(ids)} block ids for input_length {n_in}, expected {want} "
                f"(ceil(input_length / {block_tokens}))"
                + _geometry_hint(path, rec, len(ids), n_in, block_tokens, time_unit))
        arrival.append(ts)
        inp.append(n_in)
        out.append(as_count(rec["output_length"], path, lineno, "output_length"))
        hashes.append(ids)
    if not arrival:
        raise TraceFormatError(path, None, None, "no requests in file")
    if extra:
        kind = looks_like(extra | set(FIELDS), not_="mooncake")
        note(extra_note(path, extra, FIELDS, "key(s)")
             + (f"; the keys look like the {kind} format" if kind else ""))
    div = TIME_DIVISOR[time_unit]
    t0 = arrival[0]
    arrival_s = [(t - t0) / div for t in arrival]
    return {"requests": requests_table(trace, arrival_s, inp, out, block_tokens, hashes)}


READER = Reader("mooncake", "requests", read,
                "Mooncake FAST'25 JSONL (hash_ids of 512-token blocks, ms timestamps)")
