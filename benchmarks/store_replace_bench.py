"""Replacing one key of a compacted part: time per replacement and how deep the part sits.

Synthetic rows (one ``replay_runs`` row per key, required columns filled with blanks): the
cost measured is the store's, not a replay's. Builds a store of ``--keys`` one-row runs,
compacts it, then replaces ``--repeats`` of its keys one by one (each rewrites the part
without that key), and prints the median time of a replacement and the deepest
``.compacted`` nesting of a part seen.

    PYTHONPATH=. python benchmarks/store_replace_bench.py --keys 1946 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import toolkit


def run_row(key: str, hits: int) -> pa.Table:
    sch = toolkit.schema.TABLES["replay_runs"]
    row = {f.name: (None if f.nullable else "x" if pa.types.is_string(f.type) else 0)
           for f in sch}
    row.update(run_id=key, kind="prefix", block_hits=hits)
    return pa.Table.from_pylist([row], schema=sch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1946)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, toolkit.open_store(Path(tmp) / "s") as s:
        for i in range(args.keys):
            s.write("replay_runs", f"r{i:05d}", run_row(f"r{i:05d}", i))
        t0 = time.perf_counter()
        s.compact(["replay_runs"])
        compact_s = time.perf_counter() - t0
        times, depth = [], 0
        for j in range(args.repeats):  # a re-run sweep replacing runs one by one
            key = f"r{j:05d}"
            t0 = time.perf_counter()
            s.write("replay_runs", key, run_row(key, -j), replace=True)
            times.append(time.perf_counter() - t0)
            depth = max(depth, *(str(p).count(".compacted") for p in
                                 (s.root / "replay_runs").rglob("*.parquet")))
        n = s.query("SELECT count(*) AS n FROM replay_runs")["n"][0]
    print(f"keys {args.keys}: compact {compact_s:.2f} s; replace one key: median "
          f"{statistics.median(times):.3f} s over {args.repeats}; deepest .compacted "
          f"nesting {depth}; rows {n}")


if __name__ == "__main__":
    main()
