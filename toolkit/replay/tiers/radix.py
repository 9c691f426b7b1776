"""Compiled tier replay with SGLang's radix-cache semantics (``--radix-semantics sglang``).

The device tier is SGLang 0.5.23's ``RadixCache`` (``mem_cache/radix_cache.py``,
``evict_policy.py``), node for node; ``benchmarks/sglang_peer.py`` drives SGLang's own
class and ``tests/test_tiers_sglang.py`` checks this kernel against it request by request:

* keys are page-aligned: ``match_prefix`` and ``insert`` cut the prompt to whole pages,
  so a partial last page is neither hit nor cached (it only occupies a slot while its
  request runs);
* the tree is made of nodes (runs of pieces): ``insert`` adds the unmatched tail as one
  new leaf; a match ending inside a node splits it (``_split_node``: the prefix becomes a
  new node with a fresh stamp, a copy of the hit count and lock);
* ``_match_prefix_helper`` stamps every node on the path, including the node it is about
  to split, so the unmatched tail of a split node counts as just used;
* ``insert`` stamps the path again and adds 1 to each node's hit count;
* ``evict(n)`` pops unlocked leaves by priority and frees each whole until at least
  ``n`` tokens are freed (it overshoots); a parent left childless and unlocked joins;
* priority = last access (lru, priority: traces carry no request priority), (hits, last
  access) (lfu), (hits >= 2, last access) (sglang-slru);
* a running request locks its path (``inc_lock_ref``); locked nodes are never evicted.

Pieces: the pieces of a trace (see :func:`toolkit.replay.tiers.pieces.radix_pieces`) are the
stretches of a hashed block between cut points where some prompt's page-aligned end
falls; every node boundary SGLang can create falls on a piece boundary, so the tree over
pieces is the token-level tree, with far fewer entries at page size 1.

Host (L2), checked against SGLang's own ``UnifiedRadixCache`` + ``HybridCacheController``
(``benchmarks/sglang_peer.py --host-tokens``, ``tests/test_tiers_sglang_host.py``: GPU and host
hits equal on every request of the bundled trace's six configurations;
``benchmarks/engine_fuzz.py --engine sglang-host`` on random traces), node for node as
``unified_tree_core.py`` and ``components/full.py`` do it:

* a device leaf evicted with a host copy (write_back: one made now) is *demoted*: the node
  stays in the tree, host-only, with its bounds and last access; one without is deleted;
* host-only nodes are matched after the device run; a match ending inside one splits it;
  every node on the matched path (host ones too) is stamped;
* a host run of at least 10 tokens (``load_back_threshold``) is loaded back whole into its
  own nodes (device room made for it first, ``load_back``), else it is re-filled from the
  request's fresh KV by ``insert`` (``_unevict_node_on_insert``), node by node;
* ``insert`` stamps and counts each node of the path (write_back counts no hits:
  ``_inc_hit_count_and_check`` returns first, which lfu and sglang-slru eviction see) and
  backs up a node without a host copy once its count reaches the threshold (1 for
  write_through, ``write_through_threshold`` for selective), then the new leaf likewise;
* a backup takes the whole node (``_execute_kv_backup``): if the free host room is short,
  ``evict_host(shortfall)`` frees whole host leaves (host-only, childless, unlocked) by
  priority (last access), a parent joining when its last child goes, overshooting; under
  write_back host copies of nodes also on the device go first
  (``_reclaim_full_host_duplicates``: in registration order, evictable device leaves
  spared in a first pass); if still short the node is not backed up.

Not modelled: a device leaf deleted without a host copy leaves its host-only children
detached in SGLang (holding host room until evicted, never matched again); here they stay
evictable alike, but a new leaf over their pieces frees them, and one over the deleted
node's pieces alone makes them matchable again. Storage (L3) is derived from the source
only: pieces written with their host copies, found after the host run. Capacities and all
sizes are tokens.
"""

from __future__ import annotations

import numpy as np

from toolkit.replay.tiers.loop import (
    C_BFAIL,
    C_DEV_EV,
    C_DROP,
    C_HOST_EV,
    C_HOST_W,
    C_LOAD_H,
    C_LOAD_S,
    C_OVER,
    C_PEAK_D,
    C_PEAK_H,
    C_STO_EV,
    C_STO_W,
    L_DEV,
    L_HOST,
    L_KEYS,
    L_POLICY,
    L_SEL,
    L_STO,
    L_WRITE,
    _push,
    _unlink,
    event_loop,
)
from toolkit.runtime.aot import nb

