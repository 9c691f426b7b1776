"""CLI edges (issue 13 point 5): one output convention, missing stores, several cache sizes
per call, choices in help, models, and one-line errors instead of tracebacks."""

from __future__ import annotations

import json

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from toolkit import __version__
from toolkit.cli import app

from .conftest import MOONCAKE, ROOT

runner = CliRunner()
SMOLLM2 = ROOT / "traces" / "smollm2"


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    """Mooncake conversation trace as ``conv`` and the bundled SmolLM2 selections as ``sm``."""
    root = tmp_path_factory.mktemp("edges") / "store"
    for args in (["ingest", "mooncake", str(MOONCAKE), "--name", "conv"],
                 ["ingest", "selections", str(SMOLLM2), "--format", "bundle", "--select",
                  "smollm2-softmax-sum", "--name", "sm"]):
        res = runner.invoke(app, [*args, "--store", str(root)])
        assert res.exit_code == 0, res.output
    return root


def _option(path: list[str], name: str):
    cmd = typer.main.get_command(app)
    for part in path:
        cmd = cmd.commands[part]
    return next(p for p in cmd.params if p.name == name)


class TestOpenStoreInPython:
    def test_missing_store_is_an_error_unless_created(self, tmp_path):
        """`toolkit.open_store` refuses a mistyped path in one line naming it (as the CLI
        does) and creates nothing; `create=True` makes a new store."""
        import toolkit
        from toolkit.errors import StoreError

        root = tmp_path / "typo"
        with pytest.raises(StoreError) as e:
            toolkit.open_store(root)
        assert str(e.value) == f"no store at {root}; pass create=True to make one"
        assert not root.exists()
        with toolkit.open_store(root, create=True) as s:
            assert s.tables()
        assert root.is_dir()
        toolkit.open_store(root).close()  # it exists now


class TestVersionAndModels:
    def test_version(self):
        """`toolkit --version` prints the package version and exits 0."""
        res = runner.invoke(app, ["--version"])
        assert res.exit_code == 0 and res.output == f"toolkit {__version__}\n"

    def test_models_list_json(self):
        """`models list` names every registered model with its KV bytes per token."""
        from toolkit.models import model_names

        rows = json.loads(runner.invoke(app, ["models", "list", "--json"]).output)
        assert [r["name"] for r in rows] == model_names()
        glm = next(r for r in rows if r["name"] == "glm-5.2")
        assert (glm["layers"], glm["index_topk_freq"], glm["kv_bytes_per_token_fp8"]) == (
            78, 4, 53_940)

    def test_models_show(self):
        """`models show` prints each value with kind and source; unknown names exit 2."""
        res = runner.invoke(app, ["models", "show", "glm-5.2", "--format", "json"])
        fields = {r["field"]: r for r in json.loads(res.output)}
        assert fields["num_layers"]["value"] == 78 and fields["num_layers"]["source"]
        res = runner.invoke(app, ["models", "show", "glm-9"])
        assert res.exit_code == 2 and res.output.startswith("error: unknown model 'glm-9'")


class TestMissingStore:
    @pytest.mark.parametrize("args", [
        ["sql", "SELECT 1"], ["info"], ["replay", "prefix", "--trace", "x"],
        ["replay", "selections", "--trace", "x"],
        ["replay", "mrc", "--trace", "x", "--max-capacity", "4"],
        ["replay", "tiers", "--trace", "x"],
        ["replay", "engram", "--trace", "x", "--hbm-cache-gb", "1"],
    ])
    def test_exact_message_and_nothing_created(self, tmp_path, args):
        """Every reading command: exit 2, the fixed message, no directory left behind."""
        root = tmp_path / "typo"
        res = runner.invoke(app, [*args, "--store", str(root)])
        assert res.exit_code == 2
        assert res.output == f"error: no store at {root}; create one with toolkit ingest\n"
        assert not root.exists()

    def test_an_empty_directory_is_no_store(self, tmp_path):
        """An existing but empty directory answers no queries with zero rows either."""
        res = runner.invoke(app, ["sql", "--store", str(tmp_path), "SELECT 1"])
        assert res.exit_code == 2 and "no store at" in res.output


