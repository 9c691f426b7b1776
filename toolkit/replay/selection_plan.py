"""Compiled planning of selection replay: Arrow list buffers in, policy key stream out.

The NumPy :func:`toolkit.replay.selections.plan` builds the same stream with a dozen
whole-array passes and int64 copies; here one compiled pass reads the ``list<int32>``
values buffer where Arrow left it (rows visited through an index, so neither the sort
nor IndexShare copies a list), drops fast-path rows and the newest token, sorts rows
that are not ascending, writes the HiSparse warm-up and records where each row's policy
accesses sit in the stream. A second compiled pass folds the policy's hits back into
per-row counts. Python only touches per-row columns, never per-access data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.policies.lru import row_shape
from toolkit.runtime.aot import nb
from toolkit.runtime.jit import U, prefetch_row
from toolkit.runtime.memory import check_memory


@dataclass(frozen=True)
class FusedPlan:
    """Key stream of one policy call and where each replay row's accesses are in it.

    Attributes:
        keys: int32 positions (warm-up accesses included), ready for ``simulate``.
        segments: start offset of every cold buffer (one per (request, layer) with any
            policy access).
        row_start: per row, offset of its first policy access in ``keys``.
        row_policy: per row, number of policy accesses (the rest are free hits).
        fast_path: per row, ``seq_len <= buffer`` (hisparse): all resident.
    """

    keys: np.ndarray
    segments: np.ndarray
    row_start: np.ndarray
    row_policy: np.ndarray
    fast_path: np.ndarray


@nb.njit(cache=True, nogil=True)
def _plan_kernel(values, offsets, src, seq_len, new_group, n, hisparse, warm,
                 keys, segments, row_start, row_policy, fast):  # pragma: no cover - compiled
    """Fill the preallocated outputs; return (keys used, segments used)."""
    pos = 0
    n_seg = 0
    seg_open = False
    for r in range(src.shape[0]):
        prefetch_row(values, offsets, src, r)
        if new_group[r]:
            seg_open = False
        s = src[r]
        lo = offsets[U(s)]
        hi = offsets[U(s + 1)]
        newest = seq_len[r] - 1
        is_fast = hisparse and seq_len[r] <= n
        fast[r] = is_fast
        row_start[r] = pos
        if is_fast:
            row_policy[r] = 0
            continue
        descents, n_newest = row_shape(values, lo, hi, hisparse, newest)
        if not seg_open and hi - lo - n_newest > 0:
            # a buffer starts cold at its first policy access, led by the warm-up
            segments[n_seg] = pos
            n_seg += 1
            seg_open = True
            for j in range(warm):
                keys[U(pos + j)] = j
            pos += warm
            row_start[r] = pos
        start = pos
        if n_newest > 1 or (n_newest and values[U(hi - 1)] != newest):
            # newest token inside the row (or more than once, in rows not from the
            # store): branch-free skip of every copy (written, then overwritten)
            for i in range(lo, hi):
                v = values[U(i)]
                keys[U(pos)] = v
                pos += v != newest
        else:
            # copy as a plain indexed loop (newest last, as in ascending rows, is left
            # out): LLVM turns it into a vector copy, which a slice assignment was not
            # (3.6x faster planning, with the unsigned indices, on the k = 2048 stream)
            m = hi - lo - (1 if n_newest else 0)
            for i in range(m):
                keys[U(start + i)] = values[U(lo + i)]
            pos = start + m
        if descents:
            keys[start:pos] = np.sort(keys[start:pos])
        row_policy[r] = pos - start
    return pos, n_seg


@nb.njit(cache=True, nogil=True)
def row_hits(hits, row_start, row_policy):  # pragma: no cover - compiled
    """Policy hits of every row: one pass over the hit array."""
    out = np.empty(row_start.shape[0], dtype=np.int64)
    for r in range(row_start.shape[0]):
        h = 0
        lo = row_start[r]
        for i in range(lo, lo + row_policy[r]):
            h += hits[U(i)]
        out[r] = h
    return out


@nb.njit(cache=True, nogil=True)
def layer_major(request_id, layer, step):  # pragma: no cover - compiled
    """(perm, ok): the rows in (request, layer, step) order when they are stored in
    (request, step) order with the layers of a step in any order, as recorders write
    them: a stable counting sort by layer within each request, one pass each way (a
    3-key lexsort of the real SmolLM2 trace's 30,720 rows took 0.5 ms). ``ok`` is False
    for any other order, or layers spread over more than 65,536 ids (sort otherwise)."""
    n = request_id.shape[0]
    perm = np.empty(n, dtype=np.int64)
    for i in range(1, n):
        if request_id[i] < request_id[i - 1] or (
                request_id[i] == request_id[i - 1] and step[i] < step[i - 1]):
            return perm, False
    lo = 0
    while lo < n:
        hi = lo + 1
        while hi < n and request_id[hi] == request_id[lo]:
            hi += 1
        first = np.int64(layer[lo])
        last = first
        for i in range(lo, hi):
            first = min(first, np.int64(layer[i]))
            last = max(last, np.int64(layer[i]))
        span = last - first + 1
        if span > 65_536:
            return perm, False
        at = np.zeros(span + 1, dtype=np.int64)
        for i in range(lo, hi):
            at[np.int64(layer[i]) - first + 1] += 1
        for j in range(span):
            at[j + 1] += at[j]
        for i in range(lo, hi):
            c = np.int64(layer[i]) - first
            perm[lo + at[c]] = i
            at[c] += 1
        lo = hi
    return perm, True


@nb.njit(cache=True, nogil=True)
def is_sorted_rows(request_id, layer, step):  # pragma: no cover - compiled
    """Whether rows are already in (request, layer, step) order (the usual layout)."""
    for i in range(1, request_id.shape[0]):
        if request_id[i] != request_id[i - 1]:
            if request_id[i] < request_id[i - 1]:
                return False
        elif layer[i] != layer[i - 1]:
            if layer[i] < layer[i - 1]:
                return False
        elif step[i] < step[i - 1]:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def gather_rows(perm, request_id, layer, step, seq_len, offsets):  # pragma: no cover - compiled
    """Per-row columns in replay order ``perm`` in one pass: (request_id, step, layer,
    seq_len, new_group, accesses). ``new_group``: a (request, layer) buffer starts at
    this row; ``accesses``: the length of the list row ``perm`` points at (int64). Six
    NumPy gathers and compares took 0.2-0.35 ms of a 2M-access replay of 30,720 rows."""
    n = perm.shape[0]
    r = np.empty(n, dtype=request_id.dtype)
    st = np.empty(n, dtype=step.dtype)
    la = np.empty(n, dtype=layer.dtype)
    sl = np.empty(n, dtype=seq_len.dtype)
    new_group = np.empty(n, dtype=np.bool_)
    accesses = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = perm[i]
        r[i] = request_id[p]
        st[i] = step[p]
        la[i] = layer[p]
        sl[i] = seq_len[p]
        accesses[i] = np.int64(offsets[p + 1]) - np.int64(offsets[p])
        new_group[i] = i == 0 or r[i] != r[i - 1] or la[i] != la[i - 1]
    return r, st, la, sl, new_group, accesses


def fused_plan(values: np.ndarray, offsets: np.ndarray, src: np.ndarray, seq_len: np.ndarray,
               new_group: np.ndarray, n: int, mode: str, initial: str) -> FusedPlan:
    """Plan replay rows ``src`` (indices into the Arrow list ``offsets``/``values``).

    Args:
        values, offsets: the list column's flat values (int32) and offsets, zero-copy.
        src: per replay row (in replay order), the list row it reads; a Shared layer
            under IndexShare points at its Full layer's row.
        seq_len: per replay row.
        new_group: per replay row, True where a new (request, layer) buffer begins.
        n: buffer slots.
    """
    hisparse = mode == "hisparse"
    warm = n if (hisparse and initial == "first") else 0
    if values.dtype != np.int32 and values.size and (
            int(values.min()) < 0 or int(values.max()) >= 2**31):
        # the key stream is int32 (positions < 2**31): refuse rather than narrow
        raise ValueError(f"positions must lie in [0, 2**31); got [{int(values.min())}, "
                         f"{int(values.max())}]")
    lengths = offsets[1:][src] - offsets[:-1][src]
    n_groups = int(np.count_nonzero(new_group))
    if warm and n_groups:
        # only a buffer whose sequence outgrows the n slots is warmed (n keys, each < seq_len)
        starts = np.flatnonzero(new_group)
        outgrown = int(np.count_nonzero(np.maximum.reduceat(seq_len, starts) > n))
    else:
        outgrown = 0
    bound = int(lengths.sum()) + warm * outgrown
    check_memory(4.0 * bound + 8.0 * (n_groups + 3 * src.size),
                 f"planning {src.size:,} replay rows")
    keys = np.empty(bound, dtype=np.int32)
    segments = np.empty(n_groups, dtype=np.int64)
    n_rows = src.size
    row_start = np.empty(n_rows, dtype=np.int64)
    row_policy = np.empty(n_rows, dtype=np.int64)
    fast = np.empty(n_rows, dtype=np.bool_)
    used, n_seg = _plan_kernel(values, offsets, src, seq_len, new_group, n, hisparse, warm,
                               keys, segments, row_start, row_policy, fast)
    return FusedPlan(keys[:used], segments[:n_seg], row_start, row_policy, fast)
