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