class TestSqlOutput:
    def test_markdown(self, cli_store):
        """--format markdown prints a pipe table without dtypes or shape."""
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--format", "markdown",
                                  "SELECT count(*) AS n FROM requests"])
        assert res.exit_code == 0 and res.output == "| n     |\n|-------|\n| 12031 |\n"

    def test_sql_from_stdin(self, cli_store):
        """`-` reads the statement from standard input."""
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--format", "csv", "-"],
                            input="SELECT count(*) AS n FROM requests WHERE trace = 'conv'\n")
        assert res.exit_code == 0 and res.output == "n\n12031\n"

    def test_json_alias(self, cli_store):
        """--json is --format json; combining it with another format is refused."""
        q = "SELECT 1 AS a"
        a = runner.invoke(app, ["sql", "--store", str(cli_store), "--json", q]).output
        b = runner.invoke(app, ["sql", "--store", str(cli_store), "--format", "json", q]).output
        assert a == b == '[{"a": 1}]\n'
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--json", "--format", "csv",
                                  q])
        assert res.exit_code == 2 and "--json means --format json" in res.output

    def test_wide_result_is_split_into_panels(self, cli_store):
        """A result wider than the terminal ($COLUMNS) keeps one line per row: values every
        row shares go above, headers wrap at word boundaries, long text goes last and is
        cut, and the rest of the columns follow in a panel that repeats the first."""
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "SELECT * FROM requests "
                                  "ORDER BY request_id LIMIT 2"], env={"COLUMNS": "40"})
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        assert max(len(ln) for ln in lines) <= 40, res.output
        assert lines[0] == "arrival_s: 0.000  block_tokens: 512", res.output
        assert not any(ln.startswith("-[ row") for ln in lines)
        i = lines.index(next(ln for ln in lines if ln.startswith("─")))
        # request_id / input_tokens / output_tokens wrapped after their "_", never cut
        assert lines[i - 2].split() == ["request_", "input_", "output_"], res.output
        assert lines[i - 1].split() == ["trace", "id", "tokens", "tokens"], res.output
        assert lines[i + 1].split() == ["conv", "0", "6,758", "500"], res.output
        assert lines[-4].split() == ["trace", "block_hashes"], res.output  # long text last
        assert lines[-2].startswith("conv   [0, 1, 2") and lines[-2].endswith("…"), res.output

    def test_long_result_is_cut_with_a_note(self, cli_store):
        """`sql` shows 40 rows by default, as DuckDB's shell does, and says how to see the
        rest; --limit 0 shows them all, and csv keeps every row."""
        q = "SELECT request_id FROM requests ORDER BY 1"
        res = runner.invoke(app, ["sql", "--store", str(cli_store), q])
        lines = res.output.splitlines()
        assert lines[-1] == "11,991 more rows (--limit 0 for all)" and len(lines) == 43
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--limit", "0", q])
        assert len(res.output.splitlines()) == 12_031 + 2
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--format", "csv", q])
        assert len(res.output.splitlines()) == 12_031 + 1

    @pytest.mark.parametrize("suffix", [".csv", ".json", ".parquet"])
    def test_output_file(self, cli_store, tmp_path, suffix):
        """--output writes the rows by extension, the file only (no temp files left)."""
        out = tmp_path / f"r{suffix}"
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--output", str(out),
                                  "SELECT request_id, input_tokens FROM requests "
                                  "ORDER BY request_id LIMIT 3"])
        assert res.exit_code == 0 and "wrote 3 row(s)" in res.output
        read = {".csv": pl.read_csv, ".json": pl.read_json, ".parquet": pl.read_parquet}[suffix]
        assert read(out)["input_tokens"].to_list() == [6758, 7322, 7236]
        assert [p.name for p in tmp_path.iterdir()] == [out.name]

    @pytest.mark.parametrize(("name", "message"), [
        ("r.txt", "the extension must be one of .csv, .json, .parquet"),
        ("missing/r.csv", "does not exist"),
    ])
    def test_bad_output_is_refused_before_work(self, cli_store, tmp_path, name, message):
        """A bad --output name fails at once with one line and writes nothing."""
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--output",
                                  str(tmp_path / name), "SELECT 1"])
        assert res.exit_code == 2 and message in res.output
        assert len(res.output.splitlines()) == 1 and list(tmp_path.iterdir()) == []


