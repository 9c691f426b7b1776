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
its decode blocks at admission (vLLM allocates them step by step and may preempt).

The CPU offloading tier (``offload_policy`` lru | arc, ``host_tokens // block_tokens``
chunks of one block each) is vLLM 0.33's ``CPUOffloadingManager`` with its
``LRUCachePolicy`` / ``ARCCachePolicy`` (``v1/kv_offload/cpu/``) as the offloading
connector's scheduler side calls it (``offloading/scheduler.py``); ``benchmarks/vllm_peer.py
--offload`` drives those classes and ``tests/test_tiers_vllm_offload.py`` checks this kernel
against them request by request:

* after the GPU hit, the following full blocks are looked up in the CPU tier up to the
  whole prompt (not capped at ``prompt - 1``); the leading run found is loaded (its
  tokens are the request's host hit tokens);
* the store offers the full blocks after the loaded ones, or, with no load, every full
  block from the first (the connector's chunk-level policy restarts at 0), GPU-hit blocks
  included; offered blocks already on the CPU are reuses, the others are stored, all or
  none: if the shortfall exceeds what can be evicted outside the offer, nothing is stored
  (``prepare_store`` returns None; the finished-request pass retries once);
* LRU: a request's blocks rank above all older ones, its tail before its head, while it
  runs; when it finishes, every block it saw gets a fresh rank, tail first (its head is the
  most recent); eviction takes the lowest rank;
* ARC: stores enter T1; a finished request moves its reused blocks T1 -> T2 (or to T2's
  recent end) and its store-only blocks to their list's recent end; a store miss found in
  ghost list B1 (B2) grows (shrinks) T1's target by max(1, |B2|/|B1|) (max(1, |B1|/|B2|));
  eviction takes T1's oldest unprotected block while |T1| >= int(target), else T2's;
  victims join their ghost list, each ghost list trimmed to the capacity.

Modelled: transfers complete at once (a load before the request computes, a store at its
admission), so a block is never pending; under concurrency that is earlier than vLLM,
whose stores finish after the forward step.

Since uncached free blocks always sit at the queue's front and cached ones behind them,
the queue is kept as a stack of uncached block ids plus a doubly linked LRU of cached ones.
"""

from __future__ import annotations

import numpy as np

from toolkit.replay.tiers.loop import (
    C_BFAIL,
    C_DEV_EV,
    C_HOST_EV,
    C_HOST_W,
    C_LOAD_H,
    C_OVER,
    C_PEAK_D,
    C_PEAK_H,
    L_DEV,
    L_HOST,
    L_KEYS,
    _push,
    _unlink,
    event_loop,
)
from toolkit.runtime.aot import nb

# indices into the state vector ``st``: device tokens in use (the loop's SZ_DEV), host
# (always 0), free uncached blocks on the stack, free cached blocks in the LRU
S_USED, S_HOST, S_ANON, S_LRU = 0, 2, 3, 4
# the block size's slot in ``lim`` (the loop's L_POLICY: this cache has no policy knob);
# the offload policy's (L_WRITE): 0 lru, 1 arc. lim[L_HOST] is the CPU tier in blocks.
L_BT = 4
L_HPOL = 5
OFFLOAD_CODES = {"lru": 0, "arc": 1}
# LRU ranks: vLLM's (rank, -position) tuples as one int64, rank * RANK_SPAN - position
RANK_SPAN = 1 << 22
# indices into ``hs``: resident blocks, rank counter, heap size, ARC list lengths
H_RES, H_CTR, H_HEAP, H_T1, H_T2, H_B1, H_B2 = range(7)
# per-request key flags (``kflag``, one per key of the stream)
F_SEEN, F_REUSED, F_INS, F_MISS = 1, 2, 4, 8
# ARC list tags; sentinels of list t sit at index n + t - 1
T_NONE, T_T1, T_T2, T_B1, T_B2 = 0, 1, 2, 3, 4


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
def _kpush(hk, hid, hs, key, i):  # pragma: no cover - compiled
    """Push (key, id) on the LRU's min-heap; stale entries stay and are skipped."""
    j = hs[H_HEAP]
    while j > 0:
        p = (j - 1) >> 1
        if hk[p] < key or (hk[p] == key and hid[p] < i):
            break
        hk[j] = hk[p]
        hid[j] = hid[p]
        j = p
    hk[j] = key
    hid[j] = i
    hs[H_HEAP] += 1


@nb.njit(cache=True, nogil=True)
def _kpop(hk, hid, hs):  # pragma: no cover - compiled
    n = hs[H_HEAP] - 1
    key = hk[n]
    i = hid[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and (hk[c + 1] < hk[c] or (hk[c + 1] == hk[c] and hid[c + 1] < hid[c])):
            c += 1
        if key < hk[c] or (key == hk[c] and i < hid[c]):
            break
        hk[j] = hk[c]
        hid[j] = hid[c]
        j = c
    if n > 0:
        hk[j] = key
        hid[j] = i
    hs[H_HEAP] = n


@nb.njit(cache=True, nogil=True)
def _lru_rank(k, rank_new, tag, rank, hk, hid, hs, plist):  # pragma: no cover - compiled
    """Give resident block ``k`` a rank and a heap entry (rebuilt when stale entries pile
    up, as vLLM compacts its heap)."""
    rank[k] = rank_new
    if hs[H_HEAP] >= hk.shape[0]:
        hs[H_HEAP] = 0
        for j in range(hs[H_RES]):
            _kpush(hk, hid, hs, rank[plist[j]], plist[j])
    _kpush(hk, hid, hs, rank_new, k)


@nb.njit(cache=True, nogil=True)
def _res_add(k, tag, t, plist, ppos, hs):  # pragma: no cover - compiled
    tag[k] = t
    ppos[k] = hs[H_RES]
    plist[hs[H_RES]] = k
    hs[H_RES] += 1


@nb.njit(cache=True, nogil=True)
def _res_del(k, tag, plist, ppos, hs):  # pragma: no cover - compiled
    hs[H_RES] -= 1
    last = plist[hs[H_RES]]
    plist[ppos[k]] = last
    ppos[last] = ppos[k]
    ppos[k] = -1


@nb.njit(cache=True, nogil=True)
def _arc_move(k, t, tag, an, ap, n, hs):  # pragma: no cover - compiled
    """Move ``k`` to the recent end of ARC list ``t`` (out of its current list)."""
    old = tag[k]
    if old != T_NONE:
        _unlink(an, ap, k)
        hs[H_T1 + old - 1] -= 1
    _push(an, ap, n + t - 1, k)
    hs[H_T1 + t - 1] += 1
    tag[k] = t


@nb.njit(cache=True, nogil=True)
def _arc_drop(k, tag, an, ap, hs):  # pragma: no cover - compiled
    _unlink(an, ap, k)
    hs[H_T1 + tag[k] - 1] -= 1
    tag[k] = T_NONE


@nb.njit(cache=True, nogil=True)
def _arc_next(c, an, ap, k_stop, prot_r, prot):  # pragma: no cover - compiled
    """The next unprotected entry from cursor ``c`` towards the recent end (-1: none)."""
    while c != k_stop:
        if prot[c] != prot_r:
            return c
        c = ap[c]
    return -1


@nb.njit(cache=True, nogil=True)
def _store(r, i0, i1, keys, b0, bt, pol, cap, tag, rank, hk, hid, hs, plist, ppos, an, ap,
           tgt, kflag, prot, scratch, cnt):  # pragma: no cover - compiled
    """``prepare_store`` + ``complete_store`` of keys ``i0 .. i1-1`` of request ``r``;
    False when vLLM's manager returns None (nothing stored)."""
    n = tag.shape[0]
    new = 0
    ex = 0
    for i in range(i0, i1):
        k = keys[b0 + i]
        prot[k] = r + 1
        if tag[k] == T_T1 or tag[k] == T_T2:
            ex += 1
        else:
            new += 1
    if pol == 1:  # on_store_miss, once per request, tail first
        for i in range(i1 - 1, i0 - 1, -1):
            k = keys[b0 + i]
            if tag[k] == T_T1 or tag[k] == T_T2 or kflag[b0 + i] & F_MISS:
                continue
            kflag[b0 + i] |= F_MISS
            if tag[k] == T_B1:
                d = hs[H_B2] / hs[H_B1]
                tgt[0] = min(tgt[0] + (d if d > 1.0 else 1.0), cap)
                _arc_move(k, T_B1, tag, an, ap, n, hs)
            elif tag[k] == T_B2:
                d = hs[H_B1] / hs[H_B2]
                tgt[0] = max(tgt[0] - (d if d > 1.0 else 1.0), 0.0)
                _arc_move(k, T_B2, tag, an, ap, n, hs)
    R = hs[H_CTR]
    for i in range(i0, i1):  # _record_request_cache_access
        k = keys[b0 + i]
        kflag[b0 + i] |= F_SEEN
        if tag[k] == T_T1 or tag[k] == T_T2:
            if not kflag[b0 + i] & F_INS:
                kflag[b0 + i] |= F_REUSED
            if pol == 0 and rank[k] < R * RANK_SPAN - (i + 1):
                _lru_rank(k, R * RANK_SPAN - (i + 1), tag, rank, hk, hid, hs, plist)
    if new == 0:
        return True
    short = new - (cap - hs[H_RES])
    if short > 0:
        if short > hs[H_RES] or short > hs[H_RES] - ex:
            cnt[C_BFAIL] += new * bt
            return False
        if pol == 0:
            m = 0
            nd = 0
            while m < short:  # hs[H_RES] - ex unprotected residents: enough live entries
                key = hk[0]
                k = hid[0]
                _kpop(hk, hid, hs)
                if tag[k] != T_T1 or rank[k] != key:
                    continue  # stale
                if prot[k] == r + 1:
                    scratch[plist.shape[0] - 1 - nd] = k
                    nd += 1
                    continue
                scratch[m] = k
                m += 1
                tag[k] = T_NONE  # taken: later duplicates of k are stale
            for j in range(nd):
                k = scratch[plist.shape[0] - 1 - j]
                _kpush(hk, hid, hs, rank[k], k)
            for j in range(m):
                _res_del(scratch[j], tag, plist, ppos, hs)
        else:
            vt1 = hs[H_T1]
            c1 = ap[n]
            c2 = ap[n + 1]
            for m in range(short):
                v = -1
                if vt1 >= int(tgt[0]):
                    v = _arc_next(c1, an, ap, n, r + 1, prot)
                    if v >= 0:
                        c1 = ap[v]
                        vt1 -= 1
                if v < 0:
                    v = _arc_next(c2, an, ap, n + 1, r + 1, prot)
                    if v >= 0:
                        c2 = ap[v]
                if v < 0:
                    v = _arc_next(c1, an, ap, n, r + 1, prot)
                    if v < 0:
                        # enough unprotected residents were counted above
                        cnt[C_BFAIL] += new * bt
                        return False
                    c1 = ap[v]
                    vt1 -= 1
                scratch[m] = v
            for m in range(short):
                v = scratch[m]
                _arc_move(v, T_B1 if tag[v] == T_T1 else T_B2, tag, an, ap, n, hs)
                _res_del(v, tag, plist, ppos, hs)
            while hs[H_B1] > cap:
                _arc_drop(ap[n + 2], tag, an, ap, hs)
            while hs[H_B2] > cap:
                _arc_drop(ap[n + 3], tag, an, ap, hs)
        cnt[C_HOST_EV] += short * bt
    for i in range(i0, i1):  # insert + complete_store
        k = keys[b0 + i]
        if tag[k] == T_T1 or tag[k] == T_T2:
            continue
        kflag[b0 + i] |= F_INS
        if pol == 0:
            _res_add(k, tag, T_T1, plist, ppos, hs)
            _lru_rank(k, R * RANK_SPAN - (i + 1), tag, rank, hk, hid, hs, plist)
        else:
            if tag[k] == T_B1 or tag[k] == T_B2:
                _arc_drop(k, tag, an, ap, hs)
            _arc_move(k, T_T1, tag, an, ap, n, hs)
            tag[k] = T_T1
            _res_add(k, tag, T_T1, plist, ppos, hs)
        cnt[C_HOST_W] += bt
    return True


@nb.njit(cache=True, nogil=True)
def _offload_admit(r, keys, b0, d, m, bt, pol, cap, tag, rank, hk, hid, hs, plist, ppos,
                   an, ap, tgt, kflag, prot, rseen, rfail, scratch, cnt):
    # pragma: no cover - compiled
    """The CPU tier's part of admitting request ``r`` (GPU hit ``d`` of ``m`` full blocks):
    lookup, load, store. Returns the loaded blocks."""
    hs[H_CTR] += 1  # the request's rank (vLLM assigns it at its first access)
    R = hs[H_CTR]
    h = 0
    while d + h < m and (tag[keys[b0 + d + h]] == T_T1 or tag[keys[b0 + d + h]] == T_T2):
        h += 1
    start = 0
    if h > 0:
        for i in range(d, d + h):  # prepare_load: a reuse, ranked for the request
            k = keys[b0 + i]
            kflag[b0 + i] |= F_SEEN | F_REUSED
            if pol == 0 and rank[k] < R * RANK_SPAN - (i + 1):
                _lru_rank(k, R * RANK_SPAN - (i + 1), tag, rank, hk, hid, hs, plist)
        start = d + h
        cnt[C_LOAD_H] += h * bt
    rseen[r] = d if h > 0 else 0
    rfail[r] = 0
    if start < m:
        if not _store(r, start, m, keys, b0, bt, pol, cap, tag, rank, hk, hid, hs, plist,
                      ppos, an, ap, tgt, kflag, prot, scratch, cnt):
            rfail[r] = 1
    if hs[H_RES] * bt > cnt[C_PEAK_H]:
        cnt[C_PEAK_H] = hs[H_RES] * bt
    return h


@nb.njit(cache=True, nogil=True)
def _offload_release(r, keys, b0, m, bt, pol, cap, tag, rank, hk, hid, hs, plist, ppos,
                     an, ap, tgt, kflag, prot, rseen, rfail, scratch, cnt):
    # pragma: no cover - compiled
    """The finished-request pass (a failed store retried) and ``on_request_finished``."""
    if rfail[r]:
        s0 = rseen[r]
        _store(r, s0, m, keys, b0, bt, pol, cap, tag, rank, hk, hid, hs, plist, ppos, an,
               ap, tgt, kflag, prot, scratch, cnt)
    n = tag.shape[0]
    for i in range(m - 1, rseen[r] - 1, -1):  # tail first: the head ends most recent
        f = kflag[b0 + i]
        if not f & F_SEEN:
            continue
        k = keys[b0 + i]
        if tag[k] != T_T1 and tag[k] != T_T2:
            continue
        if pol == 0:
            hs[H_CTR] += 1
            _lru_rank(k, hs[H_CTR] * RANK_SPAN, tag, rank, hk, hid, hs, plist)
        elif f & F_INS and not f & F_REUSED:
            _arc_move(k, tag[k], tag, an, ap, n, hs)
        elif f & F_REUSED:
            _arc_move(k, T_T2, tag, an, ap, n, hs)


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


@nb.njit(cache=True, nogil=True, inline="always")
def admit(c, r, res, cnt):  # pragma: no cover - compiled
    """The loop's admission hook: :func:`_admit` over the state tuple ``c``, then the CPU
    tier (when ``lim[L_HOST]`` > 0) for an admitted request."""
    (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
     lp, anon, rblk, st, off) = c
    ok = _admit(r, keys, pstart, hitcap, nfull, nblocks, rb_start, lim[L_BT], lim[L_DEV],
                bkey, bref, kfirst, bnext, ln, lp, anon, rblk, st, cnt, res)
    cap = lim[L_HOST]
    if ok and cap > 0 and nblocks[r] <= lim[L_DEV]:
        (tag, rank, hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot, rseen, rfail,
         scratch, _) = off
        bt = lim[L_BT]
        h = _offload_admit(r, keys, pstart[r], res[0] // bt, nfull[r], bt, lim[L_HPOL], cap,
                           tag, rank, hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot,
                           rseen, rfail, scratch, cnt)
        res[1] = h * bt
        st[S_HOST] = hs[H_RES] * bt
    return ok


@nb.njit(cache=True, nogil=True, inline="always")
def release(c, r):  # pragma: no cover - compiled
    """The loop's finish hook: :func:`_release` over the state tuple ``c``, then the CPU
    tier's finished-request pass."""
    (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
     lp, anon, rblk, st, off) = c
    _release(r, nblocks, rb_start, lim[L_BT], lim[L_DEV], bkey, bref, ln, lp, anon, rblk, st)
    cap = lim[L_HOST]
    if cap > 0 and nblocks[r] <= lim[L_DEV]:
        (tag, rank, hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot, rseen, rfail,
         scratch, cnt) = off
        _offload_release(r, keys, pstart[r], nfull[r], lim[L_BT], lim[L_HPOL], cap, tag, rank,
                         hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot, rseen, rfail,
                         scratch, cnt)
        st[S_HOST] = hs[H_RES] * lim[L_BT]


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
def peek(c, r, lids, m):  # pragma: no cover - compiled
    """Device-prefix tokens of request ``r`` (first ``m`` keys ``lids``) now."""
    hitcap, lim, kfirst = c[2], c[6], c[9]
    d = 0
    top = m if m < hitcap[r] else hitcap[r]
    while d < top and kfirst[lids[d]] >= 0:
        d += 1
    return d * lim[L_BT]


@nb.njit(cache=True, nogil=True, inline="always")
def fresh(c, k, tok, parent):  # pragma: no cover - compiled
    """Initialise local block hash ``k`` of an instance (allocated unwritten)."""
    kfirst = c[9]
    kfirst[k] = -1
    if c[6][L_HOST] > 0:
        (tag, rank, hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot, rseen, rfail,
         scratch, cnt) = c[16]
        tag[k] = 0
        rank[k] = 0
        ppos[k] = -1
        ap[k] = -1
        prot[k] = 0


@nb.njit(cache=True, nogil=True)
def _state(keys, pstart, hitcap, nfull, nblocks, lim, rb_start, rblk, kflag, rseen, rfail,
           cnt, local):  # pragma: no cover - compiled
    """One instance's empty block pool (and CPU tier). Arrays indexed by request or by
    a request's key positions (``rb_start``/``rblk``, ``kflag``, ``rseen``, ``rfail``) are
    shared by all instances: a request runs on one. ``local``: block hashes are numbered
    per instance and initialised by :func:`fresh` when first seen (per-hash arrays
    allocated unwritten)."""
    usable = lim[L_DEV]
    bkey = np.full(usable + 1, -1, np.int64)
    bref = np.zeros(usable + 1, np.int32)
    if local:
        kfirst = np.empty(lim[L_KEYS] + 1, np.int64)
        kfirst[lim[L_KEYS]] = -1
    else:
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
    # the CPU offloading tier (empty arrays when lim[L_HOST] == 0)
    nk = lim[L_KEYS] if lim[L_HOST] > 0 else 0
    cap = lim[L_HOST]
    if local:
        tag = np.empty(nk, np.uint8)
        rank = np.empty(nk, np.int64)
        ppos = np.empty(nk, np.int64)
        ap = np.empty(nk + 4, np.int64)
        prot = np.empty(nk, np.int64)
    else:
        tag = np.zeros(nk, np.uint8)
        rank = np.zeros(nk, np.int64)
        ppos = np.full(nk, -1, np.int64)
        ap = np.full(nk + 4, -1, np.int64)
        prot = np.zeros(nk, np.int64)
    hsz = 0
    if nk > 0:
        hsz = 2 * min(cap, nk) + 4 * int(nfull.max()) + 64
    hk = np.empty(hsz, np.int64)
    hid = np.empty(hsz, np.int64)
    hs = np.zeros(8, np.int64)
    plist = np.empty(nk, np.int64)
    an = np.empty(nk + 4, np.int64)
    for t in range(4):
        an[nk + t] = nk + t
        ap[nk + t] = nk + t
    tgt = np.zeros(1, np.float64)
    scratch = np.empty(nk + 1, np.int64)
    off = (tag, rank, hk, hid, hs, plist, ppos, an, ap, tgt, kflag, prot, rseen, rfail,
           scratch, cnt)
    return (keys, pstart, hitcap, nfull, nblocks, rb_start, lim, bkey, bref, kfirst, bnext, ln,
            lp, anon, rblk, st, off)


@nb.njit(cache=True, nogil=True)
def simulate_vllm(keys, pstart, hitcap, nfull, nblocks, prompt, outtok, lim, sched, coef,
                  tpot_b, out, cnt, areas, route, n_inst):  # pragma: no cover - compiled
    """Run :func:`~toolkit.replay.tiers.loop.event_loop` over ``n_inst`` vLLM block pools.

    ``lim[L_DEV]`` is the usable blocks (the pool less the null block), ``lim[L_BT]`` the
    block size, ``lim[L_HOST]`` the CPU tier in blocks (0: none), ``lim[L_HPOL]`` its
    policy; ``keys`` the full blocks' dense hash ids, ``nfull`` how many per request,
    ``nblocks`` the blocks each request holds while it runs. Returns the makespan.
    """
    usable = lim[L_DEV]
    R = prompt.shape[0]
    rb_start = np.zeros(R, np.int64)
    tot = 0
    for r in range(R):
        rb_start[r] = tot
        if nblocks[r] <= usable:
            tot += nblocks[r]
    rblk = np.empty(tot + 1, np.int64)
    nk = lim[L_KEYS] if lim[L_HOST] > 0 else 0
    kflag = np.zeros(keys.shape[0] if nk > 0 else 0, np.uint8)
    rseen = np.zeros(R, np.int64)
    rfail = np.zeros(R, np.uint8)
    if n_inst == 1:  # a 1-tuple: the loop's state is loop invariant
        c0 = _state(keys, pstart, hitcap, nfull, nblocks, lim, rb_start, rblk, kflag, rseen,
                    rfail, cnt, False)
        return event_loop(admit, release, peek, fresh, (c0,), (c0[15],), prompt, outtok,
                          sched, route, coef, tpot_b, out, cnt, areas)
    lkeys = route[8]
    c0 = _state(lkeys, pstart, hitcap, nfull, nblocks, lim, rb_start, rblk, kflag, rseen,
                rfail, cnt, True)
    cs = [c0]
    szs = [c0[15]]
    for _ in range(1, n_inst):
        c = _state(lkeys, pstart, hitcap, nfull, nblocks, lim, rb_start, rblk, kflag, rseen,
                   rfail, cnt, True)
        cs.append(c)
        szs.append(c[15])
    return event_loop(admit, release, peek, fresh, cs, szs, prompt, outtok, sched, route, coef,
                      tpot_b, out, cnt, areas)
