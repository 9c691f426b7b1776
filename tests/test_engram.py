"""Engram lookups: hashing against the reference formula, recording, replay and pricing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app
from toolkit.cost.engram import run_engram
from toolkit.engram.hashing import (
    EngramConfig,
    EngramHasher,
    default_layer_ids,
    hash_rows,
    is_prime,
    layer_multipliers,
    normalise_for_check,
    table_primes,
)
from toolkit.engram.record import record_engram
from toolkit.replay.engram import (
    EngramReplayConfig,
    dense_remap,
    load_stream,
    reuse_shares,
)

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ROOT / "traces" / "smollm2" / "texts"
BUNDLED = sorted(p for p in TEXTS.glob("*.txt") if p.name != "LICENSES.txt")


def reference_rows(ids: np.ndarray, pad: int, orders, mults, primes) -> np.ndarray:
    """The reference's formulation: pad-shifted copies, XOR of products, one mod per head."""
    t_n = ids.size
    max_n = max(orders)
    shifts = [np.concatenate([np.full(k, pad, dtype=np.int64), ids])[:t_n] for k in range(max_n)]
    out = np.empty((t_n, mults.shape[0], len(orders), primes.shape[2]), dtype=np.int64)
    for li in range(mults.shape[0]):
        for oi, n in enumerate(orders):
            mix = shifts[0] * mults[li, 0]
            for k in range(1, n):
                mix = np.bitwise_xor(mix, shifts[k] * mults[li, k])
            for h in range(primes.shape[2]):
                out[:, li, oi, h] = mix % primes[li, oi, h]
    return out


class TestHashFormula:
    def test_hand_computed_rows(self):
        """ids 5,7,9, pad 0, multipliers 3,5,7, primes 11,13 | 17,19: rows worked by hand."""
        ids = np.array([5, 7, 9], dtype=np.int64)
        mults = np.array([[3, 5, 7]], dtype=np.int64)
        primes = np.array([[[11, 13], [17, 19]]], dtype=np.int64)
        rows = hash_rows(ids, np.array([0, 0]), np.array([2, 3]), mults, primes)
        # t0: 15 -> (4, 2); 15 -> (15, 15).  t1: 21^25 = 12 -> (1, 12); 12 -> (12, 12)
        # t2: 27^35 = 56 -> (1, 4); 56^35 = 27 -> (10, 8)
        assert rows[:, 0].tolist() == [[[4, 2], [15, 15]], [[1, 12], [12, 12]],
                                       [[1, 4], [10, 8]]]

    def test_hand_computed_pad(self):
        """A nonzero pad id enters the N-grams before the sequence start: 15 ^ 2*5 = 5."""
        rows = hash_rows(np.array([5], dtype=np.int64), np.array([2, 2]), np.array([2, 3]),
                         np.array([[3, 5, 7]], dtype=np.int64),
                         np.array([[[11, 13], [17, 19]]], dtype=np.int64))
        # bigram 15 ^ 10 = 5; trigram 5 ^ 14 = 11
        assert rows[0, 0].tolist() == [[5, 5], [11, 11]]

    def test_primes_hand_computed(self):
        """Next prime above rows-1, never reused: 11,13,17 | 19,23,29 | 31,37,41 | 43,47,53."""
        cfg = EngramConfig(heads=3, embed_dim_per_ngram=384, table_rows=10, layer_ids=(1, 15))
        assert table_primes(cfg, 10).tolist() == [[[11, 13, 17], [19, 23, 29]],
                                                  [[31, 37, 41], [43, 47, 53]]]

    def test_is_prime_matches_a_sieve(self):
        """Miller-Rabin agrees with a sieve of Eratosthenes below 20,000."""
        n = 20_000
        sieve = np.ones(n, dtype=bool)
        sieve[:2] = False
        for i in range(2, int(n**0.5) + 1):
            if sieve[i]:
                sieve[i * i::i] = False
        assert [is_prime(i) for i in range(n)] == sieve.tolist()
        assert is_prime(245_771) and not is_prime(245_770)

    def test_multipliers_are_odd_and_bounded(self):
        """m = 2r + 1 with r < half_bound, so c x m never overflows int64."""
        cfg = EngramConfig(layer_ids=(1, 15, 29))
        m = layer_multipliers(cfg, 32_873)
        half = np.iinfo(np.int64).max // 32_873 // 2
        assert m.shape == (3, 3) and np.all(m % 2 == 1) and np.all(m < 2 * half)
        # seed + 10007 * layer_id, drawn by numpy's default_rng (golden, layer 1)
        assert m[0].tolist() == [230998924996643, 14589267844085, 108396430184923]

    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.integers(0, 999), min_size=1, max_size=60), st.integers(0, 999),
           st.integers(1, 40))
    def test_matches_reference_formulation_and_chunks(self, ids, pad, split):
        """Compiled rows equal the shift/XOR/mod formulation, whole or in two chunks."""
        cfg = EngramConfig(heads=3, embed_dim_per_ngram=384, table_rows=50, layer_ids=(1, 15))
        lookup = np.arange(1000, dtype=np.int64)
        h = EngramHasher.build(EngramConfig(heads=3, embed_dim_per_ngram=384, table_rows=50,
                                            layer_ids=(1, 15), pad_token_id=pad), lookup, 1000)
        arr = np.asarray(ids, dtype=np.int64)
        want = reference_rows(arr, pad, cfg.ngram_orders, h.mults, h.primes)
        assert np.array_equal(h.rows(arr, h.start_history()), want)
        cut = min(split, arr.size)
        first = h.rows(arr[:cut], h.start_history())
        hist = np.concatenate([h.start_history(), arr[:cut]])[-2:]
        assert np.array_equal(np.concatenate([first, h.rows(arr[cut:], hist)]), want)

    def test_bad_configs_refused(self):
        """Orders below 2, unsorted orders, zero heads and ragged widths are refused."""
        for kw in ({"ngram_orders": (1, 2)}, {"ngram_orders": (3, 2)}, {"heads": 0},
                   {"embed_dim_per_ngram": 100, "heads": 8}, {"layer_ids": (1, 1)}):
            with pytest.raises(ValueError):
                EngramConfig(**kw)
        assert default_layer_ids(3) == (1, 15, 29)


