"""The one-pass LRU miss curve equals per-size LRU replays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from tests.test_policies import mooncake_stream, synthetic_stream
from toolkit.policies.lru import LRU
from toolkit.replay.mrc import lru_miss_curve


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
