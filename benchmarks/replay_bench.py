"""Replay throughput: this toolkit's policy kernels against tuned libCacheSim.

Both engines replay the same access stream in one process: ours from a NumPy array,
libCacheSim from a file it reads itself (the ``.npy`` read in place as BIN_TRACE; a
``<iq`` file with next-access times for Belady), with ``hashpower = ceil(log2 cap) + 1``.
Numba compile time is excluded (one warm-up call first); each figure is the median of 3
runs, the two engines taking turns. Miss counts of both engines are printed side by side
as a correctness check.

Run: ``.venv/bin/python benchmarks/replay_bench.py`` (add ``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

import libcachesim as lcs
import numpy as np

from toolkit.policies import policies
from toolkit.policies.opt import next_use
from toolkit.policies.synthetic import sparse_attention_stream
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
# ours -> libCacheSim class (None: libCacheSim has no equivalent)
POLICIES = {
    "lru": "LRU",
    "fifo": "FIFO",
    "clock": "Clock",
    "lfu": "LFU",
    "arc": "ARC",
    "s3fifo": "S3FIFO",
    "slru": "SLRU",
    "opt": "Belady",
    "opt-bypass": None,
}


def mooncake_stream() -> tuple[np.ndarray, int]:
    """Mooncake block ids flattened per request in file order, remapped dense."""
    with MOONCAKE.open() as f:
        ids = [h for line in f for h in json.loads(line)["hash_ids"]]
    uniq, keys = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    return keys.astype(np.int64), int(uniq.size)


def write_traces(keys: np.ndarray, n_keys: int, tmp: Path) -> tuple[Path, int, Path]:
    """The stream as int32 ``.npy`` (plus its header length) and as ``<iq`` id/next-use."""
    npy = tmp / "trace.npy"
    np.save(npy, keys.astype(np.int32))
    with npy.open("rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        header = f.tell()
    nxt = tmp / "trace_next.bin"
    rec = np.empty(keys.size, dtype=[("id", "<i4"), ("next", "<i8")])
    rec["id"] = keys
    rec["next"] = next_use(keys, n_keys)
    rec.tofile(nxt)
    return npy, header, nxt


def lcs_run(cls: str, capacity: int, npy: Path, header: int, nxt: Path) -> tuple[float, int]:
    """One libCacheSim replay: (seconds in process_trace, misses)."""
    if cls == "Belady":
        param = lcs.ReaderInitParam(
            binary_fmt_str="<iq", ignore_obj_size=True, trace_start_offset=0
        )
        param.next_access_vtime_field = 2
        path = nxt
    else:
        param = lcs.ReaderInitParam(
            binary_fmt_str="<i", ignore_obj_size=True, trace_start_offset=header
        )
        path = npy
    param.obj_id_field = 1
    reader = lcs.TraceReader(str(path), lcs.TraceType.BIN_TRACE, param)
    cache = getattr(lcs, cls)(capacity, hashpower=math.ceil(math.log2(capacity)) + 1)
    t0 = time.perf_counter()
    miss_ratio, _ = cache.process_trace(reader)
    dt = time.perf_counter() - t0
    return dt, round(miss_ratio * cache._cache.n_req)


def ours_run(name: str, keys: np.ndarray, n_keys: int, capacity: int) -> tuple[float, int]:
    """One replay in this engine: (seconds in simulate, misses)."""
    policy = policies.get(name)
    t0 = time.perf_counter()
    res = policy.simulate(keys, n_keys, capacity)
    return time.perf_counter() - t0, res.miss_count


def interleaved(runs: int, *replays) -> list[tuple[float, int]]:
    """(median seconds, misses) per replay callable, running them in turn ``runs`` times so
    that load from other processes on this shared machine hits both engines alike."""
    times: list[list[float]] = [[] for _ in replays]
    misses: list[set[int]] = [set() for _ in replays]
    for _ in range(runs):
        for j, replay in enumerate(replays):
            t, m = replay()
            times[j].append(t)
            misses[j].add(m)
    assert all(len(m) == 1 for m in misses)
    return [(statistics.median(t), m.pop()) for t, m in zip(times, misses, strict=True)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="500 synthetic steps, 1 run each")
    ap.add_argument("--policy", action="append", help="only these policies (repeatable)")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per row (median)")
    ap.add_argument("--ours-only", action="store_true",
                    help="time only this engine (no libCacheSim runs between ours)")
    ap.add_argument("--key-dtype", choices=["int32", "int64"], default="int32",
                    help="key array our engine reads (libCacheSim reads the int32 .npy)")
    args = ap.parse_args()
    runs = 1 if args.quick else args.runs
    selected = {p: c for p, c in POLICIES.items() if not args.policy or p in args.policy}
    steps = 500 if args.quick else 5000
    t0 = time.perf_counter()
    streams = {
        "mooncake": (*mooncake_stream(), [4096]),
        "synthetic k=2048": (*sparse_attention_stream(steps, k=2048, seed=0), [1299, 4096, 8192]),
    }
    print(f"# streams built in {time.perf_counter() - t0:.1f} s; median of {runs} interleaved runs")
    print(f"# load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    dtype = np.dtype(args.key_dtype)
    print(f"# our key array: {dtype}")
    for name in POLICIES:  # compile (or load from the numba cache) outside the timings
        policies.get(name).simulate(np.arange(8, dtype=dtype), 8, 4)
    cols = ["stream", "accesses", "cap", "policy", "misses (ours)", "misses (lcs)"]
    cols += ["ours M acc/s", "lcs M acc/s", "ratio"]
    print("| " + " | ".join(cols) + " |")
    print("|---" * len(cols) + "|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, (keys, n_keys, caps) in streams.items():
            npy, header, nxt = write_traces(keys, n_keys, Path(tmp))
            keys = keys.astype(dtype)
            n = keys.size
            for cap in caps:
                for name, cls in selected.items():
                    replays = [functools.partial(ours_run, name, keys, n_keys, cap)]
                    if cls is not None and not args.ours_only:
                        replays.append(functools.partial(lcs_run, cls, cap, npy, header, nxt))
                    (t_ours, m_ours), *theirs = interleaved(runs, *replays)
                    lcs_cells = ["", "", ""]
                    if theirs:
                        t_lcs, m_lcs = theirs[0]
                        flag = "" if m_lcs == m_ours else " (differs)"
                        lcs_cells = [
                            f"{m_lcs:,}{flag}",
                            f"{n / t_lcs / 1e6:.1f}",
                            f"{t_lcs / t_ours:.1f}x",
                        ]
                    print(
                        f"| {label} | {n:,} | {cap} | {name} | {m_ours:,} | {lcs_cells[0]} "
                        f"| {n / t_ours / 1e6:.1f} | {lcs_cells[1]} | {lcs_cells[2]} |",
                        flush=True,
                    )
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"# peak RSS {peak_mib:.0f} MiB (whole process: streams, both engines, trace files mapped)"
    )


if __name__ == "__main__":
    main()
