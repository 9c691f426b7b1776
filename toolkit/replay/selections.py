"""Replay of recorded top-k selections through per-(request, layer) device buffers.

Two modes (docs/selections.md):

``plain``
    One cold, empty buffer of N slots per (request, layer); steps in increasing order;
    within a step the selected positions are accessed in ascending order; a hit promotes,
    a miss inserts (evicting per policy). For comparing policies and exact cross-checks.

``hisparse``
    SGLang HiSparse's device buffer (``hisparse_coordinator.py``): N LRU slots plus one
    reserved slot that always holds the newest token (position ``seq_len - 1``), outside
    the policy. While ``seq_len <= N`` every token is resident (fast path: all hits, no
    host traffic). At the first step with ``seq_len > N`` the buffer holds tokens
    ``0 .. N-1`` with token 0 at the LRU end, as ``alloc_device_buffer`` sets
    ``device_buffer_tokens = arange(N)`` and ``lru_slots = arange(N)`` (``initial="first"``);
    the PD direct-to-host path starts long sequences with an empty buffer
    (``initial="empty"``). Tokens generated later live only in the reserved slot until the
    next token replaces them, so selecting them afterwards is a miss. With IndexShare, a
    Shared layer reuses its Full layer's selection, so its buffer sees the same stream and
    has the same misses.

Per chunk of whole requests, one compiled pass (:mod:`toolkit.replay.selection_plan`)
turns the stored Arrow lists into one policy call's key stream: segments (one per
request x layer) restart the buffer cold, and the ``first`` initial state is produced by
a warm-up run of ``0 .. N-1`` at the start of each segment whose accesses are not
counted. :func:`plan` is the NumPy version of the same stream, kept as the reference
the compiled planner is tested against. A policy with a fused row kernel (LRU's
``rows_kernel``) takes the rows straight, with the same rules and no key stream in
between; it is tested against the planned path. Buffers are independent, so parts of a
chunk replay on worker threads (the kernels release the GIL) with identical results.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from toolkit.config import config_json
from toolkit.errors import ToolkitError
from toolkit.policies import SPARSE_KEY_FACTOR, policies
from toolkit.policies._kernel import INT32_LIMIT
from toolkit.replay.config import SelectionReplayConfig
from toolkit.replay.selection_plan import (
    fused_plan,
    gather_rows,
    is_sorted_rows,
    layer_major,
    row_hits,
)
from toolkit.runtime import pool
from toolkit.runtime.aot import nb
from toolkit.runtime.memory import check_memory
from toolkit.runtime.pool import ordered_results, resolve_workers, split_at, thread_map
from toolkit.runtime.progress import progress as progress_bar
from toolkit.store import Store, kept, sink_schema
from toolkit.store.parquet.topk_pages import Scratch, read_flat, read_topk
from toolkit.version import __version__

if TYPE_CHECKING:
    from toolkit.models import ModelSpec

CHUNK_ACCESSES = 1 << 22  # ~4 M positions (16 MB int32) per chunk: reading the next chunk
# overlaps replaying this one, and memory stays a few chunks whatever the trace size


def model_config(store: Store, trace: str, spec: ModelSpec, *, kv_dtype: str = "fp8",
                 **options: Any) -> SelectionReplayConfig:
    """A config whose row bytes and (hisparse mode) IndexShare Full layers come from a model
    spec (resolved by the caller); the spec's sharing rule is applied to the trace's own
    layer count, and the run records the spec's canonical name."""
    from toolkit.models.spec import indexer_layer_ids

    mode = options.get("mode", "hisparse")
    full = None
    if mode == "hisparse" and spec.index_topk_freq > 1:
        _trace_k(store, trace)  # a clear error for an unknown trace
        n_layers = store.query("SELECT n_layers FROM selection_traces WHERE trace = $t",
                               {"t": trace}).item()
        full = indexer_layer_ids(n_layers, spec.index_topk_freq, spec.index_skip_topk_offset)
    return SelectionReplayConfig(trace, full_layers=full, row_bytes=spec.mla_row_bytes(kv_dtype),
                                 model=spec.name, kv_dtype=kv_dtype, **options)


