"""Memory bounded by the work, not by the numbers in it (issue 10, point 4; issue 34,
point 1: every user-given size at an absurd value, under a memory limit)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import toolkit
from toolkit.ingest import ingest_file
from toolkit.policies import policies
from toolkit.replay.mrc import lru_miss_curve
from toolkit.replay.selections import SelectionReplayConfig, replay_selections
from toolkit.runtime.memory import ResourceError, check_memory
from toolkit.runtime.pool import max_workers

from .test_selection_replay import make_store, reference

BIG = 10**9


class TestSparseKeys:
    @pytest.mark.parametrize("name", ["lru", "fifo", "clock", "lfu", "arc", "s3fifo", "slru",
                                      "opt"])
    def test_huge_key_space_same_hits_as_dense(self, name):
        """Keys near 10^9 give the hits of their dense renumbering, without 8 GB of state."""
        sparse = np.array([0, BIG - 1, BIG // 2, 0, BIG - 1, 7, BIG // 2, 7], dtype=np.int64)
        dense = np.unique(sparse, return_inverse=True)[1]
        policy = policies.get(name)
        policy.simulate(sparse, BIG, 2, np.array([0, 4]))  # compile (seconds on a fresh clone)
        t0 = time.perf_counter()
        a = policy.simulate(sparse, BIG, 2, np.array([0, 4]))
        assert time.perf_counter() - t0 < 5.0  # 8 GB of state alone would take longer
        b = policy.simulate(dense, 4, 2, np.array([0, 4]))
        assert np.array_equal(a.hits, b.hits) and a.evictions == b.evictions

    def test_capacity_far_beyond_keys(self):
        """A 2^40-slot cache costs what the keys cost and never evicts."""
        keys = np.array([3, 1, 3, 2, 1], dtype=np.int64)
        r = policies.get("lru").simulate(keys, 4, 2**40)
        assert r.hits.tolist() == [False, False, True, False, True] and r.evictions == 0

    def test_miss_curve_beyond_distinct_keys_is_flat(self):
        """The one-pass curve over a sparse key space equals the dense one, padded flat."""
        keys = np.array([5, BIG - 2, 5, 17, BIG - 2, 5], dtype=np.int64)
        dense = np.unique(keys, return_inverse=True)[1]
        curve = lru_miss_curve(keys, BIG, 10)
        assert curve.size == 11
        np.testing.assert_array_equal(curve[:4], lru_miss_curve(dense, 3, 3))
        assert (curve[3:] == curve[3]).all()


class TestReplayBounds:
    def test_seq_len_near_1e9(self, tmp_path):
        """16 rows with seq_len ~10^9 replay in plain and hisparse modes, matching the
        plain-Python reference, in well under the time 8 GB of state would take."""
        rows = [(0, s, la, BIG - 16 + s, (0, 5 + s, BIG - 20, BIG - 17 + s))
                for s in range(8) for la in range(2)]
        store = make_store(tmp_path, rows, 4)
        for mode in ("plain", "hisparse"):
            t0 = time.perf_counter()
            out = replay_selections(store, SelectionReplayConfig("t", "lru", 4, mode=mode,
                                                                 initial="empty"))
            assert time.perf_counter() - t0 < 30.0
            ref = reference(rows, 4, mode, initial="empty")
            assert out["hits"] == sum(ref.values())

    def test_buffer_2_pow_40_all_fast_path(self, tmp_path):
        """--buffer-tokens 2^40 with every row on the fast path plans nothing and allocates
        nothing of that size."""
        rows = [(0, s, 0, 10 + s, (0, 1 + s)) for s in range(4)]
        store = make_store(tmp_path, rows, 2)
        out = replay_selections(store, SelectionReplayConfig("t", "lru", 2**40))
        assert out["fast_path_rows"] == 4 and out["misses"] == 0

    def test_small_needs_skip_the_meminfo_read(self, monkeypatch):
        """Needs under ``UNCHECKED_BYTES`` (a cache-sized replay piece) are not checked."""
        from toolkit.runtime import memory

        monkeypatch.setattr(memory, "available_bytes", lambda: pytest.fail("read meminfo"))
        check_memory(memory.UNCHECKED_BYTES - 1, "a small step")
        monkeypatch.setattr(memory, "available_bytes", lambda: 0)
        with pytest.raises(ResourceError):
            check_memory(memory.UNCHECKED_BYTES, "a step at the bound")

    def test_what_cannot_fit_is_one_line(self, monkeypatch):
        """A step needing more memory than available stops with a ResourceError naming it."""
        monkeypatch.setattr("toolkit.runtime.memory.available_bytes", lambda: 1024)
        monkeypatch.setattr("toolkit.runtime.memory.UNCHECKED_BYTES", 0)
        with pytest.raises(ResourceError, match="needs about .* GiB; .* GiB is available"):
            check_memory(2**31, "a test step")
        keys = np.arange(10_000, dtype=np.int64)
        with pytest.raises(ResourceError, match="lru"):
            policies.get("lru").simulate(keys, 10_000, 100)


class TestKeptHeap:
    """``toolkit.runtime.keep_freed_memory`` asks glibc to keep freed blocks, so a replay's
    arrays reuse pages instead of faulting them in again; being process-wide, the CLI
    applies it and ``import toolkit`` does not."""

    @staticmethod
    def faults(env: dict[str, str], opt_in: bool) -> int:
        import os
        import subprocess
        import sys

        # three 2 MiB arrays freed together, as a replay frees its stream and its links:
        # by default glibc trims the 6 MiB at the top of the heap, so the next three fault
        # in all their pages again
        code = ("import resource, numpy as np, toolkit\n"
                + ("import toolkit.runtime; toolkit.runtime.keep_freed_memory()\n"
                   if opt_in else "")
                + "def once(): return [np.ones(1 << 18) for _ in range(3)]\n"
                "for _ in range(5): once()\n"
                "f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
                "for _ in range(50): once()\n"
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)")
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                             capture_output=True, text=True, check=True)
        return int(out.stdout)

    def test_opt_in_reuses_freed_arrays_import_alone_does_not(self):
        """Opting in keeps freed arrays; a bare ``import toolkit`` leaves glibc's default,
        and ``TOOLKIT_KEEP_HEAP=0`` turns the opt-in off."""
        import ctypes

        try:
            ctypes.CDLL(None).mallopt  # noqa: B018 - glibc only
        except AttributeError:
            pytest.skip("not glibc")
        kept = self.faults({"TOOLKIT_KEEP_HEAP": "1"}, opt_in=True)
        switched_off = self.faults({"TOOLKIT_KEEP_HEAP": "0"}, opt_in=True)
        import_only = self.faults({"TOOLKIT_KEEP_HEAP": "1"}, opt_in=False)
        assert kept < 500  # 512 pages an array, each time, without it
        assert switched_off > 50 * 3 * 256 and import_only > 50 * 3 * 256

    def test_the_cli_applies_it(self, monkeypatch):
        """Every ``toolkit`` command runs the opt-in before its own work."""
        from typer.testing import CliRunner

        from toolkit import runtime
        from toolkit.cli import app

        calls = []
        monkeypatch.setattr(runtime, "keep_freed_memory", lambda: calls.append(1) or True)
        result = CliRunner().invoke(app, ["models", "--help"])
        assert result.exit_code == 0, result.output
        assert calls == [1]


# -- every user-given size at an absurd value, under a memory limit (issue 34, point 1) ---
DATA = Path(__file__).parent / "data"
LIMIT_BYTES = 6 << 30
"""Address-space limit of the child: several times what the CLI needs for a tiny trace
(numba and its threads reserve more than they touch), far below what a size of 10^9
would allocate (8 GB for a miss curve or a TPOT table)."""


def limited_cli(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess:
    """``toolkit ARGS`` in a child whose address space is capped at ``LIMIT_BYTES``."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))

    env = {**os.environ, "TOOLKIT_PROGRESS": "0",
           "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run([sys.executable, "-m", "toolkit.cli", *args], env=env,
                          preexec_fn=cap, capture_output=True, text=True, timeout=timeout_s)


