"""SGLang's host tier (HiCache, L2): ``replay tiers --sequential`` against SGLang 0.5.23's
own ``UnifiedRadixCache`` + ``HybridCacheController`` on the Mooncake trace, request by
request (fixtures written by ``benchmarks/sglang_peer.py --host-tokens``; what is real and
what is stubbed there is in its docstring).

Device (GPU) and host hit tokens are equal on every request of every configuration
(the host tier is node-granular, as SGLang's: see :mod:`toolkit.replay.tiers.radix`); on
host pools smaller than the device, so are the running counts of host writes, backup
failures and host and device evictions, and the pool ``--host-ratio`` sizes.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

import toolkit
from toolkit.cost.from_replay import run_tiers
from toolkit.replay.tiers import TierReplayConfig, page_stream

PEER = Path(__file__).parent / "data" / "sglang_host_peer_mooncake.npz"
# host pools below the device pool (SGLang's hicache_ratio 0.25 / 0.5 / 0.75), pages 1 / 16
# / 64, every write policy, on the first 2,000 Mooncake requests; running counts every 100
# (``sglang_peer.py --host-tokens 25600 51200 76800 --device-tokens 102400 --page 1 16 64
# --limit 2000 --every 100``)
RATIO_PEER = Path(__file__).parent / "data" / "sglang_host_ratio_peer_mooncake.npz"
RATIO_DEVICE = 102_400
RATIOS = (0.25, 0.5, 0.75)
RATIO_PAGES = (1, 16, 64)
POLICIES = ("write_through", "write_through_selective", "write_back")
HOSTS = (409_600, 819_200)

CONFIGS = tuple(f"{w}_h{h}" for w in POLICIES for h in HOSTS)  # about a second each


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
        host = {f"{w}_h{h}": int(z[f"{w}_h{h}_host"].sum()) for w in POLICIES for h in HOSTS}
        assert host == {
            "write_through_h409600": 161_728, "write_through_h819200": 1_076_160,
            "write_through_selective_h409600": 492_224,
            "write_through_selective_h819200": 492_224,
            "write_back_h409600": 541_568, "write_back_h819200": 1_778_688,
        }


@pytest.mark.parametrize("name", CONFIGS)
def test_sequential_equals_sglang_host_tier(mooncake_store, name):
    """GPU and host hit tokens equal SGLang's on every one of the 12,031 requests."""
    gpu, host, summary = _replay(mooncake_store, name)
    with np.load(PEER) as z:
        ref_gpu = z[f"{name}_gpu"].astype(np.int64)
        ref_host = z[f"{name}_host"].astype(np.int64)
    assert np.array_equal(gpu, ref_gpu)
    assert np.array_equal(host, ref_host)
    assert summary["host_hit_tokens"] == int(ref_host.sum()) > 0


# engine_fuzz --engine sglang-host --seed 2, case 0 (SYNTHETIC random trace, 8-token blocks):
# SGLang 0.5.23's answers per request, [GPU, host] hit tokens, a 72-token host pool under
# selective write-through. Request 10 finds blocks [10, 15] on the host: SGLang's answer
# once the driver inserts every prompt, fully cached or not, as the scheduler does (a
# driver that skipped that insert, with its stamps and hit counts, had SGLang answer 0).
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
        [0, 0], [0, 0], [8, 0], [0, 0], [16, 0], [8, 0], [8, 0], [24, 0], [24, 0], [8, 0], [0, 16],
        [16, 0], [8, 0], [8, 0], [16, 0], [8, 0], [8, 0], [8, 0], [16, 0], [8, 0], [8, 0],
    ],
}


