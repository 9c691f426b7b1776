"""Damaged stores and SQL that would write (issue 34, points 4 and 8): every case names
the file or statement in one line, and the store's other tables keep working.

``STORE_CASES`` and ``SQL_CASES`` are the lists the "Bad input and damaged stores" table
of ``docs/formats.md`` shows; ``test_docs_list_every_case`` keeps the two the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from typer.testing import CliRunner

import toolkit
from toolkit import sweep
from toolkit.cli import app
from toolkit.errors import StoreError
from toolkit.ingest import ingest_file
from toolkit.store import COMPACT_DIR, DAMAGED_DIR, MANIFEST_FILE, WriteRefused
from toolkit.sweep import parse_grid

from .conftest import MOONCAKE

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def rows(table: str, key: str, n: int = 1, **values: object) -> pa.Table:
    """``n`` rows of ``table`` for ``key`` (run_id), every required column filled."""
    sch = toolkit.schema.TABLES[table]

    def blank(f: pa.Field) -> object:
        if f.nullable:
            return None
        t = f.type
        return ("x" if pa.types.is_string(t) else [] if pa.types.is_list(t)
                else False if pa.types.is_boolean(t) else 0)

    row = {f.name: blank(f) for f in sch}
    row.update(values)
    if "run_id" in row:
        row["run_id"] = key
    return pa.Table.from_pylist([row] * n, schema=sch)


def build(root: Path, keys: int = 6, n: int = 3) -> toolkit.Store:
    """A store with compacted ``replay_runs`` and ``tier_runs`` (``keys`` runs of ``n``
    rows each) and two uncompacted ``decode_costs`` files."""
    s = toolkit.open_store(root, create=True)
    for i in range(keys):
        s.write("replay_runs", f"r{i}", rows("replay_runs", f"r{i}", n, block_hits=i))
        s.write("tier_runs", f"t{i}", rows("tier_runs", f"t{i}", n))
    for k in ("c0", "c1"):
        s.write("decode_costs", k, rows("decode_costs", k))
    s.compact()
    return s


def count(s: toolkit.Store, table: str) -> int:
    return s.query(f"SELECT count(*) AS n FROM {table}")["n"][0]


def the_part(s: toolkit.Store, table: str = "replay_runs") -> Path:
    (part,) = json.loads((s.root / table / COMPACT_DIR / MANIFEST_FILE).read_text())["parts"]
    return s.root / table / part


def others_work(s: toolkit.Store, damaged: str = "replay_runs") -> None:
    """The tables the damage does not cover answer as before."""
    assert count(s, "tier_runs") == 18
    assert s.keys("tier_runs") == [f"t{i}" for i in range(6)]
    assert s.read("tier_runs", "t3").num_rows == 3
    if damaged != "decode_costs":
        assert count(s, "decode_costs") == 2
    else:
        assert count(s, "replay_runs") == 18 and len(s.keys("replay_runs")) == 6


def one_line(text: str) -> bool:
    return text.strip().count("\n") == 0 and bool(text.strip())


# -- damaged stores -----------------------------------------------------------------------
STORE_CASES = {
    "manifest-garbage": "`manifest.json` holds bytes that are not JSON",
    "manifest-empty": "`manifest.json` is empty",
    "manifest-shape": "`manifest.json` is JSON but names a part outside the store "
                      "(`../../etc/passwd`)",
    "part-missing": "a compacted part is deleted",
    "part-truncated": "a compacted part is cut short",
    "part-orphan": "a part that no manifest lists (a stray copy): its rows would show twice",
    "key-file-garbage": "a key file of an uncompacted table is not Parquet",
    "run-file-garbage": "a run file that is not Parquet, met by `store compact`",
    "catalog-garbage": "`catalog.duckdb` holds garbage",
}

DAMAGE = {
    "manifest-garbage": lambda s: (s.root / "replay_runs" / COMPACT_DIR / MANIFEST_FILE
                                   ).write_bytes(b"{\x00 not json"),
    "manifest-empty": lambda s: (s.root / "replay_runs" / COMPACT_DIR / MANIFEST_FILE
                                 ).write_bytes(b""),
    "manifest-shape": lambda s: (s.root / "replay_runs" / COMPACT_DIR / MANIFEST_FILE
                                 ).write_text(json.dumps(
                                     {"parts": {"../../etc/passwd": [["r0", 0, 3]]}})),
    "part-missing": lambda s: the_part(s).unlink(),
    "part-truncated": lambda s: the_part(s).write_bytes(the_part(s).read_bytes()[:-100]),
}


class TestDamagedManifest:
    @pytest.mark.parametrize("case", ["manifest-garbage", "manifest-empty", "manifest-shape"])
    def test_named_others_work_writes_refused_repair_rebuilds(self, tmp_path, case):
        """A damaged manifest: the store opens, every other table answers, the table's
        keys are noted by the manifest's path, a write into it is refused naming the
        file, and repair rebuilds the manifest from the parts' footers (nothing lost)."""
        build(tmp_path / "s").close()
        with toolkit.open_store(tmp_path / "s") as s:
            DAMAGE[case](s)
        manifest = str(tmp_path / "s" / "replay_runs" / COMPACT_DIR / MANIFEST_FILE)
        with toolkit.open_store(tmp_path / "s") as s:
            others_work(s)
            assert s.keys("replay_runs") == []
            assert any(p.startswith(f"{manifest}: damaged manifest") for p in s.problems)
            with pytest.raises(StoreError, match=re.escape(manifest)) as e:
                s.write("replay_runs", "r9", rows("replay_runs", "r9"))
            assert one_line(str(e.value)) and "toolkit store repair" in str(e.value)
            (finding,) = s.check()
            assert str(finding.path) == manifest and one_line(str(finding))
            fixed = s.repair()
            assert [str(f.path) for f in fixed] == [manifest]
            assert s.check() == []
            assert s.keys("replay_runs") == [f"r{i}" for i in range(6)]
            assert count(s, "replay_runs") == 18
            assert s.read("replay_runs", "r4")["block_hits"].to_pylist() == [4] * 3
            s.write("replay_runs", "r4", rows("replay_runs", "r4", 1), replace=True)
            assert count(s, "replay_runs") == 16
            others_work(s)


