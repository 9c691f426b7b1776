"""A tiers sweep under ``engine_semantics = "vllm"`` replays vLLM's full-block stream (it
once built the radix page stream and failed): each cell equals the direct replay."""

from __future__ import annotations

import json

from toolkit import sweep
from toolkit.cost.from_replay import run_tiers
from toolkit.replay.tiers import TierReplayConfig


def test_vllm_cells_equal_direct_replays(mooncake_store):
    grid = sweep.parse_grid(
        'kind = "tiers"\ntrace = "conv"\n[fixed]\nengine_semantics = "vllm"\n'
        "host_tokens = 0\nsequential = true\n[axes]\nblock_tokens = [16, 64]\n"
        "device_tokens = [204800]\n", "g.toml")
    res = sweep.run(mooncake_store, grid, workers=1, progress=False)
    assert (res.ran, res.failed) == (2, 0)
    # the store is shared with other tests: keep this grid's cells only
    runs = [r for r in mooncake_store.query(
        "SELECT config_json, device_hit_tokens FROM tier_runs").to_dicts()
        if (lambda c: c.get("engine_semantics") == "vllm" and c.get("sequential")
            and c.get("device_tokens") == 204_800 and c.get("host_tokens") == 0
            and c.get("block_tokens") in (16, 64))(json.loads(r["config_json"]))]
    assert len(runs) == 2
    for bt in (16, 64):
        direct = run_tiers(mooncake_store, TierReplayConfig(
            "conv", engine_semantics="vllm", host_tokens=0, sequential=True,
            block_tokens=bt, device_tokens=204_800), save=False)
        got = [r["device_hit_tokens"] for r in runs
               if json.loads(r["config_json"])["block_tokens"] == bt]
        assert got == [direct.summary["device_hit_tokens"]]
    # vLLM's own KVCacheManager gives 6,225,152 GPU hit tokens at both block sizes
    assert {r["device_hit_tokens"] for r in runs} == {6_225_152}


def test_values_valid_only_beside_other_keys_parse():
    """``offload_policy = "lru"`` is valid only under ``engine_semantics = "vllm"``: as an
    axis beside a fixed vllm it parses (it once failed, checked against sglang defaults),
    while a cell that cannot hold it still fails naming the cell."""
    import pytest

    head = 'kind = "tiers"\ntrace = "conv"\n'
    g = sweep.parse_grid(head + '[fixed]\nengine_semantics = "vllm"\n[axes]\n'
                         'offload_policy = ["none", "lru"]\n', "g.toml")
    assert g.axes["offload_policy"] == ["none", "lru"]
    g = sweep.parse_grid(head + '[fixed]\nengine_semantics = "vllm"\noffload_policy = "arc"\n',
                         "g.toml")
    assert g.fixed["offload_policy"] == "arc"
    with pytest.raises(sweep.GridError, match=r"cell 1 \(engine_semantics='sglang', "
                                              r"offload_policy='lru'\)"):
        sweep.parse_grid(head + '[axes]\nengine_semantics = ["vllm", "sglang"]\n'
                         'offload_policy = ["lru"]\n', "g.toml")
    with pytest.raises(sweep.GridError, match=r"\[axes\] offload_policy = 'lru'"):
        sweep.parse_grid(head + '[axes]\noffload_policy = ["lru"]\n', "g.toml")