# engine_fuzz --engine sglang-host --seed 4, case 241 (SYNTHETIC, 8-token blocks, 1-token
# pages, write_back, a 33-token host pool): request 12's declined host run (8 tokens,
# below the load-back threshold) was re-stamped by its match, so SGLang's host eviction
# (a heap of the host leaves keyed by last access *when it evicts*) took it to make room
# for a write-back backup, and the backup succeeded; a host-leaf heap that missed the
# match's stamp kept it, failed the backup and dropped the node (request 19: 16 GPU hit
# tokens instead of 19).
FUZZ_CASE_WB = {
    "hashes": [
        [0, 1, 2], [3, 4], [3, 4, 5, 6, 7], [0], [3, 8, 9, 10, 11, 12], [0], [3, 8], [0, 13, 14],
        [0, 1, 15, 16, 17, 18], [0, 1], [0, 1, 2, 19, 20], [0, 1, 2], [3, 8, 21, 22],
        [3, 8, 21], [3, 4], [3, 4, 23, 24], [3], [3, 8, 9, 25, 26], [0, 13, 27, 28, 29, 30],
        [3, 8, 21], [3, 4, 23, 24, 31, 32],
    ],
    "prompts": [23, 9, 39, 1, 44, 4, 16, 21, 43, 14, 40, 17, 28, 19, 11, 32, 4, 37, 42, 21, 45],
    "arrival": [
        0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 6.0, 7.0, 7.0, 7.0, 8.0, 8.0, 8.0,
        9.0, 9.0, 9.0,
    ],
    "unit": 1,
    "cap": 89,
    "host": 32,
    "write": "write_back",
    "host_capacity": 33,
    "sglang": [
        [0, 0], [0, 0], [9, 0], [1, 0], [8, 0], [4, 0], [16, 0], [8, 0], [16, 0], [14, 0],
        [23, 0], [17, 0], [8, 0], [19, 0], [8, 0], [11, 0], [4, 0], [16, 0], [8, 0], [19, 0],
        [11, 21],
    ],
}


@pytest.mark.parametrize("case", [FUZZ_CASE, FUZZ_CASE_WB], ids=["seed2-case0", "seed4-case241"])
def test_fuzz_case_equals_sglang(store, case):
    """GPU and host hits equal SGLang's on every request."""
    from toolkit.ingest.fields import requests_table

    c = case
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
    assert [got[i] for i in range(n)] == want


def test_random_traces_equal_sglang_host(store):
    """``engine_fuzz.py --engine sglang-host --seed 1 --cases 160 --fixture``: 160 random
    traces (SYNTHETIC) answered by SGLang 0.5.23's UnifiedRadixCache with HiCache, all
    three write policies, lru and lfu, host pools from one page to about half the working
    set; every request's GPU and host hit tokens equal the engine's. Cases 21 and 155 are
    the first divergences the harness found before the host tier became node-granular (21:
    a re-filled host node kept its own bounds, so its device copy outlived the leaf
    inserted below it) and before the driver inserted fully cached prompts (155)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from engine_fuzz import toolkit_hits

    fx = json.loads((Path(__file__).parent / "data" / "engine_fuzz_sglang-host.json")
                    .read_text())
    assert fx["engine"] == "sglang-host" and fx["version"] == "0.5.23" and fx["seed"] == 1
    assert len(fx["cases"]) == 160
    assert {c["write"] for c in fx["cases"]} == set(POLICIES)
    assert {c["policy"] for c in fx["cases"]} == {"lru", "lfu"}
    bad = [k for k, case in enumerate(fx["cases"])
           if toolkit_hits(store, case, "sglang-host") != fx["engine_hits"][k]]
    assert bad == []
    assert sum(h for hits in fx["engine_hits"] for _, h in hits) > 0  # the host tier hits


# -- host pools smaller than the device pool ------------------------------------------------
def _ratio_name(page: int, write: str, ratio: float) -> str:
    return f"p{page}_{write}_h{int(RATIO_DEVICE * ratio)}"


RATIO_CONFIGS = [(p, w, r) for p in RATIO_PAGES for w in POLICIES for r in RATIOS]


@pytest.fixture(scope="module")
def ratio_store(tmp_path_factory, mooncake_store):
    """The fixture's Mooncake prefix (its first 2,000 requests in arrival order) as
    ``conv2k``, in a store of its own, and its page streams by page size."""
    with np.load(RATIO_PEER) as z:
        rid = z["request_id"]
    t = mooncake_store.read("requests", "conv")
    t = t.filter(pc.is_in(t.column("request_id"), value_set=pc.cast(rid, t.schema.field(
        "request_id").type)))
    root = tmp_path_factory.mktemp("ratio") / "store"
    with toolkit.open_store(root, create=True) as s:
        s.write("requests", "conv2k", t)
        yield s, {p: page_stream(t, p, "sglang") for p in RATIO_PAGES}


def _prefix(ps, n: int):
    """The stream's first ``n`` requests (pieces stay those of the whole stream: finer
    pieces than a prefix needs give the same tree)."""
    end = int(ps.starts[n - 1] + ps.lengths[n - 1])
    return replace(ps, keys=ps.keys[:end], tokens=ps.tokens[:end], starts=ps.starts[:n],
                   lengths=ps.lengths[:n], prompt=ps.prompt[:n], output=ps.output[:n],
                   arrival_s=ps.arrival_s[:n], request_id=ps.request_id[:n],
                   session_id=ps.session_id[:n], turn=ps.turn[:n])


def test_ratio_fixture_provenance():
    """SGLang 0.5.23 on the first 2,000 requests, a 102,400-token device pool; every host
    pool is SGLang's for its ratio, one padding page included; the running counts are
    cumulative; write-through backups fail on every ratio (the host is smaller than the
    device) and selective write-through's host hits are the same at every ratio."""
    with np.load(RATIO_PEER) as z:
        assert str(z["sglang_version"]) == "0.5.23"
        assert z["request_id"].size == 2_000 and int(z["device_tokens"]) == RATIO_DEVICE
        assert list(z["page_tokens"]) == list(RATIO_PAGES)
        assert list(z["running_after"]) == list(range(100, 2_001, 100))
        assert tuple(z["running_counts"]) == ("host_writes", "host_backup_failures",
                                              "host_evictions", "device_evictions")
        for p, w, r in RATIO_CONFIGS:
            name = _ratio_name(p, w, r)
            assert int(z[f"{name}_capacity"]) == int(RATIO_DEVICE * r) + p
            run = z[f"{name}_running"]
            assert run.shape == (20, 4) and (np.diff(run, axis=0) >= 0).all()
            assert (run[-1, 1] > 0) == (w != "write_through_selective")
        sel = {int(z[f"{_ratio_name(p, 'write_through_selective', r)}_host"].sum())
               for p in RATIO_PAGES for r in RATIOS}
        assert sel == {169_984}


