"""Feedback during long work (issue 13 point 4, issue 11 point 6): status lines, the
first-run compile notice, notebooks, and silence under --json, in tests and when off."""

from __future__ import annotations

import sys
import time
import types

import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.runtime import progress as prog

from .conftest import MOONCAKE


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(prog, "DELAY_S", 0.0)
    monkeypatch.delenv(prog.ENV, raising=False)


class TestSwitches:
    @pytest.mark.parametrize(("value", "bar"), [("0", False), ("off", False), (None, True)])
    def test_duckdb_bar_follows_the_switch(self, monkeypatch, tmp_path, value, bar):
        """DuckDB draws its own bar in a notebook for a query over ~2 s (an executed
        notebook recorded one on a loaded machine): ``TOOLKIT_PROGRESS=0`` turns it off
        on the store's connection, and without it DuckDB's own choice stays. DuckDB is
        made to start with its bar on, as it does in a notebook."""
        import duckdb

        import toolkit
        from toolkit.store import core as store_module

        plain_connect = duckdb.connect

        def connect_with_bar(*args, **kwargs):
            con = plain_connect(*args, **kwargs)
            con.execute("SET enable_progress_bar = true")
            return con

        monkeypatch.setattr(store_module.duckdb, "connect", connect_with_bar)
        if value is None:
            monkeypatch.delenv(prog.ENV, raising=False)
        else:
            monkeypatch.setenv(prog.ENV, value)
        with toolkit.open_store(tmp_path / "s", create=True) as store:
            got = store.query("SELECT current_setting('enable_progress_bar') AS on_").item()
        assert got is bar

    def test_quiet_when_piped(self, monkeypatch):
        """Tests run without a terminal: nothing is interactive unless asked."""
        monkeypatch.delenv(prog.ENV, raising=False)
        assert not prog.interactive()
        assert prog.interactive(True)

    @pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False),
                                                     ("1", True), ("", False)])
    def test_environment_switch(self, monkeypatch, value, expected):
        """TOOLKIT_PROGRESS=0 silences everything, =1 shows bars even when piped."""
        monkeypatch.setenv(prog.ENV, value)
        assert prog.interactive() is expected
        assert prog.interactive(False) is False

    def test_env_off_beats_a_notebook(self, monkeypatch):
        """Executed notebooks (make notebooks, nbval) set TOOLKIT_PROGRESS=0: no bar."""
        monkeypatch.setattr(prog, "_in_notebook", lambda: True)
        monkeypatch.setenv(prog.ENV, "0")
        assert prog._bar_class(None) is None


class TestNotebook:
    def test_widget_bar_with_ipywidgets(self, monkeypatch):
        """In a notebook with ipywidgets installed, the bar is tqdm's widget."""
        from tqdm.notebook import tqdm as notebook_tqdm

        monkeypatch.delenv(prog.ENV, raising=False)
        monkeypatch.setattr(prog, "_in_notebook", lambda: True)
        monkeypatch.setitem(sys.modules, "ipywidgets", types.ModuleType("ipywidgets"))
        assert prog._bar_class(None) is notebook_tqdm

    def test_text_bar_without_ipywidgets(self, monkeypatch):
        """Without ipywidgets a notebook still gets tqdm's text bar, not silence."""
        from tqdm.std import tqdm

        monkeypatch.delenv(prog.ENV, raising=False)
        monkeypatch.setattr(prog, "_in_notebook", lambda: True)
        monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import raises ImportError
        assert prog._bar_class(None) is tqdm

    def test_no_compile_notice_in_a_notebook(self, monkeypatch, capsys):
        """A notebook records stderr, so the compile notice never goes there."""
        import numba

        monkeypatch.setattr(prog, "_in_notebook", lambda: True)
        with prog.compile_notice(True):
            numba.njit(lambda x: x + 2)(1)
        assert capsys.readouterr().err == ""


