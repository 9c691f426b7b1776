"""Selection replay end to end: store-to-result against kernel-only on the same stream.

Builds a SYNTHETIC k=2048 selection trace in a temporary store (default: 4 requests x 256
steps x 8 layers, 32K-token prompt; the workload of issue 11), then, in this one process
and for plain and HiSparse modes with LRU at 4,096 slots:

* **store-to-result**: ``replay_selections`` from the store (read Parquet, order rows,
  fast-path/newest filtering, warm-up, policy, per-row results written back);
* **kernel-only**: ``LRU().simulate`` alone on the key stream that replay plans;
* **libCacheSim LRU** (tuned ``hashpower``) on the same keys as one segment (it has no
  cold restarts), next to our LRU on that same single-segment stream; miss counts of the
  two must agree.

Then the same selection comparison on the bundled **real** SmolLM2-135M recording (k = 64,
~2M accesses), where a replay's fixed costs weigh most (``--sections real``).

Then the same comparison for **prefix replay** and its **miss curve**, on the real Mooncake
conversation trace and on a SYNTHETIC 40x tiling of it (11.5M lookups; hash ids and request
ids shifted per copy so no copy shares a block with another): store-to-result
(``replay_prefix`` with its ``replay_runs`` row written; ``miss_curve_table`` with its
``miss_curves`` rows written) against ``LRU().simulate`` / ``lru_miss_curve`` alone on the
stream, both without the store's stream index (the first replay of a trace written by
other means than ``toolkit ingest``) and with it (every later replay).

Last, 1 worker against ``--workers`` on the two other parallel replays: the selection miss
curve (``replay mrc``, also against ``lru_miss_curve`` alone on the planned stream) and a
4-capacity prefix sweep (``replay prefix`` with several capacities).

Each figure is the median of interleaved rounds: every round calls each contender of a row
once, in turn, and rounds go on past ``--runs`` until each contender has run
``--min-time-s`` in all (a 2 ms prefix replay takes hundreds of rounds; with five calls
its ratio ranged over 34-56% across runs of this script).
numba compile is excluded. Run: ``.venv/bin/python benchmarks/e2e_bench.py [--workers 1] [--runs 5]
[--min-time-s 1] [--sections selections,real,prefix]``.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import libcachesim as lcs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import toolkit
from toolkit.ingest import ingest_file
from toolkit.policies import policies
from toolkit.replay.mrc import lru_miss_curve, miss_curve_table
from toolkit.replay.selection_plan import fused_plan
from toolkit.replay.selections import SelectionReplayConfig, _order, load_rows, replay_selections
from toolkit.runtime import keep_freed_memory
from toolkit.synth.selections import SyntheticSelectionConfig
from toolkit.synth.selections_fast import write_streaming

keep_freed_memory()  # the allocator setting the toolkit command runs with

MOONCAKE = Path(__file__).resolve().parents[1] / "traces" / "mooncake" / "conversation_trace.jsonl"
SMOLLM2 = Path(__file__).resolve().parents[1] / "traces" / "smollm2"


def lcs_lru(keys: np.ndarray, capacity: int, tmp: Path) -> tuple[float, int]:
    """libCacheSim LRU on ``keys`` read in place from an int32 .npy: (seconds, misses)."""
    npy = tmp / "keys.npy"
    np.save(npy, keys.astype(np.int32))
    with npy.open("rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        header = f.tell()
    param = lcs.ReaderInitParam(binary_fmt_str="<i", ignore_obj_size=True,
                                trace_start_offset=header)
    param.obj_id_field = 1
    reader = lcs.TraceReader(str(npy), lcs.TraceType.BIN_TRACE, param)
    cache = lcs.LRU(capacity, hashpower=math.ceil(math.log2(capacity)) + 1)
    t0 = time.perf_counter()
    ratio, _ = cache.process_trace(reader)
    return time.perf_counter() - t0, round(ratio * cache._cache.n_req)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=32_768)
    ap.add_argument("--buffer", type=int, default=4096)
    ap.add_argument("--runs", type=int, default=5, help="at least this many rounds a row")
    ap.add_argument("--min-time-s", type=float, default=1.0,
                    help="and rounds until each contender has run this long in all")
    ap.add_argument("--workers", type=int, default=2,
                    help="thread count compared with 1 worker (0 = all cores)")
    ap.add_argument("--read-ahead", action="store_true",
                    help="replay with the extra I/O thread that decodes the next chunks")
    ap.add_argument("--warm-up-s", type=float, default=3.0,
                    help="replay both modes at both worker counts this long before timing")
    ap.add_argument("--sections", default="selections,real,prefix",
                    help="comma-separated: selections, real, prefix")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    if "selections" in sections:
        selections_section(args)
    if "real" in sections:
        real_section(args)
    if "prefix" in sections:
        prefix_section(args)
    print(f"# load average at end: {os.getloadavg()[0]:.2f}")
    print(f"# peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def selections_section(args: argparse.Namespace) -> None:
    """Selection replay: store-to-result (1 and N workers) vs kernel-only, and libCacheSim."""
    ahead = args.read_ahead
    lru = policies.get("lru")
    cfg = SyntheticSelectionConfig(requests=args.requests, prompt_tokens=args.prompt_tokens,
                                   steps=args.steps, layers=args.layers)
    with tempfile.TemporaryDirectory() as tmp, \
            toolkit.open_store(Path(tmp) / "s", create=True) as store:
        write_streaming(store, cfg, "syn")
        os.sync()  # flush the new file now: writeback during the runs steals a vCPU
        print(f"# SYNTHETIC trace: {args.requests} requests x {args.steps} steps x "
              f"{args.layers} layers, k=2048, prompt {args.prompt_tokens:,}; LRU, "
              f"{args.buffer} slots; {rounds(args)}, 1 worker, {args.workers} "
              f"workers and kernel-only taking turns; read-ahead thread: {ahead}")
        print(f"# load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        w = args.workers
        print(f"| mode | accesses | misses | store-to-result 1 worker M acc/s | store-to-result "
              f"{w} workers M acc/s | kernel-only (1 thread) M acc/s | ratio 1 worker | "
              f"ratio {w} workers | {w} vs 1 worker | policy keys (incl. warm-up) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        single = None
        # steady state: for about its first second a process runs 2-worker replays up to
        # 1.8x slower (measured: 56-93 ms a replay, then 50-53), whichever mode is first
        t_warm = time.perf_counter()
        while time.perf_counter() - t_warm < args.warm_up_s:
            for mode in ("plain", "hisparse"):
                for workers in (1, w):
                    replay_selections(store, SelectionReplayConfig("syn", "lru", args.buffer,
                                                                   mode=mode),
                                      workers=workers, progress=False)
        for mode in ("plain", "hisparse"):
            line, p, n_keys = mode_row(store, "syn", args.buffer, mode, args)
            print(line, flush=True)
            if mode == "plain":
                single = (p.keys, n_keys)
                curve = (p.keys, n_keys, p.segments)
        keys, n_keys = single
        t_lcs, m_lcs, t_ours, m_ours = [], set(), [], set()
        for _ in range(args.runs):
            t, m = lcs_lru(keys, args.buffer, Path(tmp))
            t_lcs.append(t)
            m_lcs.add(m)
            t0 = time.perf_counter()
            res = lru.simulate(keys, n_keys, args.buffer)
            t_ours.append(time.perf_counter() - t0)
            m_ours.add(res.miss_count)
        n = keys.size
        print(f"\nsingle-segment stream of the plain-mode keys ({n:,} accesses, LRU "
              f"{args.buffer}): libCacheSim {n / statistics.median(t_lcs) / 1e6:.1f} M acc/s, "
              f"misses {sorted(m_lcs)}; ours {n / statistics.median(t_ours) / 1e6:.1f} "
              f"M acc/s, misses {sorted(m_ours)}")
        print(workers_row("selection miss curve to 16,384 (replay mrc)", n, args, lambda w:
                          miss_curve_table(store, "syn", "selections", 16_384, workers=w)))
        ck, cn, cseg = curve
        kern, e2e = medians_s([
            lambda: lru_miss_curve(ck, cn, 16_384, cseg, 1),
            lambda: miss_curve_table(store, "syn", "selections", 16_384, workers=1)],
            args.runs, args.min_time_s)
        print(f"selection miss curve to 16,384, 1 thread: kernel-only (lru_miss_curve on the "
              f"planned stream) {ck.size / kern / 1e6:.1f} M/s, store-to-result (replay mrc, "
              f"curve written) {ck.size / e2e / 1e6:.1f} M/s, {kern / e2e:.0%}")


def mode_row(store: toolkit.Store, trace: str, buffer: int, mode: str,
             args: argparse.Namespace) -> tuple[str, object, int]:
    """One table row: ``replay_selections`` from the store at 1 and ``--workers`` workers
    against ``LRU().simulate`` alone on the stream it plans, taking turns; also returns
    the plan and key range."""
    lru = policies.get("lru")
    w = args.workers
    rc = SelectionReplayConfig(trace, "lru", buffer, mode=mode)
    rows = load_rows(store, trace)
    o = _order(rows, None)
    p = fused_plan(rows.values, rows.offsets, o.src, o.seq_len, o.new_group, buffer, mode,
                   "first")
    n_keys = int(max(rows.seq_len.max(), buffer))
    replay_selections(store, rc, workers=w, progress=False)  # compile
    misses, accesses = set(), set()

    def e2e(workers: int) -> None:
        out = replay_selections(store, rc, workers=workers, progress=False,
                                read_ahead=args.read_ahead)
        misses.add(out["misses"])
        accesses.add(out["accesses"])

    times = medians_s([lambda: e2e(1), lambda: e2e(w),
                       lambda: lru.simulate(p.keys, n_keys, buffer, p.segments)],
                      args.runs, args.min_time_s)
    assert len(misses) == 1 and len(accesses) == 1, misses  # any worker count, same result
    n = accesses.pop()
    r1, rn, rk = (n / t / 1e6 for t in times)
    return (f"| {mode} | {n:,} | {misses.pop():,} | {r1:.1f} | {rn:.1f} | {rk:.1f} "
            f"| {r1 / rk:.0%} | {rn / rk:.0%} | {rn / r1:.2f}x | {p.keys.size:,} |", p, n_keys)


def real_section(args: argparse.Namespace) -> None:
    """The same comparison on the bundled real SmolLM2-135M recording (k = 64, 30 layers,
    ~2M accesses): a small trace, where the fixed costs of a replay weigh most."""
    with tempfile.TemporaryDirectory() as tmp, \
            toolkit.open_store(Path(tmp) / "r", create=True) as store:
        ingest_file(store, "bundle", SMOLLM2, "smollm2", select="smollm2-softmax-sum")
        os.sync()
        rows = load_rows(store, "smollm2")
        buffer = 2 * rows.k
        print(f"\n# REAL trace: bundled SmolLM2-135M recording (smollm2-softmax-sum), k = "
              f"{rows.k}, {rows.request_id.size:,} rows; LRU, {buffer} slots; "
              f"{rounds(args)}")
        w = args.workers
        print(f"| mode | accesses | misses | store-to-result 1 worker M acc/s | store-to-result "
              f"{w} workers M acc/s | kernel-only (1 thread) M acc/s | ratio 1 worker | "
              f"ratio {w} workers | {w} vs 1 worker | policy keys (incl. warm-up) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        t_warm = time.perf_counter()
        while time.perf_counter() - t_warm < args.warm_up_s:
            for workers in (1, w):
                replay_selections(store, SelectionReplayConfig("smollm2", "lru", buffer),
                                  workers=workers, progress=False)
        for mode in ("plain", "hisparse"):
            print(mode_row(store, "smollm2", buffer, mode, args)[0], flush=True)


def tiled(table: pa.Table, copies: int, name: str) -> pa.Table:
    """SYNTHETIC: ``copies`` back-to-back copies of a timeline, each with its own block ids,
    request ids and arrival window (so the copies share no block)."""
    hashes = table.column("block_hashes").combine_chunks()
    flat, offsets = hashes.flatten().to_numpy(), hashes.offsets.to_numpy()
    span = int(flat.max()) + 1
    window = float(pc.max(table.column("arrival_s")).as_py()) + 1.0
    out = []
    for i in range(copies):
        t = table.set_column(table.schema.get_field_index("block_hashes"), "block_hashes",
                             pa.ListArray.from_arrays(pa.array(offsets),
                                                      pa.array(flat + i * span)))
        t = t.set_column(t.schema.get_field_index("request_id"), "request_id",
                         pc.add(table.column("request_id"), i * table.num_rows))
        t = t.set_column(t.schema.get_field_index("arrival_s"), "arrival_s",
                         pc.add(table.column("arrival_s"), i * window))
        out.append(t)
    big = pa.concat_tables(out).combine_chunks()
    return big.set_column(0, "trace", pa.array([name] * big.num_rows))


MAX_ROUNDS = 5_000


def rounds(args: argparse.Namespace) -> str:
    """How a row's medians are taken, for the section headers."""
    return (f"median of >= {args.runs} interleaved rounds, each contender >= "
            f"{args.min_time_s:g} s in all")


