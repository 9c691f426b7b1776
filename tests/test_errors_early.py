"""A mistyped name (trace, accelerator, model, plan, named query's trace) is refused in one
line that names it and what the store or registry holds, before numba, Polars or the
serving model's SciPy are imported: the CLI's start-up is all a typo costs. Each case runs
the real CLI in a subprocess under ``python -X importtime`` and reads what it imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit
from toolkit.ingest import ingest_file
from toolkit.synth.selections import SyntheticSelectionConfig, generate

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
HEAVY = ("numba", "polars", "scipy")


@pytest.fixture(scope="module")
def names_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed store with a request timeline ``conv`` and a selection trace ``syn``."""
    root = tmp_path_factory.mktemp("names") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
        s.write_many(generate(SyntheticSelectionConfig(
            requests=1, prompt_tokens=4096, steps=4, layers=2, k=2048, seed=1), "syn"), "syn")
    return root


def refused(argv: list[str]) -> tuple[str, set[str]]:
    """(the error line, heavy modules imported) of a CLI call that must exit 2."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "toolkit.cli", *argv],
                         capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "TOOLKIT_PROGRESS": "0", "COLUMNS": "400"})
    lines = res.stderr.splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(errors) == 1, errors
    loaded = {m for m in HEAVY for ln in lines
              if ln.startswith("import time:") and ln.rsplit("|", 1)[-1].strip() == m}
    return errors[0], loaded


CASES = [
    # (argv with S for the store, words the error must hold)
    ("replay tiers --store S --trace nosuch",
     ["'nosuch'", "table requests", "known: conv"]),
    ("replay tiers --store S --trace conv --hardware nosuch",
     ["--hardware nosuch", "unknown hardware", "gb200", "toolkit hardware list"]),
    ("replay tiers --store S --trace conv --model nosuch",
     ["--model nosuch", "unknown model", "glm-5.2", "toolkit models list"]),
    ("replay prefix --store S --trace conv --capacity-gb 1 --model nosuch",
     ["--model nosuch", "unknown model"]),
    ("replay selections --store S --trace nosuch",
     ["selection trace", "'nosuch'", "table selections", "known: syn"]),
    ("replay selections --store S --trace syn --model nosuch", ["--model nosuch"]),
    ("replay mrc --store S --trace nosuch --kind prefix",
     ["'nosuch'", "table requests", "known: conv"]),
    ("replay cluster --store S --trace nosuch", ["'nosuch'", "table requests"]),
    ("replay cluster --store S --trace conv --hardware h100,nosuch", ["--hardware nosuch"]),
    ("replay engram --store S --trace nosuch --hbm-cache-gb 1",
     ["Engram lookup trace", "'nosuch'", "table engram_traces"]),
    ("cost compare --model nosuch", ["--model nosuch", "unknown model"]),
    ("cost compare --model glm-5.2 --hardware gb200,nosuch", ["--hardware nosuch"]),
    ("cost compare --model glm-5.2 --store S --selections nosuch",
     ["selection trace", "'nosuch'", "table selections", "known: syn"]),
    ("plan --store S --trace nosuch --model glm-5.2", ["'nosuch'", "table requests"]),
    ("plan --store S --trace conv --model nosuch", ["--model nosuch"]),
    ("plan --store S --trace conv --model glm-5.2 --hardware gb200,nosuch",
     ["--hardware nosuch"]),
    ("plan explain --store S --plan nosuch/2", ["plan", "'nosuch'", "table plan_runs"]),
    ("sql --store S --query prefix_hit_curve --param trace=nosuch",
     ["trace=nosuch", "'nosuch'", "known: conv, syn", "toolkit info --store"]),
    ("cost compare --model glm-5.2 --store S --measured-points nosuch",
     ["measured points", "'nosuch'", "table measured_points"]),
    ("serving validate --store S --measured-points nosuch",
     ["measured points", "'nosuch'", "table measured_points"]),
    ("export perfetto --store S --run nosuch --out S.json",
     ["no tier replay 'nosuch'", "tier_runs, cluster_runs, plan_runs"]),
    ("report --store S.missing --out S.report", ["no store at"]),
]


@pytest.mark.parametrize(("line", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_name_refused_before_heavy_imports(names_store: Path, line: str,
                                               words: list[str]) -> None:
    argv = [a.replace("S", str(names_store), 1) if a.startswith("S") else a
            for a in line.split()]
    error, loaded = refused(argv)
    for w in words:
        assert w in error, (w, error)
    assert not loaded, f"{line}: imported {sorted(loaded)} before refusing"


def test_named_query_with_a_held_trace_still_runs(names_store: Path) -> None:
    """The trace check lets a trace the store holds through (and NULL, meaning all)."""
    for value in ("conv", "null"):
        res = subprocess.run([sys.executable, "-m", "toolkit.cli", "sql", "--store",
                              str(names_store), "--query", "prefix_hit_curve", "--param",
                              f"trace={value}", "--format", "csv"],
                             capture_output=True, text=True, cwd=ROOT,
                             env={**os.environ, "TOOLKIT_PROGRESS": "0"})
        assert res.returncode == 0, res.stderr
        assert res.stdout.splitlines()[0].startswith("trace,"), res.stdout


@pytest.mark.parametrize(("field", "value"), [("hardware", "tpu9"), ("model", "gpt-9")])
def test_serving_predict_names_in_the_file(tmp_path: Path, field: str, value: str) -> None:
    """``serving predict --points FILE``: an unknown accelerator or model in a row is the
    full validation's one line (file, row, field) before Polars or the serving model load;
    a file without such a name still predicts."""
    import csv

    from toolkit.serving.points import bundled_points_path

    with bundled_points_path().open(newline="") as f:
        rows = [r for _, r in zip(range(2), csv.DictReader(f), strict=False)]
    rows[1][field] = value
    path = tmp_path / "configs.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    error, loaded = refused(["serving", "predict", "--points", str(path), "--out",
                             str(tmp_path / "out.csv")])
    assert f"{path}: row 2 field '{field}': unknown {field} '{value}'" in error, error
    assert not loaded, loaded
    assert not (tmp_path / "out.csv").exists()


def test_sweep_grid_names(names_store: Path, tmp_path: Path) -> None:
    """A grid's mistyped trace, accelerator or model is refused, naming the file, before
    the sweep package (replays, serving model) loads."""
    cases = [('kind = "tiers"\ntrace = "nosuch"\n[axes]\nconcurrency = [4, 8]\n',
              ["trace 'nosuch' is not in store", "(table requests)", "known: conv"]),
             ('kind = "selections"\ntraces = ["syn", "nosuch"]\n[axes]\npolicy = ["lru"]\n',
              ["trace 'nosuch'", "(table selections)", "known: syn"]),
             ('kind = "tiers"\ntrace = "conv"\n[axes]\nhardware = ["gb200", "gb999"]\n',
              ["hardware gb999", "unknown hardware 'gb999'"]),
             ('kind = "serving"\n[fixed]\nmodel = "glm-9"\n[axes]\nhardware = ["gb200"]\n',
              ["model glm-9", "unknown model 'glm-9'"])]
    for i, (text, words) in enumerate(cases):
        grid = tmp_path / f"g{i}.toml"
        grid.write_text(text)
        error, loaded = refused(["sweep", "--grid", str(grid), "--store", str(names_store)])
        assert error.startswith(f"error: {grid}: "), error
        for w in words:
            assert w in error, (w, error)
        assert not loaded, loaded


def test_grid_trace_tables_match_the_sweep_kinds() -> None:
    """The CLI's copy of each kind's trace table is the sweep kinds' own."""
    from toolkit.commands.sweep import GRID_TRACE_TABLES
    from toolkit.sweep.kinds import kinds

    # the toolkit's own kinds (a test registers a "fault" kind from tests/ in this process)
    own = {n: kinds.get(n) for n in kinds.names()
           if kinds.get(n).config.__module__.startswith("toolkit.")}
    assert GRID_TRACE_TABLES == {n: k.trace_table for n, k in own.items()
                                 if k.trace_table is not None}
