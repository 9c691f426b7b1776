"""Issue 50, items 1-4 and 13: nothing a command does writes into a store behind its
transactions, removes it, reads outside it, or turns a directory that is not a store into
one. One path guard (:mod:`toolkit.store.guard`) for every writer; DuckDB locked to the
store (no temporary directory outside it); read-only commands refuse a non-store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app
from toolkit.errors import StoreError
from toolkit.store import WriteRefused

from .conftest import MOONCAKE

runner = CliRunner()


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A store holding the first 50 Mooncake requests as ``t`` and one tier replay."""
    from toolkit.cost.from_replay import run_tiers
    from toolkit.ingest import ingest_file
    from toolkit.replay.tiers import TierReplayConfig

    root = tmp_path_factory.mktemp("guard")
    head = root / "m.jsonl"
    with open(MOONCAKE) as f:
        head.write_text("".join(next(f) for _ in range(50)))
    with toolkit.open_store(root / "S", create=True) as s:
        ingest_file(s, "mooncake", head, "t")
        run = run_tiers(s, TierReplayConfig("t", concurrency=4)).summary["run_id"]
    return root / "S", run


def invoke(*args) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


class TestWritersStayOutOfStores:
    @pytest.mark.parametrize("rel", ["requests/t.parquet", "requests/new.parquet",
                                     "x.csv", "request_traces/t.json"])
    def test_sql_output_inside_the_store_is_refused(self, small, rel):
        """Item 1: ``--output STORE/requests/T.parquet`` replaced a 300-row trace with one
        row; now refused in one line, the store byte-identical."""
        store, _ = small
        before = files(store)
        code, out = invoke("sql", "--store", store, "SELECT 1 AS x", "--output", store / rel)
        assert code == 2 and out.count("\n") == 1 and "inside the store" in out, out
        assert files(store) == before

    def test_symlink_into_the_store_and_another_store(self, small, tmp_path):
        """Resolved first: a symlink to the store's table directory is the store; a second
        store the command was not given is protected too."""
        store, _ = small
        (tmp_path / "lnk").symlink_to(store / "requests")
        code, out = invoke("sql", "--store", store, "SELECT 1 AS x", "--output",
                           tmp_path / "lnk" / "a.parquet")
        assert code == 2 and "inside the store" in out
        with toolkit.open_store(tmp_path / "other", create=True):
            pass
        code, out = invoke("sql", "--store", store, "SELECT 1 AS x", "--output",
                           tmp_path / "other" / "a.csv")
        assert code == 2 and f"inside the store {tmp_path / 'other'}" in out
        assert not (tmp_path / "other" / "a.csv").exists()
        code, _ = invoke("sql", "--store", store, "SELECT 1 AS x", "--output",
                         tmp_path / "fine.csv")
        assert code == 0 and (tmp_path / "fine.csv").read_text() == "x\n1\n"

    @pytest.mark.parametrize("where", ["store", "parent", "inside", "foreign"])
    def test_export_store_replace_never_removes_a_store(self, small, tmp_path, where):
        """Item 2: ``--replace`` of the store, a parent of it or a directory inside it wiped
        the store (with a parent, the parent's other files too); a directory holding files
        an export does not write is not replaced either."""
        store, _ = small
        out = {"store": store, "parent": store.parent, "inside": store / "requests",
               "foreign": tmp_path / "mine"}[where]
        if where == "foreign":
            out.mkdir()
            (out / "notes.txt").write_text("keep me")
        before, mine = files(store), files(tmp_path)
        code, msg = invoke("export", "store", "--store", store, "--out", out, "--replace")
        assert code == 2 and msg.count("\n") == 1, msg
        assert ("holds 'notes.txt'" if where == "foreign" else "store") in msg
        assert files(store) == before and files(tmp_path) == mine

    def test_export_store_replaces_an_earlier_export(self, small, tmp_path):
        store, _ = small
        out = tmp_path / "exp"
        assert invoke("export", "store", "--store", store, "--out", out)[0] == 0
        assert invoke("export", "store", "--store", store, "--out", out, "--replace")[0] == 0
        assert (out / "requests.parquet").is_file()
        code, msg = invoke("export", "store", "--store", store, "--out", tmp_path / "no" / "x")
        assert code == 2 and "does not exist" in msg and not (tmp_path / "no").exists()

    def test_export_perfetto_overwrites_only_with_replace(self, small, tmp_path):
        """Item 13: ``export perfetto --out`` overwrote an existing file and made missing
        directories anywhere; now it behaves as ``sql --output`` and ``export store``."""
        store, run = small
        target = tmp_path / "t.json"
        target.write_text("precious")
        base = ["export", "perfetto", "--store", store, "--run", run, "--out"]
        code, msg = invoke(*base, target)
        assert code == 2 and "exists; pass --replace" in msg
        assert target.read_text() == "precious"
        code, msg = invoke(*base, tmp_path / "a" / "b" / "t.json")
        assert code == 2 and "does not exist" in msg and not (tmp_path / "a").exists()
        before = files(store)
        code, msg = invoke(*base, store / "requests" / "t.json")
        assert code == 2 and "inside the store" in msg and files(store) == before
        assert invoke(*base, target, "--replace")[0] == 0
        assert target.read_text().startswith("{")

    def test_report_inside_the_store_is_refused(self, small):
        store, _ = small
        before = files(store)
        code, msg = invoke("report", "--store", store, "--out", store / "report")
        assert code == 2 and "inside the store" in msg and files(store) == before


