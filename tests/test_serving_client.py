"""The replay of InferenceX's benchmark client (toolkit.serving.client): exact figures on
hand-sized runs, and properties of the closed loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.serving.client import replay_client

GRID = np.array([[0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 256.0, 1024.0]])


def _run(conc, isl, osl, *, step0=0.010, per_req=0.001, accept=1.0, cap=1e9, n_dec=1,
         n_pre=1, disagg=False, pre=1e-5, xfer=0.0, per_user=1, ratio=1.0, fixed=None,
         gate=None, chunk=None, prompts=None):
    step = (step0 + per_req * GRID)  # step time linear in the batch
    out = replay_client(np.array([conc]), np.array([isl]), np.array([osl]), np.array([accept]),
                        np.array([cap]), np.array([n_dec]), np.array([n_pre]),
                        np.array([disagg]), GRID, step, np.array([pre]), np.array([xfer]),
                        per_user=per_user, ratio=ratio,
                        prefill_s_per_chunk=None if fixed is None else np.array([fixed]),
                        chunk_tokens=None if chunk is None else np.array([chunk]),
                        max_prompts=None if prompts is None else np.array([prompts]),
                        **({} if gate is None else dict(zip(
                            ("gate_iters", "gate_kind", "gate_ranks"), gate, strict=True))))
    return {k: float(v[0]) for k, v in out.items()}


class TestExact:
    def test_one_user_aggregated(self):
        """One request of 1,000 prompt tokens, 11 output tokens: the prefill chunk rides on an
        empty step (10 ms + 1,000 x 10 us), then 10 decode steps of 11 ms each."""
        r = _run(1, 1000, 11)
        assert r["median_ttft_s"] == pytest.approx(0.010 + 1000 * 1e-5)
        assert r["median_tpot_s"] == pytest.approx(0.011)
        assert r["duration_s"] == pytest.approx(0.020 + 10 * 0.011)
        assert r["completed"] == 1 and r["input_tokens"] == 1000 and r["output_tokens"] == 11

    def test_one_user_disaggregated(self):
        """Prefill 1,000 x 10 us on the prefill pool, KV transfer 1,000 x 2 us, first token;
        then 10 decode steps of 11 ms on the decode instance."""
        r = _run(1, 1000, 11, disagg=True, xfer=2e-6)
        assert r["median_ttft_s"] == pytest.approx(1000 * 1e-5 + 1000 * 2e-6)
        assert r["median_tpot_s"] == pytest.approx(0.011)

    def test_lone_prompt_pays_the_chunk_cost(self):
        """Disaggregated, alone: 1,000 x 10 us of compute plus one chunk's fixed 5 ms."""
        r = _run(1, 1000, 11, disagg=True, fixed=0.005)
        assert r["median_ttft_s"] == pytest.approx(1000 * 1e-5 + 0.005)

    def test_prefill_pool_batches_queued_prompts(self):
        """Four users arrive together; one prefill instance takes all four 1,000-token prompts
        in one 8,192-token chunk: one fixed 5 ms for the batch, so every TTFT is
        4,000 x 10 us + 5 ms (unbatched, the fourth would wait for 4 x 15 ms)."""
        r = _run(4, 1000, 11, disagg=True, fixed=0.005)
        assert r["median_ttft_s"] == pytest.approx(4000 * 1e-5 + 0.005)
        assert r["p90_ttft_s"] == pytest.approx(4000 * 1e-5 + 0.005)

    def test_prefill_batch_stops_at_the_chunk(self):
        """Three 5,000-token prompts: no two fit one 8,192-token chunk, so they run one after
        another; the median user waits for one other: 2 x (5,000 x 10 us + 5 ms)."""
        r = _run(3, 5000, 11, disagg=True, fixed=0.005)
        assert r["median_ttft_s"] == pytest.approx(2 * (5000 * 1e-5 + 0.005))

    def test_prefill_batch_stops_at_its_prompt_limit(self):
        """A prefill worker that takes two prompts a forward (a TensorRT-LLM ctx worker's
        max_batch_size): four users' 1,000-token prompts go in two forwards of 2,000 tokens
        and 5 ms each, so two TTFTs are 25 ms and two 50 ms."""
        r = _run(4, 1000, 11, disagg=True, fixed=0.005, prompts=2)
        assert r["median_ttft_s"] == pytest.approx(0.5 * (0.025 + 0.050))
        assert r["p90_ttft_s"] == pytest.approx(0.050)

    def test_prefill_batch_takes_a_larger_chunk(self):
        """Ten 1,000-token prompts: a 16,384-token forward takes all ten at once (one 5 ms
        fixed cost); the default 8,192-token chunk takes eight, then two."""
        big = _run(10, 1000, 11, disagg=True, fixed=0.005, chunk=16384)
        assert big["p90_ttft_s"] == pytest.approx(10_000 * 1e-5 + 0.005)
        default = _run(10, 1000, 11, disagg=True, fixed=0.005)
        assert default["p90_ttft_s"] == pytest.approx(8000 * 1e-5 + 0.005
                                                      + 2000 * 1e-5 + 0.005)

    def test_mtp_acceptance_divides_steps(self):
        """Two tokens accepted per step: 10 output tokens after the first take 5 steps."""
        r = _run(1, 1000, 11, accept=2.0)
        assert r["duration_s"] == pytest.approx(0.020 + 5 * 0.011)

    def test_closed_loop_issues_every_prompt(self):
        r = _run(4, 512, 32, per_user=10, ratio=0.8)
        assert r["completed"] == 40
        assert 0.8 * 512 * 40 <= r["input_tokens"] <= 512 * 40

    def test_hbm_cap_queues_users(self):
        """With room for one request, eight users run one at a time: the last waits for seven
        others, so the median TTFT is several request lifetimes."""
        free = _run(8, 256, 64, disagg=True)
        capped = _run(8, 256, 64, disagg=True, cap=1)
        assert capped["median_ttft_s"] > 3 * free["median_ttft_s"]
        assert capped["mean_batch_per_instance"] <= 1.0 + 1e-9

    def test_deterministic(self):
        a = _run(16, 2048, 128, per_user=10, ratio=0.8)
        b = _run(16, 2048, 128, per_user=10, ratio=0.8)
        assert a == b