class TestReplayOutput:
    def test_prefix_several_block_sizes(self, cli_store):
        """`--capacity-blocks 1000,10000,30000` replays three sizes in one call."""
        res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                                  "conv", "--capacity-blocks", "1000,10000,30000", "--json"])
        rows = json.loads(res.output)
        assert [(r["capacity_blocks"], r["block_hits"]) for r in rows] == [
            (1000, 12_831), (10_000, 60_921), (30_000, 93_967)]

    def test_prefix_sizes_in_gb(self, cli_store):
        """--capacity-gb with --model: GB / (53,940 B/token x 512 tokens) blocks per size."""
        res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                                  "conv", "--capacity-gb", "1,2.5", "--model", "glm-5.2",
                                  "--json"])
        rows = json.loads(res.output)
        assert [(r["capacity_gb"], r["capacity_blocks"], r["block_hits"]) for r in rows] == [
            (1.0, 36, 9_731), (2.5, 90, 11_572)]
        res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                                  "conv", "--capacity-gb", "1"])
        assert res.exit_code == 2 and "--capacity-gb needs --model" in res.output

    def test_replay_output_csv(self, cli_store, tmp_path):
        """Replay commands take --output too: the run summary as one row."""
        out = tmp_path / "run.csv"
        res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                                  "conv", "--capacity-blocks", "1000", "--output", str(out)])
        assert res.exit_code == 0, res.output
        df = pl.read_csv(out)
        assert df.height == 1 and df["block_hits"].item() == 12_831

    def test_selection_replay_markdown_record(self, cli_store):
        """A run summary in markdown is a field | value table."""
        res = runner.invoke(app, ["replay", "selections", "--store", str(cli_store), "--trace",
                                  "sm", "--mode", "plain", "--buffer-tokens", "64",
                                  "--format", "markdown"])
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        assert lines[0].startswith("| field") and "| buffer_tokens " in res.output
        assert "config_json" not in res.output

    def test_info_rows_per_table(self, cli_store):
        """`info` counts rows per table next to its keys, shows only the tables that hold
        something and says how many it left out; --json lists every table."""
        res = runner.invoke(app, ["info", "--store", str(cli_store)])
        lines = [ln.split() for ln in res.output.splitlines()]
        assert lines[0] == ["table", "keys", "rows", "names"]
        assert ["requests", "1", "12,031", "conv"] in lines
        assert ["selections", "1", "30,720", "sm"] in lines
        every = json.loads(runner.invoke(app, ["info", "--store", str(cli_store),
                                               "--json"]).output)
        empty = [r["table"] for r in every if r["keys"] == 0]
        assert empty and not any(ln and ln[0] in empty for ln in lines[2:-1])
        assert res.output.splitlines()[-1] == (f"{len(empty)} empty table(s) not shown "
                                               "(--json lists every table)")


class TestHelpListsChoices:
    def test_policy_hardware_model_mode(self):
        """--policy, --hardware, --model and --mode help list what they accept."""
        from toolkit.hardware import hardware_names
        from toolkit.models import model_names
        from toolkit.policies import policies

        for path in (["replay", "prefix"], ["replay", "selections"], ["replay", "engram"]):
            assert all(p in _option(path, "policy").help for p in policies.names())
        for path in (["replay", "tiers"], ["replay", "engram"]):
            assert all(h in _option(path, "hardware").help for h in hardware_names())
        for path in (["replay", "tiers"], ["replay", "selections"], ["replay", "prefix"]):
            assert all(m in _option(path, "model").help for m in model_names())
        mode = _option(["replay", "selections"], "mode").help
        assert "hisparse" in mode and "plain" in mode

    def test_model_help_lists_every_accepted_name(self):
        """--model help names every name the error would accept, aliases included (from
        the registry, so a plug-in model shows up too)."""
        from toolkit.models import model_names

        every = model_names(include_aliases=True)
        assert len(every) > len(model_names())
        for path in (["replay", "tiers"], ["replay", "selections"], ["replay", "prefix"],
                     ["replay", "engram"]):
            help_text = _option(path, "model").help
            assert all(m in help_text for m in every), (path, help_text)


