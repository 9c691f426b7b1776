"""The prefix pool a plan replays is its layout's (``toolkit.plan.pool``): TP4 holds less
than TP8, and data-parallel attention gives one cache per rank. Figures are recomputed here
from the hardware and model specs (HBM, weights, KV bytes), not read from the pool code."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolkit
from toolkit.cost.compare import _layout_text, _layouts
from toolkit.hardware import get_hardware
from toolkit.ingest import ingest_file
from toolkit.models import get_model
from toolkit.plan.config import PlanConfig
from toolkit.plan.pool import LayoutError, parse_layout, prefix_pool
from toolkit.plan.search import plan

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"


def _tokens(hw: str, per_gpu_weights: float) -> int:
    """One GPU's KV pool in tokens: HBM usable x 0.9 less its weights, over GLM-5.2's FP8
    MLA row + indexer key per token (53,940 B)."""
    return int((get_hardware(hw).hbm_usable_bytes * 0.9 - per_gpu_weights) // 53_940)


def test_pool_per_layout_from_the_specs() -> None:
    m = get_model("glm-5.2")
    dense, routed = m.dense_params * 1.0, m.routed_expert_params * 1.0  # FP8: 1 B/param
    assert dense + routed == m.weight_bytes("fp8")
    tp4 = prefix_pool("TP4 EP1+MTP conc 2", "mi355x", "glm-5.2")
    tp8 = prefix_pool("TP8 EP8 conc 16", "mi355x", "glm-5.2")
    # the figures: a TP4 instance holds 1,524,121 tokens, TP8 3,248,258
    assert (tp4.ranks, tp4.tokens_per_rank) == (1, 1_524_121) == (1, _tokens("mi355x",
                                                                             (dense + routed) / 4))
    assert (tp8.ranks, tp8.tokens_per_rank) == (1, 3_248_258)
    # DPA: attention and dense layers replicated on each rank, experts sharded; 8 caches
    dpa = prefix_pool("TP8 EP8 DPA conc 64", "mi355x", "glm-5.2")
    assert dpa.ranks == 8 and dpa.tokens_per_rank == _tokens("mi355x", dense + routed / 8)
    assert dpa.tokens_per_rank < tp8.tokens_per_rank and dpa.total_tokens > tp8.total_tokens
    # disaggregated: the prefill instance holds the cache (24 DPA ranks on GB200)
    dis = prefix_pool("disagg P24/D16 decode TP16 EP16 DPA+MTP conc 128", "gb200", "glm-5.2")
    assert dis.ranks == 24 and dis.tokens_per_rank == _tokens("gb200", dense + routed / 24)
    assert dis.users_per_rank(128) == 5 and tp4.users_per_rank(2) == 2
    # Engram rows come out of every GPU's pool
    eng = prefix_pool("TP4 EP1", "mi355x", "glm-5.2", engram_hbm_bytes=25e9)
    assert eng.tokens_per_rank == _tokens("mi355x", (dense + routed) / 4 + 25e9)


def test_every_compare_layout_parses() -> None:
    for hw, engine in (("gb200", "dynamo-sglang"), ("gb300", "dynamo-trt"), ("mi355x", "atom"),
                       ("b200", "sglang")):
        for lay in _layouts(hw, engine, 8):
            for mtp in ("none", "mtp"):
                text = _layout_text({**lay, "spec_method": mtp, "conc": 32})
                p = parse_layout(text)
                assert p.disagg == lay["disagg"] and p.text == text
                if lay["disagg"]:
                    assert p.gpus == lay["num_prefill_gpu"] + lay["num_decode_gpu"]
                    assert (p.cache_gpus, p.cache_dp_attention) == (lay["num_prefill_gpu"], True)
                else:
                    assert p.gpus == p.cache_gpus == lay["decode_tp"]
                    assert p.cache_dp_attention == lay["decode_dp_attention"]
    with pytest.raises(LayoutError, match="not a cost compare layout"):
        parse_layout("PP2 TP4")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pool") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
        yield s


def test_plan_replays_its_layouts_pool(store) -> None:
    """An MI355X plan that runs TP4 replays a TP4 instance's pool (it replayed TP8's, 3.2M
    tokens, before); a GB200 disaggregated plan replays one of its prefill side's DPA ranks."""
    for hw in ("mi355x", "gb200"):
        r = plan(store, PlanConfig(trace="conv", model="glm-5.2", hardware=(hw,),
                                   host_dram_gb=(0.0,), ssd_gb=(0.0,), prefix_reserve=(0.0,),
                                   top=1, users=8, load_candidates=1),
                 progress=False, save=False)
        p = r.evaluated[0]["plan"]  # the plan at the front (the tier replay's figures)
        q = r.plans[0]  # at the load: the layout the instance search chose among the front's
        assert p["layout"] in [x["layout"] for x in q["layouts_searched"]]
        own = prefix_pool(q["layout"], hw, "glm-5.2")  # each layout replays its own pool
        assert (q["device_pool_tokens"], q["device_pool_ranks"], q["device_pool_layout"]) == (
            own.tokens_per_rank, own.ranks, q["layout"])
        assert q["gpus_total"] == q["instances"] * q["gpus"] == q["instances"] * own.layout.gpus
        pool = prefix_pool(p["device_pool_layout"], hw, "glm-5.2")
        assert p["converged"] and p["device_pool_layout"] == p["layout"]
        assert p["device_pool_tokens"] == p["device_prefix_tokens"] == pool.tokens_per_rank
        assert p["device_pool_ranks"] == pool.ranks
        assert p["users_per_instance"] == pool.users_per_rank(p["concurrency"])
        tcfg = r.evaluated[0]["tier"]["cfg"]
        assert (tcfg.device_tokens, tcfg.concurrency) == (pool.tokens_per_rank,
                                                          p["users_per_instance"])
        if hw == "mi355x":  # a TP4 front point replays TP4's pool, TP8's TP8's
            want = {"TP4 EP1": 1_524_121, "TP8 EP1": 3_248_258}
            assert p["device_pool_tokens"] == want[" ".join(p["layout"].split()[:2]).split("+")[0]]
        else:
            # one cache per DPA rank of the prefill side: its GPU count
            prefill_gpus = int(p["layout"].split()[1].split("/")[0].lstrip("P"))
            assert p["layout"].startswith("disagg P") and p["device_pool_ranks"] == prefill_gpus
