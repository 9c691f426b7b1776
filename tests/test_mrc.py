"""Miss curves: the one-pass LRU curve equals per-size LRU replays; every policy's curve from
a sampled stream equals its replays at rate 1 and stays close to them when sampled."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from tests.test_policies import mooncake_stream, synthetic_stream
from toolkit.policies import policies
from toolkit.policies.lru import LRU
from toolkit.replay.mrc import Stream, lru_miss_curve, policy_miss_curve, stored_streams
from toolkit.replay.shards import HASH_SPACE, sample_stream, smallest_hashes, threshold_for_keys


class TestLruMissCurve:
    @pytest.mark.parametrize(
        "stream", [mooncake_stream, synthetic_stream], ids=["mooncake", "synthetic"]
    )
    def test_matches_lru_replays(self, stream):
        """Every 97th capacity up to 5000 (plus 0, 1, 5000) equals an LRU replay, on the
        real Mooncake stream and the synthetic sparse-attention stream."""
        keys, n_keys = stream()
        curve = lru_miss_curve(keys, n_keys, 5000)
        assert curve.shape == (5001,)
        for c in [0, 1, *range(2, 5001, 97), 5000]:
            assert curve[c] == LRU().simulate(keys, n_keys, c).miss_count, c

    def test_mooncake_golden(self):
        """Pinned: the Mooncake stream's LRU misses at 0, 100 and 4096 blocks."""
        keys, n_keys = mooncake_stream()
        curve = lru_miss_curve(keys, n_keys, 4096)
        assert curve[[0, 100, 4096]].tolist() == [288_500, 276_855, 263_241]

    def test_segments_count_cold_misses(self):
        """With a restart every 1000 accesses, each segment's first touches miss too."""
        keys, n_keys = synthetic_stream()
        segments = np.arange(0, keys.size, 1000)
        curve = lru_miss_curve(keys, n_keys, 300, segments)
        for c in (0, 10, 150, 300):
            assert curve[c] == LRU().simulate(keys, n_keys, c, segments).miss_count

    def test_rejects_negative_max_capacity(self):
        """A negative size is an error, not an empty curve."""
        with pytest.raises(ValueError, match="max_capacity"):
            lru_miss_curve(np.array([0]), 1, -1)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.integers(0, 15), max_size=200),
    st.lists(st.integers(1, 200), max_size=3),
)
def test_random_streams(raw, cuts):
    """Small random streams with random restarts: every capacity 0..20 matches."""
    keys = np.array(raw, dtype=np.int64)
    segments = np.unique([0, *[c for c in cuts if c <= keys.size]]) if keys.size else None
    curve = lru_miss_curve(keys, 16, 20, segments)
    for c in range(21):
        assert curve[c] == LRU().simulate(keys, 16, c, segments).miss_count


def _one(keys, n_keys, segments=None):
    return lambda: [(0, Stream(keys, n_keys, segments))]


#: Every built-in policy, each at sizes across the Mooncake stream's range.
POLICIES = ["lru", "fifo", "clock", "lfu", "arc", "s3fifo", "slru", "opt", "opt-bypass"]
SIZES = [0, 1, 700, 9_000, 40_000, 120_000]


class TestPolicyMissCurve:
    @pytest.mark.parametrize("policy", POLICIES)
    def test_rate_one_is_exact(self, policy):
        """At --sample-rate 1 every policy's curve is its per-size replays' miss counts
        (real Mooncake stream)."""
        keys, n_keys = mooncake_stream()
        curve = policy_miss_curve(_one(keys, n_keys), SIZES, policy, sample_rate=1.0)
        want = [policies.get(policy).simulate(keys, n_keys, c).miss_count for c in SIZES]
        assert curve.misses.tolist() == want
        assert curve.method == ("stack" if policy == "lru" else "exact")
        assert curve.sample_rate == 1.0 and curve.sampled_accesses == keys.size

    @pytest.mark.parametrize("policy", ["lru", "fifo", "arc", "s3fifo", "opt"])
    def test_sampled_close_to_exact(self, policy):
        """Fixed rate 0.05 and fixed size 8192 keys: mean absolute miss-ratio error under
        0.02 at 8 sizes on the real Mooncake stream (182,790 keys)."""
        keys, n_keys = mooncake_stream()
        sizes = np.linspace(n_keys / 8, n_keys, 8).astype(int)
        exact = policy_miss_curve(_one(keys, n_keys), sizes, policy, sample_rate=1.0)
        for kw in ({"sample_rate": 0.05}, {"sample_keys": 8192}):
            est = policy_miss_curve(_one(keys, n_keys), sizes, policy, **kw)
            assert est.method == ("shards" if policy == "lru" else "minisim")
            assert est.sampled_accesses < keys.size / 5
            assert np.abs(est.miss_ratio - exact.miss_ratio).mean() <= 0.02, kw

    def test_segments_restart_cold(self):
        """With a cold restart every 1000 accesses, rate 1 equals replays with the same
        segments, for a policy without the stack property too."""
        keys, n_keys = synthetic_stream()
        segments = np.arange(0, keys.size, 1000)
        for policy in ("fifo", "lru"):
            curve = policy_miss_curve(_one(keys, n_keys, segments), [0, 10, 150, 300], policy,
                                      sample_rate=1.0)
            assert curve.misses.tolist() == [
                policies.get(policy).simulate(keys, n_keys, c, segments).miss_count
                for c in (0, 10, 150, 300)]

    def test_both_sampling_options_refused(self):
        """--sample-rate and --sample-keys together is an error."""
        keys, n_keys = synthetic_stream()
        with pytest.raises(ValueError, match="not both"):
            policy_miss_curve(_one(keys, n_keys), [10], "lru", sample_rate=0.5, sample_keys=9)

    def test_rate_out_of_range_refused(self):
        keys, n_keys = synthetic_stream()
        with pytest.raises(ValueError, match="sample-rate"):
            policy_miss_curve(_one(keys, n_keys), [10], "fifo", sample_rate=1.5)


