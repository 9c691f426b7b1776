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


def radix_pieces(flat: np.ndarray, lengths: np.ndarray, prompt: np.ndarray, block: int,
                 page: int) -> dict[str, np.ndarray | int]:
    """Pieces of page-aligned prompts (see module docstring).

    Returns ``keys`` (dense piece ids per request, in order), ``lengths`` (pieces per
    request), ``key_tokens`` and ``parent`` (per piece id; -1 at a root), ``n_keys``.

    Raises:
        ToolkitError: a hash follows two different hashes (the hashes are not chained).
    """
    aligned = prompt // page * page
    req_of = np.repeat(np.arange(lengths.size), lengths)
    starts = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    pos = np.arange(flat.size, dtype=np.int64) - starts[req_of]
    cover = _block_cover(req_of, pos, aligned, block)
    live = cover > 0
    h, c, rq = flat[live], cover[live], req_of[live]
    # distinct (hash, cut) pairs, sorted: the pieces of a hash are consecutive
    hid, n_h = dense_ids(h)
    pair = hid.astype(np.int64) * (block + 1) + c
    uniq, inv = np.unique(pair, return_inverse=True)
    u_h = uniq // (block + 1)
    u_c = uniq % (block + 1)
    first = np.ones(uniq.size, bool)
    first[1:] = u_h[1:] != u_h[:-1]
    prev_c = np.where(first, 0, np.roll(u_c, 1))
    key_tokens = (u_c - prev_c).astype(np.int64)
    first_of = np.maximum.accumulate(np.where(first, np.arange(uniq.size), 0))
    # occurrence (hash, cut) covers the pieces first_of .. its own index
    n_pc = inv - first_of[inv] + 1
    keys = _ranges(first_of[inv], n_pc)
    new_len = np.bincount(np.repeat(rq, n_pc), minlength=lengths.size).astype(np.int64)
    # parent piece of each piece: the previous piece on any path, which must agree
    k_start = np.zeros(new_len.size, np.int64)
    np.cumsum(new_len[:-1], out=k_start[1:])
    prev = np.empty(keys.size, np.int64)
    if keys.size:
        prev[1:] = keys[:-1]
        prev[k_start[new_len > 0]] = -1
    parent = np.full(uniq.size, -1, np.int64)
    parent[keys[::-1]] = prev[::-1]  # the first occurrence sets the parent
    bad = np.flatnonzero(parent[keys] != prev)
    if bad.size:
        r = int(np.searchsorted(k_start, bad[0], side="right") - 1)
        raise ToolkitError(
            f"request row {r}: block_hashes are not chained (a hash follows two different "
            "hashes); --radix-semantics sglang needs chained prefix hashes"
        )
    return {"keys": keys, "lengths": new_len, "key_tokens": key_tokens,
            "parent": parent, "n_keys": int(uniq.size)}