class TestSqlIsLockedToTheStore:
    def test_no_temporary_directory_outside_the_store(self, small, tmp_path, monkeypatch):
        """Item 3: DuckDB allowed ``<cwd>/.tmp/``, so ``read_text('.tmp/...')`` read a file
        outside the store and a ``.tmp`` symlink reached any file."""
        store, _ = small
        monkeypatch.chdir(tmp_path)
        (tmp_path / ".tmp").mkdir()
        (tmp_path / ".tmp" / "x.txt").write_text("secret")
        (tmp_path / ".tmp" / "root").symlink_to("/")
        with toolkit.open_store(store) as s:
            for q in ("SELECT * FROM read_text('.tmp/x.txt')",
                      f"SELECT * FROM read_text('{tmp_path}/.tmp/x.txt')",
                      "SELECT * FROM read_text('.tmp/root/etc/hostname')"):
                with pytest.raises(WriteRefused, match="outside the store"):
                    s.query(q)
            assert s.query("SELECT current_setting('temp_directory') AS d").item() \
                .startswith(str(store.resolve()))
            allowed = s.query("SELECT current_setting('allowed_directories') AS d").item()
            assert allowed.to_list() and all(  # exactly the store (and its temp dir in it)
                d.startswith(str(store.resolve()) + "/") for d in allowed.to_list())
        code, out = invoke("sql", "--store", store, "SELECT * FROM read_text('.tmp/x.txt')")
        assert code == 2 and "outside the store" in out and "secret" not in out

    def test_symlink_inside_the_store_is_refused(self, small):
        """A symlink placed in the store does not lead DuckDB out of it."""
        store, _ = small
        link = store / ".cache" / "evil"
        link.parent.mkdir(exist_ok=True)
        link.symlink_to("/")
        try:
            with toolkit.open_store(store) as s, pytest.raises(WriteRefused):
                s.query(f"SELECT * FROM read_text('{link}/etc/hostname')")
        finally:
            link.unlink()


class TestNotAStore:
    @pytest.mark.parametrize("cmd", [["info"], ["sql", "SELECT 1"],
                                     ["replay", "prefix", "--trace", "t"],
                                     ["replay", "tiers", "--trace", "t"]])
    def test_read_only_commands_refuse_and_write_nothing(self, tmp_path, cmd):
        """Item 4: a directory that is not a store got a 0.5 MB catalog.duckdb and an
        empty-store answer."""
        d = tmp_path / "mine"
        d.mkdir()
        (d / "notes.txt").write_text("x")
        code, out = invoke(*cmd, "--store", d)
        assert code == 2 and out.count("\n") == 1 and "is not a store" in out, out
        assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]

    def test_python_open_refuses_without_create(self, tmp_path):
        d = tmp_path / "mine"
        d.mkdir()
        (d / "notes.txt").write_text("x")
        for opener in (toolkit.open, toolkit.open_store):
            with pytest.raises(StoreError, match="is not a store"):
                opener(d)
        assert os.listdir(d) == ["notes.txt"]
        with toolkit.open(d, create=True) as ws:  # asked for: a store is made there
            assert ws.traces() == {"requests": [], "selections": []}
        toolkit.open(d).close()

    def test_a_store_without_its_catalog_still_opens(self, small):
        store, _ = small
        (store / "catalog.duckdb").rename(store / "cat.bak")
        try:
            with toolkit.open_store(store) as s:
                assert s.traces() == ["t"]
        finally:
            (store / "cat.bak").replace(store / "catalog.duckdb")


