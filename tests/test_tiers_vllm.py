"""``--engine-semantics vllm``: request-by-request equality with vLLM's own KVCacheManager
on the Mooncake trace (fixture written by benchmarks/vllm_peer.py) and hand-worked cases
of its block pool (the last-token cap, tail-first eviction, reference counts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit.cost.from_replay import run_tiers
from toolkit.ingest.fields import requests_table
from toolkit.replay.tiers import UNBOUNDED, TierReplayConfig

PEER = Path(__file__).parent / "data" / "vllm_peer_mooncake.npz"
FAR = 1e6


def _peer_columns() -> list[str]:
    with np.load(PEER) as z:
        return sorted(k for k in z.files if k.startswith("b"))


def _parse(name: str) -> tuple[int, int]:
    bt, cap = name[1:].split("_c", 1)
    return int(bt), int(cap)


def _store(store, hashes, prompts, name="t", block=4, spacing=FAR, outputs=None):
    table = requests_table(name, [i * spacing for i in range(len(hashes))], prompts,
                           outputs or [1] * len(hashes), block, hashes)
    store.write("requests", name, table, replace=True)
    return name


def _dev(store, name, **kw):
    kw.setdefault("engine_semantics", "vllm")
    res = run_tiers(store, TierReplayConfig(name, **kw), save=False)
    return res.requests.column("device_tokens").to_pylist(), res


class TestVLLMPeer:
    """The fixture holds vLLM 0.33.0's per-request GPU hit tokens (sequential driving)."""

    def test_fixture_provenance(self):
        """The fixture names the vLLM version and covers blocks 16/64/512."""
        with np.load(PEER) as z:
            assert str(z["vllm_version"]) == "0.33.0"
            assert z["request_id"].size == 12_031
        assert {_parse(c) for c in _peer_columns()} == {
            (16, 1_048_576), (16, 204_800), (64, 204_800), (512, 1_000_000), (512, -1)}

    @pytest.mark.parametrize("name", [c for c in _peer_columns()
                                      if c in ("b16_c204800", "b512_c1000000")])
    def test_sequential_equals_vllm(self, mooncake_store, name):
        """--engine-semantics vllm --sequential gives vLLM's GPU hit tokens, request by
        request (two of the fixture's five configurations here, for the suite's time; the
        fixture, written by `benchmarks/vllm_peer.py` from vLLM's own classes, holds all)."""
        bt, cap = _parse(name)
        dev, res = _dev(mooncake_store, "conv", device_tokens=cap, host_tokens=0,
                        block_tokens=bt, sequential=True)
        with np.load(PEER) as z:
            ref = z[name].astype(np.int64)
            rid = z["request_id"]
        got = np.asarray(dev, np.int64)[np.argsort(res.requests.column("request_id"))]
        assert np.array_equal(got[rid], ref)
        assert res.summary["host_hit_tokens"] == 0

    def test_cli_json(self, tmp_path):
        """The CLI's --engine-semantics vllm --block-tokens 64 --json gives vLLM's total."""
        from tests.conftest import MOONCAKE
        from toolkit.cli import app

        runner = CliRunner()
        s = str(tmp_path / "s")
        assert runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", s,
                                   "--name", "conv"]).exit_code == 0
        out = runner.invoke(app, [
            "replay", "tiers", "--store", s, "--trace", "conv", "--sequential", "--host-gb",
            "0", "--device-tokens", "204800", "--engine-semantics", "vllm", "--block-tokens",
            "64", "--json"])
        assert out.exit_code == 0, out.output
        row = json.loads(out.output)
        with np.load(PEER) as z:
            assert row["gpu_hit_tokens"] == int(z["b64_c204800"].sum())
        assert row["host_hit_tokens"] == 0


