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
(``benchmarks/sglang_peer.py --host-tokens``, ``tests/test_tiers_sglang_host.py``: GPU hits
equal on every request, host hits on all but 1-8 of 12,031 per configuration), and storage
(L3), derived from the source only, at piece granularity, not node granularity (SGLang
evicts whole host-leaf nodes by last access; that is where the listed requests differ;
write_back's reclaim of host copies of device-resident nodes is not modelled): device eviction
demotes each piece of the victim (kept if it has a host copy;
write_back copies it now; else it is dropped); write_through copies every new
piece to host, write_through_selective a node's pieces once its hit count (as
``insert`` counts it) reaches the threshold; host-only pieces form an LRU, deepest
piece of a victim first; a request's host run follows its device run and is loaded back
into the new leaf unless it is shorter than 10 tokens (``load_back_threshold``: then it
is recomputed and its host copies stay), and is out of the host LRU while its request is
admitted (the scheduler host-locks it); under write_back with a host tier no node's hit
count rises (``_inc_hit_count_and_check`` returns first), so lfu and sglang-slru order by
last access alone there. Capacities and all sizes are tokens.
"""

from __future__ import annotations

import numba as nb
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

# policy codes: 0 lru / priority, 1 lfu, 2 sglang-slru (SLRUStrategy(protected_threshold=2))
SLRU_PROTECTED_HITS = 2
# UnifiedRadixCache.init_hicache: load_back_threshold = 10; _load_back_transfers skips a
# host run of fewer tokens (it is recomputed)
LOAD_BACK_MIN_TOKENS = 10
# indices into the state vector ``st`` (tokens unless said); S_USED and S_HOST are the
# loop's SZ_DEV and SZ_HOST
S_USED, S_EVICTABLE, S_HOST, S_HOST_EV, S_STO, S_CLOCK, S_HEAP = 0, 1, 2, 3, 4, 5, 6


@nb.njit(cache=True, nogil=True)
def _prio(v, policy, hits):  # pragma: no cover - compiled
    if policy == 1:
        return np.int64(hits[v])
    if policy == 2:
        return np.int64(1 if hits[v] >= SLRU_PROTECTED_HITS else 0)
    return np.int64(0)


@nb.njit(cache=True, nogil=True)
def _lpush(v, policy, hits, stamp, hk, hs, hid, st):  # pragma: no cover - compiled
    """Push node ``v`` (an unlocked leaf) with its current priority; stale entries stay
    and are skipped on pop."""
    k = _prio(v, policy, hits)
    t = stamp[v]
    j = st[S_HEAP]
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
    st[S_HEAP] += 1


@nb.njit(cache=True, nogil=True)
def _lpop(hk, hs, hid, st):  # pragma: no cover - compiled
    """Pop the lowest (key, stamp, node) leaf. Not :func:`loop._hpop`: that heap orders
    two keys (time, id), this one three, and a comparator passed in would sit on every
    sift step of every eviction."""
    n = st[S_HEAP] - 1
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
    st[S_HEAP] = n


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
def _host_write(k, ktok, on_dev, on_host, on_sto, hn, hp, sn, sp, n, host_cap, sto_cap,
                st, cnt):  # pragma: no cover - compiled
    """Give piece ``k`` a host copy, evicting host-only pieces (LRU); False if impossible."""
    if on_host[k]:
        return True
    if host_cap == 0:
        return False
    while st[S_HOST] + ktok[k] > host_cap and st[S_HOST_EV] > 0:
        v = hp[n]
        _unlink(hn, hp, v)
        st[S_HOST_EV] -= ktok[v]
        on_host[v] = 0
        st[S_HOST] -= ktok[v]
        cnt[C_HOST_EV] += ktok[v]
    if st[S_HOST] + ktok[k] > host_cap:
        cnt[C_BFAIL] += ktok[k]
        return False
    on_host[k] = 1
    st[S_HOST] += ktok[k]
    cnt[C_HOST_W] += ktok[k]
    if st[S_HOST] > cnt[C_PEAK_H]:
        cnt[C_PEAK_H] = st[S_HOST]
    if not on_dev[k]:
        _push(hn, hp, n, k)
        st[S_HOST_EV] += ktok[k]
    if sto_cap > 0:
        _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
    return True


@nb.njit(cache=True, nogil=True)
def _evict(shortfall, policy, write, par, ktok, on_dev, is_tail, down, head, ntok, stamp,
           hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp, sn, sp, n, host_cap,
           sto_cap, scratch, st, cnt):  # pragma: no cover - compiled
    """SGLang ``evict(shortfall)``: free whole unlocked leaves, lowest priority first,
    until at least ``shortfall`` tokens are freed or none is left."""
    freed = 0
    while freed < shortfall and st[S_HEAP] > 0:
        k0 = hk[0]
        t0 = hs[0]
        v = hid[0]
        _lpop(hk, hs, hid, st)
        if not (on_dev[v] and is_tail[v] and lock[v] == 0 and nchild[v] == 0
                and stamp[v] == t0 and _prio(v, policy, hits) == k0):
            continue  # stale entry
        m = 0
        p = head[v]
        while True:
            scratch[m] = p
            m += 1
            if p == v:
                break
            p = down[p]
        for j in range(m - 1, -1, -1):  # deepest piece first into the host LRU
            q = scratch[j]
            on_dev[q] = 0
            cnt[C_DEV_EV] += ktok[q]
            if on_host[q]:
                _push(hn, hp, n, q)
                st[S_HOST_EV] += ktok[q]
            elif write == 2:
                if not _host_write(q, ktok, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                                   host_cap, sto_cap, st, cnt):
                    cnt[C_DROP] += ktok[q]
            else:
                cnt[C_DROP] += ktok[q]
        is_tail[v] = 0
        freed += ntok[v]
        st[S_USED] -= ntok[v]
        st[S_EVICTABLE] -= ntok[v]
        pt = par[head[v]]
        if pt >= 0:
            nchild[pt] -= 1
            if nchild[pt] == 0 and lock[pt] == 0:
                _lpush(pt, policy, hits, stamp, hk, hs, hid, st)
    return freed


@nb.njit(cache=True, nogil=True)
def _tail_below(p, is_tail, down):  # pragma: no cover - compiled
    while not is_tail[p]:
        p = down[p]
    return p


@nb.njit(cache=True, nogil=True)
def _admit(r, keys, pstart, plen, ktok, trans, par, dev_cap, host_cap, sto_cap, policy,
           write, sel, on_dev, is_tail, down, head, ntok, stamp, hits, lock, nchild, hk, hs, hid,
           on_host, on_sto, hn, hp, sn, sp, n, scratch, st, cnt, res):
    # pragma: no cover - compiled
    """Match, lock, evict, insert one request. Returns False (no side effect) when it must
    wait for a finish; ``res`` gets (device, host, storage) hit tokens."""
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
    # _match_prefix_helper: stamp the path (incl. the node about to split), split once
    st[S_CLOCK] += 1
    t_match = st[S_CLOCK]
    for i in range(d):
        k = keys[b0 + i]
        if is_tail[k]:
            stamp[k] = t_match
    if d > 0 and not is_tail[keys[b0 + d - 1]]:
        c = _tail_below(keys[b0 + d - 1], is_tail, down)
        stamp[c] = t_match
        if lock[c] == 0 and nchild[c] == 0:
            _lpush(c, policy, hits, stamp, hk, hs, hid, st)
        x = keys[b0 + d - 1]  # the new node is the prefix head[c] .. x
        nt = 0
        i = d - 1
        while True:
            nt += ktok[keys[b0 + i]]
            if keys[b0 + i] == head[c]:
                break
            i -= 1
        is_tail[x] = 1
        head[x] = head[c]
        head[c] = down[x]
        ntok[x] = nt
        ntok[c] -= nt
        st[S_CLOCK] += 2  # TreeNode(): last_access_time, creation_time
        stamp[x] = st[S_CLOCK] - 1
        hits[x] = hits[c]
        lock[x] = lock[c]
        nchild[x] = 1
    # inc_lock_ref(last matched node)
    for i in range(d):
        k = keys[b0 + i]
        if is_tail[k]:
            if lock[k] == 0:
                st[S_EVICTABLE] -= ntok[k]
            lock[k] += 1
    # host and storage runs after the device run (HiCache: device, then host, then L3).
    # The scheduler host-locks the matched host node while it admits the request
    # (PrefillAdder._lock_node(best_match_node, lock_host=True), then load_back's
    # inc_host_lock_ref), so the host run leaves the host LRU before the device eviction
    # below, whose write_back backups may evict host leaves to make room.
    h = d
    host_run = 0
    while h < m and on_host[keys[b0 + h]]:
        k = keys[b0 + h]
        if hp[k] != -1:
            _unlink(hn, hp, k)
            st[S_HOST_EV] -= ktok[k]
        host_run += ktok[k]
        h += 1
    h_found = h
    short = need - (dev_cap - st[S_USED])
    if short > 0:
        _evict(short, policy, write, par, ktok, on_dev, is_tail, down, head, ntok, stamp,
               hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp, sn, sp, n, host_cap,
               sto_cap, scratch, st, cnt)
    if host_run < LOAD_BACK_MIN_TOKENS:
        h = d  # too short to load back: recomputed (its host copies stay)
    s_ = h_found
    if sto_cap > 0:
        while s_ < m and on_sto[keys[b0 + s_]]:
            s_ += 1
    # _insert_helper: stamp and count the path, then one new leaf for the rest. HiCache's
    # write_back counts no hits (unified_tree_core._inc_hit_count_and_check returns before
    # the increment when is_write_back), which lfu and sglang-slru eviction see
    nocount = write == 2 and host_cap > 0
    st[S_CLOCK] += 1
    t_ins = st[S_CLOCK]
    for i in range(d):
        k = keys[b0 + i]
        if is_tail[k]:
            stamp[k] = t_ins
            if not nocount:
                hits[k] += 1
            if write == 1 and hits[k] >= sel:  # write_through_selective: back up the node
                q = head[k]
                while True:
                    _host_write(q, ktok, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                                host_cap, sto_cap, st, cnt)
                    if q == k:
                        break
                    q = down[q]
    if d < m:
        leaf = keys[b0 + m - 1]
        nt = 0
        for i in range(d, m):
            k = keys[b0 + i]
            on_dev[k] = 1
            nt += ktok[k]
            if i < m - 1:
                down[k] = keys[b0 + i + 1]
                is_tail[k] = 0
            if i < h:
                if hp[k] != -1:
                    _unlink(hn, hp, k)
                    st[S_HOST_EV] -= ktok[k]
                cnt[C_LOAD_H] += ktok[k]
                res[1] += ktok[k]
                if sto_cap > 0 and on_sto[k]:
                    _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
            elif i < h_found:  # host copy skipped by the load-back threshold
                if hp[k] != -1:
                    _unlink(hn, hp, k)
                    st[S_HOST_EV] -= ktok[k]
            elif i < s_:
                _sto_write(k, ktok, on_sto, sn, sp, n, sto_cap, st, cnt)
                cnt[C_LOAD_S] += ktok[k]
                res[2] += ktok[k]
                _host_write(k, ktok, on_dev, on_host, on_sto, hn, hp, sn, sp, n, host_cap,
                            sto_cap, st, cnt)
            elif write == 0 or (write == 1 and sel <= 1):
                _host_write(k, ktok, on_dev, on_host, on_sto, hn, hp, sn, sp, n, host_cap,
                            sto_cap, st, cnt)
        is_tail[leaf] = 1
        head[leaf] = keys[b0 + d]
        ntok[leaf] = nt
        st[S_CLOCK] += 2
        stamp[leaf] = st[S_CLOCK] - 1
        hits[leaf] = 0 if nocount else 1
        lock[leaf] = 1  # the running request holds its new leaf too
        nchild[leaf] = 0
        if d > 0:
            nchild[keys[b0 + d - 1]] += 1
        st[S_USED] += nt
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
                    _lpush(k, policy, hits, stamp, hk, hs, hid, st)
    st[S_USED] -= trans[r]


@nb.njit(cache=True, nogil=True, inline="always")
def admit(c, r, res, cnt):  # pragma: no cover - compiled
    """The loop's admission hook: :func:`_admit` over the state tuple ``c``."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp, sn, sp, scratch, st) = c
    return _admit(r, keys, pstart, plen, ktok, trans, par, lim[L_DEV], lim[L_HOST],
                  lim[L_STO], lim[L_POLICY], lim[L_WRITE], lim[L_SEL], on_dev, is_tail, down,
                  head, ntok, stamp, hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp,
                  sn, sp, lim[L_KEYS], scratch, st, cnt, res)