class TestOneLineErrors:
    @pytest.mark.parametrize(("args", "message"), [
        (["ingest", "mooncake", str(ROOT / "traces")], "is a directory; expected a file"),
        (["ingest", "selections", str(MOONCAKE), "--format", "npz"], "not an .npz archive"),
        (["replay", "tiers", "--trace", "conv", "--arrivals", "scaled:abc"],
         "F in scaled:F must be a number"),
        (["replay", "mrc", "--trace", "sm", "--max-capacity", "8", "--sizes", "a,b"],
         "--sizes must be comma-separated integers"),
        (["replay", "prefix", "--trace", "conv", "--capacity-blocks", "1k"],
         "'1k' is not an integer"),
        (["replay", "selections", "--trace", "sm", "--kv-dtype", "bf16"], "needs --model"),
        (["replay", "prefix", "--trace", "conv", "--capacity-gb", "1e30", "--model", "glm-5.2"],
         "--capacity-gb <= 1e+06"),
    ])
    def test_user_errors(self, cli_store, args, message):
        """Errors a user can cause print one `error:` line and exit 2, never a traceback."""
        res = runner.invoke(app, [*args, "--store", str(cli_store)])
        assert res.exit_code == 2, res.output
        assert res.output.startswith("error: ") and message in res.output
        assert len(res.output.splitlines()) == 1

    @pytest.mark.parametrize("args", [
        ["cost-at-interactivity", "--measurements", str(ROOT / "traces"), "--interactivity", "1"],
        ["serving", "predict", "--points", str(ROOT / "traces"), "--out", "x.csv"],
    ])
    def test_directory_instead_of_a_table(self, args):
        """A directory where a CSV/Parquet file belongs is named as such."""
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and "is a directory" in res.output

    @pytest.mark.parametrize(("args", "message"), [
        (["serving", "predict", "--points", "P", "--out", "/nonexistent/x.csv"],
         "--out /nonexistent/x.csv: directory /nonexistent does not exist"),
        (["serving", "predict", "--points", "P", "--out", "x.txt"],
         "the extension must be one of .csv, .parquet"),
        (["serving", "fit", "--out", "/nonexistent/p.json"], "does not exist"),
        (["serving", "validate", "--out-dir", str(MOONCAKE)], "exists and is not a directory"),
    ])
    def test_unwritable_outputs_fail_before_work(self, args, message):
        """Output paths the command could not write are refused first, in one line."""
        points = ROOT / "toolkit" / "data" / "inferencex" / "dsr1_serving_points.csv"
        res = runner.invoke(app, [str(points) if a == "P" else a for a in args])
        assert res.exit_code == 2 and res.output.startswith("error: --out")
        assert message in res.output and len(res.output.splitlines()) == 1



class TestUsageErrorsAndInterrupts:
    @pytest.mark.parametrize(("args", "message"), [
        (["replay", "prefix", "--bogus"],
         "error: toolkit replay prefix: No such option: --bogus (see toolkit replay prefix "
         "--help)"),
        (["replay", "selections", "--store", "s"],
         "error: toolkit replay selections: Missing option '--trace'. (see toolkit replay "
         "selections --help)"),
        (["nope"], "error: toolkit: No such command 'nope'. (see toolkit --help)"),
        (["replay", "engram", "--store", "s", "--trace", "t", "--hbm-cache-gb", "x"],
         "error: toolkit replay engram: Invalid value for '--hbm-cache-gb': Input should be "
         "a valid number, unable to parse string as a number (see toolkit replay engram "
         "--help)"),
    ])
    def test_usage_error_is_one_line(self, args, message):
        """Typer/click usage errors print one `error:` line (no box), exit 2."""
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and res.output == message + "\n"

    def test_bare_group_still_shows_its_help(self):
        """`toolkit replay` alone prints the group's help (not an error line)."""
        res = runner.invoke(app, ["replay"])
        assert "prefix" in res.output and not res.output.startswith("error:")

    def test_ctrl_c_says_what_stopped_and_exits_130(self, cli_store, monkeypatch):
        """Ctrl-C prints one line naming the interrupted command and that the store is
        intact, exit 130; the store still answers afterwards."""
        import toolkit.commands.queries as queries

        def interrupted(*a, **k):
            raise KeyboardInterrupt

        monkeypatch.setattr(queries, "run_named", interrupted)
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--query", "prefix_runs"])
        assert res.exit_code == 130
        assert res.output.strip() == (
            "interrupted: toolkit sql (Ctrl-C); the store is intact (every write is "
            "all-or-nothing: an interrupted one is finished or discarded when the store is "
            "next opened)")
        monkeypatch.undo()
        res = runner.invoke(app, ["sql", "--store", str(cli_store), "--json",
                                  "SELECT count(*) AS n FROM requests"])
        assert json.loads(res.output) == [{"n": 12_031}]


