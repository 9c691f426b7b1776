"""The page-granular device tier (``--radix-semantics page``) and its host/storage tiers.

Everything per page (lookup, lock, evict, demote, load back) happens in the two hooks
:func:`admit` and :func:`release` that :func:`toolkit.replay.tiers.loop.event_loop` calls;
:mod:`toolkit.replay.tiers.run` prepares arrays and reads the results. The rules
(HiCache, sglang ``hiradix_cache.py``; see :mod:`toolkit.replay.tiers` for sources):

* Pages are dense ids of chained hashes: page ``j`` of a request identifies pages
  ``0..j`` too, so the radix tree is implicit and "usable only if its whole prefix is"
  becomes "count the leading run": device pages first, then host, then storage.
* A running request locks all its pages (refcount). Locked pages sit outside the
  eviction lists, so only unlocked pages are ever victims.
* A request releases its pages deepest first, so a parent always ends up more recent
  than its children; the LRU (and LFU, whose counts are monotone along a path) victim
  among unlocked pages is therefore always a leaf, as in HiCache's leaf-only eviction.
* Device eviction demotes: a page with a host copy stays on host (and becomes
  host-evictable); write_back copies it to host now; otherwise it is dropped.
* Host copies of device-resident pages are not evictable (HiCache evicts only the host
  value of evicted nodes). Storage is a flat, prefix-unaware LRU of pages.
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
    SZ_DEV,
    SZ_HOST,
    _push,
    _unlink,
    event_loop,
)
from toolkit.runtime.aot import nb

SLRU_PROTECTED_HITS = 2  # sglang SLRUStrategy(protected_threshold=2)


# sizes kept in ``sz``: pages on device (incl. decode reservations), pages in the device
# eviction list, host pages, host-evictable pages, storage pages, LFU lowest count
SZ_DL, SZ_HL, SZ_STO, SZ_MINF = 1, 3, 4, 5


@nb.njit(cache=True, nogil=True)
def _bucket(k, policy, freq):  # pragma: no cover - compiled
    """Eviction bucket: the use count (lfu) or the SLRU segment. ``freq`` counts the
    insertion as 1, so hits = freq - 1."""
    if policy == 1:
        return freq[k]
    return 1 if freq[k] - 1 >= SLRU_PROTECTED_HITS else 0


@nb.njit(cache=True, nogil=True)
def _dl_push(k, policy, dn, dp, n, bn, bp, bh, bt, freq, sz):  # pragma: no cover - compiled
    if policy == 0:
        _push(dn, dp, n, k)
    else:
        f = _bucket(k, policy, freq)
        t = bt[f]
        bp[k] = t
        bn[k] = -1
        if t == -1:
            bh[f] = k
        else:
            bn[t] = k
        bt[f] = k
        if f < sz[SZ_MINF]:
            sz[SZ_MINF] = f
        dp[k] = 0  # membership flag for the LFU variant
    sz[SZ_DL] += 1


@nb.njit(cache=True, nogil=True)
def _dl_remove(k, policy, dn, dp, bn, bp, bh, bt, freq, sz):  # pragma: no cover - compiled
    if policy == 0:
        _unlink(dn, dp, k)
    else:
        f = _bucket(k, policy, freq)
        p = bp[k]
        q = bn[k]
        if p == -1:
            bh[f] = q
        else:
            bn[p] = q
        if q == -1:
            bt[f] = p
        else:
            bp[q] = p
        dp[k] = -1
    sz[SZ_DL] -= 1


@nb.njit(cache=True, nogil=True)
def _dl_victim(policy, dp, n, bh, sz):  # pragma: no cover - compiled
    if policy == 0:
        return dp[n]  # LRU end
    f = sz[SZ_MINF]
    while bh[f] == -1:
        f += 1
    sz[SZ_MINF] = f
    return bh[f]  # least recently pushed among the lowest count


@nb.njit(cache=True, nogil=True)
def _sto_write(k, on_sto, sn, sp, n, sto_cap, sz, cnt):  # pragma: no cover - compiled
    if on_sto[k]:
        _unlink(sn, sp, k)
        _push(sn, sp, n, k)
        return
    if sz[SZ_STO] >= sto_cap:
        v = sp[n]
        _unlink(sn, sp, v)
        on_sto[v] = 0
        sz[SZ_STO] -= 1
        cnt[C_STO_EV] += 1
    on_sto[k] = 1
    _push(sn, sp, n, k)
    sz[SZ_STO] += 1
    cnt[C_STO_W] += 1


@nb.njit(cache=True, nogil=True)
def _host_write(
    k, on_dev, on_host, on_sto, hn, hp, sn, sp, n, host_cap, sto_cap, sz, cnt
):  # pragma: no cover - compiled
    """Give ``k`` a host copy (evicting a host-only page if full); False if impossible."""
    if on_host[k]:
        return True
    if host_cap == 0:
        return False
    if sz[SZ_HOST] >= host_cap:
        if sz[SZ_HL] == 0:
            cnt[C_BFAIL] += 1
            return False
        v = hp[n]
        _unlink(hn, hp, v)
        sz[SZ_HL] -= 1
        on_host[v] = 0
        sz[SZ_HOST] -= 1
        cnt[C_HOST_EV] += 1
    on_host[k] = 1
    sz[SZ_HOST] += 1
    cnt[C_HOST_W] += 1
    if sz[SZ_HOST] > cnt[C_PEAK_H]:
        cnt[C_PEAK_H] = sz[SZ_HOST]
    if not on_dev[k]:
        _push(hn, hp, n, k)
        sz[SZ_HL] += 1
    if sto_cap > 0:
        _sto_write(k, on_sto, sn, sp, n, sto_cap, sz, cnt)
    return True


@nb.njit(cache=True, nogil=True, inline="always")
def admit(c, r, res, cnt):  # pragma: no cover - compiled
    """Look up, lock, evict for and insert request ``r``'s pages; False (no side effect)
    when it must wait for a finish. ``res`` gets (device, host, storage) hit tokens."""
    (keys, pstart, plen, ptok, dpages, lim, on_dev, on_host, on_sto, ref, freq, hitc,
     dn, dp, bn, bp, bh, bt, hn, hp, sn, sp, sz) = c
    n = lim[L_KEYS]
    dev_cap = lim[L_DEV]
    host_cap = lim[L_HOST]
    sto_cap = lim[L_STO]
    policy = lim[L_POLICY]
    write = lim[L_WRITE]
    sel_threshold = lim[L_SEL]
    maxf = pstart.shape[0] + 2
    b0 = pstart[r]
    m = plen[r]
    oversize = m + dpages[r] > dev_cap
    d = 0
    h = 0
    s_ = 0
    if not oversize:
        while d < m and on_dev[keys[b0 + d]]:
            d += 1
        h = d
        while h < m and on_host[keys[b0 + h]]:
            h += 1
        s_ = h
        if sto_cap > 0:
            while s_ < m and on_sto[keys[b0 + s_]]:
                s_ += 1
        own = 0
        for i in range(d):
            k = keys[b0 + i]
            if ref[k] == 0 and dp[k] != -1:
                own += 1
        need = (m - d) + dpages[r]
        if need > (dev_cap - sz[SZ_DEV]) + (sz[SZ_DL] - own):
            return False
        for i in range(d):
            k = keys[b0 + i]
            if ref[k] == 0 and dp[k] != -1:
                _dl_remove(k, policy, dn, dp, bn, bp, bh, bt, freq, sz)
            ref[k] += 1
            if freq[k] < maxf:
                freq[k] += 1
            hitc[k] += 1
            if write == 1 and hitc[k] >= sel_threshold and not on_host[k]:
                _host_write(k, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                            host_cap, sto_cap, sz, cnt)
        while dev_cap - sz[SZ_DEV] < need and sz[SZ_DL] > 0:
            v = _dl_victim(policy, dp, n, bh, sz)
            _dl_remove(v, policy, dn, dp, bn, bp, bh, bt, freq, sz)
            on_dev[v] = 0
            sz[SZ_DEV] -= 1
            cnt[C_DEV_EV] += 1
            if on_host[v]:
                _push(hn, hp, n, v)
                sz[SZ_HL] += 1
            elif write == 2:
                if not _host_write(v, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                                   host_cap, sto_cap, sz, cnt):
                    cnt[C_DROP] += 1
            else:
                cnt[C_DROP] += 1
            if not (on_host[v] or on_sto[v]):
                hitc[v] = 0  # gone from every tier: its history goes too
        for i in range(d, m):
            k = keys[b0 + i]
            if on_dev[k]:  # a repeated id, or a chain that breaks prefix closure
                if ref[k] == 0 and dp[k] != -1:
                    _dl_remove(k, policy, dn, dp, bn, bp, bh, bt, freq, sz)
                ref[k] += 1
                continue
            on_dev[k] = 1
            sz[SZ_DEV] += 1
            ref[k] = 1
            freq[k] = 1
            if i < h:
                if hp[k] != -1:
                    _unlink(hn, hp, k)
                    sz[SZ_HL] -= 1
                hitc[k] += 1
                cnt[C_LOAD_H] += 1
                if sto_cap > 0 and on_sto[k]:
                    _sto_write(k, on_sto, sn, sp, n, sto_cap, sz, cnt)
            elif i < s_:
                _sto_write(k, on_sto, sn, sp, n, sto_cap, sz, cnt)
                hitc[k] += 1
                cnt[C_LOAD_S] += 1
                _host_write(k, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                            host_cap, sto_cap, sz, cnt)
            else:
                hitc[k] = 0
                if write == 0:
                    _host_write(k, on_dev, on_host, on_sto, hn, hp, sn, sp, n,
                                host_cap, sto_cap, sz, cnt)
        sz[SZ_DEV] += dpages[r]
        if sz[SZ_DEV] > cnt[C_PEAK_D]:
            cnt[C_PEAK_D] = sz[SZ_DEV]
    else:
        cnt[C_OVER] += 1
    td = 0
    th = 0
    ts = 0
    for i in range(d):
        td += ptok[b0 + i]
    for i in range(d, h):
        th += ptok[b0 + i]
    for i in range(h, s_):
        ts += ptok[b0 + i]
    res[0] = td
    res[1] = th
    res[2] = ts
    return True


@nb.njit(cache=True, nogil=True, inline="always")
def release(c, r):  # pragma: no cover - compiled
    """Unlock a finished request's pages, deepest first so parents end up newer."""
    (keys, pstart, plen, ptok, dpages, lim, on_dev, on_host, on_sto, ref, freq, hitc,
     dn, dp, bn, bp, bh, bt, hn, hp, sn, sp, sz) = c
    n = lim[L_KEYS]
    policy = lim[L_POLICY]
    if plen[r] + dpages[r] <= lim[L_DEV]:  # oversize requests held no pages
        b0 = pstart[r]
        for i in range(plen[r] - 1, -1, -1):
            k = keys[b0 + i]
            ref[k] -= 1
            if ref[k] == 0:
                _dl_push(k, policy, dn, dp, n, bn, bp, bh, bt, freq, sz)
        sz[SZ_DEV] -= dpages[r]