@dataclass(frozen=True)
class SelectionRows:
    """Selection rows: per-row columns plus the flattened lists.

    :func:`rows_from_table` gives them sorted by (request, layer, step) with int64 values
    (the NumPy reference path); :func:`raw_rows` leaves them as stored, which the replay
    accepts too (it orders rows through an index).
    """

    request_id: np.ndarray
    step: np.ndarray
    layer: np.ndarray
    seq_len: np.ndarray
    offsets: np.ndarray  # into values, len = rows + 1
    values: np.ndarray  # positions, ascending within each row
    k: int


def _trace_k(store: Store, trace: str) -> int:
    if trace not in store.keys("selections"):
        known = ", ".join(store.keys("selections")) or "none"
        raise ToolkitError(f"no selection trace {trace!r} in {store.root}; known: {known}")
    return int(store.read("selection_traces", trace, columns=["k"]).column("k")[0].as_py())


_FACTS: dict[tuple, tuple[int, pq.FileMetaData]] = {}  # per process, by file identity


def trace_facts(store: Store, trace: str) -> tuple[int, Path, pq.FileMetaData]:
    """A selection trace's k, its Parquet file and that file's parsed footer. Kept per
    process while both files are unchanged (their size, mtime and inode in the key; every
    write replaces a file): a what-if loop or a sweep replays one trace many times, and
    reading k (0.4 ms) and the footer (0.1-0.2 ms) was a twentieth of a replay of the
    real 2M-access SmolLM2 trace."""
    path = store.key_file("selections", trace)
    stamps = (store.source_stamp("selections", trace),
              store.source_stamp("selection_traces", trace))
    if path is None or None in stamps:  # unknown (``_trace_k`` says so) or not kept
        k = _trace_k(store, trace)
        path = store.selection_file(trace)
        return k, path, pq.read_metadata(path)
    k, md = kept(_FACTS, (str(store.root), trace, *stamps),
                 lambda: (_trace_k(store, trace), pq.read_metadata(path)), 16)
    return k, path, md


def rows_from_table(t: pa.Table, k: int) -> SelectionRows:
    """Sort selection rows for replay, each row's positions ascending."""
    import pyarrow.compute as pc  # ~0.1 s to import; the store's own layout needs none

    t = t.take(pc.sort_indices(t, [("request_id", "ascending"), ("layer", "ascending"),
                                   ("step", "ascending")]))
    topk = t.column("topk").combine_chunks()
    lengths = pc.list_value_length(topk).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = pc.list_flatten(topk).to_numpy(zero_copy_only=False).astype(np.int64)
    _sort_rows(values, offsets)
    col = {c: t.column(c).to_numpy().astype(np.int64) for c in ("request_id", "step", "layer",
                                                                "seq_len")}
    return SelectionRows(**col, offsets=offsets, values=values, k=k)


@nb.njit(cache=True, nogil=True)
def _sort_rows(values, offsets):  # pragma: no cover - compiled
    """Sort each row's positions in place; rows already ascending (order = "position",
    the usual case) cost one comparison per value."""
    for r in range(offsets.shape[0] - 1):
        lo, hi = offsets[r], offsets[r + 1]
        for i in range(lo + 1, hi):
            if values[i] < values[i - 1]:
                values[lo:hi] = np.sort(values[lo:hi])
                break


def raw_rows(t: pa.Table, k: int) -> SelectionRows:
    """Rows as stored (any order; replay orders them through an index), with the ``topk``
    offsets and int32 values taken from Arrow without a copy (a chunked column is
    concatenated once, still int32)."""
    topk = t.column("topk")
    arr = topk.chunk(0) if topk.num_chunks == 1 else topk.combine_chunks()
    if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - pyarrow version differences
        arr = arr.chunk(0)
    offsets = arr.offsets.to_numpy()
    values = arr.values.to_numpy(zero_copy_only=False)
    col = {c: t.column(c).to_numpy() for c in ("request_id", "step", "layer", "seq_len")}
    return SelectionRows(**col, offsets=offsets, values=values, k=k)


