"""Every command the README and docs/ show works as printed.

Each ``toolkit ...`` line of a ```bash / ```console / ```sh block in README.md and
docs/*.md is parsed by the CLI itself (click's parser, no command body runs), so a renamed
command or flag, or a value of the wrong type, fails here. Blocks whose info string says
``run`` (```bash run) are also executed in order, in one working directory holding the
bundled traces, so the quickstart keeps working on the real trace names. The README's
Python example runs twice.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app

from .conftest import ROOT
from .test_public_sources import INTERNAL

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
_SHELLS = {"bash", "console", "sh", "shell"}


def _blocks(path: Path) -> list[tuple[str, str]]:
    """(info string, body) of every fenced shell block of ``path``."""
    out = []
    for info, body in _FENCE.findall(path.read_text()):
        words = info.split()
        if words and words[0] in _SHELLS:
            out.append((info, body))
    return out


def _commands(body: str) -> list[list[str]]:
    """The ``toolkit`` invocations of a shell block, as argument lists (without 'toolkit').

    Continuation lines are joined, comments dropped, a console prompt stripped, and a line
    is split at ``;``, ``&&`` and ``|`` so each part stands alone.
    """
    text = re.sub(r"\\\n", " ", body)
    cmds = []
    for line in text.splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        part: list[str] = []
        for tok in [*lexer, ";"]:
            if tok and set(tok) <= set(";&|"):
                if part:
                    # RAY_AUTH_MODE=token toolkit ... : environment assignments first
                    while part and re.fullmatch(r"[A-Z_]+=\S*", part[0]):
                        part.pop(0)
                    if part and part[0] == "toolkit":
                        cmds.append(part[1:])
                part = []
            else:
                part.append(tok)
    return cmds


def _shown(run_only: bool = False) -> list[tuple[str, list[str]]]:
    out = []
    for path in DOCS:
        for info, body in _blocks(path):
            if run_only and "run" not in info.split()[1:]:
                continue
            out.extend((path.name, c) for c in _commands(body))
    return out


def _questions() -> list[tuple[str, list[str]]]:
    """The commands in the README's questions table (inline code in its rows)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Questions this answers"):]
    section = section[:section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    spans = [c for row in rows for c in re.findall(r"`(toolkit [^`]+)`", row)]
    return [("README.md", shlex.split(c)[1:]) for c in spans]


SHOWN = _shown() + _questions()


def _parse(args: list[str]) -> None:
    """Resolve ``args`` to a command and parse its options without running it."""
    cmd = typer.main.get_command(app)
    name, ctx = "toolkit", None
    while True:
        ctx = cmd.make_context(name, list(args), parent=ctx, resilient_parsing=False)
        if not hasattr(cmd, "resolve_command"):  # a leaf command, parsed
            return
        # a group leaves its subcommand's name and arguments unparsed (click >= 8.2 keeps
        # the name in _protected_args, older versions in protected_args)
        rest = [*vars(ctx).get("_protected_args", vars(ctx).get("protected_args", [])),
                *ctx.args]
        if not rest:  # a group that runs on its own (`toolkit cost --hardware ...`)
            return
        name, cmd, args = cmd.resolve_command(ctx, rest)


def test_docs_show_commands():
    """The scan finds commands in README and in several docs pages (not silently none)."""
    pages = {page for page, _ in SHOWN}
    assert "README.md" in pages and len(pages) >= 8, pages
    assert len(SHOWN) >= 60 and len(_questions()) >= 10


@pytest.mark.parametrize(("page", "args"), SHOWN, ids=[f"{p}:{' '.join(a)[:70]}" for p, a in SHOWN])
def test_command_parses(page, args):
    """Each shown command names an existing command with flags it accepts."""
    if "--help" in args or "--version" in args:
        args = [a for a in args if a not in ("--help", "--version")]
    try:
        _parse(args)
    except Exception as e:  # click's UsageError / BadParameter (typer vendors its own click)
        if not hasattr(e, "format_message"):
            raise
        pytest.fail(f"{page}: toolkit {shlex.join(args)}: {e.format_message()}")


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def test_relative_links_resolve():
    """Every relative link of README.md, docs/*.md and benchmarks/RESULTS.md names an
    existing file, and an existing heading when it has a #fragment."""
    pages = [*DOCS, ROOT / "benchmarks" / "RESULTS.md"]
    broken = []
    for page in pages:
        text = _FENCE.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif frag and dest.suffix == ".md":
                heads = re.findall(r"^#+ (.+)$", _FENCE.sub("", dest.read_text()), re.M)
                if frag not in {_anchor(h) for h in heads}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_docs_cite_public_sources():
    """docs/ and benchmarks/RESULTS.md, shipped beside the README, point at no internal note."""
    hits = [f"{p.relative_to(ROOT)}:{i}"
            for p in [*DOCS, ROOT / "benchmarks" / "RESULTS.md"]
            for i, line in enumerate(p.read_text().splitlines(), 1) if INTERNAL.search(line)]
    assert hits == []


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A checkout-like directory: traces/ beside it, build/ created by the commands."""
    root = tmp_path_factory.mktemp("readme")
    (root / "traces").symlink_to(ROOT / "traces")
    return root


#: Shown in run blocks but only parsed here: ``report`` renders every chart to SVG and PNG
#: (~25 s on 2 cores) and is run end to end by tests/test_report.py.
NOT_RUN = {"report"}


def test_run_blocks_execute(workdir, monkeypatch):
    """The ```bash run blocks (the README quickstart) run in order and all exit 0."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("TOOLKIT_PROGRESS", "0")
    runner = CliRunner()
    runs = _shown(run_only=True)
    assert any(p == "README.md" for p, _ in runs)
    for page, args in runs:
        if args[0] in NOT_RUN:
            continue
        res = runner.invoke(app, args)
        assert res.exit_code == 0, f"{page}: toolkit {shlex.join(args)}\n{res.output}"
    with toolkit.open_store(workdir / "build" / "store") as store:
        ratios = store.query(
            "SELECT capacity_blocks, round(token_hit_ratio, 4) FROM replay_runs "
            "WHERE trace = 'mooncake_conversation' ORDER BY capacity_blocks").rows()
        misses = store.query(
            "SELECT policy, misses FROM selection_runs WHERE trace = 'smollm2' AND mode = 'plain' "
            "AND buffer_tokens = 128 ORDER BY policy").rows()
    # the figures the README quotes under its quickstart
    assert ratios == [(1_000, 0.0454), (10_000, 0.2153), (30_000, 0.3321)]
    assert misses == [("lru", 311_045), ("opt", 182_094)]


def test_questions_use_real_names(workdir):
    """The questions table names the quickstart's store and the bundled traces' real names
    (or one its own row records), never a placeholder such as S, T or N."""
    made = {"smollm2_gpl", "engram_texts"}
    bundled = {"mooncake_conversation", "azure_code_2023", "smollm2"}
    for _, args in _questions():
        opts = dict(zip(args, args[1:], strict=False))
        assert opts.get("--store", "build/store") == "build/store", args
        assert opts.get("--trace", "smollm2") in bundled | made, args


def test_hisparse_row_gives_an_opt_comparison(workdir, monkeypatch):
    """The questions table's HiSparse-buffer commands, run after the quickstart, leave runs
    that ``policy_vs_opt`` pairs (same trace, mode and buffer), as the row promises."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("TOOLKIT_PROGRESS", "0")
    text = (ROOT / "README.md").read_text()
    row = next(line for line in text.splitlines()
               if line.startswith("| How large must the HiSparse device buffer be"))
    runner = CliRunner()
    for c in re.findall(r"`(toolkit replay selections [^`]+)`", row):
        res = runner.invoke(app, shlex.split(c)[1:])
        assert res.exit_code == 0, f"{c}\n{res.output}"
    with toolkit.open_store(workdir / "build" / "store") as store:
        from toolkit.analysis import run_query

        vs = run_query(store, "policy_vs_opt", trace="smollm2")
    arc = vs.filter((vs["policy"] == "arc") & (vs["buffer_tokens"] == 256))
    assert arc.height == 1 and arc["mode"].item() == "hisparse"
    assert arc["misses_over_opt"].item() > 1


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