# policy codes: 0 lru / priority, 1 lfu, 2 sglang-slru (SLRUStrategy(protected_threshold=2))
SLRU_PROTECTED_HITS = 2
# UnifiedRadixCache.init_hicache: load_back_threshold = 10; _load_back_transfers skips a
# host run of fewer tokens (it is recomputed)
LOAD_BACK_MIN_TOKENS = 10
# indices into the state vector ``st`` (tokens unless said); S_USED and S_HOST are the
# loop's SZ_DEV and SZ_HOST
S_USED, S_EVICTABLE, S_HOST, S_HHEAP, S_STO, S_CLOCK, S_HEAP = 0, 1, 2, 3, 4, 5, 6


@nb.njit(cache=True, nogil=True)
def _prio(v, policy, hits):  # pragma: no cover - compiled
    if policy == 1:
        return np.int64(hits[v])
    if policy == 2:
        return np.int64(1 if hits[v] >= SLRU_PROTECTED_HITS else 0)
    return np.int64(0)


@nb.njit(cache=True, nogil=True)
def _lpush(v, policy, hits, stamp, hk, hs, hid, st, si):  # pragma: no cover - compiled
    """Push node ``v`` (a leaf) with its current priority into the heap whose size is
    ``st[si]``; stale entries stay and are skipped on pop."""
    k = _prio(v, policy, hits)
    t = stamp[v]
    j = st[si]
    while j > 0:
        p = (j - 1) >> 1
        if hk[p] < k or (hk[p] == k and (hs[p] < t or (hs[p] == t and hid[p] < v))):
            break
        hk[j] = hk[p]
        hs[j] = hs[p]
        hid[j] = hid[p]
        j = p
    hk[j] = k
    hs[j] = t
    hid[j] = v
    st[si] += 1


@nb.njit(cache=True, nogil=True)
def _lpop(hk, hs, hid, st, si):  # pragma: no cover - compiled
    """Pop the lowest (key, stamp, node) leaf. Not :func:`loop._hpop`: that heap orders
    two keys (time, id), this one three, and a comparator passed in would sit on every
    sift step of every eviction."""
    n = st[si] - 1
    k = hk[n]
    t = hs[n]
    v = hid[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and (hk[c + 1] < hk[c] or (hk[c + 1] == hk[c] and (
                hs[c + 1] < hs[c] or (hs[c + 1] == hs[c] and hid[c + 1] < hid[c])))):
            c += 1
        if k < hk[c] or (k == hk[c] and (t < hs[c] or (t == hs[c] and v < hid[c]))):
            break
        hk[j] = hk[c]
        hs[j] = hs[c]
        hid[j] = hid[c]
        j = c
    if n > 0:
        hk[j] = k
        hs[j] = t
        hid[j] = v
    st[si] = n


@nb.njit(cache=True, nogil=True)
def _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt):  # pragma: no cover - compiled
    if on_sto[k]:
        _unlink(sn, sp, k)
        _push(sn, sp, n, k)
        return
    while st[S_STO] + ktok[k] > sto_cap and sp[n] != n:
        v = sp[n]
        _unlink(sn, sp, v)
        on_sto[v] = 0
        st[S_STO] -= ktok[v]
        cnt[C_STO_EV] += ktok[v]
    if st[S_STO] + ktok[k] > sto_cap:
        return
    on_sto[k] = 1
    _push(sn, sp, n, k)
    st[S_STO] += ktok[k]
    cnt[C_STO_W] += ktok[k]


@nb.njit(cache=True, nogil=True)
def _is_hleaf(v, is_tail, on_dev, on_host, kids, lock):  # pragma: no cover - compiled
    """``_is_host_leaf``: a host-only node with no children, unlocked."""
    return (is_tail[v] != 0 and on_dev[v] == 0 and on_host[v] != 0 and kids[v] == 0
            and lock[v] == 0)


@nb.njit(cache=True, nogil=True)
def _forget(v, hn, hp):  # pragma: no cover - compiled
    """Node ``v`` leaves the tree: off the write-back duplicate list too (its piece id may
    name another node later; SGLang's ids are never reused)."""
    if hp[v] != -1:
        _unlink(hn, hp, v)