@nb.njit(cache=True, nogil=True, inline="always")
def peek(c, r, lids, m):  # pragma: no cover - compiled
    """Device-prefix tokens of request ``r`` (first ``m`` keys ``lids``) now."""
    pstart, plen, ptok, dpages, lim, on_dev = c[1], c[2], c[3], c[4], c[5], c[6]
    if plen[r] + dpages[r] > lim[L_DEV]:
        return 0
    b0 = pstart[r]
    t = 0
    d = 0
    while d < m and on_dev[lids[d]]:
        t += ptok[b0 + d]
        d += 1
    return t


@nb.njit(cache=True, nogil=True, inline="always")
def fresh(c, k, tok, parent):  # pragma: no cover - compiled
    """Initialise local page ``k`` of an instance (its arrays are allocated unwritten)."""
    (keys, pstart, plen, ptok, dpages, lim, on_dev, on_host, on_sto, ref, freq, hitc,
     dn, dp, bn, bp, bh, bt, hn, hp, sn, sp, sz) = c
    on_dev[k] = 0
    on_host[k] = 0
    on_sto[k] = 0
    ref[k] = 0
    freq[k] = 0
    hitc[k] = 0
    dp[k] = -1
    hp[k] = -1
    sp[k] = -1
    if lim[L_POLICY] >= 1:
        bn[k] = -1
        bp[k] = -1


