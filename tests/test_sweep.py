"""Sweeps (issue 12): grids refused before anything runs, cells equal to direct replays,
resumable after a kill, failures raised or recorded, engines agree, compaction keeps
query results."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolkit
from tests.budget import examples
from toolkit import sweep
from toolkit.analysis import QUERIES, run_query
from toolkit.cli import app
from toolkit.errors import StoreError
from toolkit.ingest import ingest_file
from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.sweep import GridError, SweepError, parse_grid

from .conftest import AZURE, MOONCAKE, ROOT, snapshot

SMOLLM2 = ROOT / "traces" / "smollm2"
SMALL_GRID = """
kind = "selections"
trace = "smollm2"
[fixed]
mode = "plain"
[axes]
policy = ["lru", "opt"]
buffer_tokens = [64, 128]
"""
RESULT_TABLES = ("selection_runs", "selection_replay", "replay_runs", "tier_runs",
                 "tier_requests", "compare_runs")


def smollm2_store(root: Path) -> toolkit.Store:
    s = toolkit.open_store(root, create=True)
    ingest_file(s, "bundle", SMOLLM2, "smollm2", select="smollm2-softmax-sum")
    return s


@pytest.fixture(scope="module")
def sel_store(tmp_path_factory):
    with smollm2_store(tmp_path_factory.mktemp("sel") / "store") as s:
        yield s


def results(store: toolkit.Store, tables=RESULT_TABLES) -> dict[str, pl.DataFrame]:
    """Every result table without wall times, in a canonical order."""
    out = {}
    for t in tables:
        df = store.query(f"SELECT * FROM {t}")
        df = df.drop([c for c in df.columns if c in ("elapsed_s",)])
        out[t] = df.sort(df.columns)
    return out


def assert_same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> None:
    """Equal tables (``b`` may hold a subset of ``a``'s)."""
    assert b, "nothing compared"
    for t in b:
        assert a[t].equals(b[t]), t


SERVING = 'kind = "serving"\n[fixed]\nmodel = "glm-5.2"\nhardware = "gb200"\n'
GRID_CASES = [  # issue 34: what the CLI refuses, a grid refuses, naming file, key and cell
    (SERVING + "interactivity = nan", ["[fixed] interactivity", "finite"]),
    (SERVING + "[axes]\ninteractivity = [100, -100]", ["[axes] interactivity", ">", "-100"]),
    (SERVING + "interactivity = []", ["interactivity", "at least one"]),
    (SERVING + "cached_prefix_fraction = 2.0", ["cached_prefix_fraction", "<= 1"]),
    (SERVING + "cached_prefix_fraction = inf", ["cached_prefix_fraction", "finite"]),
    (SERVING + "isl = 0", ["[fixed] isl", ">= 1"]),
    (SERVING + 'interactivity = "fast"', ["[fixed] interactivity", "expected float"]),
    ('kind = "serving"\n[fixed]\nmodel = "glm-5.2"\nhardware = []',
     ["[fixed] hardware", "at least one accelerator"]),
    ('kind = "selections"\ntrace = "t"\n[fixed]\nrow_bytes = -5', ["row_bytes", ">= 1"]),
    ('kind = "selections"\ntrace = "t"\n[fixed]\nfull_layers = [-1, 99999]',
     ["[fixed] full_layers", ">= 0"]),
    ('kind = "selections"\ntrace = "t"\n[fixed]\nfull_layers = [0, 99999]',
     ["[fixed] full_layers", "<= 32766"]),
    ('kind = "tiers"\ntrace = "t"\n[fixed]\nhost_ratio = -1', ["host_ratio", ">= 0"]),
    ('kind = "tiers"\ntrace = "t"\n[axes]\nmax_running = [0, -3]', ["max_running = -3"]),
    ('kind = "tiers"\ntrace = "t"\n[fixed]\nassumptions = {gpus_per_replica = 0}',
     ["[fixed] assumptions", "gpus_per_replica", ">= 1"]),
    ('kind = "tiers"\ntrace = "t"\n[fixed]\nassumptions = {gpus_per_replica = "8"}',
     ["assumptions.gpus_per_replica", "expected int"]),
    ('kind = "tiers"\ntrace = "t"\n[fixed]\nassumptions = {gpus = 8}',
     ["assumptions", "unknown field", "gpus"]),
    ('kind = "tiers"\ntrace = "t"\n[fixed]\nassumptions = 8', ["assumptions", "table"]),
    ('kind = ["prefix"]\ntrace = "t"', ["kind ['prefix']", "unknown"]),
    ('kind = "prefix"\ntrace = "t"\nfixed = 3', ["'fixed' must be a table"]),
    ('kind = "prefix"\ntrace = 7', ["[fixed] trace", "expected str"]),
]


class TestGrid:
    """A grid is refused before anything runs, naming the key."""

    @pytest.mark.parametrize("text, words", [
        ('kind = "selections"\ntrace = "t"\n[axes]\npolicyy = ["lru"]', ["'policyy'", "[axes]"]),
        ('kind = "selections"\ntrace = "t"\n[fixed]\nbuffer = 3', ["'buffer'", "[fixed]"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\npolicy = []', ["[axes] policy", "empty"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\nbuffer_tokens = [64, "x"]',
         ["[axes] buffer_tokens[1]", "expected int"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\nbuffer_tokens = [0]',
         ["buffer_tokens = 0", ">= 1"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\npolicy = ["lru", "nope"]',
         ["policy = 'nope'", "unknown policy"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\nmode = ["plain", "fast"]',
         ["mode = 'fast'"]),
        ('kind = "selections"\n[axes]\npolicy = ["lru"]', ["['trace']", "neither fixed"]),
        ('kind = "selections"\ntrace = "t"\n[fixed]\npolicy = "lru"\n[axes]\npolicy = ["arc"]',
         ["'policy' is both"]),
        ('kind = "nope"\ntrace = "t"', ["kind 'nope'", "selections"]),
        ('trace = "t"', ["'kind' is missing"]),
        ('kind = "selections"\ntrace = "t"\nsize = 3', ["top-level", "'size'"]),
        ('kind = "selections"\ntrace = \n[axes]', ["not valid TOML", "line 2"]),
        ('kind = "tiers"\ntrace = "t"\n[axes]\nhardware = ["gb200", "gb999"]',
         ["hardware = 'gb999'"]),
        ('kind = "serving"\n[fixed]\nmodel = "glm-5.2"\n[axes]\nhardware = ["gb200", "x1"]',
         ["[axes] hardware", "unknown hardware 'x1'"]),
        ('kind = "selections"\ntrace = "t"\n[axes]\npolicy = ["lru", "lru"]', ["repeated"]),
    ] + GRID_CASES)
    def test_refused_naming_the_key(self, text, words):
        """Unknown names, bad values, empty axes and bad combinations name file and key."""
        with pytest.raises(GridError) as e:
            parse_grid(text, "g.toml")
        msg = str(e.value)
        assert msg.startswith("g.toml"), msg
        for w in words:
            assert w in msg, msg

    def test_assumptions_table(self):
        """``[fixed] assumptions = {...}`` builds the nested config and the grid's JSON."""
        g = parse_grid('kind = "tiers"\ntrace = "t"\n[fixed]\n'
                       'assumptions = {gpus_per_replica = 4}\n[axes]\nhost_ratio = [1, 2]')
        assert [c.config.assumptions.gpus_per_replica for c in g.cells()] == [4, 4]
        assert json.loads(g.canonical_json())["fixed"]["assumptions"]["gpus_per_replica"] == 4

    def test_full_layers_beyond_the_trace(self, sel_store):
        """A Full layer the trace lacks is refused before any cell runs."""
        before = snapshot(sel_store.root)
        g = parse_grid(SMALL_GRID.replace('mode = "plain"', 'mode = "hisparse"\n'
                                          'full_layers = [0, 400]'), "g.toml")
        with pytest.raises(GridError, match="g.toml: cell 0: full_layers 400 is not a layer"):
            sweep.run(sel_store, g, workers=1)
        assert snapshot(sel_store.root) == before

    def test_cells_in_product_order(self):
        """Axes multiply in file order; fixed values and traces (an axis) reach each cell."""
        g = parse_grid('kind = "prefix"\ntraces = ["a", "b"]\n[axes]\n'
                       'capacity_blocks = [10, "none"]\n[fixed]\npolicy = "fifo"')
        cells = [(c.index, c.config) for c in g.cells()]
        assert cells == [
            (0, PrefixReplayConfig("a", "fifo", 10)), (1, PrefixReplayConfig("a", "fifo", None)),
            (2, PrefixReplayConfig("b", "fifo", 10)), (3, PrefixReplayConfig("b", "fifo", None)),
        ]

    def test_serving_hardware_scalar_becomes_tuple(self):
        """A tuple field takes one value per cell (gb200 -> ("gb200",)) or a list."""
        g = parse_grid('kind = "serving"\n[fixed]\nmodel = "glm-5.2"\n'
                       '[axes]\nhardware = ["gb200", ["gb300", "mi355x"]]')
        assert [c.config.hardware for c in g.cells()] == [("gb200",), ("gb300", "mi355x")]

    def test_unknown_trace_refused_before_anything_runs(self, sel_store):
        """A cell naming a trace the store lacks is an error; the store is unchanged."""
        before = snapshot(sel_store.root)
        g = parse_grid(SMALL_GRID.replace('trace = "smollm2"', 'traces = ["smollm2", "x"]'))
        with pytest.raises(GridError, match="cell 4: trace 'x' is not in"):
            sweep.run(sel_store, g, workers=1)
        assert snapshot(sel_store.root) == before


class TestRun:
    def test_cells_equal_direct_replays(self, tmp_path, sel_store):
        """Each cell's run is the normal replay's run (same run id, same rows); exact
        figures on the real SmolLM2 trace."""
        res = sweep.run(sel_store, parse_grid(SMALL_GRID), workers=1)
        assert (res.cells, res.ran, res.skipped, res.failed) == (4, 4, 0, 0)
        with smollm2_store(tmp_path / "direct") as direct:
            for p in ("lru", "opt"):
                for n in (64, 128):
                    replay_selections(direct, SelectionReplayConfig("smollm2", p, n, "plain"))
            assert_same(results(direct), results(sel_store))
        got = sel_store.query("SELECT policy, buffer_tokens, misses FROM selection_runs "
                              "ORDER BY ALL").rows()
        assert got == [("lru", 64, 935505), ("lru", 128, 311045), ("opt", 64, 400906),
                       ("opt", 128, 182094)]
        cells = sel_store.query("SELECT cell, status, run_id, error, seconds FROM sweeps "
                                "WHERE sweep_id = $s ORDER BY cell", {"s": res.sweep_id})
        assert cells["status"].to_list() == ["done"] * 4
        assert cells["error"].null_count() == 4 and (cells["seconds"] > 0).all()
        assert set(cells["run_id"]) == set(sel_store.keys("selection_runs"))
        # the surface and cell queries are registered named queries with documented columns
        for name in ("sweep_cells", "sweep_miss_surface"):
            df = run_query(sel_store, name, sweep_id=res.sweep_id)
            assert df.columns == [c for c, _ in QUERIES[name].columns] and df.height == 4
        surface = run_query(sel_store, "sweep_miss_surface", sweep_id=res.sweep_id)
        assert surface.select("policy", "buffer_tokens", "misses").rows() == got

    def test_rerun_skips_every_cell(self, sel_store):
        """Re-running a grid skips cells whose run exists and points at that run."""
        sweep.run(sel_store, parse_grid(SMALL_GRID), workers=1)
        before = results(sel_store)
        res = sweep.run(sel_store, parse_grid(SMALL_GRID), workers=1)
        assert (res.ran, res.skipped, res.failed) == (0, 4, 0)
        assert_same(before, results(sel_store))
        rows = sel_store.query("SELECT status, run_id FROM sweeps WHERE sweep_id = $s",
                               {"s": res.sweep_id})
        assert rows["status"].to_list() == ["skipped"] * 4
        assert set(rows["run_id"]) <= set(sel_store.keys("selection_runs"))

    def test_resume_by_sweep_record_and_rerun_of_a_deleted_run(self, tmp_path):
        """A run whose stored config_json differs from the cell's (a replay that fills in
        a default) is still found through the sweeps record; a run deleted since runs
        again."""
        with smollm2_store(tmp_path / "s") as s:
            sweep.run(s, parse_grid(SMALL_GRID), workers=1)
            first, second = s.keys("selection_runs")[:2]
            row = s.read("selection_runs", first).to_pylist()[0]
            row["config_json"] = row["config_json"].replace('"buffer_tokens"', '"buf"')
            s.write("selection_runs", first, pa.Table.from_pylist([row]), replace=True)
            s.delete("selection_runs", second)
            res = sweep.run(s, parse_grid(SMALL_GRID), workers=1)
            assert (res.ran, res.skipped) == (1, 3)
            assert s.query("SELECT run_id FROM sweeps WHERE sweep_id = $s AND status = "
                           "'done'", {"s": res.sweep_id}).item() == second

    def test_cli_run_outside_sweep_is_skipped(self, tmp_path):
        """A run made by hand (same config) counts: the sweep skips that cell."""
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            ingest_file(s, "mooncake", MOONCAKE, "conv")
            replay_prefix(s, PrefixReplayConfig("conv", "lru", 1000))
            res = sweep.run(s, parse_grid('kind = "prefix"\ntrace = "conv"\n[axes]\n'
                                          'capacity_blocks = [1000, 2000]'), workers=1)
            assert (res.ran, res.skipped) == (1, 1)

    def test_on_error_record_and_raise(self, tmp_path):
        """A failing cell (Azure has no prefix hashes) is recorded with its error while
        the rest run (record), or recorded and raised (raise)."""
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            ingest_file(s, "mooncake", MOONCAKE, "conv")
            ingest_file(s, "azure", AZURE, "azure")
            grid = parse_grid('kind = "prefix"\ntraces = ["azure", "conv"]\n[axes]\n'
                              'capacity_blocks = [1000, 2000]')
            with pytest.raises(SweepError, match=r"cell 0 \(trace='azure', capacity_blocks="
                                                 r"1000\) failed: trace 'azure' has no"):
                sweep.run(s, grid, workers=1)
            failed = s.query("SELECT cell, status, error FROM sweeps")
            assert failed.rows() == [(0, "failed", failed["error"][0])]
            assert "no prefix-block hashes" in failed["error"][0]
            assert s.keys("replay_runs") == []  # raise stops at the first failure
            res = sweep.run(s, grid, workers=1, on_error="record")
            assert (res.cells, res.ran, res.skipped, res.failed) == (4, 2, 0, 2)
            rows = s.query("SELECT cell, status FROM sweeps WHERE sweep_id = $s ORDER BY cell",
                           {"s": res.sweep_id}).rows()
            assert rows == [(0, "failed"), (1, "failed"), (2, "done"), (3, "done")]
            again = sweep.run(s, grid, workers=1, on_error="record")
            assert (again.ran, again.skipped, again.failed) == (0, 2, 2)

    def test_tiers_and_serving_kinds(self, tmp_path):
        """Tier replays and cost comparisons sweep too; cells equal direct calls."""
        from toolkit.cost.compare import CompareConfig, compare
        from toolkit.cost.from_replay import run_tiers
        from toolkit.replay.tiers import TierReplayConfig

        with toolkit.open_store(tmp_path / "s", create=True) as s:
            ingest_file(s, "mooncake", MOONCAKE, "conv")
            r = sweep.run(s, parse_grid('kind = "tiers"\ntrace = "conv"\n[fixed]\n'
                                        'device_tokens = 200000\n[axes]\n'
                                        'hardware = ["gb200", "mi355x"]\n'
                                        'concurrency = [4, 16]'), workers=1)
            assert (r.ran, r.failed) == (4, 0)
            df = run_query(s, "sweep_cost_surface", sweep_id=r.sweep_id)
            assert df.columns == [c for c, _ in QUERIES["sweep_cost_surface"].columns]
            assert df.select("hardware", "concurrency").rows() == [
                ("gb200", 4), ("gb200", 16), ("mi355x", 4), ("mi355x", 16)]
            direct = run_tiers(s, TierReplayConfig("conv", "mi355x", concurrency=16,
                                                      device_tokens=200_000), save=False)
            row = s.query("SELECT * FROM tier_runs WHERE run_id = $r",
                          {"r": direct.summary["run_id"]}).to_dicts()[0]
            for k in ("gpu_hit_rate", "host_hit_rate", "usd_per_million_total_tokens"):
                assert row[k] == direct.summary[k]
            r = sweep.run(s, parse_grid('kind = "serving"\n[fixed]\nmodel = "glm-5.2"\n'
                                        'interactivity = [150]\n[axes]\n'
                                        'hardware = ["gb200", "mi355x"]'), workers=1)
            assert (r.ran, r.failed) == (2, 0)
            want = compare(CompareConfig("glm-5.2", ("mi355x",), (150.0,)))
            got = s.query("SELECT usd_per_mtok_total FROM compare_runs "
                          "WHERE hardware = 'mi355x'").item()
            assert got == want["usd_per_mtok_total"][0]


def test_local_pool_equals_single_process(tmp_path):
    """Two worker processes give the same tables as one process."""
    with smollm2_store(tmp_path / "one") as a, smollm2_store(tmp_path / "two") as b:
        sweep.run(a, parse_grid(SMALL_GRID), workers=1)
        res = sweep.run(b, parse_grid(SMALL_GRID), engine="local", workers=2)
        assert (res.ran, res.failed) == (4, 0)
        assert_same(results(a), results(b))


def test_ray_equals_local_and_single_process(tmp_path):
    """A 2-CPU local Ray gives the same tables as the local pool and one process."""
    import ray  # the [ray] extra; `make test` installs it
    with smollm2_store(tmp_path / "one") as a, smollm2_store(tmp_path / "pool") as b, \
            smollm2_store(tmp_path / "ray") as c:
        sweep.run(a, parse_grid(SMALL_GRID), workers=1)
        sweep.run(b, parse_grid(SMALL_GRID), workers=2)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            from toolkit.sweep.engines import _probe

            _probe(ray.get_runtime_context().gcs_address, 10)  # a live GCS passes the probe
            res = sweep.run(c, parse_grid(SMALL_GRID), engine="ray")
            assert ray.is_initialized()  # a cluster the caller started stays up
        finally:
            ray.shutdown()
        assert (res.ran, res.failed) == (4, 0)
        assert_same(results(a), results(c))
        assert_same(results(b), results(c))


def test_killed_sweep_resumes_with_the_rest(tmp_path):
    """Kill a sweep after some cells; the re-run runs only the rest and the store equals
    an uninterrupted sweep's (each cell's run and sweeps row commit together)."""
    grid = tmp_path / "grid.toml"
    grid.write_text('kind = "selections"\ntrace = "smollm2"\n[axes]\n'
                    'policy = ["lru", "fifo", "clock", "arc", "opt", "slru"]\n'
                    'buffer_tokens = [64, 96, 128, 192]\n')
    root = tmp_path / "killed"
    smollm2_store(root).close()
    proc = subprocess.Popen([sys.executable, "-m", "toolkit.cli", "sweep", "--store", str(root),
                             "--grid", str(grid), "--workers", "1", "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = root / "selection_runs"
    deadline = time.monotonic() + 120
    while (not runs.is_dir() or len(list(runs.glob("*.parquet"))) < 3) \
            and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with toolkit.open_store(root) as s:
        done = len(s.keys("selection_runs"))
        assert 3 <= done < 24, done
        killed = s.query("SELECT count(*) FROM sweeps WHERE status = 'done'").item()
        assert killed == done  # a cell's run and its sweeps row land together
        res = sweep.run(s, grid, workers=1)
        assert (res.cells, res.ran, res.skipped, res.failed) == (24, 24 - done, done, 0)
        with smollm2_store(tmp_path / "whole") as whole:
            sweep.run(whole, grid, workers=1)
            assert_same(results(whole), results(s))


def test_cli_json_and_errors(tmp_path, sel_store):
    """--json prints exactly the six keys; a bad grid is one line naming the key, exit 2."""
    grid = tmp_path / "g.toml"
    grid.write_text(SMALL_GRID)
    r = CliRunner().invoke(app, ["sweep", "--store", str(sel_store.root), "--grid", str(grid),
                                 "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert list(out) == ["sweep_id", "cells", "ran", "skipped", "failed", "elapsed_s"]
    assert out["cells"] == 4 and out["ran"] + out["skipped"] == 4
    grid.write_text(SMALL_GRID.replace("buffer_tokens", "buffer_slots"))
    r = CliRunner().invoke(app, ["sweep", "--store", str(sel_store.root), "--grid", str(grid)])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "'buffer_slots'" in r.stderr and str(grid) in r.stderr
    grid.write_text(SMALL_GRID.replace('"smollm2"', '"nope"'))
    r = CliRunner().invoke(app, ["sweep", "--store", str(sel_store.root), "--grid", str(grid)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "trace 'nope'" in r.stderr


class TestCompact:
    def test_compact_keeps_query_results_and_keys(self, tmp_path):
        """Compaction merges per-run files into a few parts; every view returns the same
        rows, keys and reads are unchanged, a re-run sweep still skips, a replaced or
        deleted key leaves its part."""
        from toolkit.store import COMPACT_DIR

        with smollm2_store(tmp_path / "s") as s:
            ingest_file(s, "mooncake", MOONCAKE, "conv")
            sweep.run(s, parse_grid(SMALL_GRID), workers=1)
            sweep.run(s, parse_grid('kind = "prefix"\ntrace = "conv"\n[axes]\n'
                                    'policy = ["lru", "fifo"]\ncapacity_blocks = [100, 1000]'),
                      workers=1)
            tables = [*RESULT_TABLES, "sweeps", "requests", "selections"]
            before = results(s, tables)
            keys = {t: s.keys(t) for t in tables}
            one = keys["selection_replay"][1]
            read_before = s.read("selection_replay", one)
            merged = s.compact()
            assert merged["selection_replay"] == 4 and merged["replay_runs"] == 4
            assert merged["sweeps"] == 8
            assert list((s.root / "selection_replay").glob("*.parquet")) == []
            parts = list((s.root / "selection_replay" / COMPACT_DIR).rglob("*.parquet"))
            assert [p.parent.name for p in parts] == ["smollm2"]
            assert_same(before, results(s, tables))
            assert keys == {t: s.keys(t) for t in tables}
            assert s.read("selection_replay", one).equals(read_before)
            assert s.compact()["selection_replay"] == 0  # nothing left to merge
            assert_same(before, results(s, tables))
            res = sweep.run(s, parse_grid(SMALL_GRID), workers=1)
            assert res.skipped == 4
            # replacing a compacted run keeps one copy of its rows
            replay_selections(s, SelectionReplayConfig("smollm2", "lru", 64, "plain"))
            assert_same(before, results(s, RESULT_TABLES))
            s.delete("selection_runs", keys["selection_runs"][0])
            assert len(s.query("SELECT * FROM selection_runs")) == 3
            assert keys["selection_runs"][0] not in s.keys("selection_runs")
            with pytest.raises(StoreError, match="already exists"):
                s.write("replay_runs", keys["replay_runs"][0], s.read("replay_runs",
                                                                      keys["replay_runs"][0]))

    def test_failed_compaction_changes_nothing(self, tmp_path, monkeypatch):
        """A compaction that dies before its commit point leaves the store as it was."""
        from toolkit.store import transaction

        with smollm2_store(tmp_path / "s") as s:
            sweep.run(s, parse_grid(SMALL_GRID), workers=1)
            before = snapshot(s.root)

            def die(self, moves, deletes):
                raise OSError("disk full")

            monkeypatch.setattr(transaction.Transaction, "commit_ops", die)
            with pytest.raises(OSError):
                s.compact()
            assert snapshot(s.root) == before

    def test_cli_compact(self, tmp_path, sel_store):
        """toolkit store compact --json reports merged files per table."""
        with smollm2_store(tmp_path / "s") as s:
            sweep.run(s, parse_grid(SMALL_GRID), workers=1)
        r = CliRunner().invoke(app, ["store", "compact", "--store", str(tmp_path / "s"),
                                     "--table", "selection_runs", "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout) == {"selection_runs": 4}
        r = CliRunner().invoke(app, ["store", "compact", "--store", str(tmp_path / "s"),
                                     "--table", "requests"])
        assert r.exit_code == 2 and "cannot be compacted" in r.stderr


def test_recovery_tolerates_a_staging_entry_vanishing(tmp_path, monkeypatch):
    """Parallel cells: a writer may remove its finished staging directory (without the
    store lock) while another process's recovery looks at it; recovery skips it (this
    raised FileNotFoundError in a Ray sweep before)."""
    import fcntl

    from toolkit import store as store_mod
    from toolkit.store import transaction

    with toolkit.open_store(tmp_path / "s", create=True) as s:
        entry = s.root / store_mod.STAGING_DIR / "tx-finished"
        entry.mkdir(parents=True)
        real_flock = fcntl.flock

        def owner_finishes_first(fd, op):
            import shutil

            shutil.rmtree(entry)  # the owner's close(): rmtree, then releases its lock
            monkeypatch.setattr(fcntl, "flock", real_flock)
            return real_flock(fd, op)

        with s._lock(exclusive=True):  # the recovery path under test
            monkeypatch.setattr(fcntl, "flock", owner_finishes_first)
            transaction.recover_locked(s)
        assert not entry.exists()


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(policies=st.lists(st.sampled_from(["lru", "fifo", "arc", "opt"]), min_size=1,
                         max_size=4, unique=True),
       caps=st.lists(st.one_of(st.none(), st.integers(0, 10**6)), min_size=1, max_size=5,
                     unique=True),
       traces=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True))
def test_cells_are_the_product_of_the_axes(policies, caps, traces):
    """Property: a grid has one cell per combination, in file order, each the config of
    its values (distinct fingerprints), whatever the axes."""
    toml_caps = ", ".join('"none"' if c is None else str(c) for c in caps)
    g = parse_grid(f'kind = "prefix"\ntraces = {json.dumps(traces)}\n[axes]\n'
                   f'policy = {json.dumps(policies)}\ncapacity_blocks = [{toml_caps}]')
    cells = g.cells()
    want = [PrefixReplayConfig(t, p, c) for t in traces for p in policies for c in caps]
    assert [c.config for c in cells] == want
    assert [c.index for c in cells] == list(range(len(want)))
    assert len({c.fingerprint for c in cells}) == len(want)


# -- faults during sweeps (issue 34, point 7) ------------------------------------------
@pytest.fixture
def bailian_store(tmp_path):
    from tests import sweep_fault  # noqa: F401 - registers the "fault" kind

    s = toolkit.open_store(tmp_path / "store", create=True)
    ingest_file(s, "bailian", ROOT / "tests" / "data" / "bailian_sample.jsonl", "b")
    yield s
    s.close()


def test_killed_worker_is_a_failed_cell(bailian_store):
    """A pool worker SIGKILLed mid-cell fails that cell with the signal; under
    on_error=record the other cells run (the one cut off beside it is rerun)."""
    g = parse_grid('kind = "fault"\ntrace = "b"\n[fixed]\ndie_at = 2\n'
                   '[axes]\ncapacity_blocks = [1, 2, 3, 4]', "fault.toml")
    res = sweep.run(bailian_store, g, workers=2, on_error="record")
    assert (res.ran, res.failed) == (3, 1)
    rows = bailian_store.query("SELECT cell, status, error FROM sweeps WHERE sweep_id = $s "
                               "ORDER BY cell", {"s": res.sweep_id})
    assert rows["status"].to_list() == ["done", "failed", "done", "done"]
    assert "killed by SIGKILL" in rows["error"][1]
    assert bailian_store.query("SELECT count(*) FROM replay_runs").item() == 3


def test_ctrl_c_stops_in_one_line_and_resumes(bailian_store, tmp_path):
    """SIGINT to the sweep's process group (Ctrl-C): exit 130, one line on stderr, no
    traceback; the same sweep then runs only what was not committed."""
    grid = tmp_path / "slow.toml"
    grid.write_text('kind = "fault"\ntrace = "b"\n[fixed]\nsleep_s = 1.0\n'
                    '[axes]\ncapacity_blocks = [1, 2, 3, 4, 5, 6, 7, 8]')
    root = bailian_store.root
    bailian_store.close()
    code = ("import sys; from tests import sweep_fault; from toolkit.cli import app; "
            "sys.argv = ['toolkit'] + sys.argv[1:]; app()")
    p = subprocess.Popen([sys.executable, "-c", code, "sweep", "--store", str(root), "--grid",
                          str(grid), "--workers", "2"], cwd=ROOT, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "TOOLKIT_PROGRESS": "0"})
    deadline = time.monotonic() + 120
    while not list((root / "sweeps").glob("*.0000*.parquet")):  # a cell has committed
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: sweep "), err
    with toolkit.open_store(root) as s:
        done = s.query("SELECT count(*) FROM sweeps WHERE status = 'done'").item()
        assert done >= 1
        res = sweep.run(s, parse_grid(grid.read_text()), workers=2)
        assert res.skipped == done and res.ran == 8 - done and res.failed == 0


def test_ray_unreachable_address_fails_fast(sel_store, tmp_path):
    """An unreachable --address ends within --connect-timeout-s with one line naming it;
    Ray's own log lines stay hidden."""
    pytest.importorskip("ray")
    address = "127.0.0.1:1"
    grid = tmp_path / "g.toml"
    grid.write_text(SMALL_GRID.replace("[64, 128]", "[48]"))  # cells not in the store yet
    t0 = time.monotonic()
    res = CliRunner().invoke(app, ["sweep", "--store", str(sel_store.root), "--grid", str(grid),
                                   "--engine", "ray", "--address", address,
                                   "--connect-timeout-s", "3"])
    assert time.monotonic() - t0 < 15
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot reach Ray at " + address), \
        res.stderr


class _FakePort:
    """A TCP port on every interface (Ray resolves a loopback address to this node's IP,
    and the probe checks what Ray will use) that accepts connections and then answers
    ``reply`` (``None``: says nothing and keeps the connection open; ``b""``: closes it)."""

    def __init__(self, reply: bytes | None) -> None:
        import socket
        import threading

        self.reply, self.conns, self.stopped = reply, [], threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)  # the server checks ``stopped`` between accepts
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                c, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self.reply == b"":
                c.close()
                continue
            if self.reply is not None:
                c.sendall(self.reply)
            self.conns.append(c)  # kept open, silent from here on

    def close(self) -> None:
        """Stop the server before closing what it accepted: a connection accepted while
        closing would otherwise be left open (an unclosed-socket warning in a later test)."""
        self.stopped.set()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


SILENT = None
HTTP2_SETTINGS = b"\x00\x00\x18\x04\x00\x00\x00\x00\x00"  # a gRPC server's first frame
PORT_CASES = [  # (what the port does, its reply, a phrase the error must hold)
    ("accepts and stays silent", SILENT, "accepted the connection but did not answer"),
    ("speaks HTTP/1", b"HTTP/1.1 400 Bad Request\r\n\r\n", "answered b'HTTP/1.1 '"),
    ("closes at once", b"", "closed the connection"),
]


@pytest.fixture
def fake_port(request):
    port = _FakePort(request.param)
    yield port
    port.close()


@pytest.mark.parametrize("fake_port,phrase", [(r, p) for _, r, p in PORT_CASES],
                         ids=[c[0] for c in PORT_CASES], indirect=["fake_port"])
def test_ray_port_that_is_not_ray_fails_fast(sel_store, tmp_path, fake_port, phrase):
    """A port that accepts TCP but never speaks Ray (or speaks something else) ends within
    --connect-timeout-s in one line naming the address and the flag; Ray itself would
    retry it for minutes (122 s and more measured)."""
    pytest.importorskip("ray")
    from toolkit.sweep.engines import _probe

    address = f"127.0.0.1:{fake_port.port}"
    t0 = time.monotonic()
    with pytest.raises(ValueError) as e:
        _probe(address, 1.5)
    took = time.monotonic() - t0
    msg = str(e.value)
    assert "\n" not in msg and phrase in msg, msg
    assert msg.startswith(f"cannot reach Ray at {address}") and \
        "within --connect-timeout-s 1.5" in msg, msg
    if fake_port.reply is SILENT:
        assert 1.4 <= took < 4, took  # waited for the answer, and no longer than asked
    else:
        assert took < 1.4, took
    grid = tmp_path / "g.toml"
    grid.write_text(SMALL_GRID.replace("[64, 128]", "[48]"))  # cells not in the store yet
    res = CliRunner().invoke(app, ["sweep", "--store", str(sel_store.root), "--grid", str(grid),
                                   "--engine", "ray", "--address", address,
                                   "--connect-timeout-s", "2"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach Ray at {address}") \
        and "--connect-timeout-s 2:" in lines[0] and phrase in lines[0], res.stderr


def test_ray_probe_passes_a_grpc_port():
    """The probe lets through a port that answers the HTTP/2 preface as gRPC (Ray's GCS
    does: checked against a live one in test_ray_equals_local_and_single_process)."""
    from toolkit.sweep.engines import _probe

    port = _FakePort(HTTP2_SETTINGS)
    try:
        _probe(f"127.0.0.1:{port.port}", 5)
    finally:
        port.close()


@contextlib.contextmanager
def unwritable(directory: Path):
    """``directory`` refuses new names, as after ``chmod a-w`` or ``chattr +i``: by chmod
    when that binds (not as root), else by making every rename into it fail the way
    the kernel would (EACCES), so the test runs, and can fail, either way."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(mode)
        return
    real = os.replace

    def replace(src, dst, *a, **k):
        if Path(dst).parent == directory:
            raise PermissionError(13, "Permission denied", str(src), None, str(dst))
        return real(src, dst, *a, **k)

    os.replace = replace
    try:
        yield
    finally:
        os.replace = real


TIER_GRID = ('kind = "tiers"\ntrace = "conv"\n[fixed]\ndevice_tokens = 200000\n'
             'hardware = "gb200"\n[axes]\nconcurrency = [4]\n')
DONE_WITHOUT_RUN = (
    "SELECT count(*) AS n FROM sweeps WHERE status = 'done' AND (run_id NOT IN "
    "(SELECT run_id FROM tier_runs) OR run_id NOT IN (SELECT run_id FROM tier_requests))")


@pytest.mark.parametrize("table", ["tier_runs", "tier_requests", "sweeps"])
def test_unwritable_table_never_leaves_a_cell_done_without_its_run(tmp_path, table):
    """A table directory made read-only (or immutable) during a sweep: the cell's commit
    cannot be completed, and neither the sweep nor recovery on the next open marks the
    cell done without its run (``sweeps`` sorts before ``tier_*``, so its row used to
    land first). The sweep stops with one line naming the directory and the fix; once
    the directory is writable again, the next open completes the write and a rerun
    skips the cell."""
    root = tmp_path / "s"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
    grid = parse_grid(TIER_GRID)
    with unwritable(root / table):
        with toolkit.open_store(root) as s:
            with pytest.raises(StoreError) as e:
                sweep.run(s, grid, workers=1, on_error="record")
            msg = str(e.value)
            assert "\n" not in msg and msg.startswith(f"{root / table}: ") and \
                "writable" in msg, msg
            assert s.query(DONE_WITHOUT_RUN)["n"].item() == 0
        with toolkit.open_store(root) as s:  # recovery while still unwritable
            assert any(str(root / table) in p for p in s.problems), s.problems
            assert s.query(DONE_WITHOUT_RUN)["n"].item() == 0
            assert s.query("SELECT count(*) AS n FROM sweeps WHERE status = 'done'")[
                "n"].item() == 0
            stuck = s.check()
            assert len(stuck) == 1 and "committed write is not complete" in stuck[0].problem \
                and str(root / table) in stuck[0].problem, stuck
            with pytest.raises(StoreError, match="writable"):  # writes refused, loudly
                sweep.run(s, grid, workers=1, on_error="record")
            assert s.query(DONE_WITHOUT_RUN)["n"].item() == 0
    with toolkit.open_store(root) as s:  # writable again: the write completes
        assert any("completed a write interrupted after its commit" in p for p in s.problems)
        assert s.query("SELECT count(*) AS n FROM sweeps WHERE status = 'done'")[
            "n"].item() == 1
        assert s.query(DONE_WITHOUT_RUN)["n"].item() == 0 and s.check() == []
        again = sweep.run(s, grid, workers=1)
        assert (again.ran, again.skipped, again.failed) == (0, 1, 0)


FAULT_TESTS = (test_killed_worker_is_a_failed_cell, test_ctrl_c_stops_in_one_line_and_resumes,
               test_ray_unreachable_address_fails_fast, test_ray_port_that_is_not_ray_fails_fast,
               test_unwritable_table_never_leaves_a_cell_done_without_its_run)
"""The sweep-fault cases counted in docs/formats.md (with their parametrizations)."""