@pytest.mark.parametrize(("page", "write", "ratio"), RATIO_CONFIGS,
                         ids=[_ratio_name(*c) for c in RATIO_CONFIGS])
def test_host_below_device_equals_sglang(ratio_store, page, write, ratio):
    """``--host-ratio`` R sizes the pool SGLang allocates; GPU and host hit tokens equal
    SGLang's on each of the 2,000 requests, and the running counts of host writes, backup
    failures, host evictions and device evictions (tokens) equal SGLang's after every 100
    requests. Write-through backs a node's ancestors up first and stops at the first
    failure, as SGLang does: backing nodes up one by one gives other failure counts."""
    store, streams = ratio_store
    name = _ratio_name(page, write, ratio)
    with np.load(RATIO_PEER) as z:
        ref = {k: z[f"{name}_{k}"] for k in ("gpu", "host", "capacity", "running")}
        at = z["running_after"]
        rid = z["request_id"]
    cfg = TierReplayConfig("conv2k", device_tokens=RATIO_DEVICE, host_ratio=ratio,
                           page_tokens=page, write_policy=write, sequential=True)
    ps = streams[page]
    res = run_tiers(store, cfg, stream=ps, save=False)
    assert res.summary["host_capacity_tokens"] == int(ref["capacity"])
    got_rid = np.asarray(res.requests["request_id"])
    order = np.argsort(got_rid)
    at_ref = order[np.searchsorted(got_rid[order], rid)]  # the fixture's request order
    assert np.array_equal(np.asarray(res.requests["device_tokens"])[at_ref], ref["gpu"])
    assert np.array_equal(np.asarray(res.requests["host_tokens"])[at_ref], ref["host"])
    names = ("host_writes", "host_backup_failures", "host_evictions", "device_evictions")
    got = []
    for n in at:
        s = run_tiers(store, cfg, stream=_prefix(ps, int(n)), save=False).summary
        got.append([s[k] * page for k in names])  # the summary counts pages
    assert np.array_equal(np.array(got), ref["running"])


