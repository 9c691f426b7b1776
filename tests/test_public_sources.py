"""Nothing the package ships or prints points at notes users do not have (issue 13 point 8):
internal reference files, the project brief, or paths outside the repository."""

from __future__ import annotations

import re

import click
import typer

from toolkit.cli import app
from toolkit.hardware import get_hardware, hardware_names
from toolkit.models import get_model, model_names

from .conftest import ROOT

INTERNAL = re.compile(r"hardware\.md|anchors\.md|replay_perf\.md|stack_notes\.md|BRIEF|"
                      r"\.\./shared|shared/reference|/work/shared|ARCHITECTURE\.md|STYLE\.md")


def _shipped_files():
    yield ROOT / "README.md"
    yield from (p for p in (ROOT / "toolkit").rglob("*") if p.is_file()
                and p.suffix in (".py", ".toml", ".md", ".json", ".csv", ".txt"))
    yield from (ROOT / "notebooks").glob("*.py")
    yield from (ROOT / "notebooks").glob("*.ipynb")


def test_no_internal_reference_in_shipped_files():
    """README, the package (code, specs, data notes) and the notebooks cite public sources."""
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _shipped_files()
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            if INTERNAL.search(line)]
    assert hits == []


def test_spec_provenance_is_public():
    """Every hardware and model value's source and note (what `hardware show`, `models show`
    and the report print) names a public source, not an internal note."""
    texts = [f"{s.source} {s.note}" for n in hardware_names()
             for s in get_hardware(n).provenance.values()]
    texts += [f"{s.source} {s.note}" for n in model_names()
              for s in get_model(n).provenance.values()]
    assert len(texts) > 300 and not [t for t in texts if INTERNAL.search(t)]


def test_cli_help_is_public():
    """No command's help text (the whole tree) cites an internal note."""
    def walk(cmd: click.Command, ctx: click.Context):
        yield cmd.get_help(ctx)
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, click.Context(sub, info_name=name, parent=ctx))

    root = typer.main.get_command(app)
    helps = list(walk(root, click.Context(root, info_name="toolkit")))
    assert len(helps) > 30 and not [h for h in helps if INTERNAL.search(h)]
