"""The README's Python example works as printed, and twice in a row (issue 13 point 8)."""

from __future__ import annotations

import contextlib
import io
import re

import toolkit

from .conftest import ROOT


def _python_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_twice(tmp_path, monkeypatch):
    """Run from a checkout's root (traces/ beside it): the second run replaces the trace and
    overwrites the same run row instead of failing or adding one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").symlink_to(ROOT / "traces")
    code = compile(_python_example(), "README.md", "exec")
    for _ in range(2):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(code, {})
        assert out.getvalue().startswith("shape: (1, ")  # one run row, both times
    with toolkit.open_store(tmp_path / "build" / "store") as store:
        assert store.query("SELECT count(*) FROM requests").item() == 12_031
        runs = store.query("SELECT capacity_blocks, block_hits FROM replay_runs").rows()
    assert runs == [(10_000, 60_921)]
