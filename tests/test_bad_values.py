"""Issue 50, items 5-6 and 11-14: inputs that crashed, hung or landed are refused in one line
naming the file, row or flag, and nothing is written on a refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app

from .conftest import MOONCAKE, ROOT

runner = CliRunner()


def invoke(*args, **kw) -> tuple[int, str]:
    res = runner.invoke(app, [str(a) for a in args], **kw)
    return res.exit_code, res.output


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The first 50 Mooncake requests as ``t``."""
    from toolkit.ingest import ingest_file

    root = tmp_path_factory.mktemp("bad")
    head = root / "m.jsonl"
    with open(MOONCAKE) as f:
        head.write_text("".join(next(f) for _ in range(50)))
    with toolkit.open_store(root / "S", create=True) as s:
        ingest_file(s, "mooncake", head, "t")
    return root / "S"


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


SPECIAL = ["/dev/zero", "fifo"]


class TestNotARegularFile:
    """Item 5 (and 14's "/dev/zero reported as no such file"): every text reader stats its
    file first; a device or a FIFO is one line, not a MemoryError or a hang."""

    @pytest.mark.parametrize("which", SPECIAL)
    @pytest.mark.parametrize("cmd", [
        ["ingest", "mooncake", "{f}", "--store", "{s}", "--name", "x"],
        ["ingest", "selections", "{f}", "--format", "dsa-jsonl", "--store", "{s}"],
        ["ingest", "points", "{f}", "--store", "{s}"],
        ["cost", "compare", "--model", "glm-5.2", "--hardware", "gb200", "--measurements",
         "{f}"],
        ["cost", "compare", "--model", "glm-5.2", "--hardware", "gb200", "--params", "{f}"],
        ["cost-at-interactivity", "--measurements", "{f}", "--interactivity", "10"],
        ["serving", "fit", "--points", "{f}"],
        ["sweep", "--store", "{s}", "--grid", "{f}"],
        ["record", "engram", "--store", "{s}", "--name", "e", "--text", "{f}"],
    ])
    def test_refused_in_one_line(self, small, fifo, cmd, which):
        f = "/dev/zero" if which == "/dev/zero" else fifo
        before = files(small)
        code, out = invoke(*[a.format(f=f, s=small) for a in cmd])
        kind = "a device" if which == "/dev/zero" else "a FIFO"
        assert code == 2 and out.count("\n") == 1, out
        assert f"{f}: " in out and f"not a regular file ({kind})" in out, out
        assert files(small) == before

    def test_sql_from_a_device_on_stdin(self, small):
        """``toolkit sql -`` read standard input without bound: /dev/zero is refused; a
        pipe still works."""
        cmd = [sys.executable, "-m", "toolkit.cli", "sql", "--store", str(small), "-"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open("/dev/zero", "rb") as zero:
            res = subprocess.run(cmd, stdin=zero, capture_output=True, text=True, timeout=60,
                                 env=env)
        assert res.returncode == 2
        assert res.stderr == ("error: standard input: not a regular file (a device); pipe or "
                              "redirect a file of SQL\n")
        res = subprocess.run(cmd, input="SELECT 41 + 1 AS x", capture_output=True, text=True,
                             timeout=60, env=env)
        assert res.returncode == 0 and "42" in res.stdout


class TestHugeAndTinyNumbers:
    @pytest.mark.parametrize("args, flag", [
        (["replay", "tiers", "--trace", "t", "--device-tokens", str(2**63 - 1)],
         "--device-tokens"),
        (["replay", "tiers", "--trace", "t", "--page-tokens", str(2**63 - 1)], "--page-tokens"),
        (["replay", "tiers", "--trace", "t", "--concurrency", str(10**30)], "--concurrency"),
        (["synth", "agentic", "--name", "a", "--sessions", str(10**20)], "--sessions"),
    ])
    def test_huge_integer_names_the_flag(self, small, args, flag):
        """Item 6: ``--device-tokens 9223372036854775807`` ended in an OverflowError
        traceback; every integer option beyond 2^53 is one line naming it."""
        before = files(small)
        code, out = invoke(*args, "--store", small)
        assert code == 2 and out.startswith(f"error: {flag} ") and out.count("\n") == 1, out
        assert "at most 2^53" in out and files(small) == before

    def test_python_config_refuses_huge_counts(self):
        from toolkit.replay.tiers import TierReplayConfig

        with pytest.raises(ValueError, match=r"device_tokens must be <= 2\^53"):
            TierReplayConfig("t", device_tokens=2**63 - 1)
        TierReplayConfig("t", device_tokens=2**53)  # the bound itself is a valid size

    @pytest.mark.parametrize("f", ["1e-300", "inf", "nan", "1e7"])
    def test_arrivals_scale_is_bounded(self, small, f):
        """Item 12: ``--arrivals scaled:1e-300`` stored inf bytes and a 0 s TTFT."""
        before = files(small)
        code, out = invoke("replay", "tiers", "--store", small, "--trace", "t", "--arrivals",
                           f"scaled:{f}")
        assert code == 2 and "scaled:F needs 1e-06 <= F <= 1e+06" in out, out
        assert files(small) == before

    def test_sample_rate_below_the_minimum(self, small):
        """Item 12: ``--sample-rate 1e-9`` gave miss ratio 0 at every size, capacity 0
        included; below 1e-6 it is refused."""
        code, out = invoke("replay", "mrc", "--store", small, "--trace", "t", "--kind",
                           "prefix", "--sample-rate", "1e-9", "--sizes", "0,10")
        assert code == 2 and out == "error: --sample-rate must lie in [1e-06, 1], got 1e-09\n"
        code, out = invoke("replay", "mrc", "--store", small, "--trace", "t", "--kind",
                           "prefix", "--sample-rate", "1e-6", "--sizes", "0,10", "--json")
        import json

        assert code == 0 and json.loads(out)[0]["miss_ratio"] == 1.0  # capacity 0 misses all

    @pytest.mark.parametrize("sizes", ["-5", "3,-1", ","])
    def test_negative_sizes_are_refused(self, small, sizes):
        """Item 14: ``--sizes -5`` printed nothing and exited 0."""
        code, out = invoke("replay", "mrc", "--store", small, "--trace", "t", "--kind",
                           "prefix", "--sizes", sizes)
        assert code == 2 and out.startswith("error: --sizes must be integers in [0, 2^53]")

    def test_sizes_beyond_the_keys_repeat_the_flat_end(self, small):
        code, out = invoke("replay", "mrc", "--store", small, "--trace", "t", "--kind",
                           "prefix", "--sizes", "0,100000", "--json")
        import json

        rows = json.loads(out)
        assert code == 0 and [r["capacity"] for r in rows] == [0, 100000]
        assert rows[0]["miss_ratio"] == 1.0 and 0 < rows[1]["miss_ratio"] < 1


SGLANG_BENCH = ROOT / "tests" / "data" / "sglang_bench_sample.jsonl"


def bench_with(tmp_path: Path, **change) -> Path:
    """The sglang.bench_serving sample with its records' fields changed (None: removed)."""
    import json

    out = []
    for line in SGLANG_BENCH.read_text().splitlines():
        rec = json.loads(line)
        for k, v in change.items():
            if v is None:
                rec.pop(k, None)
            else:
                rec[k] = v
        out.append(json.dumps(rec))
    path = tmp_path / "bench.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


class TestBenchBackend:
    """Item 11: a TGI, Truss or missing backend was stored as sglang and --framework was
    ignored, so a TGI benchmark answered "measured" for SGLang."""

    @pytest.mark.parametrize("backend, why", [
        ("tgi", "'tgi' is not an engine the toolkit models"),
        ("truss", "'truss' is not an engine the toolkit models"),
        (None, "missing: the result does not name the engine it measured; pass --framework"),
    ])
    def test_refused_naming_file_line_and_field(self, tmp_path, backend, why):
        path = bench_with(tmp_path, backend=backend)
        store = tmp_path / "s"
        code, out = invoke("ingest", "points", path, "--store", store, "--gpus", "8")
        assert code == 2 and out.count("\n") == 1, out
        assert str(path) in out and "line 1" in out and "backend" in out and why in out, out
        assert not store.exists()
        code, out = invoke("cost", "compare", "--model", "dsr1", "--hardware", "h200",
                           "--measurements", path, "--measured-hardware", "h200",
                           "--measured-gpus", "8", "--measured-tp", "8",
                           "--measured-model", "dsr1", "--measured-precision", "fp8")
        assert code == 2 and why in out and "backend" in out, out

    def test_framework_is_honoured(self, tmp_path):
        """A result without a backend takes --framework; one whose backend names another
        engine than --framework is refused."""
        from toolkit.ingest.points import read_measured_points

        path = bench_with(tmp_path, backend=None)
        df = read_measured_points(path, gpus=8, framework="vllm")
        assert set(df["framework"]) == {"vllm"}
        both = bench_with(tmp_path, backend="vllm")
        with pytest.raises(Exception, match=r"field 'backend'.*'vllm' measured vllm, not "
                                            r"--framework sglang"):
            read_measured_points(both, gpus=8, framework="sglang")
        assert set(read_measured_points(SGLANG_BENCH, gpus=8)["framework"]) == {"sglang"}


VLLM_BENCH = ROOT / "tests" / "data" / "vllm_bench_sample.json"
POINTS_CSV = ROOT / "toolkit" / "data" / "inferencex"


def vllm_with(tmp_path: Path, **change) -> Path:
    import json

    rec = json.loads(VLLM_BENCH.read_text())
    rec.update(change)
    path = tmp_path / "vllm.json"
    path.write_text(json.dumps(rec))  # NaN is written as NaN, as Python's json reads it
    return path


def points_csv_with(tmp_path: Path, row: dict[str, str], header_extra: str = "") -> Path:
    """The bundled InferenceX CSV's header and first row, ``row`` changed."""
    from toolkit.serving.points import bundled_points_path

    lines = bundled_points_path().read_text().splitlines()
    names = lines[0].split(",")
    first = dict(zip(names, lines[1].split(","), strict=True))
    first.update(row)
    path = tmp_path / "points.csv"
    path.write_text(",".join(names) + header_extra + "\n"
                    + ",".join(first[n] for n in names)
                    + ("," + first[header_extra.strip(",")] if header_extra else "") + "\n")
    return path


class TestValuesThatLanded:
    """Item 12: each of these was stored (or answered) silently; each is now refused in
    one line naming the file, the row and the field, and the store is left as it was."""

    @pytest.mark.parametrize("change, field, why", [
        ({"start_times": [-1e308, 0.0, 1e308]}, "start_times", "infinite arrival_s"),
        ({"start_times": [0.0, 1.0]}, "start_times", "2 values for 3 requests"),
        ({"ttfts": [0.1, float("nan"), 0.3]}, "ttfts[1]", "expected a time in s"),
        ({"total_token_throughput": 10.0}, "total_token_throughput",
         "is below output_throughput 15.0"),
        ({"date": "20261345-101500"}, "date", "is not a day that exists"),
    ])
    def test_vllm_bench_result(self, small, tmp_path, change, field, why):
        path = vllm_with(tmp_path, **change)
        before = files(small)
        code, out = invoke("ingest", "points", path, "--store", small, "--gpus", "1",
                           "--name", "v")
        assert code == 2 and out.count("\n") == 1, out
        assert f"{path}:1" in out and f"field {field!r}" in out and why in out, out
        assert files(small) == before

    def test_token_counts_beyond_the_documented_max(self, small, tmp_path):
        """2^63 - 1 tokens made every later trace_summary query fail."""
        path = tmp_path / "huge.csv"
        path.write_text(f"t,in,out\n0,10,5\n1,20,{2**63 - 1}\n")
        before = files(small)
        code, out = invoke("ingest", "table", path, "--store", small, "--name", "h",
                           "--time-col", "t", "--input-tokens-col", "in",
                           "--output-tokens-col", "out")
        assert code == 2 and out.count("\n") == 1, out
        assert str(path) in out and "field 'output_tokens'" in out and "request_id 1" in out
        assert "2^30" in out and files(small) == before

    @pytest.mark.parametrize("row, field, why", [
        ({"date": "2026-13-45"}, "date", "is not a date (YYYY-MM-DD) that exists"),
        ({"tput_per_gpu": "1e308"}, "tput_per_gpu", "beyond any measurement"),
        ({"median_intvty": "1e300"}, "median_intvty", "beyond any measurement"),
    ])
    def test_points_table(self, small, tmp_path, row, field, why):
        """A date 2026-13-45 was stored (and ``serving fit`` later failed without naming
        the file); a 1e308 throughput was priced at $0.0/M."""
        path = points_csv_with(tmp_path, row)
        before = files(small)
        code, out = invoke("ingest", "points", path, "--store", small, "--name", "p")
        assert code == 2 and out.count("\n") == 1 and str(path) in out, out
        assert f"field {field!r}" in out and why in out, out
        assert files(small) == before
        code, out = invoke("serving", "fit", "--points", path)
        assert code == 2 and str(path) in out and f"field {field!r}" in out, out
        assert why in out and out.count("\n") == 1

    def test_duplicated_csv_column(self, small, tmp_path):
        """A column named twice: the first one was used silently."""
        path = points_csv_with(tmp_path, {}, header_extra=",tput_per_gpu")
        for args in (["ingest", "points", path, "--store", small, "--name", "d"],
                     ["serving", "fit", "--points", path]):
            code, out = invoke(*args)
            assert code == 2 and "'tput_per_gpu'" in out and "appears twice" in out, out
        table = tmp_path / "t.csv"
        table.write_text("t,in,out,in\n0,10,5,11\n")
        code, out = invoke("ingest", "table", table, "--store", small, "--name", "dup",
                           "--time-col", "t",
                           "--input-tokens-col", "in", "--output-tokens-col", "out")
        assert code == 2 and "field 'in'" in out and "appears twice" in out, out


def test_a_throughput_beyond_any_measurement_is_not_priced():
    """Item 12: ``cost --tokens-per-s-per-gpu 1e308`` answered $0.0/M."""
    from toolkit.cost.price import quote
    from toolkit.hardware import get_hardware

    code, out = invoke("cost", "--hardware", "gb200", "--tokens-per-s-per-gpu", "1e308")
    assert code == 2 and "--tokens-per-s-per-gpu" in out and out.count("\n") == 1
    for bad in (1e308, float("inf"), float("nan"), 0.0):
        with pytest.raises(ValueError, match="tokens_per_s_per_gpu must be"):
            quote(get_hardware("gb200"), bad)
    assert quote(get_hardware("gb200"), 1000.0).usd_per_million_tokens > 0


class TestSmallerEdges:
    """Item 14's smaller ones."""

    def test_storage_gb_between_minus_one_and_zero(self, small):
        """``--storage-gb -0.5`` was read as unbounded; only -1 means unbounded."""
        code, out = invoke("replay", "tiers", "--store", small, "--trace", "t",
                           "--storage-gb", "-0.5")
        assert code == 2 and out == ("error: --storage-gb must be >= 0, or -1 for unbounded; "
                                     "got -0.5\n")

    def test_block_size_error_names_the_flag(self, small):
        """vLLM's --block-tokens was reported as the internal page_tokens."""
        code, out = invoke("replay", "tiers", "--store", small, "--trace", "t",
                           "--engine-semantics", "vllm", "--block-tokens", "7")
        assert code == 2 and out.startswith("error: --block-tokens 7 neither divides"), out

    def test_workers_message(self):
        from toolkit.runtime.pool import max_workers

        code, out = invoke("plan", "--store", "x", "--trace", "t", "--model", "glm-5.2",
                           "--workers", str(max_workers() + 1))
        assert code == 2 and "--workers" in out and "0 uses every core" not in out, out

    @pytest.mark.parametrize("item, why", [
        ("=sglang", "expected HW=ENGINE"),
        ("mi355x=sglang", "mi355x is not among --hardware gb200"),
    ])
    def test_engine_pairs_that_would_be_ignored(self, item, why):
        """``--engine =sglang`` and an engine for hardware not asked about were ignored."""
        code, out = invoke("cost", "compare", "--model", "glm-5.2", "--hardware", "gb200",
                           "--engine", item)
        assert code == 2 and why in out and out.count("\n") == 1, out

    def test_plan_accepts_none_and_dedupes(self):
        """``plan --max-p90-ttft-s none`` is accepted as ``cost compare`` accepts it; an
        option value given twice is searched (and ranked) once."""
        from toolkit.commands.common import ttft_bound
        from toolkit.plan.config import PlanConfig

        assert ttft_bound("none") is None and ttft_bound("20") == 20.0
        cfg = PlanConfig(trace="t", model="glm-5.2", hardware=("gb200", "gb200"),
                         host_dram_gb=(0.0, 256.0, 0.0), policy=["lru", "lru"])
        assert cfg.hardware == ("gb200",) and cfg.host_dram_gb == (0.0, 256.0)
        assert cfg.policy == ("lru",)
        code, out = invoke("plan", "--store", "/nonexistent/x", "--trace", "t", "--model",
                           "glm-5.2", "--max-p90-ttft-s", "none")
        assert code == 2 and "no store at" in out, out  # past the flag parsing