def load_rows(store: Store, trace: str) -> SelectionRows:
    """Read a whole selection trace as stored, lists zero-copy (replay orders the rows;
    see :func:`iter_rows` for traces larger than memory)."""
    k = _trace_k(store, trace)
    return raw_rows(store.read("selections", trace), k)


ROW_COLUMNS = ["request_id", "step", "layer", "seq_len", "topk"]


@dataclass(frozen=True)
class ChunkSpec:
    """Where one chunk of whole requests sits in a trace's Parquet file.

    Attributes:
        row_groups: row groups to read (consecutive).
        start: first row of the chunk within those row groups.
        rows: rows in the chunk.
        request_range: ``(first, last)`` request id, for files not ordered by request
            (then read with a filter instead of by row group).
    """

    row_groups: tuple[int, ...]
    start: int
    rows: int
    request_range: tuple[int, int] | None = None


def chunk_specs(path: Any, max_rows: int,
                metadata: pq.FileMetaData | None = None) -> list[ChunkSpec]:
    """Cut a selection file into chunks of whole requests of about ``max_rows`` rows (one
    request per chunk if a request is larger). Buffers are per (request, layer), so
    chunking by request is exact. A file written request by request (recorders, the
    synthetic generator) is read by row group, with no filter to evaluate.
    ``metadata``: the file's footer, already parsed."""
    md = metadata if metadata is not None else pq.read_metadata(path)
    if 0 < md.num_rows <= max_rows:
        # one chunk whatever the order (replay orders a chunk's rows itself): reading the
        # request ids to find cuts was 0.7 ms of a 2M-access real trace's ~18 ms replay,
        # and opening the file only to learn that, 0.2 ms
        return [ChunkSpec(tuple(range(md.num_row_groups)), 0, md.num_rows)]
    pf = pq.ParquetFile(path, metadata=md)
    rid = pf.read(columns=["request_id"]).column(0).to_numpy()
    if rid.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]])
    if np.all(rid[1:] >= rid[:-1]):
        rg_rows = [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)]
        rg_start = np.r_[0, np.cumsum(rg_rows)]
        aligned = set(rg_start.tolist())
        # cut at request starts; prefer those on a row-group boundary (a cut inside a row
        # group makes both chunks decode it) unless the chunk would pass 2 x max_rows
        cuts = [0]
        for st_ in starts[1:].tolist():
            size = st_ - cuts[-1]
            if size >= max_rows and (st_ in aligned or size >= 2 * max_rows):
                cuts.append(st_)
        cuts.append(int(rid.size))
        specs = []
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            g0 = int(np.searchsorted(rg_start, lo, side="right")) - 1
            g1 = int(np.searchsorted(rg_start, hi, side="left"))
            specs.append(ChunkSpec(tuple(range(g0, g1)), lo - int(rg_start[g0]), hi - lo))
        return specs
    ids, sizes = np.unique(rid, return_counts=True)
    specs, first, size = [], None, 0
    for i, (r, n) in enumerate(zip(ids.tolist(), sizes.tolist(), strict=True)):
        first = r if first is None else first
        size += n
        if size >= max_rows or i == ids.size - 1:
            specs.append(ChunkSpec((), 0, size, (first, r)))
            first, size = None, 0
    return specs


