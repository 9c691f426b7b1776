"""``--radix-semantics sglang``: request-by-request equality with SGLang's own RadixCache
on the Mooncake trace (fixture written by benchmarks/sglang_peer.py), a differential test
against a token-level reference on random traces, and hand-worked cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.budget import examples
from tests.radix_reference import RadixReference, tokens_of
from toolkit.cost.from_replay import run_tiers
from toolkit.ingest.fields import requests_table
from toolkit.replay.tiers import UNBOUNDED, TierReplayConfig, page_stream

PEER = Path(__file__).parent / "data" / "sglang_peer_mooncake.npz"
FAR = 1e6


def _peer_columns() -> list[str]:
    with np.load(PEER) as z:
        return sorted(k for k in z.files if k.startswith("p") and k != "prompt_tokens")


def _parse(name: str) -> tuple[int, int, str]:
    page, rest = name[1:].split("_c", 1)
    cap, policy = rest.split("_")
    return int(page), int(cap), policy


def _store(store, hashes, prompts, name="t", block=4, spacing=FAR, outputs=None):
    table = requests_table(name, [i * spacing for i in range(len(hashes))], prompts,
                           outputs or [1] * len(hashes), block, hashes)
    store.write("requests", name, table, replace=True)
    return name


def _dev(store, name, **kw):
    res = run_tiers(store, TierReplayConfig(name, **kw), save=False)
    return res.requests.column("device_tokens").to_pylist(), res


class TestSGLangPeer:
    """The fixture holds SGLang 0.5.23's per-request GPU hit tokens (sequential driving)."""

    def test_fixture_provenance(self):
        """The fixture names the SGLang version and covers pages 1/64/512 x 3 capacities."""
        with np.load(PEER) as z:
            assert str(z["sglang_version"]) == "0.5.23"
            assert z["request_id"].size == 12_031
        cols = _peer_columns()
        assert {(_parse(c)[0], _parse(c)[1]) for c in cols if c.endswith("lru")} == {
            (p, c) for p in (1, 64, 512) for c in (-1, 1_048_576, 204_800)
        } | {(512, 1_000_000), (512, 200_000)}

    @pytest.mark.parametrize("name", _peer_columns())
    def test_sequential_equals_sglang(self, mooncake_store, name):
        """--sequential --host-gb 0 gives SGLang's GPU hit tokens, request by request."""
        page, cap, policy = _parse(name)
        dev, res = _dev(mooncake_store, "conv", device_tokens=cap, host_tokens=0,
                        page_tokens=page, policy=policy, sequential=True)
        with np.load(PEER) as z:
            ref = z[name].astype(np.int64)
            rid = z["request_id"]
        got = np.asarray(dev, np.int64)[np.argsort(res.requests.column("request_id"))]
        assert np.array_equal(got[rid], ref)
        assert res.summary["host_hit_tokens"] == 0

    def test_page_semantics_differ_from_sglang(self, mooncake_store):
        """The fixture can tell the semantics apart: at the issue's 1M tokens (512-token
        pages) the page-granular replay misses SGLang's total by 146,186 tokens."""
        _, res = _dev(mooncake_store, "conv", device_tokens=1_000_000, host_tokens=0,
                      page_tokens=512, sequential=True, radix_semantics="page")
        with np.load(PEER) as z:
            want = int(z["p512_c1000000_lru"].sum())
        assert want == 8_011_776
        assert res.summary["device_hit_tokens"] - want == -146_186

    def test_unbounded_page1_is_prefix_replay(self):
        """Page size 1, unbounded: SGLang hits exactly the prefix replay's 54,098,411."""
        with np.load(PEER) as z:
            assert int(z["p1_c-1_lru"].sum()) == 54_098_411

    def test_cli_sequential_json(self, tmp_path):
        """The CLI's --sequential --host-gb 0 --json gives SGLang's total as integer keys."""
        from tests.conftest import MOONCAKE
        from toolkit.cli import app

        runner = CliRunner()
        s = str(tmp_path / "s")
        assert runner.invoke(app, ["ingest", "mooncake", str(MOONCAKE), "--store", s,
                                   "--name", "conv"]).exit_code == 0
        out = runner.invoke(app, [
            "replay", "tiers", "--store", s, "--trace", "conv", "--sequential", "--host-gb",
            "0", "--device-tokens", "204800", "--page-tokens", "64", "--json"])
        assert out.exit_code == 0, out.output
        row = json.loads(out.output)
        with np.load(PEER) as z:
            assert row["gpu_hit_tokens"] == int(z["p64_c204800_lru"].sum())
        assert row["prompt_tokens"] == 144_793_823
        assert row["host_hit_tokens"] == row["storage_hit_tokens"] == 0
        assert all(isinstance(row[k], int) for k in (
            "prompt_tokens", "gpu_hit_tokens", "host_hit_tokens", "storage_hit_tokens"))