class TestOneConvention:
    @pytest.mark.parametrize("args", [
        ["hardware", "list"], ["models", "list"],
        ["cost", "--hardware", "gb200", "--tokens-per-s-per-gpu", "11742"],
    ])
    def test_json_alias_csv_and_output(self, args, tmp_path):
        """Commands share --format/--json/--output: --json equals --format json, and the
        CSV and the --output file hold the same rows."""
        as_json = runner.invoke(app, [*args, "--json"])
        assert as_json.exit_code == 0, as_json.output
        assert as_json.output == runner.invoke(app, [*args, "--format", "json"]).output
        rows = json.loads(as_json.output)
        rows = rows if isinstance(rows, list) else [rows]
        csv = pl.read_csv(runner.invoke(app, [*args, "--format", "csv"]).stdout_bytes)
        assert csv.height == len(rows) and csv.columns == list(rows[0])
        out = tmp_path / "rows.parquet"
        assert runner.invoke(app, [*args, "--output", str(out)]).exit_code == 0
        assert pl.read_parquet(out).height == len(rows)

    def test_cost_figure(self):
        """The cost command's figure through the shared output: $0.0440/M at 11,742 tok/s."""
        res = runner.invoke(app, ["cost", "--hardware", "gb200", "--tokens-per-s-per-gpu",
                                  "11742", "--json"])
        assert round(json.loads(res.output)["usd_per_million_tokens"], 4) == 0.0440


