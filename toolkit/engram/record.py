"""Record Engram lookup traces: text files -> ``engram_lookups`` + ``engram_traces``.

Each text file is one request. Files are read in chunks of whole lines (about
``chunk_bytes``), tokenised, compressed and hashed chunk by chunk and streamed into the
store, so a corpus larger than memory records in bounded memory. A chunk ends only at a
single newline between two non-space characters, where byte-level BPE's pre-tokenizer splits
anyway, so the tokens equal those of the whole file (a file with no such place, e.g. CRLF
line ends throughout, is read as one chunk).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from toolkit.engram.hashing import EngramConfig, EngramHasher
from toolkit.errors import ToolkitError
from toolkit.runtime.files import file_problem
from toolkit.store import Store, check_key

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class EngramRecordResult:
    """Summary of one recording."""

    trace: str
    requests: int
    tokens: int
    lookups: int
    total_rows: int
    row_bytes: int
    compressed_vocab: int
    hash_s: float  # tokenise + compress + hash (no store I/O)
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _safe_cut(prev: str, nxt: str) -> bool:
    """True when a chunk may end after ``prev``: a lone "\n" between two non-space chars is
    its own pre-token in byte-level BPE either way, so tokens are unchanged by the cut."""
    return (len(prev) >= 2 and prev[-1] == "\n" and not prev[-2].isspace()
            and nxt[:1] != "" and not nxt[:1].isspace())


def read_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[str]:
    """Chunks of about ``chunk_bytes`` of a UTF-8 text file, cut only where tokenising the
    chunks gives the same tokens as tokenising the whole file (see :func:`_safe_cut`)."""
    buf: list[str] = []
    size = 0
    with path.open("r", encoding="utf-8", newline="") as fh:
        for line in fh:
            if size >= chunk_bytes and _safe_cut(buf[-1], line):
                yield "".join(buf)
                buf, size = [], 0
            buf.append(line)
            size += len(line)
    if buf:
        yield "".join(buf)


def check_texts(paths: Sequence[Path]) -> None:
    """Refuse missing or non-UTF-8 files before anything is written."""
    if not paths:
        raise ToolkitError("give at least one --text FILE")
    for p in paths:
        if (problem := file_problem(p)) is not None:
            raise ToolkitError(f"{p}: {problem}")
        with Path(p).open("rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ToolkitError(f"{p}: line {line_no}: not UTF-8 text ({e.reason})") from e


def lookup_batch(trace: str, request_id: int, start: int, rows: np.ndarray,
                 layer_ids: Sequence[int], orders: Sequence[int]) -> pa.Table:
    """Flatten ``rows[t, layer, order, head]`` into ``engram_lookups`` rows (t-major)."""
    t_n, n_l, n_o, n_h = rows.shape
    per_token = n_l * n_o * n_h
    n = t_n * per_token
    layer = np.repeat(np.asarray(layer_ids, dtype=np.int32), n_o * n_h)
    order = np.tile(np.repeat(np.asarray(orders, dtype=np.int32), n_h), n_l)
    head = np.tile(np.arange(n_h, dtype=np.int32), n_l * n_o)
    trace_col = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([trace])).cast(pa.string())
    return pa.table({
        "trace": trace_col,
        "request_id": pa.array(np.full(n, request_id, dtype=np.int64)),
        "position": pa.array(np.repeat(np.arange(start, start + t_n, dtype=np.int64), per_token)),
        "layer": pa.array(np.tile(layer, t_n)),
        "ngram": pa.array(np.tile(order, t_n)),
        "head": pa.array(np.tile(head, t_n)),
        "row": pa.array(rows.reshape(-1).astype(np.int32)),  # tables < 2^31 rows (config)
    })


def hash_text(hasher: EngramHasher, tokenizer: Any, path: Path,
              chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[int, np.ndarray]]:
    """``(start_position, rows[t, layer, order, head])`` per chunk of one text."""
    history = hasher.start_history()
    pos = 0
    keep = hasher.cfg.max_n - 1
    for chunk in read_chunks(path, chunk_bytes):
        ids = np.asarray(tokenizer.encode(chunk).ids, dtype=np.int64)
        if not ids.size:
            continue
        comp = hasher.compress(ids)
        yield pos, hasher.rows(comp, history)
        pos += ids.size
        if keep:
            history = np.concatenate([history, comp])[-keep:]


def record_engram(store: Store, name: str, texts: Sequence[Path], cfg: EngramConfig, *,
                  replace: bool = False, chunk_bytes: int = CHUNK_BYTES,
                  hasher: EngramHasher | None = None, tokenizer: Any = None
                  ) -> EngramRecordResult:
    """Hash every token of ``texts`` (one request each) and store the lookups.

    Args:
        store: destination store.
        name: trace name (key of both tables).
        texts: UTF-8 text files.
        cfg: hashing configuration.
        hasher, tokenizer: prebuilt (tests); default: from ``cfg.tokenizer``.
    """
    from toolkit.engram.hashing import load_backbone_tokenizer

    t0 = time.perf_counter()
    check_key(name, "trace name")
    texts = [Path(p) for p in texts]
    check_texts(texts)
    if not replace and name in store.keys("engram_traces"):
        raise ToolkitError(f"engram trace {name!r} already exists in {store.root}; "
                           "pass --replace to overwrite")
    tok = tokenizer if tokenizer is not None else load_backbone_tokenizer(cfg.tokenizer)
    hasher = hasher or EngramHasher.build(cfg)
    tokens = lookups = 0
    hash_s = 0.0
    with store.writer("engram_lookups", name, replace=replace) as sink:
        for rid, path in enumerate(texts):
            gen = hash_text(hasher, tok, path, chunk_bytes)
            while True:
                th = time.perf_counter()
                item = next(gen, None)
                hash_s += time.perf_counter() - th
                if item is None:
                    break
                start, rows = item
                sink.write(lookup_batch(name, rid, start, rows, cfg.layer_ids, cfg.ngram_orders))
                tokens += rows.shape[0]
                lookups += rows.size
    meta = hasher.metadata()
    store.write("engram_traces", name, pa.Table.from_pylist([{
        "trace": name,
        "sources_json": json.dumps([str(p) for p in texts]),
        "requests": len(texts),
        "tokens": tokens,
        "lookups": lookups,
        **meta,
        "synthetic": False,
    }]), replace=replace)
    return EngramRecordResult(name, len(texts), tokens, lookups, hasher.total_rows,
                              cfg.row_bytes, hasher.compressed_vocab, hash_s,
                              time.perf_counter() - t0)
