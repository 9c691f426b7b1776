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
