"""Answers that cannot contradict themselves (issue 50, items 8-10): in ``cost compare`` and
``toolkit plan`` the answer at an interactivity target is the best deployment meeting *at
least* that target within the p90 TTFT bound, computed whatever other targets are asked.
So a lower target never costs more, a looser bound never costs more, a target asked alone
answers exactly as asked beside others, and an engine that does not run on an accelerator
is refused instead of priced."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.budget import examples
from toolkit.cli import app
from toolkit.cost.compare import ENGINE_VENDORS, check_engine, compare, engines_on
from toolkit.cost.config import CompareConfig

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]

ANSWER = ("source", "basis", "reachable", "tput_per_gpu", "tput_per_gpu_low",
          "tput_per_gpu_high", "p90_ttft_s", "p90_ttft_s_high", "layout", "gpus", "conc",
          "usd_per_mtok_total", "blend_points", "blend_log_shift")


def _usd(row: dict) -> float:
    """$/M total, infinity where the target is unreachable (no deployment meets it)."""
    v = row["usd_per_mtok_total"]
    return math.inf if v is None or not row["reachable"] else float(v)


def _costs(cfg: CompareConfig) -> list[float]:
    return [_usd(r) for r in compare(cfg).to_dicts()]


def _nondecreasing(xs: list[float]) -> bool:
    return all(b >= a * (1 - 1e-9) for a, b in zip(xs, xs[1:], strict=False))


class TestTargets:
    def test_a_lower_target_alone_never_costs_more(self):
        """GLM-5.2 on GB200 at 10 tok/s/user asked alone answered $20.80/M from a 1-user
        point (only points near the asked targets were replayed, and near 10 every one of
        them broke the 10 s TTFT bound), while 100 answered $0.16/M."""
        at = {t: _costs(CompareConfig("glm-5.2", ("gb200",), (t,)))[0]
              for t in (10.0, 20.0, 100.0)}
        assert at[10.0] <= at[100.0] and at[20.0] <= at[100.0], at
        assert at[10.0] < 1.0, at

    def test_a_target_answers_the_same_alone_and_beside_others(self):
        """50 alone answered $0.148/M, 50 within "50,100,150" $0.146/M."""
        alone = compare(CompareConfig("glm-5.2", ("gb200",), (50.0,))).to_dicts()[0]
        among = compare(CompareConfig("glm-5.2", ("gb200",), (50.0, 100.0, 150.0)))
        row = among.filter(pl.col("interactivity") == 50.0).to_dicts()[0]
        assert {k: row[k] for k in ANSWER} == {k: alone[k] for k in ANSWER}

    def test_measured_runs_and_the_corrected_model_answer_together(self):
        """GLM-5 FP8 8K/128 on 8x H200 with vLLM: the bundled runs reach 25.2 tok/s/user;
        20 answered from them, 30 from the model (2x more optimistic) at half the price.
        Now every model point is corrected by the measured runs' residuals (a fixed
        correction, whatever the targets), so 30 costs more than 20, and the two runs are
        too sparse to answer as measured: every answer is blended."""
        cfg = CompareConfig("glm-5", ("h200",), (10.0, 20.0, 30.0), isl=8192, osl=128,
                            mtp="on", engines={"h200": "vllm"})  # the runs: MTP-1
        rows = compare(cfg).to_dicts()
        assert _nondecreasing([_usd(r) for r in rows])
        assert [r["source"] for r in rows] == ["blended"] * 3
        assert all(r["reachable"] for r in rows)
        far = rows[2]
        assert far["blend_points"] >= 1 and far["blend_log_shift"] < 0
        assert far["model_usd_per_mtok_total"] < rows[1]["usd_per_mtok_total"] \
            <= far["usd_per_mtok_total"]


class TestTtftBound:
    def test_model_front_never_dearer_when_loosened(self):
        """GLM-5.2, GB200 Dynamo-SGLang at 100 tok/s/user: 20 s answered $0.1549/M, 50 s
        $0.1629/M (one spline through every layout point whose end slope moved as the bound
        let in a point)."""
        costs = [_costs(CompareConfig("glm-5.2", ("gb200",), (100.0,), max_p90_ttft_s=b))[0]
                 for b in (20.0, 50.0, None)]
        assert _nondecreasing(costs[::-1]), costs

    def test_measured_points_never_make_it_dearer(self):
        """dsr1, GB200 Dynamo-TRT at 100 tok/s/user: 100 s answered $0.109/M from the model,
        no bound $1.30/M from measured runs (with no TTFT recorded) that then reached 100;
        with a blend that depended on the target and the bound, 20 s and 50 s $0.125/M and
        no bound $0.893/M."""
        cfg = dict(model="dsr1", hardware=("gb200",), interactivity=(100.0,),
                   engines={"gb200": "dynamo-trt"})
        costs = [_costs(CompareConfig(**cfg, max_p90_ttft_s=b))[0]
                 for b in (20.0, 50.0, None)]
        assert _nondecreasing(costs[::-1]), costs


class TestEnginePairs:
    @pytest.mark.parametrize(("hw", "engine"), [("gb200", "mori-sglang"), ("gb200", "atom"),
                                                ("mi355x", "trt"), ("mi355x", "dynamo-trt")])
    def test_a_pair_that_does_not_exist_is_refused(self, hw, engine):
        res = runner.invoke(app, ["cost", "compare", "--model", "glm-5.2", "--hardware", hw,
                                  "--engine", f"{hw}={engine}", "--interactivity", "100"])
        assert res.exit_code == 2 and res.stdout == ""
        line = res.stderr.strip()
        assert "\n" not in line and line.startswith(f"error: --engine {hw}={engine}:")
        assert line.endswith(f"engines for {hw}: {', '.join(engines_on(hw))}")
        assert engine not in engines_on(hw)

    def test_valid_engines_are_those_all_engines_compares(self):
        from toolkit.cost.compare import engines_for

        for hw in ("gb200", "gb300", "mi355x", "h200"):
            cfg = CompareConfig("dsr1", (hw,), (50.0,), all_engines=True)
            assert engines_for(cfg, hw) == engines_on(hw)
            for e in engines_on(hw):
                check_engine(hw, e)
        assert set(ENGINE_VENDORS) - set(engines_on("gb200")) == {"atom", "mori-sglang"}

    def test_library_and_sweep_refuse_too(self):
        with pytest.raises(ValueError, match=r"^--engine gb200=atom: atom does not run"):
            compare(CompareConfig("dsr1", ("gb200",), (50.0,), engines={"gb200": "atom"}))
        from toolkit.sweep.kinds import kinds

        with pytest.raises(ValueError, match=r"^engines mi355x=trt: trt does not run"):
            kinds.get("serving").check(CompareConfig("dsr1", ("mi355x",), (50.0,),
                                                   engines={"mi355x": "trt"}))


BOUNDS = (2.0, 5.0, 10.0, 20.0, 50.0, 100.0, None)


@pytest.mark.slow
@settings(max_examples=examples(30), deadline=None)
@given(model=st.sampled_from(["glm-5.2", "dsr1"]),
       hw=st.sampled_from(["gb200", "gb300", "mi355x", "b200"]),
       targets=st.lists(st.sampled_from([5.0, 12.0, 30.0, 50.0, 75.0, 100.0, 130.0, 200.0]),
                        min_size=2, max_size=3, unique=True),
       bounds=st.lists(st.sampled_from(range(len(BOUNDS))), min_size=2, max_size=2,
                       unique=True).map(sorted),
       conf=st.sampled_from([0.5, 0.8, 0.9]))
def test_compare_properties(model, hw, targets, bounds, conf):
    """Over the bundled data (measured points, the model's points corrected by them): cost
    non-decreasing in the target, non-increasing as the bound loosens, each target as when
    asked alone, at any --ttft-confidence."""
    tight, loose = BOUNDS[bounds[0]], BOUNDS[bounds[1]]
    asked = compare(CompareConfig(model, (hw,), tuple(targets), max_p90_ttft_s=tight,
                                  ttft_confidence=conf))
    rows = {r["interactivity"]: r for r in asked.to_dicts()}
    assert _nondecreasing([_usd(rows[t]) for t in sorted(targets)])
    alone = compare(CompareConfig(model, (hw,), (targets[0],), max_p90_ttft_s=tight,
                                  ttft_confidence=conf)).to_dicts()[0]
    assert {k: alone[k] for k in ANSWER} == {k: rows[targets[0]][k] for k in ANSWER}
    looser = _costs(CompareConfig(model, (hw,), tuple(targets), max_p90_ttft_s=loose,
                                  ttft_confidence=conf))
    for t, c in zip(targets, looser, strict=True):
        assert c <= _usd(rows[t]) * (1 + 1e-9), (t, c, rows[t])


@pytest.fixture(scope="module")
def conv_store(tmp_path_factory: pytest.TempPathFactory):
    import toolkit
    from toolkit.ingest import ingest_file

    root = tmp_path_factory.mktemp("consistency") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", ROOT / "traces" / "mooncake" / "conversation_trace.jsonl",
                    "conv")
        yield s


def _plan_usd(store, hw: str, target: float, bound: float | None) -> float:
    """The best plan's $/M for the bundled conversation trace with the host tiers forbidden
    (one candidate per accelerator, seconds), infinity when nothing is feasible."""
    from toolkit.plan.config import PlanConfig
    from toolkit.plan.search import PlanError, plan

    cfg = PlanConfig(trace="conv", model="glm-5.2", hardware=(hw,), interactivity=target,
                     max_p90_ttft_s=bound, host_dram_gb=(0.0,), ssd_gb=(0.0,),
                     prefix_reserve=(0.0,), top=1)
    try:
        return plan(store, cfg, progress=False, save=False).plans[0]["usd_per_mtok_total"]
    except PlanError:
        return math.inf


def test_plan_lower_target_never_dearer(conv_store):
    """`plan` on GB200 answered $5.81/M at 10 tok/s/user (a 1-user point on 80 GPUs: only
    points near the target were replayed, none of them within the 10 s bound) and $0.159/M
    at 100."""
    assert _plan_usd(conv_store, "gb200", 10.0, 10.0) <= _plan_usd(conv_store, "gb200",
                                                                   100.0, 10.0)


PLAN_TARGETS = (5.0, 10.0, 30.0, 60.0, 100.0, 150.0)
PLAN_BOUNDS = (2.0, 5.0, 10.0, 20.0)


@settings(max_examples=3, deadline=None)  # three plans an example, about a second each
@given(hw=st.sampled_from(["mi355x", "gb200"]),
       t=st.lists(st.sampled_from(PLAN_TARGETS), min_size=2, max_size=2, unique=True)
       .map(sorted),
       b=st.lists(st.sampled_from(PLAN_BOUNDS), min_size=2, max_size=2, unique=True)
       .map(sorted))
def test_plan_properties(conv_store, hw, t, b):
    """A plan's cost is non-decreasing in the interactivity target and non-increasing as
    the TTFT bound loosens (`plan` asks one target a call, so it is always asked alone)."""
    base = _plan_usd(conv_store, hw, t[0], b[0])
    assert base <= _plan_usd(conv_store, hw, t[1], b[0]) * (1 + 1e-9)
    assert _plan_usd(conv_store, hw, t[0], b[1]) <= base * (1 + 1e-9)


def test_correction_is_fixed_per_point():
    """Each modelled point is corrected by the mean log residual of its 1-3 nearest measured
    runs within 2x interactivity (beyond: the nearest, the band widened by the whole
    shift): computed from the points alone, never from a target or a bound."""
    import numpy as np

    from toolkit.cost.compare import MIN_HALF_WIDTH, _corrected

    g = pl.DataFrame({"pred_median_intvty": [10.0, 50.0, 400.0],
                      "pred_tput_per_gpu": [100.0, 100.0, 100.0],
                      "pred_output_tput_per_gpu": [10.0, 10.0, 10.0],
                      "pred_tput_per_gpu_low": [80.0, 80.0, 80.0],
                      "pred_tput_per_gpu_high": [125.0, 125.0, 125.0]})
    xr = np.array([40.0, 60.0, 70.0, 90.0])
    r = np.log(np.array([0.5, 0.5, 0.5, 2.0]))
    out = _corrected(g, (xr, r))
    # 10: none within 2x, the nearest three (40, 60, 70): shift log 0.5, band widened
    # 50: nearest three within 2x (40, 60, 70); 400: none within 2x, nearest 90, 70, 60
    assert out["_n"].to_list() == [3, 3, 3]
    shifts = out["_shift"].to_numpy()
    assert shifts[:2] == pytest.approx([np.log(0.5)] * 2)
    assert shifts[2] == pytest.approx(np.mean(np.log([2.0, 0.5, 0.5])))
    t = out["pred_tput_per_gpu"].to_numpy()
    assert t[:2] == pytest.approx([50.0, 50.0])
    lo, hi = out["pred_tput_per_gpu_low"].to_numpy(), out["pred_tput_per_gpu_high"].to_numpy()
    assert hi[1] / t[1] == pytest.approx(1.25) and t[1] / lo[1] == pytest.approx(1.25)
    assert np.log(hi[0] / t[0]) == pytest.approx(np.hypot(np.log(1.25), np.log(0.5)))
    assert (np.log(hi / t) >= MIN_HALF_WIDTH).all()
    # no measured run: every point is the model's
    none = _corrected(g, (np.empty(0), np.empty(0)))
    assert none["_n"].to_list() == [0, 0, 0]
    assert none["pred_tput_per_gpu"].to_list() == [100.0, 100.0, 100.0]
