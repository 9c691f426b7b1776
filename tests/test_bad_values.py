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
        included; below 1e-6 it is refused (the library too)."""
        from toolkit.replay.mrc import policy_miss_curve, stored_streams

        code, out = invoke("replay", "mrc", "--store", small, "--trace", "t", "--kind",
                           "prefix", "--sample-rate", "1e-9", "--sizes", "0,10")
        assert code == 2 and out == "error: --sample-rate must lie in [1e-06, 1], got 1e-09\n"
        with toolkit.open_store(small) as s:
            streams = stored_streams(s, "t", "prefix")
            with pytest.raises(ValueError, match=r"--sample-rate must lie in \[1e-06, 1\]"):
                policy_miss_curve(streams, [0, 10], sample_rate=1e-9)
            curve = policy_miss_curve(streams, [0, 10], sample_rate=1e-6)
        assert curve.sampled_accesses > 0 and curve.miss_ratio[0] == 1.0

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