class TestStatus:
    def test_status_shows_elapsed_and_writes_above(self, no_delay, capsys):
        """A status line names the work and its elapsed time; write() prints above it."""
        with prog.status("replay tiers t", enabled=True) as st:
            time.sleep(0.6)
            st.write("a line of output")
        out = capsys.readouterr()
        assert "replay tiers t: 00:00" in out.err and out.out == "a line of output\n"

    def test_status_quiet(self, capsys):
        """Disabled, the status costs nothing and write() still prints."""
        with prog.status("x", enabled=False) as st:
            st.write("y")
        assert capsys.readouterr() == ("y\n", "")


class TestCompileNotice:
    def test_first_compile_is_announced_once(self, capsys, tmp_path, monkeypatch):
        """A compile (numba's event; cache loads raise none) names the kernel, and how many
        kernels and seconds it took at the end; a kernel announced once (its marker next
        to numba's cache) is compiled quietly later, as in a new process."""
        import numba

        monkeypatch.setattr(prog, "_marker_dir", lambda: tmp_path)

        def add_one(x):
            return x + 1

        with prog.compile_notice(True):
            numba.njit(add_one)(1)
            numba.njit(lambda x: x * 3)(1)
        err = capsys.readouterr().err.splitlines()
        assert err[0] == (f"compiling kernel {__name__}.TestCompileNotice."
                          "test_first_compile_is_announced_once.<locals>.add_one "
                          "(first use; cached for later runs)...")
        assert "<lambda> (first use" in err[1]
        assert err[2].startswith("compiled 2 kernel(s) in ") and len(err) == 3
        with prog.compile_notice(True):
            numba.njit(add_one)(2)  # compiles again (no cache), announced before
            numba.njit(add_one)(2.5)  # new argument types: a new kernel
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2 and "add_one" in err[0] and err[1].startswith("compiled 2 ")

    def test_nothing_when_already_compiled_or_off(self, capsys):
        """No compile, no notice; enabled=False never listens."""
        import numba

        f = numba.njit(lambda x: x - 1)
        f(1)
        with prog.compile_notice(True):
            f(2)
        with prog.compile_notice(False):
            numba.njit(lambda x: x - 2)(1)
        assert capsys.readouterr().err == ""


class TestCliQuiet:
    def test_json_replay_writes_nothing_on_stderr(self, tmp_path, monkeypatch):
        """Even with bars forced on, --json keeps stderr empty (only the JSON on stdout)."""
        monkeypatch.setenv(prog.ENV, "1")
        monkeypatch.setattr(prog, "DELAY_S", 0.0)
        root = str(tmp_path / "s")
        runner = CliRunner()
        assert runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", root,
                                   "--name", "c"]).exit_code == 0
        res = runner.invoke(app, ["replay", "prefix", "--store", root, "--trace", "c",
                                  "--capacity-blocks", "100,1000", "--json"])
        assert res.exit_code == 0 and res.stderr == ""
        res = runner.invoke(app, ["replay", "prefix", "--store", root, "--trace", "c",
                                  "--capacity-blocks", "100,1000"])
        assert "prefix sweep c" in res.stderr and "lookup" in res.stderr  # for a person


class TestInAJupyterKernel:
    def test_widget_bar_in_a_real_kernel(self, monkeypatch):
        """In a live IPython kernel with ipywidgets, a long replay's bar is a widget (what
        JupyterLab renders), and TOOLKIT_PROGRESS=0 leaves the cell without any output."""
        import nbformat
        from nbclient import NotebookClient

        monkeypatch.delenv(prog.ENV, raising=False)
        cells = [
            "from toolkit.runtime import progress as p\n"
            "p.DELAY_S = 0.0\n"
            "print(p._bar_class(None).__module__)",
            "with p.progress(10, 'replay t') as bar:\n    bar.update(10)",
            "import os\nos.environ['TOOLKIT_PROGRESS'] = '0'\n"
            "with p.progress(10, 'replay t') as bar:\n    bar.update(10)",
        ]
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
        first, bar, off = (c.outputs for c in nb.cells)
        assert first[0]["text"] == "tqdm.notebook\n"
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
                   for o in bar)
        assert off == []
