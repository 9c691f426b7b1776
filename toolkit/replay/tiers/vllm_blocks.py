"""Compiled tier replay with vLLM v1's prefix cache (``--engine-semantics vllm``).

The device tier is vLLM 0.33's ``KVCacheManager`` over one full-attention group
(``v1/core/kv_cache_manager.py``, ``block_pool.py``, ``single_type_kv_cache_manager.py``),
block for block; ``benchmarks/vllm_peer.py`` drives vLLM's own classes and
``tests/test_tiers_vllm.py`` checks this kernel against them request by request:

* a request's prompt is cut into ``block_tokens`` blocks; only full blocks are hashed
  (chained), so a partial last block is never hit nor cached;
* ``get_computed_blocks``: the longest run of cached block hashes, capped at
  ``(prompt - 1) // block_tokens`` blocks (the last token is always recomputed, so a
  fully cached prompt whose length is a multiple of the block recomputes its last block);
* ``allocate_slots``: it needs ``ceil(prompt / block) - hits`` new blocks plus one for each
  hit block now in the free queue (``ref_cnt == 0``); fewer free blocks and the request
  waits. Hit blocks are touched (``ref_cnt += 1``, out of the free queue), new blocks pop
  from the free queue's front (evicting the hash of a cached block), then the full blocks
  are cached; a hash already cached by another block is cached again (vLLM does not
  de-duplicate; a lookup returns the earliest inserted block of a hash);
* ``free``: the request's blocks in reverse order, ``ref_cnt -= 1``; a block reaching 0
  goes to the free queue's front if it has no hash (LIFO reuse) and to its tail if it has
  one (LRU: a request's tail blocks are evicted before its head blocks);
* block 0 is vLLM's null block: a pool of ``device_tokens // block_tokens`` blocks has one
  fewer usable block.

Modelled, not vLLM's: the loop admits a request's whole prompt at once (vLLM chunks long
prefills; with one request at a time the cache state after it is the same) and reserves
its decode blocks at admission (vLLM allocates them step by step and may preempt). The
CPU offloading tier is not modelled here: ``--engine-semantics vllm`` has no host tier.

Since uncached free blocks always sit at the queue's front and cached ones behind them,
the queue is kept as a stack of uncached block ids plus a doubly linked LRU of cached ones.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from toolkit.replay.tiers.loop import (
    C_DEV_EV,
    C_OVER,
    C_PEAK_D,
    L_DEV,
    L_KEYS,
    _push,
    _unlink,
    event_loop,
)

# indices into the state vector ``st``: device tokens in use (the loop's SZ_DEV), host
# (always 0), free uncached blocks on the stack, free cached blocks in the LRU
S_USED, S_HOST, S_ANON, S_LRU = 0, 2, 3, 4
# the block size's slot in ``lim`` (the loop's L_POLICY: this cache has no policy knob)
L_BT = 4


@nb.njit(cache=True, nogil=True)
def _key_remove(k, b, kfirst, bnext):  # pragma: no cover - compiled
    """Take block ``b`` out of hash ``k``'s blocks (insertion order kept)."""
    if kfirst[k] == b:
        kfirst[k] = bnext[b]
    else:
        p = kfirst[k]
        while bnext[p] != b:
            p = bnext[p]
        bnext[p] = bnext[b]
    bnext[b] = -1


@nb.njit(cache=True, nogil=True)
def _key_append(k, b, kfirst, bnext):  # pragma: no cover - compiled
    bnext[b] = -1
    if kfirst[k] < 0:
        kfirst[k] = b
        return
    p = kfirst[k]
    while bnext[p] >= 0:
        p = bnext[p]
    bnext[p] = b


