"""A 200-cell selection sweep on the bundled SmolLM2 trace (issue 12): wall time of the
sweep, of a re-run (every cell skipped), and of queries over the result tables before and
after ``toolkit store compact``.

Run from the repo root::

    .venv/bin/python benchmarks/sweep_bench.py --workers 2 [--engine local|ray] [--store DIR]

The sweep shows its cell counter on a terminal. Figures go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import toolkit
from toolkit import sweep
from toolkit.ingest import ingest_file
from toolkit.runtime import keep_freed_memory

keep_freed_memory()  # the allocator setting the toolkit command runs with

ROOT = Path(__file__).resolve().parents[1]
GRID = ROOT / "benchmarks" / "grids" / "smollm2_200.toml"
PREFIX_QUERIES = {
    "replay_runs: best policy per capacity": """
        SELECT capacity_blocks, arg_max(policy, token_hit_ratio) AS best
        FROM replay_runs GROUP BY capacity_blocks ORDER BY capacity_blocks""",
    "sweeps x replay_runs surface": """
        SELECT r.policy, r.capacity_blocks, r.token_hit_ratio FROM sweeps s
        JOIN replay_runs r USING (run_id) WHERE s.status <> 'failed'""",
}
QUERIES = {
    "selection_runs: best policy per buffer": """
        SELECT buffer_tokens, arg_min(policy, misses) AS best, min(miss_ratio) AS miss_ratio
        FROM selection_runs GROUP BY buffer_tokens ORDER BY buffer_tokens""",
    "selection_replay: misses per layer, all runs": """
        SELECT run_id, layer, sum(misses) AS misses FROM selection_replay GROUP BY ALL""",
    "sweeps x selection_runs surface": """
        SELECT r.policy, r.buffer_tokens, r.miss_ratio FROM sweeps s
        JOIN selection_runs r USING (run_id) WHERE s.status <> 'failed'""",
}


def time_queries(store: toolkit.Store, queries: dict[str, str],
                 repeat: int = 3) -> dict[str, float]:
    out = {}
    for name, sql in queries.items():
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            store.query(sql)
            best = min(best, time.perf_counter() - t0)
        out[name] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--engine", default="local")
    ap.add_argument("--store", type=Path, default=ROOT / "build" / "bench_sweep")
    ap.add_argument("--grid", type=Path, default=GRID, help="smollm2_200.toml (selections) "
                    "or mooncake_prefix_2000.toml (prefix)")
    args = ap.parse_args()
    grid = args.grid.resolve()
    prefix = sweep.load_grid(grid).kind == "prefix"
    queries = PREFIX_QUERIES if prefix else QUERIES
    shutil.rmtree(args.store, ignore_errors=True)
    load0 = Path("/proc/loadavg").read_text().split()[:3]
    with toolkit.open_store(args.store, create=True) as s:
        if prefix:
            ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", "conv")
        else:
            ingest_file(s, "bundle", ROOT / "traces" / "smollm2", "smollm2",
                     select="smollm2-softmax-sum")
        res = sweep.run(s, grid, engine=args.engine, workers=args.workers)
        rerun = sweep.run(s, grid, engine=args.engine, workers=args.workers)
        cells = s.query("SELECT sum(seconds) AS s, median(seconds) AS m FROM sweeps "
                        "WHERE status = 'done'").row(0)
        accesses = int(s.query("SELECT sum(block_lookups) FROM replay_runs" if prefix
                               else "SELECT sum(accesses) FROM selection_runs").item())
        files = sum(1 for _ in s.root.rglob("*.parquet"))
        before = time_queries(s, queries)
        t0 = time.perf_counter()
        merged = s.compact()
        compact_s = time.perf_counter() - t0
        files_after = sum(1 for _ in s.root.rglob("*.parquet"))
        after = time_queries(s, queries)
    load1 = Path("/proc/loadavg").read_text().split()[:3]
    print(f"grid: {grid.relative_to(ROOT)} ({res.cells} cells), engine {args.engine}, "
          f"workers {args.workers}")
    print(f"sweep                : {res.elapsed_s:.1f} s wall ({res.ran} ran, {res.failed} "
          f"failed); cells {cells[0]:.1f} s summed, median {cells[1]:.3f} s; "
          f"{accesses / res.elapsed_s / 1e6:.1f} M accesses/s over {accesses:,} accesses")
    print(f"re-run (all skipped) : {rerun.elapsed_s:.2f} s ({rerun.skipped} skipped)")
    print(f"compact              : {compact_s:.2f} s, {files} -> {files_after} Parquet files "
          f"({sum(merged.values())} merged)")
    for name in queries:
        print(f"query {name:<45}: {before[name] * 1e3:7.1f} ms -> {after[name] * 1e3:7.1f} ms")
    print(f"load average before/after: {' '.join(load0)} / {' '.join(load1)}")


if __name__ == "__main__":
    main()
