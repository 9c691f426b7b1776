"""Prefix-block replay of a request timeline through one block cache.

Semantics (also in docs/prefix.md): requests are replayed in arrival order; each request
looks up its blocks in order; a lookup hits if the block is cached; every looked-up
block becomes most recently used (inserted on a miss, evicting per policy when full);
no capacity means unbounded. Block ``i`` of a request covers
``min(block_tokens, input_tokens - block_tokens*i)`` tokens, floored at 0.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit.config import config_json
from toolkit.errors import ToolkitError
from toolkit.policies import SPARSE_KEY_FACTOR, policies
from toolkit.policies._kernel import INT32_LIMIT
from toolkit.replay.config import PrefixReplayConfig
from toolkit.replay.keys import dense_ids
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U
from toolkit.runtime.pool import ordered_results, resolve_workers, thread_map
from toolkit.runtime.progress import progress as progress_bar
from toolkit.store import Store
from toolkit.store.parquet.topk_pages import leaf_counts, read_small_ids
from toolkit.version import __version__


@dataclass(frozen=True)
class BlockStream:
    """A request timeline flattened to one lookup per (request, block), in replay order.

    Attributes:
        keys: int32 block ids, every one ``< n_keys``: the trace's own ids where they
            are small non-negative integers (Mooncake and Bailian renumber their hashes
            0..N), else dense ids remapped from the hashes.
        n_keys: the key space (at least the number of distinct blocks).
        starts: offset of each request's first lookup (length = requests).
        lengths: lookups per request.
        prompt_tokens: input tokens per request.
        block_tokens: tokens per hashed block, per request (0 where the trace has none).
    """

    keys: np.ndarray
    n_keys: int
    starts: np.ndarray
    lengths: np.ndarray
    prompt_tokens: np.ndarray
    block_tokens: np.ndarray

    @functools.cached_property
    def tokens(self) -> np.ndarray:
        """Tokens each lookup covers (built on demand: replays fold tokens per request)."""
        return _lookup_tokens(self.starts, self.lengths, self.prompt_tokens, self.block_tokens,
                              self.keys.size)


@nb.njit(cache=True, nogil=True)
def _lookup_tokens(starts, lengths, prompt, block_tokens, n):  # pragma: no cover - compiled
    """Tokens each lookup covers: block i of a request covers
    ``min(bt, prompt - bt * i)``, floored at 0 (one pass, no per-lookup index arrays)."""
    tokens = np.empty(n, dtype=np.int64)
    for r in range(starts.shape[0]):
        bt = block_tokens[r]
        left = prompt[r]
        for j in range(starts[r], starts[r] + lengths[r]):
            tokens[j] = min(max(left, 0), bt)
            left -= bt
    return tokens


@nb.njit(cache=True, nogil=True)
def _copy_ids(values, out, pos, limit):  # pragma: no cover - compiled
    """Copy int64 ids into the int32 ``out[pos:]``; return the largest id, or -1 as soon
    as one lies outside ``[0, limit)`` (the caller then remaps all ids densely)."""
    hi = 0
    for i in range(values.shape[0]):
        v = values[i]
        if v < 0 or v >= limit:
            return -1
        out[pos + i] = v
        hi = max(hi, v)
    return hi


@nb.njit(cache=True, nogil=True)
def _in_order(arrival, request_id):  # pragma: no cover - compiled
    """Whether rows are sorted by (arrival, request_id) already (as ingest writes them)."""
    for i in range(1, arrival.shape[0]):
        if arrival[i] < arrival[i - 1] or (
                arrival[i] == arrival[i - 1] and request_id[i] < request_id[i - 1]):
            return False
    return True


STREAM_COLUMNS = ["request_id", "arrival_s", "input_tokens", "block_tokens", "block_hashes"]
"""The ``requests`` columns a prefix replay reads (the others are never decoded)."""


@dataclass(frozen=True)
class _Part:
    """Some consecutive requests, reduced to what a stream needs (one per row group)."""

    request_id: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    block_tokens: np.ndarray
    lengths: np.ndarray
    keys: np.ndarray | None  # int32 ids; None when some id is negative or past int32
    top: int  # largest id (-1 when none)
    hashes: pa.ChunkedArray | None  # kept only when ``keys`` is None


def _part_of(table: pa.Table, ids: tuple[np.ndarray, np.ndarray] | None = None,
             top: int = -1) -> _Part:
    """One row group's stream columns. ``ids``: its ``block_hashes`` already decoded as
    (int32 ids below ``INT32_LIMIT``, row offsets), the largest being ``top``, so the
    table lacks that column."""
    if ids is not None:
        keys: np.ndarray | None = ids[0]
        lengths = np.diff(ids[1])
        hashes = None
    else:
        hashes = table.column("block_hashes")
        lengths = pc.list_value_length(hashes).to_numpy(zero_copy_only=False).astype(np.int64)
        keys = np.empty(int(lengths.sum()), dtype=np.int32)
        pos, top = 0, -1
        for chunk in hashes.chunks:
            values = pc.list_flatten(chunk).to_numpy(zero_copy_only=False).astype(np.int64,
                                                                                   copy=False)
            hi = _copy_ids(values, keys, pos, INT32_LIMIT)
            if hi < 0:
                keys = None
                break
            top = max(top, int(hi))
            pos += values.size
    return _Part(
        table.column("request_id").to_numpy(), table.column("arrival_s").to_numpy(),
        table.column("input_tokens").to_numpy().astype(np.int64),
        table.column("block_tokens").fill_null(0).to_numpy().astype(np.int64),
        lengths, keys, top, hashes if keys is None else None)


def _read_part(path: Path | None, group: int, read_scalars: Any, read_all: Any,
               out: np.ndarray | None = None) -> _Part:
    """Row group ``group`` of a ``requests`` file: the hash ids through our page decoder
    when the file is in the layout it reads (see ``read_small_ids``) and the ids fit the
    kernels' int32 range, else Arrow (which remaps ids that do not fit). ``out``: the
    group's slice of the whole stream's keys, to decode into."""
    ids = read_small_ids(path, "block_hashes", [group], out=out) if path is not None else None
    top = int(ids[0].max(initial=-1)) if ids is not None else INT32_LIMIT
    if top < INT32_LIMIT:
        return _part_of(read_scalars(), ids, top)
    return _part_of(read_all())


def _assemble(parts: list[_Part], keys: np.ndarray | None = None) -> BlockStream:
    """One stream from parts in replay order: small ids kept as they are, anything else
    (negative, past int32, or so sparse that a kernel would compact them) remapped.
    ``keys``: the parts' keys already side by side in one array (decoded in place)."""
    def cat(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    lengths = cat([p.lengths for p in parts], np.int64)
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    n = int(lengths.sum())
    if all(p.keys is not None for p in parts):
        if keys is None:
            keys = cat([p.keys for p in parts], np.int32)  # type: ignore[misc]
        n_keys = max((p.top for p in parts), default=-1) + 1
        if n_keys > SPARSE_KEY_FACTOR * n + 65_536:
            keys, n_keys = dense_ids(keys)
    else:
        flat = np.concatenate([
            pc.list_flatten(p.hashes).to_numpy(zero_copy_only=False) if p.hashes is not None
            else p.keys.astype(np.int64) for p in parts])  # type: ignore[union-attr]
        keys, n_keys = dense_ids(flat)
    keys = keys.astype(np.int32 if n_keys < INT32_LIMIT else np.int64, copy=False)
    return BlockStream(keys, n_keys, starts, lengths,
                       cat([p.prompt_tokens for p in parts], np.int64),
                       cat([p.block_tokens for p in parts], np.int64))


def block_stream(requests: pa.Table) -> BlockStream:
    """Flatten a ``requests`` table (already in arrival order) into a :class:`BlockStream`."""
    return _assemble([_part_of(requests)])


_BYTE_ONES = np.uint64(0x0101010101010101)
_BYTE_RANKS = np.uint64(0x0001020304050607)


@nb.njit(inline="always")
def _word(h, i):  # pragma: no cover - compiled
    """Bytes ``h[i:i+8]`` as one little-endian word (LLVM makes the eight loads one)."""
    w = np.uint64(0)
    for b in range(8):
        w |= np.uint64(h[U(i + b)]) << np.uint64(8 * b)
    return w


@nb.njit(inline="always")
def _leading_hits(h, lo, n):  # pragma: no cover - compiled
    """How many of the 0/1 bytes ``h[lo:lo+n]`` are 1 before the first 0, eight at a
    time: the byte loop ran 9-10 ns a request on Mooncake (its exit mispredicted
    wherever a run ends), this 6. The first 0 byte of a word is the lowest set bit of
    ``~w & 0x0101..``; multiplying that bit by the byte ranks 7..0 puts its rank in the
    top byte."""
    run = 0
    while run < n:
        i = lo + run
        if i + 8 > h.shape[0]:  # the array's last bytes: one at a time
            while run < n and h[U(lo + run)]:
                run += 1
            return run
        zeros = ~_word(h, i) & _BYTE_ONES
        if zeros == 0:
            run += 8
            continue
        first = np.int64(((zeros & (~zeros + np.uint64(1))) * _BYTE_RANKS) >> np.uint64(56))
        return min(run + first, n)
    return n


@nb.njit(cache=True, nogil=True)
def _hit_totals(hits, hit_count, starts, lengths, prompt, block_tokens,
                uniform):  # pragma: no cover - compiled
    """(hit tokens, prefix-hit blocks, prefix-hit tokens) in one pass over the requests,
    given the 0/1 ``hits`` and their count: a request's prefix hit is its leading run of
    hits. Lookup j of a request covers ``clamp(prompt - j * block_tokens, 0,
    block_tokens)`` tokens (see ``_lookup_tokens``): whole blocks, then the prompt's last
    partial one, then none. So a request's hit tokens are its hits among whole blocks
    times the block size plus the partial block's tokens if hit, and its prefix tokens
    ``min(prompt, run * block_tokens)``.

    ``uniform``: the block size when every request has the same (> 0), else 0. Then every
    hit first counts as a whole block, and a request's loop touches only its lookups past
    its whole blocks (usually none or one): per-request loops over ~24 lookups ran at 22
    ns a request on Mooncake, mostly loop overhead. The whole blocks, ``min(n, prompt //
    block_tokens)``, are found by multiplying where a request has ``ceil(prompt /
    block_tokens)`` hashes or more, as recorders write them: a 64-bit division took ~6
    ns a request."""
    hit_tokens = hit_count * uniform
    run_blocks = 0
    run_tokens = 0
    for r in range(starts.shape[0]):
        lo = starts[r]
        n = lengths[r]
        bt = block_tokens[r]
        p = prompt[r]
        valid = bt > 0 and p > 0
        if not valid:
            whole = 0
        elif n * bt <= p:
            whole = n
        elif (n - 1) * bt <= p:
            whole = n - 1  # = p // bt, as (n - 1) * bt <= p < n * bt
        else:
            whole = p // bt  # fewer hashes than blocks: whole < n - 1
        if uniform:
            for j in range(lo + whole, lo + n):  # counted as whole blocks above: take back
                hit_tokens -= np.int64(hits[U(j)]) * bt
        else:
            in_whole = 0
            for j in range(lo, lo + whole):
                in_whole += np.int64(hits[U(j)])
            hit_tokens += in_whole * bt
        if valid and whole < n and p > whole * bt:  # whole < n: whole = p // bt
            hit_tokens += np.int64(hits[U(lo + whole)]) * (p - whole * bt)
        run = _leading_hits(hits, lo, n)
        run_blocks += run
        if valid:
            run_tokens += min(p, run * bt)
    return hit_tokens, run_blocks, run_tokens


def summarize(stream: BlockStream, hits: np.ndarray) -> dict[str, Any]:
    """Run-level counts; ratios are over prompt tokens / block lookups (0 when empty)."""
    n = hits.size
    as_bool = np.asarray(hits, dtype=np.bool_)  # bytes of exactly 0 or 1
    flags = as_bool.view(np.uint8)
    bt = stream.block_tokens
    uniform = int(bt[0]) if bt.size and bt[0] > 0 and bool((bt == bt[0]).all()) else 0
    hit_count = int(np.count_nonzero(as_bool))  # SIMD: 18 us for Mooncake, a loop 60
    hit_tokens, run_blocks, prefix_tokens = (int(x) for x in _hit_totals(
        flags, hit_count, stream.starts, stream.lengths, stream.prompt_tokens, bt, uniform))
    prompt_tokens = int(stream.prompt_tokens.sum())

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    return {
        "requests": int(stream.lengths.size),
        "prompt_tokens": prompt_tokens,
        "block_lookups": int(n),
        "block_hits": hit_count,
        "block_hit_ratio": ratio(hit_count, n),
        "hit_tokens": hit_tokens,
        "token_hit_ratio": ratio(hit_tokens, prompt_tokens),
        "prefix_hit_blocks": run_blocks,
        "prefix_hit_tokens": prefix_tokens,
        "prefix_token_hit_ratio": ratio(prefix_tokens, prompt_tokens),
    }


INDEX_VERSION = 3
"""Bump when the flattening or the file layout changes: older indexes are then rebuilt."""

INDEX_MAGIC = int.from_bytes(b"TKPFXIDX", "little")
INDEX_HEADER = ("magic", "version", "stamp x 5", "n_keys", "lookups", "requests")
"""An index file is an int64 header (these fields), then the raw arrays: int32 keys
(padded to 8 bytes), then int64 lengths, prompt tokens and block tokens per request. Read
into one buffer and viewed in place: 0.05 ms for Mooncake's 288,500 lookups, against
0.15 for the five ``.npy`` records of version 2 (each header parsed as Python text)."""


def _index_path(store: Store, trace: str) -> Path:
    return store.cache_path("prefix-stream", trace, ".idx")


def _load_index(store: Store, trace: str,
                stamp: tuple[int, ...] | None) -> BlockStream | None:
    """The stream saved by an earlier load of this very ``requests`` file, else None."""
    if stamp is None:
        return None
    head = 5 + len(stamp)  # magic, version, stamp, n_keys, lookups, requests
    try:
        with _index_path(store, trace).open("rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            if size < head * 8 or size % 8:
                return None
            buf = np.empty(size // 8, dtype=np.int64)
            view, got = memoryview(buf).cast("B"), 0
            while got < size:  # a read returns at most ~2 GiB, or less on a signal
                step = f.readinto(view[got:])
                if not step:
                    return None  # shrank meanwhile
                got += step
    except OSError:
        return None  # absent or unreadable: rebuild it
    magic, version, *seen, n_keys, n, r = (int(x) for x in buf[:head])
    if (magic, version, tuple(seen)) != (INDEX_MAGIC, INDEX_VERSION, stamp) or min(
            n, r, n_keys) < 0:
        return None
    at = head + (n + 1) // 2
    if buf.size != at + 3 * r:
        return None  # truncated, or not ours
    keys = buf[head:].view(np.int32)[:n]
    lengths, prompt, block = (buf[at + i * r:at + (i + 1) * r] for i in range(3))
    if int(lengths.sum()) != n or (r and int(lengths.min()) < 0):
        return None  # (a negative length would send the compiled summary out of bounds;
        # keys are checked against n_keys by every policy before its kernel runs)
    starts = np.zeros(r, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return BlockStream(keys, n_keys, starts, lengths, prompt, block)


def _save_index(store: Store, trace: str, stamp: tuple[int, ...] | None,
                stream: BlockStream) -> None:
    """Keep ``stream`` next to the store (best effort: a read-only store just skips it;
    nor is a stream of int64 keys kept, of 2**31 distinct blocks or more: the index
    holds int32 keys)."""
    if stamp is None or stream.keys.dtype != np.int32:
        return
    path = _index_path(store, trace)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as f:
            tmp = f.name
            n, r = stream.keys.size, stream.lengths.size
            np.array([INDEX_MAGIC, INDEX_VERSION, *stamp, stream.n_keys, n, r],
                     dtype=np.int64).tofile(f)
            np.ascontiguousarray(stream.keys).tofile(f)
            f.write(bytes(4 * (n % 2)))  # whole int64 words
            for a in (stream.lengths, stream.prompt_tokens, stream.block_tokens):
                np.ascontiguousarray(a, dtype=np.int64).tofile(f)
        os.chmod(tmp, 0o644)  # as readable as the store's own files, not 0600
        os.replace(tmp, path)
        path.with_suffix(".npy").unlink(missing_ok=True)  # a version-2 index
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def load_stream(store: Store, trace: str, workers: int | None = None, *,
                use_index: bool = True) -> BlockStream:
    """Read a trace from the store in arrival order and flatten it.

    The flattened stream is kept as an index in the store's cache, stamped with the
    ``requests`` file it came from: later loads of an unchanged trace read that
    (int32 keys, no list decoding) instead of the Parquet lists. Without it, row groups
    are decoded and flattened on ``workers`` threads (``None`` = every core), only the
    columns replay needs are read, and rows already in arrival order (as ingest writes
    them) are not sorted again.
    """
    stamp = store.source_stamp("requests", trace)  # before reading: a later write changes it
    if use_index and (cached := _load_index(store, trace, stamp)) is not None:
        return cached
    readers = store.read_parts("requests", trace, STREAM_COLUMNS)
    scalars = store.read_parts("requests", trace, STREAM_COLUMNS[:-1])
    path = store.key_file("requests", trace)
    counts = leaf_counts(path, "block_hashes") if path is not None else None
    whole = None
    outs: list[np.ndarray | None] = [None] * len(readers)
    if counts is not None and len(counts) == len(readers):
        # every group decodes into its slice of one array: no concatenation after (46 MB
        # and 11 ms for Mooncake x 40) when all of them are in the decoder's layout
        whole = np.empty(sum(counts), dtype=np.int32)
        # fault its pages in on this thread first: a worker thread writing fresh pages
        # decoded 8x slower on the 2-vCPU VM (5 vs 0.6 ms a page; 2.8 ms to fill 46 MB
        # here, and the 2-worker load of Mooncake x 40 fell from 48-51 to 37 ms)
        whole.fill(0)
        at = np.cumsum([0, *counts])
        outs = [whole[at[g]:at[g + 1]] for g in range(len(counts))]
    parts = thread_map(lambda g: _read_part(path, g, scalars[g], readers[g], outs[g]),
                       range(len(readers)), resolve_workers(workers))
    arrival = np.concatenate([p.arrival_s for p in parts]) if parts else np.zeros(0)
    rid = np.concatenate([p.request_id for p in parts]) if parts else np.zeros(0, np.int64)
    if _in_order(arrival, rid):
        in_place = whole is not None and all(
            p.keys is not None and p.keys.size == o.size and np.shares_memory(p.keys, o)
            for p, o in zip(parts, outs, strict=True))
        stream = _assemble(parts, whole if in_place else None)
    else:
        table = store.read("requests", trace, columns=STREAM_COLUMNS)
        order = pc.sort_indices(table, [("arrival_s", "ascending"), ("request_id", "ascending")])
        stream = block_stream(table.take(order))
    if stream.keys.size == 0:
        raise ToolkitError(
            f"trace {trace!r} has no prefix-block hashes (e.g. an Azure timeline); "
            "prefix replay needs a trace with hashes such as Mooncake's"
        )
    if use_index:
        _save_index(store, trace, stamp, stream)
    return stream


def load_kernels(policy: Any, stream: BlockStream) -> float:
    """Load (or, on a first run, compile) the policy's kernel and the summary's for
    ``stream``'s types on a one-key input, so ``elapsed_s`` times the replay alone and
    every capacity of a sweep is timed alike (the command reports the load apart);
    returns the seconds it took (~0 once loaded)."""
    t0 = time.perf_counter()
    policy.simulate(np.zeros(1, stream.keys.dtype), 1, 1)
    summarize(stream, np.zeros(stream.keys.size, np.bool_))
    return time.perf_counter() - t0


def replay_prefix(
    store: Store,
    cfg: PrefixReplayConfig,
    *,
    stream: BlockStream | None = None,
    save: bool = True,
) -> dict[str, Any]:
    """Replay ``cfg`` and return the summary (also written to ``replay_runs``).

    Pass ``stream`` to reuse one flattened trace across a capacity sweep.
    """
    policy = policies.get(cfg.policy)
    stream = stream or load_stream(store, cfg.trace)
    capacity = stream.n_keys if cfg.capacity_blocks is None else cfg.capacity_blocks
    load_kernels(policy, stream)
    t0 = time.perf_counter()
    sim = policy.simulate(stream.keys, stream.n_keys, min(capacity, stream.n_keys))
    summary = summarize(stream, sim.hits)
    elapsed = time.perf_counter() - t0
    run_id = cfg.run_id  # a fingerprint: ~25 us, taken once
    row = {
        "run_id": run_id,
        "kind": "prefix",
        "trace": cfg.trace,
        "policy": cfg.policy,
        "capacity_blocks": cfg.capacity_blocks,
        "config_json": config_json(cfg),
        **summary,
        "evictions": sim.evictions,
        "elapsed_s": elapsed,
        "toolkit_version": __version__,
    }
    if save:
        store.write_row("replay_runs", run_id, row, replace=True)
    return row


def sweep_prefix(
    store: Store, trace: str, capacities: list[int | None], policy: str = "lru",
    *, workers: int | None = None, save: bool = True, progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Replay one trace at several capacities, flattening it once.

    Capacities replay on ``workers`` threads (``None`` = every core; the kernels release
    the GIL); rows come back in the order of ``capacities`` and are written from this
    thread, so the result does not depend on ``workers``. ``progress``: a bar of block
    lookups replayed (``None`` = on a terminal or in a notebook, after 2 s).
    """
    stream = load_stream(store, trace)
    if capacities:  # once, before the threads: each row then times its replay alone
        load_kernels(policies.get(policy), stream)
    cfgs = [PrefixReplayConfig(trace, policy, c) for c in capacities]
    work = [functools.partial(replay_prefix, store, c, stream=stream, save=False) for c in cfgs]
    rows = []
    with progress_bar(len(cfgs) * stream.keys.size, f"prefix sweep {trace}", progress,
                      unit="lookup") as bar:
        for row in ordered_results(work, resolve_workers(workers)):
            rows.append(row)
            bar.update(stream.keys.size)
    if save:
        for cfg, row in zip(cfgs, rows, strict=True):
            store.write_row("replay_runs", cfg.run_id, row, replace=True)
    return rows
