"""Invariants every built-in policy must keep, on random streams (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit.policies import policies
from toolkit.policies.reference import PythonLRU

BUILTINS = ["arc", "clock", "fifo", "lfu", "lru", "opt", "opt-bypass", "s3fifo", "slru"]
ALWAYS_ADMIT = ["arc", "clock", "fifo", "lfu", "lru", "opt"]
SETTINGS = settings(max_examples=examples(60), deadline=None)
pytestmark = pytest.mark.slow  # every test here draws examples(60)


@st.composite
def workloads(draw):
    """(keys, n_keys, capacity, segments): small key spaces so caches overflow often;
    capacities up to 24 so S3FIFO (>= 20) and SLRU (>= 4) actually cache."""
    n_keys = draw(st.integers(1, 30))
    keys = np.array(draw(st.lists(st.integers(0, n_keys - 1), max_size=250)), dtype=np.int64)
    capacity = draw(st.integers(0, 24))
    cuts = draw(st.lists(st.integers(1, max(keys.size, 1)), max_size=4))
    segments = np.unique(np.array([0, *cuts], dtype=np.int64)) if keys.size else None
    if segments is not None:
        segments = segments[segments <= keys.size]
    return keys, n_keys, capacity, segments


def bounds(n: int, segments: np.ndarray | None) -> list[tuple[int, int]]:
    starts = [0] if segments is None else segments.tolist()
    return list(zip(starts, [*starts[1:], n], strict=True))


def resident_for_hits(keys: np.ndarray, hits: np.ndarray, segments) -> int:
    """Largest number of keys that must be resident at once for these hits.

    A hit at ``j`` means the key stayed cached since its previous access ``i`` (no
    access in between could have re-admitted it), so it occupies a slot over
    ``[i, j)``; a hit with no previous access in its segment is impossible (returns a
    huge count).
    """
    load = np.zeros(keys.size + 1, dtype=np.int64)
    for lo, hi in bounds(keys.size, segments):
        last: dict[int, int] = {}
        for j in range(lo, hi):
            k = int(keys[j])
            if hits[j]:
                if k not in last:
                    return 10**9
                load[last[k]] += 1
                load[j] -= 1
            last[k] = j
    return int(np.cumsum(load).max(initial=0))


@SETTINGS
@given(workloads())
def test_counts_add_up_and_hits_fit_in_capacity(w):
    """hits + misses = accesses, and no policy hits more than ``capacity`` slots allow."""
    keys, n_keys, capacity, segments = w
    for name in BUILTINS:
        res = policies.get(name).simulate(keys, n_keys, capacity, segments)
        assert res.hits.dtype == np.bool_ and res.hits.size == keys.size
        assert res.hit_count + res.miss_count == keys.size
        assert resident_for_hits(keys, res.hits, segments) <= capacity, name
        assert 0 <= res.evictions <= res.miss_count


@SETTINGS
@given(workloads())
def test_always_admitting_policies_evict_once_full(w):
    """For policies that admit every miss (given a slot at all), evictions = misses -
    final occupancy, and the occupancy after a segment is min(capacity, distinct keys
    in it); with no slots nothing is admitted, so nothing is evicted."""
    keys, n_keys, capacity, segments = w
    filled = sum(
        min(capacity, np.unique(keys[lo:hi]).size) for lo, hi in bounds(keys.size, segments)
    )
    for name in ALWAYS_ADMIT:
        res = policies.get(name).simulate(keys, n_keys, capacity, segments)
        assert res.evictions == (res.miss_count - filled if capacity else 0), name


@SETTINGS
@given(workloads())
def test_lru_stack_property(w):
    """LRU with one more slot hits on every access it hit before (so hits are monotone
    in capacity), and matches the OrderedDict reference exactly."""
    keys, n_keys, capacity, segments = w
    lru = policies.get("lru")
    small = lru.simulate(keys, n_keys, capacity, segments).hits
    big = lru.simulate(keys, n_keys, capacity + 1, segments).hits
    assert np.all(big[small])
    np.testing.assert_array_equal(
        small, PythonLRU().simulate(keys, n_keys, capacity, segments).hits
    )


@SETTINGS
@given(workloads())
def test_opt_is_a_lower_bound(w):
    """OPT misses no more than any other built-in; OPT-bypass no more than OPT."""
    keys, n_keys, capacity, segments = w
    misses = {
        n: policies.get(n).simulate(keys, n_keys, capacity, segments).miss_count for n in BUILTINS
    }
    assert misses["opt-bypass"] <= misses["opt"]
    for name, m in misses.items():
        assert misses["opt"] <= m or name == "opt-bypass", name


@SETTINGS
@given(workloads())
def test_segments_are_independent_calls(w):
    """A call with segments equals one call per segment, concatenated."""
    keys, n_keys, capacity, segments = w
    for name in BUILTINS:
        policy = policies.get(name)
        whole = policy.simulate(keys, n_keys, capacity, segments)
        parts = [
            policy.simulate(keys[lo:hi], n_keys, capacity) for lo, hi in bounds(keys.size, segments)
        ]
        hits = np.concatenate([p.hits for p in parts]) if parts else np.zeros(0, dtype=np.bool_)
        np.testing.assert_array_equal(whole.hits, hits, err_msg=name)
        assert whole.evictions == sum(p.evictions for p in parts), name


@SETTINGS
@given(workloads())
def test_opt_equals_brute_force_belady(w):
    """The bitset OPT kernel (the cache as a set of pending next-use times, dead keys only
    counted) gives the hits and evictions of a brute-force Belady, with and without bypass."""
    from toolkit.policies.reference import PythonOPT

    keys, n_keys, capacity, segments = w
    for bypass, name in ((False, "opt"), (True, "opt-bypass")):
        got = policies.get(name).simulate(keys, n_keys, capacity, segments)
        ref = PythonOPT(bypass).simulate(keys, n_keys, min(capacity, n_keys), segments)
        assert got.hits.tolist() == ref.hits.tolist(), name
        assert got.evictions == ref.evictions, name
