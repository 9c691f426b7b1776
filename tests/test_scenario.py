"""The serving model's scenario API: the decode step and prefill every other layer prices.

Byte and FLOP terms are pinned to the model specs (they carry no fitted number); times are
checked against the transfer model and against each other (monotonicity, the miss term
with and without overlap, hardware spec ratios)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.serving.params import ServingParams
from toolkit.serving.scenario import Deployment, ScenarioError, decode, label, prefill
from toolkit.serving.transfer import transfer_path

GLM = get_model("glm-5.2")
DEP = Deployment("glm-5.2", "gb200")
PRIOR = ServingParams.prior()


def one(**kw):
    kw.setdefault("context_tokens", 32_768)
    if "batch_per_instance" not in kw:
        kw.setdefault("batch_per_gpu", 1)
    return decode(kw.pop("dep", DEP), **kw)


class TestTerms:
    def test_bytes_per_gpu(self):
        """DP attention, 1 request per GPU at 32K: the indexer reads 132 B x L on the 21
        Full layers; sparse MLA reads 2048 rows x 656 B on each of 78 layers."""
        t = one().terms
        assert t["indexer_bytes"][0] == 21 * 132 * 32_768
        assert t["kv_bytes"][0] == 78 * 2048 * 656
        assert t["miss_bytes"][0] == 0.0

    def test_short_context_reads_all(self):
        """Below top-k every context row is read: the context convention is exact."""
        assert one(context_tokens=1000).terms["kv_bytes"][0] == 78 * 1000 * 656

    def test_attention_flops(self):
        """DeepSeek-V3.2: 2 x 128 heads x k x (512 + 512 + 64) per layer (570 MFLOP) plus
        the indexer's 2 x 64 heads x 128 dims per context token."""
        ds = get_model("deepseek-v3.2")
        t = one(dep=Deployment("deepseek-v3.2", "gb200")).terms
        idx = 2 * ds.index_n_heads * ds.index_head_dim * 32_768 * len(ds.indexer_layers)
        assert t["attention_flops"][0] == pytest.approx(ds.num_layers * 570_425_344 + idx)

    def test_tp_attention_reads_every_request(self):
        """Tensor-parallel attention: each GPU reads the latent rows of the whole batch."""
        tp = Deployment("glm-5.2", "gb200", dp_attention=False)
        t = one(dep=tp, batch_per_instance=8).terms
        assert t["kv_bytes"][0] == 8 * 78 * 2048 * 656


