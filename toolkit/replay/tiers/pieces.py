"""Cut hashed blocks into the units a tier replay works on (NumPy only, no per-access loop).

* :func:`sub_pages` (``--radix-semantics page``): pages smaller than a block split each
  hashed block into pages covering the same tokens; a partial last page is a page.
* :func:`radix_pieces` (``--radix-semantics sglang``): SGLang page-aligns every prompt,
  so only ``floor(prompt / page) * page`` tokens take part. A block is cut where some
  prompt's aligned end falls inside it; each stretch between cuts is a *piece*, keyed by
  (block hash, cut). Radix nodes can only begin or end on those cuts (chained hashes make
  prompts diverge at block starts; matches and inserts stop at aligned ends), so a tree
  of pieces is exactly SGLang's token tree, in about one entry per block.

Both take the flattened chained hashes of requests in replay order.
"""

from __future__ import annotations

import numpy as np

from toolkit.errors import ToolkitError
from toolkit.replay.keys import dense_ids
from toolkit.runtime.aot import nb


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + c)`` for each pair, vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offs = np.zeros(counts.size, np.int64)
    np.cumsum(counts[:-1], out=offs[1:])
    rep = np.repeat(starts - offs, counts)
    return rep + np.arange(total, dtype=np.int64)


def _block_cover(flat_req: np.ndarray, pos: np.ndarray, limit: np.ndarray,
                 block: int) -> np.ndarray:
    """Tokens of each block occurrence inside the request's first ``limit`` tokens."""
    return np.clip(limit[flat_req] - block * pos, 0, block)


def sub_pages(flat: np.ndarray, lengths: np.ndarray, prompt: np.ndarray, block: int,
              page: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split blocks into ``page``-token pages: (page hashes, tokens per page, pages per req)."""
    per = block // page
    req_of = np.repeat(np.arange(lengths.size), lengths)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    pos = np.arange(flat.size, dtype=np.int64) - starts[req_of]
    cover = _block_cover(req_of, pos, prompt, block)
    n_sub = -(-cover // page)
    occ = np.repeat(np.arange(flat.size), n_sub)
    j = _ranges(np.zeros(flat.size, np.int64), n_sub)
    keys = flat[occ] * per + j
    toks = np.minimum(page, cover[occ] - j * page)
    new_len = np.bincount(req_of[occ], minlength=lengths.size).astype(np.int64) \
        if occ.size else np.zeros(lengths.size, np.int64)
    return keys, toks.astype(np.int64), new_len


@nb.njit(cache=True, nogil=True)
def _cuts(hid, starts, lengths, aligned, block, full, part_key, part_of):  # pragma: no cover
    """Mark hashes covered whole; list each request's partial cut (at most one)."""
    n = 0
    for r in range(lengths.shape[0]):
        part_of[r] = -1
        for b in range(lengths[r]):
            c = aligned[r] - b * block
            if c <= 0:
                break
            h = hid[starts[r] + b]
            if c >= block:
                full[h] = 1
            else:
                part_key[n] = h * (block + 1) + c
                part_of[r] = n
                n += 1
    return n


@nb.njit(cache=True, nogil=True)
def _emit(hid, starts, lengths, aligned, block, h_start, cnt, part_of, part_piece,
          new_len, keys, parent, write):  # pragma: no cover - compiled
    """Write (``write``; else only count) each request's pieces and every piece's
    parent; returns the first request whose path disagrees with an earlier parent
    (-1: chained) and the number of pieces."""
    w = 0
    bad = -1
    for r in range(lengths.shape[0]):
        prev = -1
        w0 = w
        for b in range(lengths[r]):
            c = aligned[r] - b * block
            if c <= 0:
                break
            h = hid[starts[r] + b]
            last = h_start[h] + cnt[h] - 1 if c >= block else part_piece[part_of[r]]
            if not write:
                w += last + 1 - h_start[h]
                continue
            for k in range(h_start[h], last + 1):
                keys[w] = k
                w += 1
                if parent[k] == -2:
                    parent[k] = prev
                elif parent[k] != prev and bad == -1:
                    bad = r
                prev = k
        new_len[r] = w - w0
    return bad, w


def radix_pieces(flat: np.ndarray, lengths: np.ndarray, prompt: np.ndarray, block: int,
                 page: int) -> dict[str, np.ndarray | int]:
    """Pieces of page-aligned prompts (see module docstring).

    Returns ``keys`` (dense piece ids per request, in order), ``lengths`` (pieces per
    request), ``key_tokens`` and ``parent`` (per piece id; -1 at a root), ``n_keys``.

    Raises:
        ToolkitError: a hash follows two different hashes (the hashes are not chained).
    """
    aligned = (prompt // page * page).astype(np.int64)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    hid, n_h = dense_ids(flat)
    full = np.zeros(n_h, np.uint8)
    part_key = np.empty(lengths.size, np.int64)
    part_of = np.empty(lengths.size, np.int64)
    n_p = _cuts(hid, starts, lengths, aligned, block, full, part_key, part_of)
    # pieces of a hash: its distinct partial cuts (sorted), then the whole block if any
    # occurrence covers it whole
    p_pair, p_inv = np.unique(part_key[:n_p], return_inverse=True)
    p_h = p_pair // (block + 1)
    n_part = np.bincount(p_h, minlength=n_h)
    cnt = (n_part + full).astype(np.int64)
    h_start = np.zeros(n_h, np.int64)
    np.cumsum(cnt[:-1], out=h_start[1:])
    p_first = np.zeros(n_h, np.int64)
    np.cumsum(n_part[:-1], out=p_first[1:])
    p_piece = h_start[p_h] + np.arange(p_pair.size) - p_first[p_h]
    n_pieces = int(cnt.sum())
    cut = np.full(n_pieces, block, np.int64)
    cut[p_piece] = p_pair % (block + 1)
    first = np.zeros(n_pieces, bool)
    first[h_start[cnt > 0]] = True
    prev_c = np.zeros(n_pieces, np.int64)
    prev_c[1:] = cut[:-1]
    key_tokens = cut - np.where(first, 0, prev_c)
    part_piece = p_piece[p_inv.reshape(-1)]
    new_len = np.zeros(lengths.size, np.int64)
    parent = np.full(n_pieces, -2, np.int64)
    args = (hid, starts, lengths, aligned, block, h_start, cnt, part_of, part_piece, new_len)
    _, total = _emit(*args, np.zeros(0, np.int64), parent, False)
    keys = np.empty(total, np.int64)
    bad, w = _emit(*args, keys, parent, True)
    if bad >= 0:
        raise ToolkitError(
            f"request row {bad}: block_hashes are not chained (a hash follows two different "
            "hashes); --radix-semantics sglang needs chained prefix hashes"
        )
    return {"keys": keys[:w], "lengths": new_len, "key_tokens": key_tokens,
            "parent": np.where(parent == -2, -1, parent), "n_keys": n_pieces}