@nb.njit(cache=True, nogil=True)
def _admit(r, keys, pstart, hitcap, nfull, nblocks, rb_start, bt, usable, bkey, bref,
           kfirst, bnext, ln, lp, anon, rblk, st, cnt, res):  # pragma: no cover - compiled
    """get_computed_blocks + allocate_slots for request ``r``; False (no side effect)
    when its blocks do not fit yet; ``res[0]`` gets its GPU hit tokens."""
    res[0] = 0
    res[1] = 0
    res[2] = 0
    nb_ = nblocks[r]
    if nb_ > usable:
        cnt[C_OVER] += 1
        return True
    b0 = pstart[r]
    m = nfull[r]
    d = 0
    while d < hitcap[r] and kfirst[keys[b0 + d]] >= 0:
        d += 1
    need = nb_ - d
    for i in range(d):
        if bref[kfirst[keys[b0 + i]]] == 0:
            need += 1  # an evictable hit block leaves the free queue
    if need > st[S_ANON] + st[S_LRU]:
        return False
    s = rb_start[r]
    for i in range(d):  # touch
        b = kfirst[keys[b0 + i]]
        if bref[b] == 0:
            _unlink(ln, lp, b)
            st[S_LRU] -= 1
        bref[b] += 1
        rblk[s + i] = b
    n = usable + 1
    for i in range(d, nb_):  # get_new_blocks: uncached first, then the LRU cached block
        if st[S_ANON] > 0:
            st[S_ANON] -= 1
            b = anon[st[S_ANON]]
        else:
            b = lp[n]
            _unlink(ln, lp, b)
            st[S_LRU] -= 1
            _key_remove(bkey[b], b, kfirst, bnext)
            bkey[b] = -1
            cnt[C_DEV_EV] += bt
        bref[b] = 1
        rblk[s + i] = b
    for i in range(d, m):  # cache_full_blocks
        b = rblk[s + i]
        bkey[b] = keys[b0 + i]
        _key_append(keys[b0 + i], b, kfirst, bnext)
    st[S_USED] = (usable - st[S_ANON] - st[S_LRU]) * bt
    if st[S_USED] > cnt[C_PEAK_D]:
        cnt[C_PEAK_D] = st[S_USED]
    res[0] = d * bt
    return True


@nb.njit(cache=True, nogil=True)
def _release(r, nblocks, rb_start, bt, usable, bkey, bref, ln, lp, anon, rblk,
             st):  # pragma: no cover - compiled
    """free: the request's blocks tail first; cached ones join the LRU's recent end,
    uncached ones the front of the queue (the stack)."""
    nb_ = nblocks[r]
    if nb_ > usable:
        return  # oversize: held nothing
    s = rb_start[r]
    n = usable + 1
    for i in range(nb_ - 1, -1, -1):
        b = rblk[s + i]
        bref[b] -= 1
        if bref[b] == 0:
            if bkey[b] < 0:
                anon[st[S_ANON]] = b
                st[S_ANON] += 1
            else:
                _push(ln, lp, n, b)
                st[S_LRU] += 1
    st[S_USED] = (usable - st[S_ANON] - st[S_LRU]) * bt


@nb.njit(cache=True, nogil=True, inline="always")
def admit(c, r, res, cnt):  # pragma: no cover - compiled
    """The loop's admission hook: :func:`_admit` over the state tuple ``c``."""
    (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
     lp, anon, rblk, st) = c
    return _admit(r, keys, pstart, hitcap, nfull, nblocks, rb_start, lim[L_BT], lim[L_DEV],
                  bkey, bref, kfirst, bnext, ln, lp, anon, rblk, st, cnt, res)


@nb.njit(cache=True, nogil=True, inline="always")
def release(c, r):  # pragma: no cover - compiled
    """The loop's finish hook: :func:`_release` over the state tuple ``c``."""
    (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
     lp, anon, rblk, st) = c
    _release(r, nblocks, rb_start, lim[L_BT], lim[L_DEV], bkey, bref, ln, lp, anon, rblk, st)


@nb.njit(cache=True, nogil=True)
def simulate_vllm(keys, pstart, hitcap, nfull, nblocks, prompt, outtok, lim, sched, coef,
                  tpot_b, out, cnt, areas):  # pragma: no cover - compiled
    """Run :func:`~toolkit.replay.tiers.loop.event_loop` over vLLM's block pool.

    ``lim[L_DEV]`` is the usable blocks (the pool less the null block), ``lim[L_BT]`` the
    block size; ``keys`` the full blocks' dense hash ids, ``nfull`` how many per request,
    ``nblocks`` the blocks each request holds while it runs. Returns the makespan.
    """
    usable = lim[L_DEV]
    R = prompt.shape[0]
    bkey = np.full(usable + 1, -1, np.int64)
    bref = np.zeros(usable + 1, np.int32)
    kfirst = np.full(lim[L_KEYS] + 1, -1, np.int64)
    bnext = np.full(usable + 1, -1, np.int64)
    ln = np.empty(usable + 2, np.int64)
    lp = np.full(usable + 2, -1, np.int64)
    ln[usable + 1] = usable + 1
    lp[usable + 1] = usable + 1
    anon = np.empty(usable + 1, np.int64)
    for i in range(usable):  # block 1 at the front of the queue, as vLLM's pool starts
        anon[i] = usable - i
    st = np.zeros(8, np.int64)
    st[S_ANON] = usable
    rb_start = np.zeros(R, np.int64)
    tot = 0
    for r in range(R):
        rb_start[r] = tot
        if nblocks[r] <= usable:
            tot += nblocks[r]
    rblk = np.empty(tot + 1, np.int64)
    c = (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
         lp, anon, rblk, st)
    return event_loop(admit, release, c, st, prompt, outtok, sched, coef, tpot_b, out, cnt,
                      areas)
