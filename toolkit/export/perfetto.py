"""A tier replay's per-request timeline as Chrome trace-event JSON (Perfetto UI, chrome://tracing,
Holistic Trace Analysis' trace loaders).

What the replay stores per request (``tier_requests``) is its arrival, admission, first
token and finish, and how many prompt tokens came from the device, host and storage tiers.
The split of admission -> first token into waiting for the prefill lane, the SSD read,
the host load and the prefill compute is not stored: it is rebuilt here from the run's
config with the same service-time model and the same formulas as the replay's event loop
(:mod:`toolkit.replay.tiers.loop`; ``first = start + max(compute, host load) + storage
load``), and checked against the stored times (a run whose service times cannot be rebuilt,
e.g. after a spec changed, falls back to one "prefill" slice from admission to first token
and says so in the trace's metadata).

Tracks of the trace (one serving instance, ``pid`` 1; a cluster replay's run gives one
process per instance, ``pid`` = instance + 1, each with these tracks):

* ``GPU prefill`` (tid 1): ``prefill`` slices, one per request, serial as the replay's one
  prefill lane is;
* ``host tier -> GPU`` (tid 2): ``host load`` slices (overlapping the prefill compute, as
  HiCache loads layer by layer);
* ``storage tier -> host`` (tid 3): ``SSD load`` slices (read before the prefill starts);
* async tracks ``queue`` (arrival -> admission), ``prefill wait`` (admission -> prefill
  lane free) and ``decode`` (first token -> finish), one slice per request (they overlap);
* counters ``running requests``, ``waiting requests`` and ``host tier used (tokens)``
  (sampled at each admission, as the replay records it).

Timestamps are microseconds (``ts``, ``dur``), as the format requires.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from toolkit.errors import StoreError, ToolkitError
from toolkit.store import Store
from toolkit.version import __version__

US = 1e6  # microseconds per second
PID = 1
TRACKS = {1: "GPU prefill", 2: "host tier -> GPU", 3: "storage tier -> host"}
SLICE_NAMES = ("prefill", "host load", "SSD load", "queue", "prefill wait", "decode")


@dataclass(frozen=True)
class Phases:
    """Per-request phase boundaries in seconds (arrays aligned with ``tier_requests``)."""

    arrival: np.ndarray
    admit: np.ndarray
    start: np.ndarray  # the prefill lane takes the request
    ssd_end: np.ndarray  # start + storage load
    host_end: np.ndarray  # ssd_end + host load
    first: np.ndarray
    finish: np.ndarray
    rebuilt: bool  # False: the split of admit -> first could not be rebuilt


def plan_tier_run(store: Store, plan: str) -> str | None:
    """The tier replay a ``toolkit plan`` answer was evaluated by (``PLAN_ID`` or
    ``PLAN_ID/RANK``, rank 1 by default), or None when ``plan`` names no stored plan."""
    import json

    if "plan_runs" not in store.tables():
        return None
    pid, _, rank = plan.partition("/")
    if not rank.isdigit() and rank:
        return None
    rows = store.query("SELECT rank, run_ids FROM plan_runs WHERE plan_id = $p AND rank = $r",
                       {"p": pid, "r": int(rank or 1)}).to_dicts()
    tiers = set(store.keys("tier_runs"))
    for row in rows:
        for rid in json.loads(row["run_ids"]):
            if rid in tiers:
                return rid
    return None


def _read_run(store: Store, run_id: str) -> tuple[dict, pa.Table]:
    if "tier_runs" not in store.tables():
        raise StoreError(f"no tier or cluster replay {run_id!r} in {store.root}; run "
                         "`toolkit replay tiers` or `toolkit replay cluster` first")
    planned = plan_tier_run(store, run_id) if run_id not in store.keys("tier_runs") else None
    run_id = planned or run_id
    if run_id not in store.keys("tier_runs"):
        known = store.keys("tier_runs")
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise StoreError(f"no tier replay {run_id!r} in {store.root}"
                         + (f"; tier runs: {shown}" if known else
                            "; run `toolkit replay tiers` first")
                         + " (a plan's timeline: --run PLAN_ID[/RANK] from plan_runs)")
    run = store.read("tier_runs", run_id).to_pylist()[0]
    reqs = store.read("tier_requests", run_id)
    # admission order: the prefill lane serves requests first come, first served, so
    # first-token times increase in admission order
    return run, reqs.sort_by([("first_token_s", "ascending"), ("admit_s", "ascending"),
                              ("request_id", "ascending")])


def service_coefficients(run: dict, mean_prompt_tokens: int) -> dict[str, float]:
    """The six service-time coefficients the run's loop used, rebuilt from its config."""
    from toolkit.hardware import get_hardware
    from toolkit.models import get_model
    from toolkit.replay.tiers.config import ServiceAssumptions
    from toolkit.serving.tier_service import TierServiceModel

    cfg = json.loads(run["config_json"])
    model = TierServiceModel(get_hardware(cfg["hardware"]), get_model(cfg["model"]),
                             ServiceAssumptions(**cfg.get("assumptions", {})))
    max_batch = cfg.get("concurrency") or (cfg.get("max_running") or 1024)
    t = model.times(mean_prompt_tokens, int(max_batch))
    return {"prefill_s_per_token": t.prefill_s_per_token,
            "prefill_s_per_token_context": t.prefill_s_per_token_context,
            "host_fixed_s": t.host_fixed_s, "host_s_per_token": t.host_s_per_token,
            "storage_fixed_s": t.storage_fixed_s, "storage_s_per_token": t.storage_s_per_token}