@nb.njit(cache=True, nogil=True)
def _register_dup(v, hn, hp, n):  # pragma: no cover - compiled
    """``full_host_duplicates.setdefault``: join at the end unless already listed."""
    if hp[v] == -1:
        _push(hn, hp, n, v)


@nb.njit(cache=True, nogil=True)
def _drop_host(v, ktok, head, down, on_host, st, cnt):  # pragma: no cover - compiled
    nt = 0
    q = head[v]
    while True:
        on_host[q] = 0
        nt += ktok[q]
        if q == v:
            break
        q = down[q]
    st[S_HOST] -= nt
    cnt[C_HOST_EV] += nt
    return nt


@nb.njit(cache=True, nogil=True)
def _host_evict(need, c, policy, write, cnt):  # pragma: no cover - compiled
    """``evict_host(need)``: under write_back first free host copies of nodes also on the
    device (``_reclaim_full_host_duplicates``, oldest registration first, sparing
    evictable device leaves in a first pass), then whole host leaves, lowest priority
    (last access) first, until at least ``need`` tokens are freed. Returns the freed."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    n = lim[L_KEYS]
    freed = 0
    if write == 2:
        for spare in range(2):
            if freed >= need:
                break
            v = hp[n]
            while v != n and freed < need:
                nv = hp[v]
                if not (is_tail[v] and on_dev[v] and on_host[v]):
                    _unlink(hn, hp, v)  # stale entry
                elif spare == 0 and lock[v] == 0 and nchild[v] == 0:
                    pass  # an evictable device leaf: its demotion is imminent
                else:
                    freed += _drop_host(v, ktok, head, down, on_host, st, cnt)
                    _unlink(hn, hp, v)
                v = nv
    while freed < need and st[S_HHEAP] > 0:
        k0 = gk[0]
        t0 = gs[0]
        v = gid[0]
        _lpop(gk, gs, gid, st, S_HHEAP)
        if not (_is_hleaf(v, is_tail, on_dev, on_host, kids, lock) and stamp[v] == t0
                and _prio(v, policy, hits) == k0):
            continue
        freed += _drop_host(v, ktok, head, down, on_host, st, cnt)
        is_tail[v] = 0
        _forget(v, hn, hp)
        pt = par[head[v]]
        if pt >= 0 and is_tail[pt]:
            kids[pt] -= 1
            if _is_hleaf(pt, is_tail, on_dev, on_host, kids, lock):
                _lpush(pt, policy, hits, stamp, gk, gs, gid, st, S_HHEAP)
    return freed


@nb.njit(cache=True, nogil=True)
def _backup(v, c, policy, write, host_cap, sto_cap, cnt):  # pragma: no cover - compiled
    """Back node ``v`` up to host whole (``_execute_kv_backup``): make room for all of it
    at once, or fail (the node stays device-only). Returns whether it has a host copy."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    if on_host[v]:
        return True
    if host_cap == 0:
        return False
    nt = ntok[v]
    avail = host_cap - st[S_HOST]
    if avail < nt:
        if _host_evict(nt - avail, c, policy, write, cnt) < nt - avail:
            cnt[C_BFAIL] += nt
            return False
    n = lim[L_KEYS]
    q = head[v]
    while True:
        on_host[q] = 1
        cnt[C_HOST_W] += ktok[q]
        if sto_cap > 0:
            _sto_write(q, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
        if q == v:
            break
        q = down[q]
    st[S_HOST] += nt
    if st[S_HOST] > cnt[C_PEAK_H]:
        cnt[C_PEAK_H] = st[S_HOST]
    return True


@nb.njit(cache=True, nogil=True)
def _evict(shortfall, c, policy, write, host_cap, sto_cap, cnt):  # pragma: no cover
    """SGLang ``evict(shortfall)``: free whole unlocked device leaves, lowest priority
    first, until at least ``shortfall`` tokens are freed or none is left. A leaf with a
    host copy (write_back: one made now) is demoted and stays in the tree as a host-only
    node; one without is deleted."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    freed = 0
    while freed < shortfall and st[S_HEAP] > 0:
        k0 = hk[0]
        t0 = hs[0]
        v = hid[0]
        _lpop(hk, hs, hid, st, S_HEAP)
        if not (on_dev[v] and is_tail[v] and lock[v] == 0 and nchild[v] == 0
                and stamp[v] == t0 and _prio(v, policy, hits) == k0):
            continue  # stale entry
        backed = on_host[v] != 0
        if not backed and write == 2 and host_cap > 0:
            backed = _backup(v, c, policy, write, host_cap, sto_cap, cnt)
        q = head[v]
        while True:
            on_dev[q] = 0
            cnt[C_DEV_EV] += ktok[q]
            if not backed:
                cnt[C_DROP] += ktok[q]
            if q == v:
                break
            q = down[q]
        freed += ntok[v]
        st[S_USED] -= ntok[v]
        st[S_EVICTABLE] -= ntok[v]
        pt = par[head[v]]
        if backed:
            if kids[v] == 0:
                _lpush(v, policy, hits, stamp, gk, gs, gid, st, S_HHEAP)
        else:
            is_tail[v] = 0
            _forget(v, hn, hp)
            if pt >= 0:
                kids[pt] -= 1
        if pt >= 0:
            nchild[pt] -= 1
            if nchild[pt] == 0 and lock[pt] == 0:
                _lpush(pt, policy, hits, stamp, hk, hs, hid, st, S_HEAP)
    return freed


@nb.njit(cache=True, nogil=True)
def _tail_below(p, is_tail, down):  # pragma: no cover - compiled
    while not is_tail[p]:
        p = down[p]
    return p


@nb.njit(cache=True, nogil=True)
def _admit(r, c, cnt, res):  # pragma: no cover - compiled
    """Match, lock, evict, insert one request. Returns False (no side effect) when it must
    wait for a finish; ``res`` gets (device, host, storage) hit tokens."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    n = lim[L_KEYS]
    dev_cap = lim[L_DEV]
    host_cap = lim[L_HOST]
    sto_cap = lim[L_STO]
    policy = lim[L_POLICY]
    write = lim[L_WRITE]
    sel = lim[L_SEL]
    b0 = pstart[r]
    m = plen[r]
    total = trans[r]
    for i in range(m):
        total += ktok[keys[b0 + i]]
    res[0] = 0
    res[1] = 0
    res[2] = 0
    if total > dev_cap:
        cnt[C_OVER] += 1
        return True
    d = 0
    while d < m and on_dev[keys[b0 + d]]:
        d += 1
    # what the match would lock that is evictable now
    own = 0
    acc = 0
    hit = 0
    for i in range(d):
        k = keys[b0 + i]
        acc += ktok[k]
        hit += ktok[k]
        if is_tail[k]:
            if lock[k] == 0:
                own += acc
            acc = 0
    if acc > 0 and lock[_tail_below(keys[b0 + d - 1], is_tail, down)] == 0:
        own += acc
    need = total - hit
    if need > (dev_cap - st[S_USED]) + (st[S_EVICTABLE] - own):
        return False
    # the match runs on through host-only nodes (HiCache: device, then host)
    e = d
    while e < m and on_host[keys[b0 + e]]:
        e += 1
    # _match_prefix_helper: stamp the path (incl. the node about to split), split once
    st[S_CLOCK] += 1
    t_match = st[S_CLOCK]
    for i in range(e):
        k = keys[b0 + i]
        if is_tail[k]:
            stamp[k] = t_match
            if _is_hleaf(k, is_tail, on_dev, on_host, kids, lock):
                # SGLang keys its host-leaf heap by last access when it evicts
                _lpush(k, policy, hits, stamp, gk, gs, gid, st, S_HHEAP)
    if e > 0 and not is_tail[keys[b0 + e - 1]]:
        cc = _tail_below(keys[b0 + e - 1], is_tail, down)
        stamp[cc] = t_match
        if on_dev[cc] and lock[cc] == 0 and nchild[cc] == 0:
            _lpush(cc, policy, hits, stamp, hk, hs, hid, st, S_HEAP)
        if _is_hleaf(cc, is_tail, on_dev, on_host, kids, lock):
            _lpush(cc, policy, hits, stamp, gk, gs, gid, st, S_HHEAP)
        x = keys[b0 + e - 1]  # the new node is the prefix head[cc] .. x
        nt = 0
        i = e - 1
        while True:
            nt += ktok[keys[b0 + i]]
            if keys[b0 + i] == head[cc]:
                break
            i -= 1
        is_tail[x] = 1
        head[x] = head[cc]
        head[cc] = down[x]
        ntok[x] = nt
        ntok[cc] -= nt
        st[S_CLOCK] += 2  # TreeNode(): last_access_time, creation_time
        stamp[x] = st[S_CLOCK] - 1
        hits[x] = hits[cc]
        lock[x] = lock[cc]
        nchild[x] = 1 if on_dev[cc] else 0
        kids[x] = 1
        if write == 2 and on_dev[x] and on_host[x]:
            _register_dup(x, hn, hp, n)
    # inc_lock_ref(last matched device node)
    for i in range(d):
        k = keys[b0 + i]
        if is_tail[k]:
            if lock[k] == 0:
                st[S_EVICTABLE] -= ntok[k]
            lock[k] += 1
    host_run = 0
    for i in range(d, e):
        host_run += ktok[keys[b0 + i]]
    loaded = 0
    if host_run >= LOAD_BACK_MIN_TOKENS:
        # load_back: the host run is locked, device room made for all of it, then it is
        # loaded in place (its nodes keep their bounds and stamps) or not at all
        for i in range(d, e):
            k = keys[b0 + i]
            if is_tail[k]:
                lock[k] += 1
        avail = dev_cap - st[S_USED]
        if avail < host_run:
            _evict(host_run - avail, c, policy, write, host_cap, sto_cap, cnt)
        if dev_cap - st[S_USED] >= host_run:
            loaded = host_run
            for i in range(d, e):
                k = keys[b0 + i]
                on_dev[k] = 1
                cnt[C_LOAD_H] += ktok[k]
                if sto_cap > 0 and on_sto[k]:
                    _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
                if is_tail[k]:
                    nchild[k] = 0
                    pt = par[head[k]]
                    if pt >= 0:
                        nchild[pt] += 1
            st[S_USED] += host_run
            res[1] = host_run
        else:
            for i in range(d, e):
                k = keys[b0 + i]
                if is_tail[k]:
                    lock[k] -= 1
                    if _is_hleaf(k, is_tail, on_dev, on_host, kids, lock):
                        _lpush(k, policy, hits, stamp, gk, gs, gid, st, S_HHEAP)
    short = (total - hit - loaded) - (dev_cap - st[S_USED])
    if short > 0:
        _evict(short, c, policy, write, host_cap, sto_cap, cnt)
    # _insert_helper: walk the path's nodes (stamp, re-fill host-only ones from the fresh
    # KV, count a hit, back up what has reached the threshold), then one new leaf for the
    # rest. HiCache's write_back counts no hits (_inc_hit_count_and_check returns before
    # the increment), which lfu and sglang-slru eviction see
    nocount = write == 2 and host_cap > 0
    thr = 1 if write == 0 else sel
    backs = write != 2 and host_cap > 0
    st[S_CLOCK] += 1
    t_ins = st[S_CLOCK]
    i = 0
    while i < m:
        k = keys[b0 + i]
        if not (on_dev[k] or on_host[k]):
            break
        t = _tail_below(k, is_tail, down)
        j = i
        while keys[b0 + j] != t:
            j += 1
        stamp[t] = t_ins
        if not on_dev[t]:  # a host-only node the load-back declined: re-filled
            for q in range(i, j + 1):
                on_dev[keys[b0 + q]] = 1
            st[S_USED] += ntok[t]
            nchild[t] = 0
            lock[t] += 1  # held by the request like the rest of its path
            pt = par[head[t]]
            if pt >= 0:
                nchild[pt] += 1
            if write == 2:
                _register_dup(t, hn, hp, n)
        if not nocount:
            hits[t] += 1
        if backs and hits[t] >= thr and not on_host[t]:
            _backup(t, c, policy, write, host_cap, sto_cap, cnt)
        i = j + 1
    if write == 2 and loaded > 0:  # finish_load_back: the loaded nodes, deepest first
        for q in range(e - 1, d - 1, -1):
            k = keys[b0 + q]
            if is_tail[k] and on_dev[k] and on_host[k]:
                _register_dup(k, hn, hp, n)
    s_ = i
    if sto_cap > 0:
        while s_ < m and on_sto[keys[b0 + s_]]:
            s_ += 1
    if i < m:
        leaf = keys[b0 + m - 1]
        nt = 0
        for q in range(i, m):
            k = keys[b0 + q]
            if on_host[k]:  # a piece of a detached host-only node: dropped
                on_host[k] = 0
                st[S_HOST] -= ktok[k]
                cnt[C_HOST_EV] += ktok[k]
            on_dev[k] = 1
            nt += ktok[k]
            if q < m - 1:
                down[k] = keys[b0 + q + 1]
                is_tail[k] = 0
            if q < s_:
                _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
                cnt[C_LOAD_S] += ktok[k]
                res[2] += ktok[k]
        is_tail[leaf] = 1
        head[leaf] = keys[b0 + i]
        ntok[leaf] = nt
        st[S_CLOCK] += 2
        stamp[leaf] = st[S_CLOCK] - 1
        hits[leaf] = 0 if nocount else 1
        lock[leaf] = 1  # the running request holds its new leaf too
        nchild[leaf] = 0
        kids[leaf] = 0
        if i > 0:
            nchild[keys[b0 + i - 1]] += 1
            kids[keys[b0 + i - 1]] += 1
        st[S_USED] += nt
        if backs and (hits[leaf] >= thr or s_ > i):
            _backup(leaf, c, policy, write, host_cap, sto_cap, cnt)
    st[S_USED] += trans[r]
    if st[S_USED] > cnt[C_PEAK_D]:
        cnt[C_PEAK_D] = st[S_USED]
    res[0] = hit
    return True


@nb.njit(cache=True, nogil=True)
def _release(r, keys, pstart, plen, ktok, trans, dev_cap, policy, is_tail, ntok, stamp,
             hits, lock, nchild, hk, hs, hid, st):  # pragma: no cover - compiled
    """dec_lock_ref on a finished request's path; its partial page and decode go."""
    b0 = pstart[r]
    m = plen[r]
    total = trans[r]
    for i in range(m):
        total += ktok[keys[b0 + i]]
    if total > dev_cap:
        return  # oversize: held nothing
    for i in range(m - 1, -1, -1):
        k = keys[b0 + i]
        if is_tail[k]:
            lock[k] -= 1
            if lock[k] == 0:
                st[S_EVICTABLE] += ntok[k]
                if nchild[k] == 0:
                    _lpush(k, policy, hits, stamp, hk, hs, hid, st, S_HEAP)
    st[S_USED] -= trans[r]


@nb.njit(cache=True, nogil=True, inline="always")
def admit(c, r, res, cnt):  # pragma: no cover - compiled
    """The loop's admission hook: :func:`_admit` over the state tuple ``c``."""
    return _admit(r, c, cnt, res)


@nb.njit(cache=True, nogil=True, inline="always")
def release(c, r):  # pragma: no cover - compiled
    """The loop's finish hook: :func:`_release` over the state tuple ``c``."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    _release(r, keys, pstart, plen, ktok, trans, lim[L_DEV], lim[L_POLICY], is_tail, ntok,
             stamp, hits, lock, nchild, hk, hs, hid, st)


@nb.njit(cache=True, nogil=True, inline="always")
def peek(c, r, lids, m):  # pragma: no cover - compiled
    """Device-prefix tokens of request ``r`` (first ``m`` keys ``lids``) now."""
    ktok, on_dev = c[3], c[7]
    t = 0
    d = 0
    while d < m and on_dev[lids[d]]:
        t += ktok[lids[d]]
        d += 1
    return t


@nb.njit(cache=True, nogil=True, inline="always")
def fresh(c, k, tok, parent):  # pragma: no cover - compiled
    """Initialise local piece ``k`` of an instance (its arrays are allocated unwritten)."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp, sn, sp,
     scratch, st) = c
    ktok[k] = tok
    par[k] = parent
    on_dev[k] = 0
    is_tail[k] = 0
    down[k] = -1
    head[k] = -1
    ntok[k] = 0
    stamp[k] = 0
    hits[k] = 0
    lock[k] = 0
    nchild[k] = 0
    kids[k] = 0
    on_host[k] = 0
    on_sto[k] = 0
    hp[k] = -1
    sp[k] = -1