@nb.njit(cache=True, nogil=True)
def _state(keys, pstart, plen, ptok, dpages, lim, R, local):  # pragma: no cover - compiled
    """One instance's empty page cache: the state tuple the hooks unpack. ``local``: its
    pages are numbered per instance and initialised by :func:`fresh` when first seen, so
    the per-page arrays are allocated unwritten."""
    n = lim[L_KEYS]
    policy = lim[L_POLICY]
    nb_ = n if policy >= 1 else 1
    if local:
        on_dev = np.empty(n, np.uint8)
        on_host = np.empty(n, np.uint8)
        on_sto = np.empty(n, np.uint8)
        ref = np.empty(n, np.int32)
        freq = np.empty(n, np.int32)
        hitc = np.empty(n, np.int32)
        dp = np.empty(n + 1, np.int32)
        bn = np.empty(nb_, np.int32)
        bp = np.empty(nb_, np.int32)
        hp = np.empty(n + 1, np.int32)
        sp = np.empty(n + 1, np.int32)
    else:
        on_dev = np.zeros(n, np.uint8)
        on_host = np.zeros(n, np.uint8)
        on_sto = np.zeros(n, np.uint8)
        ref = np.zeros(n, np.int32)
        freq = np.zeros(n, np.int32)
        hitc = np.zeros(n, np.int32)
        dp = np.full(n + 1, -1, np.int32)
        bn = np.full(nb_, -1, np.int32)
        bp = np.full(nb_, -1, np.int32)
        hp = np.full(n + 1, -1, np.int32)
        sp = np.full(n + 1, -1, np.int32)
    dn = np.empty(n + 1, np.int32)
    dn[n] = n
    dp[n] = n
    maxf = R + 2
    bh = np.full(maxf + 1 if policy >= 1 else 1, -1, np.int32)
    bt = np.full(maxf + 1 if policy >= 1 else 1, -1, np.int32)
    hn = np.empty(n + 1, np.int32)
    hn[n] = n
    hp[n] = n
    sn = np.empty(n + 1, np.int32)
    sn[n] = n
    sp[n] = n
    sz = np.zeros(6, np.int64)
    sz[SZ_MINF] = 1
    return (keys, pstart, plen, ptok, dpages, lim, on_dev, on_host, on_sto, ref, freq, hitc,
            dn, dp, bn, bp, bh, bt, hn, hp, sn, sp, sz)


