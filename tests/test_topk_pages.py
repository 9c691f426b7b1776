"""Our decoder of the selections ``topk`` pages against Arrow's reader: the same values and
row offsets on every file in the store's layout, and None (Arrow is used) on any other."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit import schema
from toolkit.store import parquet_options
from toolkit.store.parquet.topk_pages import leaf_counts, read_flat, read_small_ids, read_topk

TOPK = schema.TABLES["selections"].field("topk")


def _write(path, rows, row_group_rows=None, page_bytes=None, **override):
    table = pa.table({"topk": pa.array(rows, type=TOPK.type)},
                     schema=pa.schema([TOPK]))
    opts = parquet_options(table.schema) | override
    if page_bytes:
        opts["data_page_size"] = page_bytes
    pq.write_table(table, path, row_group_size=row_group_rows or max(len(rows), 1), **opts)
    return table


def _arrow(path, groups):
    col = pq.ParquetFile(path).read_row_groups(groups, columns=["topk"]).column(0)
    arr = col.combine_chunks()
    off = arr.offsets.to_numpy().astype(np.int64)
    return arr.values.to_numpy(), off - off[0]


rows_strategy = st.lists(
    st.one_of(
        st.lists(st.integers(0, 2**31 - 1), max_size=40),  # any non-negative int32
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),  # wraps in the deltas
        st.builds(lambda a, n: list(range(a, a + n)), st.integers(0, 10**6),
                  st.integers(0, 300)),  # ascending runs, the usual shape
    ),
    min_size=1, max_size=60)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None)
@given(rows=rows_strategy, groups=st.integers(1, 4), page_bytes=st.sampled_from([None, 64, 512]))
def test_same_as_arrow(tmp_path_factory, rows, groups, page_bytes):
    """Empty lists, rows split across pages, several row groups, any int32: equal to Arrow."""
    path = tmp_path_factory.mktemp("t") / "t.parquet"
    _write(path, rows, max(1, -(-len(rows) // groups)), page_bytes)
    n_groups = pq.ParquetFile(path).num_row_groups
    for sel in ([g] for g in range(n_groups)), [list(range(n_groups))]:
        for g in sel:
            got = read_topk(path, g)
            assert got is not None
            values, offsets = _arrow(path, g)
            assert got[0].tolist() == values.tolist()
            assert got[1].tolist() == offsets.tolist()


def test_k2048_rows_many_pages(tmp_path):
    """Real-sized rows (k = 2048 ascending positions of a 32K context), pages of 1 MiB."""
    rng = np.random.default_rng(0)
    rows = [np.sort(rng.choice(32_768, 2048, replace=False)).tolist() for _ in range(600)]
    _write(tmp_path / "t.parquet", rows, 256)
    for g in range(3):
        got = read_topk(tmp_path / "t.parquet", [g])
        values, offsets = _arrow(tmp_path / "t.parquet", [g])
        assert np.array_equal(got[0], values) and np.array_equal(got[1], offsets)


@pytest.mark.parametrize("override", [
    {"compression": "zstd"},
    {"column_encoding": None, "use_dictionary": True},
    {"data_page_version": "2.0"},
])
def test_other_layouts_are_left_to_arrow(tmp_path, override):
    path = tmp_path / "t.parquet"
    _write(path, [[1, 2, 3], [], [7]], **override)
    assert read_topk(path, [0]) is None


def test_replay_reads_the_same_rows_either_way(tmp_path, monkeypatch):
    """A stored trace replays to the same per-row results with Arrow's reader."""
    import toolkit
    from toolkit.replay import selections as S
    from toolkit.synth.selections import SyntheticSelectionConfig
    from toolkit.synth.selections_fast import write_streaming

    with toolkit.open_store(tmp_path / "s", create=True) as store:
        write_streaming(store, SyntheticSelectionConfig(requests=2, prompt_tokens=4096,
                                                        steps=8, layers=3), "syn")
        cfg = S.SelectionReplayConfig("syn", "lru", 1024, mode="hisparse")
        ours = S.replay_selections(store, cfg, save=False, max_rows=7)
        monkeypatch.setattr(S, "read_topk", lambda *a: None)
        arrow = S.replay_selections(store, cfg, save=False, max_rows=7)
    keys = ("accesses", "hits", "misses", "evictions", "fast_path_rows")
    assert {k: ours[k] for k in keys} == {k: arrow[k] for k in keys}


PER_ROW = ["request_id", "step", "layer", "seq_len"]