def medians_s(fns: list[Callable[[], object]], runs: int, min_s: float) -> list[float]:
    """Median wall seconds of each of ``fns``, called in turn once a round (so drift in
    the machine's speed hits all alike), for at least ``runs`` rounds and until each has
    run ``min_s`` seconds in all (at most ``MAX_ROUNDS``)."""
    times: list[list[float]] = [[] for _ in fns]
    spent = [0.0] * len(fns)
    done = 0
    while done < runs or (min(spent) < min_s and done < MAX_ROUNDS):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            times[i].append(dt)
            spent[i] += dt
        done += 1
    return [statistics.median(t) for t in times]


def prefix_row(store: toolkit.Store, trace: str, cap: int, args: argparse.Namespace) -> str:
    """One prefix-replay row: kernel-only vs store-to-result without and with the index."""
    from toolkit.replay.prefix import PrefixReplayConfig, load_stream, replay_prefix

    stream = load_stream(store, trace, use_index=False)
    n = stream.keys.size
    cfg = PrefixReplayConfig(trace, "lru", cap)
    replay_prefix(store, cfg)  # compile, and leave the index in place
    lru = policies.get("lru")
    kern, cold, warm = medians_s([
        lambda: lru.simulate(stream.keys, stream.n_keys, cap),
        lambda: replay_prefix(store, cfg, stream=load_stream(store, trace, use_index=False)),
        lambda: replay_prefix(store, cfg)], args.runs, args.min_time_s)
    return (f"| {trace} | {n:,} | {cap:,} | {n / kern / 1e6:.1f} | {n / cold / 1e6:.1f} "
            f"| {kern / cold:.0%} | {n / warm / 1e6:.1f} | {kern / warm:.0%} |")