class TestDamagedPart:
    @pytest.mark.parametrize("case", ["part-missing", "part-truncated"])
    def test_keys_left_out_rewrite_and_compact_go_on(self, tmp_path, case):
        """A lost part: its keys are left out (noted by the part's path), the other
        tables answer, a replacement of one of its keys succeeds (the part is dropped
        from the manifest, a truncated one moved to .damaged/), and compaction works."""
        build(tmp_path / "s").close()
        with toolkit.open_store(tmp_path / "s") as s:
            part = the_part(s)
            DAMAGE[case](s)
        with toolkit.open_store(tmp_path / "s") as s:
            others_work(s)
            assert s.keys("replay_runs") == []
            assert any(p.startswith(f"{part}: compacted part") for p in s.problems)
            with pytest.raises(StoreError, match=re.escape(str(part))) as e:
                s.read("replay_runs", "r1")
            assert one_line(str(e.value))
            (finding,) = s.check()
            assert finding.path == part and one_line(str(finding))
            s.write("replay_runs", "r1", rows("replay_runs", "r1", 2), replace=True)
            assert s.keys("replay_runs") == ["r1"] and count(s, "replay_runs") == 2
            assert s.check() == []
            assert s.compact()["replay_runs"] == 1
            assert s.keys("replay_runs") == ["r1"] and count(s, "replay_runs") == 2
            damaged = list((s.root / DAMAGED_DIR).rglob("*.parquet"))
            assert len(damaged) == (case == "part-truncated")
            others_work(s)

    @pytest.mark.parametrize("case", ["part-missing", "part-truncated"])
    def test_repair_and_compact_rebuild_from_what_remains(self, tmp_path, case):
        """repair (or compact, which repairs first) drops the lost part and keeps every
        file and part that reads; a dry run changes nothing."""
        with build(tmp_path / "s") as s:
            s.write("replay_runs", "new", rows("replay_runs", "new", 5))
            DAMAGE[case](s)
        from .conftest import snapshot

        with toolkit.open_store(tmp_path / "s") as s:
            before = snapshot(s.root)
            assert [f.path for f in s.repair(dry_run=True)] == [the_part(s)]
            assert snapshot(s.root) == before
            assert s.compact()["replay_runs"] == 1
            assert s.check() == []
            assert s.keys("replay_runs") == ["new"] and count(s, "replay_runs") == 5
            assert any("compacted part" in p for p in s.problems)
            others_work(s)

    def test_orphan_part_is_adopted_or_dropped(self, tmp_path):
        """A copy of a part that no manifest lists doubles its rows in queries: check
        names it; repair drops the keys it shares with the listed part (one copy left)."""
        with build(tmp_path / "s") as s:
            part = the_part(s)
            stray = part.with_name("part-0123456789ab.parquet")
            stray.write_bytes(part.read_bytes())
        with toolkit.open_store(tmp_path / "s") as s:
            assert count(s, "replay_runs") == 36
            found = s.check()
            assert stray in {f.path for f in found} <= {part, stray}
            assert any("twice" in f.problem for f in found)
            assert all(one_line(str(f)) for f in found)
            s.repair()
            assert count(s, "replay_runs") == 18 and s.check() == []
            assert s.keys("replay_runs") == [f"r{i}" for i in range(6)]
            others_work(s)


