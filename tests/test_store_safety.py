"""Store safety (issue 10, points 2 and 3): no SQL injection or glob surprises, writes that
are all-or-nothing across tables even when the process dies, one winner among concurrent
writers, stale staging cleaned up, corrupt files reported by name, no needless rewrites."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app
from toolkit.errors import StoreError
from toolkit.ingest import ingest_file
from toolkit.store import KEY_MAX_CHARS, STAGING_DIR, STALE_STAGING_S, bounded_key, check_key

from .conftest import MOONCAKE, snapshot

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def dsa_file(path: Path) -> Path:
    """A 4-row selection trace (2 requests x 2 layers x 1 step, k = 2)."""
    lines = [json.dumps({"event": "dsa_topk", "request_id": r, "layer_id": la, "step_idx": 0,
                         "seq_len_current": 4, "selected_token_pos": [la, 3]})
             for r in (0, 1) for la in (0, 1)]
    path.write_text("\n".join(lines) + "\n")
    return path


def mooncake_head(path: Path, n: int = 50) -> Path:
    with MOONCAKE.open() as f:
        path.write_text("".join(next(f) for _ in range(n)))
    return path


def full_snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file (staging included) with its bytes and mtime: 'unchanged' means literally."""
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


class TestKeys:
    @pytest.mark.parametrize("key", ["abc\n", "a b", "a'b", "", "-a", "x" * 129, "a/b", "a[1]"])
    def test_check_key_refuses(self, key):
        """fullmatch: a trailing newline no longer slips through."""
        with pytest.raises(StoreError, match="invalid"):
            check_key(key)

    def test_bounded_key_keeps_limit_and_distinctness(self):
        """Derived keys of a 128-character name fit the limit and stay distinct."""
        a, b = bounded_key("prefix-" + "x" * 128 + "-lru-1"), bounded_key("prefix-" + "x" * 128
                                                                          + "-lru-2")
        assert len(a) == len(b) == KEY_MAX_CHARS and a != b
        assert check_key(a) == a and bounded_key("short") == "short"

    @pytest.mark.parametrize("key", ["../requests/x", "/etc/passwd", "a\n"])
    def test_read_and_delete_refuse_keys_outside_the_store(self, store, key):
        with pytest.raises(StoreError, match="invalid key"):
            store.read("selection_runs", key)
        with pytest.raises(StoreError, match="invalid key"):
            store.delete("selection_runs", key)

    def test_invalid_names_on_disk_are_ignored_and_reported(self, store, tmp_path):
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        evil = store.root / "selections" / "a'; COPY (SELECT 42) TO 'pwned.csv'; --.parquet"
        evil.write_bytes((store.root / "selections" / "t.parquet").read_bytes())
        with toolkit.open_store(store.root) as s:
            assert s.keys("selections") == ["t"]
            assert s.query("SELECT count(*) AS n FROM selections")["n"][0] == 4
            assert any("not a valid key name" in p and "pwned" in p for p in s.problems)


    def test_stranger_dropped_between_own_writes_is_left_out_at_the_next_query(
            self, store, tmp_path):
        """An open store does not re-list a glob-read table after its own writes; a file
        with an invalid name that appeared meanwhile (another process) is still found,
        left out and reported when a query next reads the table."""
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        assert store.query("SELECT count(*) AS n FROM selections")["n"][0] == 4
        evil = store.root / "selections" / "bad name.parquet"
        evil.write_bytes((store.root / "selections" / "t.parquet").read_bytes())
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "u.jsonl"), "u")  # our own write
        assert store.keys("selections") == ["t", "u"]
        assert store.query("SELECT count(*) AS n FROM selections")["n"][0] == 8
        assert any("not a valid key name" in p and "bad name" in p for p in store.problems)


    def test_stranger_in_the_same_clock_tick_as_our_write(self, store, tmp_path, monkeypatch):
        """Directory times can be coarse: a file another process drops, and our own write
        after it, can leave the directory's time where the last listing saw it. The write
        then re-lists the table at once instead of waiting for a change that never shows."""

        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        assert store.query("SELECT count(*) AS n FROM selections")["n"][0] == 4
        d = store.root / "selections"
        m = d.stat().st_mtime_ns
        (d / "bad name.parquet").write_bytes((d / "t.parquet").read_bytes())
        os.utime(d, ns=(m, m))  # the stranger landed in the tick the listing recorded
        real = os.replace

        def same_tick(a, b):
            real(a, b)
            if Path(b).parent == d:
                os.utime(d, ns=(m, m))  # ... and so did our write

        monkeypatch.setattr(os, "replace", same_tick)
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "u.jsonl"), "u")
        monkeypatch.undo()
        assert store.query("SELECT count(*) AS n FROM selections")["n"][0] == 8
        assert any("not a valid key name" in p and "bad name" in p for p in store.problems)