def _write_selections(path, n_rows, rng, row_group_rows, page_bytes=None, id_high=2**31,
                      **override):
    """A selections file of ``n_rows`` rows with random per-row integers, in the store's
    layout (``parquet_options``) unless ``override`` says otherwise."""
    sch = schema.TABLES["selections"]
    table = pa.table({
        "trace": pa.array(["t"] * n_rows),
        "request_id": pa.array(rng.integers(0, id_high, n_rows), pa.int64()),
        "step": pa.array(rng.integers(-(2**31), 2**31, n_rows), pa.int32()),
        "layer": pa.array(rng.integers(-(2**15), 2**15, n_rows), pa.int16()),
        "seq_len": pa.array(np.sort(rng.integers(0, 2**31, n_rows)), pa.int32()),
        "topk": pa.array([[1, 2]] * n_rows, type=TOPK.type),
    }, schema=sch)
    opts = parquet_options(sch) | override
    if page_bytes:
        opts["data_page_size"] = page_bytes
    pq.write_table(table, path, row_group_size=row_group_rows, **opts)


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(n_rows=st.integers(1, 700), groups=st.integers(1, 4), seed=st.integers(0, 2**16),
       page_bytes=st.sampled_from([None, 64, 700]), id_high=st.sampled_from([8, 2**31]))
