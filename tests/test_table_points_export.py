"""Issue 38: any table of requests in (``ingest table``), measured points in as exported
(``ingest points``, ``cost-at-interactivity``), a tier replay's timeline out (``export
perfetto``) and a whole store out (``export store``).

The samples under tests/data/ are hand-written (not real measurements); the figures asserted
here are worked out by hand in the comments. The tier replay whose timeline is exported runs
on the first 400 requests of the bundled real Mooncake trace.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
from pathlib import Path

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.cost.interpolate import MeasurementError, read_measurements
from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file
from toolkit.ingest.points import read_measured_points
from toolkit.serving.points import bundled_points_path

from .conftest import MOONCAKE, snapshot

DATA = Path(__file__).resolve().parent / "data"
CSV = DATA / "table_sample.csv"
JSONL = DATA / "table_sample.jsonl"
IX_JSON = DATA / "inferencex_points_sample.json"
SGLANG = DATA / "sglang_bench_sample.jsonl"
VLLM = DATA / "vllm_bench_sample.json"
CSV_OPTS = dict(time_col="send_ms", time_unit="ms", input_tokens_col="prompt_tokens",
                output_tokens_col="completion_tokens", hash_col="block_ids", block_tokens=16,
                session_col="user", partial_block="either")
runner = CliRunner()


def rows(store, name: str) -> list[tuple]:
    t = store.read("requests", name)
    return list(zip(*(t.column(c).to_pylist() for c in (
        "request_id", "arrival_s", "input_tokens", "output_tokens", "block_tokens",
        "block_hashes", "session_id", "turn")), strict=True))


def refused(store, fmt, path, line, field, msg, **options) -> str:
    before = snapshot(store.root)
    with pytest.raises(TraceFormatError) as err:
        ingest_file(store, fmt, path, "bad", **options)
    text = str(err.value)
    assert (err.value.line, err.value.field) == (line, field), text
    assert msg in text and str(path) in text and "\n" not in text, text
    assert snapshot(store.root) == before
    return text


def cli(*args: str) -> str:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    return res.output


class TestIngestTable:
    def test_csv_sample(self, store):
        """ms times made relative (1250.5 - 1000 ms = 0.2505 s), space-separated and JSON-array
        ids, an empty cell (15 tokens: floor 0 ids), string users numbered by first
        appearance (alice 0, bob 1, carol 2) with turns counted per user."""
        res = ingest_file(store, "table", CSV, "t", **CSV_OPTS)
        assert res.rows == 5 and any("region" in n for n in res.notes)
        assert rows(store, "t") == [
            (0, 0.0, 40, 8, 16, [10, 11, 12], 0, 0),
            (1, 0.2505, 35, 0, 16, [10, 11, 13], 1, 0),
            (2, 0.2505, 16, 4, 16, [10], 0, 1),
            (3, 1.0, 15, 3, 16, [], 2, 0),
            (4, 1.6, 48, 5, 16, [10, 11, 13], 1, 1),
        ]

    def test_jsonl_hex_full_blocks(self, store):
        """Hex ids renumbered by value (9f86..., 9F86... and 0x9f86... are one id, 0), full
        16-token blocks only (47 tokens -> 2 ids, 64 -> 4), integer sessions kept."""
        res = ingest_file(store, "table", JSONL, "j", time_col="t", input_tokens_col="isl",
                          output_tokens_col="osl", hash_col="blocks", block_tokens=16,
                          hash_encoding="hex", session_col="session", partial_block="unhashed")
        assert res.rows == 4
        assert rows(store, "j") == [
            (0, 0.0, 40, 9, 16, [0, 1], 7, 0),
            (1, 0.25, 47, 2, 16, [0, 1], 7, 1),
            (2, 0.5, 15, 1, 16, [], 8, 0),
            (3, 0.5, 64, 12, 16, [0, 2, 3, 4], 7, 2),
        ]

    def test_parquet_matches_csv(self, store, tmp_path):
        """The same table as Parquet (list<int64> ids, a string column of users) stores the
        same timeline as the CSV (differential: two parsers, one answer)."""
        df = pl.read_csv(CSV)
        ids = [json.loads(x) if x and x.startswith("[") else [int(v) for v in (x or "").split()]
               for x in df["block_ids"].to_list()]
        table = pa.table({"send_ms": df["send_ms"].to_list(),
                          "prompt_tokens": df["prompt_tokens"].to_list(),
                          "completion_tokens": df["completion_tokens"].to_list(),
                          "user": df["user"].to_list(),
                          "block_ids": pa.array(ids, pa.list_(pa.int64()))})
        path = tmp_path / "t.parquet"
        pq.write_table(table, path)
        ingest_file(store, "table", CSV, "c", **CSV_OPTS)
        ingest_file(store, "table", path, "p", **CSV_OPTS)
        assert rows(store, "p") == rows(store, "c")

    def test_same_as_mooncake_on_the_real_trace(self, store):
        """Differential: the bundled Mooncake trace (12,031 requests) read by ``table`` with
        its column names equals what the dedicated ``mooncake`` reader stores."""
        ingest_file(store, "mooncake", MOONCAKE, "m")
        ingest_file(store, "table", MOONCAKE, "t", time_col="timestamp", time_unit="ms",
                    input_tokens_col="input_length", output_tokens_col="output_length",
                    hash_col="hash_ids", block_tokens=512)
        a, b = store.read("requests", "m"), store.read("requests", "t")
        assert a.num_rows == 12_031
        assert a.drop(["trace"]).equals(b.drop(["trace"]))

    def test_refusals(self, store, tmp_path):
        """File, line (Parquet: row) and column in every refusal; the store is unchanged."""
        bad = tmp_path / "bad.csv"
        bad.write_text("t,i,o\n1,5,1\n0.5,5,1\n")
        refused(store, "table", bad, 3, "t", "earlier than 1", time_col="t",
                input_tokens_col="i", output_tokens_col="o")
        refused(store, "table", bad, 1, "x", "missing column", time_col="x",
                input_tokens_col="i", output_tokens_col="o")
        bad.write_text("t,i,o\n1,five,1\n")
        refused(store, "table", bad, 2, "i", "non-negative integer", time_col="t",
                input_tokens_col="i", output_tokens_col="o")
        bad.write_text("t,i,o,h\n0,40,1,1 2\n")
        text = refused(store, "table", bad, 2, "h", "2 block ids for input_tokens 40, expected 3",
                       time_col="t", input_tokens_col="i", output_tokens_col="o", hash_col="h",
                       block_tokens=16)
        assert "--partial-block unhashed" in text
        bad.write_text("t,i,o,h\n0,40,1,ab cd ef\n")
        text = refused(store, "table", bad, 2, "h[0]", "expected an int64 block id",
                       time_col="t", input_tokens_col="i", output_tokens_col="o", hash_col="h",
                       block_tokens=16)
        assert "--hash-encoding hex" in text
        p = tmp_path / "bad.parquet"
        pq.write_table(pa.table({"t": [0.0, 1.0], "i": [5, -1], "o": [1, 1]}), p)
        text = refused(store, "table", p, 2, "i", "must be >= 0", time_col="t",
                       input_tokens_col="i", output_tokens_col="o")
        assert "(row 2)" in text


def _mooncake_like(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _follow(message: str, path: Path, store: Path, reader: str) -> str:
    """Run the command a refusal names (between backticks; bare flags are for the same
    reader) and return its output."""
    cmd = re.search(r"`(toolkit ingest [^`]+)`", message)
    flags = re.search(r"pass `(--[^`]+)`", message)
    assert cmd or flags, message
    args = shlex.split(cmd.group(1))[1:] if cmd else \
        ["ingest", reader, str(path), *shlex.split(flags.group(1))]
    if str(path) not in args:
        args.insert(2, str(path))
    return cli(*args, "--store", store, "--name", "followed", "--replace")


class TestNearMisses:
    """Each near-miss file of the issue: the refusal names flags that load it, and following
    the hint loads it (no circle mooncake -> bailian -> mooncake)."""

    def test_16_token_blocks_in_seconds(self, tmp_path):
        path = _mooncake_like(tmp_path / "sec16.jsonl", [
            {"timestamp": 0.5, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]},
            {"timestamp": 1.25, "input_length": 33, "output_length": 7,
             "hash_ids": [1, 2, 4]}])
        store = tmp_path / "s"
        for reader in ("mooncake", "bailian"):
            res = runner.invoke(app, ["ingest", reader, str(path), "--store", str(store)])
            assert res.exit_code == 2
            assert "--block-tokens 16" in res.output and "--time-unit s" in res.output
            out = _follow(res.output, path, store, reader)
            assert "ingested 2 rows" in out
        assert "mooncake" in res.output  # bailian names the reader that loads it

    def test_full_block_hashes(self, tmp_path):
        """vLLM-style floor(n / 16) ids: 1990 tokens, 124 ids (ceil would be 125)."""
        path = _mooncake_like(tmp_path / "floor.jsonl", [
            {"timestamp": 0, "input_length": 1990, "output_length": 5,
             "hash_ids": list(range(124))},
            {"timestamp": 10, "input_length": 1000, "output_length": 7,
             "hash_ids": list(range(62))}])
        store = tmp_path / "s"
        for extra in ([], ["--block-tokens", "16"]):
            res = runner.invoke(app, ["ingest", "mooncake", str(path), "--store", str(store),
                                      *extra])
            assert res.exit_code == 2 and "124 block ids" in res.output
            assert "--partial-block unhashed" in res.output and "--block-tokens 16" in res.output
            assert "ingested 2 rows" in _follow(res.output, path, store, "mooncake")

    def test_hex_ids(self, tmp_path):
        path = _mooncake_like(tmp_path / "hex.jsonl", [
            {"timestamp": 0, "input_length": 1000, "output_length": 5,
             "hash_ids": ["a3f0", "ff01"]},
            {"timestamp": 10, "input_length": 600, "output_length": 7,
             "hash_ids": ["A3F0", "0b"]}])
        store = tmp_path / "s"
        for reader in ("mooncake", "bailian"):
            res = runner.invoke(app, ["ingest", reader, str(path), "--store", str(store)])
            assert res.exit_code == 2 and "--hash-encoding hex" in res.output, res.output
            assert "ingested 2 rows" in _follow(res.output, path, store, reader)
        with __import__("toolkit").open_store(store) as s:
            assert s.read("requests", "followed").column("block_hashes").to_pylist() == \
                [[0, 1], [0, 2]]


class TestMeasuredPoints:
    def test_bundled_inferencex_as_is(self):
        """The bundled InferenceX CSV reads as exported: values equal a plain CSV read."""
        df = read_measured_points(bundled_points_path())
        raw = pl.read_csv(bundled_points_path())
        assert df.height == raw.height == 300
        for c in ("tput_per_gpu", "median_intvty", "p90_ttft", "conc"):
            assert df[c].to_list() == raw[c].to_list()
        assert df["source_format"].unique().to_list() == ["inferencex"]

    def test_inferencex_json_nested_metrics(self):
        df = read_measured_points(IX_JSON)
        assert df["conc"].to_list() == [4, 16, 64]
        assert df["tput_per_gpu"].to_list() == [100.0, 300.0, 700.0]
        assert df["p90_ttft"].to_list() == [0.4, 0.9, 2.5]
        assert df["p99_ttft"].null_count() == 3 and df["disagg"].to_list() == [False] * 3

    def test_sglang_bench(self, store):
        """Line 1: (2048 + 512) tok/s / 2 GPUs = 1280 tok/s/GPU; 1000 / 16 ms = 62.5 tok/s/user;
        ISL = 102400 / 100 requests. Line 2 has per-request lists: p90 TTFT from them
        (numpy percentile of 0.05, 0.09, 0.04, 0.06 = 0.081 s) and a 4-request timeline."""
        res = ingest_file(store, "points", SGLANG, "sg", gpus=2, hardware="h200")
        df = pl.from_arrow(store.read("measured_points", "sg"))
        assert df["tput_per_gpu"].to_list() == [1280.0, 7.5]
        assert df["output_tput_per_gpu"].to_list() == [256.0, 2.5]
        assert df["median_intvty"].to_list() == [62.5, 40.0]
        assert df["median_ttft"].to_list() == [0.15, 0.05]
        assert df["p90_ttft"][1] == pytest.approx(0.081)
        assert df["isl"].to_list() == [1024, 10] and df["conc"].to_list() == [8, 2]
        assert df["hardware"].to_list() == ["h200"] * 2 and df["framework"][1] == "sglang"
        assert any("arrival_s is 0" in n for n in res.notes)
        assert rows(store, "sg") == [(i, 0.0, n, m, None, [], None, None) for i, n, m in
                                     ((0, 12, 5), (1, 8, 5), (2, 10, 4), (3, 10, 6))]

    def test_vllm_bench(self, store):
        """165 tok/s on 1 GPU; 1000 / 50 ms = 20 tok/s/user; requests sorted by start_times
        (1000.0, 1000.25, 1000.5: request 1 first) and kept under their file positions."""
        ingest_file(store, "points", VLLM, "vl", gpus=1, hardware="h200")
        df = pl.from_arrow(store.read("measured_points", "vl"))
        assert df.select("tput_per_gpu", "input_tput_per_gpu", "median_intvty", "model",
                         "framework", "isl", "osl").row(0) == (
            165.0, 150.0, 20.0, "deepseek-ai/DeepSeek-R1", "vllm", 100, 10)
        assert rows(store, "vl") == [(1, 0.0, 120, 12, None, [], None, None),
                                     (0, 0.25, 100, 10, None, [], None, None),
                                     (2, 0.5, 80, 8, None, [], None, None)]

    def test_bench_needs_gpus(self, store):
        refused(store, "points", VLLM, 1, None, "pass --gpus N")

    def test_bad_value_named(self, store, tmp_path):
        bad = tmp_path / "p.csv"
        bad.write_text("hardware,framework,conc,tput_per_gpu,median_intvty\nb200,trt,4,x,9\n")
        refused(store, "points", bad, 1, "tput_per_gpu", "'x' is not a finite number")


class TestCostAtInteractivity:
    def test_bundled_file_as_is(self):
        """The bundled InferenceX file, unchanged, equals the renamed layout it used to need."""
        raw = pl.read_csv(bundled_points_path()).rename({
            "framework": "engine", "conc": "concurrency",
            "median_intvty": "median_interactivity", "p90_ttft": "p90_ttft_s"})
        assert read_measurements(bundled_points_path()).equals(read_measurements(raw))
        out = cli("cost-at-interactivity", "--measurements", bundled_points_path(),
                  "--interactivity", "100", "--format", "csv")
        assert out.splitlines()[0].startswith("hardware,engine,model,precision,isl,osl,n_points")

    def test_stored_measured_points(self, tmp_path):
        """Steffen through the sample's front (30, 700), (60, 300), (80, 100): at 60 the
        measured 300 tok/s/GPU itself."""
        store = tmp_path / "s"
        cli("ingest", "points", IX_JSON, "--store", store, "--name", "ix")
        out = cli("cost-at-interactivity", "--store", store, "--measured-points", "ix",
                  "--interactivity", "60", "--json")
        (row,) = json.loads(out)
        assert (row["hardware"], row["engine"], row["n_points"]) == ("b200", "sglang", 3)
        assert row["tput_per_gpu"] == pytest.approx(300.0)

    def test_bench_without_hardware_refused(self):
        with pytest.raises(MeasurementError, match="pass --gpus"):
            read_measurements(SGLANG)


# -- Perfetto ---------------------------------------------------------------------------
PHASES = {"X", "B", "E", "b", "e", "n", "C", "M", "i", "I"}


def check_trace_event_format(trace: dict) -> None:
    """The Trace Event Format (the Chrome/Perfetto JSON spec) as a schema: the object form
    with ``traceEvents``; every event has ``name``, ``ph``, integer ``pid``/``tid`` and a
    microsecond ``ts`` (metadata excepted); ``X`` has ``dur`` >= 0; ``b``/``e`` pairs share
    ``cat``, ``id`` and ``name`` with ``e`` not before ``b``; ``C`` args are numbers; ``M``
    names a process or thread; and complete slices on one thread nest or are disjoint (what
    Perfetto's JSON importer requires to keep them)."""
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit") in (None, "ms", "ns")
    open_async: dict[tuple, float] = {}
    per_thread: dict[tuple, list[tuple[float, float]]] = {}
    for e in trace["traceEvents"]:
        assert e["ph"] in PHASES and isinstance(e["name"], str) and e["name"], e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index",
                                 "thread_sort_index") and isinstance(e["args"]["name"], str)
            continue
        assert isinstance(e["ts"], int | float) and np.isfinite(e["ts"]) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert isinstance(e["dur"], int | float) and e["dur"] >= 0, e
            per_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
        elif e["ph"] in ("b", "e"):
            key = (e["cat"], e["id"], e["name"])
            assert isinstance(e["cat"], str) and isinstance(e["id"], str | int)
            if e["ph"] == "b":
                assert key not in open_async, e
                open_async[key] = e["ts"]
            else:
                assert e["ts"] >= open_async.pop(key), e
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, int | float) for v in e["args"].values())
    assert not open_async, "async slices without an end"
    for spans in per_thread.values():
        spans.sort()
        stack: list[float] = []
        for t0, t1 in spans:
            while stack and stack[-1] <= t0 + 1e-6:
                stack.pop()
            assert not stack or t1 <= stack[-1] + 1e-6, "overlapping slices on one thread"
            stack.append(t1)


