"""Shared fixtures: the bundled real traces and fresh stores."""

from __future__ import annotations

from pathlib import Path

import pytest

import toolkit
from toolkit.ingest import ingest_file

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
AZURE = ROOT / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"


@pytest.fixture
def store(tmp_path: Path):
    with toolkit.open_store(tmp_path / "store", create=True) as s:
        yield s


@pytest.fixture(scope="session")
def mooncake_store(tmp_path_factory: pytest.TempPathFactory):
    """A store holding the Mooncake conversation trace as ``conv`` (read-only use)."""
    root = tmp_path_factory.mktemp("mooncake") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "mooncake", MOONCAKE, "conv")
        yield s


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under a store except staging leftovers, with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".staging" not in p.parts
    }


from tests.analysis_store import analysis_store  # noqa: E402, F401  (session fixture)