class TestAdmissionGate:
    """Three users, two prompts each, 1,000 + 11 tokens, one aggregated instance."""

    def test_no_gate_by_hand(self):
        """Prompts 0-2 are prefilled on steps 1-3 (20, 21, 22 ms); steps 4-11 decode three
        (13 ms). Prompt 3 arrives when prompt 0 ends (t = 0.167 s) and is prefilled on step
        13 (21 ms; step 12 was already running): TTFT 33 ms; prompts 4 and 5 follow at 42
        and 43 ms. TTFTs 20, 41, 63, 33, 42, 43 ms: median 41.5, p90 53 ms."""
        r = _run(3, 1000, 11, per_user=2)
        assert r["median_ttft_s"] == pytest.approx(0.0415)
        assert r["p90_ttft_s"] == pytest.approx(0.053)
        assert _run(3, 1000, 11, per_user=2, gate=(1, 0, 1)) == r  # 1 iteration: no gate

    def test_receive_interval_holds_prompts_until_the_instance_idles(self):
        """SGLang polling every 100 decode iterations: prompts 3 and 4 stay unseen until the
        last of the first wave ends and the idle instance polls (t = 0.190 s); prompt 3 is
        prefilled alone (20 ms, TTFT 43 ms), prompt 4 next (TTFT 52 ms); prompt 5, which
        arrived during that prefill, is seen right after it (TTFT 63 ms). Median 47.5 ms,
        p90 63 ms; the same tokens come out."""
        r = _run(3, 1000, 11, per_user=2, gate=(100, 0, 1))
        assert r["median_ttft_s"] == pytest.approx(0.0475)
        assert r["p90_ttft_s"] == pytest.approx(0.063)
        assert r["completed"] == 6 and r["output_tokens"] == 66

    def test_balance_opens_when_a_rank_has_no_request(self):
        """TensorRT-LLM's attention-DP balance over 8 ranks with at most 3 requests: some rank
        always lacks a decoding request, so no prompt waits (the same run as no gate)."""
        assert _run(3, 1000, 11, per_user=2, gate=(100, 1, 8)) == _run(3, 1000, 11,
                                                                         per_user=2)

    @settings(max_examples=20, deadline=None)
    @given(conc=st.integers(2, 48), iters=st.integers(2, 60), kind=st.integers(0, 1),
           ranks=st.integers(1, 8))
    def test_gate_delays_but_loses_nothing(self, conc, iters, kind, ranks):
        """Every prompt still completes and the median TTFT is never below the ungated one by
        more than a step (a held prompt can let another through sooner)."""
        free = _run(conc, 1024, 64, per_user=3, ratio=0.8)
        held = _run(conc, 1024, 64, per_user=3, ratio=0.8, gate=(iters, kind, ranks))
        assert held["completed"] == free["completed"] == 3 * conc
        assert held["input_tokens"] == free["input_tokens"]
        assert held["median_ttft_s"] >= free["median_ttft_s"] - 0.010 - 0.001 * conc - 0.011


class TestProperties:
    @settings(max_examples=25, deadline=None)
    @given(conc=st.integers(1, 64), factor=st.integers(2, 4), disagg=st.booleans())
    def test_more_users_never_faster(self, conc, factor, disagg):
        """More users never shorten the median TTFT or TPOT (steps grow with the batch)."""
        a = _run(conc, 1024, 64, disagg=disagg, per_user=3, ratio=0.8)
        b = _run(conc * factor, 1024, 64, disagg=disagg, per_user=3, ratio=0.8)
        assert b["median_tpot_s"] >= a["median_tpot_s"] * (1 - 1e-9)
        assert b["p90_ttft_s"] >= a["p90_ttft_s"] * 0.999

    @settings(max_examples=25, deadline=None)
    @given(conc=st.integers(1, 32), n_dec=st.integers(1, 4), n_pre=st.integers(1, 3))
    def test_every_request_completes_and_p90_above_median(self, conc, n_dec, n_pre):
        r = _run(conc, 800, 40, disagg=True, n_dec=n_dec, n_pre=n_pre, per_user=4, ratio=0.8)
        assert r["completed"] == 4 * conc
        assert r["p90_ttft_s"] >= r["median_ttft_s"] > 0
