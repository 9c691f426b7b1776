"""A discrete-event replay of InferenceX's benchmark client against one modelled deployment:
median and p90 TTFT, median TPOT and the throughput a benchmark run would report.

Why a replay and not a queueing formula: InferenceX's client is a closed loop of ``conc``
users that start together and submit ``10 x conc`` prompts of random length in
``[0.8 L, L]`` (SemiAnalysisAI/InferenceX benchmark scripts: ``run_benchmark_serving ...
--random-range-ratio $RANDOM_RANGE_RATIO --num-prompts $((CONC * 10)) --max-concurrency
$CONC``, ratio 0.8 in its configs). Requests arrive in waves, queue for prefill, queue again
for a decode slot when HBM is full, and leave the decode batch while they wait, which no
steady-state formula with Poisson arrivals describes; a fitted "arrival variability" only
papered over it. Here nothing about the client is fitted: every time comes from the step
model (:mod:`toolkit.serving.model`) through three per-row inputs:

* ``step_s(B)``: one decode step of an instance holding ``B`` requests (a table over B);
* ``prefill_s_per_token``: prefill time per new prompt token (chunked; aggregated instances
  add it to the decode step that carries the chunk, up to ``chunk_tokens`` per step);
* ``xfer_s_per_token``: KV transfer per prompt token, prefill pool -> decode pool.

Engines modelled: aggregated instances schedule one prefill chunk per step ahead of decode
(SGLang/vLLM chunked prefill) and admit a request only when its KV fits (``cap``);
disaggregated deployments run a FIFO prefill pool of ``n_pre`` instances, each taking the
queued prompts that fit one chunk into one forward (SGLang's and TensorRT-LLM's prefill
workers batch up to their token budget), which pays the weights read and launches once
(``prefill_s_per_chunk``), transfer the KV and hand the request to the decode instance with
the fewest requests. TPOT of a request is
``(end - first token) / (output tokens - 1)``; throughput is every token over the run's
duration, divided by the GPUs (InferenceX's divisors).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from toolkit.runtime.aot import nb

NUM_PROMPTS_PER_USER = 10
"""InferenceX: ``--num-prompts $((CONC * 10))``."""
RANGE_RATIO = 0.8
"""InferenceX: ``--random-range-ratio 0.8``: lengths uniform in ``[0.8 L, L]``."""
CHUNK_TOKENS = 8192
"""Prefill chunk per step (assumed: SGLang's ``chunked_prefill_size`` on large GPUs)."""
MAX_PREFILL_PROMPTS = 1 << 30
"""Prompts one disaggregated prefill forward may batch (default: as many as fit a chunk)."""


@nb.njit(cache=True)
def _interp(bs: np.ndarray, ts: np.ndarray, b: float) -> float:
    k = bs.size
    if b <= bs[0]:
        return ts[0]
    if b >= bs[k - 1]:
        return ts[k - 1] + (b - bs[k - 1]) * (ts[k - 1] - ts[k - 2]) / max(
            bs[k - 1] - bs[k - 2], 1e-12)
    lo, hi = 0, k - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bs[mid] <= b:
            lo = mid
        else:
            hi = mid
    w = (b - bs[lo]) / (bs[hi] - bs[lo])
    return ts[lo] + w * (ts[hi] - ts[lo])


@nb.njit(cache=True)
def _quantile(x: np.ndarray, q: float) -> float:
    s = np.sort(x)
    pos = q * (s.size - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, s.size - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


@nb.njit(cache=True)
def _cut_run(i: int, t: float, step: np.ndarray, run_t0: np.ndarray, run_n: np.ndarray,
             run_s: np.ndarray, step_end: np.ndarray) -> None:
    """End instance ``i``'s run of steps with the step in progress at ``t``: the steps
    done so far count, and the next step boundary is that step's end."""
    k = min(int((t - run_t0[i]) / run_s[i]), run_n[i] - 1)
    step[i] += k
    run_t0[i] += k * run_s[i]
    run_n[i] = 1
    step_end[i] = run_t0[i] + run_s[i]


@nb.njit(cache=True)
def _replay_one(conc: int, n_req: int, isl: np.ndarray, osl: np.ndarray, accept: float,
                cap: int, n_dec: int, n_pre: int, disagg: bool, bs: np.ndarray,
                ts: np.ndarray, pre_tok_s: float, pre_fixed_s: float, xfer_tok_s: float,
                chunk: int, max_prompts: int, gate_iters: int, gate_kind: int,
                gate_ranks: int, out: np.ndarray) -> None:
    """One benchmark run; writes median TTFT, p90 TTFT, median TPOT, duration, mean
    decode batch per instance, completed requests and p99 TTFT into ``out``.

    Disaggregated: a request first reserves a slot on the decode instance with the fewest
    requests (the decode side pre-allocates the KV before the prefill starts), waits for the
    prefill pool (FIFO), prefills, transfers its KV and emits its first token, then decodes.
    Aggregated: requests queue for the instance, which carries one prefill chunk per step
    while it has room; the first token comes with the prefill's last chunk. A gate of
    ``gate_iters > 1`` iterations (one aggregated instance only) holds new prompts out of
    the scheduler's sight: kind 0 (SGLang's receive interval) opens every ``gate_iters``
    decode iterations, after an iteration that prefilled and when the instance is idle;
    kind 1 (TensorRT-LLM's attention-DP balance) opens every ``gate_iters`` iterations, when
    ``gate_ranks`` prompts wait (one per rank) or when a rank has no decoding request."""
    inf = np.inf
    arrival = np.zeros(n_req)
    first = np.full(n_req, -1.0)
    done = np.full(n_req, -1.0)
    steps_needed = np.zeros(n_req, dtype=np.int64)
    for r in range(n_req):
        steps_needed[r] = max(int(np.ceil((osl[r] - 1) / accept)), 0)
    max_steps = int(steps_needed.max()) + 2
    # per decode instance: a ring of buckets of requests finishing at a step (linked lists)
    head = np.full((n_dec, max_steps), -1, dtype=np.int64)
    nxt = np.full(n_req, -1, dtype=np.int64)
    batch = np.zeros(n_dec, dtype=np.int64)
    reserved = np.zeros(n_dec, dtype=np.int64)
    step = np.zeros(n_dec, dtype=np.int64)
    # decode instances advance in runs of steps at a constant batch: a run ends at the next
    # step where a request finishes, or is cut at the step in progress when a request may
    # join (a KV arrives; aggregated: a prompt is queued while the instance has room)
    run_n = np.ones(n_dec, dtype=np.int64)  # steps in the current run
    run_t0 = np.zeros(n_dec)  # when the run started
    run_s = np.zeros(n_dec)  # its step time
    step_end = np.full(n_dec, inf)
    inst = np.full(n_req, -1, dtype=np.int64)
    q = np.empty(n_req, dtype=np.int64)  # prefill FIFO
    q_head, q_tail = 0, 0
    dq = np.empty(n_req, dtype=np.int64)  # disaggregated: waiting for a decode slot
    dq_head, dq_tail = 0, 0
    rem = isl.copy()  # prompt tokens left to prefill (aggregated chunks)
    pre_free = np.zeros(n_pre)
    pre_job = np.full(n_pre, -1, dtype=np.int64)  # first request of the batch (index in q)
    pre_cnt = np.zeros(n_pre, dtype=np.int64)
    heap_t = np.empty(n_req)  # disaggregated: KV arrivals, a min-heap
    heap_r = np.empty(n_req, dtype=np.int64)
    n_heap = 0
    chunk_left = np.zeros(n_dec, dtype=np.int64)
    chunk_req = np.full(n_dec, -1, dtype=np.int64)
    gated = (not disagg) and gate_iters > 1 and n_dec == 1
    adm = 0  # aggregated: q[q_head:adm] are the prompts the scheduler sees
    gcnt = 0  # iterations counted toward the gate's next opening
    busy_b = 0.0
    completed, issued, to_issue = 0, 0, min(conc, n_req)
    t = 0.0
    while completed < n_req:
        while to_issue > 0 and issued < n_req:  # users whose last request ended submit
            r = issued
            issued += 1
            to_issue -= 1
            arrival[r] = t
            if disagg:
                dq[dq_tail] = r
                dq_tail += 1
            else:
                q[q_tail] = r
                q_tail += 1
                if not gated:
                    adm = q_tail
                    for i in range(n_dec):  # an instance with room takes it after this step
                        if run_n[i] > 1 and batch[i] < cap:
                            _cut_run(i, t, step, run_t0, run_n, run_s, step_end)
        to_issue = 0
        if gated and adm < q_tail:  # prompts the scheduler does not see yet
            if step_end[0] == inf or (gate_kind == 1 and (q_tail - adm >= gate_ranks
                                                          or batch[0] < gate_ranks)):
                adm = q_tail  # idle, or (balance) every rank has a prompt / a rank is idle
                gcnt = 0
                if run_n[0] > 1 and batch[0] < cap:
                    _cut_run(0, t, step, run_t0, run_n, run_s, step_end)
            elif run_n[0] > gate_iters - gcnt:  # the run just started: end it at the gate
                run_n[0] = gate_iters - gcnt
                step_end[0] = run_t0[0] + run_n[0] * run_s[0]
        if disagg:
            while dq_head < dq_tail:  # reserve a decode slot, then queue for prefill
                best, best_n = -1, cap
                for i in range(n_dec):
                    if batch[i] + reserved[i] < best_n:
                        best, best_n = i, batch[i] + reserved[i]
                if best < 0:
                    break
                r = dq[dq_head]
                dq_head += 1
                inst[r] = best
                reserved[best] += 1
                q[q_tail] = r
                q_tail += 1
            for p in range(n_pre):  # a free prefill instance batches queued prompts
                if pre_job[p] < 0 and q_head < q_tail:
                    tokens = 0
                    pre_job[p] = q_head
                    while q_head < q_tail and (tokens == 0 or (
                            tokens + isl[q[q_head]] <= chunk
                            and q_head - pre_job[p] < max_prompts)):
                        tokens += isl[q[q_head]]
                        q_head += 1
                    pre_cnt[p] = q_head - pre_job[p]
                    pre_free[p] = (t + tokens * pre_tok_s
                                   + np.ceil(tokens / chunk) * pre_fixed_s)
        else:
            for i in range(n_dec):  # an idle instance with a queued prompt prefills it
                if step_end[i] == inf and q_head < adm and batch[i] < cap:
                    r = q[q_head]
                    chunk_req[i] = r
                    chunk_left[i] = min(rem[r], chunk)
                    step_end[i] = t + _interp(bs, ts, 0.0) + chunk_left[i] * pre_tok_s
        # -- the next event
        t_next, kind, who = inf, -1, -1
        for i in range(n_dec):
            if step_end[i] < t_next:
                t_next, kind, who = step_end[i], 0, i
        if disagg:
            for p in range(n_pre):
                if pre_job[p] >= 0 and pre_free[p] < t_next:
                    t_next, kind, who = pre_free[p], 1, p
            if n_heap > 0 and heap_t[0] < t_next:
                t_next, kind, who = heap_t[0], 2, -1
        if kind < 0:
            break  # nothing can move (cannot happen with cap >= 1)
        busy_b += (t_next - t) * batch.sum()
        t = t_next
        if kind == 1:  # a prefill batch finished: each KV travels to its decode instance
            for k in range(pre_job[who], pre_job[who] + pre_cnt[who]):
                r = q[k]
                j = n_heap
                n_heap += 1
                heap_t[j] = t + isl[r] * xfer_tok_s
                heap_r[j] = r
                while j > 0:
                    par = (j - 1) // 2
                    if heap_t[par] <= heap_t[j]:
                        break
                    heap_t[par], heap_t[j] = heap_t[j], heap_t[par]
                    heap_r[par], heap_r[j] = heap_r[j], heap_r[par]
                    j = par
            pre_job[who] = -1
            continue
        if kind == 2:  # KV arrived: first token out, the request joins its reserved slot
            r = heap_r[0]
            n_heap -= 1
            heap_t[0] = heap_t[n_heap]
            heap_r[0] = heap_r[n_heap]
            j = 0
            while True:
                c1, c2, m = 2 * j + 1, 2 * j + 2, j
                if c1 < n_heap and heap_t[c1] < heap_t[m]:
                    m = c1
                if c2 < n_heap and heap_t[c2] < heap_t[m]:
                    m = c2
                if m == j:
                    break
                heap_t[m], heap_t[j] = heap_t[j], heap_t[m]
                heap_r[m], heap_r[j] = heap_r[j], heap_r[m]
                j = m
            first[r] = t
            i = inst[r]
            reserved[i] -= 1
            if steps_needed[r] == 0:
                done[r] = t
                completed += 1
                to_issue += 1
                continue
            idle = step_end[i] == inf  # an idle instance starts a step with it now
            if not idle and run_n[i] > 1:
                _cut_run(i, t, step, run_t0, run_n, run_s, step_end)
            slot = (step[i] + (0 if idle else 1) + steps_needed[r]) % max_steps
            nxt[r] = head[i, slot]
            head[i, slot] = r
            batch[i] += 1
            if idle:
                run_s[i] = _interp(bs, ts, float(batch[i]))
                run_t0[i] = t
                run_n[i] = steps_needed[r]  # nothing else finishes before it does
                step_end[i] = t + run_n[i] * run_s[i]
            continue
        # kind == 0: a step of decode instance ``who`` ended
        i = who
        n_ended = run_n[i]
        step[i] += run_n[i]
        run_n[i] = 1
        carried = chunk_req[i] >= 0
        if chunk_req[i] >= 0:  # aggregated: the chunk this step carried
            r = chunk_req[i]
            rem[r] -= chunk_left[i]
            chunk_req[i] = -1
            if rem[r] <= 0:
                q_head += 1
                first[r] = t
                if steps_needed[r] == 0:
                    done[r] = t
                    completed += 1
                    to_issue += 1
                else:  # decodes from the next step, which starts now
                    s2 = (step[i] + steps_needed[r]) % max_steps
                    nxt[r] = head[i, s2]
                    head[i, s2] = r
                    batch[i] += 1
        slot = step[i] % max_steps
        r = head[i, slot]
        head[i, slot] = -1
        while r >= 0:
            done[r] = t
            completed += 1
            to_issue += 1
            batch[i] -= 1
            r = nxt[r]
        if gated:
            if gate_kind == 0 and carried:
                gcnt = gate_iters  # SGLang polls right after an iteration that prefilled
            else:
                gcnt += n_ended
            if gcnt >= gate_iters:
                adm = q_tail
                gcnt = 0 if (gate_kind == 0 and carried) else gcnt % gate_iters
            if adm < q_tail and ((gate_kind == 1 and (q_tail - adm >= gate_ranks
                                                       or batch[i] < gate_ranks))
                                 or (batch[i] == 0 and q_head >= adm)):
                adm = q_tail  # balance met / a rank idle, or the instance would idle
                gcnt = 0
        dt = 0.0
        if not disagg and q_head < adm and batch[i] < cap:
            r = q[q_head]
            chunk_req[i] = r
            chunk_left[i] = min(rem[r], chunk)
            dt = chunk_left[i] * pre_tok_s
        if batch[i] > 0 and chunk_req[i] < 0 and (disagg or q_head == adm
                                                  or batch[i] >= cap):
            # nothing can join before a request finishes: run to that step
            n, j = 1, (step[i] + 1) % max_steps
            while head[i, j] < 0:  # (a non-empty slot exists: the batch's requests)
                n += 1
                j = j + 1 if j + 1 < max_steps else 0
            if gated and adm < q_tail:  # or before the gate lets a waiting prompt in
                n = min(n, gate_iters - gcnt)
            run_s[i] = _interp(bs, ts, float(batch[i]))
            run_t0[i] = t
            run_n[i] = n
            step_end[i] = t + n * run_s[i]
        elif batch[i] > 0 or chunk_req[i] >= 0:
            step_end[i] = t + _interp(bs, ts, float(batch[i])) + dt
        else:
            step_end[i] = inf
    ok = done >= 0
    ttft = first[ok] - arrival[ok]
    tpot = np.empty(ok.sum())
    k = 0
    for r in range(n_req):
        if ok[r]:
            tpot[k] = (done[r] - first[r]) / max(osl[r] - 1, 1)
            k += 1
    out[0] = _quantile(ttft, 0.5) if ttft.size else np.nan
    out[1] = _quantile(ttft, 0.9) if ttft.size else np.nan
    out[2] = _quantile(tpot, 0.5) if tpot.size else np.nan
    out[3] = t
    out[4] = busy_b / max(t, 1e-12) / n_dec
    out[5] = completed
    out[6] = _quantile(ttft, 0.99) if ttft.size else np.nan


@nb.njit(cache=True, nogil=True)
def _replay_rows(first: int, stride: int, conc: np.ndarray, isl_l: np.ndarray,
                 osl_l: np.ndarray, accept: np.ndarray, cap: np.ndarray, n_dec: np.ndarray,
                 n_pre: np.ndarray, disagg: np.ndarray, bs: np.ndarray, ts: np.ndarray,
                 pre_tok_s: np.ndarray, pre_fixed_s: np.ndarray, xfer_tok_s: np.ndarray,
                 gate_iters: np.ndarray, gate_kind: np.ndarray, gate_ranks: np.ndarray,
                 ratio: np.ndarray, per_user: int, chunk: np.ndarray, max_prompts: np.ndarray,
                 seed: int, out: np.ndarray, isl_sum: np.ndarray, osl_sum: np.ndarray) -> None:
    """Rows ``first, first + stride, ...``: one thread's share (rows are independent runs;
    numba's random state is per thread and each row seeds it)."""
    for i in range(first, conc.size, stride):
        n_req = int(conc[i]) * per_user
        # lengths depend on the configuration, not on the row's position in the table
        np.random.seed((seed + int(conc[i]) * 1000003 + int(isl_l[i]) * 7919
                        + int(osl_l[i])) % 2147483647)
        isl = np.empty(n_req, dtype=np.int64)
        osl = np.empty(n_req, dtype=np.int64)
        lo_i, lo_o = int(isl_l[i] * ratio[i]), int(osl_l[i] * ratio[i])
        for r in range(n_req):
            isl[r] = np.random.randint(lo_i, int(isl_l[i]) + 1)
            osl[r] = max(np.random.randint(lo_o, int(osl_l[i]) + 1), 2)
        _replay_one(int(conc[i]), n_req, isl, osl, accept[i], max(int(cap[i]), 1),
                    int(n_dec[i]), int(n_pre[i]), disagg[i], bs[i], ts[i], pre_tok_s[i],
                    pre_fixed_s[i], xfer_tok_s[i], int(chunk[i]), int(max_prompts[i]),
                    int(gate_iters[i]),
                    int(gate_kind[i]), int(gate_ranks[i]), out[i])
        isl_sum[i] = isl.sum()
        osl_sum[i] = osl.sum()


def _threads(rows: int) -> int:
    """Threads for ``rows`` independent runs: one per core this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, rows))


def _replay_all(*args) -> tuple:
    """Every row on every core: threads over a ``nogil`` kernel, rows dealt round-robin
    (their costs vary by 1000x with ``conc``). numba's ``parallel=True`` did the same and
    took ~3 s more to compile on first use."""
    n = args[0].size
    out = np.zeros((n, 7))
    isl_sum = np.zeros(n)
    osl_sum = np.zeros(n)
    k = _threads(n)
    if k == 1:
        _replay_rows(0, 1, *args, out, isl_sum, osl_sum)
    else:
        with ThreadPoolExecutor(k) as pool:
            for f in [pool.submit(_replay_rows, t, k, *args, out, isl_sum, osl_sum)
                      for t in range(k)]:
                f.result()
    return out, isl_sum, osl_sum


def replay_client(conc: np.ndarray, isl: np.ndarray, osl: np.ndarray, accept: np.ndarray,
                  cap: np.ndarray, n_dec: np.ndarray, n_pre: np.ndarray, disagg: np.ndarray,
                  batch_grid: np.ndarray, step_s: np.ndarray, prefill_s_per_token: np.ndarray,
                  xfer_s_per_token: np.ndarray, *, prefill_s_per_chunk=None, gate_iters=None,
                  gate_kind=None, gate_ranks=None, chunk_tokens=None, max_prompts=None,
                  seed: int = 0,
                  per_user: int = NUM_PROMPTS_PER_USER,
                  ratio=None) -> dict[str, np.ndarray]:
    """Replay every row's benchmark run; arrays are per row, ``batch_grid`` / ``step_s`` are
    (rows x grid points). Returns median/p90/p99 TTFT, median TPOT (s), duration (s), tokens
    in and out, and the time-averaged decode batch per instance.

    ``prefill_s_per_chunk``: a disaggregated prefill instance's fixed cost per forward chunk
    (weights read, launches), shared by the prompts it batches; default 0.
    ``gate_iters`` / ``gate_kind`` / ``gate_ranks``: the admission gate of an aggregated
    instance (:func:`toolkit.serving.recipes.admission_gates`); default none.
    ``chunk_tokens`` / ``max_prompts``: tokens and prompts one disaggregated prefill forward
    may take (:func:`toolkit.serving.recipes.prefill_batching`); default one
    :data:`CHUNK_TOKENS` chunk of as many prompts as fit.
    ``ratio``: the client's ``--random-range-ratio`` per row (lengths uniform in
    ``[ratio L, L]``); default :data:`RANGE_RATIO`."""
    n = np.asarray(conc).size

    def per_row(v, default: float, dtype) -> np.ndarray:
        return np.ascontiguousarray(np.broadcast_to(
            np.asarray(default if v is None else v, dtype=np.float64), (n,)), dtype=dtype)

    fixed = per_row(prefill_s_per_chunk, 0.0, np.float64)
    out, isl_sum, osl_sum = _replay_all(
        np.ascontiguousarray(conc, dtype=np.float64), np.asarray(isl, dtype=np.float64),
        np.asarray(osl, dtype=np.float64), np.asarray(accept, dtype=np.float64),
        np.floor(np.minimum(cap, 1e9)).astype(np.float64), np.asarray(n_dec, np.float64),
        np.asarray(n_pre, np.float64), np.asarray(disagg, dtype=np.bool_),
        np.ascontiguousarray(batch_grid, dtype=np.float64),
        np.ascontiguousarray(step_s, dtype=np.float64),
        np.asarray(prefill_s_per_token, np.float64), np.ascontiguousarray(fixed),
        np.asarray(xfer_s_per_token, np.float64), per_row(gate_iters, 1.0, np.int64),
        per_row(gate_kind, 0.0, np.int64), per_row(gate_ranks, 1.0, np.int64),
        per_row(ratio, RANGE_RATIO, np.float64), int(per_user),
        per_row(chunk_tokens, CHUNK_TOKENS, np.int64),
        per_row(max_prompts, MAX_PREFILL_PROMPTS, np.int64), int(seed))
    return {"median_ttft_s": out[:, 0], "p90_ttft_s": out[:, 1], "p99_ttft_s": out[:, 6],
            "median_tpot_s": out[:, 2],
            "duration_s": out[:, 3], "mean_batch_per_instance": out[:, 4],
            "completed": out[:, 5], "input_tokens": isl_sum, "output_tokens": osl_sum}