def test_per_row_columns_same_as_arrow(tmp_path_factory, n_rows, groups, seed, page_bytes,
                                       id_high):
    """The per-row integers, as the store writes them (delta pages), over any wraps of
    int32 and int16, several pages and row groups: Arrow's values and NumPy types."""
    path = tmp_path_factory.mktemp("f") / "f.parquet"
    _write_selections(path, n_rows, np.random.default_rng(seed), -(-n_rows // groups),
                      page_bytes, id_high)
    pf = pq.ParquetFile(path)
    for sel in [[g] for g in range(pf.num_row_groups)] + [list(range(pf.num_row_groups))]:
        got = read_flat(path, PER_ROW, sel, pf.metadata)
        assert got is not None
        want = pf.read_row_groups(sel, columns=PER_ROW)
        for c in PER_ROW:
            assert got[c].dtype == want.column(c).to_numpy().dtype, c
            assert got[c].tolist() == want.column(c).to_pylist(), c


@pytest.mark.parametrize("override, id_high", [
    ({"compression": "zstd"}, 2**31),
    ({"column_encoding": {"topk.list.element": "DELTA_BINARY_PACKED"}}, 2**31),  # PLAIN
    ({}, 2**40),  # a request id past int32: the decoder narrows through int32
])
def test_per_row_columns_in_other_layouts_are_left_to_arrow(tmp_path, override, id_high):
    path = tmp_path / "f.parquet"
    if "column_encoding" in override:
        override = override | {"compression": {"topk": "none"}}
    _write_selections(path, 300, np.random.default_rng(0), 300, id_high=id_high, **override)
    assert read_flat(path, PER_ROW, [0]) is None


def test_chunks_inside_a_row_group(tmp_path, monkeypatch):
    """Chunks that start inside a row group (several requests per group) slice the decoded
    offsets exactly as Arrow's rows: same per-row hits."""
    from tests.test_selection_replay import make_store
    from toolkit.replay import selections as S

    rng = np.random.default_rng(1)
    rows = [(r, s, la, 40 + s, tuple(sorted(rng.choice(40 + s, 6, replace=False).tolist())))
            for r in range(3) for s in range(5) for la in range(2)]
    with make_store(tmp_path, rows, k=6) as store:
        path = store.root / "selections" / "t.parquet"
        assert pq.ParquetFile(path).num_row_groups == 1
        specs = S.chunk_specs(path, 10)
        assert len(specs) >= 2 and any(s.start > 0 for s in specs)
        ours = [S.read_chunk(path, s, 6) for s in specs]
        two = [S.read_chunk(path, s, 6, workers=2) for s in specs]
        # the per-row columns through Arrow, the positions through ours
        monkeypatch.setattr(S, "read_flat", lambda *a: None)
        mixed = [S.read_chunk(path, s, 6) for s in specs]
        mixed_two = [S.read_chunk(path, s, 6, workers=2) for s in specs]
        monkeypatch.setattr(S, "read_topk", lambda *a: None)
        arrow = [S.read_chunk(path, s, 6) for s in specs]
        arrow_two = [S.read_chunk(path, s, 6, workers=2) for s in specs]
    for a, b, c in zip(ours, mixed, mixed_two, strict=True):
        for col in ("request_id", "step", "layer", "seq_len", "offsets", "values"):
            assert getattr(a, col).dtype == getattr(b, col).dtype, col
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
            assert np.array_equal(getattr(a, col), getattr(c, col)), col
    for a, b in zip(ours, two, strict=True):
        for c in ("request_id", "step", "layer", "seq_len", "offsets", "values"):
            assert np.array_equal(getattr(a, c), getattr(b, c)), c
    for a, b in zip(arrow, arrow_two, strict=True):
        assert np.array_equal(a.values, b.values) and np.array_equal(a.step, b.step)
    for a, b in zip(ours, arrow, strict=True):
        for r in range(a.request_id.size):
            assert a.values[a.offsets[r]:a.offsets[r + 1]].tolist() == \
                b.values[b.offsets[r]:b.offsets[r + 1]].tolist()
        assert a.request_id.tolist() == b.request_id.tolist()


def test_scratch_is_reused_and_results_stay_equal(tmp_path):
    """Decoding into one Scratch again and again gives the same values as fresh arrays,
    in the scratch's own buffer (no new allocation once it is large enough)."""
    from toolkit.store.parquet.topk_pages import Scratch

    rng = np.random.default_rng(2)
    rows = [np.sort(rng.choice(5000, int(rng.integers(0, 300)), replace=False)).tolist()
            for _ in range(200)]
    _write(tmp_path / "t.parquet", rows, 50)
    scratch = Scratch()
    big = read_topk(tmp_path / "t.parquet", [0, 1, 2, 3], scratch)
    buffer = scratch.values
    for g in (3, 0, 2, 1):
        got = read_topk(tmp_path / "t.parquet", [g], scratch)
        values, offsets = _arrow(tmp_path / "t.parquet", [g])
        assert got[0].tolist() == values.tolist() and got[1].tolist() == offsets.tolist()
        assert np.shares_memory(got[0], buffer) and scratch.values is buffer
    assert big[0].size >= values.size


def test_read_into_scratch_where_not_mapped(tmp_path, monkeypatch):
    """Where the file cannot be mapped, each column chunk is read into the scratch buffer
    instead: the same values and offsets."""
    import toolkit.store.parquet.topk_pages as tp

    rows = [list(range(i, i + 300)) for i in range(0, 3_000, 100)]
    path = tmp_path / "t.parquet"
    _write(path, rows, 10)
    mapped = [read_topk(path, [g]) for g in range(3)]

    def refuse(*args, **kwargs):
        raise OSError("cannot map")

    monkeypatch.setattr(tp.mmap, "mmap", refuse)
    scratch = tp.Scratch()
    for g in range(3):
        got = read_topk(path, [g], scratch)
        assert got is not None and mapped[g] is not None
        assert got[0].tolist() == mapped[g][0].tolist() == _arrow(path, [g])[0].tolist()
        assert got[1].tolist() == mapped[g][1].tolist()
    assert scratch.pages.size > 0  # the copy path ran


HASHES = schema.TABLES["requests"].field("block_hashes")


def _write_ids(path, rows, row_group_rows=None, page_bytes=None, **override):
    """A one-column ``block_hashes`` file written as the store writes it."""
    table = pa.table({"block_hashes": pa.array(rows, type=HASHES.type)},
                     schema=pa.schema([HASHES]))
    opts = parquet_options(table.schema, table) | override
    if page_bytes:
        opts["data_page_size"] = page_bytes
    pq.write_table(table, path, row_group_size=row_group_rows or max(len(rows), 1), **opts)


def _arrow_ids(path, groups):
    col = pq.ParquetFile(path).read_row_groups(groups, columns=["block_hashes"]).column(0)
    arr = col.combine_chunks()
    off = arr.offsets.to_numpy().astype(np.int64)
    return arr.values.to_numpy(zero_copy_only=False), off - off[0]


ids_strategy = st.lists(
    st.one_of(
        st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40),  # any int32 id
        st.builds(lambda a, n: list(range(a, a + n)), st.integers(0, 10**6),
                  st.integers(1, 300)),  # consecutive blocks, the usual shape
    ),
    min_size=1, max_size=60)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None)
@given(rows=ids_strategy, groups=st.integers(1, 3), page_bytes=st.sampled_from([None, 64, 512]),
       compression=st.sampled_from([None, "none"]))
