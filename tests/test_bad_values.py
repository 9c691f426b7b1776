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