@nb.njit(cache=True, nogil=True, inline="always")
def release(c, r):  # pragma: no cover - compiled
    """The loop's finish hook: :func:`_release` over the state tuple ``c``."""
    (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
     hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp, sn, sp, scratch, st) = c
    _release(r, keys, pstart, plen, ktok, trans, lim[L_DEV], lim[L_POLICY], is_tail, ntok,
             stamp, hits, lock, nchild, hk, hs, hid, st)


@nb.njit(cache=True, nogil=True)
def simulate_radix(keys, pstart, plen, ktok, par, trans, prompt, outtok, lim, sched, coef,
                   tpot_b, out, cnt, areas):  # pragma: no cover - compiled
    """Run :func:`~toolkit.replay.tiers.loop.event_loop` over the radix device tier.

    Capacities in ``lim`` are tokens (storage 0 disables it); ``trans`` is each
    request's slots outside the tree (partial page, decode). Returns the makespan.
    """
    n = lim[L_KEYS]
    R = prompt.shape[0]
    on_dev = np.zeros(n, np.uint8)
    is_tail = np.zeros(n, np.uint8)
    down = np.full(n, -1, np.int32)
    head = np.full(n, -1, np.int32)
    ntok = np.zeros(n, np.int64)
    stamp = np.zeros(n, np.int64)
    hits = np.zeros(n, np.int32)
    lock = np.zeros(n, np.int32)
    nchild = np.zeros(n, np.int32)
    on_host = np.zeros(n, np.uint8)
    on_sto = np.zeros(n, np.uint8)
    hn = np.empty(n + 1, np.int32)
    hp = np.full(n + 1, -1, np.int32)
    hn[n] = n
    hp[n] = n
    sn = np.empty(n + 1, np.int32)
    sp = np.full(n + 1, -1, np.int32)
    sn[n] = n
    sp[n] = n
    hcap = 4 * R + 16
    hk = np.empty(hcap, np.int64)
    hs = np.empty(hcap, np.int64)
    hid = np.empty(hcap, np.int32)
    scratch = np.empty(n + 1, np.int32)
    st = np.zeros(8, np.int64)
    c = (keys, pstart, plen, ktok, trans, par, lim, on_dev, is_tail, down, head, ntok, stamp,
         hits, lock, nchild, hk, hs, hid, on_host, on_sto, hn, hp, sn, sp, scratch, st)
    return event_loop(admit, release, c, st, prompt, outtok, sched, coef, tpot_b, out, cnt,
                      areas)