def _chain(raw):
    out, ids = [], {}
    for seq in raw:
        path, row = (), []
        for x in seq:
            path = (*path, x)
            row.append(ids.setdefault(path, len(ids)))
        out.append(row)
    return out


class TestDifferential:
    @pytest.mark.slow
    @settings(max_examples=examples(60), deadline=None)
    @given(
        raw=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), min_size=1,
                     max_size=30),
        tails=st.lists(st.integers(1, 8), min_size=30, max_size=30),
        page=st.sampled_from([1, 2, 4, 8]), cap=st.integers(-1, 60),
        policy=st.sampled_from(["lru", "lfu", "slru", "priority"]),
    )
    def test_kernel_equals_token_reference(self, tmp_path_factory, raw, tails, page, cap,
                                           policy):
        """Random chained traces with partial last blocks (8-token blocks): the compiled
        kernel's per-request GPU hits equal a token-level reference of RadixCache."""
        import toolkit

        block = 8
        hashes = _chain(raw)
        prompts = [block * (len(h) - 1) + tails[i] for i, h in enumerate(hashes)]
        ref = RadixReference(page, cap, "lru" if policy == "priority" else policy)
        want = [ref.request(tokens_of(h, p, block)) for h, p in zip(hashes, prompts,
                                                                     strict=True)]
        with toolkit.open_store(tmp_path_factory.mktemp("d"), create=True) as store:
            name = _store(store, hashes, prompts, block=block)
            got, _ = _dev(store, name, device_tokens=cap, host_tokens=0, page_tokens=page,
                          policy=policy, sequential=True)
        assert got == want