@pytest.fixture(scope="module")
def smollm2_hasher():
    return EngramHasher.build(EngramConfig())


class TestCompression:
    def test_normaliser_matches_python_twin(self):
        """The tokenizers normaliser equals NFKC/NFD/strip-accents/lower/collapse/strip."""
        from toolkit.engram.hashing import _normalizer

        norm = _normalizer()
        for s in [" The", "Café", "  \t\n", " ", "ÅNGSTRÖM\n\nx", "ﬁne", "a  b", ""]:
            assert norm.normalize_str(s) == normalise_for_check(s), s

    def test_smollm2_canonical_ids(self, smollm2_hasher):
        """49,152 SmolLM2 ids compress to 32,873; case and a leading space are merged."""
        from toolkit.engram.hashing import load_backbone_tokenizer

        tok = load_backbone_tokenizer()
        h = smollm2_hasher
        assert (h.lookup.shape[0], h.compressed_vocab) == (49_152, 32_873)
        ids = [tok.token_to_id(t) for t in ("the", "The", "Ġthe", "ĠThe")]
        assert len({int(h.lookup[i]) for i in ids}) == 1
        assert h.table_rows == 5 * 49_152 and h.primes[0, 0, 0] == 245_771
        assert h.cfg.row_bytes == 128 and h.cfg.lookups_per_token == 32


@pytest.fixture(scope="module")
def bundled_store(tmp_path_factory, smollm2_hasher):
    root = tmp_path_factory.mktemp("engram") / "store"
    with toolkit.open_store(root, create=True) as s:
        record_engram(s, "bundled", BUNDLED, EngramConfig(), hasher=smollm2_hasher)
        yield s


