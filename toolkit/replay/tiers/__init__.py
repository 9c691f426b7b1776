"""Prefix tiers under concurrency: a timeline replay of GPU / host / storage page caches.

Two device-tier semantics (``radix_semantics``):

* ``sglang`` (default): SGLang 0.5.23's ``RadixCache`` node for node (page-aligned
  prompts, whole-leaf eviction with its overshoot, the split-node stamp, locking), in
  :mod:`toolkit.replay.tiers.radix`; checked request by request against SGLang's own
  code (``benchmarks/sglang_peer.py``, ``tests/test_tiers_sglang.py``).
* ``page``: the page-granular ideal below, in :mod:`toolkit.replay.tiers.page`.

A second engine (``engine_semantics="vllm"``): vLLM v1's block pool and prefix cache
(full ``block_tokens`` blocks, the free queue's LRU order with a request's tail blocks
freed first, reference counts of running requests), in
:mod:`toolkit.replay.tiers.vllm_blocks`; checked against vLLM's own code
(``benchmarks/vllm_peer.py``, ``tests/test_tiers_vllm.py``). Its host tier, with
``offload_policy`` lru or arc, is vLLM's CPU offloading manager, checked the same way
(``tests/test_tiers_vllm_offload.py``); without one it has none.

All run the one event loop of :mod:`toolkit.replay.tiers.loop`; :mod:`.config` holds the
run's settings (stdlib only), :mod:`.run` turns a trace into arrays and the loop's
output into tables.

``sequential`` replays one request at a time in arrival order (no overlap, no decode
pages, only the current request locked): the regime SGLang's cache can be driven in
offline, hence the one the peer check uses.

HiCache semantics of ``page`` (sglang ``mem_cache/hiradix_cache.py``,
``docs/advanced_features/hicache_design.md``):

* pages of ``page_tokens`` tokens keyed by chained hashes; a page is usable only if its
  whole prefix is (device run, then host run, then storage run, then computed);
* only pages not locked by a running request are evicted, leaves first; device evictions
  demote to host under ``write_through`` (every new page is copied to host at once),
  ``write_through_selective`` (copied once hit ``write_through_threshold`` times) and
  ``write_back`` (copied on eviction); host hits are loaded back to the device;
* the optional storage tier (L3) receives every host copy and is an LRU of pages.

Metrics follow InferenceX: hit rate of a source = tokens from that source /
prompt tokens. Requests are admitted FCFS when their pages fit on the device, so with
unbounded tiers lookups happen in arrival order and the overall hit rate equals
:mod:`toolkit.replay.prefix`'s unbounded ``prefix_token_hit_ratio``. Service-time
assumptions are in :mod:`toolkit.serving.tier_service`; the caller passes them in.
"""

from typing import Any

from toolkit.replay.tiers.config import (
    ROUTERS,
    SEMANTICS,
    UNBOUNDED,
    ClusterReplayConfig,
    DecodePool,
    ServiceAssumptions,
    ServiceTimes,
    TierReplayConfig,
    TierService,
)

# Loaded on first use, so reading the config (e.g. the CLI's defaults) does not load
# numba, NumPy or Arrow.
_RUN = ("SUMMARY_KEYS", "TOKEN_KEYS", "PageStream", "TierReplayResult", "block_stream",
        "capacities", "page_stream", "replay_tiers", "run_kernel", "save_result", "summary_json")
_SCHEMA = ("TIER_REQUESTS", "TIER_RUNS", "CLUSTER_REQUESTS", "CLUSTER_RUNS")
_CLUSTER = ("ClusterReplayResult", "RUN_KEYS", "cluster_json", "replay_cluster",
            "save_cluster", "stream_for")


def __getattr__(name: str) -> Any:
    if name in _RUN:
        from toolkit.replay.tiers import run

        return getattr(run, name)
    if name in _CLUSTER:
        from toolkit.replay.tiers import cluster

        return getattr(cluster, name)
    if name in _SCHEMA:
        from toolkit import schema

        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLUSTER_REQUESTS", "CLUSTER_RUNS", "ROUTERS", "RUN_KEYS", "ClusterReplayConfig", "DecodePool",
    "ClusterReplayResult", "cluster_json", "replay_cluster", "save_cluster", "stream_for",
    "SEMANTICS", "SUMMARY_KEYS", "TIER_REQUESTS", "TIER_RUNS", "TOKEN_KEYS", "UNBOUNDED",
    "PageStream", "ServiceAssumptions", "ServiceTimes", "TierReplayConfig",
    "TierReplayResult", "TierService", "block_stream", "capacities", "page_stream", "replay_tiers",
    "run_kernel", "save_result", "summary_json",
]