def test_cli_host_ratio_and_host_tokens(tmp_path):
    """``replay tiers --host-ratio 0.8`` over an 80-token device pool at 8-token pages is
    SGLang's pool for ``hicache_ratio`` 0.8 (int(64) tokens in whole pages plus one padding
    page: 72, what SGLang allocated in FUZZ_CASE) and answers as SGLang did; ``--host-tokens
    72`` is that pool given exactly, ``--host-tokens 64`` is 64; ``--host-tokens`` with
    ``--host-gb`` is refused before anything runs."""
    from typer.testing import CliRunner

    from toolkit.cli import app
    from toolkit.ingest.fields import requests_table

    c = FUZZ_CASE
    n = len(c["prompts"])
    root = tmp_path / "s"
    with toolkit.open_store(root, create=True) as s:
        s.write("requests", "fz", requests_table("fz", c["arrival"], c["prompts"], [1] * n,
                                                 8, c["hashes"]))
    base = ["replay", "tiers", "--store", str(root), "--trace", "fz", "--sequential",
            "--device-tokens", "80", "--page-tokens", "8", "--write-policy", c["write"],
            "--json"]

    def run(*extra: str) -> dict:
        res = CliRunner().invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    want = (sum(g for g, _ in c["sglang"]), sum(h for _, h in c["sglang"]))
    for flags in (["--host-ratio", "0.8"], ["--host-tokens", "72"]):
        out = run(*flags)
        assert out["host_capacity_tokens"] == c["host_capacity"] == 72
        assert (out["gpu_hit_tokens"], out["host_hit_tokens"]) == want == (200, 16)
    assert run("--host-tokens", "64")["host_capacity_tokens"] == 64
    res = CliRunner().invoke(app, [*base, "--host-tokens", "72", "--host-gb", "1"])
    assert res.exit_code == 2
    assert "--host-tokens and --host-gb" in res.output


def test_host_pool_tokens_is_sglangs():
    """The one sizing rule (``TierReplayConfig.host_pool_tokens``): SGLang's pool for a
    ratio, padding page included (the bundled fixtures' capacities); exact tokens as given;
    no host at ratio 0; unbounded over an unbounded device; vLLM's ratio unpadded."""
    cfg = TierReplayConfig("t")
    assert cfg.host_pool_tokens(204_800, 64) == 409_664  # HOSTS[0] + one page
    assert TierReplayConfig("t", host_ratio=4).host_pool_tokens(204_800, 64) == 819_264
    with np.load(RATIO_PEER) as z:
        for p, w, r in RATIO_CONFIGS:
            assert TierReplayConfig("t", host_ratio=r).host_pool_tokens(RATIO_DEVICE, p) == \
                int(z[f"{_ratio_name(p, w, r)}_capacity"])
    assert TierReplayConfig("t", host_tokens=51_200).host_pool_tokens(204_800, 64) == 51_200
    assert TierReplayConfig("t", host_ratio=0).host_pool_tokens(204_800, 64) == 0
    assert cfg.host_pool_tokens(-1, 64) == -1
    assert TierReplayConfig("t", host_ratio=0.3, engine_semantics="vllm").host_pool_tokens(
        1_000, 16) == 300
    with pytest.raises(ValueError, match="page_tokens"):
        cfg.host_pool_tokens(204_800, None)


# engine_fuzz --engine sglang-host --seed 6, case 29 (SYNTHETIC, 8-token blocks and pages,
# write_back, lfu, a 48-token device pool, a 96-token host pool as SGLang sized it): hits
# agree, and so do the totals of host writes, backup failures, host and device evictions
# (tokens) once a write-back backup registers its node as a host duplicate at the ack,
# before the demotion, as SGLang's finish_write_through does. Request 5's host eviction
# then reclaims the host copy of blocks [0, 1] (first backed up at request 2) before that
# of block [2] (first backed up at request 3), though both were loaded back at request 3
# deepest first; a list that only joined at the load-back reclaimed [2] first and wrote
# 8 more tokens to the host (264 vs 256) and evicted 8 more (168 vs 160).
FUZZ_CASE_WB_DUP = {
    "hashes": [
        [0, 1, 2, 3, 4, 5], [0, 1, 6, 7, 8], [9, 10, 11, 12, 13], [0, 1, 2, 14, 15, 16],
        [0, 1, 2], [9, 10, 17, 18, 19], [9, 20], [9, 10], [0, 21, 22], [0, 21, 22, 23, 24, 25],
        [9, 10, 11], [0, 21], [0, 21, 26], [9, 20, 27, 28], [0, 1], [9, 20], [0, 21, 22], [9],
        [0, 21, 26], [0, 21, 26, 29, 30, 31], [9, 10, 17, 32], [9, 10, 11, 12], [9, 20, 33, 34],
    ],
    "prompts": [45, 40, 39, 44, 24, 40, 13, 16, 23, 46, 22, 12, 20, 28, 14, 12, 19, 7, 21, 44,
                25, 30, 32],
    "arrival": [1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0,
                7.0, 7.0, 9.0, 9.0, 10.0, 10.0, 10.0],
    "unit": 8,
    "cap": 48,
    "host": 88,
    "write": "write_back",
    "policy": "lfu",
    "host_capacity": 96,
    "sglang": [
        [0, 0], [16, 0], [0, 0], [0, 24], [24, 0], [0, 16], [8, 0], [16, 0], [0, 0], [16, 0],
        [0, 16], [8, 0], [16, 0], [8, 0], [8, 0], [8, 0], [16, 0], [0, 0], [16, 0], [16, 0],
        [0, 24], [16, 0], [8, 0],
    ],
    "sglang_counts": [256, 0, 160, 280],
}


