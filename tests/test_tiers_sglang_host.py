"""SGLang's host tier (HiCache, L2): ``replay tiers --sequential`` against SGLang 0.5.23's
own ``UnifiedRadixCache`` + ``HybridCacheController`` on the Mooncake trace, request by
request (fixture written by ``benchmarks/sglang_peer.py --host-tokens``; what is real and
what is stubbed there is in its docstring).

Device (GPU) hit tokens are equal on every request of every configuration. Host hit
tokens are equal on all but the requests listed in ``DIVERGENT`` (1 to 8 of 12,031 per
configuration); those are asserted too, value for value, so any change to the kernel's
host rules shows up here, whichever way it goes. What is known about them is in
``DIVERGENT``'s comment.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from toolkit.cost.from_replay import run_tiers
from toolkit.replay.tiers import TierReplayConfig

PEER = Path(__file__).parent / "data" / "sglang_host_peer_mooncake.npz"
POLICIES = ("write_through", "write_through_selective", "write_back")
HOSTS = (409_600, 819_200)

# request (arrival index) -> (SGLang's host hit tokens, the toolkit's). Every other
# request is equal. The known cause of some: SGLang evicts whole host-leaf *nodes*
# (FullComponent.drive_host_eviction: a heap of evictable host leaves by last access,
# overshooting the shortfall, and a node's backup asks for room for the whole node at
# once), the toolkit evicts *pieces* from a host LRU in demotion order, freeing exactly the
# shortfall; so now and then a host run survives in one and not the other (e.g. request
# 432 under write_back: SGLang's host pool was 7,168 tokens from full and its run was
# already gone at match time). Write-back's duplicate reclaim
# (_reclaim_full_host_duplicates) is not modelled; disabling it in SGLang
# (SGLANG_HICACHE_SKIP_HOST_DUPLICATE_RECLAIM=1) changed nothing in the first 4,000
# requests at 409,600 host tokens. The selective case (request 10,350, host pool never
# full) is not explained yet.
DIVERGENT = {
    "write_through_h409600": {4585: (0, 7168), 5351: (0, 15360)},
    "write_through_selective_h409600": {10350: (0, 2240)},
    "write_back_h409600": {432: (0, 7168), 8337: (512, 0)},
    "write_through_h819200": {1934: (26624, 24064), 5186: (0, 30208)},
    "write_through_selective_h819200": {10350: (0, 2240)},
    "write_back_h819200": {827: (0, 2560), 1934: (26624, 24064), 2561: (3584, 0),
                           3597: (0, 7680), 3920: (0, 12800), 4318: (0, 24576),
                           4727: (0, 2048), 9281: (0, 2560)},
}
CHECKED = tuple(DIVERGENT)  # all six configurations: about a second each


def _replay(store, name: str):
    with np.load(PEER) as z:
        page = int(z["page_tokens"])
        device = int(z["device_tokens"])
        host = int(z[f"{name}_capacity"])
        rid = z["request_id"]
    write = name.rsplit("_h", 1)[0]
    res = run_tiers(store, TierReplayConfig(
        "conv", device_tokens=device, host_tokens=host, page_tokens=page,
        write_policy=write, sequential=True), save=False)
    t = res.requests
    order = np.argsort(np.asarray(t["request_id"]))
    gpu = np.asarray(t["device_tokens"], np.int64)[order][rid]
    host_hits = np.asarray(t["host_tokens"], np.int64)[order][rid]
    return gpu, host_hits, res.summary


def test_fixture_provenance():
    """SGLang 0.5.23, 64-token pages, a 204,800-token device pool, three write policies
    at two host pools (SGLang adds one padding page to each: 409,664 and 819,264)."""
    with np.load(PEER) as z:
        assert str(z["sglang_version"]) == "0.5.23"
        assert z["request_id"].size == 12_031
        assert int(z["page_tokens"]) == 64 and int(z["device_tokens"]) == 204_800
        for w in POLICIES:
            for h in HOSTS:
                assert int(z[f"{w}_h{h}_capacity"]) == h + 64
                assert z[f"{w}_h{h}_gpu"].size == z[f"{w}_h{h}_host"].size == 12_031
        # the host tier does not change what the device holds: every configuration has
        # the device-only peer's GPU hit tokens
        gpu = {int(z[f"{w}_h{h}_gpu"].sum()) for w in POLICIES for h in HOSTS}
        assert gpu == {6_225_152}
        assert int(z["write_back_h819200_host"].sum()) == 1_778_688


@pytest.mark.parametrize("name", CHECKED)
def test_sequential_equals_sglang_host_tier(mooncake_store, name):
    """GPU hit tokens equal on every request; host hit tokens equal on every request but
    the listed ones, which hold exactly the listed values."""
    gpu, host, summary = _replay(mooncake_store, name)
    with np.load(PEER) as z:
        ref_gpu = z[f"{name}_gpu"].astype(np.int64)
        ref_host = z[f"{name}_host"].astype(np.int64)
    assert np.array_equal(gpu, ref_gpu)
    known = DIVERGENT[name]
    diff = np.nonzero(host != ref_host)[0]
    assert {int(i): (int(ref_host[i]), int(host[i])) for i in diff} == known
    assert summary["host_hit_tokens"] == int(ref_host.sum()) + sum(
        t - s for s, t in known.values())
    assert summary["host_hit_tokens"] > 0


# engine_fuzz --engine sglang-host --seed 2, case 0 (SYNTHETIC random trace, 8-token blocks):
# SGLang 0.5.23's answers per request, [GPU, host] hit tokens. Request 10 finds blocks
# [10, 15] on the host in the toolkit but nowhere in SGLang: a 72-token host pool under
# selective write-through, where SGLang's node-granular host eviction by last access had
# dropped them. Pinned so a host-tier change shows up here.
FUZZ_CASE = {
    "hashes": [
        [0], [0, 1, 2, 3, 4], [0, 5, 6, 7, 8, 9], [10, 11], [0, 5, 12, 13, 14], [10, 15, 16, 17],
        [0, 1, 2], [10, 15, 16, 17], [0, 5, 12, 18, 19, 20], [0, 1, 2, 3, 21],
        [10, 15, 22, 23, 24, 25], [10, 15, 16], [10, 11, 26], [0, 5, 6, 7, 8, 9],
        [10, 11, 27, 28, 29], [0, 5], [10, 15, 22, 30], [10, 11], [10, 15, 16, 31, 32],
        [0, 1, 33], [0, 5, 12],
    ],
    "prompts": [4, 38, 46, 10, 34, 28, 19, 31, 46, 36, 44, 21, 20, 41, 34, 9, 32, 12, 39, 18, 18],
    "arrival": [
        0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 5.0, 5.0, 5.0, 6.0, 6.0, 6.0, 7.0, 8.0,
        8.0, 8.0, 9.0,
    ],
    "unit": 8,
    "cap": 80,
    "host": 64,
    "write": "write_through_selective",
    "host_capacity": 72,
    "sglang": [
        [0, 0], [0, 0], [8, 0], [0, 0], [16, 0], [8, 0], [8, 0], [24, 0], [24, 0], [8, 0], [0, 0],
        [16, 0], [8, 0], [8, 0], [16, 0], [8, 0], [8, 0], [8, 0], [16, 0], [8, 0], [8, 0],
    ],
}


def test_fuzz_case_known_divergence(store):
    """GPU hits equal SGLang's on every request; host hits on all but request 10."""
    from toolkit.ingest.fields import requests_table

    c = FUZZ_CASE
    n = len(c["prompts"])
    store.write("requests", "fz", requests_table("fz", c["arrival"], c["prompts"], [1] * n,
                                                 8, c["hashes"]), replace=True)
    res = run_tiers(store, TierReplayConfig(
        "fz", device_tokens=c["cap"], host_tokens=c["host_capacity"], page_tokens=c["unit"],
        write_policy=c["write"], sequential=True), save=False)
    t = res.requests
    got = dict(zip(t["request_id"].to_pylist(), zip(t["device_tokens"].to_pylist(),
                                                     t["host_tokens"].to_pylist(), strict=True),
                   strict=True))
    want = [tuple(x) for x in c["sglang"]]
    diff = {i: (want[i], got[i]) for i in range(n) if got[i] != want[i]}
    assert diff == {10: ((0, 0), (0, 16))}