def phases(run: dict, reqs: pa.Table, coef: dict[str, float] | None = None
           ) -> tuple[Phases, dict[str, float] | None]:
    """Rebuild each request's phases (see the module docstring); ``coef``: the run's
    service coefficients when the caller has them (a cluster run's instances share them)."""
    col = {c: reqs.column(c).to_numpy().astype(np.float64) for c in (
        "arrival_s", "admit_s", "first_token_s", "finish_s", "prompt_tokens",
        "device_tokens", "host_tokens", "storage_tokens")}
    prompt = col["prompt_tokens"]
    if coef is None:
        try:
            coef = service_coefficients(run, int(prompt.mean()))
        except (ToolkitError, ValueError, KeyError, TypeError):
            coef = None
    first, admit = col["first_token_s"], col["admit_s"]
    if coef is not None:
        host, sto = col["host_tokens"], col["storage_tokens"]
        computed = np.maximum(prompt - col["device_tokens"] - host - sto, 0)
        cached = prompt - computed
        t_comp = coef["prefill_s_per_token"] * computed + \
            coef["prefill_s_per_token_context"] * computed * 0.5 * (cached + prompt)
        t_lh = np.where(host > 0, coef["host_fixed_s"] + coef["host_s_per_token"] * host, 0.0)
        t_ls = np.where(sto > 0, coef["storage_fixed_s"] + coef["storage_s_per_token"] * sto,
                        0.0)
        start = first - (np.maximum(t_comp, t_lh) + t_ls)
        tol = 1e-9 * np.maximum(1.0, np.abs(first))
        # the loop starts a prefill at max(admission, previous first token)
        prev_first = np.concatenate([[-np.inf], np.maximum.accumulate(first)[:-1]])
        lane = np.maximum(admit, prev_first)
        if np.all(np.abs(start - lane) <= tol * 1e3):
            start = np.clip(start, admit, first)
            ssd_end = np.minimum(start + t_ls, first)
            host_end = np.minimum(ssd_end + t_lh, first)
            return Phases(col["arrival_s"], admit, start, ssd_end, host_end, first,
                          col["finish_s"], True), coef
    return Phases(col["arrival_s"], admit, admit, admit, admit, first, col["finish_s"],
                  False), coef


def _complete(name: str, tid: int, t0: float, t1: float, args: dict, pid: int = PID) -> dict:
    return {"name": name, "cat": "tiers", "ph": "X", "pid": pid, "tid": tid,
            "ts": t0 * US, "dur": (t1 - t0) * US, "args": args}