@nb.njit(cache=True, nogil=True)
def _state(keys, pstart, plen, ktok, par, trans, lim, R, local):  # pragma: no cover
    """One instance's empty cache: the state tuple the hooks unpack. ``local``: its keys
    are numbered per instance and each is initialised by :func:`fresh` when first seen, so
    the per-key arrays are allocated unwritten (``ktok``/``par`` become its own)."""
    n = lim[L_KEYS]
    if local:
        ktok = np.empty(n, np.int64)
        par = np.empty(n, np.int64)
        on_dev = np.empty(n, np.uint8)
        is_tail = np.empty(n, np.uint8)
        down = np.empty(n, np.int32)
        head = np.empty(n, np.int32)
        ntok = np.empty(n, np.int64)
        stamp = np.empty(n, np.int64)
        hits = np.empty(n, np.int32)
        lock = np.empty(n, np.int32)
        nchild = np.empty(n, np.int32)
        kids = np.empty(n, np.int32)
        on_host = np.empty(n, np.uint8)
        on_sto = np.empty(n, np.uint8)
        hp = np.empty(n + 1, np.int32)
        sp = np.empty(n + 1, np.int32)
    else:
        on_dev = np.zeros(n, np.uint8)
        is_tail = np.zeros(n, np.uint8)
        down = np.full(n, -1, np.int32)
        head = np.full(n, -1, np.int32)
        ntok = np.zeros(n, np.int64)
        stamp = np.zeros(n, np.int64)
        hits = np.zeros(n, np.int32)
        lock = np.zeros(n, np.int32)
        nchild = np.zeros(n, np.int32)
        kids = np.zeros(n, np.int32)
        on_host = np.zeros(n, np.uint8)
        on_sto = np.zeros(n, np.uint8)
        hp = np.full(n + 1, -1, np.int32)
        sp = np.full(n + 1, -1, np.int32)
    hn = np.empty(n + 1, np.int32)
    hn[n] = n
    hp[n] = n
    sn = np.empty(n + 1, np.int32)
    sn[n] = n
    sp[n] = n
    # lazy heaps, sized by their total pushes: per request a release, a split, a match's
    # host leaf and a declined load; per eviction its parent and (host) the demoted node.
    # Device evictions are bounded by device residencies: one new leaf per request, and,
    # with a host tier, each node a request loads or re-fills, at most its pieces
    hcap = 4 * R + 16 + (keys.shape[0] + 4 * R if lim[L_HOST] > 0 else 0)
    hk = np.empty(hcap, np.int64)
    hs = np.empty(hcap, np.int64)
    hid = np.empty(hcap, np.int32)
    gcap = hcap if lim[L_HOST] > 0 else 1
    gk = np.empty(gcap, np.int64)
    gs = np.empty(gcap, np.int64)
    gid = np.empty(gcap, np.int32)
    scratch = np.empty(n + 1, np.int32)
    st = np.zeros(8, np.int64)
    return (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok,
            stamp, hits, lock, nchild, kids, hk, hs, hid, gk, gs, gid, on_host, on_sto, hn, hp,
            sn, sp, scratch, st)


