"""``toolkit plan`` on the bundled Mooncake conversation trace and SmolLM2 selections.

Small spaces (one accelerator, two or three memory options) keep each plan to seconds.
Hit shares and misses are replay figures, pinned exactly; $ figures come from the serving
model and are checked by recomputing them from their inputs, not pinned (the model's fit
may change; regenerate the pinned replay figures with ``toolkit plan --json`` if the
trace or the replay semantics change).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolkit
from toolkit.cli import app
from toolkit.cost.compare import CompareConfig, compare
from toolkit.cost.from_replay import run_tiers
from toolkit.cost.price import MEMORY_PRICES
from toolkit.hardware import get_hardware
from toolkit.ingest import ingest_file
from toolkit.models import get_model
from toolkit.plan.config import PlanConfig
from toolkit.plan.load import LOAD_KEYS
from toolkit.plan.search import PLAN_KEYS, PlanError, plan
from toolkit.replay.tiers import TierReplayConfig
from toolkit.replay.tiers.config import ServiceAssumptions

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
SMOLLM2 = ROOT / "traces" / "smollm2"

SMALL = dict(trace="conv", model="glm-5.2", hardware=("mi355x",), host_dram_gb=(0.0, 512.0),
             ssd_gb=(0.0, 4096.0), hisparse_multiples=(2,), top=3, prefix_reserve=(0.0,),
             users=2)

# Replay figures of the small plan (tier replay of `conv` on mi355x: the front point is TP4
# EP1 at 2 users, so one TP4 instance's pool of 1,524,121 tokens at 2 closed-loop users, LRU;
# 512 GB host and 4096 GB SSD per 8 GPUs, so 256 GB and 2048 GB for the 4-GPU instance).
GOLDEN_GPU_HIT = 0.06756354516587355
GOLDEN_HOST_HIT_512 = 0.13880105921369312
GOLDEN_STORAGE_HIT_512_4096 = 0.16183143392795146
TP4_POOL_MI355X = 1_524_121  # (298.012 GB x 0.9 - 744 GB / 4) // 53,940 B per token
TP8_POOL_MI355X = 3_248_258  # (298.012 GB x 0.9 - 744 GB / 8) // 53,940 B per token


HEAD_REQUESTS = 1500
"""The first requests of the conversation trace (``conv_head``): the properties below size
every candidate for the load with cluster replays, so they replay a shorter trace."""


@pytest.fixture(scope="module")
def pstore(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("plan") / "store"
    head = root.parent / "conv_head.jsonl"
    with MOONCAKE.open() as f:
        head.write_text("".join(next(f) for _ in range(HEAD_REQUESTS)))
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
        ingest_file(s, "mooncake", head, "conv_head")
        ingest_file(s, "bundle", SMOLLM2, "smollm2", select="smollm2-softmax-sum")
        yield s


@pytest.fixture(scope="module")
def small(pstore):
    return plan(pstore, PlanConfig(selections="smollm2", **SMALL), progress=False)


def _best(store, **kw) -> float:
    """The best plan's $/M at the load, or infinity when nothing is feasible: every candidate
    evaluated and sized (so a wider question is a superset of a narrower one's plans)."""
    try:
        r = plan(store, PlanConfig(**{**SMALL, "trace": "conv_head", "exhaustive": True,
                                      "load_candidates": 64, **kw}),
                 progress=False, save=False)
    except PlanError:
        return math.inf
    return r.plans[0]["usd_per_mtok_total"]


def test_json_contract_and_golden_hit_shares(small) -> None:
    out = small.to_json()
    assert {"plans", "searched", "evaluated_exactly", "feasible", "elapsed_s"} <= set(out)
    assert out["searched"] == 8 and out["feasible"] >= 1
    assert out["evaluated_exactly"] <= out["searched"]
    for i, p in enumerate(out["plans"], start=1):
        assert list(p)[:len(PLAN_KEYS) + len(LOAD_KEYS)] == list(PLAN_KEYS) + list(LOAD_KEYS)
        assert p["rank"] == i and set(p["usd_breakdown"]) == {"gpu", "dram", "ssd"}
        assert p["usd_per_mtok_total_low"] <= p["usd_per_mtok_total"] <= p[
            "usd_per_mtok_total_high"]
    costs = [p["usd_per_mtok_total"] for p in out["plans"]]
    assert costs == sorted(costs)
    best = out["plans"][0]
    assert (best["host_dram_gb"], best["ssd_gb"], best["hisparse_buffer_tokens"]) == (
        512.0, 4096.0, None)
    assert best["front_gpu_hit_share"] == GOLDEN_GPU_HIT
    assert best["front_host_hit_share"] == GOLDEN_HOST_HIT_512
    assert best["front_storage_hit_share"] == GOLDEN_STORAGE_HIT_512_4096
    # 2 users: one TP4 instance (with MTP) meets 100 tok/s/user; it is the floor
    assert (best["instances"], best["gpus_total"], best["users"], best["binding"]) == (
        1, 4, 2, "one instance")
    assert (best["host_dram_gb_total"], best["ssd_gb_total"]) == (256.0, 2048.0)
    assert any("survey" in a or "assumption" in a for a in small.assumptions)


def test_cost_recomputed_from_its_inputs(small) -> None:
    """At the load: $/hour = GPUs x $/GPU-hour + DRAM and SSD totals x $/GB-hour, and $/M =
    $/hour / (the cluster's tok/s/GPU x GPUs x 3600 / 1e6); at the front: $/M = (GPU + DRAM
    + SSD $/GPU-hour) / (tok/s/GPU x 3600 / 1e6); each price sourced."""
    for p in small.plans:
        gpu = get_hardware(p["hardware"]).price_usd_per_gpu_hour("hyperscaler")
        dram = p["host_dram_gb"] * MEMORY_PRICES["dram"].usd_per_gb_hour / 8
        ssd = p["ssd_gb"] * MEMORY_PRICES["ssd"].usd_per_gb_hour / 8
        mtok_per_hour = p["front_tput_per_gpu"] * 3600 / 1e6
        assert p["front_usd_per_mtok_total"] == pytest.approx(
            (gpu + dram + ssd) / mtok_per_hour, rel=1e-12)
        n = p["gpus_total"]
        assert n == p["instances"] * p["gpus"]
        hourly = n * gpu + (p["host_dram_gb_total"] * MEMORY_PRICES["dram"].usd_per_gb_hour
                            + p["ssd_gb_total"] * MEMORY_PRICES["ssd"].usd_per_gb_hour)
        assert p["usd_per_hour_total"] == pytest.approx(hourly, rel=1e-12)
        assert p["host_dram_gb_total"] == p["host_dram_gb"] * n / 8
        cluster_mtok = p["tput_per_gpu"] * n * 3600 / 1e6
        assert p["usd_per_mtok_total"] == pytest.approx(hourly / cluster_mtok, rel=1e-12)
        assert p["usd_breakdown"]["dram"] == pytest.approx(
            p["host_dram_gb_total"] * MEMORY_PRICES["dram"].usd_per_gb_hour / cluster_mtok,
            rel=1e-12)
    for tier in ("dram", "ssd"):
        price = MEMORY_PRICES[tier]
        assert price.kind in ("survey", "assumption") and price.source and price.vintage


def test_named_replays_reproduce_hit_shares(pstore, small) -> None:
    """Re-running each tier replay a plan names, from its stored config, gives its hit
    shares exactly; the per-request rows sum to them (an independent aggregation)."""
    for p in small.plans:
        tier_id = p["run_ids"][1]
        run = pstore.query("SELECT * FROM tier_runs WHERE run_id = $r", {"r": tier_id})
        assert run.height == 1
        cfg = json.loads(run["config_json"][0])
        cfg["assumptions"] = ServiceAssumptions(**cfg["assumptions"])
        again = run_tiers(pstore, TierReplayConfig(**cfg), save=False).summary
        assert again["run_id"] == tier_id
        assert (again["gpu_hit_rate"], again["host_hit_rate"], again["storage_hit_rate"]) == (
            p["front_gpu_hit_share"], p["front_host_hit_share"], p["front_storage_hit_share"])
        sums = pstore.query(
            "SELECT sum(device_tokens) d, sum(host_tokens) h, sum(storage_tokens) s, "
            "sum(prompt_tokens) n FROM tier_requests WHERE run_id = $r", {"r": tier_id})
        d, h, s_, n = (float(v) for v in sums.row(0))
        assert (d / n, h / n, s_ / n) == pytest.approx(
            (p["front_gpu_hit_share"], p["front_host_hit_share"],
             p["front_storage_hit_share"]), abs=1e-15)
        # the cluster replay at the answer, stored with its per-request rows
        cid = p["run_ids"][0]
        assert cid == p["cluster_run_id"] and cid.startswith("cluster-")
        run = pstore.query("SELECT * FROM cluster_runs WHERE run_id = $r", {"r": cid})
        assert (run["instances"][0], run["gpu_hit_share"][0], run["p90_ttft_s"][0]) == (
            p["instances"], p["gpu_hit_share"], p["p90_ttft_s"])
        sums = pstore.query(
            "SELECT sum(device_hit_tokens) d, sum(prompt_tokens) n, count(DISTINCT instance) k "
            "FROM cluster_requests WHERE run_id = $r", {"r": cid})
        d, n, k = (float(v) for v in sums.row(0))
        assert d / n == pytest.approx(p["gpu_hit_share"], abs=1e-15) and k <= p["instances"]
    rows = pstore.query("SELECT * FROM plan_runs WHERE plan_id = $p", {"p": small.plan_id})
    assert rows.height == small.searched  # every candidate: evaluated or pruned with a bound
    assert sorted(r for r in rows["rank"].to_list() if r is not None) == list(
        range(1, len(small.plans) + 1))


GOLDEN_SEL_ROWS, GOLDEN_SEL_MISSES = 30720, 307873  # SmolLM2, k = 64, LRU, buffer 128


def test_hisparse_misses_golden_and_exhaustive_same_best(pstore, small) -> None:
    """HiSparse misses are the selection replay's (SmolLM2, LRU, buffer 2k = 128) miss ratio
    carried to k 2048 and the workload's context by the measured scaling fit, with its band;
    the per-row table sums to the run's total; ``exhaustive`` finds the same best."""
    from toolkit.replay.selections import SelectionReplayConfig, replay_selections

    s = replay_selections(pstore, SelectionReplayConfig("smollm2", "lru", 128), progress=False)
    assert (s["rows"], s["misses"]) == (GOLDEN_SEL_ROWS, GOLDEN_SEL_MISSES)
    per_row = pstore.query("SELECT count(*) n, sum(misses) m FROM selection_replay "
                           "WHERE run_id = $r", {"r": s["run_id"]})
    assert per_row.row(0) == (GOLDEN_SEL_ROWS, GOLDEN_SEL_MISSES)
    rows = pstore.query("SELECT DISTINCT hisparse_buffer_tokens b FROM plan_runs WHERE "
                        "plan_id = $p AND b IS NOT NULL", {"p": small.plan_id})
    assert rows["b"].to_list() == [128 * 2048 // 64]
    full = plan(pstore, PlanConfig(selections="smollm2", exhaustive=True, **SMALL),
                progress=False, save=False)
    assert full.evaluated_exactly == full.searched
    assert full.plans[0] == small.plans[0]
    hs = [e for e in full.evaluated if e["candidate"].buffer and e["feasible"]]
    assert hs, "a HiSparse candidate with host DRAM is feasible"
    from toolkit.replay.selection_scaling import scale_misses

    req = pstore.query("SELECT avg(input_tokens) i, avg(output_tokens) o FROM requests "
                       "WHERE trace = 'conv'").row(0)
    seq = pstore.query("SELECT avg(seq_len) FROM selections WHERE trace = 'smollm2'").item()
    want = scale_misses(GOLDEN_SEL_MISSES / s["accesses"], trace_k=64, model_k=2048,
                        buffer_ratio=2.0, context_tokens=seq,
                        target_context_tokens=max(1, round(req[0])) + max(2, round(req[1])) / 2)
    for e in hs:  # the measured scaling fit carries the miss ratio to k 2048, the workload
        assert e["plan"]["hisparse_misses_per_layer"] == pytest.approx(want.rows, rel=1e-12)
        low, high = e["plan"]["hisparse_misses_per_layer_band"]
        assert (low, high) == pytest.approx((want.rows_low, want.rows_high), rel=1e-12)
        assert e["plan"]["run_ids"][1] == s["run_id"]


def test_reduces_to_cost_compare(pstore) -> None:
    """HiSparse and host tiers forbidden: the plan at the front is cost compare's answer for
    the trace's shape at the plan's GPU hit share (its 10 s bound; the cluster replay judges
    the asked bound at the load)."""
    r = plan(pstore, PlanConfig(**{**SMALL, "host_dram_gb": (0.0,), "ssd_gb": (0.0,)}),
             progress=False, save=False)
    p = r.plans[0]
    # the plan at the front of the candidate ranked first (the load may size another layout)
    f = next(ev["plan"] for ev in r.evaluated if (ev.get("load") or {}).get("plan") is p)
    shape = pstore.query("SELECT avg(input_tokens) i, avg(output_tokens) o FROM requests "
                         "WHERE trace = 'conv'")
    isl, osl = round(shape["i"][0]), round(shape["o"][0])
    c = compare(CompareConfig(model="glm-5.2", hardware=("mi355x",), interactivity=(100.0,),
                              isl=isl, osl=osl, cached_prefix_fraction=f["gpu_hit_share"],
                              measured=False)).row(0, named=True)
    assert f["usd_per_mtok_total"] == c["usd_per_mtok_total"]
    assert (f["tput_per_gpu"], f["layout"], f["gpus"], f["p90_ttft_s"]) == (
        c["tput_per_gpu"], c["layout"], c["gpus"], c["p90_ttft_s"])
    assert c["layout"] in [x["layout"] for x in p["layouts_searched"]]
    assert (p["host_hit_share"], p["storage_hit_share"], p["usd_breakdown"]["dram"]) == (
        0.0, 0.0, 0.0)


def test_tighter_targets_never_cheaper(pstore) -> None:
    """A tighter SLO never costs less at the same load (a looser one never costs more)."""
    base = _best(pstore)
    assert _best(pstore, max_p90_ttft_s=1.0) >= base
    assert _best(pstore, max_p90_ttft_s=0.5) >= _best(pstore, max_p90_ttft_s=1.0)
    assert _best(pstore, interactivity=150.0) >= base


@settings(max_examples=4, deadline=None)
@given(dram=st.sets(st.sampled_from([256.0, 512.0, 1024.0]), min_size=1),
       ssd=st.sets(st.sampled_from([4096.0, 16384.0])))
def test_more_memory_never_dearer(pstore, dram, ssd) -> None:
    """Allowing more DRAM or SSD options (a superset) never gives a dearer best plan."""
    narrow = _best(pstore, host_dram_gb=(0.0,), ssd_gb=(0.0,))
    wide = _best(pstore, host_dram_gb=(0.0, *sorted(dram)), ssd_gb=(0.0, *sorted(ssd)))
    assert wide <= narrow


def test_nothing_feasible_names_closest_miss(pstore) -> None:
    with pytest.raises(PlanError, match="closest miss: mi355x"):
        plan(pstore, PlanConfig(**{**SMALL, "interactivity": 5000.0}), progress=False,
             save=False)


def test_python_facade_and_cli(pstore, small) -> None:
    r = toolkit.plan(pstore, "conv", "glm-5.2", "mi355x", host_dram_gb=(0.0,),
                     ssd_gb=(0.0,), users=2, progress=False, save=False)
    assert r.plans[0]["hardware"] == "mi355x"
    runner = CliRunner()
    res = runner.invoke(app, ["plan", "--store", str(pstore.root), "--trace", "conv",
                              "--model", "glm-5.2", "--hardware", "mi355x", "--host-dram-gb",
                              "0,512", "--ssd-gb", "0", "--top", "2", "--users", "2",
                              "--load-candidates", "4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert len(out["plans"]) == 2 and out["plans"][0]["host_dram_gb"] == 512.0
    from toolkit.serving.crossval import dsa_caveat

    assert out["dsa_caveat"] == dsa_caveat()  # a DSA model's plan carries the caveat
    res = runner.invoke(app, ["plan", "explain", "--store", str(pstore.root), "--plan",
                              out["plan_id"], "--json"])
    assert res.exit_code == 0, res.output
    ex = json.loads(res.stdout)
    assert ex["plan"]["rank"] == 1 and ex["alternatives"]["host_dram_gb"]["value"] == 0.0
    assert ex["alternatives"]["host_dram_gb"]["usd_per_mtok_total"] > ex["plan"][
        "usd_per_mtok_total"]
    # for people: one table of alternatives, a dimension without one says so (no "None")
    res = runner.invoke(app, ["plan", "explain", "--store", str(pstore.root), "--plan",
                              out["plan_id"]], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "None" not in res.output, res.output
    rows = {ln.split()[0]: ln.split() for ln in res.output.splitlines()[4:] if ln.strip()}
    assert rows["dimension"][:3] == ["dimension", "chosen", "alternative"]
    assert rows["host_dram_gb"][1:3] == ["512", "0"]
    assert rows["hardware"][1:3] == ["mi355x", "none"]
    res = runner.invoke(app, ["plan", "--store", str(pstore.root), "--trace", "conv",
                              "--model", "glm-5.2", "--hardware", "mi355x", "--host-dram-gb",
                              "0,512", "--ssd-gb", "0", "--top", "2", "--users", "2",
                              "--load-candidates", "4"], env={"COLUMNS": "250"})
    lines = res.output.splitlines()
    assert any(ln.startswith(f"plan {out['plan_id']}: ") for ln in lines), res.output
    ranked = lines.index("ranked plans:")
    head = next(i for i, ln in enumerate(lines) if i > ranked and ln.startswith("─"))
    assert [ln.split()[0] for ln in lines[head + 1:head + 3]] == ["1", "2"]
    res = runner.invoke(app, ["plan", "--store", str(pstore.root), "--trace", "conv",
                              "--model", "glm-5.2", "--hardware", "mi355x",
                              "--interactivity", "5000"])
    assert res.exit_code == 2 and "closest miss" in res.output


def test_report_has_capacity_plan_section(pstore, small) -> None:
    from toolkit.analysis import run_query
    from toolkit.report import build_report

    plans = run_query(pstore, "capacity_plans")
    assert plans.filter(pl.col("plan_id") == small.plan_id)["rank"].to_list() == list(
        range(1, len(small.plans) + 1))
    sec = [s for s in build_report(pstore).sections if s.title == "Capacity plan"]
    assert len(sec) == 1 and [f.stem for f in sec[0].figures] == ["plan_cost", "plan_hits"]
    # the latest plan search of the trace (written last), its best accelerator named
    latest = max(plans["plan_id"].unique().to_list(),
                 key=lambda p: pstore.source_stamp("plan_runs", p)[1])
    best = run_query(pstore, "capacity_plan_best").filter(
        pl.col("plan_id") == latest).sort("usd_per_mtok_total").row(0, named=True)
    assert (f"{best['hardware']} is cheapest at ${best['usd_per_mtok_total']:.4f}/M"
            in sec[0].figures[0].explanation)
    assert sec[0].tables[0][1]["plan_id"].unique().to_list() == [latest]


def test_perfetto_timeline_of_a_plan(pstore, small, tmp_path) -> None:
    """``export perfetto --run PLAN_ID/RANK`` writes the timeline of the tier replay that
    plan was evaluated by: the same file as exporting that run by its own id."""
    from toolkit.export import write_perfetto
    from toolkit.export.perfetto import plan_tier_run

    best = small.plans[0]
    assert plan_tier_run(pstore, f"{small.plan_id}/1") == best["run_ids"][1]
    assert plan_tier_run(pstore, small.plan_id) == best["run_ids"][1]
    assert plan_tier_run(pstore, "no-such-plan") is None
    by_plan = write_perfetto(pstore, f"{small.plan_id}/1", tmp_path / "plan.json")
    by_run = write_perfetto(pstore, best["run_ids"][1], tmp_path / "run.json")
    assert by_plan["events"] == by_run["events"] > 0
    assert json.loads((tmp_path / "plan.json").read_text()) == json.loads(
        (tmp_path / "run.json").read_text())


# -- the HBM split: prefix-cache reserve and Engram rows; parallel evaluation -------------

SPLIT = {**SMALL, "host_dram_gb": (512.0,), "ssd_gb": (0.0,), "top": 2}


def test_prefix_reserve_searched_and_replayed(pstore) -> None:
    """A reserve R caps the tier replay's running requests to (1 - R) of the device pool
    at mean ISL + OSL (SGLang's --max-running-requests) and reports R x the pool as the
    prefix cache; each plan's named replay carries that cap and reproduces its shares;
    the default search finds the exhaustive search's best."""
    from toolkit.plan.pool import prefix_pool

    cfg = PlanConfig(**{**SPLIT, "prefix_reserve": (0.0, 0.5)})
    r = plan(pstore, cfg, progress=False, save=False)
    full = plan(pstore, PlanConfig(**{**SPLIT, "prefix_reserve": (0.0, 0.5),
                                      "exhaustive": True}), progress=False, save=False)
    assert r.searched == full.searched == 2 and full.evaluated_exactly == 2
    assert full.plans[0] == r.plans[0]
    shape = pstore.query("SELECT avg(input_tokens) i, avg(output_tokens) o FROM requests "
                         "WHERE trace = 'conv'")
    isl, osl = round(shape["i"][0]), round(shape["o"][0])
    by = {e["candidate"].reserve: e for e in full.evaluated}
    shared, half = by[0.0]["plan"], by[0.5]["plan"]
    # the pool is the plan's own layout's (a TP4 plan once printed TP8's 3,248,258 tokens:
    # the rounds cycled between TP4 and TP8, and the answer of one met the pool of the other)
    own = prefix_pool(shared["layout"], "mi355x", "glm-5.2").tokens_per_rank
    assert shared["device_pool_layout"].rsplit(" conc ", 1)[0] == \
        shared["layout"].rsplit(" conc ", 1)[0]
    assert (shared["device_prefix_tokens"], shared["max_running"]) == (own, 0)
    assert own in (TP4_POOL_MI355X, TP8_POOL_MI355X)
    pool = prefix_pool(half["device_pool_layout"], "mi355x", "glm-5.2").tokens_per_rank
    assert half["device_prefix_tokens"] == round(0.5 * pool)
    assert half["max_running"] == int(0.5 * pool // (isl + osl))
    tcfg = by[0.5]["tier"]["cfg"]
    assert (tcfg.max_running, tcfg.device_tokens) == (half["max_running"], pool)
    again = run_tiers(pstore, tcfg, save=False).summary
    assert (again["gpu_hit_rate"], again["host_hit_rate"]) == (
        half["gpu_hit_share"], half["host_hit_share"])


def test_reserve_lowers_serving_capacity() -> None:
    """The serving model's batch capacity scales by (1 - R); Engram HBM comes out first."""
    from toolkit.serving.layout import design
    from toolkit.serving.model import max_batch
    from toolkit.serving.scenario import Deployment, _frame

    dep = Deployment("glm-5.2", "gb200")

    def cap(**extra) -> float:
        one = np.ones(1)
        return float(max_batch(design(_frame(dep, 1, one * 4000, one * 500, one * 64,
                                             extra)))[0])

    base = cap()
    assert cap(prefix_reserve_fraction=0.25) == pytest.approx(0.75 * base, rel=1e-12)
    eng = cap(engram_hbm_bytes=10e9)
    assert eng < base
    assert cap(engram_hbm_bytes=10e9, prefix_reserve_fraction=0.5) == pytest.approx(
        0.5 * eng, rel=1e-12)


def test_engram_misses_priced_as_cost_engram() -> None:
    """The serving model's Engram term is ``toolkit cost engram``'s sync fetch: per Engram
    layer, one SM-gather round trip plus each GPU's tokens' missed rows over the link."""
    from toolkit.cost.engram import EngramPlacement, _fetch_s
    from toolkit.serving.layout import design
    from toolkit.serving.model import decode_terms
    from toolkit.serving.predict import levels
    from toolkit.serving.scenario import Deployment, _frame, _params

    dep = Deployment("glm-5.2", "gb200", mtp=False)
    lookups, hit, row_bytes, layers, batch = 16, 0.375, 128, 2, 64
    one = np.ones(1)
    extra = {"engram_miss_bytes": lookups * (1 - hit) * row_bytes, "engram_layers": layers}
    d = design(_frame(dep, 1, one * 4000, one * 2, one * batch, extra))
    t = decode_terms(d, _params(None).row_values(levels(d)), one * batch)
    pl_ = EngramPlacement(get_model("glm-5.2"), get_hardware("gb200"),
                          row_bytes, lookups, (1, 15), hit, 1e9)
    want = layers * _fetch_s(pl_, "dram", batch / 8 * lookups * (1 - hit))
    assert float(t["t_engram_s"][0]) == pytest.approx(want, rel=1e-12)
    d0 = design(_frame(dep, 1, one * 4000, one * 2, one * batch, {}))
    t0 = decode_terms(d0, _params(None).row_values(levels(d0)), one * batch)
    assert float(t["t_step_s"][0] - t0["t_step_s"][0]) == pytest.approx(want, rel=1e-9)


ENGRAM_TEXT = SMOLLM2 / "texts" / "heapq.py.txt"
GOLDEN_ENGRAM_HITS = (53_988, 208_672)  # heapq.py, LRU row cache of 0.0005 GB per GPU (3,906 rows)


@pytest.fixture(scope="module")
def engram_plan(pstore):
    from toolkit.engram.hashing import EngramConfig
    from toolkit.engram.record import record_engram

    record_engram(pstore, "heapq", [ENGRAM_TEXT], EngramConfig())
    return plan(pstore, PlanConfig(**{**SPLIT, "host_dram_gb": (0.0, 512.0),
                                      "engram": "heapq", "engram_hbm_gb": (0.0005, 100.0),
                                      "exhaustive": True, "top": 4}), progress=False)


def test_engram_planned_golden_and_replayed(pstore, engram_plan) -> None:
    """Engram HBM is searched: a row cache (hit ratio from the exact Engram replay, run
    named and stored) over the 200 GB table in host DRAM, or the table whole in HBM (25
    GB/GPU: an option above a GPU's share collapses to it); no host DRAM, no row cache."""
    from toolkit.cost.engram import DEFAULT_TABLE_BYTES, run_engram
    from toolkit.replay.engram import EngramReplayConfig

    assert PlanConfig.__dataclass_fields__["engram_table_gb"].default == (
        DEFAULT_TABLE_BYTES / 1e9)
    assert engram_plan.searched == 4
    evs = {(e["candidate"].host_dram_gb, e["candidate"].engram_gb): e
           for e in engram_plan.evaluated}
    assert set(evs) == {(0.0, 0.0005), (0.0, 25.0), (512.0, 0.0005), (512.0, 25.0)}
    assert not evs[(0.0, 0.0005)]["feasible"]
    assert "the Engram table 200 GB" in evs[(0.0, 0.0005)]["why"]
    cache, whole = evs[(512.0, 0.0005)]["plan"], evs[(512.0, 25.0)]["plan"]
    assert (whole["engram_hbm_gb"], whole["engram_in_hbm"], whole["engram_dram_gb"]) == (
        25.0, True, 0.0)
    assert len(whole["run_ids"]) == 1
    assert (cache["engram_hbm_gb"], cache["engram_in_hbm"], cache["engram_dram_gb"]) == (
        0.0005, False, 200.0)
    eid = cache["run_ids"][-1]
    stored = pstore.query("SELECT * FROM engram_runs WHERE run_id = $r", {"r": eid})
    assert stored.height == 1 and stored["hit_ratio"][0] == cache["engram_hit_ratio"]
    again = run_engram(pstore, EngramReplayConfig("heapq", 0.0005e9, hardware="mi355x",
                                                  model="glm-5.2"), save=False)
    assert again["run_id"] == eid and again["hit_ratio"] == cache["engram_hit_ratio"]
    assert (again["hits"], again["lookups"]) == GOLDEN_ENGRAM_HITS
    # Engram rows shrink the tier replay's device pool by their HBM
    kvb = evs[(512.0, 25.0)]["tier"]["cfg"]
    pool = evs[(512.0, 25.0)]["plan"]["device_pool_tokens"]
    assert kvb.device_tokens == pool
    assert any("Engram" in a for a in engram_plan.assumptions)
    rows = pstore.query("SELECT engram_hbm_gb FROM plan_runs WHERE plan_id = $p",
                        {"p": engram_plan.plan_id})
    assert sorted(rows["engram_hbm_gb"].to_list()) == [0.0005, 0.0005, 25.0, 25.0]


def test_parallel_evaluations_equal_one_process(pstore) -> None:
    """Two local workers evaluate the same candidates (bound order, pruning applied as
    one process would) and give the same plans, counts and rows."""
    cfg = PlanConfig(**{**SMALL, "prefix_reserve": (0.0, 0.5)})
    one = plan(pstore, cfg, progress=False, save=False)
    two = plan(pstore, cfg, progress=False, save=False, executor="local", workers=2)
    assert two.plans == one.plans
    assert (two.searched, two.evaluated_exactly, two.feasible) == (
        one.searched, one.evaluated_exactly, one.feasible)
    assert [(e["candidate"], e.get("why")) for e in two.evaluated] == [
        (e["candidate"], e.get("why")) for e in one.evaluated]
    res = CliRunner().invoke(app, ["plan", "--store", str(pstore.root), "--trace", "conv",
                                   "--model", "glm-5.2", "--hardware", "mi355x",
                                   "--host-dram-gb", "0,512", "--ssd-gb", "0",
                                   "--prefix-reserve", "0", "--workers", "2", "--users",
                                   "2", "--json"])
    assert res.exit_code == 0, res.output