class TestCheckFindsForeignFiles:
    def test_check_and_repair(self, tmp_path):
        """(c): a file another program wrote into a table directory (wrong columns, a copy of
        a trace under a new name, a name that is no key) and a catalog whose views differ
        from the files are found by ``store check``, which says how to recover; ``store
        repair`` moves the files to .damaged/ and rewrites the catalog."""
        import shutil

        import duckdb
        import pyarrow as pa
        import pyarrow.parquet as pq

        from toolkit.ingest import ingest_file

        head = tmp_path / "m.jsonl"
        with open(MOONCAKE) as f:
            head.write_text("".join(next(f) for _ in range(20)))
        root = tmp_path / "S"
        with toolkit.open_store(root, create=True) as s:
            ingest_file(s, "mooncake", head, "t")
        assert invoke("store", "check", "--store", root) == (0, "ok: nothing damaged\n")
        pq.write_table(pa.table({"x": [1]}), root / "requests" / "one.parquet")
        shutil.copy(root / "requests" / "t.parquet", root / "requests" / "dup.parquet")
        (root / "requests" / "notes.txt").write_text("x")
        code, out = invoke("store", "check", "--store", root)
        lines = out.splitlines()
        assert code == 1 and len(lines) == 4, out
        assert "notes.txt: not a file the store writes" in lines[0]
        assert "dup.parquet: holds rows of trace(s) t under the name 'dup'" in lines[1]
        assert "one.parquet: not a requests file: column(s) trace, request_id" in lines[2]
        assert lines[3].startswith(f"to recover: toolkit store repair --store {root}")
        code, out = invoke("store", "repair", "--store", root)
        assert code == 0 and out.count("fixed: ") == 3
        assert sorted(p.name.split("-", 1)[1] for p in (root / ".damaged" / "requests")
                      .iterdir()) == ["dup.parquet", "notes.txt", "one.parquet"]
        # a catalog edited behind the store's back (its recorded digest left as it was)
        with duckdb.connect(str(root / "catalog.duckdb")) as cat:
            cat.execute("CREATE OR REPLACE VIEW requests AS SELECT 1 AS x")
        code, out = invoke("store", "check", "--store", root)
        assert code == 1 and "catalog.duckdb: does not match the files: view(s) requests " \
            "differ" in out.splitlines()[0]
        code, out = invoke("store", "repair", "--store", root)
        assert code == 0 and out.count("fixed: ") == 1 and "rewritten" in out
        assert invoke("store", "check", "--store", root) == (0, "ok: nothing damaged\n")
        with toolkit.open_store(root) as s:
            assert s.query("SELECT count(*) FROM requests").item() == 20
        with duckdb.connect(str(root / "catalog.duckdb"), read_only=True) as cat:
            assert cat.execute("SELECT count(*) FROM requests").fetchone() == (20,)


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.add(int(d.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_pool_workers_die_with_a_killed_sweep(tmp_path):
    """Item 7: ``kill -9`` of ``toolkit sweep --workers 2`` left its pool workers (~350 MB
    each) running for minutes, still committing cells. Now they exit within seconds and
    commit nothing more."""
    import signal
    import subprocess
    import sys
    import time

    from toolkit.ingest import ingest_file

    from .conftest import ROOT

    root = tmp_path / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "bailian", ROOT / "tests" / "data" / "bailian_sample.jsonl", "b")
    grid = tmp_path / "slow.toml"
    grid.write_text('kind = "fault"\ntrace = "b"\n[fixed]\nsleep_s = 1.5\n'
                    '[axes]\ncapacity_blocks = [1, 2, 3, 4, 5, 6, 7, 8]')
    code = ("import sys; from tests import sweep_fault; from toolkit.cli import app; "
            "sys.argv = ['toolkit'] + sys.argv[1:]; app()")
    p = subprocess.Popen([sys.executable, "-c", code, "sweep", "--store", str(root), "--grid",
                          str(grid), "--workers", "2"], cwd=ROOT, start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env={**os.environ, "TOOLKIT_PROGRESS": "0"})
    try:
        deadline = time.monotonic() + 120
        workers: set[int] = set()
        while len(workers) < 2 or not list((root / "sweeps").glob("*.parquet")):
            assert p.poll() is None and time.monotonic() < deadline
            # the spawn pool's workers (a resource tracker is a child too: not a worker)
            workers = {c for c in _children(p.pid)
                       if b"spawn_main" in (Path("/proc") / str(c) / "cmdline").read_bytes()}
            time.sleep(0.1)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        with toolkit.open_store(root) as s:
            done = s.query("SELECT count(*) FROM sweeps").item()
        deadline = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), "pool workers outlived the sweep"
        time.sleep(2)  # a worker that lived on would commit its 1.5 s cell by now
        with toolkit.open_store(root) as s:
            assert s.query("SELECT count(*) FROM sweeps").item() == done
            assert len(s.keys("replay_runs")) == done
    finally:
        if p.poll() is None:
            p.kill()
        for w in workers if "workers" in locals() else ():
            if _alive(w):
                os.kill(w, signal.SIGKILL)


