"""sglang#33075's HiSparse gain against the serving model (toolkit.serving.hisparse_check):
the published table as shipped, the resident-KV arithmetic exact, and the decomposition's
invariants."""

from __future__ import annotations

import pytest

from toolkit.serving.hisparse_check import (
    DEPLOYMENT,
    published,
    reproduce,
    resident_bytes_per_request,
)


def test_published_ratios():
    """The PR's own ratios (0.92x at batch 1 ... 3.00x at 54) from its tok/s columns."""
    r = published()
    assert [round(x, 2) for x in r["measured_ratio"]] == [0.92, 0.92, 0.94, 1.19, 1.66, 2.43,
                                                          3.00]
    assert r["measured_base_running"].max() == 6


def test_resident_bytes_exact():
    """GLM-5.1, FP8 MLA rows (656 B) on 78 layers + 132 B indexer keys on 78 layers, 34,816
    tokens; HiSparse keeps 4,097 MLA rows but every indexer key."""
    full = 32768 + 2048
    assert resident_bytes_per_request(DEPLOYMENT, full) == 78 * full * (656 + 132)
    assert resident_bytes_per_request(DEPLOYMENT, full, 4096) == (78 * 4097 * 656
                                                                   + 78 * full * 132)


@pytest.fixture(scope="module")
def runs():
    return {m: reproduce(m) for m in (0.0, 321.0, 1000.0)} | {
        "overlap": reproduce(321.0, overlap=True)}


def test_decomposition_invariants(runs):
    df = runs[321.0]
    assert (df["hisparse_fits"] > df["base_fits"]).all()  # a smaller resident KV fits more
    assert (df["base_running"] <= df["batch"]).all() and (df["hisparse_running"] >= df[
        "base_running"]).all()
    assert df["model_ratio"].to_list() == pytest.approx(
        (df["hisparse_tok_s"] / df["base_tok_s"]).to_list())
    assert df["ratio_error"].to_list() == pytest.approx(
        (df["model_ratio"] / df["measured_ratio"] - 1).to_list())
    # no misses and room for both: the two arms are the same step
    assert runs[0.0]["model_ratio"][0] == pytest.approx(1.0)
    # more misses never help; overlapping fetches never hurts
    assert (runs[1000.0]["model_ratio"] <= runs[321.0]["model_ratio"] + 1e-12).all()
    assert (runs["overlap"]["model_ratio"] >= runs[321.0]["model_ratio"] - 1e-12).all()


def test_sglang_mem_fraction_static_rule():
    """SGLang's default (server_args.py@469c63e5): reserved MiB = 512 + 1.5 x chunk + 2 x
    graph batch + 1024 x TP / 8, at least 10 GiB above 60 GiB; worked by hand."""
    from toolkit.serving.hisparse_check import sglang_mem_fraction_static as mfs

    # RTX PRO 6000 (96 GiB), TP8: chunk 8192, graphs to 512 -> 14,848 MiB reserved
    assert mfs(98_304, 8) == round((98_304 - 14_848) / 98_304, 3) == 0.849
    assert mfs(81_920, 8) == 0.819  # H100 80 GB: same reserve, smaller GPU
    assert mfs(184_320, 8) == round((184_320 - 27_136) / 184_320, 3)  # B200: chunk 16K
    assert mfs(24_576, 1) == round((24_576 - 3_760) / 24_576, 3)  # 4090: chunk 2K, bs 24
    assert mfs(70_000, 1, chunked_prefill_size=2048, cuda_graph_max_bs=8) == round(
        (70_000 - 10_240) / 70_000, 3)  # the 10 GiB floor above 60 GiB


def test_sglang_pool_and_capacity():
    """The pool at the anchor's fraction is the anchor's logged pool (464,768 tokens x 78
    layers x 656 B); at SGLang's default fraction (0.849) it fits 11 full-length GLM-5.1
    baseline requests, where the serving model's own rule fits 20 and the run held 6."""
    from toolkit.serving.hisparse_check import capacity_note, sglang_kv_pool_bytes

    anchor = 464_768 * 78 * 656
    assert sglang_kv_pool_bytes(DEPLOYMENT, 0.85) == pytest.approx(anchor, rel=1e-12)
    pool = sglang_kv_pool_bytes(DEPLOYMENT)
    assert pool == pytest.approx(anchor - 0.001 * 96 * 2**30, rel=1e-12)
    note = capacity_note()
    assert note["model_fits"] == 20 and note["sglang_fits"] == 11
    assert note["sglang_fits"] == int(pool // resident_bytes_per_request(DEPLOYMENT, 34_816))
    # the run's log: 6 x 33,792 tokens at 87% of the pool
    assert note["logged_pool_tokens"] == pytest.approx(6 * 33_792 / 0.87)


def test_sglang_capacity_moves_the_ratio_toward_the_measurement():
    """Sized by SGLang's pool, the baseline stops at 11 requests (not 20) and both arms share
    the pool; the ratio from batch 16 on moves toward sglang#33075's (still short of it), and
    batches 1-8, which fit either way, are unchanged."""
    old, new = reproduce(305.0, capacity="model"), reproduce(305.0)
    assert new["base_fits"][0] == 11 and old["base_fits"][0] == 20
    assert new["hisparse_fits"][0] == 41  # 568 MB per request: the run held 54
    assert new["model_ratio"][:4].to_list() == pytest.approx(old["model_ratio"][:4].to_list())
    for i in (4, 5, 6):  # batches 16, 32, 54
        assert abs(new["ratio_error"][i]) < abs(old["ratio_error"][i])
        assert new["model_ratio"][i] < new["measured_ratio"][i]
    with pytest.raises(ValueError, match="capacity must be"):
        reproduce(305.0, capacity="fitted")