# engine_fuzz --engine sglang-host --seed 9, case 281 (SYNTHETIC, 8-token pages,
# write_back, lru, an 88-token device pool, a 152-token host pool as SGLang sized it): at
# request 13 the host is short and the two nodes being loaded back for that request
# (blocks 0 and 9, on the duplicate list since their write-back backups) are pinned
# (``load_back_pending_id``) until the load's ack, so SGLang's duplicate reclaim takes an
# evictable device leaf's host copy (8 tokens) and then host leaves (24): 32 tokens of host
# evictions; reclaiming the pinned nodes freed 24 and evicted no host leaf.
FUZZ_CASE_WB_PIN = {
    "hashes": [
        [0], [0, 1, 2, 3], [4, 5, 6, 7, 8], [0, 9, 10], [4, 11, 12], [13, 14],
        [13, 14, 15, 16], [4, 11, 17, 18, 19, 20], [4], [4, 11, 21, 22, 23],
        [4, 24, 25, 26, 27], [13, 28], [0], [0, 9, 29, 30, 31, 32], [13, 28, 33], [0],
        [13, 28, 33], [0], [4, 11], [13, 28],
    ],
    "prompts": [
        1, 32, 37, 17, 24, 14, 25, 44, 7, 35, 40, 13, 5, 45, 21, 5, 21, 4, 14, 13,
    ],
    "arrival": [
        0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 6.0, 6.0, 6.0, 7.0, 8.0,
        8.0, 8.0, 9.0, 9.0,
    ],
    "unit": 8,
    "cap": 88,
    "host": 144,
    "write": "write_back",
    "policy": "lru",
    "host_capacity": 152,
    "sglang": [
        [0, 0], [0, 0], [0, 0], [8, 0], [8, 0], [0, 0], [8, 0], [16, 0], [0, 0], [16, 0],
        [8, 0], [0, 0], [0, 0], [0, 16], [8, 0], [0, 0], [16, 0], [0, 0], [8, 0], [8, 0],
    ],
    "sglang_counts": [176, 0, 32, 176],
}


@pytest.mark.parametrize("case", [FUZZ_CASE_WB_DUP, FUZZ_CASE_WB_PIN],
                         ids=["seed6-case29", "seed9-case281"])
def test_write_back_duplicate_order_equals_sglang(store, case):
    """Hits and the totals of host writes, backup failures, host and device evictions
    equal SGLang's (see FUZZ_CASE_WB_DUP and FUZZ_CASE_WB_PIN)."""
    from toolkit.ingest.fields import requests_table

    c = case
    n = len(c["prompts"])
    store.write("requests", "fz", requests_table("fz", c["arrival"], c["prompts"], [1] * n,
                                                 8, c["hashes"]), replace=True)
    res = run_tiers(store, TierReplayConfig(
        "fz", device_tokens=c["cap"], host_tokens=c["host_capacity"], page_tokens=c["unit"],
        write_policy=c["write"], policy=c["policy"], sequential=True), save=False)
    t = res.requests
    got = dict(zip(t["request_id"].to_pylist(), zip(t["device_tokens"].to_pylist(),
                                                     t["host_tokens"].to_pylist(), strict=True),
                   strict=True))
    assert [got[i] for i in range(n)] == [tuple(x) for x in c["sglang"]]
    s = res.summary
    assert [s[k] * c["unit"] for k in ("host_writes", "host_backup_failures",
                                       "host_evictions", "device_evictions")] == \
        c["sglang_counts"]
