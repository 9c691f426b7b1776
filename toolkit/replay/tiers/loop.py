"""The one event loop of the tier replay: arrivals, FCFS admission, finishes, timing.

Both device-tier caches (:mod:`toolkit.replay.tiers.page`, :mod:`toolkit.replay.tiers.radix`)
run this loop; what differs is passed in as two jitted hooks:

* ``admit(c, r, res, cnt) -> bool``: match, lock, evict, insert request ``r`` in the
  cache state ``c`` (a tuple); False, with no side effect, when it must wait for a
  finish; ``res`` gets its (device, host, storage) hit tokens.
* ``release(c, r)``: unlock a finished request's pages.
* ``peek(c, r, lids, m) -> int``: the device-prefix tokens request ``r``, whose first
  ``m`` keys are the local ids ``lids``, would hit in ``c`` now, no side effect (what Dynamo's KV
  router learns from KV events);
* ``fresh(c, k, tokens, parent)``: initialise the cache's entries of local key ``k``.

N instances behind a router (the cluster replay) are this same loop: ``cs`` holds one state
tuple per instance in a numba typed list (one type, so one compiled loop), each with its
own wait queue, prefill lane and running count; one instance is the single-instance replay.

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

from dataclasses import dataclass, field
from typing import Any

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
# router codes (``ClusterReplayConfig.router``) and indices into the router's ``rp``
R_RR, R_LEAST, R_SGLANG, R_DYNAMO = 0, 1, 2, 3
RP_CACHE_THR, RP_ABS, RP_REL, RP_OVERLAP_W, RP_BLOCK = range(5)


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


@dataclass(frozen=True)
class ClusterRoute:
    """What the loop needs to run ``instances`` instances behind a router (Python side).

    ``router`` is a code (``R_*``), ``params`` the router's numbers indexed by ``RP_*``;
    ``prog[0]`` is the count of finished requests, written by the running kernel.
    """

    instances: int = 1
    router: int = R_RR
    params: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 1.0)
    prog: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    ranks: int = 1
    disagg: bool = False
    transfer_s: tuple[float, float] = (0.0, 0.0)
    decode_tokens: int = -1
    decode_max_running: int = 0
    decode_tpot_s: Any = None
    affinity_ttl_s: float = 0.0

    def kernel_args(self, ps: Any) -> tuple:
        """The loop's ``route`` tuple over page stream ``ps`` (keys, starts, lengths and
        tokens per key occurrence) and the key array the caches read: the stream's own
        with one instance, else a fresh one the loop fills with each instance's local ids.

        ``instances`` here counts prefix caches (deployments x ``ranks``); the last item is
        the topology (:func:`event_loop`'s ``topo``) with two per-request outputs: the
        decode pool of each request (-1 when aggregated) and its prefill's end."""
        lkeys = ps.keys if self.instances == 1 else np.empty_like(ps.keys)
        n = ps.prompt.size
        tpot_d = (np.zeros(1) if self.decode_tpot_s is None
                  else np.ascontiguousarray(self.decode_tpot_s, np.float64))
        rsess = np.full(n if self.affinity_ttl_s > 0 else 1, -1, np.int64)
        if self.affinity_ttl_s > 0:  # each request's session, numbered densely
            sid = np.asarray(ps.session_id)
            has = sid >= 0
            rsess[has] = np.unique(sid[has], return_inverse=True)[1]
        topo = (np.int64(self.ranks), np.bool_(self.disagg),
                np.asarray(self.transfer_s, np.float64),
                np.array([self.decode_tokens, self.decode_max_running], np.int64), tpot_d,
                np.full(n, -1, np.int32), np.full(n, -1.0), np.float64(self.affinity_ttl_s),
                rsess)
        return (np.int64(self.router), np.asarray(self.params, np.float64), ps.keys,
                ps.starts, ps.lengths, np.ascontiguousarray(ps.tokens, np.int64),
                np.int64(ps.n_keys), self.prog, lkeys, topo)

    def heap_requests(self, requests: int) -> int:
        """Requests one instance's lazy heaps are sized for: any instance may get all."""
        return requests




_MIX = np.int64(-7046029254386353131)  # 0x9E3779B97F4A7C15, Fibonacci hashing


@nb.njit(cache=True, nogil=True, inline="always")
def _mget(hk, hv, g):  # pragma: no cover - compiled
    """Local id of global key ``g`` in one instance's open-addressing map, or -1."""
    mask = hk.shape[0] - 1
    h = (g * _MIX) & mask
    while hk[h] != -1:
        if hk[h] == g:
            return hv[h]
        h = (h + 1) & mask
    return np.int64(-1)


@nb.njit(cache=True, nogil=True)
def _mput(hk, hv, g, v):  # pragma: no cover - compiled
    mask = hk.shape[0] - 1
    h = (g * _MIX) & mask
    while hk[h] != -1:
        h = (h + 1) & mask
    hk[h] = g
    hv[h] = v


@nb.njit(cache=True, nogil=True)
def _mgrow(hk, hv):  # pragma: no cover - compiled
    """The map at twice the size (rehashed)."""
    nk = np.full(hk.shape[0] * 2, -1, np.int64)
    nv = np.empty(hk.shape[0] * 2, np.int64)
    for h in range(hk.shape[0]):
        if hk[h] != -1:
            _mput(nk, nv, hk[h], hv[h])
    return nk, nv


@nb.njit(cache=True, nogil=True, inline="always")
def _overlap(peek, c, r, mk, mv, gkeys, b0, m, tmp):  # pragma: no cover - compiled
    """Device-prefix tokens of a request on one instance: its keys translated to the
    instance's local ids up to the first one the instance never saw, then ``peek``."""
    j = 0
    while j < m:
        lid = _mget(mk, mv, gkeys[b0 + j])
        if lid < 0:
            break
        tmp[j] = lid
        j += 1
    return peek(c, r, tmp, j)


@nb.njit(cache=True, nogil=True, inline="always")
def _route(router, rp, mks, mvs, rtree, gkeys, rstart, rlen, rtok, peek, cs, szs, r,
           prompt_r, k_arr, outst, act_blk, pend_tok, tmp):  # pragma: no cover - compiled
    """Pick the instance of request ``r`` (see :mod:`toolkit.replay.tiers.cluster`)."""
    n_inst = outst.shape[0]
    if n_inst == 1:
        return 0
    if router == R_RR:
        return k_arr % n_inst
    if router == R_LEAST:
        best = 0
        for i in range(1, n_inst):
            if outst[i] < outst[best]:
                best = i
        return best
    b0 = rstart[r]
    m = rlen[r]
    if router == R_SGLANG:
        lo = 0
        hi = 0
        for i in range(1, n_inst):
            if outst[i] < outst[lo]:
                lo = i
            if outst[i] > outst[hi]:
                hi = i
        if outst[hi] - outst[lo] > rp[RP_ABS] and outst[hi] > rp[RP_REL] * outst[lo]:
            return lo
        best = 0
        best_tok = -1
        for i in range(n_inst):
            # the router's own tree of instance i: every key it ever sent there (the
            # instance's key map, which never forgets)
            mk = mks[i]
            mv = mvs[i]
            t = 0
            j = 0
            while j < m and _mget(mk, mv, gkeys[b0 + j]) >= 0:
                t += rtok[b0 + j]
                j += 1
            if t > best_tok:
                best_tok = t
                best = i
        if prompt_r > 0 and best_tok / prompt_r > rp[RP_CACHE_THR]:
            return best
        small = 0
        for i in range(1, n_inst):
            if rtree[i] < rtree[small]:
                small = i
        return small
    # R_DYNAMO: logit = w * prefill blocks + decode blocks, lowest wins
    bs = rp[RP_BLOCK]
    req_blk = -(-prompt_r // np.int64(bs))
    best = 0
    best_cost = np.inf
    best_used = 0
    for i in range(n_inst):
        ov = _overlap(peek, cs[i], r, mks[i], mvs[i], gkeys, b0, m, tmp)
        pre = (prompt_r - ov + pend_tok[i]) / bs
        new_blk = req_blk - ov // np.int64(bs)
        cost = rp[RP_OVERLAP_W] * pre + (act_blk[i] + new_blk)
        used = szs[i][SZ_DEV]
        if cost < best_cost or (cost == best_cost and used < best_used):
            best_cost = cost
            best = i
            best_used = used
    return best


@nb.njit(cache=True, nogil=True)
def _decode_admit(d, now, dq_head, dq_tail, dq_next, dq_n, drun, dused, dcap, prompt, outtok,
                  xfer, tpot_d, t_first, t_fin, batch, rh_t, rh_i, rh_n):  # pragma: no cover
    """Admit decode pool ``d``'s waiting requests FCFS while they fit (its token budget
    ``dcap[0]``, -1 unbounded, and running cap ``dcap[1]``, 0 none; an empty pool takes any
    one request); each then receives its prompt's KV (``xfer``: fixed s, s per token) and
    decodes at the pool's batch. Returns the finish heap's new size."""
    n_tp = tpot_d.shape[0]
    while dq_head[d] >= 0:
        r = dq_head[d]
        need = prompt[r] + outtok[r]
        if drun[d] > 0:
            if dcap[1] > 0 and drun[d] >= dcap[1]:
                break
            if dcap[0] >= 0 and dused[d] + need > dcap[0]:
                break
        dq_head[d] = dq_next[r]
        if dq_head[d] < 0:
            dq_tail[d] = -1
        dq_n[d] -= 1
        drun[d] += 1
        dused[d] += need
        first = now + xfer[0] + xfer[1] * prompt[r]
        t_first[r] = first
        batch[r] = drun[d]
        bi = drun[d] if drun[d] < n_tp else n_tp - 1
        steps = outtok[r] - 1 if outtok[r] > 1 else 0
        t_fin[r] = first + tpot_d[bi] * steps
        rh_n = _hpush(rh_t, rh_i, rh_n, t_fin[r], r)
    return rh_n


@nb.njit(cache=True, nogil=True, inline="always")
def event_loop(admit, release, peek, fresh, cs, szs, prompt, outtok, sched, route, coef,
               tpot_b, out, cnt, areas):  # pragma: no cover - compiled
    """Replay every request over ``len(cs)`` instances; fill ``out``, the counters and the
    time integrals.

    ``cs`` holds each instance's cache state (a list of the cache's tuple, one type),
    ``szs`` each instance's size vector. ``sched`` = (closed, t_open, conc, sess_req,
    sess_start, sess_len, gap, max_running): ``closed`` runs ``conc`` users over the
    sessions in ``sess_req`` order; otherwise requests arrive at ``t_open`` (sorted).
    ``route`` = (router, rp, gkeys, rstart, rlen, rtok, n_keys, prog, lkeys): the router's
    code and numbers, the requests' global keys (and tokens per key), ``prog[0]`` counting
    finished requests (read by a progress bar while this runs without the GIL), and the
    key array the caches read. With more than one instance each instance numbers the keys
    it is sent from 0 (a map per instance; ``fresh(c, k, tokens, parent)`` initialises
    local key ``k``), written into ``lkeys`` when a request is routed, so an instance's
    per-key arrays are touched only as far as the keys it saw (allocated, not written: the
    operating system maps their pages on first touch). ``out`` =
    (tok_dev, tok_host, tok_sto, t_arr, t_adm, t_first, t_fin, batch, host_used, inst).
    ``max_running`` is per cache. With one instance this is the single-instance replay,
    event for event. Returns the makespan in seconds.

    ``topo`` (the route's last item) = (ranks, disagg, xfer, dcap, tpot_d, dinst, t_pre,
    aff_ttl, rsess): the caches are ``len(cs) / ranks`` deployments of ``ranks`` caches each
    (DP-attention ranks, numbered deployment-major); each rank prefills its own requests on
    its own lane at 1/ranks of the instance's speed (``coef`` is the instance's), and
    (aggregated) the ranks share the deployment's decode batch, which picks the TPOT. With
    ``disagg`` each deployment is a prefill side (the caches) and a decode pool: a
    request's prefill ends at ``t_pre`` (a handoff event, id ``R + r`` in the finish heap),
    releases its prefill cache, and waits in the decode pool with the fewest running +
    waiting requests (:func:`_decode_admit`: capacity ``dcap``, transfer ``xfer``, TPOT
    ``tpot_d``); its first token comes after the transfer, its finish after the decode
    steps. With ``aff_ttl`` > 0 a request whose session (``rsess``, -1 none) was routed
    within the last ``aff_ttl`` seconds goes to that session's cache whatever the router
    would say
    (Dynamo's ``--router-session-affinity-ttl-secs``); each routing renews the binding.
    """
    closed, t_open, conc, sess_req, sess_start, sess_len, gap, max_running = sched
    tok_dev, tok_host, tok_sto, t_arr, t_adm, t_first, t_fin, batch, host_used, inst = out
    router, rp, gkeys, rstart, rlen, rtok, n_keys, prog, lkeys, topo = route
    ranks, disagg, xfer, dcap, tpot_d, dinst, t_pre, aff_ttl, rsess = topo
    # session affinity: each session's bound cache and when it was last routed
    n_bind = 1
    if aff_ttl > 0:
        for r in range(prompt.shape[0]):
            if rsess[r] + 1 > n_bind:
                n_bind = rsess[r] + 1
    sb_cache = np.full(n_bind, -1, np.int64)
    sb_time = np.zeros(n_bind, np.float64)
    # a DP-attention rank prefills its own requests at 1/ranks of the instance's speed
    c_tok = coef[CF_TOK] * ranks
    c_ctx = coef[CF_CTX] * ranks
    lh_fixed = coef[CF_HOST_FIXED]
    lh_tok = coef[CF_HOST_TOK]
    ls_fixed = coef[CF_STO_FIXED]
    ls_tok = coef[CF_STO_TOK]
    R = prompt.shape[0]
    n_inst = len(cs)
    res = np.zeros(3, np.int64)
    ah_t = np.empty(R, np.float64)
    ah_i = np.empty(R, np.int64)
    ah_n = 0
    rh_t = np.empty(R, np.float64)
    rh_i = np.empty(R, np.int64)
    rh_n = 0
    # per-instance FIFO wait queues as one linked list (a request waits at one instance)
    q_next = np.full(R, -1, np.int64)
    q_head = np.full(n_inst, -1, np.int64)
    q_tail = np.full(n_inst, -1, np.int64)
    running = np.zeros(n_inst, np.int64)
    n_grp = n_inst // ranks
    grun = np.zeros(n_grp, np.int64)  # a deployment's running (its decode batch)
    pf_free = np.zeros(n_inst, np.float64)  # each cache's (rank's) prefill lane
    # disaggregated decode pools: FIFO queues, running, tokens held
    dq_next = np.full(R if disagg else 1, -1, np.int64)
    dq_head = np.full(n_grp, -1, np.int64)
    dq_tail = np.full(n_grp, -1, np.int64)
    dq_n = np.zeros(n_grp, np.int64)
    drun = np.zeros(n_grp, np.int64)
    dused = np.zeros(n_grp, np.int64)
    outst = np.zeros(n_inst, np.int64)  # routed, not finished (the router's load)
    act_blk = np.zeros(n_inst, np.int64)  # prompt blocks of those (Dynamo's active blocks)
    pend_tok = np.zeros(n_inst, np.int64)  # uncached tokens routed, not yet admitted
    pend_r = np.zeros(R, np.int64)
    local = n_inst > 1
    mks = [np.full(1024 if local else 1, -1, np.int64) for _ in range(n_inst)]
    mvs = [np.empty(1024 if local else 1, np.int64) for _ in range(n_inst)]
    mcnt = np.zeros(n_inst, np.int64)
    rtree = np.zeros(n_inst, np.int64)
    m_max = 1
    for r in range(R):
        if rlen[r] > m_max:
            m_max = rlen[r]
    tmp = np.empty(m_max, np.int64)
    bs = np.int64(rp[RP_BLOCK]) if rp[RP_BLOCK] >= 1 else np.int64(1)
    c_one = cs[0]
    sz_one = szs[0]
    tot_dev = 0
    tot_host = 0
    for i in range(n_inst):
        tot_dev += szs[i][SZ_DEV]
        tot_host += szs[i][SZ_HOST]
    open_ptr = 0
    k_arr = 0
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
    done = 0
    now = 0.0
    last_t = 0.0
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
        areas[0] += tot_host * (ev_t - last_t)
        areas[1] += tot_dev * (ev_t - last_t)
        last_t = ev_t
        now = ev_t
        if tf <= ta:
            e = rh_i[0]
            rh_n = _hpop(rh_t, rh_i, rh_n)
            handoff = disagg and e >= R
            r = e - R if handoff else e
            gi = inst[r]
            if disagg and not handoff:  # decode finished: free the pool, admit its queue
                d = dinst[r]
                drun[d] -= 1
                dused[d] -= prompt[r] + outtok[r]
                rh_n = _decode_admit(d, now, dq_head, dq_tail, dq_next, dq_n, drun, dused, dcap,
                                     prompt, outtok, xfer, tpot_d, t_first, t_fin, batch,
                                     rh_t, rh_i, rh_n)
            else:  # the request leaves its cache: aggregated finish, or prefill handoff
                running[gi] -= 1
                if ranks > 1:
                    grun[gi // ranks] -= 1
                if local:  # the router's load figures (constant-folded for one instance)
                    outst[gi] -= 1
                    act_blk[gi] -= -(-prompt[r] // bs)
                sz = sz_one if n_inst == 1 else szs[gi]
                tot_dev -= sz[SZ_DEV]
                tot_host -= sz[SZ_HOST]
                if n_inst == 1:  # see the admission below
                    release(c_one, r)
                else:
                    release(cs[gi], r)
                tot_dev += sz[SZ_DEV]
                tot_host += sz[SZ_HOST]
            if handoff:  # to the decode pool with the fewest running + waiting
                d = 0
                for g in range(1, n_grp):
                    if drun[g] + dq_n[g] < drun[d] + dq_n[d]:
                        d = g
                dinst[r] = d
                if dq_tail[d] >= 0:
                    dq_next[dq_tail[d]] = r
                else:
                    dq_head[d] = r
                dq_tail[d] = r
                dq_n[d] += 1
                rh_n = _decode_admit(d, now, dq_head, dq_tail, dq_next, dq_n, drun, dused, dcap,
                                     prompt, outtok, xfer, tpot_d, t_first, t_fin, batch,
                                     rh_t, rh_i, rh_n)
            if not handoff:
                done += 1
                prog[0] = done
            if closed and not handoff:
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
            sess = rsess[r] if aff_ttl > 0 else -1
            if sess >= 0 and sb_cache[sess] >= 0 and now - sb_time[sess] <= aff_ttl:
                gi = sb_cache[sess]  # the session's binding holds: its cache, no scoring
            else:
                gi = _route(router, rp, mks, mvs, rtree, gkeys, rstart, rlen, rtok, peek, cs,
                            szs, r, prompt[r], k_arr, outst, act_blk, pend_tok, tmp)
            if sess >= 0:
                sb_cache[sess] = gi
                sb_time[sess] = now
            k_arr += 1
            inst[r] = gi
            if local:
                outst[gi] += 1
                act_blk[gi] += -(-prompt[r] // bs)
            if router == R_DYNAMO and local:
                pend_r[r] = prompt[r] - _overlap(peek, cs[gi], r, mks[gi], mvs[gi], gkeys,
                                                 rstart[r], rlen[r], tmp)
                pend_tok[gi] += pend_r[r]
            if local:  # the request's keys in the instance's own numbering
                parent = np.int64(-1)
                for j in range(rlen[r]):
                    g = gkeys[rstart[r] + j]
                    lid = _mget(mks[gi], mvs[gi], g)
                    if lid < 0:
                        lid = mcnt[gi]
                        mcnt[gi] += 1
                        if 2 * mcnt[gi] > mks[gi].shape[0]:
                            nk, nv = _mgrow(mks[gi], mvs[gi])
                            mks[gi] = nk
                            mvs[gi] = nv
                        _mput(mks[gi], mvs[gi], g, lid)
                        fresh(cs[gi], lid, rtok[rstart[r] + j], parent)
                        rtree[gi] += rtok[rstart[r] + j]
                    lkeys[rstart[r] + j] = lid
                    parent = lid
            if q_tail[gi] >= 0:
                q_next[q_tail[gi]] = r
            else:
                q_head[gi] = r
            q_tail[gi] = r
        # admit FCFS at that instance while its head fits
        sz = sz_one if n_inst == 1 else szs[gi]
        while q_head[gi] >= 0:
            if max_running > 0 and running[gi] >= max_running:
                break
            r = q_head[gi]
            tot_dev -= sz[SZ_DEV]
            tot_host -= sz[SZ_HOST]
            # one instance: call with the invariant state (assigning a tuple of ~30
            # arrays to a variable per event costs ~60 atomic reference-count updates)
            if n_inst == 1:
                ok = admit(c_one, r, res, cnt)
            else:
                ok = admit(cs[gi], r, res, cnt)
            tot_dev += sz[SZ_DEV]
            tot_host += sz[SZ_HOST]
            if not ok:
                break  # head-of-line: wait for a finish
            q_head[gi] = q_next[r]
            if q_head[gi] < 0:
                q_tail[gi] = -1
            if local:
                pend_tok[gi] -= pend_r[r]
            td = res[0]
            th = res[1]
            ts = res[2]
            tok_dev[r] = td
            tok_host[r] = th
            tok_sto[r] = ts
            host_used[r] = sz[SZ_HOST]
            t_adm[r] = now
            running[gi] += 1
            grp = gi // ranks if ranks > 1 else gi
            if ranks > 1:
                grun[grp] += 1
            b_now = grun[grp] if ranks > 1 else running[gi]
            computed = prompt[r] - td - th - ts
            if computed < 0:
                computed = 0
            cached = prompt[r] - computed
            t_comp = c_tok * computed + c_ctx * computed * 0.5 * (cached + prompt[r])
            t_lh = lh_fixed + lh_tok * th if th > 0 else 0.0
            t_ls = ls_fixed + ls_tok * ts if ts > 0 else 0.0
            start = now if now > pf_free[gi] else pf_free[gi]
            first = start + (t_comp if t_comp > t_lh else t_lh) + t_ls
            pf_free[gi] = first
            t_pre[r] = first
            if disagg:  # the prefill's end hands the request to a decode pool
                rh_n = _hpush(rh_t, rh_i, rh_n, first, R + r)
                continue
            batch[r] = b_now
            t_first[r] = first
            bi = b_now if b_now < n_tpot else n_tpot - 1
            steps = outtok[r] - 1 if outtok[r] > 1 else 0
            t_fin[r] = first + tpot_b[bi] * steps
            rh_n = _hpush(rh_t, rh_i, rh_n, t_fin[r], r)
    return now
