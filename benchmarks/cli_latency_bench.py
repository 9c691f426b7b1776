"""What a user waits for around a replay: CLI start-up, a warm CLI replay, a first (cold)
one, as ratios to the same replay in process; and 2 workers against 1, with the load.

One run, one store: a SYNTHETIC selection trace (k = 2048, 4 requests x 256 steps x 8
layers, 32K-token prompt: 16.8M accesses in HiSparse mode at 4,096 slots, LRU).

- in process: ``replay_selections`` with kernels loaded (median of ``--runs``), 1 worker
  and 2 workers (the 2-worker speed-up, with ``/proc/loadavg`` at the time);
- start-up: ``toolkit --version``, ``toolkit --help``, ``toolkit sql --store S "SELECT 1"``;
- warm: ``toolkit replay selections ... --json`` with the replay kernels compiled ahead
  of time (``toolkit.runtime.aot``, built by ``make setup``: no numba in the process) and
  with numba's cache filled instead (``TOOLKIT_AOT=0``), run by run in turn;
- after warm-up: the same, first run in a cache that only ``toolkit warm-up`` filled
  (``--warm-cache DIR``: a ``NUMBA_CACHE_DIR`` where ``toolkit warm-up`` ran; the bench runs
  warm-up there itself when the directory is empty);
- cold: the same, first run with an empty ``NUMBA_CACHE_DIR``, with the compiled
  extension and without it (every kernel it needs is then compiled; once, it takes
  minutes on a loaded machine; ``--no-cold`` skips both);
- the floor under a warm replay that numba sets: ``python -c`` importing numba and
  preparing its CPU target the way a first cached-kernel load does (the target context's
  ``refresh``: numba's implementation registries, which import SciPy's BLAS wrappers and
  cffi's C parser), with NumPy, PyArrow and DuckDB, which the replay reads the store with.

- a mistyped name: ``toolkit replay tiers --trace nosuch``, ``--hardware nosuch``,
  ``--model nosuch`` and the same mistakes in every command that takes such a name (cost
  compare, plan, plan explain, replay prefix/selections/mrc/cluster/engram, sql --query):
  the one-line error's wall time and whether numba, Polars or the serving model's SciPy
  were imported before it (``python -X importtime``); ``--bad-names-only`` runs just these.

CLI figures are wall times of ``python -m toolkit.cli`` subprocesses (median of
``--runs``) and that run's CPU seconds: on a machine other processes load, wall time
stretches with the load while CPU time stays close to what a quiet machine needs.
Run: ``.venv/bin/python benchmarks/cli_latency_bench.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


CPU: dict[float, float] = {}  # wall -> CPU seconds of that subprocess


FLOOR = ("import numpy, pyarrow.parquet, duckdb, numba\n"
         "from numba.core.registry import cpu_target\n"
         "cpu_target.target_context.refresh()")


def cli_wall(args: list[str], env: dict[str, str] | None = None, fails: bool = False
             ) -> float:
    """Wall seconds of one ``python -m toolkit.cli ARGS`` (``python -c CODE`` for
    ``["-c", CODE]``); its CPU seconds (user + system, which load from other processes
    barely changes) are kept in ``CPU``. ``fails``: the command must exit 2 (a refusal)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    argv = args if args[:1] == ["-c"] else ["-m", "toolkit.cli", *args]
    res = subprocess.run([sys.executable, *argv], capture_output=True,
                         text=True, cwd=ROOT, env={**os.environ, "TOOLKIT_PROGRESS": "0",
                                                   **(env or {})})
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[dt] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if (res.returncode != 2) if fails else (res.returncode != 0):
        raise SystemExit(f"toolkit {' '.join(args)}: exit {res.returncode}: "
                         f"{res.stderr.strip()}")
    return dt


