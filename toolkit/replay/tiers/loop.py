"""The one event loop of the tier replay: arrivals, FCFS admission, finishes, timing.

Both device-tier caches (:mod:`toolkit.replay.tiers.page`, :mod:`toolkit.replay.tiers.radix`)
run this loop; what differs is passed in as two jitted hooks:

* ``admit(c, r, res, cnt) -> bool``: match, lock, evict, insert request ``r`` in the
  cache state ``c`` (a tuple); False, with no side effect, when it must wait for a
  finish; ``res`` gets its (device, host, storage) hit tokens.
* ``release(c, r)``: unlock a finished request's pages.

Why hooks and not a copy per cache: numba types a jitted function passed as an argument
by its identity, so :func:`event_loop` is compiled once per cache with direct calls, and
``inline="always"`` on the loop and the hooks inlines them at numba IR level (numba does
inline helpers from other modules; LLVM decides by size, ``inline="always"`` forces it).
The cache module's entry point calls the loop with its hooks, so the entry point is what
gets cached on disk.

Cache sizes the loop reads live in ``sz``: ``sz[SZ_DEV]`` device slots in use, ``sz[SZ_HOST]``
host slots in use (pages or tokens, whichever the cache counts).

Service times come in as numbers (``coef``, ``tpot_b``), computed by the caller: the
replay counts, it does not model hardware.
"""

from __future__ import annotations

import numpy as np

from toolkit.runtime.aot import nb
from toolkit.schema import TIER_COUNTERS

# indices into the counters array
COUNTERS = TIER_COUNTERS
_C = {name: i for i, name in enumerate(COUNTERS)}
C_DEV_EV, C_HOST_EV = _C["device_evictions"], _C["host_evictions"]
C_STO_EV = _C["storage_evictions"]
C_HOST_W, C_STO_W = _C["host_writes"], _C["storage_writes"]
C_LOAD_H, C_LOAD_S = _C["host_load_pages"], _C["storage_load_pages"]
C_DROP, C_BFAIL = _C["dropped_pages"], _C["host_backup_failures"]
C_PEAK_D, C_PEAK_H, C_OVER = _C["peak_device_pages"], _C["peak_host_pages"], _C["oversize_requests"]
# shared indices of the caches' size vectors
SZ_DEV, SZ_HOST = 0, 2
# indices into ``coef``, the service-time coefficients (seconds)
CF_TOK, CF_CTX, CF_HOST_FIXED, CF_HOST_TOK, CF_STO_FIXED, CF_STO_TOK = range(6)
# indices into ``lim``, the cache's integer settings
L_KEYS, L_DEV, L_HOST, L_STO, L_POLICY, L_WRITE, L_SEL = range(7)


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


@nb.njit(cache=True, nogil=True, inline="always")
def event_loop(admit, release, c, sz, prompt, outtok, sched, coef, tpot_b, out, cnt,
               areas):  # pragma: no cover - compiled
    """Replay every request; fill ``out``, the counters and the time integrals.

    ``sched`` = (closed, t_open, conc, sess_req, sess_start, sess_len, gap, max_running):
    ``closed`` runs ``conc`` users over the sessions in ``sess_req`` order; otherwise
    requests arrive at ``t_open`` (sorted). ``out`` = (tok_dev, tok_host, tok_sto, t_arr,
    t_adm, t_first, t_fin, batch, host_used). Returns the makespan in seconds.
    """
    closed, t_open, conc, sess_req, sess_start, sess_len, gap, max_running = sched
    tok_dev, tok_host, tok_sto, t_arr, t_adm, t_first, t_fin, batch, host_used = out
    c_tok = coef[CF_TOK]
    c_ctx = coef[CF_CTX]
    lh_fixed = coef[CF_HOST_FIXED]
    lh_tok = coef[CF_HOST_TOK]
    ls_fixed = coef[CF_STO_FIXED]
    ls_tok = coef[CF_STO_TOK]
    R = prompt.shape[0]
    res = np.zeros(3, np.int64)
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
            release(c, r)
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
            if not admit(c, r, res, cnt):
                break  # head-of-line: wait for a finish
            wq_h += 1
            td = res[0]
            th = res[1]
            ts = res[2]
            tok_dev[r] = td
            tok_host[r] = th
            tok_sto[r] = ts
            host_used[r] = sz[SZ_HOST]
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