class TestReadableOutput:
    """Issue 35 points 3, 8-10: tables for people carry units and separators; JSON keeps
    the raw numbers and keys."""

    def test_format_table_units_and_integers(self):
        """Whole numbers get separators (integral floats too), ``*_bytes`` read in GB and
        ``*_s`` in the unit of their largest value, the unit in the header, no dtype row."""
        from toolkit.commands.output import format_table

        df = pl.DataFrame({"batch_per_gpu": [240.0, 64.0], "host_used_peak_bytes":
                           [171_613_777_920, 2_500_000_000], "miss_latency_s": [1.7034e-06,
                                                                              1.3e-06],
                           "b_minus_a": [-8.4591856e7, 0.5], "name": ["a", "b"]})
        lines = format_table(df).splitlines()
        assert lines[0].split() == ["batch_per_gpu", "host_used_peak", "(GB)",
                                    "miss_latency", "(µs)", "b_minus_a", "name"]
        assert set(lines[1]) == {"─"} and len(lines) == 4
        assert lines[2].split() == ["240", "171.6", "1.703", "-84,591,856", "a"]
        assert lines[3].split() == ["64", "2.500", "1.300", "0.5000", "b"]  # 4 significant
        assert "i64" not in format_table(df) and "f64" not in format_table(df)

    def test_notebook_table_html_and_text(self):
        """``toolkit.tables.Table``: the notebooks' tables, HTML and text, formatted as the
        commands print them (units and $ in headers, whole numbers, long text last)."""
        from toolkit.tables import Table

        df = pl.DataFrame({"hardware": ["gb200"],
                           "layout": ["disagg P24/D16 decode TP16 EP16 DPA+MTP conc 128"],
                           "gpus": [40.0],
                           "usd_per_mtok_total": [0.12377], "host_dram_gb": [256.0]})
        text = repr(Table(df)).splitlines()
        assert text[0].split() == ["hardware", "gpus", "$/Mtok_total", "host_dram", "(GB)",
                                   "layout"]
        assert text[2].split()[:4] == ["gb200", "40", "0.1238", "256"]
        page = Table(df)._repr_html_()
        assert "<th title='usd_per_mtok_total' style='text-align:right'>$/Mtok total</th>" \
            in page and page.index("'layout'") > page.index("'host_dram_gb'")
        assert ">40</td>" in page and "40.0" not in page
        assert "2 more rows" in repr(Table(pl.concat([df] * 3), limit=1))

    def test_notebook_table_percent_and_bands(self):
        """``Table(df, percent=...)`` shows shares as percentages with ``(%)`` in the
        header; a band's ends read in their figure's unit (``p90_ttft_s_low`` in s beside
        ``p90_ttft_s``, not in ms); an unknown percent column is one clear error."""
        from toolkit.tables import Table

        df = pl.DataFrame({"users": [8, 16], "gpu": [0.903, 0.548], "p90_ttft_s": [1.3, 2.0],
                           "p90_ttft_s_low": [0.72, 0.9], "p90_ttft_s_high": [7.1, 9.9]})
        text = repr(Table(df, percent=("gpu",))).splitlines()
        assert text[0].split() == ["users", "gpu", "(%)", "p90_ttft", "(s)", "p90_ttft_low",
                                   "(s)", "p90_ttft_high", "(s)"]
        assert text[2].split() == ["8", "90.30", "1.300", "0.720", "7.100"]
        assert ">gpu (%)</th>" in Table(df, percent=("gpu",))._repr_html_()
        with pytest.raises(ValueError, match="no column 'host'"):
            Table(df, percent=("host",))

    def test_decimal_sums_read_as_numbers(self):
        """DuckDB's ``sum()`` of integers arrives as a Decimal column (HUGEINT): shown with
        separators like any whole number, not as ``1057408``."""
        import duckdb

        from toolkit.tables import Table, value_text

        df = duckdb.sql("SELECT sum(x) AS lookups, 5::DECIMAL(10, 2) AS d "
                        "FROM range(1000) t(x)").pl()
        assert repr(Table(df)).splitlines()[2].split() == ["499,500", "5"]
        assert value_text("lookups", df["lookups"][0]) == "499,500"

    def test_prefix_sweep_one_row_per_capacity(self, cli_store):
        """Several capacities print one row each (capacity, tokens, hit ratios, time), not a
        block per capacity, and the kernel load is reported apart from every elapsed_s; JSON
        keeps every key of the run rows."""
        args = ["replay", "prefix", "--store", str(cli_store), "--trace", "conv",
                "--capacity-blocks", "1000,10000,30000"]
        res = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        assert len(lines) == 6 and not lines[0].startswith("-[ row")
        assert lines[0].split()[:4] == ["policy", "capacity_blocks", "capacity_tokens",
                                        "token_hit_ratio"] and "elapsed (" in lines[0]
        assert [ln.split()[1:3] for ln in lines[2:5]] == [
            ["1,000", "512,000"], ["10,000", "5,120,000"], ["30,000", "15,360,000"]]
        assert lines[5].startswith("(elapsed_s times each replay alone; loading the kernels "
                                   "took ")
        rows = json.loads(runner.invoke(app, [*args, "--json"]).output)
        assert all({"config_json", "elapsed_s", "block_hits"} <= r.keys() for r in rows)

    def test_record_values_carry_units(self, cli_store):
        """A one-run summary shows integers with separators and times with their unit."""
        res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                                  "conv", "--capacity-blocks", "1000"])
        fields = {ln.split()[0]: ln.split()[1:] for ln in res.output.splitlines()}
        assert fields["block_hits"] == ["12,831"] and fields["prompt_tokens"] == [
            "144,793,823"]
        assert fields["elapsed_s"][1] in ("s", "ms", "µs")

    def test_miss_latency_defaults_to_a_layer_summary(self, cli_store):
        """`sql --query miss_latency` summarises per layer (p50/p90/p99) in µs by default;
        per=step stays available and JSON keeps seconds."""
        base = ["sql", "--store", str(cli_store), "--query", "miss_latency"]
        runner.invoke(app, ["replay", "selections", "--store", str(cli_store), "--trace", "sm",
                            "--buffer-tokens", "64", "--model", "glm-5.2", "--json"])
        rows = json.loads(runner.invoke(app, [*base, "--json"]).output)
        assert {r["per"] for r in rows} == {"layer"} and len(rows) % 30 == 0
        assert all(1e-7 < r["p50_miss_latency_s"] < 1e-4 for r in rows if r["mean_misses"])
        text = runner.invoke(app, base, env={"COLUMNS": "250"}).output
        assert "p50_miss_latency (µs)" in text and "p99_miss_latency (µs)" in text
        assert "e-06" not in text
        steps = json.loads(runner.invoke(app, [*base, "--param", "per=step", "--json"]).output)
        assert {r["per"] for r in steps} == {"step"}


class TestEngramWorkingSet:
    def test_warns_when_the_cache_holds_every_row(self, tmp_path):
        """`replay engram` says when the HBM cache holds the trace's whole working set
        (every miss a first touch), and stays quiet when it does not."""
        root = str(tmp_path / "s")
        res = runner.invoke(app, ["record", "engram", "--store", root, "--name", "e", "--text",
                                  str(SMOLLM2 / "texts" / "LICENSES.txt"), "--json"])
        assert res.exit_code == 0, res.output
        base = ["replay", "engram", "--store", root, "--trace", "e", "--json"]
        big = runner.invoke(app, [*base, "--hbm-cache-gb", "1"])
        row = json.loads(big.stdout)
        assert row["capacity_rows"] >= row["distinct_rows"] == 5_662
        assert big.stderr.startswith("warning: the HBM cache (7,812,500 rows) holds all 5,662 "
                                     "distinct rows of 'e': every miss is a first touch")
        small = runner.invoke(app, [*base, "--hbm-cache-gb", "0.00001"])
        assert small.exit_code == 0 and small.stderr == ""