@pytest.fixture(scope="module")
def tier_run(tmp_path_factory):
    """A tier replay of the first 400 real Mooncake requests with host and SSD hits
    (4,000-token device pool, host 4x, unbounded storage, write-back, 8 users)."""
    import toolkit
    from toolkit.cost.from_replay import run_tiers
    from toolkit.replay.tiers import TierReplayConfig

    root = tmp_path_factory.mktemp("perfetto")
    head = root / "c400.jsonl"
    with open(MOONCAKE) as f:
        head.write_text("".join(next(f) for _ in range(400)))
    store = toolkit.open_store(root / "store", create=True)
    ingest_file(store, "mooncake", head, "c400")
    cfg = TierReplayConfig("c400", concurrency=8, device_tokens=4000, host_ratio=4,
                           storage_tokens=-1, write_policy="write_back")
    result = run_tiers(store, cfg)
    yield store, result.summary["run_id"]
    store.close()


class TestExportPerfetto:
    def test_matches_the_run(self, tier_run, tmp_path):
        """Slice counts and durations equal the run's tables: one prefill per request, one
        decode per request that decodes, queue = admit - arrival, host and SSD loads where
        the run has host and storage hits, and per request queue + prefill wait + SSD load +
        prefill = first token - arrival."""
        store, run_id = tier_run
        out = cli("export", "perfetto", "--store", store.root, "--run", run_id, "--out",
                  tmp_path / "t.json.gz")
        assert "wrote" in out
        trace = json.loads(gzip.decompress((tmp_path / "t.json.gz").read_bytes()))
        check_trace_event_format(trace)
        assert trace["otherData"]["phases"].startswith("rebuilt")
        req = {r["request_id"]: r for r in store.read("tier_requests", run_id).to_pylist()}
        spans: dict[str, dict[int, float]] = {}
        begin: dict[tuple, float] = {}
        for e in trace["traceEvents"]:
            if e["ph"] == "X":
                spans.setdefault(e["name"], {})[e["args"]["request_id"]] = e["dur"] / 1e6
            elif e["ph"] == "b":
                begin[(e["name"], e["id"])] = e["ts"]
            elif e["ph"] == "e":
                dur = (e["ts"] - begin[(e["name"], e["id"])]) / 1e6
                spans.setdefault(e["name"], {})[int(e["id"], 16)] = dur
        assert len(spans["prefill"]) == len(req) == 400
        assert len(spans["host load"]) == sum(r["host_tokens"] > 0 for r in req.values()) == 2
        assert len(spans["SSD load"]) == sum(r["storage_tokens"] > 0 for r in req.values()) == 4
        want = {"decode": {i: r["finish_s"] - r["first_token_s"] for i, r in req.items()},
                "queue": {i: r["admit_s"] - r["arrival_s"] for i, r in req.items()}}
        for name, durations in want.items():
            assert spans[name].keys() == {i for i, d in durations.items() if d > 0}
            for i, d in spans[name].items():
                assert d == pytest.approx(durations[i], abs=1e-6)
        for rid, r in req.items():
            total = sum(spans.get(k, {}).get(rid, 0.0)
                        for k in ("queue", "prefill wait", "SSD load", "prefill"))
            assert total == pytest.approx(r["first_token_s"] - r["arrival_s"], abs=1e-6)
            assert spans.get("host load", {}).get(rid, 0.0) <= spans["prefill"][rid] + 1e-9
        counters = [e for e in trace["traceEvents"] if e["ph"] == "C"
                    and e["name"] == "running requests"]
        assert max(c["args"]["value"] for c in counters) <= 8  # 8 closed-loop users
        assert counters[-1]["args"]["value"] == 0

    def test_unknown_run(self, tier_run, tmp_path):
        store, _ = tier_run
        res = runner.invoke(app, ["export", "perfetto", "--store", str(store.root), "--run",
                                  "nope", "--out", str(tmp_path / "t.json")])
        assert res.exit_code == 2 and "no tier replay 'nope'" in res.output
        assert not (tmp_path / "t.json").exists()

    def test_trace_processor(self, tier_run, tmp_path):
        """Perfetto's own trace processor reads the file with the same slice counts. Its
        Python package downloads the ``trace_processor_shell`` binary at first use, which
        needs a network this suite may not have: point TOOLKIT_TRACE_PROCESSOR_SHELL at the
        binary to run this check (the schema check above runs everywhere)."""
        tp_api = pytest.importorskip("perfetto.trace_processor")
        shell = os.environ.get("TOOLKIT_TRACE_PROCESSOR_SHELL")
        if not shell:
            pytest.skip("no trace_processor_shell (set TOOLKIT_TRACE_PROCESSOR_SHELL)")
        store, run_id = tier_run
        path = tmp_path / "t.json"
        cli("export", "perfetto", "--store", store.root, "--run", run_id, "--out", path)
        trace = json.loads(path.read_text())
        want: dict[str, int] = {}
        for e in trace["traceEvents"]:
            if e["ph"] in ("X", "b"):
                want[e["name"]] = want.get(e["name"], 0) + 1
        config = tp_api.TraceProcessorConfig(bin_path=shell)
        with tp_api.TraceProcessor(trace=str(path), config=config) as tp:
            got = {r.name: r.n for r in tp.query(
                "select name, count(*) as n from slice group by name")}
        assert got == want


class TestExportStore:
    def test_every_table_with_readme(self, tier_run, tmp_path):
        store, run_id = tier_run
        out = tmp_path / "dump"
        cli("export", "store", "--store", store.root, "--out", out)
        files = sorted(p.name for p in out.glob("*.parquet"))
        from toolkit import schema

        assert files == sorted(f"{t}.parquet" for t in schema.TABLES)
        con = duckdb.connect()
        n = con.sql(f"SELECT count(*) FROM '{out / 'tier_requests.parquet'}'").fetchall()[0][0]
        assert n == 400
        assert pq.read_schema(out / "requests.parquet").equals(schema.REQUESTS)
        readme = (out / "README.md").read_text()
        assert "## tier_requests" in readme and "## measured_points" in readme
        assert "| `arrival_s` | double | no | seconds | seconds since the trace start |" in readme
        res = runner.invoke(app, ["export", "store", "--store", str(store.root), "--out",
                                  str(out)])
        assert res.exit_code == 2 and "--replace" in res.output
