"""Miss curves for every policy from sampled streams, against exact per-size replays and
against libCacheSim's own sampler on the same stream, in one run.

Per stream and policy, at 20 cache sizes (evenly spaced up to the stream's distinct keys,
or the largest sequence for a selection trace):

- exact: 20 replays of the whole stream (``policies.get(p).simulate``, one thread);
- ours: ``policy_miss_curve`` at the default sampling (fixed size, 65,536 keys) or
  ``--sample-rate``: SHARDS' one pass for LRU, mini caches for the others; the figure is
  the mean absolute miss-ratio error against exact and the speed-up over the 20 replays,
  the sampling passes included;
- libCacheSim: its Python package (0.3.5) exposes no ``mrcProfiler``, but its trace reader
  takes its own spatial sampler (``SPATIAL_SAMPLER``; ``SHARDS_SAMPLER`` is "not added" in
  the binding), so its caches replay its own sample at ``round(rate * size)`` slots: the
  mini-simulation its profiler runs, at our rate. Not for the selection stream, whose
  cold restarts per (request, layer) buffer libCacheSim has no notion of.

Streams: the bundled Mooncake trace's prefix blocks (real); the bundled SmolLM2 selection
trace in plain mode (real, one cold buffer per request x layer); a labelled-SYNTHETIC
independent-reference stream, Zipf(0.9) popularity over ``accesses / 10`` keys.

Times are CPU seconds of this process (``time.process_time``; every timed part runs on one
thread), so a machine other processes load stretches the wall time in brackets but not the
speed-ups. Run: ``.venv/bin/python benchmarks/mrc_bench.py`` (``--synthetic-accesses 100000000`` is
the default; ``--quick`` for a smoke run). Prints Markdown tables and the load average.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import libcachesim as lcs
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_bench import POLICIES, mooncake_stream

from toolkit.policies import policies
from toolkit.replay.mrc import Stream, policy_miss_curve, stored_streams
from toolkit.runtime import keep_freed_memory

keep_freed_memory()
ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def synthetic_stream(accesses: int, seed: int = 7) -> tuple[np.ndarray, int]:
    """SYNTHETIC: Zipf(0.9) popularity over accesses / 10 keys, ids shuffled."""
    n_keys = max(accesses // 10, 1)
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(np.arange(1, n_keys + 1, dtype=np.float64) ** -0.9)
    cdf /= cdf[-1]
    perm = rng.permutation(n_keys).astype(np.int32)
    keys = np.empty(accesses, dtype=np.int32)
    step = 10_000_000
    for lo in range(0, accesses, step):
        hi = min(lo + step, accesses)
        keys[lo:hi] = perm[np.minimum(np.searchsorted(cdf, rng.random(hi - lo)), n_keys - 1)]
    used = np.unique(keys)
    remap = np.full(n_keys, -1, dtype=np.int32)
    remap[used] = np.arange(used.size, dtype=np.int32)
    return remap[keys], int(used.size)


def selection_stream() -> tuple[list[Stream], int]:
    """The bundled SmolLM2 trace's plain-mode stream, chunk by chunk (as `replay mrc`)."""
    from toolkit.ingest import ingest_file
    from toolkit.store import open_store

    tmp = Path(tempfile.mkdtemp(prefix=f"mrc-bench-{os.getpid()}-"))
    with open_store(tmp / "store", create=True) as store:
        ingest_file(store, "bundle", ROOT / "traces" / "smollm2", "sm",
                    select="smollm2-softmax-sum")
        chunks = [st for _, st in stored_streams(store, "sm", "selections")()]
    return chunks, max(st.n_keys for st in chunks)