class TestTimes:
    @settings(max_examples=examples(30), deadline=None)
    @given(b=st.floats(0.5, 200), db=st.floats(0.01, 200), ctx=st.integers(2, 200_000),
           dctx=st.integers(1, 100_000))
    def test_monotone_in_batch_and_context(self, b, db, ctx, dctx):
        """More requests or a longer context never make a step faster."""
        r = decode(DEP, batch_per_gpu=[b, b + db, b], context_tokens=[ctx, ctx, ctx + dctx])
        assert r.t_step_s[1] >= r.t_step_s[0] and r.t_step_s[2] >= r.t_step_s[0]

    @pytest.mark.parametrize("hw", ["gb200", "mi355x", "h200"])
    def test_sync_misses_add_the_transfer(self, hw):
        """Synchronous fetches add exactly one gather-kernel call per layer (the transfer
        model, all GPUs loading) to the step."""
        dep = Deployment("glm-5.2", hw)
        base = one(dep=dep, batch_per_gpu=32)
        sync = one(dep=dep, batch_per_gpu=32, misses_per_layer=512.0)
        path = transfer_path(get_hardware(hw), "sm_kernel", concurrent=True)
        expect = 78 * path.time_s(512 * 32, 656)
        assert sync.t_miss_s[0] == pytest.approx(expect, rel=1e-12)
        assert sync.t_step_s[0] - base.t_step_s[0] == pytest.approx(expect, rel=1e-9)
        assert sync.terms["miss_bytes"][0] == 32 * 78 * 512 * 656

    @pytest.mark.parametrize("misses", [4.0, 512.0, 20_000.0])
    def test_overlap_exposes_only_the_excess(self, misses):
        """Overlapped fetches add max(0, transfer - the layers' work)."""
        base = one(batch_per_gpu=32)
        sync = one(batch_per_gpu=32, misses_per_layer=misses)
        over = one(batch_per_gpu=32, misses_per_layer=misses, overlap=True)
        t = base.terms
        work = t["t_dense_gemm_s"][0] + t["t_moe_gemm_s"][0] + t["t_attention_s"][0]
        excess = max(0.0, sync.t_miss_s[0] - work)
        assert over.t_step_s[0] - base.t_step_s[0] == pytest.approx(excess, abs=1e-15)
        assert base.t_step_s[0] <= over.t_step_s[0] <= sync.t_step_s[0]
        if misses == 20_000.0:
            assert excess > 0  # the large case really exposes some I/O

    def test_gb300_and_gb200_differ_as_their_specs(self):
        """Same efficiencies (the priors): FP8 weight-bound steps tie (same HBM bandwidth),
        FP4 compute-bound MoE GEMMs run at the 10 : 15 PFLOPS FP4 peak ratio, and GB300's
        larger HBM holds more requests."""
        gb200, gb300 = (Deployment("glm-5.2", h, precision="fp4") for h in ("gb200", "gb300"))
        big = {"batch_per_gpu": 4096, "context_tokens": 1024, "params": PRIOR}
        r200, r300 = one(dep=gb200, **big), one(dep=gb300, **big)
        assert r300.terms["t_moe_gemm_s"][0] / r200.terms["t_moe_gemm_s"][0] == pytest.approx(
            10_000 / 15_000)
        assert r300.max_batch_per_gpu[0] > 1.4 * r200.max_batch_per_gpu[0]
        fp8 = {"batch_per_gpu": 1, "params": PRIOR}
        a = one(dep=Deployment("glm-5.2", "gb200"), **fp8)
        b = one(dep=Deployment("glm-5.2", "gb300"), **fp8)
        assert a.terms["t_hbm_s"][0] == b.terms["t_hbm_s"][0]
        # the bundled fit has no per-accelerator terms: siblings of one family share every
        # fitted efficiency, so a step neither capacity nor FP4 compute binds ties too
        assert one(dep=Deployment("glm-5.2", "gb200")).t_step_s[0] == one(
            dep=Deployment("glm-5.2", "gb300")).t_step_s[0]
        assert one(dep=gb200, **{k: v for k, v in big.items() if k != "params"}).t_step_s[0] \
            > one(dep=gb300, **{k: v for k, v in big.items() if k != "params"}).t_step_s[0]

    def test_derived_figures(self):
        """tokens/s/GPU = batch per GPU / TPOT; interactivity = 1 / TPOT; no MTP: TPOT is
        the step; per-instance and per-GPU batches are the same point."""
        r = one(batch_per_gpu=16)
        assert r.tokens_per_s_per_gpu[0] == pytest.approx(16 / r.tpot_s[0])
        assert r.interactivity_tok_s_user[0] == pytest.approx(1 / r.tpot_s[0])
        assert r.tpot_s[0] == r.t_step_s[0]
        assert one(batch_per_instance=128).t_step_s[0] == r.t_step_s[0]
        assert r.t_work_s[0] + r.t_miss_s[0] == r.t_step_s[0]
        assert r.t_layer_s[0] * 78 + r.terms["t_overhead_s"][0] == pytest.approx(r.t_step_s[0])

    def test_mtp_accepts_more_than_one_token(self):
        """With MTP a step verifies drafts: TPOT = step / accepted tokens, in (1, 4]."""
        r = one(dep=Deployment("glm-5.2", "gb200", mtp=True), batch_per_gpu=8)
        assert 1.0 < r.t_step_s[0] / r.tpot_s[0] <= 4.0

    def test_vectorised_equals_one_by_one(self):
        """One call over points gives the same numbers as a call per point."""
        b, ctx, m = [1, 8, 64], [4096, 32_768, 100_000], [0.0, 10.0, 300.0]
        r = decode(DEP, batch_per_gpu=b, context_tokens=ctx, misses_per_layer=np.array(m))
        for i in range(3):
            s = decode(DEP, batch_per_gpu=b[i], context_tokens=ctx[i], misses_per_layer=m[i])
            assert r.t_step_s[i] == s.t_step_s[0]

    def test_per_layer_misses_are_averaged(self):
        """A per-layer tuple (or a points x layers array) prices as its mean."""
        per_layer = tuple(float(i % 5) for i in range(78))
        mean = one(batch_per_gpu=8, misses_per_layer=float(np.mean(per_layer)))
        assert one(batch_per_gpu=8, misses_per_layer=per_layer).t_step_s[0] == pytest.approx(
            mean.t_step_s[0], rel=1e-12)
        two = decode(DEP, batch_per_gpu=8, context_tokens=32_768,
                     misses_per_layer=np.array([per_layer, per_layer]))
        assert two.t_step_s == pytest.approx([mean.t_step_s[0]] * 2, rel=1e-12)

    def test_labels_say_fitted(self):
        """The bundled efficiencies are fitted; the label names the data."""
        assert one().params_kind == "fitted"
        assert "fitted on" in label() and "InferenceX" in label()
        assert one(params=PRIOR).params_kind == "assumed"