def curve_row(store: toolkit.Store, trace: str, cap: int, args: argparse.Namespace) -> str:
    """One miss-curve row: ``lru_miss_curve`` alone vs ``miss_curve_table`` from the store."""
    from toolkit.replay.mrc import lru_miss_curve, miss_curve_table
    from toolkit.replay.prefix import load_stream

    stream = load_stream(store, trace)
    n = stream.keys.size
    miss_curve_table(store, trace, "prefix", cap)
    kern, e2e = medians_s([
        lambda: lru_miss_curve(stream.keys, stream.n_keys, cap, None, 1),
        lambda: miss_curve_table(store, trace, "prefix", cap)], args.runs, args.min_time_s)
    return (f"| {trace} | {n:,} | {cap:,} | {n / kern / 1e6:.1f} | {n / e2e / 1e6:.1f} "
            f"| {kern / e2e:.0%} |")


def workers_row(what: str, n: int, args: argparse.Namespace,
                run: Callable[[int], object]) -> str:
    """``run(1)`` against ``run(args.workers)``, taking turns: one line with both rates."""
    w = args.workers
    run(w)  # compile
    r1, rn = (n / t / 1e6 for t in medians_s([lambda: run(1), lambda: run(w)], args.runs,
                                                 args.min_time_s))
    return f"{what}: 1 worker {r1:.1f} M/s, {w} workers {rn:.1f} M/s, {rn / r1:.2f}x"


