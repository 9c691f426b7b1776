"""Request-timeline readers of issue 14: strict Mooncake geometry, Qwen-Bailian, BurstGPT,
agentic (Weka) sessions; each refuses what it does not understand and says what it skips.

The samples under tests/data/ are hand-written in each documented format (not real
traces); the figures asserted here are worked out by hand in the comments.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app
from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file
from toolkit.policies import policies
from toolkit.replay.prefix import PrefixReplayConfig, block_stream, replay_prefix, summarize

from .conftest import AZURE, MOONCAKE

DATA = Path(__file__).resolve().parent / "data"
BAILIAN = DATA / "bailian_sample.jsonl"
BURST = DATA / "burstgpt_sample.csv"
BURST_SESSIONS = DATA / "burstgpt_sessions_sample.csv"
AGENTIC = DATA / "agentic_sample.jsonl"
runner = CliRunner()


def full_snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def kept(store):
    """A store already holding a timeline, so 'unchanged' is checked against real data."""
    ingest_file(store, "azure", AZURE, "az")
    return store


def refused(store, fmt, path, line, field, msg, **options) -> TraceFormatError:
    """Ingest must raise at (line, field) with ``msg`` and leave the store byte-identical."""
    before = full_snapshot(store.root)
    with pytest.raises(TraceFormatError) as err:
        ingest_file(store, fmt, path, "bad", **options)
    assert (err.value.line, err.value.field) == (line, field), str(err.value)
    assert msg in str(err.value) and str(path) in str(err.value), str(err.value)
    assert "\n" not in str(err.value)
    assert full_snapshot(store.root) == before
    return err.value


def write_jsonl(path: Path, recs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# -- Mooncake: strict block geometry ----------------------------------------------------
class TestMooncakeStrict:
    def test_rule_holds_on_every_row_of_the_real_trace(self, mooncake_store):
        """len(hash_ids) == ceil(input_length / 512) on all 12,031 real rows (it ingests),
        checked again here independently of the reader."""
        rows = [json.loads(line) for line in MOONCAKE.read_text().splitlines()]
        assert len(rows) == 12_031
        assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 512) for r in rows)
        n, bt = mooncake_store.query("SELECT count(*), min(block_tokens) FROM requests "
                                     "WHERE trace = 'conv'").row(0)
        assert (n, bt) == (12_031, 512)

    def test_wrong_count_names_line_field_and_store_unchanged(self, kept, tmp_path):
        p = write_jsonl(tmp_path / "m.jsonl", [
            {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
            {"timestamp": 5, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}])
        refused(kept, "mooncake", p, 2, "hash_ids",
                "2 block ids for input_length 1025, expected 3 (ceil(input_length / 512))")

    def test_bailian_rows_get_the_bailian_hint(self, kept):
        """The issue's case: Qwen-Bailian rows used to ingest with exit 0 as mooncake."""
        e = refused(kept, "mooncake", BAILIAN, 1, "hash_ids", "expected 1")
        assert "bailian" in str(e) and "toolkit ingest bailian" in str(e)

    def test_bailian_rows_cli_exit_2_one_line(self, tmp_path):
        res = runner.invoke(app, ["ingest", "mooncake", str(BAILIAN), "--store",
                                  str(tmp_path / "s")])
        assert res.exit_code == 2
        assert f"{BAILIAN}:1" in res.output and "bailian" in res.output
        assert len(res.output.strip().splitlines()) == 1

    def test_other_block_size_hint(self, kept, tmp_path):
        p = write_jsonl(tmp_path / "m.jsonl", [
            {"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2, 3, 4]}])
        e = refused(kept, "mooncake", p, 1, "hash_ids", "expected 2")
        assert "--block-tokens 256" in str(e)

    def test_block_tokens_and_time_unit_options(self, store, tmp_path):
        """--block-tokens 16 --time-unit s: 1.386 s stays 1.386 s, 16-token blocks stored."""
        p = write_jsonl(tmp_path / "m.jsonl", [
            {"timestamp": 10.0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]},
            {"timestamp": 11.386, "input_length": 16, "output_length": 2, "hash_ids": [1]}])
        ingest_file(store, "mooncake", p, "v", block_tokens=16, time_unit="s")
        t = store.read("requests", "v")
        assert t["arrival_s"].to_pylist() == [0.0, 11.386 - 10.0]
        assert t["block_tokens"].to_pylist() == [16, 16]

    def test_cli_options(self, tmp_path):
        p = write_jsonl(tmp_path / "m.jsonl", [
            {"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}])
        s = str(tmp_path / "s")
        res = runner.invoke(app, ["ingest", "mooncake", str(p), "--store", s,
                                  "--block-tokens", "16", "--time-unit", "s"])
        assert res.exit_code == 0, res.output
        res = runner.invoke(app, ["ingest", "mooncake", str(p), "--store", s, "--name", "x",
                                  "--time-unit", "h"])
        assert res.exit_code == 2 and "--time-unit" in res.output

    def test_extra_keys_noted_once(self, store, tmp_path):
        rec = {"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1],
               "user": "a"}
        p = write_jsonl(tmp_path / "m.jsonl", [rec, rec | {"timestamp": 1}])
        res = ingest_file(store, "mooncake", p)
        assert len(res.notes) == 1 and "'user'" in res.notes[0]


# -- Qwen-Bailian -----------------------------------------------------------------------
class TestBailian:
    def test_sample_lands_exactly(self, store):
        ingest_file(store, "bailian", BAILIAN, "b")
        t = store.read("requests", "b").to_pydict()
        assert t["arrival_s"] == [0.0, 0.512, 1.386, 2.0, 2.5]
        assert t["input_tokens"] == [40, 32, 64, 70, 20]
        assert t["output_tokens"] == [10, 5, 20, 0, 8]
        assert t["block_tokens"] == [16] * 5
        # chat 3's parent is 1, chat 4's is 3 (root 1), chat 5's is 2
        assert t["session_id"] == [1, 2, 1, 1, 2]
        assert t["turn"] == [1, 1, 2, 3, 2]
        types = store.query("SELECT request_type FROM requests JOIN request_labels "
                            "USING (trace, request_id) ORDER BY request_id")
        assert types["request_type"].to_list() == ["text", "search", "text", "file", "image"]

    def test_unchained_ids_block_hits_differ_from_prefix_hits(self, store):
        """Unbounded LRU over the sample. Lookups 3+2+4+5+2 = 16. Hits per request:
        0; 1 (id 2 after a missed 7); 3; 4; 1 (id 2 after a missed 9) = 9 block hits,
        of which the leading runs are 0+0+3+4+0 = 7 prefix-hit blocks. Tokens: request 2
        hits a 16-token block, request 3 three of 16, request 4 four of 16 (its fifth
        block holds 70-64 = 6 tokens and misses), request 5 hits its 4-token tail:
        hit_tokens 16+48+64+4 = 132, prefix_hit_tokens 48+64 = 112, prompt 226."""
        ingest_file(store, "bailian", BAILIAN, "b")
        row = replay_prefix(store, PrefixReplayConfig("b", "lru", None), save=False)
        assert (row["block_lookups"], row["block_hits"], row["prefix_hit_blocks"]) == (16, 9, 7)
        assert (row["hit_tokens"], row["prefix_hit_tokens"], row["prompt_tokens"]) == \
            (132, 112, 226)

    def test_prefix_hits_independent_count(self, store):
        """The same two counts from a plain-Python replay of the sample (unbounded cache:
        a block hits iff its id was looked up before)."""
        recs = [json.loads(line) for line in BAILIAN.read_text().splitlines()]
        seen: set[int] = set()
        hits = prefix = 0
        for r in recs:
            run = True
            for h in r["hash_ids"]:
                hit = h in seen
                hits += hit
                run = run and hit
                prefix += run
                seen.add(h)
        ingest_file(store, "bailian", BAILIAN, "b")
        s = block_stream(store.read("requests", "b"))
        sim = policies.get("lru").simulate(s.keys, s.n_keys, s.n_keys)
        got = summarize(s, sim.hits)
        assert (got["block_hits"], got["prefix_hit_blocks"]) == (hits, prefix) == (9, 7)

    def test_orphan_parent_becomes_session_and_is_noted(self, store, tmp_path):
        p = write_jsonl(tmp_path / "b.jsonl", [
            {"chat_id": 8, "parent_chat_id": 77, "timestamp": 0.5, "input_length": 16,
             "output_length": 1, "type": "text", "turn": 4, "hash_ids": [3]},
            {"chat_id": 9, "parent_chat_id": 8, "timestamp": 0.7, "input_length": 0,
             "output_length": 1, "type": "text", "turn": 5, "hash_ids": [], "extra": 1}])
        res = ingest_file(store, "bailian", p, "o")
        assert store.read("requests", "o")["session_id"].to_pylist() == [77, 77]
        assert any("1 request(s)" in n for n in res.notes)
        assert any("'extra'" in n for n in res.notes)

    @pytest.mark.parametrize(("over", "field", "msg"), [
        ({"hash_ids": [1, 2]}, "hash_ids", "2 block ids for input_length 20, expected 1 or 2"),
        ({"chat_id": -1}, "chat_id", "expected an integer >= 0"),
        ({"parent_chat_id": -2}, "parent_chat_id", "or -1 for a first turn"),
        ({"parent_chat_id": 6}, "parent_chat_id", "own parent"),
        ({"chat_id": 5}, "chat_id", "repeats the chat_id of line 1"),
        ({"timestamp": 0.1}, "timestamp", "earlier than"),
        ({"type": 3}, "type", "expected a string"),
        ({"turn": 2**31}, "turn", "int32"),
        ({"turn": -1}, "turn", "must be >= 0"),
    ])
    def test_refused(self, kept, tmp_path, over, field, msg):
        base = {"chat_id": 5, "parent_chat_id": -1, "timestamp": 1.0, "input_length": 20,
                "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1]}
        second = {**base, "chat_id": 6, "timestamp": 2.0, "hash_ids": [1, 2],
                  "input_length": 20} | over
        if "hash_ids" in over:
            second["input_length"] = 20
            second["hash_ids"] = [1, 2, 3]
            msg = "3 block ids for input_length 20, expected 1 or 2"
        p = write_jsonl(tmp_path / "b.jsonl", [base, second])
        refused(kept, "bailian", p, 2, field, msg)

    def test_mooncake_file_hint(self, kept):
        head = [json.loads(line) for line in MOONCAKE.read_text().splitlines()[:3]]
        p = write_jsonl(Path(kept.root).parent / "m.jsonl", head)
        e = refused(kept, "bailian", p, 1, "chat_id", "missing")
        assert "mooncake" in str(e)


# -- BurstGPT ---------------------------------------------------------------------------
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


class TestBurstGPT:
    def test_sample_lands_exactly(self, store):
        res = ingest_file(store, "burstgpt", BURST, "g")
        t = store.read("requests", "g").to_pydict()
        assert t["arrival_s"] == [0.0, 40.0, 113.0, 113.0, 246.5]  # Timestamp - 5
        assert t["input_tokens"] == [472, 1087, 417, 1360, 85]
        assert t["output_tokens"] == [18, 0, 217, 0, 12]
        assert t["block_hashes"] == [[]] * 5 and t["session_id"] == [None] * 5
        assert res.notes == (f"{BURST}: kept 2 failed request(s) (0 response tokens) of 5",)

    def test_labels_filter_in_a_query(self, store):
        ingest_file(store, "burstgpt", BURST, "g")
        n, tokens = store.query(
            "SELECT count(*), sum(input_tokens)::BIGINT FROM requests "
            "JOIN request_labels USING (trace, request_id) "
            "WHERE model = 'GPT-4' AND log_type = 'API log'").row(0)
        assert (n, tokens) == (1, 417)

    def test_model_option_keeps_one_model(self, store):
        res = ingest_file(store, "burstgpt", BURST, "g4", model="GPT-4")
        t = store.read("requests", "g4").to_pydict()
        assert t["request_id"] == [2, 4]  # positions in the file
        assert t["arrival_s"] == [0.0, 133.5]  # from the first kept row
        assert any("kept 2 'GPT-4' row(s) of 5" in n for n in res.notes)
        assert not any("failed" in n for n in res.notes)

    def test_model_option_unknown_model(self, kept):
        refused(kept, "burstgpt", BURST, None, "Model", "'ChatGPT', 'GPT-4'", model="gpt-5")

    def test_cli_model_option(self, tmp_path):
        res = runner.invoke(app, ["ingest", "burstgpt", str(BURST), "--store",
                                  str(tmp_path / "s"), "--model", "ChatGPT"])
        assert res.exit_code == 0, res.output
        assert "ingested 3 rows" in res.output and "2 failed" in res.output

    def test_sessions_and_extra_column(self, store):
        res = ingest_file(store, "burstgpt", BURST_SESSIONS, "gs")
        t = store.read("requests", "gs").to_pydict()
        assert t["session_id"] == [12, 13, 12, None]
        assert t["turn"] == [0, 0, 1, None]
        assert any("'Elapsed time'" in n for n in res.notes)

    @pytest.mark.parametrize(("row", "field", "msg"), [
        ("x,ChatGPT,1,1,2,API log", "Timestamp", "non-negative decimal"),
        ("3,ChatGPT,1,1,3,API log", "Total tokens", "is not Request tokens + Response"),
        ("3,ChatGPT,-1,1,0,API log", "Request tokens", "must be >= 0"),
        ("3,ChatGPT,1e3,1,0,API log", "Request tokens", "non-negative integer"),
        ("3,,1,1,2,API log", "Model", "empty"),
        ("3,ChatGPT,1,1,2, ", "Log Type", "empty"),
        ("1,ChatGPT,1,1,2,API log", "Timestamp", "earlier than"),
    ])
    def test_refused(self, kept, tmp_path, row, field, msg):
        p = tmp_path / "g.csv"
        p.write_text(BURST_HEADER + "2,ChatGPT,1,1,2,API log\n" + row + "\n")
        refused(kept, "burstgpt", p, 3, field, msg)

    def test_azure_file_hint_both_ways(self, kept):
        e = refused(kept, "burstgpt", AZURE, 1, "Timestamp", "missing column")
        assert "azure" in str(e)
        e = refused(kept, "azure", BURST, 1, "TIMESTAMP", "missing column")
        assert "toolkit ingest burstgpt" in str(e)


# -- Agentic sessions (Weka trace format) ------------------------------------------------
def agentic_session(**over) -> dict:
    rec = {"id": "s", "models": ["m"], "block_size": 64, "hash_id_scope": "local",
           "requests": [{"t": 0.0, "type": "n", "model": "m", "in": 64, "out": 1,
                         "hash_ids": [0]}]}
    rec.update(over)
    return rec


class TestAgentic:
    def test_sample_lands_exactly(self, store):
        res = ingest_file(store, "agentic", AGENTIC, "a")
        t = store.read("requests", "a").to_pydict()
        assert t["arrival_s"] == [0.0, 3.0, 4.0, 6.0, 0.0, 2.5]  # session B starts at t=10
        assert t["input_tokens"] == [200, 128, 192, 300, 64, 130]
        assert t["output_tokens"] == [30, 10, 12, 40, 5, 6]
        assert t["session_id"] == [0, 0, 0, 0, 1, 1]
        assert t["turn"] == [0, 1, 2, 3, 0, 1]
        assert t["block_tokens"] == [64] * 6
        # local ids renumbered: session A's 0..6 stay 0..6, session B's 0..2 become 7..9
        assert t["block_hashes"] == [[0, 1, 2, 3], [0, 5], [0, 5, 6], [0, 1, 2, 3, 4], [7],
                                     [7, 8, 9]]
        lab = store.read("request_labels", "a").to_pydict()
        assert lab["model"] == ["claude-x", "claude-y", "claude-y", "claude-x", "claude-x",
                                "claude-x"]
        assert lab["request_type"] == ["n", "subagent:Explore/n", "subagent:Explore/s", "s",
                                       "n", "n"]
        assert any("'user_tag'" in n for n in res.notes)
        assert any("not stored: api_time, think_time, ttft" in n for n in res.notes)

    def test_prefix_replay_keeps_sessions_apart(self, store):
        """Unbounded LRU in arrival order A0, B0, B1, A1, A2, A3 (ties by request id):
        lookups 4+1+3+2+3+5 = 18; hits 0, 0, 1 (B's 7), 1 (0), 2 (0, 5), 4 (0..3) = 8,
        all leading. Without renumbering B0's id 0 would hit A's block 0."""
        ingest_file(store, "agentic", AGENTIC, "a")
        row = replay_prefix(store, PrefixReplayConfig("a", "lru", None), save=False)
        assert (row["block_lookups"], row["block_hits"], row["prefix_hit_blocks"]) == (18, 8, 8)

    def test_replay_tiers_runs_the_sessions(self, store):
        """`replay tiers` runs closed-loop over the ingested sessions (one user at a time:
        the six calls in session order)."""
        from toolkit.cost.from_replay import run_tiers
        from toolkit.replay.tiers import TierReplayConfig

        ingest_file(store, "agentic", AGENTIC, "a")
        res = run_tiers(store, TierReplayConfig("a", concurrency=1), save=False)
        got = res.requests.to_pydict()
        assert sorted(zip(got["session_id"], got["turn"], strict=True)) == \
            [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
        assert res.summary["requests"] == 6

    def test_pretty_printed_single_session(self, store, tmp_path):
        p = tmp_path / "one.json"
        p.write_text(json.dumps(agentic_session(), indent=2))
        assert ingest_file(store, "agentic", p).rows == 1

    @pytest.mark.parametrize(("over", "field", "msg"), [
        ({"hash_id_scope": "global"}, "hash_id_scope", "expected 'local'"),
        ({"block_size": 0}, "block_size", "must be 1..2^31-1"),
        ({"id": 5}, "id", "expected a string"),
        ({"models": "m"}, "models", "list of strings"),
        ({"tool_tokens": -1}, "tool_tokens", "must be >= 0"),
        ({"requests": {}}, "requests", "expected a list"),
        ({"requests": [{"t": 0, "type": "x"}]}, "requests[0].type", "'n', 's' or 'subagent'"),
        ({"requests": [{"t": 0, "type": "n", "model": "m", "in": 1}]}, "requests[0].out",
         "missing"),
        ({"requests": [{"t": 0, "type": "n", "model": "m", "in": 1, "out": 1,
                        "hash_ids": [1, "a"]}]}, "requests[0].hash_ids[1]", "int64 block id"),
        ({"requests": [{"t": 0, "type": "subagent", "agent_id": "a", "subagent_type": "E",
                        "status": "completed", "models": [], "requests": [
                            {"t": 0, "type": "subagent"}]}]},
         "requests[0].requests[0].type", "expected 'n' or 's'"),
        ({"requests": [{"t": None, "type": "n", "model": "m", "in": 1, "out": 1}]},
         "requests[0].t", "finite number"),
    ])
    def test_refused(self, kept, tmp_path, over, field, msg):
        p = write_jsonl(tmp_path / "a.jsonl", [agentic_session(), agentic_session(**over)])
        refused(kept, "agentic", p, 2, field, msg)

    def test_bailian_file_hint(self, kept):
        e = refused(kept, "agentic", BAILIAN, 1, "id", "missing")
        assert "toolkit ingest bailian" in str(e)


def test_dsa_jsonl_notes_extra_keys_and_names_a_timeline_file(kept, tmp_path):
    p = write_jsonl(tmp_path / "d.jsonl", [
        {"event": "dsa_topk", "request_id": 0, "layer_id": 0, "step_idx": 0,
         "seq_len_current": 4, "selected_token_pos": [1, 2], "ts_ns": 5}])
    res = ingest_file(kept, "dsa-jsonl", p, "d")
    assert len(res.notes) == 1 and "'ts_ns'" in res.notes[0]
    e = refused(kept, "dsa-jsonl", BAILIAN, None, None, "no 'dsa_topk' events")
    assert "toolkit ingest bailian" in str(e)


@pytest.mark.parametrize(("fmt", "path", "line", "field", "fits"), [
    ("mooncake", BURST, 1, None, "toolkit ingest burstgpt"),
    ("bailian", AZURE, 1, None, "toolkit ingest azure"),
    ("agentic", BURST, 1, None, "toolkit ingest burstgpt"),
    ("azure", MOONCAKE, 1, "TIMESTAMP", "toolkit ingest mooncake"),
    ("burstgpt", BAILIAN, 1, "Timestamp", "toolkit ingest bailian"),
    ("burstgpt", AGENTIC, 1, "Timestamp", "toolkit ingest agentic"),
])
def test_a_file_of_another_format_is_named(kept, fmt, path, line, field, fits):
    """JSONL readers given CSV, CSV readers given JSONL: the refusal names the reader."""
    e = refused(kept, fmt, path, line, field, "")
    assert fits in str(e)


def test_replacing_a_labelled_trace_leaves_no_stale_labels(store):
    ingest_file(store, "burstgpt", BURST, "t")
    assert store.read("request_labels", "t").num_rows == 5
    ingest_file(store, "mooncake", MOONCAKE, "t", replace=True)
    assert store.read("request_labels", "t").num_rows == 0
    n = store.query("SELECT count(*) FROM requests JOIN request_labels "
                    "USING (trace, request_id) WHERE trace = 't'").item()
    assert n == 0


def test_cli_lists_new_readers():
    res = runner.invoke(app, ["ingest", "--help"])
    assert res.exit_code == 0
    assert all(f in res.output for f in ("bailian", "burstgpt", "agentic"))


def test_open_store_smoke(tmp_path):
    """The public entry point reads the sample as well."""
    with toolkit.open_store(tmp_path / "s", create=True) as s:
        assert ingest_file(s, "bailian", BAILIAN).rows == 5


class TestSelectionReadersSayWhatTheyIgnore:
    def test_npz_extra_array_noted(self, store, tmp_path):
        """An npz array the reader does not read is named once in the ingest notes."""
        import numpy as np

        p = tmp_path / "s.npz"
        np.savez(p, topk=np.array([[[0, 1]], [[1, 2]]]), seq_len=np.array([3, 4]),
                 scores=np.zeros(2))
        res = ingest_file(store, "npz", p, "s")
        assert len(res.notes) == 1 and "'scores'" in res.notes[0]

    def test_parquet_extra_column_noted(self, store, tmp_path):
        """A Parquet column outside the selection schema is named once in the notes."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = tmp_path / "s.parquet"
        pq.write_table(pa.table({"request_id": [0, 0], "step": [0, 1], "layer": [0, 0],
                                 "seq_len": [3, 4], "topk": [[0, 1], [1, 2]],
                                 "score": [0.5, 0.7]}), p)
        res = ingest_file(store, "parquet", p, "s")
        assert len(res.notes) == 1 and "'score'" in res.notes[0]

    def test_bundle_extra_metadata_column_noted(self, store, tmp_path):
        """A bundle's metadata column outside the schema is named in the notes; the real
        bundled trace has none."""
        import shutil
        from pathlib import Path

        import pyarrow.parquet as pq

        src = Path(__file__).resolve().parents[1] / "traces" / "smollm2"
        assert ingest_file(store, "bundle", src, "real", select="smollm2-softmax-sum").notes == ()
        dst = tmp_path / "b"
        shutil.copytree(src, dst)
        meta = pq.read_table(dst / "selection_traces.parquet")
        pq.write_table(meta.append_column("notes", meta.column("source")),
                       dst / "selection_traces.parquet")
        res = ingest_file(store, "bundle", dst, "b", select="smollm2-softmax-sum")
        assert len(res.notes) == 1 and "'notes'" in res.notes[0]