#: Mistyped names, one per command that takes one (``S``: the bench's store).
BAD_NAMES = (
    "replay tiers --store S --trace nosuch",
    "replay tiers --store S --trace syn --hardware nosuch",
    "replay tiers --store S --trace syn --model nosuch",
    "replay prefix --store S --trace nosuch",
    "replay selections --store S --trace nosuch",
    "replay selections --store S --trace syn --model nosuch",
    "replay mrc --store S --trace nosuch",
    "replay cluster --store S --trace nosuch",
    "replay cluster --store S --trace syn --hardware nosuch",
    "replay engram --store S --trace nosuch --hbm-cache-gb 1",
    "cost compare --model nosuch",
    "cost compare --model glm-5.2 --hardware gb200,nosuch",
    "plan --store S --trace nosuch --model glm-5.2",
    "plan --store S --trace syn --model nosuch",
    "plan explain --store S --plan nosuch",
    "hardware show nosuch",
    "sql --store S --query nosuch",
    "sql --store S --query selection_runs --param trace=nosuch",
    "cost compare --model glm-5.2 --store S --measured-points nosuch",
    "serving validate --store S --measured-points nosuch",
    "export perfetto --store S --run nosuch --out nosuch.json",
)
HEAVY = ("numba", "polars", "scipy")


def bad_names(root: Path, runs: int) -> list[tuple[str, float, str]]:
    """Median wall of each mistyped-name command (each must exit 2), and the heavy
    libraries its process imported before refusing (none expected)."""
    rows = []
    for line in BAD_NAMES:
        argv = [str(root) if a == "S" else a for a in line.split()]
        cli_wall(argv, fails=True)  # page cache
        wall, ld = median_wall(argv, runs, fails=True)
        err = subprocess.run([sys.executable, "-X", "importtime", "-m", "toolkit.cli", *argv],
                             capture_output=True, text=True, cwd=ROOT).stderr
        loaded = sorted({m for m in HEAVY for ln in err.splitlines()
                         if ln.startswith("import time:") and ln.rsplit("|", 1)[-1].strip()
                         == m})
        heavy = ", ".join(loaded) or "no numba, Polars, SciPy"
        rows.append((f"`toolkit {line}` (imports: {heavy})", wall, ld))
    return rows