@nb.njit(cache=True, nogil=True)
def simulate_radix(keys, pstart, plen, ktok, par, trans, prompt, outtok, lim, sched, coef,
                   tpot_b, out, cnt, areas, route, n_inst, heap_r):  # pragma: no cover
    """Run :func:`~toolkit.replay.tiers.loop.event_loop` over one radix device tier.

    Capacities in ``lim`` are tokens (storage 0 disables it); ``trans`` is each
    request's slots outside the tree (partial page, decode); ``heap_r`` the requests the
    lazy heaps are sized for. The instance is a 1-tuple, so the loop's state is loop
    invariant (:func:`simulate_radix_cluster` runs ``n_inst`` > 1 from a list). Returns
    the makespan.
    """
    c0 = _state(keys, pstart, plen, ktok, par, trans, lim, heap_r, False)
    return event_loop(admit, release, peek, fresh, (c0,), (c0[30],), prompt, outtok, sched,
                      route, coef, tpot_b, out, cnt, areas)


@nb.njit(cache=True, nogil=True)
def simulate_radix_cluster(keys, pstart, plen, ktok, par, trans, prompt, outtok, lim, sched,
                           coef, tpot_b, out, cnt, areas, route, n_inst,
                           heap_r):  # pragma: no cover - compiled
    """:func:`simulate_radix` over ``n_inst`` instances behind the router: each numbers its
    pieces locally (the caches read ``route``'s local key array, see the loop) and its
    lazy heaps are sized for ``heap_r`` requests (all of them: allocated unwritten, an
    instance touches what it pushes)."""
    lkeys = route[8]
    c0 = _state(lkeys, pstart, plen, ktok, par, trans, lim, heap_r, True)
    cs = [c0]
    szs = [c0[30]]
    for _ in range(1, n_inst):
        c = _state(lkeys, pstart, plen, ktok, par, trans, lim, heap_r, True)
        cs.append(c)
        szs.append(c[30])
    return event_loop(admit, release, peek, fresh, cs, szs, prompt, outtok, sched, route, coef,
                      tpot_b, out, cnt, areas)
