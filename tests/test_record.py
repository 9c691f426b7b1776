"""The SmolLM2 recorder: the NumPy port is the trained model, and its selections are exact."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from toolkit import schema
from toolkit.record import (
    load_smollm2,
    record_request,
    record_selections,
    teacher_forced_full,
    topk_positions,
)
from toolkit.record.checks import greedy_generate, perplexity
from toolkit.record.gguf_model import chat_prompt

TEXTS = Path(__file__).resolve().parents[1] / "traces" / "smollm2" / "texts"


@pytest.fixture(scope="module")
def model32():
    return load_smollm2("float32")


@pytest.fixture(scope="module")
def model64():
    return load_smollm2("float64")


@pytest.fixture(scope="module")
def license_ids(model32):
    return model32.encode((TEXTS / "python_license.txt").read_text(encoding="utf-8"))


class TestPort:
    def test_tokenizer_matches_gguf_vocab(self, model32):
        """Control tokens encode as single ids, digits split, no BOS is prepended."""
        ids = model32.encode("<|im_start|>user\nIn 2024<|im_end|>")
        assert ids[0] == 1 and ids[-1] == 2
        assert model32.tokenizer.decode(model32.encode("In 2024")) == "In 2024"
        assert len(model32.encode(" 2024")) == 5  # "Ġ", "2", "0", "2", "4"

    def test_greedy_answers_paris(self, model32):
        """Greedy decoding of the chat-templated question names Paris."""
        answer = greedy_generate(model32, chat_prompt("What is the capital of France?"), 16)
        assert "Paris" in answer

    def test_perplexity_on_prose(self, model32, license_ids):
        """Perplexity on the first 512 tokens of CPython's LICENSE.txt is single/low double
        digits (measured 10.99 with float32; a broken RoPE or tokenizer gives hundreds)."""
        ppl = perplexity(model32, license_ids[:512])
        assert 8.0 < ppl < 14.0

    def test_fp32_activations_stay_fp32(self, model32, license_ids):
        """No silent float64 upcast (it once made decode steps 5x slower)."""
        cache = model32.decoder.new_cache(8)
        out = model32.decoder.forward(license_ids[:8], cache, score="relu", logits="last")
        assert out.logits.dtype == np.float32 and out.scores.dtype == np.float32


class TestKVCacheExactness:
    @pytest.mark.parametrize("score", ["softmax-sum", "relu"])
    def test_stepwise_equals_full_pass(self, model64, license_ids, score):
        """KV-cached decode steps select exactly the top-k sets of one causal full pass."""
        stepwise, tokens = record_request(model64, license_ids, prompt_tokens=48, steps=12,
                                          k=16, score=score, mode="teacher")
        full = teacher_forced_full(model64, license_ids, prompt_tokens=48, steps=12, k=16,
                                   score=score)
        assert np.array_equal(tokens, license_ids[:60])
        assert len(stepwise) == len(full) == 12
        for a, b in zip(stepwise, full, strict=True):
            assert a.shape == (30, 16)
            assert np.array_equal(a, b)

    def test_fp32_stepwise_nearly_equals_full(self, model32, license_ids):
        """In float32 the two paths differ only at near-ties: >= 99% of selected slots agree."""
        a = record_request(model32, license_ids, prompt_tokens=40, steps=6, k=16)[0]
        b = teacher_forced_full(model32, license_ids, prompt_tokens=40, steps=6, k=16)
        overlap = np.mean([len(np.intersect1d(x[r], y[r])) / 16
                           for x, y in zip(a, b, strict=True) for r in range(30)])
        assert overlap >= 0.99


class TestTopkPositions:
    def test_short_rows_select_all(self):
        """With seq_len <= k every position is selected."""
        out = topk_positions(np.array([[0.3, 0.1, 0.2]]), k=8)
        assert out.tolist() == [[0, 1, 2]]

    def test_orders(self):
        """order="position" sorts ascending; order="score" by descending score."""
        scores = np.array([[0.1, 0.9, 0.5, 0.7, 0.2]])
        assert topk_positions(scores, 3, "position").tolist() == [[1, 2, 3]]
        assert topk_positions(scores, 3, "score").tolist() == [[1, 3, 2]]


class TestRecordSelections:
    def test_tables_conform_and_cover_every_step_and_layer(self, model32, license_ids):
        """Rows per (request, step, layer); positions valid; all selected while seq_len <= k."""
        text = (TEXTS / "heapq.py.txt").read_text(encoding="utf-8")
        rec = record_selections([("heapq", text), ("license", model32.decode(license_ids[:80]))],
                                prompt_tokens=20, steps=6, k=24, model=model32)
        assert rec.selections.schema.equals(schema.SELECTIONS)
        assert rec.selection_traces.schema.equals(schema.SELECTION_TRACES)
        assert rec.selection_requests.schema.equals(schema.SELECTION_REQUESTS)
        rows = rec.selections.to_pydict()
        assert len(rows["step"]) == 2 * 6 * 30
        for seq_len, topk, step in zip(rows["seq_len"], rows["topk"], rows["step"], strict=True):
            assert seq_len == 20 + step + 1
            assert len(topk) == min(24, seq_len)
            assert topk == sorted(topk) and 0 <= topk[0] and topk[-1] < seq_len
        assert rows["topk"][0] == list(range(21))
        meta = rec.selection_traces.to_pylist()[0]
        assert (meta["k"], meta["score"], meta["order"], meta["synthetic"]) == (
            24, "softmax-sum", "position", False)

    def test_generate_mode_is_seeded(self, model32, license_ids):
        """Generate mode samples a continuation; the same seed gives the same trace."""
        texts = [("license", model32.decode(license_ids[:40]))]
        a = record_selections(texts, prompt_tokens=32, steps=4, k=8, mode="generate", seed=3,
                              model=model32)
        b = record_selections(texts, prompt_tokens=32, steps=4, k=8, mode="generate", seed=3,
                              model=model32)
        assert a.selections.equals(b.selections)
        assert np.array_equal(a.token_ids[0][:32], license_ids[:32])
        assert len(a.token_ids[0]) == 36

    def test_full_method_matches_stepwise_tables(self, model64, license_ids):
        """method="full" writes the same selection rows as the default KV-cached decode."""
        texts = [("license", model64.decode(license_ids[:60]))]
        kw = dict(prompt_tokens=40, steps=5, k=12, model=model64)
        a = record_selections(texts, method="stepwise", **kw)
        b = record_selections(texts, method="full", **kw)
        assert a.selections.column("topk").equals(b.selections.column("topk"))

    def test_rejects_short_text(self, model32):
        """Teacher mode names the text that is too short for prompt + steps."""
        with pytest.raises(ValueError, match="'tiny' has"):
            record_selections([("tiny", "Hello world")], prompt_tokens=8, steps=4, k=4,
                              model=model32)


class TestBundledTrace:
    def test_bundled_trace_conforms(self):
        """traces/smollm2 Parquet files conform to the schemas and exceed 2k context."""
        import pyarrow.parquet as pq

        root = TEXTS.parent
        sel = pq.read_table(root / "selections.parquet")
        assert schema.conform(sel, schema.SELECTIONS).num_rows == sel.num_rows
        traces = pq.read_table(root / "selection_traces.parquet")
        schema.conform(traces, schema.SELECTION_TRACES)
        schema.conform(pq.read_table(root / "selection_requests.parquet"),
                       schema.SELECTION_REQUESTS)
        assert set(traces.column("k").to_pylist()) == {64}
        lengths = pa.compute.list_value_length(sel.column("topk"))
        assert pa.compute.min(lengths).as_py() == 64
        assert pa.compute.min(sel.column("seq_len")).as_py() > 2 * 64


def test_cli_record_writes_a_valid_trace(tmp_path):
    """`toolkit record` on a bundled text: rows = steps x 30 layers, replayable at once."""
    from typer.testing import CliRunner

    from toolkit.cli import app

    text = Path(__file__).resolve().parents[1] / "traces/smollm2/texts/heapq.py.txt"
    store = tmp_path / "s"
    res = CliRunner().invoke(app, ["record", "--store", str(store), "--name", "r",
                                   "--text", str(text), "--prompt-tokens", "80",
                                   "--steps", "3", "--k", "8"])
    assert res.exit_code == 0, res.output
    assert "recorded 90 selection rows as 'r'" in res.output
    res = CliRunner().invoke(app, ["replay", "selections", "--store", str(store), "--trace",
                                   "r", "--json"])
    assert res.exit_code == 0 and '"accesses": 720' in res.output
