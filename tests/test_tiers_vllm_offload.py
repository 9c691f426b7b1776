"""``--engine-semantics vllm --offload-policy lru|arc``: vLLM's CPU offloading tier.

Request-by-request equality with vLLM 0.33.0's own ``CPUOffloadingManager`` (LRU and ARC
policies) under its ``KVCacheManager``, on the Mooncake trace (fixture written by
``benchmarks/vllm_peer.py --offload``), and hand-worked cases whose answers vLLM's classes
gave the same way (4-token trace blocks, 4-token vLLM blocks, one request at a time)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit.cost.from_replay import run_tiers
from toolkit.ingest.fields import requests_table
from toolkit.replay.tiers import UNBOUNDED, TierReplayConfig

PEER = Path(__file__).parent / "data" / "vllm_offload_mooncake.npz"


def _peer_columns() -> list[str]:
    with np.load(PEER) as z:
        return sorted(k[:-4] for k in z.files if k.endswith("_gpu"))


def _parse(name: str) -> tuple[int, int, int, str]:
    """``b{block}_c{device}_h{host}_{policy}`` -> its four settings."""
    bt, rest = name[1:].split("_c", 1)
    dev, rest = rest.split("_h", 1)
    host, pol = rest.split("_")
    return int(bt), int(dev), int(host), pol


def _store(store, hashes, prompts, name="t"):
    table = requests_table(name, [i * 1e6 for i in range(len(hashes))], prompts,
                           [1] * len(hashes), 4, hashes)
    store.write("requests", name, table, replace=True)
    return name


def _hits(store, hashes, prompts, dev_blocks, host_blocks, policy):
    """(GPU, CPU) hit tokens per request; ``dev_blocks`` counts vLLM's null block."""
    name = _store(store, hashes, prompts)
    res = run_tiers(store, TierReplayConfig(
        name, engine_semantics="vllm", block_tokens=4, device_tokens=4 * dev_blocks,
        host_tokens=4 * host_blocks, offload_policy=policy, sequential=True), save=False)
    return [list(p) for p in zip(res.requests.column("device_tokens").to_pylist(),
                                 res.requests.column("host_tokens").to_pylist(), strict=True)]


class TestOffloadPeer:
    """The fixture holds vLLM 0.33.0's per-request GPU and CPU hit tokens."""

    def test_fixture_provenance(self):
        """It names the vLLM version, covers all 12,031 requests, both policies and two
        CPU capacities at 16-token blocks, and the CPU tier does hit."""
        with np.load(PEER) as z:
            assert str(z["vllm_version"]) == "0.33.0"
            assert z["request_id"].size == 12_031
            assert all(int(z[c + "_cpu"].sum()) > 0 for c in _peer_columns())
        got = {_parse(c) for c in _peer_columns()}
        assert {(16, 204_800, h, p) for h in (1_048_576, 8_388_608)
                for p in ("lru", "arc")} <= got

    @pytest.mark.parametrize("name", [c for c in _peer_columns()
                                      if c.startswith("b16_c204800_h1048576_")])
    def test_sequential_equals_vllm(self, mooncake_store, name):
        """GPU and CPU hit tokens equal vLLM's, request by request (LRU and ARC at one size
        here, for the suite's time; the fixture, which `benchmarks/vllm_peer.py --offload`
        writes from vLLM's own classes, holds all six configurations)."""
        bt, dev, host, pol = _parse(name)
        res = run_tiers(mooncake_store, TierReplayConfig(
            "conv", engine_semantics="vllm", block_tokens=bt, device_tokens=dev,
            host_tokens=host, offload_policy=pol, sequential=True), save=False)
        order = np.argsort(res.requests.column("request_id"))
        gpu = np.asarray(res.requests.column("device_tokens"), np.int64)[order]
        cpu = np.asarray(res.requests.column("host_tokens"), np.int64)[order]
        with np.load(PEER) as z:
            rid = z["request_id"]
            assert np.array_equal(gpu[rid], z[name + "_gpu"])
            assert np.array_equal(cpu[rid], z[name + "_cpu"])

    def test_cli_json(self, tmp_path):
        """``--offload-policy arc --host-ratio`` through the CLI gives vLLM's totals."""
        from tests.conftest import MOONCAKE
        from toolkit.cli import app

        name = "b64_c204800_h1048576_arc"
        with np.load(PEER) as z:
            assert name + "_gpu" in z.files, "the fixture lost its 64-token ARC column"
            want = int(z[name + "_gpu"].sum()), int(z[name + "_cpu"].sum())
        runner = CliRunner()
        s = str(tmp_path / "s")
        assert runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", s,
                                   "--name", "conv"]).exit_code == 0
        out = runner.invoke(app, [
            "replay", "tiers", "--store", s, "--trace", "conv", "--sequential",
            "--device-tokens", "204800", "--host-ratio", str(1_048_576 / 204_800),
            "--engine-semantics", "vllm", "--block-tokens", "64", "--offload-policy", "arc",
            "--json"])
        assert out.exit_code == 0, out.output
        row = json.loads(out.output)
        assert (row["gpu_hit_tokens"], row["host_hit_tokens"]) == want