class TestOtherDamage:
    def test_garbage_key_file_is_named_and_moved_aside(self, tmp_path):
        with build(tmp_path / "s") as s:
            bad = s.root / "decode_costs" / "c1.parquet"
            bad.write_bytes(b"PAR1 garbage")
        with toolkit.open_store(tmp_path / "s") as s:
            assert count(s, "decode_costs") == 1
            (finding,) = s.check()
            assert finding.path == bad and one_line(str(finding))
            s.repair()
            assert not bad.exists() and s.check() == []
            assert len(list((s.root / DAMAGED_DIR / "decode_costs").iterdir())) == 1
            others_work(s, damaged="decode_costs")

    def test_compaction_moves_a_garbage_run_file_aside(self, tmp_path):
        """A run file that does not read no longer stops compaction for good: it is
        moved to .damaged/ (noted by name) and the rest is merged."""
        with build(tmp_path / "s") as s:
            s.write("replay_runs", "new", rows("replay_runs", "new", 2))
            bad = s.root / "replay_runs" / "bad.parquet"
            bad.write_bytes(b"PAR1 garbage")
        with toolkit.open_store(tmp_path / "s") as s:
            assert s.compact()["replay_runs"] == 1
            assert any(p.startswith(f"{bad}: unreadable") for p in s.problems)
            assert not bad.exists() and s.check() == []
            assert count(s, "replay_runs") == 20
            others_work(s)

    def test_garbage_catalog_is_rebuilt(self, tmp_path):
        """The catalog is a cache of views: garbage in it is noted by name and rebuilt."""
        build(tmp_path / "s").close()
        cat = tmp_path / "s" / "catalog.duckdb"
        cat.write_bytes(b"garbage" * 100)
        with toolkit.open_store(tmp_path / "s") as s:
            assert any(p.startswith(f"{cat}: ") for p in s.problems)
            others_work(s)
        with duckdb.connect(str(cat), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM tier_runs").fetchall() == [(18,)]
        assert not list((tmp_path / "s").glob(".catalog*"))


class TestFlatCompaction:
    def test_replacing_again_and_again_stays_flat(self, tmp_path, monkeypatch):
        """Each replacement of a compacted key rewrites its part once, in the same
        partition directory, reading that part once."""
        from toolkit.store import parts

        opened = []
        real = parts.PartReader.__init__

        def counting(self, path):
            opened.append(path)
            real(self, path)

        monkeypatch.setattr(parts.PartReader, "__init__", counting)
        with build(tmp_path / "s", keys=40) as s:
            for i in range(25):
                opened.clear()
                s.write("replay_runs", "r7", rows("replay_runs", "r7", 1, block_hits=i),
                        replace=True)
                s.compact(["replay_runs"])
                assert len(opened) <= 2  # the expel, then compaction's merge
            files = [p.relative_to(s.root / "replay_runs")
                     for p in (s.root / "replay_runs").rglob("*.parquet")]
            assert [len(p.parts) for p in files] == [3]  # .compacted/<partition>/part
            assert count(s, "replay_runs") == 39 * 3 + 1
            assert s.read("replay_runs", "r7")["block_hits"].to_pylist() == [24]


class TestSweepReRunsLostCells:
    def test_cells_whose_part_is_gone_run_again(self, tmp_path):
        """A sweep skips cells whose results read, and runs again those whose compacted
        part was deleted: no silent holes in the grid."""
        grid = parse_grid('kind = "prefix"\ntrace = "conv"\n[axes]\n'
                          'policy = ["lru", "fifo"]\ncapacity_blocks = [100, 1000]')
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            ingest_file(s, "mooncake", MOONCAKE, "conv")
            assert sweep.run(s, grid, workers=1).ran == 4
            before = s.query("SELECT run_id, block_hits FROM replay_runs ORDER BY run_id")
            s.compact()
            assert sweep.run(s, grid, workers=1).skipped == 4
            the_part(s).unlink()
        with toolkit.open_store(tmp_path / "s") as s:
            res = sweep.run(s, grid, workers=1)
            assert (res.ran, res.skipped, res.failed) == (4, 0, 0)
            assert s.query("SELECT run_id, block_hits FROM replay_runs ORDER BY run_id"
                           ).equals(before)
            assert s.check() == []
            assert sweep.run(s, grid, workers=1).skipped == 4


class TestSnapshotAcrossCompaction:
    def test_open_store_never_sees_a_dead_compaction_twice(self, tmp_path):
        """Another process dies inside a compaction's commit, after moving the parts in
        and before removing the files they merged: a store already open counts each row
        once (it completes that commit), without being reopened."""
        with toolkit.open_store(tmp_path / "s", create=True) as a:
            for i in range(12):
                a.write("replay_runs", f"r{i:02d}", rows("replay_runs", f"r{i:02d}", 30))
            assert count(a, "replay_runs") == 360
            child = textwrap.dedent(f"""
                import os
                import toolkit
                from toolkit.store import transaction
                real = transaction.apply_commit
                def apply(root, tx_dir, marker):
                    real(root, tx_dir, {{**marker, "deletes": []}})
                    os._exit(9)
                transaction.apply_commit = apply
                with toolkit.open_store({str(tmp_path / "s")!r}) as s:
                    s.compact(["replay_runs"])
                """)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            proc = subprocess.run([sys.executable, "-c", child], env=env, timeout=120)
            assert proc.returncode == 9
            assert len(list((a.root / "replay_runs").glob("*.parquet"))) == 12  # both there
            assert count(a, "replay_runs") == 360
            assert a.keys("replay_runs") == [f"r{i:02d}" for i in range(12)]
            assert list((a.root / "replay_runs").glob("*.parquet")) == []


class TestCli:
    def test_check_and_repair(self, tmp_path):
        """check: one line per damaged file, exit 1; repair --dry-run changes nothing;
        repair fixes; check then exits 0."""
        from .conftest import snapshot

        with build(tmp_path / "s") as s:
            part = the_part(s)
            DAMAGE["part-truncated"](s)
            (s.root / "decode_costs" / "c0.parquet").write_bytes(b"")
        store = str(tmp_path / "s")
        r = runner.invoke(app, ["store", "check", "--store", store])
        assert r.exit_code == 1, r.output
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 2
        assert any(ln.startswith(f"{part}: compacted part") for ln in lines)
        assert any(ln.startswith(f"{tmp_path / 's' / 'decode_costs' / 'c0.parquet'}: ")
                   for ln in lines)
        before = snapshot(tmp_path / "s")
        r = runner.invoke(app, ["store", "repair", "--store", store, "--dry-run"])
        assert r.exit_code == 0 and r.stdout.count("would fix: ") == 2
        assert snapshot(tmp_path / "s") == before
        r = runner.invoke(app, ["store", "repair", "--store", store, "--json"])
        assert r.exit_code == 0 and {f["path"] for f in json.loads(r.stdout)} == {
            str(part), str(tmp_path / "s" / "decode_costs" / "c0.parquet")}
        r = runner.invoke(app, ["store", "check", "--store", store])
        assert r.exit_code == 0 and r.stdout.strip() == "ok: nothing damaged"
        r = runner.invoke(app, ["sql", "--store", store, "--format", "csv",
                                "SELECT count(*) AS n FROM tier_runs"])
        assert r.exit_code == 0 and r.stdout == "n\n18\n"


# -- SQL that would write ---------------------------------------------------------------
OUTSIDE = "/tmp/toolkit-sql-outside"
SQL_CASES = [  # (id, SQL, what the one-line error must name)
    ("copy-out", f"COPY (SELECT 1) TO '{OUTSIDE}/x.csv'", "COPY"),
    ("copy-in-store", "COPY (SELECT 1) TO '{store}/replay_runs/x.parquet'", "COPY"),
    ("copy-from", f"COPY tier_runs FROM '{OUTSIDE}/x.csv'", "COPY"),
    ("attach", f"ATTACH '{OUTSIDE}/db.duckdb' AS other", "ATTACH"),
    ("install", "INSTALL httpfs", "LOAD"),
    ("load", "LOAD httpfs", "LOAD"),
    ("export", f"EXPORT DATABASE '{OUTSIDE}/exp'", "EXPORT"),
    ("import", f"IMPORT DATABASE '{OUTSIDE}/exp'", f"{OUTSIDE}/exp"),
    ("set-access", "SET enable_external_access = true", "SET"),
    ("set-dirs", "SET allowed_directories = ['/']", "SET"),
    ("pragma-setting", "PRAGMA enable_profiling", "enable_profiling"),
    ("create", "CREATE TABLE t AS SELECT 1", "CREATE"),
    ("replace-view", "CREATE OR REPLACE VIEW tier_runs AS SELECT 1", "CREATE"),
    ("insert", "INSERT INTO tier_runs SELECT * FROM tier_runs", "INSERT"),
    ("read-csv", "SELECT * FROM read_csv('/etc/passwd')", "/etc/passwd"),
    ("read-parquet", f"SELECT * FROM read_parquet('{OUTSIDE}/y.parquet')",
     f"{OUTSIDE}/y.parquet"),
    ("read-json", "SELECT * FROM read_json('/etc/hostname')", "/etc/hostname"),
    ("read-text", "SELECT * FROM read_text('/etc/passwd')", "/etc/passwd"),
    ("glob", "SELECT * FROM glob('/etc/*')", "/etc/*"),
    ("bare-path", f"SELECT * FROM '{OUTSIDE}/y.parquet'", f"{OUTSIDE}/y.parquet"),
    ("dot-dot", "SELECT * FROM read_parquet('{store}/../y.parquet')", "../y.parquet"),
    ("second-statement", f"SELECT 1; COPY (SELECT 1) TO '{OUTSIDE}/x.csv'", "statement 2"),
]


@pytest.fixture(scope="module")
def sql_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql") / "s"
    build(root).close()
    os.makedirs(OUTSIDE, exist_ok=True)
    pa.parquet.write_table(pa.table({"a": [1]}), f"{OUTSIDE}/y.parquet")
    return root


class TestReadOnlySql:
    @pytest.mark.parametrize(("case", "sql", "named"), SQL_CASES, ids=[c[0] for c in SQL_CASES])
    def test_cli_refuses_without_allow_write(self, sql_store, case, sql, named):
        """Refused in one line naming the statement or the file, exit 2, nothing
        written; the store answers the next query."""
        sql = sql.replace("{store}", str(sql_store))
        r = runner.invoke(app, ["sql", "--store", str(sql_store), sql])
        assert r.exit_code == 2, r.output
        assert one_line(r.stderr) and named in r.stderr and "--allow-write" in r.stderr
        assert not Path(OUTSIDE, "x.csv").exists() and not Path(OUTSIDE, "exp").exists()
        assert not (sql_store / "replay_runs" / "x.parquet").exists()
        r = runner.invoke(app, ["sql", "--store", str(sql_store), "--format", "csv",
                                "SELECT count(*) AS n FROM tier_runs"])
        assert r.stdout == "n\n18\n"

    @pytest.mark.parametrize(("case", "sql", "named"), SQL_CASES, ids=[c[0] for c in SQL_CASES])
    def test_python_refuses_and_keeps_working(self, sql_store, case, sql, named):
        """``Workspace.sql`` (and ``Store.query``) refuse the same, with the same line."""
        with toolkit.open(sql_store) as ws:
            with pytest.raises(WriteRefused) as e:
                ws.sql(sql.replace("{store}", str(sql_store)))
            assert one_line(str(e.value)) and named in str(e.value)
            assert ws.sql("SELECT count(*) AS n FROM tier_runs")["n"][0] == 18
            assert ws.store.keys("replay_runs") == [f"r{i}" for i in range(6)]

    def test_reads_inside_the_store_and_allow_write(self, sql_store, tmp_path):
        """Queries, DESCRIBE/SUMMARIZE and files inside the store still read;
        --allow-write runs COPY; --output stays the way to export."""
        f = next((sql_store / "decode_costs").glob("*.parquet"))
        for ok in [f"SELECT count(*) FROM read_parquet('{f}')", "DESCRIBE tier_runs",
                   "SUMMARIZE tier_runs", "PRAGMA show_tables", "EXPLAIN SELECT 1"]:
            r = runner.invoke(app, ["sql", "--store", str(sql_store), ok])
            assert r.exit_code == 0, (ok, r.output)
        out = tmp_path / "x.csv"
        r = runner.invoke(app, ["sql", "--store", str(sql_store), "--allow-write",
                                f"COPY (SELECT count(*) AS n FROM tier_runs) TO '{out}'"])
        assert r.exit_code == 0, r.output
        assert out.read_text() == "n\n18\n"
        r = runner.invoke(app, ["sql", "--store", str(sql_store), "--allow-write", "--format",
                                "csv", f"SELECT * FROM read_csv('{out}')"])
        assert r.stdout == "n\n18\n"
        exported = tmp_path / "runs.parquet"
        r = runner.invoke(app, ["sql", "--store", str(sql_store), "--output", str(exported),
                                "SELECT * FROM tier_runs"])
        assert r.exit_code == 0 and pa.parquet.read_table(exported).num_rows == 18
        with toolkit.open(sql_store) as ws:
            assert ws.sql(f"SELECT * FROM read_csv('{out}')", allow_write=True)["n"][0] == 18


def test_docs_list_every_case():
    """The docs' cases-tried table lists exactly the cases these tests run."""
    text = (ROOT / "docs" / "formats.md").read_text()
    for ids in (STORE_CASES, [c[0] for c in SQL_CASES]):
        for case in ids:
            assert f"`{case}`" in text, case
    counts = re.search(r"(\d+) damaged-store cases and (\d+) SQL statements", text)
    assert counts and (int(counts[1]), int(counts[2])) == (len(STORE_CASES), len(SQL_CASES))
