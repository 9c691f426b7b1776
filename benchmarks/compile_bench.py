"""Seconds the store's Parquet kernels take to compile on first use, now and at an earlier
revision, in one run (same machine, same load).

Each version runs in a subprocess with an empty ``NUMBA_CACHE_DIR``, so every kernel it
touches compiles. The calls are what commands make on a first run:

- ``read_flat``: a selections file's per-row columns (a selection replay);
- ``read_topk``: its ``topk`` positions (a selection replay);
- ``read_small_ids``: zstd-compressed block ids (a prefix replay);
- ``FlatWriter``: a replay's per-row results with int64, int32, int16, bool and string
  columns (every replay that writes rows).

An earlier revision's ``toolkit/store/parquet/{topk_pages,table}.py`` are taken from git
(``--ref``) and imported from a scratch directory; the rest of ``toolkit`` is this tree's.
``--decode``: then, in one process, both decoders read the same 20.5M-position ``topk``
file (k = 512, ascending positions below 32,768) in turns, 25 times each; the best time a
position of each (a compile-time saving must not cost decode speed).
Run: ``.venv/bin/python benchmarks/compile_bench.py --ref 51f6744 --decode``.

``--warm-up``: instead, where ``toolkit warm-up``'s compile time goes. Each of its work
items runs in its own subprocess, one after the other, in one fresh ``NUMBA_CACHE_DIR``
(as the warm-up's processes share one), with numba's compile events timed: per item the
kernels compiled and seconds, then the kernels that took longest, self time (a kernel's
compile less that of the kernels it compiled on the way) and their count of type
specialisations. Every kernel is numba's (``TOOLKIT_AOT=0``) unless ``--extension``: then
the compiled extension serves the kernels it holds, as after ``make setup``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
sys.path.insert(0, sys.argv[1])
import importlib
from toolkit.store.parquet.sink import parquet_options
tp = importlib.import_module(sys.argv[2])
tb = importlib.import_module(sys.argv[3])
from pathlib import Path
d = Path(sys.argv[4])
rng = np.random.default_rng(0)
rows = 2000
topk = [np.sort(rng.choice(4096, 64, replace=False)).astype(np.int32) for _ in range(rows)]
sel = pa.table({"request": pa.array(np.repeat(np.arange(4), rows // 4), pa.int32()),
                "step": pa.array(np.arange(rows) % 500, pa.int32()),
                "layer": pa.array(np.arange(rows) % 8, pa.int16()),
                "topk": pa.array(topk, pa.list_(pa.int32()))})
sel = sel.cast(pa.schema([pa.field(f.name, pa.list_(pa.field("element", pa.int32(),
                                                            nullable=False))
                                   if f.name == "topk" else f.type, nullable=False)
                          for f in sel.schema]))  # the store's selections layout
pq.write_table(sel, d / "sel.parquet", **parquet_options(sel.schema, sel))
ids = pa.table({"block_hashes": pa.array([rng.integers(0, 10_000, 20).tolist()
                                          for _ in range(rows)], pa.list_(pa.int64()))})
ids = ids.cast(pa.schema([pa.field("block_hashes", pa.list_(pa.int64()), nullable=False)]))
pq.write_table(ids, d / "ids.parquet", **parquet_options(ids.schema, ids))
res = pa.table({"a": pa.array(np.arange(rows), pa.int64()),
                "b": pa.array(np.arange(rows), pa.int32()),
                "c": pa.array(np.arange(rows) % 7, pa.int16()),
                "h": pa.array(np.arange(rows) % 2 == 0),
                "run_id": pa.array(["r"] * rows),
                "s": pa.array([str(i % 5) for i in range(rows)])})
schema = pa.schema([f.with_nullable(False) for f in res.schema])
res = res.cast(schema)
t = {}
def timed(name, fn):
    t0 = time.perf_counter()
    got = fn()
    t[name] = time.perf_counter() - t0
    return got
flat = timed("read_flat", lambda: tp.read_flat(d / "sel.parquet", ["request", "step", "layer"],
                                              [0]))
top = timed("read_topk", lambda: tp.read_topk(d / "sel.parquet", [0]))
small = timed("read_small_ids", lambda: tp.read_small_ids(d / "ids.parquet", "block_hashes",
                                                          [0]))
def write():
    w = tb.FlatWriter(d / "res.parquet", schema)
    w.write(res)
    w.close()
timed("FlatWriter", write)
for name, got in (("read_flat", flat), ("read_topk", top), ("read_small_ids", small)):
    assert got is not None, f"{name} fell back to Arrow"
back = pq.read_table(d / "res.parquet")
assert back.cast(schema).to_pylist() == res.to_pylist(), "FlatWriter: rows differ"
print(json.dumps(t))
"""