class TestSampling:
    def test_fixed_size_keeps_that_many_keys(self):
        """A fixed-size threshold keeps the asked number of distinct keys (up to hash
        ties), and every access of a kept key."""
        keys, n_keys = mooncake_stream()
        seg = np.zeros(1, dtype=np.int64)
        hashes = smallest_hashes(keys, n_keys, seg, 5001, salt=3)
        t = threshold_for_keys(hashes, 5000)
        sk, _ = sample_stream(keys, seg, t, 3)
        kept = np.unique(sk)
        assert 4990 <= kept.size <= 5000
        assert sk.size == np.isin(keys, kept).sum()

    def test_smallest_hashes_are_those_of_the_distinct_keys(self):
        """One segment (a byte map of the keys present) and several (a stamp per key) both
        give the smallest hashes of the distinct (segment, key) pairs."""
        from toolkit.replay.shards import _key_hash

        keys, n_keys = mooncake_stream()
        one = np.zeros(1, dtype=np.int64)
        want = np.sort([_key_hash(0, int(k), 3) for k in np.unique(keys)])[:700]
        assert np.array_equal(smallest_hashes(keys, n_keys, one, 700, salt=3), want)
        two = np.array([0, keys.size // 2], dtype=np.int64)
        pairs = {(0, int(k)) for k in keys[: two[1]]} | {(1, int(k)) for k in keys[two[1]:]}
        want = np.sort([_key_hash(s, k, 3) for s, k in pairs])[:700]
        assert np.array_equal(smallest_hashes(keys, n_keys, two, 700, salt=3), want)

    def test_small_stream_is_not_sampled(self):
        """A stream with fewer distinct keys than asked is kept whole (exact curve)."""
        keys, n_keys = synthetic_stream()
        seg = np.zeros(1, dtype=np.int64)
        h = smallest_hashes(keys, n_keys, seg, 10**6 + 1, salt=0)
        assert threshold_for_keys(h, 10**6) == HASH_SPACE

    def test_segments_sample_independently(self):
        """In a segmented stream a key is a (segment, key) pair: the same key is kept in
        some buffers and not in others."""
        keys = np.tile(np.arange(50, dtype=np.int64), 40)
        seg = np.arange(0, keys.size, 50, dtype=np.int64)
        sk, starts = sample_stream(keys, seg, HASH_SPACE // 2, 0)
        per = np.diff(np.r_[starts, sk.size])
        assert starts.size == seg.size and per.min() < per.max()
        kept = [set(sk[a:b]) for a, b in zip(starts, starts + per, strict=True)]
        assert any(k != kept[0] for k in kept)


def test_stored_prefix_curve_matches_replays(mooncake_store):
    """The stored timeline's prefix stream at rate 1 gives each policy's replay misses."""
    from toolkit.replay.prefix import load_stream

    stream = load_stream(mooncake_store, "conv")
    curve = policy_miss_curve(stored_streams(mooncake_store, "conv", "prefix"), [500, 5000],
                              "s3fifo", sample_rate=1.0)
    assert curve.misses.tolist() == [
        policies.get("s3fifo").simulate(stream.keys, stream.n_keys, c).miss_count
        for c in (500, 5000)]


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=300), st.integers(1, HASH_SPACE),
       st.integers(0, 2**31))
def test_sample_is_a_subsequence(raw, threshold, salt):
    """A sample keeps, in order, exactly the accesses of the keys it keeps."""
    keys = np.array(raw, dtype=np.int64)
    seg = np.zeros(1, dtype=np.int64)
    sk, _ = sample_stream(keys, seg, threshold, salt)
    kept = set(sk.tolist())
    assert sk.tolist() == [k for k in raw if k in kept]


class TestCli:
    def _run(self, store, *args):
        import json

        from typer.testing import CliRunner

        from toolkit.cli import app

        res = CliRunner().invoke(app, ["replay", "mrc", "--store", str(store.root), "--trace",
                                       "conv", "--kind", "prefix", "--max-capacity", "4096",
                                       *args])
        return res, (json.loads(res.stdout) if res.exit_code == 0 else None)

    def test_policy_at_rate_one_is_the_replay(self, mooncake_store):
        """`replay mrc --policy fifo --sample-rate 1 --json`: one row per printed size with
        the FIFO replay's misses, method `exact`."""
        from toolkit.replay.prefix import load_stream

        res, rows = self._run(mooncake_store, "--policy", "fifo", "--sample-rate", "1",
                              "--json")
        assert res.exit_code == 0, res.output
        s = load_stream(mooncake_store, "conv")
        assert [r["capacity"] for r in rows] == [0] + [1 << i for i in range(13)]
        for r in rows[-3:]:
            assert r["method"] == "exact" and r["policy"] == "fifo"
            assert r["misses"] == policies.get("fifo").simulate(
                s.keys, s.n_keys, r["capacity"]).miss_count

    def test_sampling_options_exclusive(self, mooncake_store):
        """Both sampling options: a one-line error, exit 2."""
        res, _ = self._run(mooncake_store, "--sample-rate", "0.1", "--sample-keys", "100")
        assert res.exit_code == 2 and "not both" in res.stderr
