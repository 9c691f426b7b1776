"""Replay of recorded top-k selections through per-(request, layer) device buffers.

Two modes (README, "Selection replay"):

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

Everything runs as one compiled policy call: segments (one per request x layer) restart
the buffer cold, and the ``first`` initial state is produced by a warm-up run of
``0 .. N-1`` at the start of each segment whose accesses are not counted.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from toolkit import __version__
from toolkit.config import config_json, fingerprint
from toolkit.errors import ToolkitError
from toolkit.policies import policies
from toolkit.store import Store, bounded_key

MODES = ("plain", "hisparse")
DEFAULT_ROW_BYTES = 656  # FP8 MLA row (512 fp8 + 16 scales + 128 bf16 rope), BRIEF §2


@dataclass(frozen=True)
class SelectionReplayConfig:
    """One selection replay.

    Attributes:
        trace: selection trace name in the store.
        policy: registered policy name.
        buffer_tokens: device-buffer slots per (request, layer); ``None`` = 2 x k (HiSparse).
        mode: ``"plain"`` or ``"hisparse"``.
        initial: HiSparse buffer contents when a sequence first outgrows it:
            ``"first"`` (tokens 0..N-1, staging path) or ``"empty"`` (PD direct path).
        full_layers: IndexShare Full layers (hisparse mode); every other layer reuses the
            nearest preceding Full layer's selection. ``None`` = every layer has its own.
        row_bytes: bytes moved host->device per miss (MLA row; 656 = FP8 FlashMLA).
    """

    trace: str
    policy: str = "lru"
    buffer_tokens: int | None = None
    mode: str = "hisparse"
    initial: str = "first"
    full_layers: tuple[int, ...] | None = None
    row_bytes: int = DEFAULT_ROW_BYTES

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.initial not in ("first", "empty"):
            raise ValueError(f"initial must be 'first' or 'empty', got {self.initial!r}")
        if self.buffer_tokens is not None and self.buffer_tokens < 1:
            raise ValueError(f"buffer_tokens must be >= 1, got {self.buffer_tokens}")
        if self.full_layers is not None and self.mode != "hisparse":
            raise ValueError("IndexShare (full_layers) applies to mode='hisparse' only")

    def run_id(self, buffer_tokens: int) -> str:
        return bounded_key(
            f"sel-{self.trace}-{self.mode}-{self.policy}-{buffer_tokens}-{fingerprint(self)[:8]}")


@dataclass(frozen=True)
class SelectionRows:
    """A selection trace in replay order: sorted by (request, layer, step)."""

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
    return int(store.read("selection_traces", trace).column("k")[0].as_py())


def rows_from_table(t: pa.Table, k: int) -> SelectionRows:
    """Sort selection rows for replay, each row's positions ascending."""
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


def load_rows(store: Store, trace: str) -> SelectionRows:
    """Read a whole selection trace sorted for replay (see :func:`iter_rows` for big ones)."""
    k = _trace_k(store, trace)
    return rows_from_table(store.read("selections", trace), k)


def iter_rows(store: Store, trace: str, max_rows: int = 1_000_000) -> Iterator[SelectionRows]:
    """Yield a selection trace in chunks of whole requests, each of about ``max_rows`` rows
    (one request per chunk if a request is larger), so a trace larger than memory replays
    in bounded memory. Buffers are per (request, layer), so chunking by request is exact;
    Parquet row-group statistics on ``request_id`` keep each read to its own row groups.
    """
    k = _trace_k(store, trace)
    counts = store.con.sql(
        "SELECT request_id, count(*) AS n FROM selections WHERE trace = $t "
        "GROUP BY request_id ORDER BY request_id", params={"t": trace}).fetchall()
    path = store.root / "selections" / f"{trace}.parquet"
    dataset = ds.dataset(path, format="parquet")
    chunk: list[int] = []
    size = 0
    for i, (rid, n) in enumerate(counts):
        chunk.append(rid)
        size += n
        if size >= max_rows or i == len(counts) - 1:
            flt = (ds.field("request_id") >= chunk[0]) & (ds.field("request_id") <= chunk[-1])
            yield rows_from_table(dataset.to_table(filter=flt), k)
            chunk, size = [], 0


def anchor_layers(layers: np.ndarray, full_layers: tuple[int, ...]) -> np.ndarray:
    """The Full layer each layer reuses under IndexShare: the nearest Full layer at or
    before it (itself if Full; itself if no Full layer precedes it)."""
    full = np.asarray(sorted(full_layers), dtype=np.int64)
    layers = np.asarray(layers, dtype=np.int64)
    idx = np.searchsorted(full, layers, side="right") - 1
    return np.where(idx >= 0, full[np.maximum(idx, 0)], layers)


