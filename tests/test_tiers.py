"""Tier replay: hand-checked HiCache rules, unbounded consistency with the prefix replay on
the real Mooncake trace, and properties of the per-request accounting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit.cost.from_replay import run_tiers
from toolkit.ingest import ingest_file
from toolkit.ingest.fields import requests_table
from toolkit.replay.prefix import PrefixReplayConfig, replay_prefix
from toolkit.replay.tiers import (
    TIER_REQUESTS,
    TIER_RUNS,
    UNBOUNDED,
    TierReplayConfig,
    page_stream,
    summary_json,
)

FAR = 1e6  # seconds between arrivals: every request finishes before the next arrives


def _store_trace(store, reqs, name="t", block=4, spacing=FAR, outputs=None):
    """reqs: list of hash lists; input tokens = block x pages (full pages)."""
    table = requests_table(
        name, [i * spacing for i in range(len(reqs))], [block * len(h) for h in reqs],
        outputs or [1] * len(reqs), block, reqs,
    )
    store.write("requests", name, table, replace=True)
    return name


def _run(store, name, **kw):
    """Page-granular semantics unless asked: these cases are worked for it (the SGLang
    semantics have their own in test_tiers_sglang.py)."""
    kw.setdefault("radix_semantics", "page")
    cfg = TierReplayConfig(name, **kw)
    return run_tiers(store, cfg, save=False)


def _sources(res):
    t = res.requests
    return [
        (d, h, s) for d, h, s in zip(
            t["device_tokens"].to_pylist(), t["host_tokens"].to_pylist(),
            t["storage_tokens"].to_pylist(), strict=True,
        )
    ]


class TestHiCacheRules:
    """Small cases worked by hand (block = page = 4 tokens, capacities in tokens)."""

    def test_prefix_usability(self, store):
        """A cached page after an uncached one is not usable: only the leading run counts."""
        name = _store_trace(store, [[1, 2], [9, 2], [1, 2, 3]])
        res = _run(store, name, device_tokens=UNBOUNDED)
        # req1: page 9 misses, so page 2 (cached) is unusable; req2: 1,2 hit
        assert _sources(res) == [(0, 0, 0), (0, 0, 0), (8, 0, 0)]

    def test_demotion_and_load_back(self, store):
        """Device of 2 pages + write-through host: evicted pages are host hits later."""
        name = _store_trace(store, [[1, 2], [3, 4], [1, 2]])
        res = _run(store, name, device_tokens=8 + 4, host_tokens=UNBOUNDED)
        # 1 decode page reserved per request (1 output token); req2 evicts 2 then 1
        assert _sources(res) == [(0, 0, 0), (0, 0, 0), (0, 8, 0)]
        s = res.summary
        assert s["host_load_pages"] == 2 and s["dropped_pages"] == 0
        assert s["host_hit_rate"] == pytest.approx(8 / 24)

    def test_leaf_first_eviction(self, store):
        """Under pressure the deepest page goes first, so the prefix stays on the device."""
        name = _store_trace(store, [[1, 2, 3], [7], [1, 2, 3]])
        # device 4 pages: req1 uses 3 + 1 decode; req2 needs 2 -> evicts only leaf 3
        res = _run(store, name, device_tokens=16, host_tokens=UNBOUNDED)
        assert _sources(res)[2] == (8, 4, 0)

    @pytest.mark.parametrize(("policy", "last"), [
        ("lru", (0, 0, 0)), ("priority", (0, 0, 0)), ("slru", (4, 0, 0)), ("lfu", (4, 0, 0)),
    ])
    def test_slru_protects_pages_hit_twice(self, store, policy, last):
        """Page 1 is hit twice (protected under SLRU), page 5 once. When req 5 needs room,
        LRU (and priority, all priorities equal) evicts the older page 1; SLRU evicts the
        probationary page 5, so req 6 still finds page 1 on the device."""
        name = _store_trace(store, [[1], [1], [1], [5], [6, 7], [1]])
        res = _run(store, name, device_tokens=16, host_tokens=0, policy=policy)
        assert _sources(res)[-1] == last

    def test_sglang_slru_name_and_slru_alias(self, store):
        """The tier policy is named sglang-slru (the registry's slru is libCacheSim's
        segmented LRU); slru is accepted as an alias, normalised before fingerprinting."""
        a = TierReplayConfig("t", policy="slru")
        b = TierReplayConfig("t", policy="sglang-slru")
        assert a == b and a.policy == "sglang-slru" and a.run_id == b.run_id
        name = _store_trace(store, [[1], [1], [1], [5], [6, 7], [1]])
        ra = _run(store, name, device_tokens=16, host_tokens=0, policy="slru")
        rb = _run(store, name, device_tokens=16, host_tokens=0, policy="sglang-slru")
        assert _sources(ra) == _sources(rb)
        assert ra.summary["policy"] == rb.summary["policy"] == "sglang-slru"

    def test_cli_policy_help_names_sglang_slru(self):
        """``replay tiers --help`` lists the tier policies and says slru is an alias."""
        from typer.testing import CliRunner

        from toolkit.cli import app

        out = " ".join(CliRunner().invoke(app, ["replay", "tiers", "--help"]).output.split())
        for name in ("lru", "lfu", "sglang-slru", "priority", "alias"):
            assert name in out

    def test_no_host_means_drop(self, store):
        """With host capacity 0 demotion is impossible: evicted pages are recomputed."""
        name = _store_trace(store, [[1, 2], [3, 4], [1, 2]])
        res = _run(store, name, device_tokens=12, host_tokens=0)
        assert _sources(res)[2] == (0, 0, 0)
        assert res.summary["dropped_pages"] == 4

    def test_write_back_copies_on_eviction(self, store):
        """write_back: nothing is on host until evicted, then the victim is copied."""
        name = _store_trace(store, [[1, 2], [3, 4], [1, 2]])
        res = _run(store, name, device_tokens=12, host_tokens=UNBOUNDED,
                   write_policy="write_back")
        assert _sources(res)[2] == (0, 8, 0)
        assert res.summary["host_writes"] == 4  # pages 1, 2 (req2), then 3, 4 (req3)

    def test_selective_needs_hits(self, store):
        """write_through_selective backs up only pages hit twice; others are dropped."""
        name = _store_trace(store, [[1], [1], [1], [5, 6], [1]])
        res = _run(store, name, device_tokens=12, host_tokens=UNBOUNDED,
                   write_policy="write_through_selective")
        assert _sources(res)[-1] == (0, 4, 0)

    def test_locked_pages_not_evicted(self, store):
        """A running request's pages stay put: the next arrival waits instead of evicting."""
        name = _store_trace(store, [[1, 2], [3, 4]], spacing=0.0, outputs=[1000, 1])
        res = _run(store, name, device_tokens=4 * 4, host_tokens=UNBOUNDED)
        # req1 needs 2 + 250 decode pages > the device: served without the tiers
        assert res.summary["oversize_requests"] == 1
        name = _store_trace(store, [[1, 2], [3, 4]], name="u", spacing=0.0, outputs=[5, 1])
        res = _run(store, name, device_tokens=4 * 4, host_tokens=UNBOUNDED)
        t = res.requests
        # req1: 2 pages + 2 decode = 4 pages, all locked; req2 must wait for req1's finish,
        # then needs 3 pages with 2 free: one unlocked page of req1 goes (leaf 2 first)
        assert t["admit_s"][1].as_py() == pytest.approx(t["finish_s"][0].as_py())
        assert res.summary["device_evictions"] == 1

    def test_storage_tier(self, store):
        """With a tiny host and storage on, evicted prefixes come back from storage."""
        name = _store_trace(store, [[1, 2], [3, 4], [5, 6], [1, 2]])
        res = _run(store, name, device_tokens=12, host_tokens=8, storage_tokens=UNBOUNDED)
        assert _sources(res)[-1] == (0, 0, 8)


