"""Built-in policies against libCacheSim (differential) and against pinned small cases.

libCacheSim runs in-process on a file it reads itself (a ``.npy`` read as BIN_TRACE, or a
``<iq`` file carrying next-access times for Belady). Its C errors abort the process, so
every input is validated in Python first (see :func:`lcs_misses`).
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import libcachesim as lcs
import numpy as np
import pytest

from tests.conftest import MOONCAKE
from toolkit.policies import policies
from toolkit.policies.lfu import LFU
from toolkit.policies.lru import LRU
from toolkit.policies.opt import NEVER, OPT, next_use
from toolkit.policies.reference import PythonLRU
from toolkit.policies.s3fifo import S3FIFO
from toolkit.policies.slru import SLRU
from toolkit.policies.synthetic import sparse_attention_stream

BUILTINS = ["arc", "clock", "fifo", "lfu", "lru", "opt", "opt-bypass", "s3fifo", "slru"]
LCS_NAMES = {
    "lru": "LRU",
    "fifo": "FIFO",
    "clock": "Clock",
    "opt": "Belady",
    "lfu": "LFU",
    "arc": "ARC",
    "s3fifo": "S3FIFO",
    "slru": "SLRU",
}


@functools.cache
def mooncake_stream() -> tuple[np.ndarray, int]:
    """Mooncake block ids, flattened per request in file order, remapped dense."""
    with MOONCAKE.open() as f:
        ids = [h for line in f for h in json.loads(line)["hash_ids"]]
    uniq, keys = np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True)
    return keys.astype(np.int64), int(uniq.size)


@functools.cache
def synthetic_stream() -> tuple[np.ndarray, int]:
    """Synthetic sparse-attention stream: 300 decode steps x 256 selected positions."""
    return sparse_attention_stream(300, k=256, sinks=8, window=64, context0=1000, seed=1)


STREAMS = {"mooncake": mooncake_stream, "synthetic": synthetic_stream}
CAPACITIES = [1, 7, 10, 21, 100, 257, 1000, 4096]


def lcs_misses(keys: np.ndarray, capacity: int, policy: str, tmp_path: Path) -> int:
    """Miss count of libCacheSim's ``policy`` on ``keys`` at ``capacity`` unit slots.

    Validates everything libCacheSim would otherwise abort on: int32 keys, an integer
    capacity >= 1 (S3FIFO needs a non-empty small queue, so >= 10), and "never" encoded
    as INT64_MAX for Belady (it rejects -1).
    """
    keys = np.asarray(keys)
    if keys.dtype.kind != "i" or keys.size == 0 or keys.min() < 0 or keys.max() >= 2**31:
        raise ValueError("libcachesim input must be non-empty non-negative int32-range keys")
    if not isinstance(capacity, int) or capacity < (10 if policy == "S3FIFO" else 1):
        raise ValueError(f"capacity {capacity!r} would abort libcachesim's {policy}")
    if policy == "Belady":
        path = tmp_path / "trace_next.bin"
        rec = np.empty(keys.size, dtype=[("id", "<i4"), ("next", "<i8")])
        rec["id"] = keys
        rec["next"] = next_use(keys, int(keys.max()) + 1)
        assert rec["next"].min() > 0
        rec.tofile(path)
        param = lcs.ReaderInitParam(
            binary_fmt_str="<iq", ignore_obj_size=True, trace_start_offset=0
        )
        param.obj_id_field = 1
        param.next_access_vtime_field = 2
    else:
        path = tmp_path / "trace.npy"
        np.save(path, keys.astype(np.int32))
        with path.open("rb") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            header = f.tell()
        param = lcs.ReaderInitParam(
            binary_fmt_str="<i", ignore_obj_size=True, trace_start_offset=header
        )
        param.obj_id_field = 1
    reader = lcs.TraceReader(str(path), lcs.TraceType.BIN_TRACE, param)
    cache = getattr(lcs, policy)(capacity, hashpower=max(4, math.ceil(math.log2(capacity)) + 1))
    miss_ratio, _ = cache.process_trace(reader)
    assert cache._cache.n_req == keys.size
    return round(miss_ratio * keys.size)


class TestRegistry:
    def test_builtins_registered(self):
        """Every built-in is reachable by name, and its name is its registry key."""
        assert set(BUILTINS) <= set(policies.names())
        for name in BUILTINS:
            assert policies.get(name).name == name


# libCacheSim's S3FIFO aborts the process below 10 slots (no room for its small queue), so
# those cases are not generated; TestPinned shows ours caches nothing there.
LCS_CASES = [
    (policy, stream, capacity)
    for policy in sorted(LCS_NAMES)
    for stream in sorted(STREAMS)
    for capacity in CAPACITIES
    if not (policy == "s3fifo" and capacity < 10)
]


class TestAgainstLibCacheSim:
    @pytest.mark.parametrize(("policy", "stream", "capacity"), LCS_CASES)
    def test_same_misses(self, policy, stream, capacity, tmp_path):
        """Identical miss counts to libCacheSim on the real Mooncake stream and on the
        synthetic sparse-attention stream."""
        keys, n_keys = STREAMS[stream]()
        ours = policies.get(policy).simulate(keys, n_keys, capacity).miss_count
        assert ours == lcs_misses(keys, capacity, LCS_NAMES[policy], tmp_path)


class TestPinned:
    def test_lfu_breaks_ties_by_lru(self, tmp_path):
        """0 and 1 both reach count 2, 0 more recently: the key 2 evicts 1 (the LRU one,
        not 0, the first inserted), so the final 1 misses. libCacheSim agrees."""
        keys = np.array([0, 1, 1, 0, 2, 1])
        res = LFU().simulate(keys, 3, 2)
        assert res.hits.tolist() == [False, False, True, True, False, False]
        assert res.miss_count == 4 == lcs_misses(keys, 2, "LFU", tmp_path)

    def test_lfu_counts_outgrow_the_list_heads(self, tmp_path):
        """A key hit thousands of times outgrows the per-count list heads several times
        (they start at 64 and double): same misses as libCacheSim, and in segments the
        same hits as replaying each segment on its own."""
        rng = np.random.default_rng(3)
        keys = np.empty(6000, dtype=np.int64)
        keys[0::2] = 0  # the hot key: count ~3,000
        keys[1::2] = rng.integers(1, 40, size=3000)
        res = LFU().simulate(keys, 40, 8)
        assert res.miss_count == lcs_misses(keys, 8, "LFU", tmp_path)
        cuts = np.array([0, 1000, 4500])
        seg = LFU().simulate(keys, 40, 8, cuts)
        alone = [LFU().simulate(part, 40, 8).hits for part in np.split(keys, cuts[1:])]
        assert seg.hits.tolist() == np.concatenate(alone).tolist()

    def test_opt_bypass_declines_a_dead_key(self, tmp_path):
        """With one slot, key 1 is never used again: OPT (like libCacheSim's Belady)
        admits it and loses 0, OPT-bypass keeps 0 and hits."""
        keys = np.array([0, 1, 0])
        assert OPT().simulate(keys, 2, 1).miss_count == 3 == lcs_misses(keys, 1, "Belady", tmp_path)
        res = OPT(bypass=True).simulate(keys, 2, 1)
        assert res.hits.tolist() == [False, False, True]
        assert res.evictions == 0

    @pytest.mark.parametrize("capacity", [1, 9, 10, 15, 19])
    def test_s3fifo_small_queue_of_one_admits_nothing(self, capacity, tmp_path):
        """libCacheSim's S3FIFO never lets one key fill the small queue alone, so with
        fewer than 2 small slots (capacity < 20) nothing is cached; we keep that. Below
        10 slots libCacheSim rejects the configuration (a C abort), so only ours runs."""
        keys, n_keys = mooncake_stream()
        keys = keys[:5000]
        assert S3FIFO().simulate(keys, n_keys, capacity).hit_count == 0
        if capacity >= 10:
            assert lcs_misses(keys, capacity, "S3FIFO", tmp_path) == keys.size

    @pytest.mark.parametrize("capacity", [1, 3])
    def test_slru_below_one_slot_per_segment_admits_nothing(self, capacity, tmp_path):
        """libCacheSim's 4-segment SLRU cannot admit a key larger than a segment, so with
        ``capacity < 4`` every access misses, even an immediate repeat."""
        keys = np.array([5, 5, 5, 2, 2])
        assert SLRU().simulate(keys, 6, capacity).hit_count == 0
        assert lcs_misses(keys, capacity, "SLRU", tmp_path) == keys.size

    def test_slru_fills_lowest_segment_with_room(self):
        """A cold 4x1 SLRU places keys 0..3 in segments 0..3 (libCacheSim's rule), so a
        hit on 3 (top segment) cools nothing, and key 4 then evicts 0, the LRU key of
        the lowest segment."""
        keys = np.array([0, 1, 2, 3, 3, 4, 0])
        res = SLRU().simulate(keys, 5, 4)
        assert res.hits.tolist() == [False] * 4 + [True, False, False]
        assert res.evictions == 2

    def test_negative_capacity_and_bad_keys_rejected(self):
        """Inputs that would corrupt memory in a kernel fail in Python with a message."""
        for name in BUILTINS:
            with pytest.raises(ValueError, match="capacity"):
                policies.get(name).simulate(np.array([0]), 1, -1)
            with pytest.raises(ValueError, match="keys must lie"):
                policies.get(name).simulate(np.array([0, 3]), 3, 2)


class TestPythonReference:
    @pytest.mark.parametrize("capacity", [1, 16, 300, 5000])
    @pytest.mark.parametrize("stream", sorted(STREAMS))
    def test_ordered_dict_lru_matches_kernel(self, stream, capacity):
        """The OrderedDict LRU and the compiled LRU agree access by access, also with
        cold restarts every 997 accesses."""
        keys, n_keys = STREAMS[stream]()
        keys = keys[:60_000]
        for segments in (None, np.arange(0, keys.size, 997)):
            ref = PythonLRU().simulate(keys, n_keys, capacity, segments)
            got = LRU().simulate(keys, n_keys, capacity, segments)
            np.testing.assert_array_equal(ref.hits, got.hits)
            assert ref.evictions == got.evictions


class TestNextUse:
    def test_next_use_respects_segments(self):
        """Next uses stop at segment boundaries."""
        keys = np.array([1, 2, 1, 1, 2])
        assert next_use(keys, 3).tolist() == [2, 4, 3, NEVER, NEVER]
        assert next_use(keys, 3, np.array([0, 3])).tolist() == [2, NEVER, NEVER, NEVER, NEVER]


@pytest.mark.parametrize("policy", BUILTINS)
def test_int32_keys_give_int64_results(policy):
    """int32 key arrays (half the bytes to stream) replay exactly like int64 ones."""
    keys, n_keys = STREAMS[sorted(STREAMS)[0]]()
    a = policies.get(policy).simulate(keys.astype(np.int64), n_keys, 257)
    b = policies.get(policy).simulate(keys.astype(np.int32), n_keys, 257)
    assert np.array_equal(a.hits, b.hits) and a.evictions == b.evictions