def read_chunk(path: Any, spec: ChunkSpec, k: int, scratch: Scratch | None = None,
               metadata: pq.FileMetaData | None = None, workers: int = 1) -> SelectionRows:
    """Read one chunk (see :func:`chunk_specs`), lists zero-copy where Arrow allows.

    ``scratch``: decode the positions into its buffers (see :class:`Scratch`); the rows
    are then valid only until the next read with the same scratch. ``metadata``: the
    file's footer, parsed once per replay (1.45 ms a parse for a 2-billion-position
    trace's 480 row groups, 0.17 ns a position if every chunk parsed it again).
    A chunk in the store's own layout is decoded without Arrow (``topk_pages``). With
    ``workers > 1`` the four per-row columns are read on a second thread while this one
    decodes the positions (a trace smaller than a chunk has its workers idle there)."""
    if spec.request_range is None:
        groups = list(spec.row_groups)
        md = metadata if metadata is not None else pq.read_metadata(path)
        # mapped, no pre-buffering: the pre-buffer path made two threads reading at once
        # slower than one (measured)
        open_file = functools.partial(pq.ParquetFile, path, memory_map=True,
                                      pre_buffer=False, metadata=md)

        def read_columns() -> dict[str, np.ndarray]:
            flat = read_flat(path, ROW_COLUMNS[:-1], groups, md)  # the store's layout
            if flat is None:  # another (an older store's): Arrow's reader
                t = open_file().read_row_groups(groups, columns=ROW_COLUMNS[:-1],
                                                use_threads=False)
                flat = {c: t.column(c).to_numpy() for c in ROW_COLUMNS[:-1]}
            return flat

        read_lists = functools.partial(read_topk, path, groups, scratch, md)
        if workers > 1:  # this thread decodes the positions (the replay reads them next)
            lists, columns = thread_map(lambda read: read(), [read_lists, read_columns], 2)
        else:  # the columns only once the positions are known to be ours
            lists = read_lists()
            columns = read_columns() if lists is not None else None
        if lists is not None:  # our decoder of the store's own layout: ~3.6x Arrow's
            return _chunk_rows(columns, *lists, spec, k)
        t = open_file().read_row_groups(groups, columns=ROW_COLUMNS, use_threads=False)
        t = t.slice(spec.start, spec.rows)
    else:
        import pyarrow.dataset as ds  # ~0.07 s to import, for a request range only

        lo, hi = spec.request_range
        flt = (ds.field("request_id") >= lo) & (ds.field("request_id") <= hi)
        t = ds.dataset(path, format="parquet").to_table(columns=ROW_COLUMNS, filter=flt)
    return raw_rows(t, k)


def _chunk_rows(columns: dict[str, np.ndarray], values: np.ndarray, offsets: np.ndarray,
                spec: ChunkSpec, k: int) -> SelectionRows:
    """The chunk ``spec`` of row groups decoded whole (per-row columns, positions)."""
    a, b = spec.start, spec.start + spec.rows
    return SelectionRows(**{c: v[a:b] for c, v in columns.items()}, offsets=offsets[a:b + 1],
                         values=values, k=k)


def iter_rows(store: Store, trace: str, max_rows: int = 1_000_000) -> Iterator[SelectionRows]:
    """Yield a selection trace in chunks of whole requests, each of about ``max_rows`` rows
    (see :func:`chunk_specs`), so a trace larger than memory replays in bounded memory."""
    k = _trace_k(store, trace)
    path = store.selection_file(trace)
    for spec in chunk_specs(path, max_rows):
        yield read_chunk(path, spec, k)


def anchor_layers(layers: np.ndarray, full_layers: tuple[int, ...]) -> np.ndarray:
    """The Full layer each layer reuses under IndexShare: the nearest Full layer at or
    before it (itself if Full; itself if no Full layer precedes it)."""
    full = np.asarray(sorted(full_layers), dtype=np.int64)
    layers = np.asarray(layers, dtype=np.int64)
    idx = np.searchsorted(full, layers, side="right") - 1
    return np.where(idx >= 0, full[np.maximum(idx, 0)], layers)


@dataclass(frozen=True)
class AccessPlan:
    """Key stream for one policy call plus how to fold its hits back into rows."""

    keys: np.ndarray
    segments: np.ndarray
    counted: np.ndarray  # bool per key: False for warm-up accesses
    row_of: np.ndarray  # row of each counted key
    free_hits: np.ndarray  # per row: hits served without the policy (fast path, newest)
    fast_path: np.ndarray  # per row: seq_len <= N (hisparse)