class TestMooncake:
    """The real conversation trace (12,031 requests, 512-token blocks)."""

    def test_unbounded_equals_prefix_replay(self, mooncake_store):
        """Unbounded device: overall hit rate == prefix replay's unbounded token ratio."""
        pre = replay_prefix(mooncake_store, PrefixReplayConfig("conv"), save=False)
        res = _run(mooncake_store, "conv", device_tokens=UNBOUNDED)
        assert res.summary["overall_hit_rate"] == pytest.approx(pre["prefix_token_hit_ratio"],
                                                                abs=1e-12)
        assert res.summary["device_hit_tokens"] == pre["prefix_hit_tokens"] == 54_098_411

    def test_small_device_unbounded_host_same_total(self, mooncake_store):
        """Bounded device + unbounded write-through host loses nothing, only moves it."""
        res = _run(mooncake_store, "conv", device_tokens=300_000, host_tokens=UNBOUNDED)
        s = res.summary
        assert s["overall_hit_rate"] == pytest.approx(54_098_411 / 144_793_823, abs=1e-12)
        assert s["host_hit_rate"] > 0.2 and s["gpu_hit_rate"] < 0.1

    def test_gb200_defaults_golden(self, mooncake_store):
        """Default GB200 / GLM-5.2 tiers on trace arrivals: pinned figures."""
        res = _run(mooncake_store, "conv")
        s = res.summary
        assert s["device_capacity_tokens"] == 1_590_791
        # SGLang's pool for --hicache-ratio 2: int(2 x device) in whole 512-token pages
        # (the trace's blocks) plus one padding page
        assert s["host_capacity_tokens"] == (2 * 1_590_791 // 512 + 1) * 512 == 3_182_080
        assert (s["device_hit_tokens"], s["host_hit_tokens"]) == GOLDEN_GB200
        assert s["requests"] == 12_031

    def test_page_coarsening(self, mooncake_store):
        """1024-token pages (2 blocks) hit no more than 512-token pages when unbounded."""
        ps = page_stream(mooncake_store.read("requests", "conv"), 1024, "page")
        assert ps.page_tokens == 1024 and ps.tokens.sum() == 144_793_823
        res = run_tiers(mooncake_store, TierReplayConfig(
            "conv", device_tokens=UNBOUNDED, page_tokens=1024, radix_semantics="page"),
            stream=ps, save=False)
        assert res.summary["overall_hit_rate"] <= 54_098_411 / 144_793_823


GOLDEN_GB200 = (9_577_843, 11_408_604)  # times: the fitted serving model (moves with a refit)


class TestOutputs:
    def test_schemas_and_json(self, store):
        """Tables conform to the proposed schemas; --json starts with the six keys."""
        name = _store_trace(store, [[1, 2], [1, 3]])
        res = _run(store, name, device_tokens=UNBOUNDED)
        assert res.requests.schema == TIER_REQUESTS
        assert res.runs.schema == TIER_RUNS
        assert list(summary_json(res))[:6] == [
            "gpu_hit_rate", "host_hit_rate", "storage_hit_rate", "overall_hit_rate",
            "p50_ttft_s", "p90_ttft_s",
        ]

    def test_bad_config(self):
        """Unknown policies and arrival modes are refused with the allowed values."""
        with pytest.raises(ValueError, match="lru, lfu, sglang-slru, priority"):
            TierReplayConfig("t", policy="fifo")
        with pytest.raises(ValueError, match="scaled:F"):
            TierReplayConfig("t", arrivals="poisson")


_hashes = st.lists(
    st.lists(st.integers(0, 5), min_size=1, max_size=6), min_size=1, max_size=25
)


def _chain(raw):
    """Turn small random symbol lists into chained ids (a prefix tree)."""
    out, ids = [], {}
    for seq in raw:
        path, row = (), []
        for x in seq:
            path = (*path, x)
            row.append(ids.setdefault(path, len(ids)))
        out.append(row)
    return out


class TestProperties:
    @pytest.mark.slow
    @settings(max_examples=examples(40), deadline=None)
    @given(raw=_hashes, dev=st.integers(0, 12), host=st.integers(0, 12),
           policy=st.sampled_from(["lru", "lfu", "slru", "priority"]),
           write=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
           sem=st.sampled_from(["page", "sglang"]))
    def test_sources_sum_and_rates(self, tmp_path_factory, raw, dev, host, policy, write, sem):
        """Sources never exceed the prompt; rates in [0, 1] and add up to overall (both
        radix semantics, overlapping requests)."""
        import toolkit

        with toolkit.open_store(tmp_path_factory.mktemp("p"), create=True) as store:
            name = _store_trace(store, _chain(raw), spacing=0.5, outputs=[3] * len(raw))
            res = _run(store, name, device_tokens=4 * dev, host_tokens=4 * host,
                       policy=policy, write_policy=write, radix_semantics=sem)
        t = res.requests
        src = (np.asarray(t["device_tokens"]) + np.asarray(t["host_tokens"])
               + np.asarray(t["storage_tokens"]) + np.asarray(t["computed_tokens"]))
        assert (src == np.asarray(t["prompt_tokens"])).all()
        assert (np.asarray(t["computed_tokens"]) >= 0).all()
        s = res.summary
        for k in ("gpu_hit_rate", "host_hit_rate", "storage_hit_rate", "overall_hit_rate"):
            assert 0.0 <= s[k] <= 1.0
        assert s["overall_hit_rate"] == pytest.approx(
            s["gpu_hit_rate"] + s["host_hit_rate"] + s["storage_hit_rate"])
        assert (np.asarray(t["ttft_s"]) >= 0).all()

    @pytest.mark.slow
    @settings(max_examples=examples(40), deadline=None)
    @given(raw=_hashes, dev=st.integers(3, 10), host=st.integers(0, 10), more=st.integers(1, 8))
    def test_more_host_never_hurts_lru(self, tmp_path_factory, raw, dev, host, more):
        """LRU, write-through, one request at a time: more host never lowers the hit rate.

        Holds in this model because the device does not depend on the host and the
        host-only pages form an LRU stack; it is not claimed under overlapping requests.
        """
        import toolkit

        with toolkit.open_store(tmp_path_factory.mktemp("m"), create=True) as store:
            name = _store_trace(store, _chain(raw))
            a = _run(store, name, device_tokens=4 * dev, host_tokens=4 * host).summary
            b = _run(store, name, device_tokens=4 * dev, host_tokens=4 * (host + more)).summary
        assert b["overall_hit_rate"] >= a["overall_hit_rate"]
        assert b["gpu_hit_rate"] == a["gpu_hit_rate"]


def test_azure_arrivals_drive_mooncake_requests(mooncake_store):
    """arrivals=from:az: the Mooncake requests are sent with Azure's real inter-arrival gaps
    (tiled when Azure has fewer), in the same order; unbounded tiers still give the prefix
    replay's hit rate, since arrival times do not change what is cached when."""
    from tests.conftest import AZURE

    if "az" not in mooncake_store.traces():
        ingest_file(mooncake_store, "azure", AZURE, "az")
    res = run_tiers(mooncake_store, TierReplayConfig(
        "conv", arrivals="from:az", device_tokens=UNBOUNDED, radix_semantics="page"),
        save=False)
    sent = np.sort(res.requests.column("arrival_s").to_numpy())
    az = np.sort(mooncake_store.read("requests", "az").column("arrival_s").to_numpy())
    gaps = np.diff(az)
    expected = np.concatenate([[0.0], np.cumsum(np.tile(gaps, 2)[: sent.size - 1])])
    assert np.allclose(sent, expected)
    assert res.summary["overall_hit_rate"] == pytest.approx(54_098_411 / 144_793_823)
