"""``toolkit warm-up``'s tier item runs every tier engine the demo does not."""

from pathlib import Path

from toolkit.commands.warmup import _TASK_FUNCTIONS, TASKS
from toolkit.store import open_store

ROOT = Path(__file__).resolve().parents[1]


def test_every_task_has_a_function():
    assert set(TASKS) == set(_TASK_FUNCTIONS)


def test_tiers_item_replays_vllm_and_page_semantics(tmp_path):
    """vLLM (offload none, lru, arc) and page-granular SGLang, each open, closed and
    sequential: twelve saved runs, so a first CLI replay of either engine finds them compiled."""
    _TASK_FUNCTIONS["tiers"](tmp_path, ROOT / "traces")
    with open_store(tmp_path / "store") as store:
        runs = store.query(
            "SELECT json_extract_string(config_json, '$.engine_semantics') AS engine, "
            "json_extract_string(config_json, '$.offload_policy') AS offload, "
            "radix_semantics, count(DISTINCT (sequential, concurrency)) AS loops "
            "FROM tier_runs GROUP BY ALL ORDER BY ALL").rows()
    assert runs == [("sglang", "none", "page", 3), ("vllm", "arc", "sglang", 3),
                    ("vllm", "lru", "sglang", 3), ("vllm", "none", "sglang", 3)]