DECODE = r"""
import importlib, sys, time
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from toolkit.store.parquet.sink import parquet_options
mods = {n: importlib.import_module(n) for n in sys.argv[3:]}
f = Path(sys.argv[2]) / "topk.parquet"
rng = np.random.default_rng(0)
rows, k = 40_000, 512
topk = np.sort(rng.integers(0, 32_768, (rows, k)), axis=1).astype(np.int32)
t = pa.table({"topk": pa.ListArray.from_arrays(pa.array(np.arange(rows + 1) * k, pa.int32()),
                                               pa.array(topk.ravel()))})
t = t.cast(pa.schema([pa.field("topk", pa.list_(pa.field("element", pa.int32(),
                                                          nullable=False)), nullable=False)]))
pq.write_table(t, f, **parquet_options(t.schema, t), row_group_size=4_000)
groups = list(range(pq.read_metadata(f).num_row_groups))
scratch = {n: m.Scratch() for n, m in mods.items()}
for n, m in mods.items():
    v, o = m.read_topk(f, groups, scratch[n])
    assert np.array_equal(v, topk.ravel()), n
best = dict.fromkeys(mods, 1e9)
for _ in range(25):
    for n, m in mods.items():
        t0 = time.perf_counter()
        m.read_topk(f, groups, scratch[n])
        best[n] = min(best[n], time.perf_counter() - t0)
print(" ".join(f"{n}={best[n] / topk.size * 1e9:.3f}" for n in mods))
"""


PROFILE = r"""
import json, sys, threading, time
from toolkit.runtime import aot  # before numba, as toolkit warm-up's workers import it
from numba.core import event
from toolkit.commands.warmup import _TASK_FUNCTIONS
from pathlib import Path
stack, rec = [], []
class L(event.Listener):
    def on_start(self, ev):
        fn = getattr(ev.data.get("dispatcher"), "py_func", None)
        name = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "?"
        stack.append([name, str(ev.data.get("args")), time.perf_counter(), 0.0])
    def on_end(self, ev):
        name, args, t0, child = stack.pop()
        dt = time.perf_counter() - t0
        if stack:
            stack[-1][3] += dt
        rec.append((name, args, dt - child, not stack))
event.register("numba:compile", L())
t0 = time.perf_counter()
_TASK_FUNCTIONS[sys.argv[1]](Path(sys.argv[2]) / sys.argv[1], Path("traces"))
print(json.dumps({"seconds": time.perf_counter() - t0, "rec": rec}))
"""


def warm_up_profile(extension: bool) -> None:
    from collections import defaultdict

    from toolkit.commands.warmup import TASKS

    order = sorted(TASKS, key=lambda t: t != "demo")
    per_kernel: dict[str, list[float]] = defaultdict(list)
    print("| work item | kernels compiled | seconds | CPU (s) | load after |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as cache, \
            tempfile.TemporaryDirectory(prefix="compile-bench-data-") as data:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT),
               "TOOLKIT_AOT": "1" if extension else "0", "TOOLKIT_PROGRESS": "0"}
        total = 0.0
        for task in order:
            r0 = os.times()
            res = subprocess.run([sys.executable, "-c", PROFILE, task, data],
                                 capture_output=True, text=True, env=env, cwd=ROOT)
            r1 = os.times()
            if res.returncode != 0:
                raise SystemExit(f"{task}: {res.stderr.strip()}")
            out = json.loads(res.stdout.splitlines()[-1])
            for name, _args, self_s, _top in out["rec"]:
                per_kernel[name].append(self_s)
            cpu = (r1.children_user - r0.children_user) + (r1.children_system
                                                           - r0.children_system)
            total += out["seconds"]
            print(f"| {task} | {len(out['rec'])} | {out['seconds']:.1f} | {cpu:.1f} | "
                  f"{load()} |", flush=True)
    ranked = sorted(per_kernel.items(), key=lambda kv: -sum(kv[1]))
    everything = sum(sum(v) for v in per_kernel.values())
    print(f"\n{sum(len(v) for v in per_kernel.values())} compiles of {len(per_kernel)} "
          f"kernels, {everything:.1f} s self time in all ({total:.1f} s wall for the items)")
    print("\n| kernel | specialisations | self seconds | share |")
    print("|---|---|---|---|")
    for name, times in ranked[:25]:
        print(f"| {name} | {len(times)} | {sum(times):.1f} | "
              f"{100 * sum(times) / everything:.0f}% |")