def plan(rows: SelectionRows, n: int, mode: str, initial: str) -> AccessPlan:
    """Build the access stream of ``mode`` for buffers of ``n`` slots."""
    n_rows = rows.request_id.size
    lengths = np.diff(rows.offsets)
    row_of = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
    group_start = np.r_[True, (rows.request_id[1:] != rows.request_id[:-1])
                        | (rows.layer[1:] != rows.layer[:-1])] if n_rows else np.zeros(0, bool)
    group = np.cumsum(group_start) - 1
    if mode == "plain":
        fast = np.zeros(n_rows, dtype=bool)
        keep = np.ones(rows.values.size, dtype=bool)
    else:
        fast = rows.seq_len <= n
        newest = rows.values == rows.seq_len[row_of] - 1
        keep = ~fast[row_of] & ~newest
    free_hits = lengths - np.bincount(row_of[keep], minlength=n_rows)
    keys, krow = rows.values[keep], row_of[keep]
    kgroup = group[krow]
    # each group with any policy access becomes a segment, optionally led by a warm-up
    n_groups = int(group[-1]) + 1 if n_rows else 0
    per_group = np.bincount(kgroup, minlength=n_groups)
    active = per_group > 0
    warm = n if (mode == "hisparse" and initial == "first") else 0
    seg_len = per_group[active] + warm
    segments = np.zeros(seg_len.size, dtype=np.int64)
    np.cumsum(seg_len[:-1], out=segments[1:])
    total = int(seg_len.sum())
    out_keys = np.empty(total, dtype=np.int32)  # positions < 2**31; half the bytes
    counted = np.ones(total, dtype=bool)
    if warm:
        wpos = (segments[:, None] + np.arange(warm)[None, :]).ravel()
        out_keys[wpos] = np.tile(np.arange(warm, dtype=np.int32), segments.size)
        counted[wpos] = False
    out_keys[counted] = keys  # keys are already grouped and in (step, position) order
    return AccessPlan(out_keys, segments, counted, krow, free_hits, fast)


def _shared_src(r: np.ndarray, st: np.ndarray, la: np.ndarray,
                full_layers: tuple[int, ...]) -> np.ndarray:
    """Per sorted row, the sorted row whose list it reads under IndexShare."""
    anchor_of = anchor_layers(la, full_layers)
    key = lambda a, b, c: (a * (1 << 20) + b) * (1 << 12) + c  # noqa: E731
    own = key(r, st.astype(np.int64), la.astype(np.int64))
    want = key(r, st.astype(np.int64), anchor_of)
    order = np.argsort(own, kind="stable")
    pos = np.searchsorted(own[order], want)
    found = (pos < own.size) & (own[order][np.minimum(pos, own.size - 1)] == want)
    if not found.all():
        i = int(np.flatnonzero(~found)[0])
        raise ToolkitError(
            f"IndexShare: layer {la[i]} at step {st[i]} (request {r[i]}) needs Full layer "
            f"{anchor_of[i]}, which the trace lacks"
        )
    return order[pos]


@dataclass(frozen=True)
class _Ordered:
    """Replay order of a chunk's rows: per-row columns sorted, lists left where they are."""

    request_id: np.ndarray
    step: np.ndarray
    layer: np.ndarray
    seq_len: np.ndarray
    src: np.ndarray  # list row each replay row reads
    new_group: np.ndarray  # a (request, layer) buffer starts here
    accesses: np.ndarray  # selected positions per replay row