class TestRecord:
    def test_bundled_figures(self, bundled_store):
        """4 bundled texts: 33,044 tokens x 32 lookups = 1,057,408 rows, config stored."""
        meta = bundled_store.read("engram_traces", "bundled").to_pylist()[0]
        assert (meta["requests"], meta["tokens"], meta["lookups"]) == (4, 33_044, 1_057_408)
        assert json.loads(meta["config_json"])["layer_ids"] == [1, 15]
        n = bundled_store.query("SELECT count(*) AS n, count(DISTINCT request_id) AS r "
                                "FROM engram_lookups WHERE trace = 'bundled'").row(0)
        assert n == (1_057_408, 4)

    def test_stored_rows_recompute_from_metadata(self, bundled_store, smollm2_hasher):
        """Rows of request 2 (heapq.py) equal hashing its token ids again from scratch."""
        from toolkit.engram.hashing import load_backbone_tokenizer

        text = BUNDLED[1].read_text(encoding="utf-8")
        assert BUNDLED[1].name == "heapq.py.txt"
        ids = np.asarray(load_backbone_tokenizer().encode(text).ids, dtype=np.int64)
        h = smollm2_hasher
        want = reference_rows(h.lookup[ids], h.pad_compressed, (2, 3), h.mults, h.primes)
        got = bundled_store.query("SELECT row FROM engram_lookups WHERE trace = 'bundled' "
                                  "AND request_id = 1 ORDER BY position, layer, ngram, head")
        assert np.array_equal(got["row"].to_numpy(), want.reshape(-1))

    def test_chunked_recording_equals_whole(self, tmp_path, smollm2_hasher):
        """Recording in 2 KiB chunks gives the same rows as in one chunk (history carried)."""
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            for name, chunk in (("whole", 1 << 20), ("chunked", 2048)):
                record_engram(s, name, [BUNDLED[1]], EngramConfig(), hasher=smollm2_hasher,
                              chunk_bytes=chunk)
            a = s.read("engram_lookups", "whole").column("row").to_numpy()
            b = s.read("engram_lookups", "chunked").column("row").to_numpy()
        assert a.size == b.size and np.array_equal(a, b)

    def test_non_utf8_names_file_and_line(self, tmp_path, smollm2_hasher):
        """A non-UTF-8 line is refused with file and line; nothing is written."""
        bad = tmp_path / "bad.txt"
        bad.write_bytes(b"fine\nalso fine\n\xff\xfe broken\n")
        with toolkit.open_store(tmp_path / "s", create=True) as s:
            with pytest.raises(toolkit.errors.ToolkitError, match=r"bad.txt: line 3: not UTF-8"):
                record_engram(s, "x", [bad], EngramConfig(), hasher=smollm2_hasher)
            assert s.keys("engram_lookups") == [] and s.keys("engram_traces") == []