def one_line_error(res: subprocess.CompletedProcess, *words: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), \
        res.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.fixture(scope="module")
def bailian_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("absurd") / "s"
    s = toolkit.open_store(root, create=True)
    ingest_file(s, "bailian", DATA / "bailian_sample.jsonl", "b")
    s.close()
    return root


class TestAbsurdFlags:
    def test_mrc_max_capacity_1e9(self, tmp_path):
        """A 6-row selection trace with --max-capacity 10^9: the curve stops at the
        trace's distinct keys, says so once, and stores that many rows, not 10^9."""
        rows = [(0, s, 0, 10 + s, (0, 1 + s)) for s in range(6)]
        make_store(tmp_path, rows, 2).close()
        res = limited_cli("replay", "mrc", "--store", str(tmp_path / "store"), "--trace",
                          "t", "--max-capacity", "1000000000", "--json")
        assert res.returncode == 0, res.stderr
        assert res.stderr.count("--max-capacity 1,000,000,000 is beyond") == 1
        s = toolkit.open_store(tmp_path / "store")
        curve = s.read("miss_curves", "selections-t")
        assert curve.num_rows == 8  # positions 0..6, plus capacity 0
        assert curve.column("misses").to_pylist()[-1] == 7  # only cold misses left

    def test_mrc_prefix_needs_no_max_capacity(self, bailian_store):
        """``--kind prefix`` without --max-capacity runs to the trace's distinct keys."""
        res = limited_cli("replay", "mrc", "--store", str(bailian_store), "--kind", "prefix",
                          "--trace", "b", "--json")
        assert res.returncode == 0, res.stderr
        s = toolkit.open_store(bailian_store)
        curve = s.read("miss_curves", "prefix-b")
        keys = {h for hs in s.read("requests", "b").column("block_hashes").to_pylist()
                for h in hs}
        assert curve.num_rows == len(keys) + 1
        assert "note:" not in res.stderr

    def test_tiers_concurrency_1e9(self, bailian_store):
        """--concurrency 10^9 on a 5-request trace sizes its batch table by the 5."""
        res = limited_cli("replay", "tiers", "--store", str(bailian_store), "--trace", "b",
                          "--concurrency", "1000000000", "--radix-semantics", "page",
                          "--json")
        assert res.returncode == 0, res.stderr

    def test_grid_dev_zero(self, bailian_store):
        """--grid /dev/zero is refused before any of it is read."""
        res = limited_cli("sweep", "--store", str(bailian_store), "--grid", "/dev/zero")
        one_line_error(res, "/dev/zero", "--grid")

    @pytest.mark.parametrize("what", ["big", "directory"])
    def test_grid_file(self, bailian_store, tmp_path, what):
        """A 2 MiB grid file or a directory: one line naming it."""
        grid = tmp_path if what == "directory" else tmp_path / "big.toml"
        if what == "big":
            grid.write_text('kind = "prefix"\n' + "#" * (2 << 20))
        one_line_error(cli("sweep", "--store", str(bailian_store), "--grid", str(grid)),
                       str(grid), "--grid")

    @pytest.mark.parametrize("cmd", ["sweep", "mrc", "selections"])
    def test_workers_1e9(self, bailian_store, tmp_path, cmd):
        """--workers 10^9 is refused with a stated maximum, for processes and threads,
        before anything is allocated."""
        grid = tmp_path / "g.toml"
        grid.write_text('kind = "prefix"\ntrace = "b"\n[axes]\ncapacity_blocks = [1, 2]\n')
        args = {"sweep": ["sweep", "--grid", str(grid)],
                "mrc": ["replay", "mrc", "--kind", "prefix", "--trace", "b"],
                "selections": ["replay", "prefix", "--trace", "b"]}[cmd]
        res = cli(*args, "--store", str(bailian_store), "--workers", "1000000000")
        one_line_error(res, "--workers 1,000,000,000", f"{max_workers()}")


def cli(*args: str) -> subprocess.CompletedProcess:
    """``toolkit ARGS`` in this process, for refusals that happen before any allocation."""
    from typer.testing import CliRunner

    from toolkit.cli import app

    r = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(args, r.exit_code, r.stdout, r.stderr)