def run(scratch: Path, topk: str, table: str, label: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="compile-bench-") as cache, \
            tempfile.TemporaryDirectory(prefix="compile-bench-data-") as data:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        r0 = os.times()
        res = subprocess.run([sys.executable, "-c", CHILD, str(scratch), topk, table, data],
                             capture_output=True, text=True, env=env, cwd=ROOT)
        r1 = os.times()
    if res.returncode != 0:
        raise SystemExit(f"{label}: {res.stderr.strip()}")
    out = json.loads(res.stdout.splitlines()[-1])
    out["cpu_s"] = (r1.children_user - r0.children_user) + (r1.children_system
                                                            - r0.children_system)
    return out


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default=None, help="git revision to compare with")
    ap.add_argument("--decode", action="store_true", help="also compare decode speed")
    ap.add_argument("--warm-up", action="store_true",
                    help="profile toolkit warm-up's compiles instead")
    ap.add_argument("--extension", action="store_true",
                    help="with --warm-up: the compiled extension in use, as after make "
                    "setup (default: off, every kernel numba's)")
    args = ap.parse_args()
    if args.warm_up:
        warm_up_profile(args.extension)
        return
    with tempfile.TemporaryDirectory(prefix="compile-bench-ref-") as scratch:
        versions = [("this tree", "toolkit.store.parquet.topk_pages",
                     "toolkit.store.parquet.table")]
        if args.ref:
            for name in ("topk_pages", "table"):
                src = subprocess.run(["git", "show", f"{args.ref}:toolkit/store/parquet/"
                                      f"{name}.py"], capture_output=True, text=True,
                                     cwd=ROOT, check=True).stdout
                (Path(scratch) / f"ref_{name}.py").write_text(src)
            versions.insert(0, (args.ref, "ref_topk_pages", "ref_table"))
        print("| version | read_flat | read_topk | read_small_ids | FlatWriter | total (s) "
              "| CPU (s) | load before / after |")
        print("|---|---|---|---|---|---|---|---|")
        for label, topk, table in versions:
            before = load()
            t = run(Path(scratch), topk, table, label)
            total = sum(v for k, v in t.items() if k != "cpu_s")
            print(f"| {label} | {t['read_flat']:.1f} | {t['read_topk']:.1f} | "
                  f"{t['read_small_ids']:.1f} | {t['FlatWriter']:.1f} | {total:.1f} | "
                  f"{t['cpu_s']:.1f} | {before} / {load()} |", flush=True)
        if args.decode:
            with tempfile.TemporaryDirectory(prefix="compile-bench-") as cache, \
                    tempfile.TemporaryDirectory(prefix="compile-bench-data-") as data:
                env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
                before = load()
                res = subprocess.run([sys.executable, "-c", DECODE, scratch, data,
                                      *[topk for _, topk, _ in versions]],
                                     capture_output=True, text=True, env=env, cwd=ROOT)
            if res.returncode != 0:
                raise SystemExit(f"decode: {res.stderr.strip()}")
            best = dict(kv.split("=") for kv in res.stdout.split())
            print("\ndecode, best of 25 in turns (ns a position): " + ", ".join(
                f"{label} {best[topk]}" for label, topk, _ in versions)
                + f" (load {before} / {load()})")


if __name__ == "__main__":
    main()