class TestReplay:
    def test_golden_lru(self, bundled_store):
        """LRU, 10 MB of 128 B rows (78,125 rows): golden hits on the bundled trace."""
        out = run_engram(bundled_store, EngramReplayConfig("bundled", 10e6), save=False)
        assert out["capacity_rows"] == 78_125 and out["row_bytes"] == 128
        assert (out["hits"], out["misses"], out["distinct_rows"]) == (416_853, 640_555, 563_495)
        assert out["hbm_bytes_per_token"] + out["backing_bytes_per_token"] == 32 * 128

    def test_lru_hits_match_one_pass_miss_curve(self, bundled_store):
        """Replay misses equal the Mattson miss curve at the same capacity (differential)."""
        from toolkit.replay.mrc import lru_miss_curve

        s = load_stream(bundled_store, "bundled")
        dense, n = dense_remap(s.keys, s.n_keys)
        curve = lru_miss_curve(dense, n, 100_000)
        for cap_rows in (0, 1_000, 78_125):
            out = run_engram(bundled_store, EngramReplayConfig("bundled", cap_rows * 128.0),
                                save=False)
            assert out["misses"] == curve[cap_rows]

    def test_stored_miss_curve_equals_replays(self, bundled_store):
        """``miss_curve_table(kind="engram")`` (``toolkit replay mrc --kind engram``) holds
        the replay's misses at each capacity, over every lookup."""
        from toolkit.replay.mrc import miss_curve_table

        t = miss_curve_table(bundled_store, "bundled", "engram", 80_000, save=False)
        assert t.num_rows == 80_001 and set(t["kind"].to_pylist()) == {"engram"}
        for cap_rows in (0, 1_000, 78_125):
            out = run_engram(bundled_store, EngramReplayConfig("bundled", cap_rows * 128.0),
                             save=False)
            assert t["misses"][cap_rows].as_py() == out["misses"]
            assert t["accesses"][cap_rows].as_py() == out["hits"] + out["misses"]

    def test_fast_load_equals_column_load(self, bundled_store):
        """Rebuilding tables from the lookup index equals reading layer/ngram/head columns."""
        from toolkit.replay.engram import load_dense

        slow = load_stream(bundled_store, "bundled")
        want, n = dense_remap(slow.keys, slow.n_keys)
        fast = load_dense(bundled_store, "bundled")
        assert fast.n_distinct == n and np.array_equal(fast.keys, want)
        assert np.array_equal(fast.counts, np.bincount(want))

    def test_unbounded_cache_misses_only_cold(self, bundled_store):
        """A cache larger than every row touched misses exactly once per distinct row."""
        out = run_engram(bundled_store, EngramReplayConfig("bundled", 1e12, policy="fifo"),
                            save=False)
        assert out["misses"] == out["distinct_rows"]

    def test_dense_remap_first_seen(self):
        """Keys are renumbered 0.. in order of first appearance."""
        d, n = dense_remap(np.array([7, 3, 7, 9, 3], dtype=np.int64), 10)
        assert d.tolist() == [0, 1, 0, 2, 1] and n == 3

    def test_reuse_shares_against_counter(self):
        """Hottest-share equals a Counter-based count (1 of 4 rows -> 5 of 8 lookups)."""
        keys = np.array([0, 0, 0, 0, 0, 1, 2, 3], dtype=np.int32)
        assert reuse_shares(keys, 4, (0.01, 0.5)) == (5 / 8, 6 / 8)
        rng = np.random.default_rng(1)
        keys = rng.zipf(1.3, 5000).astype(np.int64) % 300
        dense, n = dense_remap(keys, 300)
        top = sorted(Counter(dense.tolist()).values(), reverse=True)
        k = int(np.ceil(0.1 * n))
        assert reuse_shares(dense, n, (0.1,))[0] == pytest.approx(sum(top[:k]) / dense.size)

    def test_unknown_trace_and_policy(self, bundled_store):
        """Unknown names fail with the known ones listed."""
        with pytest.raises(toolkit.errors.ToolkitError, match="known: bundled"):
            run_engram(bundled_store, EngramReplayConfig("nope", 1e6))
        with pytest.raises(Exception, match="policy"):
            EngramReplayConfig("bundled", 1e6, policy="nope")
        with pytest.raises(ValueError, match="backing"):
            EngramReplayConfig("bundled", 1e6, backing="tape")


