"""The command line, end to end through typer's runner."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from toolkit.cli import app

from .conftest import AZURE, MOONCAKE

runner = CliRunner()

PREFIX_KEYS = {
    "requests", "prompt_tokens", "block_lookups", "block_hits", "block_hit_ratio",
    "hit_tokens", "token_hit_ratio", "prefix_hit_blocks", "prefix_token_hit_ratio",
}


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli") / "store"
    res = runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", str(root)])
    assert res.exit_code == 0, res.output
    assert "ingested 12,031 rows" in res.output
    return root


def test_ingest_name_defaults_to_stem_and_refuses_duplicates(cli_store):
    args = ["ingest", "mooncake", str(MOONCAKE), "--store", str(cli_store)]
    res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "conversation_trace" in res.output and "--replace" in res.output
    assert runner.invoke(app, [*args, "--replace"]).exit_code == 0


def test_ingest_azure_with_name(tmp_path):
    res = runner.invoke(
        app, ["ingest", "azure", str(AZURE), "--store", str(tmp_path / "s"), "--name", "az"]
    )
    assert res.exit_code == 0 and "requests/az" in res.output


def test_ingest_bad_file_exit_code_and_message(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n{\n')
    res = runner.invoke(app, ["ingest", "mooncake", str(bad), "--store", str(tmp_path / "s")])
    assert res.exit_code == 2
    assert f"{bad}:2" in res.output and "invalid JSON" in res.output


def test_replay_prefix_json(cli_store):
    res = runner.invoke(app, ["replay", "prefix", "--store", str(cli_store), "--trace",
                              "conversation_trace", "--policy", "lru", "--capacity-blocks",
                              "1000", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert PREFIX_KEYS <= out.keys()
    assert (out["block_lookups"], out["block_hits"]) == (288_500, 12_831)


def test_replay_unknown_policy_and_trace(cli_store):
    base = ["replay", "prefix", "--store", str(cli_store)]
    res = runner.invoke(app, [*base, "--trace", "conversation_trace", "--policy", "nope"])
    assert res.exit_code == 2 and "unknown policy 'nope'" in res.output
    res = runner.invoke(app, [*base, "--trace", "nope"])
    assert res.exit_code == 2 and "known: conversation_trace" in res.output


@pytest.mark.parametrize(("fmt", "expected"), [
    ("csv", "n\n12031\n"),
    ("json", '[{"n": 12031}]\n'),
])
def test_sql_formats(cli_store, fmt, expected):
    res = runner.invoke(app, ["sql", "--store", str(cli_store), "--format", fmt,
                              "SELECT count(*) AS n FROM requests"])
    assert res.exit_code == 0 and res.output == expected


def test_sql_table_format(cli_store):
    res = runner.invoke(app, ["sql", "--store", str(cli_store),
                              "SELECT trace, count(*) AS n FROM requests GROUP BY trace"])
    assert res.exit_code == 0 and "conversation_trace" in res.output and "12,031" in res.output


def test_sql_bad_query_prints_duckdb_error(cli_store):
    res = runner.invoke(app, ["sql", "--store", str(cli_store), "SELECT nope FROM requests"])
    assert res.exit_code == 1
    assert "Binder Error" in res.output and "nope" in res.output
    # a wrong table or column name says where to look them up, on the same one line
    res = runner.invoke(app, ["sql", "--store", str(cli_store), "SELECT * FROM nope"])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "Catalog Error" in res.output and f"toolkit info --store {cli_store}" in res.output


def test_request_traces_label_real_and_synthetic(tmp_path):
    """Ingested timelines are labelled real with their file; generated ones SYNTHETIC."""
    root = str(tmp_path / "s")
    assert runner.invoke(app, ["ingest", "azure", str(AZURE), "--store", root,
                               "--name", "az"]).exit_code == 0
    res = runner.invoke(app, ["synth", "agentic", "--store", root, "--name", "agents",
                              "--sessions", "3", "--seed", "1"])
    assert res.exit_code == 0 and "SYNTHETIC" in res.output, res.output
    res = runner.invoke(app, ["sql", "--store", root, "--format", "csv",
                              "SELECT trace, format, synthetic, source LIKE 'SYNTHETIC%' AS s "
                              "FROM request_traces ORDER BY trace"])
    assert res.output == ("trace,format,synthetic,s\nagents,synth-agentic,true,true\n"
                          "az,azure,false,false\n")
    res = runner.invoke(app, ["sql", "--store", root, "--format", "csv",
                              "SELECT count(DISTINCT session_id) AS n FROM requests "
                              "WHERE trace = 'agents'"])
    assert res.output == "n\n3\n"


def test_cost_at_interactivity_cli(tmp_path):
    """A measured point at the target is reproduced exactly ($0.0440/M for GB200 at 150)."""
    path = tmp_path / "m.csv"
    path.write_text("hardware,engine,concurrency,tput_per_gpu,median_interactivity,p90_ttft_s\n"
                    "gb200,sglang,64,14000,100,10\ngb200,sglang,32,11742,150,8\n"
                    "gb200,sglang,16,8000,220,5\n")
    res = runner.invoke(app, ["cost-at-interactivity", "--measurements", str(path),
                              "--interactivity", "150", "--json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    assert row["tput_per_gpu"] == 11742.0 and round(row["usd_per_million_tokens"], 4) == 0.044
    res = runner.invoke(app, ["cost-at-interactivity", "--measurements", str(tmp_path / "x.csv"),
                              "--interactivity", "150"])
    assert res.exit_code == 2