def test_a_cell_whose_driver_is_gone_is_not_committed(tmp_path):
    """Ray workers outlive a SIGKILLed driver: a cell checks, before its commit, that its
    driver (same host) still runs, and commits nothing otherwise."""
    import socket
    import subprocess

    from toolkit.ingest import ingest_file
    from toolkit.replay.config import PrefixReplayConfig
    from toolkit.sweep.engines import CellTask, run_cell

    from .conftest import ROOT

    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that no longer runs
    with toolkit.open_store(tmp_path / "s", create=True) as s:
        ingest_file(s, "bailian", ROOT / "tests" / "data" / "bailian_sample.jsonl", "b")
        row = {"sweep_id": "x", "kind": "prefix", "grid_fingerprint": "g", "grid_json": "{}",
               "cell": 0, "cell_json": "{}", "config_fingerprint": "c"}
        task = CellTask(str(s.root), "prefix", PrefixReplayConfig("b", "lru", 4), row, 1,
                        (socket.gethostname(), gone.pid))
        out = run_cell(task, s)
        assert out.status == "failed" and "driver" in out.error
        assert s.keys("replay_runs") == [] and s.keys("sweeps") == []
        out = run_cell(task.__class__(**{**task.__dict__, "driver": None}), s)
        assert out.status == "done" and len(s.keys("replay_runs")) == 1


def test_a_device_or_fifo_is_never_replaced(small, tmp_path):
    """``--output`` / ``--out --replace`` naming a FIFO (or /dev/null) is refused, not
    renamed over."""
    store, run = small
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    for args in (["sql", "--store", store, "SELECT 1 AS x", "--output", fifo],
                 ["export", "perfetto", "--store", store, "--run", run, "--out", fifo,
                  "--replace"]):
        code, out = invoke(*args)
        assert code == 2 and "exists and is not a regular file" in out, out
    assert fifo.is_fifo()


def test_check_finds_a_run_copied_under_another_name(small):
    """A run table's file copied under a new key: its rows showed twice in every query."""
    import shutil

    store, run = small
    copy = store / "tier_runs" / "copied.parquet"
    shutil.copy(store / "tier_runs" / f"{run}.parquet", copy)
    try:
        code, out = invoke("store", "check", "--store", store)
        assert code == 1 and f"copied.parquet: holds rows of run(s) {run} under the name " \
            "'copied'" in out, out
    finally:
        copy.unlink()
    assert invoke("store", "check", "--store", store)[0] == 0