@nb.njit(cache=True, nogil=True)
def simulate_page(keys, pstart, plen, ptok, dpages, prompt, outtok, lim, sched, coef,
                  tpot_b, out, cnt, areas, route, n_inst):  # pragma: no cover - compiled
    """Run :func:`~toolkit.replay.tiers.loop.event_loop` over one page cache.

    Capacities in ``lim`` are pages (storage 0 disables it); ``dpages`` are each
    request's decode pages. The instance is a 1-tuple (loop-invariant state);
    :func:`simulate_page_cluster` runs ``n_inst`` > 1. Returns the makespan in seconds.
    """
    c0 = _state(keys, pstart, plen, ptok, dpages, lim, prompt.shape[0], False)
    return event_loop(admit, release, peek, fresh, (c0,), (c0[22],), prompt, outtok, sched,
                      route, coef, tpot_b, out, cnt, areas)


@nb.njit(cache=True, nogil=True)
def simulate_page_cluster(keys, pstart, plen, ptok, dpages, prompt, outtok, lim, sched, coef,
                          tpot_b, out, cnt, areas, route,
                          n_inst):  # pragma: no cover - compiled
    """:func:`simulate_page` over ``n_inst`` instances behind the router, each numbering its
    pages locally (the caches read ``route``'s local key array, see the loop)."""
    R = prompt.shape[0]
    lkeys = route[8]
    c0 = _state(lkeys, pstart, plen, ptok, dpages, lim, R, True)
    cs = [c0]
    szs = [c0[22]]
    for _ in range(1, n_inst):
        c = _state(lkeys, pstart, plen, ptok, dpages, lim, R, True)
        cs.append(c)
        szs.append(c[22])
    return event_loop(admit, release, peek, fresh, cs, szs, prompt, outtok, sched, route, coef,
                      tpot_b, out, cnt, areas)