class TestRules:
    """Hand-worked cases: 4-token blocks and pages, capacities in tokens, one at a time."""

    def test_partial_page_never_cached(self, store):
        """A 6-token prompt caches one 4-token page; the next hits 4, not 6."""
        name = _store(store, [[1, 2], [1, 2]], [6, 6])
        assert _dev(store, name, device_tokens=UNBOUNDED, sequential=True)[0] == [0, 4]
        page, _ = _dev(store, name, device_tokens=UNBOUNDED, sequential=True,
                       radix_semantics="page")
        assert page == [0, 6]

    def test_whole_leaf_overshoot(self, store):
        """Device 16 tokens. Req A caches [1,2,3] (12 tokens). Req B [7] needs 4 more with
        4 free: fits. Req C [8] needs 4 with 0 free: SGLang frees the whole 12-token leaf
        of A, so A's prefix misses later; the page kernel drops only A's leaf page."""
        name = _store(store, [[1, 2, 3], [7], [8], [1, 2, 3]], [12, 4, 4, 12])
        sg, res = _dev(store, name, device_tokens=16, host_tokens=0, sequential=True)
        assert sg == [0, 0, 0, 0]
        assert res.summary["device_evictions"] == 3 + 1  # A's 3 pages, then B's for A
        pg, _ = _dev(store, name, device_tokens=16, host_tokens=0, sequential=True,
                     radix_semantics="page")
        assert pg == [0, 0, 0, 8]

    def test_split_stamp_keeps_tail(self, store):
        """Req A caches [1,2,3]; B [9]; C [1] matches inside A's node, which splits into
        [1] and [2,3], both stamped by C's match. D [5] then needs 4 tokens with 0 free:
        the oldest leaf is B's [9] (A's tail [2,3] was stamped after it), so E [1,2,3]
        still hits all 12 tokens (device 16: after A and B it is full)."""
        name = _store(store, [[1, 2, 3], [9], [1], [5], [1, 2, 3]], [12, 4, 4, 4, 12])
        sg, _ = _dev(store, name, device_tokens=16, host_tokens=0, sequential=True)
        assert sg == [0, 0, 4, 0, 12]

    def test_locked_nodes_not_evicted(self, store):
        """Overlapping requests on a 16-token device: A [1,2] holds 8 tokens + 4 decode
        slots; B [3,4] (8 + 4) arrives with it and cannot evict A's locked leaf, so it waits
        for A's finish and then evicts A's whole, now unlocked, 8-token leaf."""
        name = _store(store, [[1, 2], [3, 4], [3, 4]], [8, 8, 8], spacing=0.0,
                      outputs=[4, 1, 1])
        _, res = _dev(store, name, device_tokens=16, host_tokens=0)
        t = res.requests
        assert t["admit_s"][1].as_py() == pytest.approx(t["finish_s"][0].as_py())
        assert res.summary["device_evictions"] == 2

    def test_sub_pages_cover_blocks(self, mooncake_store):
        """64-token pages on 512-token blocks cover every prompt token (page semantics)
        and SGLang's page-aligned prompts (sglang semantics)."""
        t = mooncake_store.read("requests", "conv")
        ps = page_stream(t, 64, "page")
        assert ps.tokens.sum() == 144_793_823 and ps.keys.size == int(
            np.ceil(np.asarray(t["input_tokens"]) / 64).sum())
        sg = page_stream(t, 64, "sglang")
        assert sg.tokens.sum() == int((np.asarray(t["input_tokens"]) // 64 * 64).sum())

    @pytest.mark.parametrize(("write", "last"), [
        ("write_through", (0, 32, 0)), ("write_through_selective", (0, 0, 0)),
    ])
    def test_selective_backs_up_hit_nodes(self, store, write, last):
        """16-token blocks, device 32 tokens, host unbounded. [1] is inserted, then hit
        twice: its node's hit count reaches 2, so selective write-through backs it up and
        [1] comes back from host after [5,6] evicts it. [5,6] (hit count 1) is backed up
        only under plain write-through, so only there does the last request find it on
        the host."""
        name = _store(store, [[1], [1], [1], [5, 6], [1], [5, 6]], [16, 16, 16, 32, 16, 32],
                      block=16)
        _, res = _dev(store, name, device_tokens=32, host_tokens=UNBOUNDED,
                      write_policy=write, sequential=True)
        t = res.requests
        src = list(zip(t["device_tokens"].to_pylist(), t["host_tokens"].to_pylist(),
                       t["storage_tokens"].to_pylist(), strict=True))
        assert src[4] == (0, 16, 0)
        assert src[5] == last

    def test_short_host_run_not_loaded(self, store):
        """SGLang's load_back_threshold (10 tokens): with 4-token blocks, [1]'s 4-token host
        copy is too short to load back, so the request recomputes it; [5,6]'s 8 tokens too
        (both hits would count as host hits without the threshold)."""
        name = _store(store, [[1], [5, 6], [1], [5, 6]], [4, 8, 4, 8])
        _, res = _dev(store, name, device_tokens=8, host_tokens=UNBOUNDED, sequential=True)
        assert res.requests["host_tokens"].to_pylist() == [0, 0, 0, 0]
        assert res.summary["host_writes"] > 0

    def test_write_back_counts_no_hits(self, store):
        """HiCache write_back counts no hits (unified_tree_core._inc_hit_count_and_check
        returns before the increment): under lfu, [1] hit twice is still the older leaf and
        goes when [3] needs room (demoted to host, then loaded back); write_through counts
        its hits and keeps it on the device, evicting [2] instead."""
        name = _store(store, [[1], [1], [2], [3], [1]], [16] * 5, block=16)
        kw = dict(device_tokens=32, host_tokens=64, policy="lfu", sequential=True)
        _, back = _dev(store, name, write_policy="write_back", **kw)
        _, thru = _dev(store, name, write_policy="write_through", **kw)
        assert back.requests["device_tokens"].to_pylist()[4] == 0
        assert back.requests["host_tokens"].to_pylist()[4] == 16
        assert thru.requests["device_tokens"].to_pylist()[4] == 16

    def test_fuzz_oversize_prompts_are_skipped(self, store):
        """engine_fuzz's first SGLang divergence (seed 1, case 10; page 1, 17-token pool):
        prompts longer than the pool are skipped whole (SGLang's scheduler never admits
        them; sglang_peer's driver inserted them over capacity), the rest hit as SGLang."""
        hashes = [[0, 1], [0, 1, 2], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2], [0],
                  [0, 1, 2, 3, 4], [0]]
        prompts = [12, 22, 20, 30, 18, 5, 37, 1]
        name = _store(store, hashes, prompts, block=8)
        got, res = _dev(store, name, device_tokens=17, host_tokens=0, page_tokens=1,
                        sequential=True)
        assert got == [0, 0, 0, 0, 0, 5, 0, 1]
        assert res.summary["oversize_requests"] == 5

    def test_cli_bad_semantics_and_page(self, store):
        """Bad --radix-semantics / --page-tokens: one-line errors, exit code 2."""
        from toolkit.cli import app

        name = _store(store, [[1, 2]], [8])
        runner = CliRunner()
        base = ["replay", "tiers", "--store", str(store.root), "--trace", name]
        out = runner.invoke(app, [*base, "--radix-semantics", "vllm"])
        assert out.exit_code == 2 and "radix_semantics must be sglang or page" in out.output
        out = runner.invoke(app, [*base, "--page-tokens", "3"])
        assert out.exit_code == 2 and "--page-tokens 3 neither divides" in out.output

    def test_not_chained_is_refused(self, store):
        """Hash 2 after 1 and after 9: sglang semantics needs chained hashes."""
        from toolkit.errors import ToolkitError

        name = _store(store, [[1, 2], [9, 2]], [8, 8])
        with pytest.raises(ToolkitError, match="request row 1: block_hashes are not chained"):
            _dev(store, name, device_tokens=UNBOUNDED)