def prefix_section(args: argparse.Namespace) -> None:
    """Prefix replay and its miss curve: store-to-result vs kernel-only."""
    cases = (("mooncake", 10_000), ("synthetic-mooncake-x40", 400_000))
    with tempfile.TemporaryDirectory() as tmp, \
            toolkit.open_store(Path(tmp) / "p", create=True) as store:
        ingest_file(store, "mooncake", MOONCAKE, "mooncake")
        store.write("requests", "synthetic-mooncake-x40",
                    tiled(store.read("requests", "mooncake"), 40, "synthetic-mooncake-x40"))
        os.sync()
        print(f"\n# prefix replay, LRU; {rounds(args)}; store-to-result writes "
              "its run row; 'no index' decodes the hash lists, 'index' reads the store's "
              "stream index")
        print("| trace | lookups | capacity blocks | kernel-only M lookups/s | store-to-result "
              "no index | ratio | store-to-result index | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for trace, cap in cases:
            print(prefix_row(store, trace, cap, args), flush=True)
        print("\n| miss curve | lookups | max capacity | kernel-only M lookups/s | "
              "store-to-result (index) M lookups/s | ratio |")
        print("|---|---|---|---|---|---|")
        for trace, cap in cases:
            print(curve_row(store, trace, cap, args), flush=True)
        from toolkit.replay.prefix import load_stream, sweep_prefix

        caps = [10_000, 100_000, 400_000, 1_000_000]
        big = "synthetic-mooncake-x40"
        print("\n" + workers_row(
            f"prefix sweep of 4 capacities ({', '.join(f'{c:,}' for c in caps)} blocks) on "
            f"{big} (replay prefix)", len(caps) * load_stream(store, big).keys.size, args,
            lambda w: sweep_prefix(store, big, caps, workers=w)))


if __name__ == "__main__":
    main()