class TestRules:
    """Hand-worked cases: 4-token trace blocks, 4-token vLLM blocks, one at a time."""

    def test_last_token_recomputed(self, store):
        """A fully cached 8-token prompt hits 4 tokens, not 8: vLLM caps the hit at
        prompt - 1 tokens, whole blocks; a 9-token one (partial last block) hits 8."""
        name = _store(store, [[1, 2], [1, 2], [1, 2, 3]], [8, 8, 9])
        assert _dev(store, name, device_tokens=UNBOUNDED, block_tokens=4,
                    sequential=True)[0] == [0, 4, 8]

    def test_partial_block_never_cached(self, store):
        """A 6-token prompt caches one 4-token block; the next 7-token one hits 4."""
        name = _store(store, [[1, 2], [1, 2]], [6, 7])
        assert _dev(store, name, device_tokens=UNBOUNDED, block_tokens=4,
                    sequential=True)[0] == [0, 4]

    def test_tail_block_evicted_first(self, store):
        """Pool of 3 blocks (one is vLLM's null block): A [1,2] caches two blocks and frees
        them tail first, so B [9] evicts A's block 2 and keeps block 1: C (A's first 5
        tokens) hits 4 tokens (head-first eviction would give 0)."""
        name = _store(store, [[1, 2], [9], [1, 2]], [8, 4, 5])
        dev, res = _dev(store, name, device_tokens=12, host_tokens=0, block_tokens=4,
                        sequential=True)
        assert dev == [0, 0, 4]
        assert res.summary["device_evictions"] >= 1

    def test_running_blocks_not_evicted(self, store):
        """Pool of 3 usable blocks: A (8 prompt + 4 output tokens) holds 3 blocks while it
        runs; B [3] arriving with it waits for A's finish (reference counts)."""
        name = _store(store, [[1, 2], [3]], [8, 4], spacing=0.0, outputs=[4, 1])
        _, res = _dev(store, name, device_tokens=16, host_tokens=0, block_tokens=4)
        t = res.requests
        assert t["admit_s"][1].as_py() == pytest.approx(t["finish_s"][0].as_py())

    def test_block_tokens_differ_from_sglang(self, store):
        """Same trace, two engines: SGLang's radix tree hits the whole cached page (12),
        vLLM recomputes the last block (8)."""
        name = _store(store, [[1, 2, 3], [1, 2, 3]], [12, 12])
        assert _dev(store, name, device_tokens=UNBOUNDED, block_tokens=4,
                    sequential=True)[0] == [0, 8]
        sg, _ = _dev(store, name, device_tokens=UNBOUNDED, engine_semantics="sglang",
                     sequential=True)
        assert sg == [0, 12]

    def test_bad_engine_is_one_line(self, store):
        """--engine-semantics tgi: a one-line error, exit code 2."""
        from toolkit.cli import app

        name = _store(store, [[1, 2]], [8])
        out = CliRunner().invoke(app, ["replay", "tiers", "--store", str(store.root),
                                       "--trace", name, "--engine-semantics", "tgi"])
        assert out.exit_code == 2 and "engine_semantics must be sglang or vllm" in out.output
        with pytest.raises(ValueError, match="block_tokens must be >= 1"):
            TierReplayConfig("t", block_tokens=0)


def test_concurrent_run_reports_no_host_tier(mooncake_store):
    """16 users on the Mooncake trace under vLLM semantics: every prompt token is a GPU
    hit or computed, the host and storage tiers report 0 capacity and 0 hits, and the
    GPU share stays below the sequential unbounded replay's (running requests' blocks
    and decode blocks take room)."""
    res = run_tiers(mooncake_store, TierReplayConfig(
        "conv", engine_semantics="vllm", device_tokens=1_048_576, concurrency=16),
        save=False)
    s = res.summary
    assert s["host_capacity_tokens"] == s["storage_capacity_tokens"] == 0
    assert s["host_hit_tokens"] == s["storage_hit_tokens"] == 0
    assert s["device_hit_tokens"] + s["computed_tokens"] == s["prompt_tokens"]
    with np.load(PEER) as z:
        assert 0 < s["device_hit_tokens"] < int(z["b512_c-1"].sum())
