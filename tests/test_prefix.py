"""Prefix-block replay: golden figures on the real Mooncake trace, hand-checked semantics,
an independent Python reference, and libcachesim as the peer."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit.ingest import ingest_file
from toolkit.ingest.fields import requests_table
from toolkit.replay.prefix import (
    PrefixReplayConfig,
    block_stream,
    load_stream,
    replay_prefix,
    summarize,
)


def reference_replay(requests: list[tuple[int, int, list[int]]], capacity: int | None) -> dict:
    """Independent, obviously-correct replay: (input_tokens, block_tokens, hashes) per request."""
    cache: OrderedDict[int, None] = OrderedDict()
    out = dict(block_lookups=0, block_hits=0, hit_tokens=0, prefix_hit_blocks=0,
               prefix_hit_tokens=0, prompt_tokens=0)
    for input_tokens, bt, hashes in requests:
        out["prompt_tokens"] += input_tokens
        leading = True
        for i, h in enumerate(hashes):
            tokens = max(0, min(bt, input_tokens - bt * i))
            hit = h in cache
            out["block_lookups"] += 1
            if hit:
                out["block_hits"] += 1
                out["hit_tokens"] += tokens
                cache.move_to_end(h)
            else:
                cache[h] = None
                if capacity is not None and len(cache) > capacity:
                    cache.popitem(last=False)
            leading = leading and hit
            if leading:
                out["prefix_hit_blocks"] += 1
                out["prefix_hit_tokens"] += tokens
    return out


def _table(reqs: list[tuple[int, int, list[int]]]) -> pa.Table:
    return requests_table(
        "t", [float(i) for i in range(len(reqs))], [r[0] for r in reqs], [1] * len(reqs),
        reqs[0][1] if reqs else 512, [r[2] for r in reqs],
    )


class TestGoldenMooncake:
    """Exact counts on the bundled conversation trace (12,031 requests, 288,500 lookups)."""

    @pytest.mark.parametrize(
        ("capacity", "hits", "hit_tokens", "evictions"),
        [
            (None, 105_710, 54_098_411, 0),
            (1_000, 12_831, 6_567_267, 274_669),
            (10_000, 60_921, 31_174_981, 217_579),
        ],
    )
    def test_counts(self, mooncake_store, capacity, hits, hit_tokens, evictions):
        row = replay_prefix(mooncake_store, PrefixReplayConfig("conv", "lru", capacity))
        assert row["requests"] == 12_031
        assert row["block_lookups"] == 288_500
        assert row["prompt_tokens"] == 144_793_823
        assert (row["block_hits"], row["hit_tokens"], row["evictions"]) == (
            hits, hit_tokens, evictions)
        assert row["prefix_hit_blocks"] == hits  # chained hashes: every hit is a prefix hit
        assert row["block_hit_ratio"] == hits / 288_500
        assert row["token_hit_ratio"] == hit_tokens / 144_793_823

    @pytest.mark.parametrize("capacity", [None, 300, 1_000, 10_000, 50_000])
    def test_matches_reference(self, mooncake_store, capacity):
        """Kernel + vectorised summary == the plain-Python replay, on every counter."""
        t = mooncake_store.read("requests", "conv")
        reqs = list(zip(t["input_tokens"].to_pylist(), t["block_tokens"].to_pylist(),
                        t["block_hashes"].to_pylist(), strict=True))
        ref = reference_replay(reqs, capacity)
        row = replay_prefix(mooncake_store, PrefixReplayConfig("conv", "lru", capacity), save=False)
        assert {k: row[k] for k in ref} == ref

    @pytest.mark.parametrize("capacity", [1, 100, 1_000, 10_000, 100_000])
    def test_lru_matches_libcachesim(self, mooncake_store, tmp_path, capacity):
        """Same block stream, LRU, unit-size objects, integer cache size: same misses."""
        import libcachesim as lcs

        stream = load_stream(mooncake_store, "conv")
        path = tmp_path / "blocks.bin"
        stream.keys.astype("<i4").tofile(path)
        ip = lcs.ReaderInitParam(binary_fmt_str="<i", ignore_obj_size=True, trace_start_offset=0)
        ip.obj_id_field = 1
        reader = lcs.TraceReader(str(path), lcs.TraceType.BIN_TRACE, ip)
        cache = lcs.LRU(capacity, hashpower=max(4, int(np.ceil(np.log2(capacity))) + 1))
        miss_ratio, _ = cache.process_trace(reader)
        lcs_misses = round(miss_ratio * cache._cache.n_req)
        row = replay_prefix(mooncake_store, PrefixReplayConfig("conv", "lru", capacity), save=False)
        assert cache._cache.n_req == row["block_lookups"]
        assert row["block_lookups"] - row["block_hits"] == lcs_misses

    def test_run_is_stored_and_idempotent(self, mooncake_store):
        cfg = PrefixReplayConfig("conv", "lru", 2_000)
        replay_prefix(mooncake_store, cfg)
        replay_prefix(mooncake_store, cfg)
        df = mooncake_store.query(
            f"SELECT count(*) AS n, any_value(capacity_blocks) AS c FROM replay_runs "
            f"WHERE run_id = '{cfg.run_id}'"
        )
        assert df.row(0) == (1, 2_000)


class TestSemantics:
    def test_partial_tail_block_and_prefix_run(self):
        """Hand-worked: 1,100 tokens in 512-token blocks are 512+512+76; a miss ends the run."""
        reqs = [(1_100, 512, [1, 2, 3]), (1_100, 512, [1, 9, 3]), (200, 512, [1])]
        s = summarize(block_stream(_table(reqs)), np.array(
            [False, False, False, True, False, True, True]))
        assert s["hit_tokens"] == 512 + 76 + 200
        assert s["prefix_hit_blocks"] == 2  # request 2: block 1 only; request 3: its one block
        assert s["prefix_hit_tokens"] == 512 + 200
        assert s["prompt_tokens"] == 2_400

    def test_more_hashes_than_tokens_floor_at_zero(self):
        """Block i covers max(0, ...) tokens: surplus hashes count as lookups of 0 tokens."""
        stream = block_stream(_table([(600, 512, [5, 6, 7])]))
        assert stream.tokens.tolist() == [512, 88, 0]

    def test_capacity_zero_never_hits(self, mooncake_store):
        row = replay_prefix(mooncake_store, PrefixReplayConfig("conv", "lru", 0), save=False)
        assert row["block_hits"] == 0 and row["evictions"] == 0

    def test_trace_without_hashes_is_refused(self, store):
        from tests.conftest import AZURE
        from toolkit.errors import ToolkitError

        ingest_file(store, "azure", AZURE, "az")
        with pytest.raises(ToolkitError, match="no prefix-block hashes"):
            replay_prefix(store, PrefixReplayConfig("az"))


requests_strategy = st.lists(
    st.tuples(st.integers(0, 3_000), st.lists(st.integers(0, 40), max_size=8)),
    min_size=1, max_size=40,
)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(reqs=requests_strategy, capacity=st.integers(0, 50))
def test_matches_reference_on_random_traces(reqs, capacity):
    """Property: the compiled replay equals the Python reference on arbitrary traces."""
    full = [(n, 512, h) for n, h in reqs]
    stream = block_stream(_table(full))
    from toolkit.policies import policies

    sim = policies.get("lru").simulate(stream.keys, max(stream.n_keys, 1), capacity)
    got = summarize(stream, sim.hits)
    ref = reference_replay(full, capacity)
    assert {k: got[k] for k in ref} == ref
    assert got["prefix_hit_blocks"] <= got["block_hits"] <= got["block_lookups"]


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(0, 3_000), st.sampled_from([0, 16, 64, 512]),
                               st.lists(st.integers(0, 40), max_size=8)),
                     min_size=1, max_size=40),
       capacity=st.integers(0, 50))
def test_summary_with_mixed_block_sizes(reqs, capacity):
    """Property: requests of different block sizes (and none) sum like the reference; the
    summary's flat pass is only for traces of one block size, and must not leak into
    others (a uniform trace is ``reqs`` with one size, also drawn here)."""
    from toolkit.policies import policies
    from toolkit.replay.prefix import BlockStream

    lengths = np.array([len(h) for _, _, h in reqs], dtype=np.int64)
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    keys = np.array([x for _, _, h in reqs for x in h], dtype=np.int32)
    stream = BlockStream(keys, 41, starts, lengths,
                         np.array([n for n, _, _ in reqs], dtype=np.int64),
                         np.array([bt for _, bt, _ in reqs], dtype=np.int64))
    sim = policies.get("lru").simulate(stream.keys, 41, capacity)
    got = summarize(stream, sim.hits)
    ref = reference_replay(reqs, capacity)
    assert {k: got[k] for k in ref} == ref


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(reqs=st.lists(st.tuples(st.integers(0, 20_000), st.sampled_from([16, 512]),
                               st.lists(st.booleans(), max_size=70)),
                     min_size=1, max_size=12),
       uniform=st.booleans())
def test_summary_of_long_requests_and_any_hits(reqs, uniform):
    """Property: given hits (not simulated: any pattern, runs of every length), a
    summary's counts equal a per-lookup Python fold. Requests reach 70 lookups, so the
    leading run is counted across several 8-byte words and in the array's last bytes,
    and prompts shorter or longer than their hashes cover exercise the whole-block
    count found without a division."""
    if uniform:
        reqs = [(n, 512, h) for n, _, h in reqs]
    lengths = np.array([len(h) for _, _, h in reqs], dtype=np.int64)
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    hits = np.array([x for _, _, h in reqs for x in h], dtype=np.bool_)
    from toolkit.replay.prefix import BlockStream

    stream = BlockStream(np.zeros(hits.size, dtype=np.int32), 1, starts, lengths,
                         np.array([n for n, _, _ in reqs], dtype=np.int64),
                         np.array([bt for _, bt, _ in reqs], dtype=np.int64))
    want = dict(block_hits=0, hit_tokens=0, prefix_hit_blocks=0, prefix_hit_tokens=0)
    for n, bt, h in reqs:
        leading = True
        for i, hit in enumerate(h):
            tokens = max(0, min(bt, n - bt * i))
            leading = leading and hit
            want["block_hits"] += hit
            want["hit_tokens"] += tokens * hit
            want["prefix_hit_blocks"] += leading
            want["prefix_hit_tokens"] += tokens * leading
    got = summarize(stream, hits)
    assert {k: got[k] for k in want} == want


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(reqs=requests_strategy, small=st.integers(0, 20), extra=st.integers(0, 20))
def test_lru_hits_monotone_in_capacity(reqs, small, extra):
    """Stack property: a bigger LRU never hits less."""
    stream = block_stream(_table([(n, 512, h) for n, h in reqs]))
    from toolkit.policies import policies

    lru = policies.get("lru")
    n = max(stream.n_keys, 1)
    assert lru.simulate(stream.keys, n, small).hit_count <= lru.simulate(
        stream.keys, n, small + extra).hit_count


class TestStreamFromStore:
    """The stream a replay reads from the store: parallel row groups, the sort skipped only
    when rows are in arrival order, small ids kept, large ones remapped, same hits."""

    @staticmethod
    def _stored(store, name: str, reqs, arrival, hashes_of=lambda h: h, groups: int = 1):
        t = requests_table(name, arrival, [r[0] for r in reqs], [1] * len(reqs), 512,
                           [[hashes_of(h) for h in r[2]] for r in reqs])
        per = max(1, -(-t.num_rows // groups))
        with store.writer("requests", name) as sink:
            for i in range(0, t.num_rows, per):
                sink.write(t.slice(i, per))
                sink.flush()  # one row group per write (a sink holds small writes)
        return t

    def _replay_hits(self, stream, capacity):
        from toolkit.policies import policies

        sim = policies.get("lru").simulate(stream.keys, max(stream.n_keys, 1), capacity)
        return summarize(stream, sim.hits)

    @settings(max_examples=25, deadline=None)
    @given(reqs=requests_strategy, capacity=st.integers(0, 50), groups=st.integers(1, 4),
           shuffle=st.booleans(), hashed=st.booleans(), seed=st.integers(0, 2**16))
    def test_equals_reference_in_any_layout(self, tmp_path_factory, reqs, capacity, groups,
                                            shuffle, hashed, seed):
        """Rows out of order, several row groups, random 64-bit hashes: the replay still
        equals the Python reference on the requests in arrival order."""
        import toolkit

        rng = np.random.default_rng(seed)
        order = rng.permutation(len(reqs)) if shuffle else np.arange(len(reqs))
        arrival = [float(i) for i in order]  # row i arrives at time order[i]
        salt = int(rng.integers(1, 2**62))
        mix = (lambda h: (h * 0x9E3779B97F4A7C15 + salt) % 2**63) if hashed else (lambda h: h)
        full = [(n, 512, h) for n, h in reqs]
        with toolkit.open_store(tmp_path_factory.mktemp("s"), create=True) as store:
            self._stored(store, "t", full, arrival, mix, groups)
            if sum(len(h) for _, h in reqs) == 0:
                return
            per = max(1, -(-len(reqs) // groups))
            assert len(store.read_parts("requests", "t")) == len(range(0, len(reqs), per))
            stream = load_stream(store, "t", workers=2)
            got = self._replay_hits(stream, capacity)
        by_arrival = [full[i] for i in np.argsort(order, kind="stable")]
        ref = reference_replay(by_arrival, capacity)
        assert {k: got[k] for k in ref} == ref

    def test_small_ids_are_kept_and_large_ones_remapped(self, store):
        reqs = [(2048, 512, [3, 7, 3]), (1024, 512, [7, 9])]
        self._stored(store, "small", reqs, [0.0, 1.0])
        s = load_stream(store, "small")
        assert s.keys.dtype == np.int32 and s.keys.tolist() == [3, 7, 3, 7, 9]
        self._stored(store, "big", reqs, [0.0, 1.0], lambda h: h << 40)
        b = load_stream(store, "big")
        assert b.keys.tolist() == [0, 1, 0, 1, 2] and b.n_keys == 3
        assert s.tokens.tolist() == b.tokens.tolist() == [512, 512, 512, 512, 512]

    def test_small_ids_are_delta_encoded_hashes_keep_the_dictionary(self, store):
        import pyarrow.parquet as pq

        reqs = [(2048, 512, list(range(i, i + 20))) for i in range(200)]
        store.write("requests", "small", _table(reqs))
        store.write("requests", "hashed", _table(
            [(n, b, [h * 0x9E3779B97F4A7C15 % 2**63 for h in hs]) for n, b, hs in reqs]))

        def encodings(name: str) -> tuple:
            md = pq.ParquetFile(store.root / "requests" / f"{name}.parquet").metadata
            rg = md.row_group(0)
            col = next(rg.column(i) for i in range(rg.num_columns)
                       if rg.column(i).path_in_schema == "block_hashes.list.element")
            return col.encodings

        assert "DELTA_BINARY_PACKED" in encodings("small")
        assert "RLE_DICTIONARY" in encodings("hashed")
        assert "DELTA_BINARY_PACKED" not in encodings("hashed")
        a, b = (self._replay_hits(load_stream(store, n), 30) for n in ("small", "hashed"))
        assert a == b


class TestStreamIndex:
    """The flattened stream kept in the store's cache: used while the ``requests`` file is
    unchanged, ignored once it changes or is damaged, and never needed for a result."""

    def test_second_load_reads_the_index(self, store, monkeypatch):
        reqs = [(2048, 512, [3, 7, 3, 1]), (1024, 512, [7, 9])]
        store.write("requests", "t", _table(reqs))
        first = load_stream(store, "t")
        monkeypatch.setattr(type(store), "read_parts", lambda *a, **k: pytest.fail("decoded"))
        again = load_stream(store, "t")
        for f in ("keys", "starts", "lengths", "prompt_tokens", "block_tokens"):
            assert getattr(again, f).tolist() == getattr(first, f).tolist()
        assert again.n_keys == first.n_keys

    def test_replaced_trace_is_read_again(self, store):
        store.write("requests", "t", _table([(1024, 512, [1, 2])]))
        assert load_stream(store, "t").keys.tolist() == [1, 2]
        store.write("requests", "t", _table([(1536, 512, [5, 6, 7])]), replace=True)
        s = load_stream(store, "t")
        assert s.keys.tolist() == [5, 6, 7] and s.prompt_tokens.tolist() == [1536]

    @pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
    def test_damaged_index_is_rebuilt(self, store, damage):
        from toolkit.replay.prefix import _index_path

        store.write("requests", "t", _table([(1024, 512, [1, 2]), (512, 512, [2])]))
        load_stream(store, "t")
        path = _index_path(store, "t")
        data = path.read_bytes()
        path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"x" * 999,
                          "empty": b""}[damage])
        assert load_stream(store, "t").keys.tolist() == [1, 2, 2]
        assert path.read_bytes() == data  # rewritten whole

    @pytest.mark.parametrize("field", ["lengths", "n_keys"])
    def test_index_with_a_negative_count_is_rebuilt(self, store, field):
        """Lengths that still add up but go negative (or a negative key count) would send
        the compiled summary out of bounds: such a body is refused and rebuilt."""
        from toolkit.replay.prefix import _index_path

        store.write("requests", "t", _table([(1024, 512, [1, 2]), (512, 512, [2])]))
        load_stream(store, "t")
        path = _index_path(store, "t")
        good = path.read_bytes()
        buf = np.frombuffer(good, dtype=np.int64).copy()
        head = 5 + len(store.source_stamp("requests", "t"))
        if field == "lengths":
            at = head + (3 + 1) // 2
            assert buf[at:at + 2].tolist() == [2, 1]
            buf[at:at + 2] = [1003, -1000]
        else:
            buf[head - 3] = -1
        path.write_bytes(buf.tobytes())
        s = load_stream(store, "t")
        assert s.lengths.tolist() == [2, 1] and s.keys.tolist() == [1, 2, 2]
        assert path.read_bytes() == good

    def test_unwritable_cache_is_skipped(self, store):
        from toolkit.replay.prefix import _index_path

        store.write("requests", "t", _table([(1024, 512, [4, 4])]))
        blocker = _index_path(store, "t").parent
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("a file where the cache directory would go")
        assert load_stream(store, "t").keys.tolist() == [4, 4]
        assert load_stream(store, "t", use_index=False).keys.tolist() == [4, 4]


def test_deleting_a_trace_drops_its_stream_index(store):
    from toolkit.replay.prefix import _index_path

    store.write("requests", "t", _table([(1024, 512, [1, 2])]))
    load_stream(store, "t")
    assert _index_path(store, "t").exists()
    store.delete("requests", "t")
    assert not _index_path(store, "t").exists()
