"""Start-up: the CLI parses its arguments before it loads any heavy library.

Timings live in ``benchmarks/cli_latency_bench.py``; these tests check what makes them
possible (which modules a bare start-up loads) and that the lazy command tree still answers
``--version``, ``--help`` and a command's own ``--help``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.version import __version__

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "polars", "duckdb", "pyarrow", "numpy", "llvmlite")


def _python(code: str) -> str:
    # numba's kernels (the path without the compiled extension: tests/test_startup_aot.py)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLKIT_AOT": "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _loaded_after(code: str) -> list[str]:
    out = _python(f"import sys\n{code}\nimport json\n"
                  f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))")
    return json.loads(out.splitlines()[-1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "toolkit.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


class TestImports:
    def test_import_cli_loads_no_heavy_library(self):
        """`import toolkit.cli` loads none of numba, polars, duckdb, pyarrow, numpy."""
        assert _loaded_after("import toolkit.cli") == []

    def test_version_loads_no_heavy_library(self):
        """`toolkit --version` runs to the end without loading a heavy library."""
        code = ("import sys\nfrom toolkit.cli import app\nsys.argv = ['toolkit', '--version']\n"
                "try:\n    app()\nexcept SystemExit:\n    pass")
        assert _loaded_after(code) == []

    def test_listing_policies_loads_no_kernel(self):
        """Policy names (option help, a config's check) come without numba; a lookup
        loads the kernels."""
        assert _loaded_after("from toolkit.policies import policies\npolicies.names()") == []
        assert "numba" in _loaded_after("from toolkit.policies import policies\n"
                                        "policies.get('lru')")


class TestLazyCommands:
    def test_version(self):
        """`toolkit --version` prints the version."""
        res = _cli("--version")
        assert res.returncode == 0 and res.stdout == f"toolkit {__version__}\n"

    def test_help_lists_every_command(self):
        """`toolkit --help` lists the commands of cli.py and of the command modules."""
        res = _cli("--help")
        assert res.returncode == 0, res.stderr
        for name in ("sql", "demo", "ingest", "replay", "synth", "record", "hardware",
                     "cost", "serving", "sweep", "store", "cost-at-interactivity", "warm-up"):
            assert f" {name} " in res.stdout, name

    @pytest.mark.parametrize("path,shown", [
        (["replay", "--help"], ["prefix", "selections", "mrc", "tiers", "engram"]),
        (["ingest", "--help"], ["mooncake", "selections"]),
        (["sql", "--help"], ["--list-queries"]),
        (["replay", "mrc", "--help"], ["--policy", "--sample-rate", "--sample-keys"]),
        (["warm-up", "--help"], ["--workers", "--traces"]),
    ], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
    def test_subcommand_help(self, path, shown):
        """A group or command's --help shows commands from cli.py and the modules alike."""
        res = _cli(*path)
        assert res.returncode == 0, res.stderr
        for text in shown:
            assert text in res.stdout, text

    def test_unknown_command_is_an_error(self):
        """A mistyped command still fails with click's usage error."""
        res = _cli("replayy")
        assert res.returncode == 2 and "No such command" in res.stderr


def test_concurrent_first_lookups_see_every_policy():
    """Replay threads that look policies up for the first time at once all find them
    (the built-ins load once, under a lock)."""
    out = _python(
        "import threading\nfrom toolkit.policies import policies\nfound = []\n"
        "def look(name):\n    found.append(policies.get(name).name)\n"
        "names = ['lru', 'arc', 'fifo', 'opt'] * 4\n"
        "ts = [threading.Thread(target=look, args=(n,)) for n in names]\n"
        "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(found))")
    assert out.strip() == "16"


def test_root_help_table_matches_the_commands():
    """``toolkit --help`` lists :data:`toolkit.cli.ROOT_HELP` without importing the command
    modules; the table holds exactly the root's commands, in order, each with the help its
    command shows (a new command registered without its line fails here)."""
    import typer

    from toolkit import cli

    group = typer.main.get_command(cli.app)
    actual = {}
    for name in group.list_commands(None):  # mounts every command module
        command = group.get_command(None, name)
        actual[name] = command.short_help or command.help
    assert list(actual.items()) == list(cli.ROOT_HELP.items()), (
        f"toolkit/cli.py ROOT_HELP should be {actual!r}")


def test_help_imports_no_command_module():
    """`toolkit --help` draws its list from the table: no command module, no heavy
    library is imported."""
    code = ("import sys\nfrom toolkit.cli import app\nsys.argv = ['toolkit', '--help']\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "print('mods', sorted(m for m in sys.modules if m.startswith('toolkit.commands.')"
            " and m.rsplit('.', 1)[1] not in ('common', 'oneline', 'output')))")
    out = _python(code + "\nimport json\nprint(json.dumps(sorted(m for m in "
                  f"{list(HEAVY)!r} if m in sys.modules)))")
    lines = out.splitlines()
    assert json.loads(lines[-1]) == []
    assert lines[-2] == "mods []"
    assert "warm-up" in out and "cost-at-interactivity" in out


@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_sql_loads_no_kernel(tmp_path, fmt):
    """`toolkit sql --store S "SELECT 1"` opens the store without numba (the Parquet
    encoders and page decoder load their kernels when they first encode or decode),
    without the named queries, and prints DuckDB's rows without Polars."""
    store = tmp_path / "s"
    _python(f"from toolkit.store import open_store\nopen_store({str(store)!r}, create=True)"
            ".close()")
    code = ("import sys\nfrom toolkit.cli import app\n"
            f"sys.argv = ['toolkit', 'sql', '--store', {str(store)!r}, 'SELECT 42 AS x', "
            f"*{fmt!r}]\ntry:\n    app()\nexcept SystemExit:\n    pass\n"
            "print('named' if 'toolkit.analysis.queries' in sys.modules else 'no named')")
    out = _python(code + "\nimport json\nprint(json.dumps(sorted(m for m in "
                  f"{list(HEAVY)!r} if m in sys.modules)))")
    lines = out.splitlines()
    assert ('[{"x": 42}]' if fmt else "42") in lines
    assert lines[-2] == "no named"
    loaded = json.loads(lines[-1])
    assert not {"numba", "llvmlite", "polars"} & set(loaded), loaded


def test_a_command_imports_only_its_own_module():
    """`toolkit replay selections --help` imports the selections commands (and what they
    import), none of the other groups' modules, and no heavy library."""
    code = ("import sys\nfrom toolkit.cli import app\n"
            "sys.argv = ['toolkit', 'replay', 'selections', '--help']\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "print('mods', sorted(m.rsplit('.', 1)[1] for m in sys.modules "
            "if m.startswith('toolkit.commands.')))")
    out = _python(code + "\nimport json\nprint(json.dumps(sorted(m for m in "
                  f"{list(HEAVY)!r} if m in sys.modules)))")
    lines = out.splitlines()
    assert json.loads(lines[-1]) == []
    loaded = set(lines[-2].removeprefix("mods ").strip("[]").replace("'", "").split(", "))
    assert "selections" in loaded
    assert not loaded & {"sweep", "tiers", "engram", "cost", "serving", "models", "export",
                         "warmup", "synth"}, loaded
    assert "--buffer-tokens" in out


def test_a_record_prints_without_polars():
    """A command's one-record result (a replay's summary) prints as JSON or as aligned
    lines without importing Polars (~0.3 s of every replay command before)."""
    code = ("from toolkit.commands.output import Output\n"
            "Output('json').emit({'run_id': 'r', 'hit_ratio': 0.5, 'model': None})\n"
            "Output('table').emit({'elapsed_s': 0.25, 'x': 3, 'y': 1}, ('x', 'elapsed_s'))")
    out = _loaded_after(code)
    assert "polars" not in out, out
    lines = _python(code).splitlines()
    assert lines == ['{"run_id": "r", "hit_ratio": 0.5, "model": null}',
                     "x          3", "elapsed_s  250.0 ms"]  # as through a frame before


def test_a_replay_loads_only_what_it_uses(tmp_path):
    """`toolkit replay selections --json` prints its summary without Polars and reads and
    writes the store's own layout without Arrow's compute and dataset modules (~0.45 s of
    imports together)."""
    store = tmp_path / "s"
    _python("from toolkit.store import open_store\n"
            "from toolkit.synth.selections import SyntheticSelectionConfig, generate\n"
            f"with open_store({str(store)!r}, create=True) as s:\n"
            "    s.write_many(generate(SyntheticSelectionConfig(prompt_tokens=256, steps=4, "
            "layers=2, k=64, sinks=4, recent_window=16), 'syn'), 'syn')")
    code = ("import sys\nfrom toolkit.cli import app\n"
            f"sys.argv = ['toolkit', 'replay', 'selections', '--store', {str(store)!r}, "
            "'--trace', 'syn', '--mode', 'hisparse', '--buffer-tokens', '128', '--json']\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n")
    out = _python(code + "import json\nprint(json.dumps(sorted(m for m in ('polars', "
                  "'pyarrow.compute', 'pyarrow.dataset', 'numba') if m in sys.modules)))")
    lines = out.splitlines()
    assert json.loads(lines[-2])["accesses"] > 0
    assert json.loads(lines[-1]) == ["numba"]


@pytest.mark.parametrize("args", [
    ["replay", "prefix", "--capacity-blocks", "1000"],
    ["replay", "tiers", "--hardware", "gb200", "--model", "glm-5.2"],
    ["plan", "--model", "glm-5.2"],
])
def test_a_mistyped_trace_fails_before_kernels_load(tmp_path, args):
    """A trace the store does not hold is refused right after the store opens, naming the
    table and the traces it holds, before numba, the replay or the cost model load."""
    store = tmp_path / "s"
    _python(f"from toolkit.store import open_store\nopen_store({str(store)!r}, create=True)"
            ".close()")
    code = ("import sys\nfrom toolkit.cli import app\n"
            f"sys.argv = ['toolkit', *{args!r}, '--store', {str(store)!r}, '--trace', 'nope']"
            "\ntry:\n    app()\nexcept SystemExit as e:\n    print('exit', e.code)\n"
            "print(sorted(m for m in ('numba', 'toolkit.replay.prefix', "
            "'toolkit.cost.from_replay', 'toolkit.plan.search') if m in sys.modules))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLKIT_AOT": "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=120)
    lines = res.stdout.splitlines()
    assert lines[-2] == "exit 2" and lines[-1] == "[]", (res.stdout, res.stderr)
    assert "no requests named 'nope'" in res.stderr and "(table requests)" in res.stderr
