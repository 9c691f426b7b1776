"""Compiled core of the tier replay: an event loop over requests and three page tiers.

Everything per page (lookup, lock, evict, demote, load back) and per event (arrival,
admission, finish) happens here; :mod:`toolkit.replay.tiers` prepares arrays and reads
the results. The rules (HiCache, sglang ``hiradix_cache.py``; see tiers.py for sources):

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

import numba as nb
import numpy as np

from toolkit.schema import TIER_COUNTERS

# SGLang's evict_policy.py: lru = last access; lfu = (hit count, last access); slru =
# (hit_count >= 2, last access); priority = (request priority, last access). Traces carry
# no request priority, so every page has priority 0 and "priority" orders exactly as lru.
POLICY_CODES = {"lru": 0, "lfu": 1, "slru": 2, "priority": 0}
SLRU_PROTECTED_HITS = 2  # sglang SLRUStrategy(protected_threshold=2)
WRITE_CODES = {"write_through": 0, "write_through_selective": 1, "write_back": 2}
# indices into the counters array
COUNTERS = TIER_COUNTERS
_C = {name: i for i, name in enumerate(COUNTERS)}
C_DEV_EV, C_HOST_EV = _C["device_evictions"], _C["host_evictions"]
C_STO_EV = _C["storage_evictions"]
C_HOST_W, C_STO_W = _C["host_writes"], _C["storage_writes"]
C_LOAD_H, C_LOAD_S = _C["host_load_pages"], _C["storage_load_pages"]
C_DROP, C_BFAIL = _C["dropped_pages"], _C["host_backup_failures"]
C_PEAK_D, C_PEAK_H, C_OVER = _C["peak_device_pages"], _C["peak_host_pages"], _C["oversize_requests"]


# -- circular doubly linked lists, sentinel at index n (nxt runs MRU -> LRU) -------------
@nb.njit(cache=True, nogil=True)
def _push(nxt, prv, s, k):  # pragma: no cover - compiled
    h = nxt[s]
    nxt[k] = h
    prv[k] = s
    prv[h] = k
    nxt[s] = k


@nb.njit(cache=True, nogil=True)
def _unlink(nxt, prv, k):  # pragma: no cover - compiled
    p = prv[k]
    q = nxt[k]
    nxt[p] = q
    prv[q] = p
    prv[k] = -1


# -- a binary min-heap of (time, id), ties by id so runs are deterministic ----------------
@nb.njit(cache=True, nogil=True)
def _hpush(ht, hi, n, t, i):  # pragma: no cover - compiled
    j = n
    while j > 0:
        p = (j - 1) >> 1
        if ht[p] < t or (ht[p] == t and hi[p] < i):
            break
        ht[j] = ht[p]
        hi[j] = hi[p]
        j = p
    ht[j] = t
    hi[j] = i
    return n + 1


@nb.njit(cache=True, nogil=True)
def _hpop(ht, hi, n):  # pragma: no cover - compiled
    """Remove the top; returns the new size (the caller read ht[0], hi[0] before)."""
    n -= 1
    t = ht[n]
    i = hi[n]
    j = 0
    while True:
        c = 2 * j + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hi[c + 1] < hi[c])):
            c += 1
        if t < ht[c] or (t == ht[c] and i < hi[c]):
            break
        ht[j] = ht[c]
        hi[j] = hi[c]
        j = c
    if n > 0:
        ht[j] = t
        hi[j] = i
    return n


# sizes kept in ``sz``: pages on device (incl. decode reservations), pages in the device
# eviction list, host pages, host-evictable pages, storage pages, LFU lowest count
SZ_DEV, SZ_DL, SZ_HOST, SZ_HL, SZ_STO, SZ_MINF = 0, 1, 2, 3, 4, 5


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


@nb.njit(cache=True, nogil=True)
def simulate_tiers(
    keys, pstart, plen, ptok, prompt, outtok, dpages,
    closed, t_open, conc, sess_req, sess_start, sess_len, gap,
    n_keys, dev_cap, host_cap, sto_cap, policy, write, sel_threshold, max_running,
    c_tok, c_ctx, lh_fixed, lh_tok, ls_fixed, ls_tok, tpot_b,
    tok_dev, tok_host, tok_sto, t_arr, t_adm, t_first, t_fin, batch, host_pages,
    cnt, areas,
):  # pragma: no cover - compiled
    """Replay every request; fill the per-request arrays, counters and time integrals.

    Capacities are pages (``sto_cap`` 0 disables storage). ``closed`` runs ``conc``
    users over the sessions in ``sess_req`` order; otherwise requests arrive at
    ``t_open`` (sorted). Returns the makespan in seconds.
    """
    n = n_keys
    R = prompt.shape[0]
    on_dev = np.zeros(n, np.uint8)
    on_host = np.zeros(n, np.uint8)
    on_sto = np.zeros(n, np.uint8)
    ref = np.zeros(n, np.int32)
    freq = np.zeros(n, np.int32)
    hitc = np.zeros(n, np.int32)
    dn = np.empty(n + 1, np.int32)
    dp = np.full(n + 1, -1, np.int32)
    dn[n] = n
    dp[n] = n
    maxf = R + 2
    bn = np.full(n if policy >= 1 else 1, -1, np.int32)
    bp = np.full(n if policy >= 1 else 1, -1, np.int32)
    bh = np.full(maxf + 1 if policy >= 1 else 1, -1, np.int32)
    bt = np.full(maxf + 1 if policy >= 1 else 1, -1, np.int32)
    hn = np.empty(n + 1, np.int32)
    hp = np.full(n + 1, -1, np.int32)
    hn[n] = n
    hp[n] = n
    sn = np.empty(n + 1, np.int32)
    sp = np.full(n + 1, -1, np.int32)
    sn[n] = n
    sp[n] = n
    sz = np.zeros(6, np.int64)
    sz[SZ_MINF] = 1
    # event state
    ah_t = np.empty(R, np.float64)
    ah_i = np.empty(R, np.int64)
    ah_n = 0
    rh_t = np.empty(R, np.float64)
    rh_i = np.empty(R, np.int64)
    rh_n = 0
    wq = np.empty(R, np.int64)
    wq_h = 0
    wq_t = 0
    open_ptr = 0
    req_sess = np.full(R, -1, np.int64)
    req_turn = np.zeros(R, np.int64)
    next_sess = 0
    n_sess = sess_start.shape[0]
    if closed:
        for s in range(n_sess):
            for j in range(sess_len[s]):
                r = sess_req[sess_start[s] + j]
                req_sess[r] = s
                req_turn[r] = j
        while next_sess < n_sess and next_sess < conc:
            if sess_len[next_sess] > 0:
                ah_n = _hpush(ah_t, ah_i, ah_n, 0.0, sess_req[sess_start[next_sess]])
            next_sess += 1
    running = 0
    done = 0
    now = 0.0
    last_t = 0.0
    pf_free = 0.0
    inf = np.inf
    n_tpot = tpot_b.shape[0]
    while done < R:
        ta = inf
        if closed:
            if ah_n > 0:
                ta = ah_t[0]
        elif open_ptr < R:
            ta = t_open[open_ptr]
        tf = rh_t[0] if rh_n > 0 else inf
        if ta == inf and tf == inf:
            break  # nothing can progress (should not happen)
        ev_t = tf if tf <= ta else ta
        areas[0] += sz[SZ_HOST] * (ev_t - last_t)
        areas[1] += sz[SZ_DEV] * (ev_t - last_t)
        last_t = ev_t
        now = ev_t
        if tf <= ta:
            r = rh_i[0]
            rh_n = _hpop(rh_t, rh_i, rh_n)
            running -= 1
            done += 1
            if plen[r] + dpages[r] <= dev_cap:  # oversize requests held no pages
                b0 = pstart[r]
                for i in range(plen[r] - 1, -1, -1):  # deepest first: parents end up newer
                    k = keys[b0 + i]
                    ref[k] -= 1
                    if ref[k] == 0:
                        _dl_push(k, policy, dn, dp, n, bn, bp, bh, bt, freq, sz)
                sz[SZ_DEV] -= dpages[r]
            if closed:
                s = req_sess[r]
                j = req_turn[r] + 1
                if j < sess_len[s]:
                    ah_n = _hpush(ah_t, ah_i, ah_n, now + gap[r], sess_req[sess_start[s] + j])
                else:
                    while next_sess < n_sess and sess_len[next_sess] == 0:
                        next_sess += 1
                    if next_sess < n_sess:
                        ah_n = _hpush(ah_t, ah_i, ah_n, now, sess_req[sess_start[next_sess]])
                        next_sess += 1
        else:
            if closed:
                r = ah_i[0]
                ah_n = _hpop(ah_t, ah_i, ah_n)
            else:
                r = open_ptr
                open_ptr += 1
            t_arr[r] = now
            wq[wq_t] = r
            wq_t += 1
        # admit FCFS while the head fits
        while wq_h < wq_t:
            if max_running > 0 and running >= max_running:
                break
            r = wq[wq_h]
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
                    break  # head-of-line: wait for a finish
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
            wq_h += 1
            td = 0
            th = 0
            ts = 0
            for i in range(d):
                td += ptok[b0 + i]
            for i in range(d, h):
                th += ptok[b0 + i]
            for i in range(h, s_):
                ts += ptok[b0 + i]
            tok_dev[r] = td
            tok_host[r] = th
            tok_sto[r] = ts
            host_pages[r] = sz[SZ_HOST]
            t_adm[r] = now
            running += 1
            batch[r] = running
            computed = prompt[r] - td - th - ts
            if computed < 0:
                computed = 0
            cached = prompt[r] - computed
            t_comp = c_tok * computed + c_ctx * computed * 0.5 * (cached + prompt[r])
            t_lh = lh_fixed + lh_tok * th if th > 0 else 0.0
            t_ls = ls_fixed + ls_tok * ts if ts > 0 else 0.0
            start = now if now > pf_free else pf_free
            first = start + (t_comp if t_comp > t_lh else t_lh) + t_ls
            pf_free = first
            t_first[r] = first
            bi = running if running < n_tpot else n_tpot - 1
            steps = outtok[r] - 1 if outtok[r] > 1 else 0
            t_fin[r] = first + tpot_b[bi] * steps
            rh_n = _hpush(rh_t, rh_i, rh_n, t_fin[r], r)
    return now