class TestOffloadRules:
    """Hand-worked cases; vLLM's own classes (vllm_peer.Peer.offload_request) give the
    same answers."""

    def test_lookup_not_capped_at_prompt_minus_one(self, store):
        """The GPU hit of a fully cached 8-token prompt stops at 4 tokens (the last token
        is recomputed); the CPU lookup goes on to the whole prompt and loads block 2."""
        assert _hits(store, [[1, 2], [1, 2]], [8, 8], 4, 10, "lru") == [[0, 0], [4, 4]]

    def test_store_all_or_nothing(self, store):
        """Three new blocks do not fit a 2-block CPU tier: none is stored (vLLM's
        prepare_store returns None), so block 2 misses later; with 3 blocks it hits."""
        hashes, prompts = [[1, 2, 3], [1, 2]], [12, 8]
        assert _hits(store, hashes, prompts, 4, 2, "lru") == [[0, 0], [4, 0]]
        assert _hits(store, hashes, prompts, 4, 3, "lru") == [[0, 0], [4, 4]]

    def test_tail_evicted_first(self, store):
        """A finished request's blocks are ranked tail first: block 2 of [1, 2] goes before
        block 1, so the later [1, 2] finds block 1 on the GPU and block 2 nowhere."""
        hashes, prompts = [[1, 2], [3], [4], [1, 2]], [8, 4, 4, 8]
        for pol in ("lru", "arc"):
            assert _hits(store, hashes, prompts, 4, 3, pol)[-1] == [4, 0], pol

    def test_arc_keeps_reused_block(self, store):
        """A block loaded twice moves to ARC's T2 and survives the next store, where LRU
        evicts it as the oldest; ARC then misses the once-used block LRU kept."""
        hashes, prompts = [[1], [1], [2], [3], [1], [2]], [4] * 6
        assert _hits(store, hashes, prompts, 3, 2, "lru") == [
            [0, 0], [0, 4], [0, 0], [0, 0], [0, 0], [0, 0]]
        assert _hits(store, hashes, prompts, 3, 2, "arc") == [
            [0, 0], [0, 4], [0, 0], [0, 0], [0, 4], [0, 0]]

    def test_default_has_no_host_tier(self, store):
        """Without --offload-policy, vllm semantics keep no host tier whatever the host
        capacity (the GPU tier alone, as before the offload tier existed)."""
        assert _hits(store, [[1, 2], [1, 2]], [8, 8], 4, 10, "none") == [[0, 0], [4, 0]]

    def test_unbounded_host(self, store):
        """An unbounded CPU tier never evicts."""
        name = _store(store, [[1, 2], [3], [4], [1, 2]], [8, 4, 4, 8])
        res = run_tiers(store, TierReplayConfig(
            name, engine_semantics="vllm", block_tokens=4, device_tokens=16,
            host_tokens=UNBOUNDED, offload_policy="lru", sequential=True), save=False)
        assert res.requests.column("host_tokens").to_pylist() == [0, 0, 0, 4]

    def test_errors(self):
        with pytest.raises(ValueError, match="offload_policy must be none, lru or arc"):
            TierReplayConfig("t", engine_semantics="vllm", offload_policy="fifo")
        with pytest.raises(ValueError, match="applies to engine_semantics vllm"):
            TierReplayConfig("t", offload_policy="lru")

    def test_concurrent_runs(self, store):
        """Under concurrency (modelled: transfers complete at once) the replay finishes
        and the CPU tier serves hits."""
        hashes = [[1, 2, 3], [1, 2, 4], [1, 2, 3], [5], [1, 2, 3]] * 4
        name = _store(store, hashes, [12, 12, 12, 4, 12] * 4)
        res = run_tiers(store, TierReplayConfig(
            name, engine_semantics="vllm", block_tokens=4, device_tokens=32,
            host_tokens=64, offload_policy="arc", concurrency=3), save=False)
        assert res.summary["host_hit_tokens"] > 0