def share_layers(rows: SelectionRows, full_layers: tuple[int, ...]) -> SelectionRows:
    """Replace every Shared layer's list by its Full layer's list at the same step.

    A Shared layer with no preceding Full layer keeps its own selection.
    """
    anchor_of = anchor_layers(rows.layer, full_layers)
    # index of the anchor row for each row: same (request, step), layer = anchor
    key = lambda r, s, la: (r * (1 << 20) + s) * (1 << 12) + la  # noqa: E731
    own = key(rows.request_id, rows.step, rows.layer)
    want = key(rows.request_id, rows.step, anchor_of)
    order = np.argsort(own, kind="stable")
    pos = np.searchsorted(own[order], want)
    found = (pos < own.size) & (own[order][np.minimum(pos, own.size - 1)] == want)
    if not found.all():
        r = int(np.flatnonzero(~found)[0])
        raise ToolkitError(
            f"IndexShare: layer {rows.layer[r]} at step {rows.step[r]} (request "
            f"{rows.request_id[r]}) needs Full layer {anchor_of[r]}, which the trace lacks"
        )
    src = order[pos]
    lengths = np.diff(rows.offsets)[src]
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    idx = np.concatenate([np.arange(rows.offsets[s], rows.offsets[s + 1]) for s in src]) \
        if src.size else np.zeros(0, dtype=np.int64)
    return SelectionRows(rows.request_id, rows.step, rows.layer, rows.seq_len, offsets,
                         rows.values[idx], rows.k)


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


def _replay_chunk(rows: SelectionRows, cfg: SelectionReplayConfig, n: int, policy: Any,
                  run_id: str) -> tuple[dict[str, int], pa.Table]:
    """Replay one chunk of whole requests: (counters, per-row results)."""
    if cfg.full_layers is not None:
        rows = share_layers(rows, cfg.full_layers)
    p = plan(rows, n, cfg.mode, cfg.initial)
    n_keys = int(max(rows.seq_len.max(initial=0), n, 1))
    sim = policy.simulate(p.keys, n_keys, n, p.segments)
    n_rows = rows.request_id.size
    row_hits = np.bincount(p.row_of, weights=sim.hits[p.counted],
                           minlength=n_rows).astype(np.int64) + p.free_hits
    accesses = np.diff(rows.offsets)
    misses = accesses - row_hits
    per_row = pa.table({
        "run_id": pa.array([run_id] * n_rows, pa.string()),
        "trace": pa.array([cfg.trace] * n_rows, pa.string()),
        "request_id": rows.request_id, "step": rows.step.astype(np.int32),
        "layer": rows.layer.astype(np.int16), "seq_len": rows.seq_len.astype(np.int32),
        "accesses": accesses.astype(np.int32), "hits": row_hits.astype(np.int32),
        "misses": misses.astype(np.int32), "bytes_h2d": misses * cfg.row_bytes,
        "fast_path": p.fast_path,
    })
    counts = {"rows": int(n_rows), "accesses": int(accesses.sum()), "hits": int(row_hits.sum()),
              "misses": int(misses.sum()), "evictions": sim.evictions,
              "fast_path_rows": int(p.fast_path.sum())}
    return counts, per_row


def replay_selections(
    store: Store,
    cfg: SelectionReplayConfig,
    *,
    save: bool = True,
    rows: SelectionRows | None = None,
    max_rows: int = 1_000_000,
) -> dict[str, Any]:
    """Replay ``cfg``; returns the run summary and writes run + per-row tables.

    The trace is read in chunks of whole requests (``max_rows`` rows each, see
    :func:`iter_rows`) and per-row results are streamed to the store, so memory stays
    bounded however large the trace. Pass ``rows`` to replay an already loaded trace.
    """
    policy = policies.get(cfg.policy)
    k = rows.k if rows is not None else _trace_k(store, cfg.trace)
    n = cfg.buffer_tokens or 2 * k
    run_id = cfg.run_id(n)
    chunks = [rows] if rows is not None else iter_rows(store, cfg.trace, max_rows)
    totals = dict.fromkeys(("rows", "accesses", "hits", "misses", "evictions",
                            "fast_path_rows"), 0)
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(store.writer("selection_replay", run_id, replace=True)) \
            if save else None
        for chunk in chunks:
            counts, per_row = _replay_chunk(chunk, cfg, n, policy, run_id)
            for c, v in counts.items():
                totals[c] += v
            if sink is not None:
                sink.write(per_row)
        elapsed = time.perf_counter() - t0
        summary = {
            "run_id": run_id, "trace": cfg.trace, "policy": cfg.policy, "mode": cfg.mode,
            "buffer_tokens": n, "indexshare": cfg.full_layers is not None,
            "row_bytes": cfg.row_bytes, **totals,
            "miss_ratio": totals["misses"] / totals["accesses"] if totals["accesses"] else 0.0,
            "bytes_h2d": totals["misses"] * cfg.row_bytes, "elapsed_s": elapsed,
            "config_json": config_json(cfg), "toolkit_version": __version__,
        }
        if save:  # inside the block: a failed summary write discards the per-row file too
            store.write("selection_runs", run_id, pa.Table.from_pylist([summary]),
                        replace=True)
    return summary
