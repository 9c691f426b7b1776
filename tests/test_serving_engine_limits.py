"""Engine caps on running requests: sourced defaults per engine, and the queue they cause."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from toolkit.serving import predict, validate
from toolkit.serving.layout import design
from toolkit.serving.model import max_batch
from toolkit.serving.recipes import RecipeError


def _row(**kw) -> dict:
    row = dict(hardware="h200", framework="vllm", model="dsr1", precision="fp8",
               spec_method="none", disagg=False, is_multinode=False, isl=128, osl=128,
               conc=64, num_prefill_gpu=8, num_decode_gpu=8, prefill_tp=8, prefill_ep=1,
               prefill_dp_attention=False, decode_tp=8, decode_ep=1, decode_dp_attention=False,
               date="2026-03-01")
    row.update(kw)
    return row


def _design(*rows: dict):
    return design(validate(pl.DataFrame(list(rows))))


class TestDefaults:
    def test_sourced_caps_per_engine(self):
        """vLLM ``max_num_seqs`` 1,024 on a >= 70 GiB GPU; TensorRT-LLM ``max_batch_size``
        2,048 per attention-DP rank; InferenceX's MoRI-SGLang decode recipe 160 per DP rank
        before 2026-05-27, none with DP + EP after, 256 with EP only, 128 without either."""
        mori = dict(framework="mori-sglang", hardware="mi355x", disagg=True,
                    is_multinode=True, num_prefill_gpu=8, prefill_tp=8, prefill_ep=8)
        d = _design(
            _row(),
            _row(framework="trt", hardware="b200", decode_dp_attention=True, decode_ep=8),
            _row(**mori, decode_ep=8, decode_dp_attention=True),
            _row(**mori, decode_ep=8, decode_dp_attention=True, date="2026-05-28"),
            _row(**mori, decode_ep=8),
            _row(**mori),
            _row(max_running_requests=77),
            _row(**mori, date=None),  # not an InferenceX run: its recipe does not apply
        )
        assert d.max_running.tolist() == [1024.0, 2048.0 * 8, 160.0 * 8, np.inf, 256.0,
                                          128.0, 77.0, np.inf]
        assert not d.sglang_default_cap.any()

    def test_sglang_request_pool_caps_short_contexts(self):
        """Without ``--max-running-requests`` SGLang holds at most its request pool: 2,048 ..
        4,096 per scheduler (DeepSeek-R1's 163,840-token context makes it 4,096 on a B200
        here), x the attention-DP ranks; a given cap above it lifts it to the KV bound."""
        short = dict(framework="sglang", hardware="b200", isl=64, osl=64)
        d = _design(_row(**short), _row(**short, decode_dp_attention=True, decode_ep=8),
                    _row(**short, max_running_requests=100000))
        assert d.sglang_default_cap.tolist() == [True, True, False]
        cap = max_batch(d)
        assert cap[0] == 4096.0
        assert cap[1] == 4096.0 * 8
        assert cap[2] > 4 * 4096.0  # only the KV pool bounds it

    def test_what_if_capacity_is_hbm_alone(self):
        """``engine_defaults=False`` (the scenario's capacity): HBM and a given cap only."""
        short = dict(framework="sglang", hardware="b200", isl=64, osl=64)
        df = validate(pl.DataFrame([_row(**short), _row(**short, max_running_requests=50)]))
        cap = max_batch(design(df, engine_defaults=False))
        assert cap[0] > 4 * 4096.0 and cap[1] == 50.0

    def test_bad_cap_names_the_row(self):
        with pytest.raises(RecipeError, match="row 2: max_running_requests 0"):
            _design(_row(), _row(max_running_requests=0))


class TestQueue:
    def test_users_beyond_the_cap_wait_for_a_slot(self):
        """A disaggregated vLLM deployment whose one decode instance holds vLLM's default
        1,024 requests (short requests: HBM holds far more): at 2,048 users half of them wait
        for a decode slot, so TTFT grows from a fraction of a second to seconds; lifting the
        cap (a given ``max_running_requests``) removes the queue."""
        dis = dict(framework="dynamo-vllm", disagg=True, is_multinode=True)
        df = validate(pl.DataFrame([_row(**dis, conc=1024), _row(**dis, conc=2048),
                                    _row(**dis, conc=2048, max_running_requests=100000)]))
        out = predict(df, bands=False)
        at_cap, over, lifted = out["pred_median_ttft"].to_list()
        assert at_cap < 1.0 and lifted < 1.0
        assert over > 10 * at_cap
        # the wait is the queue ahead: ~1,024 users / the completion rate
        rate = out["pred_tput_per_gpu"][1] * 16 / (0.9 * 256)
        assert over == pytest.approx(1024 / rate, rel=0.5)


class TestTrtRecipeBatches:
    """InferenceX's Dynamo + TensorRT-LLM recipes set the decode workers' ``max_batch_size``
    (``toolkit/data/inferencex/dynamo_trt_decode_batches.csv``, read from every version of its
    ``nvidia-master.yaml``)."""

    H100 = dict(hardware="h100", framework="dynamo-trt", disagg=True, is_multinode=True,
                isl=1024, osl=1024, num_prefill_gpu=16, num_decode_gpu=48, prefill_tp=16,
                prefill_ep=16, prefill_dp_attention=True, decode_tp=16, decode_ep=16,
                date="2026-02-08")

    def test_recipe_batch_caps_each_decode_worker(self):
        """H100 1K/1K, 6 users: ``ctx1_gen3_tep16_batch1`` (three TEP16 decode workers of one
        request each); 30 users: ``batch8``; with DP attention the batch is per rank
        (``ctx1_gen1_dep16_batch32`` at 615 users: 32 x 16 per worker)."""
        d = _design(_row(**self.H100, conc=6), _row(**self.H100, conc=30),
                    _row(**{**self.H100, "num_decode_gpu": 16, "decode_dp_attention": True,
                            "spec_method": "mtp"}, conc=615))
        assert d.n_dec.tolist() == [3.0, 3.0, 1.0]
        assert d.max_running.tolist() == [1.0, 8.0, 32.0 * 16]

    def test_only_inferencex_runs_of_a_listed_layout(self):
        """No run date (a sweep or a plan), another concurrency or another engine: the engine
        default (2,048 per rank); a given ``max_running_requests`` wins over the recipe."""
        d = _design(_row(**{**self.H100, "date": None}, conc=6), _row(**self.H100, conc=7),
                    _row(**{**self.H100, "framework": "dynamo-sglang"}, conc=6),
                    _row(**self.H100, conc=6, max_running_requests=5))
        assert d.max_running[:2].tolist() == [2048.0, 2048.0]
        assert np.isinf(d.max_running[2])  # SGLang: its request pool, not the TRT recipe
        assert d.max_running[3] == 5.0

    def test_bundled_rows_matched(self):
        """64 of the 80 bundled Dynamo-TRT rows find their recipe; every batch is a recipe's."""
        from toolkit.serving import bundled_points_path, read_points
        from toolkit.serving.recipes import _trt_decode_batches, trt_recipe_batches

        pts = read_points(bundled_points_path())
        b = trt_recipe_batches(pts)
        trt = (pts["framework"] == "dynamo-trt").to_numpy()
        assert np.isfinite(b).sum() == 64 and not np.isfinite(b[~trt]).any()
        assert set(b[np.isfinite(b)].tolist()) <= set(
            _trt_decode_batches()["decode_max_batch_size"].cast(float).to_list())

    def test_the_wait_for_a_decode_slot_is_the_ttft(self):
        """Six users on three one-request decode workers: half of them wait for a whole
        1,024-token decode, so the median TTFT is seconds (InferenceX measured 12.7 s); the
        engine default leaves it at the prefill's fraction of a second."""
        df = validate(pl.DataFrame([_row(**self.H100, conc=6),
                                    _row(**self.H100, conc=6, max_running_requests=2048)]))
        p = predict(df)
        ttft = p["pred_median_ttft"].to_list()
        assert ttft[0] > 5.0 > 1.0 > ttft[1]


class TestSglangRecipeLimits:
    """InferenceX's Dynamo + SGLang srt-slurm recipes set the decode workers'
    ``--max-running-requests`` and the prefill workers' ``--max-prefill-tokens`` /
    ``--chunked-prefill-size`` / ``--max-running-requests``
    (``toolkit/data/inferencex/dynamo_sglang_recipes.csv``)."""

    # a bundled row: H100 FP8 1K/1K MTP, 32 users, one TP16 prefill and two TP16 decode
    # workers (``h100-fp8-1p2d-max-tp-mtp.yaml``)
    H100 = dict(hardware="h100", framework="dynamo-sglang", disagg=True, is_multinode=True,
                spec_method="mtp", isl=1024, osl=1024, num_prefill_gpu=16,
                num_decode_gpu=32, prefill_tp=16, prefill_ep=1, decode_tp=16, decode_ep=1,
                date="2026-02-13")

    def test_recipe_caps_decode_and_batches_prefill(self):
        """Decode 128 running requests per worker; prefill 2,048 tokens of at most 2 prompts;
        with DP attention (``h100-fp8-1p1d-max-dep-mtp``) 64 per worker (SGLang divides it
        over the 16 DP ranks) and 4 prompts."""
        dep = {**self.H100, "num_decode_gpu": 16, "decode_ep": 16, "decode_dp_attention": True}
        d = _design(_row(**self.H100, conc=32), _row(**dep, conc=4))
        assert d.max_running.tolist() == [128.0, 64.0]
        assert not d.sglang_default_cap.any()
        assert d.pre_chunk_tokens.tolist() == [2048.0, 2048.0]
        assert d.pre_max_prompts.tolist() == [2.0, 4.0]

    def test_only_inferencex_runs_and_given_columns_win(self):
        """No run date, an unlisted concurrency or another engine: SGLang's own cap (its
        request pool) and the default 8,192-token prefill chunk; given columns win."""
        from toolkit.serving.client import CHUNK_TOKENS, MAX_PREFILL_PROMPTS

        d = _design(_row(**{**self.H100, "date": None}, conc=32), _row(**self.H100, conc=33),
                    _row(**{**self.H100, "framework": "dynamo-trt"}, conc=32),
                    _row(**self.H100, conc=32, max_running_requests=5, prefill_max_tokens=4096,
                         prefill_max_prompts=3))
        assert np.isinf(d.max_running[:2]).all() and d.sglang_default_cap[:2].all()
        assert d.max_running[2] == 2048.0  # TensorRT-LLM's default, not the SGLang recipe
        assert d.pre_chunk_tokens[:2].tolist() == [CHUNK_TOKENS] * 2
        assert d.pre_max_prompts[:2].tolist() == [MAX_PREFILL_PROMPTS] * 2
        assert d.max_running[3] == 5.0 and not d.sglang_default_cap[3]
        assert (d.pre_chunk_tokens[3], d.pre_max_prompts[3]) == (4096.0, 3.0)

    def test_bundled_rows_matched(self):
        """27 of the 60 bundled Dynamo-SGLang rows find their recipe (H100 10/10, H200 10/10,
        B200 2/20, GB200 5/20); no other engine's row does."""
        from toolkit.serving import bundled_points_path, read_points
        from toolkit.serving.recipes import sglang_recipe_limits

        pts = read_points(bundled_points_path())
        got = sglang_recipe_limits(pts)
        hit = np.isfinite(got["prefill_max_running_requests"])
        sg = (pts["framework"] == "dynamo-sglang").to_numpy()
        assert hit.sum() == 27 and not hit[~sg].any()
        per_hw = pts.filter(pl.Series(hit))["hardware"].value_counts().sort("hardware")
        assert per_hw.rows() == [("b200", 2), ("gb200", 5), ("h100", 10), ("h200", 10)]


