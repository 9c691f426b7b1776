"""Mooncake FAST'25 request traces (JSONL).

One JSON object per line: ``timestamp`` (ms since trace start), ``input_length``,
``output_length`` and ``hash_ids``, the chained prefix-block ids of 512-token blocks
(a block id identifies the block *and* everything before it).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader
from toolkit.ingest.fields import (
    MonotonicClock,
    as_count,
    as_hash_list,
    as_time,
    jsonl_objects,
    requests_table,
    require,
)

BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


def read(path: Path, trace: str) -> dict[str, pa.Table]:
    """Parse and validate every line; raise on the first bad one."""
    arrival_s: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    hashes: list[list[int]] = []
    clock = MonotonicClock(path, "timestamp")
    for lineno, rec in jsonl_objects(path):
        require(rec, FIELDS, path, lineno)
        ts_ms = as_time(rec["timestamp"], path, lineno, "timestamp")
        clock.check(ts_ms, lineno, str(rec["timestamp"]))
        arrival_s.append(ts_ms)
        inp.append(as_count(rec["input_length"], path, lineno, "input_length"))
        out.append(as_count(rec["output_length"], path, lineno, "output_length"))
        hashes.append(as_hash_list(rec["hash_ids"], path, lineno, "hash_ids"))
    if not arrival_s:
        raise TraceFormatError(path, None, None, "no requests in file")
    t0 = arrival_s[0]
    arrival_s = [(t - t0) / 1000.0 for t in arrival_s]
    return {"requests": requests_table(trace, arrival_s, inp, out, BLOCK_TOKENS, hashes)}


READER = Reader("mooncake", "requests", read, "Mooncake FAST'25 JSONL (512-token hash_ids)")