class TestRefusals:
    def test_per_layer_tuple_of_wrong_length(self):
        with pytest.raises(ScenarioError, match="has 3 entries; glm-5.2 has 78 layers"):
            one(misses_per_layer=(1.0, 2.0, 3.0))
        with pytest.raises(ScenarioError, match="30 columns; glm-5.2 has 78 layers"):
            one(misses_per_layer=np.zeros((2, 30)))

    def test_bad_batch_and_context(self):
        with pytest.raises(ScenarioError, match="exactly one of"):
            decode(DEP, context_tokens=10)
        with pytest.raises(ScenarioError, match="batch must be > 0"):
            one(batch_per_gpu=0)
        with pytest.raises(ScenarioError, match="context_tokens must be >= 2"):
            one(context_tokens=1)
        with pytest.raises(ScenarioError, match="negative|>= 0"):
            one(misses_per_layer=-1.0)
        with pytest.raises(ScenarioError, match="different lengths"):
            decode(DEP, batch_per_gpu=[1, 2], context_tokens=[10, 20, 30])

    def test_unknown_names(self):
        with pytest.raises(ScenarioError, match="field 'framework': unknown framework 'sglng'"):
            Deployment("glm-5.2", "gb200", engine="sglng")
        with pytest.raises(ScenarioError, match="h200 has no FP4"):
            Deployment("glm-5.2", "h200", precision="fp4")
        with pytest.raises(ScenarioError, match="unknown model 'glm-9'"):
            Deployment("glm-9", "gb200")

    def test_unregistered_spec_object(self):
        """A changed spec object is refused: the model reads specs by registered name."""
        from dataclasses import replace

        assert Deployment(GLM, get_hardware("gb200")).model == "glm-5.2"
        with pytest.raises(ScenarioError, match="not the registered one"):
            Deployment(replace(GLM, num_layers=3), "gb200")


class TestPrefill:
    def test_prefill_grows_and_counts_gpus(self):
        """Longer prompts and longer cached contexts take longer; GPU-seconds = time x 8."""
        p = prefill(DEP, new_tokens=[1024, 8192, 8192], cached_tokens=[0, 0, 30_000])
        assert p.t_s[0] < p.t_s[1] < p.t_s[2]
        assert p.gpu_s == pytest.approx(p.t_s * 8)

    def test_tier_service_reproduces_the_model(self):
        """The tier replay's linear prefill coefficients give the serving model's time at
        both probes, and its TPOT table is the model's decode TPOT at grid batches."""
        from toolkit.replay.tiers.config import ServiceAssumptions
        from toolkit.serving.tier_service import deployment, prefill_coefficients, tpot_table

        hw, a = get_hardware("gb200"), ServiceAssumptions()
        c_tok, c_ctx = prefill_coefficients(hw, GLM, a, 20_000)
        dep = deployment(hw, GLM, a)
        probe = prefill(dep, new_tokens=[8192, 8192], cached_tokens=[0, 20_000]).t_s
        linear = [8192 * c_tok + 8192 * c_ctx * 0.5 * (0 + 8192),
                  8192 * c_tok + 8192 * c_ctx * 0.5 * (20_000 + 28_192)]
        assert linear == pytest.approx(probe, rel=1e-9)
        table = tpot_table(hw, GLM, a, 20_000, 40)
        grid = decode(dep, batch_per_instance=[1, 2, 4, 8, 16, 32], context_tokens=20_000)
        assert table[[1, 2, 4, 8, 16, 32]] == pytest.approx(grid.tpot_s, rel=1e-12)
        assert np.all(np.diff(table[1:]) >= 0)