def npy_header(path: Path) -> int:
    with path.open("rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.tell()


def lcs_minisim(cls: str, sizes: np.ndarray, rate: float, npy: Path,
                header: int) -> tuple[float, np.ndarray]:
    """libCacheSim's spatial sampler + its caches at round(rate * size) slots."""
    sys.stdout.flush()
    saved = os.dup(1)  # its sampler prints a line per reader on the C stdout
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    try:
        t0 = time.process_time()
        ratios = [_lcs_one(cls, int(c), rate, npy, header) for c in sizes]
        dt = time.process_time() - t0
    finally:
        os.dup2(saved, 1)
    return dt, np.array(ratios)


def _lcs_one(cls: str, c: int, rate: float, npy: Path, header: int) -> float:
    """One mini cache over libCacheSim's own sample of the stream: its miss ratio."""
    param = lcs.ReaderInitParam(binary_fmt_str="<i", ignore_obj_size=True,
                                trace_start_offset=header)
    param.obj_id_field = 1
    sampler = lcs.libcachesim_python.Sampler(rate, lcs.SamplerType.SPATIAL_SAMPLER)
    param.sampler = sampler  # kept referenced: the reader does not own it
    reader = lcs.TraceReader(str(npy), lcs.TraceType.BIN_TRACE, param)
    cap = max(1, round(int(c) * rate))
    cache = getattr(lcs, cls)(cap, hashpower=max(4, math.ceil(math.log2(cap)) + 1))
    mr, _ = cache.process_trace(reader)
    del reader, sampler
    return mr


def bench_stream(name: str, chunks: list[Stream], sizes: np.ndarray, names: list[str],
                 sample: dict, lcs_files: tuple[Path, int] | None) -> list[str]:
    total = sum(st.keys.size for st in chunks)

    def streams():
        return [(i << 24, st) for i, st in enumerate(chunks)]

    rows = []
    for p in names:
        pol = policies.get(p)
        # compile first (cached on disk after the first run): timings are replays only
        policy_miss_curve(streams, sizes[:2], p, **sample)
        pol.simulate(chunks[0].keys[:1000], chunks[0].n_keys, 8, None)
        load0 = load()
        w0, t0 = time.perf_counter(), time.process_time()
        exact = np.zeros(sizes.size)
        for j, c in enumerate(sizes):
            exact[j] = sum(pol.simulate(st.keys, st.n_keys, int(c), st.segments).miss_count
                           for st in chunks)
        t_exact, w_exact = time.process_time() - t0, time.perf_counter() - w0
        exact /= total
        w0, t0 = time.perf_counter(), time.process_time()
        est = policy_miss_curve(streams, sizes, p, workers=1, **sample)
        t_est, w_est = time.process_time() - t0, time.perf_counter() - w0
        mae = float(np.abs(est.miss_ratio - exact).mean())
        lcs_cell = "n/a (no cold restarts)" if lcs_files is None else "n/a (no such policy)"
        if lcs_files is not None and est.sample_rate > 0.5:
            lcs_cell = "n/a (its sampler takes rates <= 0.5)"
        elif lcs_files is not None and POLICIES.get(p) and POLICIES[p] != "Belady":
            t_l, r_l = lcs_minisim(POLICIES[p], sizes, est.sample_rate, *lcs_files)
            lcs_cell = (f"{np.abs(r_l - exact).mean():.4f} / {t_exact / t_l:.1f}x "
                        f"({t_l:.2f} s)")
        elif POLICIES.get(p) == "Belady" and lcs_files is not None:
            lcs_cell = "n/a (Belady needs next-use times)"
        rows.append(f"| {name} | {p} | {est.method} {est.sample_rate:.4f} | {t_exact:.2f} "
                    f"({w_exact:.1f}) | {t_est:.2f} ({w_est:.1f}) | **{t_exact / t_est:.1f}x** | "
                    f"**{mae:.4f}** | {lcs_cell} | {load0} |")
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic-accesses", type=int, default=100_000_000)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--sample-rate", type=float, default=None)
    ap.add_argument("--sample-keys", type=int, default=None)
    ap.add_argument("--streams", default="mooncake,selections,synthetic",
                    help="which streams, comma-separated (the 100M synthetic one alone takes "
                    "most of an hour on 2 cores)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    names = args.policies.split(",")
    sample = {k: v for k, v in (("sample_rate", args.sample_rate),
                                ("sample_keys", args.sample_keys)) if v is not None}
    n_syn = 1_000_000 if args.quick else args.synthetic_accesses
    print(f"load before: {load()}; sampling: {sample or 'default (65,536 keys)'}")
    print("| stream | policy | method, rate | exact 20 sizes, CPU s (wall) | ours, CPU s (wall) "
          "| speed-up | MAE | libCacheSim sampler: MAE / speed-up (CPU s) | load (1/5/15 min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    streams = args.streams.split(",")
    tmp = Path(tempfile.mkdtemp(prefix=f"mrc-bench-{os.getpid()}-"))
    if "mooncake" in streams:
        keys, n_keys = mooncake_stream()
        np.save(tmp / "mooncake.npy", keys.astype(np.int32))
        header = npy_header(tmp / "mooncake.npy")
        sizes = np.linspace(n_keys / 20, n_keys, 20).astype(np.int64)
        bench_stream("Mooncake prefix (real)", [Stream(keys, n_keys, None)], sizes, names,
                     sample, (tmp / "mooncake.npy", header))
    if "selections" in streams:
        chunks, longest = selection_stream()
        sizes = np.linspace(longest / 20, longest, 20).astype(np.int64)
        bench_stream("SmolLM2 selections, plain (real)", chunks, sizes, names, sample, None)
    if "synthetic" not in streams:
        print(f"load after: {load()}")
        return
    t0 = time.perf_counter()
    keys, n_keys = synthetic_stream(n_syn)
    print(f"(synthetic stream: {keys.size:,} accesses, {n_keys:,} keys, generated in "
          f"{time.perf_counter() - t0:.1f} s)")
    np.save(tmp / "synthetic.npy", keys)
    header = npy_header(tmp / "synthetic.npy")
    sizes = np.linspace(n_keys / 20, n_keys, 20).astype(np.int64)
    bench_stream(f"SYNTHETIC Zipf(0.9), {keys.size / 1e6:.0f}M accesses",
                 [Stream(keys, n_keys, None)], sizes, names, sample,
                 (tmp / "synthetic.npy", header))
    print(f"load after: {load()}")


if __name__ == "__main__":
    try:
        main()
    finally:  # the scratch stores and .npy copies of the streams
        for d in Path(tempfile.gettempdir()).glob(f"mrc-bench-{os.getpid()}-*"):
            shutil.rmtree(d, ignore_errors=True)