class TestPlacementCost:
    def _placement(self, hit_ratio=0.5, **kw):
        from toolkit.cost.engram import EngramPlacement
        from toolkit.hardware import get_hardware
        from toolkit.models import get_model

        return EngramPlacement(get_model("deepseek-v3.2"), get_hardware("gb200"), 128, 16,
                               (1, 15), hit_ratio, 1e9, **kw)

    def test_orderings(self):
        """DRAM >= SSD; overlapped >= sync; a perfect cache makes both equal the no-fetch step."""
        from toolkit.cost.engram import price_placements

        r = price_placements(self._placement(0.5))
        for b in ("dram", "ssd"):
            assert r[b]["tokens_per_usd_overlapped"] >= r[b]["tokens_per_usd_sync"] > 0
        assert r["dram"]["tokens_per_usd_sync"] > r["ssd"]["tokens_per_usd_sync"]
        perfect = price_placements(self._placement(1.0))
        assert perfect["ssd"]["tokens_per_usd_sync"] == perfect["dram"]["tokens_per_usd_sync"]
        assert perfect["dram"]["fetch_s_per_layer"] == 0.0

    def test_table_in_hbm_costs_batch(self):
        """200 GB over 8 GPUs takes 25 GB of KV budget: smaller batch than offloaded."""
        from toolkit.cost.engram import price_placements

        r = price_placements(self._placement(0.5))
        assert r["hbm"]["batch_per_gpu"] < r["dram"]["batch_per_gpu"]
        huge = price_placements(self._placement(0.5, table_bytes=8 * 400e9))
        assert huge["hbm"]["fits"] == 0.0 and huge["hbm"]["tokens_per_usd_overlapped"] == 0.0
        assert huge["dram"]["fits"] == 0.0 and huge["ssd"]["fits"] == 1.0

    def test_ssd_fetch_time_by_hand(self):
        """1,000 rows from SSD: 80 us + max(1000/2.5M IOPS, 1000 x 4 KiB / 7 GB/s) + link.

        At 4 KiB per read 2.5 M IOPS would need 10.2 GB/s, so GB200's 7 GB/s bounds it."""
        from toolkit.cost.engram import _fetch_s

        p = self._placement()
        link = _fetch_s(p, "dram", 1000)
        assert _fetch_s(p, "ssd", 1000) == pytest.approx(80e-6 + 1000 * 4096 / 7e9 + link)


    def test_published_gap_inversion_by_hand(self):
        """121 M vs 52 M tokens/$ at $1.86 on GB200: (1/26,867 - 1/62,517) s / 0.585 us = 36.3
        missed rows per token (sync); 1 / (26,867 x 0.585 us) = 63.6 (overlapped)."""
        from toolkit.cost.engram import missed_rows_per_token_for
        from toolkit.hardware import get_hardware

        hw = get_hardware("gb200")
        assert missed_rows_per_token_for(hw, 121e6, 52e6) == pytest.approx(36.27, abs=0.01)
        assert missed_rows_per_token_for(hw, 121e6, 52e6, overlapped=True) == pytest.approx(
            63.61, abs=0.01)


class TestCli:
    def test_record_and_replay_json(self, tmp_path):
        """record engram then replay engram --json: hits, misses and tokens_per_usd present."""
        st_ = str(tmp_path / "s")
        r = CliRunner().invoke(app, ["record", "engram", "--store", st_, "--name", "h",
                                     "--text", str(BUNDLED[1]), "--heads", "4", "--json"])
        assert r.exit_code == 0, r.output
        rec = json.loads(r.output)
        assert rec["lookups"] == rec["tokens"] * 2 * 2 * 4
        r = CliRunner().invoke(app, ["replay", "engram", "--store", st_, "--trace", "h",
                                     "--hbm-cache-gb", "0.001", "--backing", "ssd",
                                     "--policy", "s3fifo", "--hardware", "mi355x", "--json"])
        assert r.exit_code == 0, r.output
        out = json.loads(r.output)
        assert out["hits"] + out["misses"] == rec["lookups"] and out["tokens_per_usd"] > 0

    def test_bad_input_exit_2(self, tmp_path):
        """Missing text file, bad --ngram, bad --backing: one line on stderr, exit 2."""
        st_ = str(tmp_path / "s")
        for args in (["record", "engram", "--store", st_, "--name", "x", "--text", "nofile"],
                     ["record", "engram", "--store", st_, "--name", "x", "--ngram", "1,2"],
                     ["replay", "engram", "--store", st_, "--trace", "x",
                      "--hbm-cache-gb", "1", "--backing", "tape"]):
            r = CliRunner().invoke(app, args)
            assert r.exit_code == 2 and r.output.strip().startswith("error:"), r.output
            assert len(r.output.strip().splitlines()) == 1