def median_wall(args: list[str], runs: int, env: dict[str, str] | None = None,
                fails: bool = False) -> tuple[float, str]:
    walls = sorted(cli_wall(args, env, fails) for _ in range(runs))
    return walls[len(walls) // 2], load()


def interleaved(variants: list[tuple[str, list[str], dict[str, str]]], runs: int
                ) -> list[tuple[str, float, str]]:
    """Median wall of each variant, run one after the other ``runs`` times (a change in
    the machine's load then falls on every variant alike)."""
    for _, argv, env in variants:
        cli_wall(argv, env)  # fills the caches
    walls: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    for _ in range(runs):
        for label, argv, env in variants:
            walls[label].append(cli_wall(argv, env))
    return [(label, sorted(w)[len(w) // 2], load()) for label, w in walls.items()]


def aot_built() -> bool:
    """Whether the compiled replay kernels are built and current."""
    out = subprocess.run([sys.executable, "-c", "from toolkit.runtime import aot; "
                          "print(bool(aot._load_table()))"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out.stdout.strip() == "True"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warm-cache", type=Path, default=None)
    ap.add_argument("--no-cold", action="store_true")
    ap.add_argument("--bad-names-only", action="store_true",
                    help="Only the mistyped-name commands (a small store, seconds).")
    args = ap.parse_args()

    from toolkit.runtime import keep_freed_memory

    keep_freed_memory()  # as the CLI does
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        if args.bad_names_only:
            from toolkit.store import open_store
            from toolkit.synth.selections import SyntheticSelectionConfig, generate

            root = Path(tmp) / "store"
            with open_store(root, create=True) as store:
                store.write_many(generate(SyntheticSelectionConfig(
                    requests=1, prompt_tokens=4096, steps=4, layers=2, k=2048, seed=1), "syn"),
                    "syn")
            print_rows(None, bad_names(root, args.runs))
            return
        run(args, Path(tmp) / "store")


def run(args: argparse.Namespace, root: Path) -> None:
    from toolkit.replay.config import SelectionReplayConfig
    from toolkit.replay.selections import replay_selections
    from toolkit.store import open_store
    from toolkit.synth.selections import SyntheticSelectionConfig, generate

    syn = SyntheticSelectionConfig(requests=4, prompt_tokens=32_768, steps=256, layers=8,
                                   k=2048, seed=1)
    cfg = SelectionReplayConfig("syn", "lru", 4096, mode="hisparse")
    rows: list[tuple[str, float, str]] = []
    with open_store(root, create=True) as store:
        store.write_many(generate(syn, "syn"), "syn")
        n = replay_selections(store, cfg, workers=1, progress=False)["accesses"]
        inproc = {}
        for w in (1, 2):
            ts = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                replay_selections(store, cfg, workers=w, progress=False)
                ts.append(time.perf_counter() - t0)
            inproc[w] = (statistics.median(ts), load())
    base = inproc[1][0]
    print(f"stream: {n:,} accesses; in-process replay, 1 worker: {base:.3f} s "
          f"(load {inproc[1][1]}); 2 workers: {inproc[2][0]:.3f} s (load {inproc[2][1]}): "
          f"{base / inproc[2][0]:.2f}x")

    replay = ["replay", "selections", "--store", str(root), "--trace", "syn", "--mode",
              "hisparse", "--buffer-tokens", "4096", "--workers", "1", "--json"]
    for label, argv in (("toolkit --version", ["--version"]),
                        ("toolkit --help", ["--help"]),
                        ('toolkit sql --store S "SELECT 1"', ["sql", "--store", str(root),
                                                              "SELECT 1"])):
        cli_wall(argv)  # fills the cache and the page cache
        wall, ld = median_wall(argv, args.runs)
        rows.append((label, wall, ld))
    # the warm replay with the replay path's kernels compiled ahead of time (when built:
    # toolkit.runtime.aot) and with numba's cached kernels, run by run in turn
    aot = "extension" if aot_built() else "extension NOT built: numba's kernels"
    rows += interleaved([(f"CLI replay, warm cache ({aot})", replay, {}),
                         ("CLI replay, warm cache, numba's kernels (TOOLKIT_AOT=0)", replay,
                          {"TOOLKIT_AOT": "0"}),
                         ("floor: Python, NumPy, PyArrow, DuckDB, numba and its CPU target "
                          "(no toolkit)", ["-c", FLOOR], {})], args.runs)
    if args.warm_cache is not None:
        args.warm_cache.mkdir(parents=True, exist_ok=True)
        env = {"NUMBA_CACHE_DIR": str(args.warm_cache)}
        if not any(args.warm_cache.iterdir()):
            t0 = time.perf_counter()
            cli_wall(["warm-up"], env)
            rows.append(("toolkit warm-up (empty cache)", time.perf_counter() - t0, load()))
        rows.append(("CLI replay, first run after warm-up", cli_wall(replay, env), load()))
    if not args.no_cold:
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cold:
            rows.append((f"CLI replay, empty numba cache (cold; {aot})",
                         cli_wall(replay, {"NUMBA_CACHE_DIR": cold}), load()))
        with tempfile.TemporaryDirectory(prefix="numba-cold-") as cold:
            rows.append(("CLI replay, empty numba cache (cold), numba's kernels "
                         "(TOOLKIT_AOT=0)",
                         cli_wall(replay, {"NUMBA_CACHE_DIR": cold, "TOOLKIT_AOT": "0"}),
                         load()))
    rows += bad_names(root, args.runs)
    print_rows((base, inproc), rows)


def print_rows(replay: tuple[float, dict] | None, rows: list[tuple[str, float, str]]) -> None:
    """The Markdown table of RESULTS.md (without the replay columns when ``replay`` is
    None: ``--bad-names-only``)."""
    if replay is None:
        print("\n| what | wall (s) | CPU (s) | load (1/5/15 min) |")
        print("|---|---|---|---|")
        for label, wall, ld in rows:
            print(f"| {label} | {wall:.2f} | {CPU.get(wall, 0):.2f} | {ld} |")
        return
    base, inproc = replay
    print("\n| what | wall (s) | / in-process replay | CPU (s) | load (1/5/15 min) |")
    print("|---|---|---|---|---|")
    print(f"| in-process replay, 1 worker | {base:.3f} | 1.00 | | {inproc[1][1]} |")
    print(f"| in-process replay, 2 workers | {inproc[2][0]:.3f} | {inproc[2][0] / base:.2f} "
          f"({base / inproc[2][0]:.2f}x faster) | | {inproc[2][1]} |")
    for label, wall, ld in rows:
        print(f"| {label} | {wall:.2f} | {wall / base:.1f} | {CPU.get(wall, 0):.2f} | {ld} |")


if __name__ == "__main__":
    main()
