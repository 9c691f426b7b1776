"""Dense id remapping: the fast path and the sort path agree with np.unique."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit.replay.keys import dense_ids


@pytest.mark.slow
@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(st.integers(0, 50), st.integers(-2**62, 2**62)), max_size=60))
def test_matches_numpy_unique(values):
    """Property: same ids as np.unique's inverse, for small and for huge/negative values."""
    arr = np.asarray(values, dtype=np.int64)
    uniq, inv = np.unique(arr, return_inverse=True)
    ids, n = dense_ids(arr)
    assert n == uniq.size and ids.tolist() == inv.tolist()