def _async(name: str, rid: int, t0: float, t1: float, args: dict, pid: int = PID
           ) -> list[dict]:
    common = {"name": name, "cat": name, "pid": pid, "tid": 0, "id": f"0x{rid:x}"}
    return [{**common, "ph": "b", "ts": t0 * US, "args": args},
            {**common, "ph": "e", "ts": t1 * US}]


def _counter(name: str, times: np.ndarray, values: np.ndarray, pid: int = PID) -> list[dict]:
    """One ``C`` event per distinct time, holding the value after all changes at it."""
    if times.size == 0:
        return []
    order = np.argsort(times, kind="stable")
    t, v = times[order], values[order]
    last = np.append(t[1:] != t[:-1], True)
    return [{"name": name, "ph": "C", "pid": pid, "tid": 0, "ts": a * US, "args": {"value": b}}
            for a, b in zip(t[last].tolist(), v[last].astype(np.float64).tolist(), strict=True)]


def _instance_events(pid: int, name: str, reqs: pa.Table, ph: Phases) -> list[dict]:
    """One serving instance's tracks (process ``pid``), slices and counters."""
    rid = reqs.column("request_id").to_numpy()
    tokens = {c: reqs.column(c).to_numpy() for c in (
        "prompt_tokens", "output_tokens", "device_tokens", "host_tokens", "storage_tokens",
        "computed_tokens")}
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}},
        *({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": n}}
          for tid, n in TRACKS.items()),
    ]
    for i in range(rid.size):
        r = int(rid[i])
        args = {"request_id": r, **{k: int(v[i]) for k, v in tokens.items()}}
        if ph.rebuilt:
            if ph.ssd_end[i] > ph.start[i]:
                events.append(_complete("SSD load", 3, ph.start[i], ph.ssd_end[i],
                                        {"request_id": r,
                                         "storage_tokens": int(tokens["storage_tokens"][i])},
                                        pid))
            if ph.host_end[i] > ph.ssd_end[i]:
                events.append(_complete("host load", 2, ph.ssd_end[i], ph.host_end[i],
                                        {"request_id": r,
                                         "host_tokens": int(tokens["host_tokens"][i])}, pid))
            events.append(_complete("prefill", 1, ph.ssd_end[i], ph.first[i], args, pid))
        else:
            events.append(_complete("prefill", 1, ph.admit[i], ph.first[i], args, pid))
        if ph.admit[i] > ph.arrival[i]:
            events += _async("queue", r, ph.arrival[i], ph.admit[i], {"request_id": r}, pid)
        if ph.start[i] > ph.admit[i]:
            events += _async("prefill wait", r, ph.admit[i], ph.start[i], {"request_id": r},
                             pid)
        if ph.finish[i] > ph.first[i]:
            events += _async("decode", r, ph.first[i], ph.finish[i],
                             {"request_id": r, "output_tokens": int(tokens["output_tokens"][i])},
                             pid)
    n = rid.size
    ones = np.ones(n)
    t = np.concatenate([ph.admit, ph.finish])
    d = np.concatenate([ones, -ones])
    order = np.lexsort((d, t))  # at equal times finishes (-1) count before admissions
    events += _counter("running requests", t[order], np.cumsum(d[order]), pid)
    t = np.concatenate([ph.arrival, ph.admit])
    order = np.lexsort((-d, t))  # arrivals before admissions at equal times
    events += _counter("waiting requests", t[order], np.cumsum(d[order]), pid)
    if "host_used_tokens" in reqs.column_names:
        events += _counter("host tier used (tokens)", ph.admit,
                           reqs.column("host_used_tokens").to_numpy().astype(np.float64), pid)
    return events


def tier_trace(store: Store, run_id: str) -> dict[str, Any]:
    """The trace-event JSON object of tier replay ``run_id`` (see the module docstring);
    a cluster replay's id (``cluster_runs``) gives one process per instance
    (:func:`cluster_trace`)."""
    if "cluster_runs" in store.tables() and run_id in store.keys("cluster_runs"):
        return cluster_trace(store, run_id)
    run, reqs = _read_run(store, run_id)
    ph, coef = phases(run, reqs)
    cfg = json.loads(run["config_json"])
    gpus = cfg.get("assumptions", {}).get("gpus_per_replica", "?")
    events = _instance_events(PID, f"instance 0: {run['hardware']} x{gpus}, {run['model']}",
                              reqs, ph)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": f"toolkit {__version__} (tier replay: modelled, not measured)",
            "run_id": run.get("run_id", run_id), "trace": run["trace"],
            "hardware": run["hardware"],
            "model": run["model"], "requests": int(reqs.num_rows),
            "phases": "rebuilt from the run's service times" if ph.rebuilt else
            "admission -> first token as one prefill slice (service times not rebuilt)",
            "service_times_s": coef or {},
        },
    }