def _order(rows: SelectionRows, full_layers: tuple[int, ...] | None) -> _Ordered:
    """Sort rows by (request, layer, step) through an index (no list is copied)."""
    rid, layer, step = rows.request_id, rows.layer, rows.step
    if is_sorted_rows(rid, layer, step):
        perm = np.arange(rid.size, dtype=np.int64)
    else:
        perm, ok = layer_major(rid, layer, step)  # step-major, as recorders write
        if not ok:
            perm = np.lexsort((step, layer, rid))
    r, st, la, sl, new_group, accesses = gather_rows(perm, rid, layer, step, rows.seq_len,
                                                     rows.offsets)
    src = perm
    if full_layers is not None:  # a Shared layer reads its Full layer's list
        src = perm[_shared_src(r, st, la, full_layers)]
        accesses = (rows.offsets[1:][src] - rows.offsets[:-1][src]).astype(np.int64)
    return _Ordered(r, st, la, sl, src, new_group, accesses)


SUB_ACCESSES = 1 << 19
"""Accesses planned, replayed and folded at a time (whole buffers): the key stream and hit
array of one piece stay in cache between the three passes instead of going to DRAM, which
is what kept two workers from scaling (memory bandwidth, not cores, was the limit)."""


def _fused_part(rows: SelectionRows, o: _Ordered, lo: int, hi: int, n: int, n_keys: int,
                cfg: SelectionReplayConfig,
                kernel: Any) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Replay rows ``lo:hi`` through a policy's fused row kernel (LRU's
    :func:`toolkit.policies.lru.lru_rows`): no key stream, no hit array, no fold. On the
    real 2M-access SmolLM2 trace planning and folding were ~2 of ~15 ms. None where the
    planned path must go instead (a key space sparse enough to be compacted)."""
    accesses = o.accesses[lo:hi]
    if n_keys > SPARSE_KEY_FACTOR * int(accesses.sum()) + 65_536 or n_keys >= INT32_LIMIT:
        return None
    hisparse = cfg.mode == "hisparse"
    warm = n if (hisparse and cfg.initial == "first") else 0
    check_memory(8.0 * (n_keys + 1) + 9.0 * (hi - lo), f"replaying {hi - lo:,} rows")
    row_hits_ = np.empty(hi - lo, dtype=np.int64)
    fast = np.empty(hi - lo, dtype=np.bool_)
    scratch = np.empty(int(accesses.max(initial=0)), dtype=rows.values.dtype)
    ev = kernel(rows.values, rows.offsets, o.src[lo:hi], o.seq_len[lo:hi], o.new_group[lo:hi],
                n, hisparse, warm, n_keys, min(n, n_keys), row_hits_, fast, scratch)
    if ev < 0:
        r = lo - 1 - ev
        raise ValueError(f"keys must lie in [0, {n_keys}): replay row {r} (request "
                         f"{o.request_id[r]}, layer {o.layer[r]}, step {o.step[r]}) holds a "
                         "position outside")
    return row_hits_, fast, int(ev)


def _replay_part(rows: SelectionRows, o: _Ordered, lo: int, hi: int, n: int, n_keys: int,
                 cfg: SelectionReplayConfig, policy: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Plan, simulate and fold replay rows ``lo:hi`` (whole buffers): (hits, fast, evictions)."""
    kernel = getattr(policy, "rows_kernel", None)
    if kernel is not None and (done := _fused_part(rows, o, lo, hi, n, n_keys, cfg,
                                                   kernel)) is not None:
        return done
    starts = lo + np.flatnonzero(o.new_group[lo:hi])
    bounds = np.r_[starts, hi] if starts.size and starts[0] == lo else np.r_[lo, starts, hi]
    weight = np.r_[0, np.cumsum(o.accesses[lo:hi])][bounds - lo]
    # cut at the buffer starts where the running access count crosses a multiple of SUB
    step = np.flatnonzero(np.diff(weight // SUB_ACCESSES) > 0) + 1
    cuts = [lo, *bounds[step[step < bounds.size - 1]].tolist(), hi] if hi > lo else [lo]
    hits_parts, fast_parts, evictions = [], [], 0
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        p = fused_plan(rows.values, rows.offsets, o.src[a:b], o.seq_len[a:b],
                       o.new_group[a:b], n, cfg.mode, cfg.initial)
        sim = policy.simulate(p.keys, n_keys, n, p.segments)
        flags = np.asarray(sim.hits, dtype=np.bool_).view(np.uint8)  # any policy's hit array
        hits_parts.append(row_hits(flags, p.row_start, p.row_policy)
                          + (o.accesses[a:b] - p.row_policy))
        fast_parts.append(p.fast_path)
        evictions += sim.evictions
    if len(hits_parts) == 1:
        return hits_parts[0], fast_parts[0], evictions
    if not hits_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.bool_), 0
    return np.concatenate(hits_parts), np.concatenate(fast_parts), evictions


def _replay_chunk(rows: SelectionRows, cfg: SelectionReplayConfig, n: int, policy: Any,
                  run_id: str, workers: int = 1) -> tuple[dict[str, int], pa.Table]:
    """Replay one chunk of whole requests: (counters, per-row results).

    Buffers are independent, so with ``workers > 1`` the chunk is cut at buffer
    boundaries into parts of about equal accesses that run on threads; the results do
    not depend on the cut.
    """
    o = _order(rows, cfg.full_layers)
    # keys are positions < seq_len (warm-up keys too: it starts only once seq_len > n)
    n_keys = int(max(rows.seq_len.max(initial=0), 1))
    starts = np.flatnonzero(o.new_group)
    bounds = np.r_[starts, o.src.size]
    weight = np.r_[0, np.cumsum(o.accesses)][bounds]
    parts = split_at(bounds, weight, workers)
    out = thread_map(lambda ab: _replay_part(rows, o, ab[0], ab[1], n, n_keys, cfg, policy),
                     parts, workers)
    n_rows = o.src.size
    row_hits_ = np.concatenate([h for h, _, _ in out]) if out else np.zeros(0, np.int64)
    fast = np.concatenate([f for _, f, _ in out]) if out else np.zeros(0, np.bool_)
    misses = o.accesses - row_hits_
    per_row = pa.Table.from_arrays([
        _constant(run_id, n_rows),  # one-entry dictionaries (see ParquetSink)
        _constant(cfg.trace, n_rows),
        pa.array(o.request_id.astype(np.int64, copy=False)),
        pa.array(o.step.astype(np.int32, copy=False)),
        pa.array(o.layer.astype(np.int16, copy=False)),
        pa.array(o.seq_len.astype(np.int32, copy=False)),
        pa.array(o.accesses.astype(np.int32)), pa.array(row_hits_.astype(np.int32)),
        pa.array(misses.astype(np.int32)), pa.array(misses * cfg.row_bytes),
        pa.array(fast),
    ], schema=_RESULTS)  # the sink's own schema: taken as it is, no conform
    counts = {"rows": int(n_rows), "accesses": int(o.accesses.sum()),
              "hits": int(row_hits_.sum()), "misses": int(misses.sum()),
              "evictions": int(sum(e for _, _, e in out)),
              "fast_path_rows": int(fast.sum())}
    return counts, per_row


_RESULTS = sink_schema("selection_replay")


def _constant(value: str, n: int) -> pa.DictionaryArray:
    # every index is 0 and the dictionary has one entry: nothing to validate (20 us)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                          pa.array([value], pa.string()), safe=False)


def replay_selections(
    store: Store,
    cfg: SelectionReplayConfig,
    *,
    save: bool = True,
    rows: SelectionRows | None = None,
    max_rows: int | None = None,
    workers: int | None = None,
    progress: bool | None = None,
    read_ahead: bool = False,
) -> dict[str, Any]:
    """Replay ``cfg``; returns the run summary and writes run + per-row tables.

    The trace is read in chunks of whole requests (``max_rows`` rows each, default about
    :data:`CHUNK_ACCESSES` accesses; see :func:`iter_rows`) and per-row results are
    streamed to the store, so memory stays bounded however large the trace. Pass ``rows``
    to replay an already loaded trace.

    Args:
        workers: threads (``None`` = every core); the result does not depend on it.
        progress: show accesses, rate and ETA (``None`` = on a terminal or notebook only).
        read_ahead: decode the next chunks on one extra I/O thread while ``workers``
            threads replay (Parquet decoding costs about as much as the LRU kernel).
            Off by default: with as many workers as cores it measured slower, not
            faster; each worker then reads its own chunks.
    """
    policy = policies.get(cfg.policy)
    if rows is not None:
        k = rows.k
    else:
        k, path, md = trace_facts(store, cfg.trace)
    cfg = cfg.resolved(k)
    n = cfg.buffer_tokens
    run_id = cfg.run_id()
    n_workers = resolve_workers(workers)
    if rows is not None:
        total = int(rows.offsets[-1] - rows.offsets[0])
        work = [lambda: _replay_chunk(rows, cfg, n, policy, run_id, n_workers)]
        chunk_workers = 1
    else:
        max_rows = max_rows or max(1, CHUNK_ACCESSES // max(k, 1))
        specs = chunk_specs(path, max_rows, md)
        total = md.num_rows * k  # upper bound: short rows have < k
        if read_ahead:
            # one I/O thread decodes the next chunks while the workers replay
            read = functools.partial(read_chunk, path, k=k, metadata=md)
            chunks = pool.read_ahead(read, specs, n_workers + 1)
            work = (functools.partial(_replay_chunk, c, cfg, n, policy, run_id)
                    for c in chunks)
            chunk_workers = n_workers
        else:  # each worker reads, plans and replays whole chunks
            # fewer chunks than workers (a small trace is one chunk): the spare workers
            # split each chunk's buffers instead of idling
            inner = max(1, n_workers // max(len(specs), 1))
            work = (functools.partial(_read_and_replay, path, spec, k, cfg, n, policy, run_id,
                                      md, inner) for spec in specs)
            chunk_workers = min(n_workers, max(len(specs), 1))
    totals = dict.fromkeys(("rows", "accesses", "hits", "misses", "evictions",
                            "fast_path_rows"), 0)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(store.writer("selection_replay", run_id, replace=True)) \
            if save else None
        bar = stack.enter_context(progress_bar(total, f"replay {cfg.trace}", progress))
        for counts, per_row in ordered_results(work, chunk_workers):
            for c, v in counts.items():
                totals[c] += v
            bar.update(counts["accesses"])
            if sink is not None:
                sink.write(per_row)
        elapsed = time.perf_counter() - t0
        summary = {
            "run_id": run_id, "trace": cfg.trace, "policy": cfg.policy, "mode": cfg.mode,
            "buffer_tokens": n, "indexshare": cfg.full_layers is not None,
            "row_bytes": cfg.row_bytes, "model": cfg.model, "initial": cfg.initial,
            "kv_dtype": cfg.kv_dtype, **totals,
            "miss_ratio": totals["misses"] / totals["accesses"] if totals["accesses"] else 0.0,
            "bytes_h2d": totals["misses"] * cfg.row_bytes, "elapsed_s": elapsed,
            "config_json": config_json(cfg), "toolkit_version": __version__,
        }
        if save:  # inside the block: a failed summary write discards the per-row file too
            store.write_row("selection_runs", run_id, summary, replace=True)
    return summary


_SCRATCH = threading.local()


def thread_scratch() -> Scratch:
    """This thread's decoding buffers. A worker reads a chunk and is done with its
    positions before it reads the next, so one scratch per thread is free again by then."""
    if not hasattr(_SCRATCH, "buffers"):
        _SCRATCH.buffers = Scratch()
    return _SCRATCH.buffers


def _read_and_replay(path: Any, spec: ChunkSpec, k: int, cfg: SelectionReplayConfig, n: int,
                     policy: Any, run_id: str, metadata: pq.FileMetaData | None = None,
                     workers: int = 1) -> tuple[dict[str, int], pa.Table]:
    rows = read_chunk(path, spec, k, thread_scratch(), metadata, workers)
    return _replay_chunk(rows, cfg, n, policy, run_id, workers)
