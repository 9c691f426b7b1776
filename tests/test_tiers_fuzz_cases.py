"""Random traces answered by the engines' own cache code (``benchmarks/engine_fuzz.py
--fixture``): vLLM 0.33.0's KVCacheManager and SGLang 0.5.23's RadixCache. The sequential
tier replay must give each request the engine's GPU hit tokens; the full harness (thousands
of cases) runs outside the suite, in the engines' venvs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from engine_fuzz import toolkit_hits  # noqa: E402


@pytest.mark.parametrize(("engine", "version"), [("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_random_traces_equal_engine(store, engine, version):
    """150 random traces per engine (shared prefixes, branching, partial blocks, arrival
    ties, pools near the working set): 0 requests differ from the engine's answers."""
    fx = json.loads((DATA / f"engine_fuzz_{engine}.json").read_text())
    assert fx["engine"] == engine and fx["version"] == version
    assert len(fx["cases"]) == 150
    bad = [k for k, case in enumerate(fx["cases"])
           if toolkit_hits(store, case, engine) != fx["engine_hits"][k]]
    assert bad == []
    assert sum(map(sum, fx["engine_hits"])) > 0  # the traces do hit


def test_random_traces_equal_vllm_offload(store):
    """150 random traces answered by vLLM 0.33.0's KVCacheManager plus its
    CPUOffloadingManager (LRU or ARC, CPU tier near the working set): every request's GPU
    and CPU hit tokens equal the engine's."""
    fx = json.loads((DATA / "engine_fuzz_vllm-offload.json").read_text())
    assert fx["engine"] == "vllm-offload" and fx["version"] == "0.33.0"
    assert len(fx["cases"]) == 150
    assert {c["policy"] for c in fx["cases"]} == {"lru", "arc"}
    bad = [k for k, case in enumerate(fx["cases"])
           if toolkit_hits(store, case, "vllm-offload") != fx["engine_hits"][k]]
    assert bad == []
    assert sum(b for hits in fx["engine_hits"] for _, b in hits) > 0  # the CPU tier hits