class TestNoInjection:
    def test_injected_file_name_writes_nothing(self, tmp_path, monkeypatch):
        """The issue's attack: a Parquet file named as SQL, then replay with --model."""
        monkeypatch.chdir(tmp_path)
        root = tmp_path / "s"
        res = runner.invoke(app, ["ingest", "selections", str(dsa_file(tmp_path / "t.jsonl")),
                                  "--format", "dsa-jsonl", "--store", str(root)])
        assert res.exit_code == 0, res.output
        name = "a'; COPY (SELECT 42) TO 'pwned.csv'; --"
        (root / "selections" / f"{name}.parquet").write_bytes(
            (root / "selections" / "t.parquet").read_bytes())
        res = runner.invoke(app, ["replay", "selections", "--store", str(root), "--trace", name,
                                  "--model", "glm-5.2"])
        assert res.exit_code == 2 and "no selection trace" in res.output
        res = runner.invoke(app, ["replay", "selections", "--store", str(root), "--trace", "t",
                                  "--model", "glm-5.2", "--json"])
        assert res.exit_code == 0, res.output
        assert not list(tmp_path.rglob("pwned.csv"))

    def test_run_id_is_a_bound_parameter(self, tmp_path):
        """A run id that is SQL matches no run (an f-string would have matched every run)."""
        from toolkit.cost.from_replay import cost_of_replay
        from toolkit.hardware import get_hardware
        from toolkit.models import get_model
        from toolkit.replay.selections import SelectionReplayConfig, replay_selections

        with toolkit.open_store(tmp_path / "s", create=True) as s:
            ingest_file(s, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
            replay_selections(s, SelectionReplayConfig("t", "lru", 2))
            with pytest.raises(toolkit.errors.ToolkitError, match="no selection replay run"):
                cost_of_replay(s, "x' OR '1'='1", get_model("glm-5.2"), get_hardware("gb200"))


class TestGlobCharacters:
    def test_store_path_with_brackets_reads_only_its_own_files(self, tmp_path):
        """`s[1]` used to glob-match `s1` and read the other store's data."""
        with toolkit.open_store(tmp_path / "s1", create=True) as s:
            ingest_file(s, "mooncake", mooncake_head(tmp_path / "a.jsonl", 30), "other")
        with toolkit.open_store(tmp_path / "s[1]", create=True) as s:
            ingest_file(s, "mooncake", mooncake_head(tmp_path / "b.jsonl", 20), "own")
        with toolkit.open_store(tmp_path / "s[1]", create=True) as s:
            assert s.query("SELECT trace, count(*) AS n FROM requests GROUP BY trace").rows() \
                == [("own", 20)]


class TestLongNames:
    def test_128_character_name_replays(self, store, tmp_path):
        """Run ids and miss-curve keys derived from a maximal name stay within the limit."""
        from toolkit.replay.mrc import miss_curve_table
        from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix

        name = "n" * 128
        ingest_file(store, "mooncake", mooncake_head(tmp_path / "m.jsonl"), name)
        row = replay_prefix(store, PrefixReplayConfig(name, "lru", 64))
        assert len(row["run_id"]) <= KEY_MAX_CHARS
        assert store.keys("replay_runs") == [row["run_id"]]
        miss_curve_table(store, name, "prefix", 8)
        assert len(store.keys("miss_curves")) == 1


# A child process that ingests a 3-table selection trace and dies (os._exit, no cleanup) at
# the n-th step of the commit: 1 = writing the COMMIT marker, 2..4 = the three renames,
# 5 = removing the marker.
_DIE_AT = """
import os, sys
from pathlib import Path
import toolkit.store as st
from toolkit.ingest import ingest_file
real, calls = os.replace, [0]
def replace(a, b):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os._exit(9)
    real(a, b)
os.replace = replace
real_unlink = Path.unlink
def unlink(self, *a, **k):
    if self.name == st.COMMIT_MARKER:
        replace(None, None)  # call 5: after the last rename, before the marker goes
    real_unlink(self, *a, **k)
Path.unlink = unlink
with st.open_store(sys.argv[1]) as s:
    ingest_file(s, "dsa-jsonl", sys.argv[2], "t")
"""


class TestCrashWindows:
    def test_death_at_every_point_of_a_commit(self, tmp_path):
        """Killed before the marker: nothing visible, then cleaned once stale. Killed after
        it (between renames, too): the next open completes the write and says so."""
        src = dsa_file(tmp_path / "t.jsonl")
        procs = {}
        for n in range(1, 6):
            root = tmp_path / f"s{n}"
            toolkit.open_store(root, create=True).close()
            procs[n] = subprocess.Popen([sys.executable, "-c", _DIE_AT, str(root), str(src),
                                         str(n)], cwd=ROOT)
        for n, p in procs.items():
            p.wait(timeout=120)
            root = tmp_path / f"s{n}"
            with toolkit.open_store(root) as s:
                counts = [s.query(f"SELECT count(*) AS n FROM {t}")["n"][0]
                          for t in ("selections", "selection_traces", "selection_requests")]
                if n == 1:
                    assert p.returncode == 9 and counts == [0, 0, 0]
                    assert list((root / STAGING_DIR).iterdir())  # young: left alone
                else:
                    assert p.returncode == 9 and counts == [4, 1, 2], n
                    assert any("interrupted after its commit" in x for x in s.problems)
                    assert not list((root / STAGING_DIR).iterdir())
            if n == 1:
                for tx in (root / STAGING_DIR).iterdir():
                    old = time.time() - STALE_STAGING_S - 10
                    os.utime(tx, (old, old))
                with toolkit.open_store(root) as s:
                    assert any("never committed" in x for x in s.problems)
                    assert not list((root / STAGING_DIR).iterdir())
                    ingest_file(s, "dsa-jsonl", src, "t")  # the name is free

    def test_live_writer_staging_is_kept(self, store):
        """An old staging directory still locked by its (live) writer is not removed."""
        tx = store.root / STAGING_DIR / "tx-live"
        tx.mkdir(parents=True)
        (tx / "part").write_bytes(b"x")
        make_stale(tx)
        with flocked(tx), toolkit.open_store(store.root) as s:
            assert (tx / "part").exists() and not s.problems
        with toolkit.open_store(store.root) as s:
            assert not tx.exists() and s.problems

    def test_summary_and_per_row_results_land_together(self, store, tmp_path):
        """A failure after the per-row stream leaves neither table (one transaction)."""
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        with pytest.raises(RuntimeError), store.writer("selection_replay", "run") as sink:
            sink.write(pa.table({"run_id": ["run"], "trace": ["t"], "request_id": [0],
                                 "step": [0], "layer": [0], "seq_len": [4], "accesses": [2],
                                 "hits": [0], "misses": [2], "bytes_h2d": [2],
                                 "fast_path": [False]}))
            store.write("miss_curves", "run", pa.table({
                "trace": ["t"], "kind": ["selections"], "capacity": [0], "accesses": [1],
                "misses": [1], "miss_ratio": [1.0]}))
            raise RuntimeError("dies before the summary")
        assert store.keys("selection_replay") == [] and store.keys("miss_curves") == []

    @pytest.mark.parametrize("link", [True, False])
    def test_replaced_files_of_a_transaction_are_freed_later(self, store, monkeypatch, link):
        """A transaction replacing two files gives each a second name before its renames
        (freed on the trash thread, or by the rename where hard links fail): readers see
        both new files, and nothing is left in staging once the thread is done."""
        import toolkit.store as st
        from toolkit.store import trash

        if not link:
            def no_links(a, b):
                raise OSError(1, "Operation not permitted")

            monkeypatch.setattr(os, "link", no_links)
        linked = []
        real_keep = trash.keep_old
        monkeypatch.setattr(trash, "keep_old", lambda f, s: linked.append(
            out := real_keep(f, s)) or out)
        for hits in range(1, 4):
            with store.transaction():
                store.write("replay_runs", "a", run_row("a", hits), replace=True)
                store.write("replay_runs", "b", run_row("b", 10 * hits), replace=True)
            got = store.query("SELECT run_id, block_hits FROM replay_runs ORDER BY run_id")
            assert got["block_hits"].to_list() == [hits, 10 * hits]
        # the first commit replaced nothing; the next two replaced two files each
        assert sum(x is not None for x in linked) == (4 if link else 0)
        st.drain_trash()
        assert list((store.root / STAGING_DIR).iterdir()) == []


def make_stale(*paths: Path) -> None:
    """Set back the times of ``paths`` past the staging age limit."""
    old = time.time() - STALE_STAGING_S - 10
    for p in paths:
        os.utime(p, (old, old))


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """Hold a flock on ``path``, as a live writer does."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def run_row(run_id: str, hits: int = 1) -> pa.Table:
    """A one-row ``replay_runs`` table (a lone small write)."""
    row = {f.name: (None if f.nullable else "x" if pa.types.is_string(f.type) else 0)
           for f in toolkit.schema.TABLES["replay_runs"]}
    row.update(run_id=run_id, kind="prefix", block_hits=hits)
    return pa.Table.from_pylist([row], schema=toolkit.schema.TABLES["replay_runs"])


class TestSmallWrites:
    """A lone small write (one table, outside a transaction) is staged as one flock-ed
    file and renamed under the store lock: same checks, same all-or-nothing."""

    def test_lands_whole_and_leaves_no_staging(self, store):
        store.write("replay_runs", "r", run_row("r", 5))
        assert store.query("SELECT block_hits FROM replay_runs")["block_hits"].to_list() == [5]
        store.write("replay_runs", "r", run_row("r", 7), replace=True)
        assert store.read("replay_runs", "r").column("block_hits").to_pylist() == [7]
        toolkit.store.drain_trash()  # the replaced file's second name, unlinked later
        assert list((store.root / STAGING_DIR).iterdir()) == []
        with pytest.raises(StoreError, match="already exists"):
            store.write("replay_runs", "r", run_row("r", 9))
        assert store.read("replay_runs", "r").column("block_hits").to_pylist() == [7]

    def test_failed_write_leaves_nothing(self, store, monkeypatch):

        def disk_full(fd, data):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "write", disk_full)
        with pytest.raises(OSError, match="No space"):
            store.write("replay_runs", "r", run_row("r"))
        monkeypatch.undo()
        assert store.keys("replay_runs") == [] and not list((store.root / STAGING_DIR).iterdir())

    def test_another_writer_wins_between_check_and_commit(self, tmp_path, monkeypatch):
        """Both passed the early check; the second to take the lock is refused, the
        first writer's row is kept and the loser's staged file removed."""
        import toolkit.store as st

        with toolkit.open_store(tmp_path / "s", create=True) as a, \
                toolkit.open_store(tmp_path / "s") as b:
            real, raced = st.Store._lock, []

            def b_first(self, *, exclusive):
                if self is a and exclusive and not raced:  # a staged, about to commit
                    raced.append(b.write("replay_runs", "r", run_row("r", 2)))
                return real(self, exclusive=exclusive)

            monkeypatch.setattr(st.Store, "_lock", b_first)
            with pytest.raises(StoreError, match="another process meanwhile"):
                a.write("replay_runs", "r", run_row("r", 1))
            assert a.read("replay_runs", "r").column("block_hits").to_pylist() == [2]
            assert not list((tmp_path / "s" / STAGING_DIR).iterdir())

    def test_stale_staged_file_removed_unless_its_writer_lives(self, store):
        staging = store.root / STAGING_DIR
        staging.mkdir(exist_ok=True)
        dead, live = staging / "one-dead.replay_runs.r.parquet", staging / "one-live.x.parquet"
        for f in (dead, live):
            f.write_bytes(b"x")
        make_stale(dead, live)
        with flocked(live), toolkit.open_store(store.root) as s:
            assert not dead.exists() and live.exists()
            assert any("one-dead" in p for p in s.problems)
        with toolkit.open_store(store.root):
            assert not live.exists()

    @pytest.mark.parametrize("same_tick", [False, True])
    def test_stranger_beside_a_small_write_is_left_out(self, store, monkeypatch, same_tick):
        """A small write checks one directory time, not every table's: a badly named file
        another process dropped is still left out and reported at the next query, also
        when that directory's time did not move (a coarse clock), which re-lists now."""

        store.write_row("replay_runs", "a", run_row("a").to_pylist()[0])
        assert store.query("SELECT count(*) AS n FROM replay_runs")["n"][0] == 1
        d = store.root / "replay_runs"
        m = d.stat().st_mtime_ns
        (d / "bad name.parquet").write_bytes((d / "a.parquet").read_bytes())
        if same_tick:
            os.utime(d, ns=(m, m))
            real = os.replace

            def in_the_tick(a, b):
                real(a, b)
                if Path(b).parent == d:
                    os.utime(d, ns=(m, m))

            monkeypatch.setattr(os, "replace", in_the_tick)
        store.write_row("replay_runs", "b", run_row("b").to_pylist()[0])
        monkeypatch.undo()
        assert store.query("SELECT count(*) AS n FROM replay_runs")["n"][0] == 2
        assert any("not a valid key name" in p and "bad name" in p for p in store.problems)

    def test_write_row_checks_its_values(self, store):
        """A row is built with the table's schema: a value that does not fit, or a
        missing required one, is refused with the table and key named, and nothing lands."""
        row = run_row("r").to_pylist()[0]
        with pytest.raises(ValueError, match="replay_runs 'r'"):
            store.write_row("replay_runs", "r", {**row, "block_hits": "many"})
        with pytest.raises(ValueError, match="'kind' has 1 null"):
            store.write_row("replay_runs", "r", {k: v for k, v in row.items() if k != "kind"})
        with pytest.raises(StoreError, match="unknown table"):
            store.write_row("no_such_table", "r", row)
        assert store.keys("replay_runs") == []
        store.write_row("replay_runs", "r", {**row, "block_hits": 3, "not_a_column": 1})
        got = store.read("replay_runs", "r")
        assert got.schema.equals(toolkit.schema.TABLES["replay_runs"])
        assert got.column("block_hits").to_pylist() == [3]

    @pytest.mark.parametrize("link", [True, False])
    def test_replaced_file_is_freed_later_or_at_once(self, store, monkeypatch, link):
        """A replaced run row keeps a second name in staging until the trash thread drops
        it; where hard links fail the rename frees it, as before. Readers see the new row
        either way, and nothing is left once the thread is done."""
        import toolkit.store as st

        if not link:
            def no_links(a, b):
                raise OSError(1, "Operation not permitted")

            monkeypatch.setattr(os, "link", no_links)
        for hits in range(1, 6):
            store.write_row("replay_runs", "r", run_row("r", hits).to_pylist()[0],
                            replace=True)
            assert store.read("replay_runs", "r").column("block_hits").to_pylist() == [hits]
        left = [p.name for p in (store.root / STAGING_DIR).iterdir()]
        assert all(n.startswith(st.OLD_PREFIX) for n in left) and (link or not left)
        st.drain_trash()
        assert list((store.root / STAGING_DIR).iterdir()) == []
        assert store.keys("replay_runs") == ["r"]

    def test_replace_during_shutdown_frees_inline(self, store, monkeypatch):
        """Once the interpreter shuts down no thread takes new work: the write that has
        landed is not reported as failed, and the old file goes at once."""
        from toolkit.store import trash

        store.write_row("replay_runs", "r", run_row("r", 1).to_pylist()[0])

        class Closed:
            def submit(self, *a):
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")

        monkeypatch.setattr(trash, "_TRASH", (os.getpid(), Closed()))
        store.write_row("replay_runs", "r", run_row("r", 2).to_pylist()[0], replace=True)
        assert store.read("replay_runs", "r").column("block_hits").to_pylist() == [2]
        assert list((store.root / STAGING_DIR).iterdir()) == []

    def test_old_names_are_removed_silently_once_stale(self, store, monkeypatch):
        """Such a name left by a process that died is garbage: a later open removes it
        without a warning once stale (by its ctime: the link made it), and leaves a young
        one to its writer's thread."""
        from toolkit.store import transaction

        # a ctime cannot be set back; recovery reads the limit where it runs
        monkeypatch.setattr(transaction, "STALE_STAGING_S", 0.5)
        staging = store.root / STAGING_DIR
        staging.mkdir(exist_ok=True)
        old, young = staging / "old-dead.parquet", staging / "old-young.parquet"
        old.write_bytes(b"x")
        time.sleep(0.7)
        young.write_bytes(b"x")
        with toolkit.open_store(store.root) as s:
            assert not old.exists() and young.exists()
            assert not any("old-" in p for p in s.problems)

    def test_replacing_a_compacted_key_rewrites_its_part(self, store):
        """A key living in a compacted part cannot be replaced by a rename: it goes through
        a transaction that moves it out of the part (one copy of its row)."""
        for r in ("a", "b"):
            store.write("replay_runs", r, run_row(r, 1))
        assert store.compact()["replay_runs"] == 2
        store.write("replay_runs", "a", run_row("a", 3), replace=True)
        got = store.query("SELECT run_id, block_hits FROM replay_runs ORDER BY run_id")
        assert got.rows() == [("a", 3), ("b", 1)]


class TestConcurrentWriters:
    def test_commit_rechecks_the_name(self, tmp_path):
        """Both passed the early check; the second to commit is refused, the first kept."""
        src = mooncake_head(tmp_path / "m.jsonl", 10)
        other = mooncake_head(tmp_path / "o.jsonl", 12)
        with toolkit.open_store(tmp_path / "s", create=True) as a, \
                toolkit.open_store(tmp_path / "s") as b:
            with pytest.raises(StoreError, match="another process meanwhile"), a.transaction():
                ingest_file(a, "mooncake", src, "x")
                ingest_file(b, "mooncake", other, "x")
            assert b.query("SELECT count(*) AS n FROM requests")["n"][0] == 12
            assert not list((tmp_path / "s" / STAGING_DIR).iterdir())

    def test_two_processes_one_winner(self, tmp_path):
        """Two concurrent CLI ingests of one name without --replace: exactly one succeeds."""
        src = mooncake_head(tmp_path / "m.jsonl", 200)
        cmd = [str(Path(sys.executable).with_name("toolkit")), "ingest", "mooncake", str(src),
               "--name", "x", "--store", str(tmp_path / "s")]
        procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        err = "".join(p.communicate(timeout=120)[1] for p in procs)
        assert sorted(p.returncode for p in procs) == [0, 2], err
        assert "already exists" in err
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            assert s.keys("requests") == ["x"] and s.keys("request_traces") == ["x"]


class TestCorruptFiles:
    def test_truncated_file_is_reported_and_other_tables_work(self, store, tmp_path):
        ingest_file(store, "mooncake", mooncake_head(tmp_path / "m.jsonl", 10), "good")
        ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        good = store.root / "requests" / "good.parquet"
        (store.root / "requests" / "cut.parquet").write_bytes(good.read_bytes()[:-40])
        (store.root / "selections" / "junk.parquet").write_bytes(b"PAR1 not parquet")
        with toolkit.open_store(store.root) as s:
            assert s.query("SELECT count(*) AS n FROM requests")["n"][0] == 10
            assert s.query("SELECT count(*) AS n FROM selections")["n"][0] == 4
            assert s.query("SELECT count(*) AS n FROM selection_traces")["n"][0] == 1
            assert sum("cut.parquet" in p for p in s.problems) == 1
            assert sum("junk.parquet" in p for p in s.problems) == 1
            with pytest.raises(StoreError, match="cut.parquet"):
                s.read("requests", "cut")

    def test_cli_prints_problems_as_warnings(self, store, tmp_path):
        (store.root / "requests").mkdir()
        (store.root / "requests" / "bad.parquet").write_bytes(b"")
        res = runner.invoke(app, ["sql", "SELECT count(*) AS n FROM requests",
                                  "--store", str(store.root), "--format", "csv"])
        assert res.exit_code == 0
        assert res.stdout == "n\n0\n"
        assert "warning:" in res.stderr and "bad.parquet" in res.stderr


class TestNothingChangesWithoutAChange:
    def test_failed_ingest_info_and_sql_leave_the_store_byte_identical(self, tmp_path):
        root = tmp_path / "s"
        src = mooncake_head(tmp_path / "m.jsonl", 10)
        assert runner.invoke(app, ["ingest", "mooncake", str(src), "--store", str(root),
                                   "--name", "a"]).exit_code == 0
        before = full_snapshot(root)
        bad = tmp_path / "bad.jsonl"
        bad.write_text(src.read_text() + "{not json\n")
        for args in (["ingest", "mooncake", str(bad), "--name", "b"],
                     ["ingest", "mooncake", str(src), "--name", "a"],
                     ["info"], ["sql", "SELECT count(*) FROM requests"]):
            res = runner.invoke(app, [*args, "--store", str(root)])
            assert res.exit_code in (0, 2), res.output
            assert full_snapshot(root) == before, args
        assert snapshot(root)  # the helper still sees the data files


class TestMissingStore:
    @pytest.mark.parametrize("args", [
        ["sql", "SELECT 1"], ["info"], ["replay", "prefix", "--trace", "x"],
        ["replay", "selections", "--trace", "x"],
        ["replay", "mrc", "--trace", "x", "--max-capacity", "4"],
        ["replay", "tiers", "--trace", "x"],
    ])
    def test_read_only_commands_do_not_create_it(self, tmp_path, args):
        root = tmp_path / "nope"
        res = runner.invoke(app, [*args, "--store", str(root)])
        assert res.exit_code == 2, res.output
        assert "no store at" in res.output and not root.exists()

    def test_failed_first_ingest_leaves_no_store(self, tmp_path):
        bad = tmp_path / "b.jsonl"
        bad.write_text("{bad\n")
        res = runner.invoke(app, ["ingest", "mooncake", str(bad), "--store",
                                  str(tmp_path / "new")])
        assert res.exit_code == 2 and not (tmp_path / "new").exists()

    def test_a_file_as_store_is_refused(self, tmp_path):
        f = tmp_path / "file"
        f.write_text("x")
        res = runner.invoke(app, ["info", "--store", str(f)])
        assert res.exit_code == 2 and "not a directory" in res.output


class TestFailedRename:
    def test_rename_error_after_commit_is_completed_on_next_open(self, store, tmp_path,
                                                               monkeypatch):
        """An OSError between renames (not a death) also leaves a write the next open
        finishes, never half of one."""

        real, calls = os.replace, [0]

        def flaky(a, b):
            calls[0] += 1
            if calls[0] == 3:  # marker, first rename, then fail
                raise OSError(5, "I/O error")
            real(a, b)

        monkeypatch.setattr(os, "replace", flaky)
        with pytest.raises(StoreError, match="I/O error"):  # one line naming the directory
            ingest_file(store, "dsa-jsonl", dsa_file(tmp_path / "t.jsonl"), "t")
        monkeypatch.setattr(os, "replace", real)
        with toolkit.open_store(store.root) as s:
            assert s.keys("selections") == s.keys("selection_traces") == ["t"]
            assert s.keys("selection_requests") == ["t"]
            assert any("interrupted after its commit" in p for p in s.problems)


    def test_committed_write_of_an_older_version_is_completed(self, store, tmp_path):
        """Staging from before the flat layout (``table/key.parquet`` listed as
        ``entries`` in the COMMIT marker) is still rolled forward on open."""
        import toolkit.store as st

        ingest_file(store, "mooncake", mooncake_head(tmp_path / "a.jsonl", 3), "a")
        tx = store.root / STAGING_DIR / "tx-old"
        (tx / "requests").mkdir(parents=True)
        (tx / "requests" / "b.parquet").write_bytes(
            (store.root / "requests" / "a.parquet").read_bytes())
        (tx / st.COMMIT_MARKER).write_text(json.dumps(
            {"entries": [["requests", "b"]], "moves": [], "deletes": []}))
        with toolkit.open_store(store.root) as s:
            assert s.keys("requests") == ["a", "b"]
            assert s.query("SELECT count(*) AS n FROM requests")["n"][0] == 6
            assert any("interrupted after its commit: requests/b" in p for p in s.problems)
        assert not tx.exists()


class TestCatalogStability:
    def test_more_files_in_a_table_do_not_rewrite_the_catalog(self, store, tmp_path):
        """Views read directories, so only a table's first file changes the catalog; an
        open store still sees a file another process adds."""
        ingest_file(store, "mooncake", mooncake_head(tmp_path / "a.jsonl", 3), "a")
        cat = store.root / "catalog.duckdb"
        before = (cat.read_bytes(), cat.stat().st_mtime_ns)
        with toolkit.open_store(store.root) as other:
            ingest_file(other, "mooncake", mooncake_head(tmp_path / "b.jsonl", 4), "b")
        assert (cat.read_bytes(), cat.stat().st_mtime_ns) == before
        assert store.query("SELECT count(*) AS n FROM requests")["n"][0] == 7