def cluster_trace(store: Store, run_id: str) -> dict[str, Any]:
    """A cluster replay's timeline: one process per instance (``pid`` = instance + 1), each
    with the tracks, slices and counters a tier replay's one instance has (no host-tier
    counter: ``cluster_requests`` does not record it)."""
    run = store.read("cluster_runs", run_id).to_pylist()[0]
    reqs = store.read("cluster_requests", run_id).rename_columns(
        {"device_hit_tokens": "device_tokens", "host_hit_tokens": "host_tokens",
         "storage_hit_tokens": "storage_tokens"})
    cfg = json.loads(run["config_json"])
    tiers = dict(cfg.get("tiers", {}))
    prompt = reqs.column("prompt_tokens").to_numpy()
    try:
        coef = service_coefficients({"config_json": json.dumps(tiers)}, int(prompt.mean()))
    except (ToolkitError, ValueError, KeyError, TypeError):
        coef = None
    inst = reqs.column("instance").to_numpy()
    events: list[dict] = []
    rebuilt = True
    for i in range(int(run["instances"])):
        part = reqs.filter(pa.array(inst == i)).sort_by(
            [("first_token_s", "ascending"), ("admit_s", "ascending"),
             ("request_id", "ascending")])
        if part.num_rows == 0:
            continue
        ph, _ = phases(run, part, coef) if coef is not None else phases(
            {"config_json": "{}"}, part, None)
        rebuilt &= ph.rebuilt
        events += _instance_events(
            i + 1, f"instance {i}: {run['hardware']} x{run['gpus_per_instance']}, "
                   f"{run['model']} ({run['router']})", part, ph)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": f"toolkit {__version__} (cluster replay: modelled, not measured)",
            "run_id": run_id, "trace": run["trace"], "hardware": run["hardware"],
            "model": run["model"], "instances": int(run["instances"]),
            "router": run["router"], "requests": int(reqs.num_rows),
            "phases": "rebuilt from the run's service times" if rebuilt else
            "admission -> first token as one prefill slice (service times not rebuilt)",
            "service_times_s": coef or {},
        },
    }


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_perfetto(store: Store, run_id: str, out: str | Path, *,
                   replace: bool = False) -> dict[str, Any]:
    """Write :func:`tier_trace` to ``out`` (``.json``, or ``.json.gz`` compressed) atomically;
    returns a summary (path, events, slices per name).

    As every writer: ``out``'s directory must exist, an existing file is replaced only
    with ``replace``, and no path inside a store is written (:mod:`toolkit.store.guard`)."""
    import gzip
    import os
    import tempfile

    from toolkit.store.guard import check_write_path

    out = Path(out)
    if not (out.name.endswith(".json") or out.name.endswith(".json.gz")):
        raise ToolkitError(f"{out}: the trace-event file must end in .json or .json.gz")
    check_write_path(out, "--out", store=store.root)
    if out.is_dir():
        raise ToolkitError(f"--out {out}: is a directory; give a file name")
    if not out.parent.is_dir():
        raise ToolkitError(f"--out {out}: directory {out.parent} does not exist")
    if out.exists() and not replace:
        raise ToolkitError(f"--out {out}: exists; pass --replace to overwrite it")
    trace = tier_trace(store, run_id)
    data = json.dumps(trace, separators=(",", ":")).encode()
    if out.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 is for the temporary name only
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    counts: dict[str, int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] in ("X", "b"):
            counts[e["name"]] = counts.get(e["name"], 0) + 1
    return {"path": str(out), "run_id": run_id, "events": len(trace["traceEvents"]),
            "slices": counts, "phases": trace["otherData"]["phases"]}