def test_small_ids_same_as_arrow(tmp_path_factory, rows, groups, page_bytes, compression):
    """Delta-encoded hash ids, zstd (the store's choice) or not, several row groups and
    pages, wide jumps between rows: the same ids and offsets as Arrow's reading."""
    path = tmp_path_factory.mktemp("h") / "h.parquet"
    extra = {} if compression is None else {"compression": compression}
    _write_ids(path, rows, max(1, -(-len(rows) // groups)), page_bytes, **extra)
    n_groups = pq.ParquetFile(path).num_row_groups
    for sel in [[g] for g in range(n_groups)] + [list(range(n_groups))]:
        got = read_small_ids(path, "block_hashes", sel)
        assert got is not None
        ids, offsets = _arrow_ids(path, sel)
        assert got[0].dtype == np.int32
        assert got[0].tolist() == ids.tolist()
        assert got[1].tolist() == offsets.tolist()
    # decoded in place, each group into its slice of one array (as load_stream does)
    counts = leaf_counts(path, "block_hashes")
    assert counts is not None and len(counts) == n_groups
    whole = np.full(sum(counts) + 3, -7, dtype=np.int32)
    at = np.cumsum([0, *counts])
    for g in range(n_groups):
        got = read_small_ids(path, "block_hashes", [g], out=whole[at[g]:at[g + 1]])
        assert got is not None and np.shares_memory(got[0], whole)
    assert whole[:-3].tolist() == _arrow_ids(path, list(range(n_groups)))[0].tolist()
    assert whole[-3:].tolist() == [-7] * 3  # nothing written past the slices
    with pytest.raises(ValueError, match="int32 needed"):
        read_small_ids(path, "block_hashes", [0], out=whole[:counts[0] - 1])


@pytest.mark.parametrize("rows, why", [
    ([[1, 2], [], [3]], "an empty list"),
    ([[1, None], [3]], "a null id"),
    ([[1, 2**31], [3]], "an id past int32"),
    ([[5, -1], [3]], "a negative id"),
    ([[1, 2**62], [0]], "an id past 2**57 (deltas too wide to unpack)"),
])
def test_small_ids_refused_for_arrow(tmp_path, rows, why):
    """Anything the decoder does not read exactly is left to Arrow (None), never
    approximated."""
    path = tmp_path / "h.parquet"
    table = pa.table({"block_hashes": pa.array(rows, type=HASHES.type)},
                     schema=pa.schema([HASHES]))
    opts = parquet_options(table.schema) | {  # delta whatever the values, to reach the decoder
        "use_dictionary": False, "column_encoding": {"block_hashes.list.element":
                                                     "DELTA_BINARY_PACKED"}}
    pq.write_table(table, path, **opts)
    assert read_small_ids(path, "block_hashes", [0]) is None, why
    ok = pa.table({"block_hashes": pa.array([[1, 2], [3]], type=HASHES.type)},
                  schema=pa.schema([HASHES]))
    pq.write_table(ok, path, **opts)  # the same layout with good ids is read
    assert read_small_ids(path, "block_hashes", [0])[0].tolist() == [1, 2, 3]


def test_small_ids_with_a_dictionary_are_left_to_arrow(tmp_path):
    path = tmp_path / "h.parquet"
    pq.write_table(pa.table({"block_hashes": pa.array([[1, 2], [2]], type=HASHES.type)},
                            schema=pa.schema([HASHES])), path)
    assert read_small_ids(path, "block_hashes", [0]) is None


def test_a_page_with_a_negative_value_count_is_left_to_arrow(tmp_path, monkeypatch):
    """A corrupt page header saying -1 values (and a body the decoder refuses, which it
    reports as -1 too) makes ``read_flat`` say None before any decoding at a negative
    position, which would write before its buffer."""
    import toolkit.store.parquet.topk_pages as tp

    path = tmp_path / "f.parquet"
    _write_selections(path, 40, np.random.default_rng(0), 20)
    md = pq.read_metadata(path)
    meta = md.row_group(0).column(2)  # step
    raw = bytearray(path.read_bytes())
    head = tp._Compact(memoryview(raw), meta.data_page_offset)
    head.struct()
    header = bytes(raw[meta.data_page_offset:head.pos])
    i = header.find(bytes([0x2C, 0x15, 0x28]))  # data page header, num_values zigzag(20)
    assert i >= 0
    raw[meta.data_page_offset + i + 2] = 0x01  # zigzag(-1)
    raw[head.pos + 2] = 0x03  # miniblocks per block 4 -> 3: the body is malformed
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(raw))
    positions = []
    decode = tp._delta
    monkeypatch.setattr(tp, "_delta", lambda buf, pos, end, out, at, ids: (
        positions.append(at), decode(buf, pos, end, out, at, ids))[1])
    assert tp.read_flat(bad, ["step"], [0, 1]) is None
    assert all(at >= 0 for at in positions)
