"""Arrow schemas of every table a store holds, in one place.

Readers build tables against these schemas and the store refuses anything else, so a
column's type and meaning are defined exactly once.
"""

from __future__ import annotations

import pyarrow as pa

#: One row per request of a request timeline (Mooncake, Azure, synthetic sessions).
REQUESTS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),  # 0-based position in the file
        pa.field("arrival_s", pa.float64(), nullable=False),  # seconds since the trace start
        pa.field("input_tokens", pa.int64(), nullable=False),
        pa.field("output_tokens", pa.int64(), nullable=False),
        # tokens per hashed block; null when the format has no hashes
        pa.field("block_tokens", pa.int32(), nullable=True),
        pa.field("block_hashes", pa.list_(pa.int64()), nullable=False),  # chained prefix-block ids
        pa.field("session_id", pa.int64(), nullable=True),
        pa.field("turn", pa.int32(), nullable=True),
    ]
)

#: One row per request timeline: where it came from, and whether it is synthetic.
REQUEST_TRACES = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("format", pa.string(), nullable=False),  # reader or generator name
        pa.field("source", pa.string(), nullable=False),  # file path or generator config
        pa.field("synthetic", pa.bool_(), nullable=False),  # True: generated, never measured
    ]
)

#: Per-request labels some formats carry (BurstGPT's Model and Log Type, Qwen-Bailian's
#: type, the agentic traces' model); join on (trace, request_id) to filter requests by them.
#: Only traces whose format has labels get a file here.
REQUEST_LABELS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("model", pa.string(), nullable=True),  # e.g. "ChatGPT", "GPT-4"
        pa.field("log_type", pa.string(), nullable=True),  # e.g. "Conversation log", "API log"
        pa.field("request_type", pa.string(), nullable=True),  # e.g. "text", "search", "n"
    ]
)

#: A timeline's session identifiers exactly as its file wrote them (BurstGPT's
#: ``Session ID``): ``requests.session_id`` is an int64, which holds plain integers as
#: they are but must number other strings ("007" and "7" are two sessions, "a1b2" no
#: integer at all). One row per session; join on (trace, session_id) to get the string
#: back. Written with the timeline in one transaction; only traces whose file has
#: session ids get a file here, so stores from before this table read as they did.
REQUEST_SESSIONS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("session_id", pa.int64(), nullable=False),  # requests.session_id
        pa.field("session", pa.string(), nullable=False),  # the identifier as written
    ]
)

#: One row per replay run: its frozen config (flattened) plus the run summary.
REPLAY_RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),  # fingerprint of the config
        pa.field("kind", pa.string(), nullable=False),  # "prefix", "selections", ...
        pa.field("trace", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("capacity_blocks", pa.int64(), nullable=True),  # null: unbounded
        pa.field("config_json", pa.string(), nullable=False),
        pa.field("requests", pa.int64(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("block_lookups", pa.int64(), nullable=False),
        pa.field("block_hits", pa.int64(), nullable=False),
        pa.field("block_hit_ratio", pa.float64(), nullable=False),
        pa.field("hit_tokens", pa.int64(), nullable=False),
        pa.field("token_hit_ratio", pa.float64(), nullable=False),
        pa.field("prefix_hit_blocks", pa.int64(), nullable=False),
        pa.field("prefix_hit_tokens", pa.int64(), nullable=False),
        pa.field("prefix_token_hit_ratio", pa.float64(), nullable=False),
        pa.field("evictions", pa.int64(), nullable=False),
        pa.field("elapsed_s", pa.float64(), nullable=False),  # wall time of the kernel + summary
        pa.field("toolkit_version", pa.string(), nullable=False),
    ]
)

#: One row per (request, decode step, layer) of a recorded top-k selection trace.
SELECTIONS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),  # decode step, strictly increasing per layer
        pa.field("layer", pa.int16(), nullable=False),
        pa.field("seq_len", pa.int32(), nullable=False),  # context incl. the new token
        # positions in [0, seq_len); elements declared non-null so Parquet stores no
        # definition levels for them (reading measured ~1.4x faster)
        pa.field("topk", pa.list_(pa.field("element", pa.int32(), nullable=False)),
                 nullable=False),
    ]
)

#: One row per selection trace: what produced it and how to read its lists.
SELECTION_TRACES = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("model", pa.string(), nullable=False),  # e.g. "SmolLM2-135M-Instruct"
        pa.field("k", pa.int32(), nullable=False),  # top-k budget per selection
        pa.field("score", pa.string(), nullable=False),  # "softmax-sum", "relu", "indexer", ...
        pa.field("order", pa.string(), nullable=False),  # "score" or "position"
        pa.field("n_layers", pa.int16(), nullable=False),
        pa.field("synthetic", pa.bool_(), nullable=False),  # True for generated, never measured
        pa.field("source", pa.string(), nullable=False),  # how it was made (command, texts)
    ]
)

#: One row per request of a selection trace.
SELECTION_REQUESTS = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("prompt_tokens", pa.int32(), nullable=False),
        pa.field("source_text", pa.string(), nullable=True),  # file or description of the text
        pa.field("external_id", pa.string(), nullable=True),  # the engine's own request id
    ]
)

#: One row per (request, prompt position, layer) of an engine capture that also returns the
#: prompt's (prefill) queries (SGLang ``indexer_topk``): kept apart from ``selections``,
#: which hold decode steps only. The query at ``position`` sees positions ``0 .. position``.
SELECTION_PREFILL = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("position", pa.int32(), nullable=False),  # query position in the prompt
        pa.field("layer", pa.int16(), nullable=False),
        pa.field("topk", pa.list_(pa.field("element", pa.int32(), nullable=False)),
                 nullable=False),
    ]
)

#: One row per selection replay run (policy x buffer size x mode) with its totals.
SELECTION_RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("trace", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),  # "plain" | "hisparse"
        pa.field("buffer_tokens", pa.int64(), nullable=False),
        pa.field("indexshare", pa.bool_(), nullable=False),
        pa.field("row_bytes", pa.int64(), nullable=False),
        pa.field("model", pa.string()),  # spec behind row_bytes / IndexShare; null = none
        pa.field("initial", pa.string()),  # hisparse start state: "first" | "empty"
        pa.field("kv_dtype", pa.string()),  # MLA row format: "fp8" | "bf16"
        pa.field("rows", pa.int64(), nullable=False),
        pa.field("accesses", pa.int64(), nullable=False),
        pa.field("hits", pa.int64(), nullable=False),
        pa.field("misses", pa.int64(), nullable=False),
        pa.field("miss_ratio", pa.float64(), nullable=False),
        pa.field("evictions", pa.int64(), nullable=False),
        pa.field("bytes_h2d", pa.int64(), nullable=False),
        pa.field("fast_path_rows", pa.int64(), nullable=False),
        pa.field("elapsed_s", pa.float64(), nullable=False),
        pa.field("config_json", pa.string(), nullable=False),
        pa.field("toolkit_version", pa.string(), nullable=False),
    ]
)

#: One row per (run, request, step, layer) of a selection replay.
SELECTION_REPLAY = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("trace", pa.string(), nullable=False),
        pa.field("request_id", pa.int64(), nullable=False),
        pa.field("step", pa.int32(), nullable=False),
        pa.field("layer", pa.int16(), nullable=False),
        pa.field("seq_len", pa.int32(), nullable=False),
        pa.field("accesses", pa.int32(), nullable=False),
        pa.field("hits", pa.int32(), nullable=False),
        pa.field("misses", pa.int32(), nullable=False),
        pa.field("bytes_h2d", pa.int64(), nullable=False),
        pa.field("fast_path", pa.bool_(), nullable=False),  # seq_len <= buffer (hisparse)
    ]
)

#: LRU miss counts for every cache size of one trace (one-pass stack distances).
MISS_CURVES = pa.schema(
    [
        pa.field("trace", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "selections" (plain) | "prefix"
        pa.field("capacity", pa.int64(), nullable=False),  # slots (tokens) or blocks
        pa.field("accesses", pa.int64(), nullable=False),
        pa.field("misses", pa.int64(), nullable=False),
        pa.field("miss_ratio", pa.float64(), nullable=False),
    ]
)

#: Event counters of the tier replay kernel, in the order the kernel fills them.
TIER_COUNTERS = (
    "device_evictions",
    "host_evictions",
    "storage_evictions",
    "host_writes",
    "storage_writes",
    "host_load_pages",
    "storage_load_pages",
    "dropped_pages",
    "host_backup_failures",
    "peak_device_pages",
    "peak_host_pages",
    "oversize_requests",
)

#: One row per tier replay run: the config (flattened + JSON) and the run summary.
TIER_RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("trace", pa.string(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("arrivals", pa.string(), nullable=False),  # trace | scaled:F | from:T | closed
    pa.field("concurrency", pa.int64(), nullable=True),  # closed loop only
    pa.field("policy", pa.string(), nullable=False),
    pa.field("write_policy", pa.string(), nullable=False),
    pa.field("radix_semantics", pa.string(), nullable=True),  # sglang | page
    pa.field("sequential", pa.bool_(), nullable=True),  # one request at a time
    pa.field("page_tokens", pa.int64(), nullable=False),
    pa.field("device_capacity_tokens", pa.int64(), nullable=False),  # -1: unbounded
    pa.field("host_capacity_tokens", pa.int64(), nullable=False),
    pa.field("storage_capacity_tokens", pa.int64(), nullable=False),  # 0: no storage
    pa.field("requests", pa.int64(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("output_tokens", pa.int64(), nullable=False),
    pa.field("device_hit_tokens", pa.int64(), nullable=False),
    pa.field("host_hit_tokens", pa.int64(), nullable=False),
    pa.field("storage_hit_tokens", pa.int64(), nullable=False),
    pa.field("computed_tokens", pa.int64(), nullable=False),
    pa.field("gpu_hit_rate", pa.float64(), nullable=False),
    pa.field("host_hit_rate", pa.float64(), nullable=False),
    pa.field("storage_hit_rate", pa.float64(), nullable=False),
    pa.field("overall_hit_rate", pa.float64(), nullable=False),
    pa.field("p50_ttft_s", pa.float64(), nullable=False),
    pa.field("p90_ttft_s", pa.float64(), nullable=False),
    pa.field("p99_ttft_s", pa.float64(), nullable=False),
    pa.field("p50_tpot_s", pa.float64(), nullable=True),  # null: no request decodes >1 token
    pa.field("p90_tpot_s", pa.float64(), nullable=True),
    pa.field("makespan_s", pa.float64(), nullable=False),
    pa.field("tokens_per_s_per_gpu", pa.float64(), nullable=False),  # input + output
    pa.field("output_tokens_per_s_per_gpu", pa.float64(), nullable=False),
    pa.field("usd_per_gpu_hour", pa.float64(), nullable=False),
    pa.field("usd_per_million_total_tokens", pa.float64(), nullable=True),
    pa.field("usd_per_million_output_tokens", pa.float64(), nullable=True),
    pa.field("host_used_peak_bytes", pa.float64(), nullable=False),
    pa.field("host_used_mean_bytes", pa.float64(), nullable=False),  # time-weighted
    pa.field("device_used_mean_bytes", pa.float64(), nullable=False),
    *[pa.field(c, pa.int64(), nullable=False) for c in TIER_COUNTERS],
    pa.field("elapsed_s", pa.float64(), nullable=False),  # wall time of the kernel
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("toolkit_version", pa.string(), nullable=False),
])

#: One row per (run, request): where its prompt tokens came from and its timeline.
TIER_REQUESTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("trace", pa.string(), nullable=False),
    pa.field("request_id", pa.int64(), nullable=False),
    pa.field("session_id", pa.int64(), nullable=True),
    pa.field("turn", pa.int32(), nullable=True),
    pa.field("arrival_s", pa.float64(), nullable=False),  # when it was sent in this run
    pa.field("admit_s", pa.float64(), nullable=False),
    pa.field("first_token_s", pa.float64(), nullable=False),
    pa.field("finish_s", pa.float64(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("output_tokens", pa.int64(), nullable=False),
    pa.field("device_tokens", pa.int64(), nullable=False),
    pa.field("host_tokens", pa.int64(), nullable=False),
    pa.field("storage_tokens", pa.int64(), nullable=False),
    pa.field("computed_tokens", pa.int64(), nullable=False),
    pa.field("ttft_s", pa.float64(), nullable=False),
    pa.field("tpot_s", pa.float64(), nullable=True),  # null when output_tokens <= 1
    pa.field("running_at_admit", pa.int32(), nullable=False),
    pa.field("host_used_tokens", pa.int64(), nullable=False),
])

#: One row per cluster replay (N instances behind a router; ``toolkit replay cluster``).
#: The first sixteen columns are the issue's interface, in its order.
CLUSTER_RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("instances", pa.int64(), nullable=False),
    pa.field("router", pa.string(), nullable=False),
    pa.field("users", pa.int64(), nullable=True),  # closed-loop users; null: open loop
    pa.field("rate_rps", pa.float64(), nullable=False),  # open: offered; closed: achieved
    pa.field("device_hit_tokens", pa.int64(), nullable=False),
    pa.field("host_hit_tokens", pa.int64(), nullable=False),
    pa.field("storage_hit_tokens", pa.int64(), nullable=False),
    pa.field("gpu_hit_share", pa.float64(), nullable=False),  # of prompt tokens
    pa.field("host_hit_share", pa.float64(), nullable=False),
    pa.field("storage_hit_share", pa.float64(), nullable=False),
    pa.field("p50_ttft_s", pa.float64(), nullable=False),
    pa.field("p90_ttft_s", pa.float64(), nullable=False),
    pa.field("median_tpot_s", pa.float64(), nullable=True),  # null: no request decodes >1
    pa.field("tput_per_gpu", pa.float64(), nullable=False),  # (prompt+output) tok/s/GPU
    pa.field("gpus", pa.int64(), nullable=False),
    pa.field("trace", pa.string(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("engine_semantics", pa.string(), nullable=False),
    pa.field("gpus_per_instance", pa.int64(), nullable=False),
    pa.field("arrivals", pa.string(), nullable=False),  # closed | trace | scaled:F | rate:R
    pa.field("requests", pa.int64(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("output_tokens", pa.int64(), nullable=False),
    pa.field("computed_tokens", pa.int64(), nullable=False),
    pa.field("overall_hit_share", pa.float64(), nullable=False),
    pa.field("p99_ttft_s", pa.float64(), nullable=False),
    pa.field("p90_tpot_s", pa.float64(), nullable=True),
    pa.field("mean_queue_wait_s", pa.float64(), nullable=False),
    pa.field("makespan_s", pa.float64(), nullable=False),
    pa.field("output_tokens_per_s_per_gpu", pa.float64(), nullable=False),
    pa.field("device_capacity_tokens", pa.int64(), nullable=False),  # per instance; -1 unbounded
    pa.field("host_capacity_tokens", pa.int64(), nullable=False),
    pa.field("storage_capacity_tokens", pa.int64(), nullable=False),
    pa.field("page_tokens", pa.int64(), nullable=False),
    pa.field("max_instance_share", pa.float64(), nullable=False),  # busiest instance's requests
    # the deployment: tpN / dpN / pPdD (docs/cluster.md); DP-attention ranks = prefix caches
    # per instance; decode GPUs per instance (0: aggregated)
    pa.field("layout", pa.string(), nullable=True),
    pa.field("ranks_per_instance", pa.int64(), nullable=True),
    pa.field("decode_gpus_per_instance", pa.int64(), nullable=True),
    pa.field("mean_decode_wait_s", pa.float64(), nullable=True),  # prefill end -> decode admit
    pa.field("usd_per_gpu_hour", pa.float64(), nullable=True),
    pa.field("usd_per_hour_total", pa.float64(), nullable=True),
    pa.field("usd_per_million_total_tokens", pa.float64(), nullable=True),
    pa.field("usd_per_million_output_tokens", pa.float64(), nullable=True),
    *[pa.field(c, pa.int64(), nullable=False) for c in TIER_COUNTERS],
    pa.field("elapsed_s", pa.float64(), nullable=False),
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("toolkit_version", pa.string(), nullable=False),
])

#: One row per request of a cluster replay: where the router sent it and what it found.
CLUSTER_REQUESTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("request_id", pa.int64(), nullable=False),
    pa.field("session_id", pa.int64(), nullable=True),
    pa.field("turn", pa.int32(), nullable=True),
    pa.field("instance", pa.int32(), nullable=False),
    pa.field("arrival_s", pa.float64(), nullable=False),
    pa.field("admit_s", pa.float64(), nullable=False),
    pa.field("first_token_s", pa.float64(), nullable=False),
    pa.field("finish_s", pa.float64(), nullable=False),
    pa.field("prompt_tokens", pa.int64(), nullable=False),
    pa.field("output_tokens", pa.int64(), nullable=False),
    pa.field("device_hit_tokens", pa.int64(), nullable=False),
    pa.field("host_hit_tokens", pa.int64(), nullable=False),
    pa.field("storage_hit_tokens", pa.int64(), nullable=False),
    pa.field("computed_tokens", pa.int64(), nullable=False),
    pa.field("queue_wait_s", pa.float64(), nullable=False),  # admit - arrival
    pa.field("ttft_s", pa.float64(), nullable=False),
    pa.field("tpot_s", pa.float64(), nullable=True),  # null when output_tokens <= 1
    pa.field("running_at_admit", pa.int32(), nullable=False),  # on its instance
    pa.field("rank", pa.int32(), nullable=True),  # its prefix cache in the instance (DPA rank)
    pa.field("prefill_end_s", pa.float64(), nullable=True),
    pa.field("decode_instance", pa.int32(), nullable=True),  # null: aggregated
])

#: One row per token position x Engram layer x n-gram order x hash head: the table row read.
ENGRAM_LOOKUPS = pa.schema([
    pa.field("trace", pa.string(), nullable=False),
    pa.field("request_id", pa.int64(), nullable=False),  # index of the text
    pa.field("position", pa.int64(), nullable=False),  # token position in the text
    pa.field("layer", pa.int32(), nullable=False),  # backbone layer id of the Engram module
    pa.field("ngram", pa.int32(), nullable=False),  # N-gram order
    pa.field("head", pa.int32(), nullable=False),
    pa.field("row", pa.int32(), nullable=False),  # row in this (layer, ngram, head) table
])

#: One row per Engram lookup trace: the hashing configuration and what was hashed.
ENGRAM_TRACES = pa.schema([
    pa.field("trace", pa.string(), nullable=False),
    pa.field("sources_json", pa.string(), nullable=False),  # text files, one per request
    pa.field("requests", pa.int64(), nullable=False),
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("lookups", pa.int64(), nullable=False),
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("compressed_vocab", pa.int64(), nullable=False),
    pa.field("backbone_vocab", pa.int64(), nullable=False),
    pa.field("table_rows", pa.int64(), nullable=False),  # lower bound of each prime table
    pa.field("total_rows", pa.int64(), nullable=False),  # all tables of all layers
    pa.field("row_bytes", pa.int64(), nullable=False),
    pa.field("primes_json", pa.string(), nullable=False),  # [layer][order][head]
    pa.field("multipliers_json", pa.string(), nullable=False),  # [layer][k]
    pa.field("pad_compressed", pa.int64(), nullable=False),
    pa.field("synthetic", pa.bool_(), nullable=False),
])

#: One row per Engram replay: cache outcome, reuse, bytes per tier and the priced placement.
ENGRAM_RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("trace", pa.string(), nullable=False),
    pa.field("policy", pa.string(), nullable=False),
    pa.field("backing", pa.string(), nullable=False),  # dram | ssd
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("hbm_cache_bytes", pa.float64(), nullable=False),
    pa.field("capacity_rows", pa.int64(), nullable=False),
    pa.field("row_bytes", pa.int64(), nullable=False),
    pa.field("tokens", pa.int64(), nullable=False),
    pa.field("lookups", pa.int64(), nullable=False),
    pa.field("hits", pa.int64(), nullable=False),
    pa.field("misses", pa.int64(), nullable=False),
    pa.field("hit_ratio", pa.float64(), nullable=False),
    pa.field("distinct_rows", pa.int64(), nullable=False),
    pa.field("hottest_1pct_share", pa.float64(), nullable=False),
    pa.field("hottest_10pct_share", pa.float64(), nullable=False),
    pa.field("hbm_bytes_per_token", pa.float64(), nullable=False),
    pa.field("backing_bytes_per_token", pa.float64(), nullable=False),  # useful row bytes
    pa.field("backing_read_bytes_per_token", pa.float64(), nullable=False),  # incl. SSD block
    pa.field("tokens_per_s_per_gpu_overlapped", pa.float64(), nullable=False),
    pa.field("tokens_per_s_per_gpu_sync", pa.float64(), nullable=False),
    pa.field("tokens_per_usd_overlapped", pa.float64(), nullable=False),
    pa.field("tokens_per_usd_sync", pa.float64(), nullable=False),
    pa.field("tokens_per_usd_hbm", pa.float64(), nullable=False),  # same model, table in HBM
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("elapsed_s", pa.float64(), nullable=False),
])

#: One row per sweep cell (toolkit.sweep): which run answers it, and how it went.
SWEEPS = pa.schema([
    pa.field("sweep_id", pa.string(), nullable=False),  # one per invocation of a sweep
    pa.field("kind", pa.string(), nullable=False),  # selections | prefix | tiers | serving
    pa.field("grid_fingerprint", pa.string(), nullable=False),  # same grid, same value
    pa.field("grid_json", pa.string(), nullable=False),  # the validated grid, canonical JSON
    pa.field("cell", pa.int32(), nullable=False),  # index in the grid's product order
    pa.field("cell_json", pa.string(), nullable=False),  # the cell's config fields
    pa.field("config_fingerprint", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=True),  # null when the cell failed
    pa.field("status", pa.string(), nullable=False),  # done | skipped | failed
    pa.field("error", pa.string(), nullable=True),
    pa.field("seconds", pa.float64(), nullable=False),  # wall time of the cell (0 if skipped)
])

#: One row per (compare run, hardware, interactivity target): ``toolkit cost compare``
#: results stored by a sweep of kind "serving" (modelled, not measured).
COMPARE_RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("engine", pa.string(), nullable=False),
    pa.field("precision", pa.string(), nullable=False),
    pa.field("price_tier", pa.string(), nullable=False),
    pa.field("isl", pa.int64(), nullable=False),
    pa.field("osl", pa.int64(), nullable=False),
    pa.field("cached_prefix_fraction", pa.float64(), nullable=False),
    pa.field("max_p90_ttft_s", pa.float64(), nullable=True),
    pa.field("interactivity", pa.float64(), nullable=False),  # target tok/s/user
    pa.field("clamped", pa.bool_(), nullable=False),  # target below the front's start
    pa.field("reachable", pa.bool_(), nullable=False),  # target within the front (else no price)
    pa.field("edge", pa.bool_(), nullable=False),  # within 15% of the front's end
    pa.field("source", pa.string(), nullable=False),  # measured | model
    pa.field("basis", pa.string(), nullable=False),  # measured | fitted-pair | shared-terms
    pa.field("tput_per_gpu", pa.float64(), nullable=True),  # tok/s/GPU, input + output
    pa.field("tput_per_gpu_low", pa.float64(), nullable=True),
    pa.field("tput_per_gpu_high", pa.float64(), nullable=True),
    pa.field("output_tput_per_gpu", pa.float64(), nullable=True),
    pa.field("p90_ttft_s", pa.float64(), nullable=True),
    pa.field("gpus", pa.int64(), nullable=True),  # GPUs of the front point that meets the target
    pa.field("layout", pa.string(), nullable=True),
    pa.field("usd_per_gpu_hour", pa.float64(), nullable=False),
    pa.field("price_survey", pa.string(), nullable=True),
    pa.field("usd_per_mtok_total", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_total_low", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_total_high", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_output", pa.float64(), nullable=True),
    pa.field("params_kind", pa.string(), nullable=False),  # the serving fit's kind
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("elapsed_s", pa.float64(), nullable=False),
    pa.field("toolkit_version", pa.string(), nullable=False),
])

#: One row per priced selection replay: the serving model's decode step on one hardware at one
#: batch (toolkit.cost.records), so cost figures are rows a report can query like any other run.
DECODE_COSTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),  # fingerprint of the cost config
    pa.field("selection_run_id", pa.string(), nullable=False),
    pa.field("trace", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("batch_per_gpu", pa.int64(), nullable=False),
    pa.field("overlap", pa.bool_(), nullable=False),  # miss I/O overlapped with compute
    pa.field("mechanism", pa.string(), nullable=False),
    pa.field("kv_dtype", pa.string(), nullable=False),
    pa.field("miss_scale", pa.float64(), nullable=False),  # trace misses -> model misses
    # how: the selection-scaling fit's label (an extrapolation, with its range) or a constant
    pa.field("miss_scaling", pa.string()),
    pa.field("isl_tokens", pa.float64(), nullable=False),
    pa.field("osl_tokens", pa.float64(), nullable=False),
    pa.field("price_tier", pa.string(), nullable=False),
    pa.field("p50_tpot_s", pa.float64(), nullable=False),
    pa.field("p90_tpot_s", pa.float64(), nullable=False),
    pa.field("p99_tpot_s", pa.float64(), nullable=False),
    pa.field("mean_tpot_s", pa.float64(), nullable=False),
    pa.field("mean_t_work_s", pa.float64(), nullable=False),  # HBM or compute, per step
    pa.field("mean_t_miss_s", pa.float64(), nullable=False),  # miss transfers, per step
    pa.field("mean_t_miss_exposed_s", pa.float64(), nullable=False),  # what it adds to TPOT
    pa.field("miss_share_of_step", pa.float64(), nullable=False),
    pa.field("prefill_share_of_gpu_time", pa.float64(), nullable=False),
    pa.field("interactivity_tok_s_user", pa.float64(), nullable=False),  # 1 / p50 TPOT
    pa.field("total_tokens_per_s_per_gpu", pa.float64(), nullable=False),
    pa.field("output_tokens_per_s_per_gpu", pa.float64(), nullable=False),
    pa.field("usd_per_gpu_hour", pa.float64(), nullable=False),
    pa.field("usd_per_million_total_tokens", pa.float64(), nullable=False),
    # the fit's band (10-90% held-out residuals) priced the same way; equal without a fit
    pa.field("usd_per_million_total_tokens_low", pa.float64()),
    pa.field("usd_per_million_total_tokens_high", pa.float64()),
    pa.field("usd_per_million_output_tokens", pa.float64(), nullable=False),
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("toolkit_version", pa.string(), nullable=False),
])

#: Modelled Pareto fronts of throughput per GPU vs interactivity, one row per front point
#: (toolkit.cost.records.record_serving_fronts), keyed by the comparison's fingerprint.
SERVING_FRONTS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("precision", pa.string(), nullable=False),
    pa.field("isl", pa.int64(), nullable=False),
    pa.field("osl", pa.int64(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("framework", pa.string(), nullable=False),
    pa.field("layout", pa.string(), nullable=False),
    pa.field("interactivity_tok_s_user", pa.float64(), nullable=False),
    pa.field("tput_per_gpu", pa.float64(), nullable=False),  # tok/s/GPU, input + output
    pa.field("config_json", pa.string(), nullable=False),
])

#: Measured serving points in InferenceX's columns and units (``toolkit ingest points``:
#: InferenceX exports, sglang.bench_serving and vllm bench serve results; docs/ingest.md).
#: Latencies in seconds, throughputs in tokens/s per GPU, interactivity = 1000 / TPOT_ms.
MEASURED_POINTS = pa.schema([
    pa.field("name", pa.string(), nullable=False),  # the ingest name (the key)
    pa.field("source", pa.string(), nullable=False),  # file it was read from
    pa.field("source_format", pa.string(), nullable=False),  # inferencex | sglang-bench | ...
    pa.field("source_row", pa.int64(), nullable=False),  # 1-based row / line in the file
    *[pa.field(c, t, nullable=c not in ("tput_per_gpu", "median_intvty")) for c, t in (
        ("hardware", pa.string()), ("framework", pa.string()), ("model", pa.string()),
        ("precision", pa.string()), ("spec_method", pa.string()), ("disagg", pa.bool_()),
        ("is_multinode", pa.bool_()), ("isl", pa.int64()), ("osl", pa.int64()),
        ("conc", pa.int64()), ("num_prefill_gpu", pa.int64()), ("num_decode_gpu", pa.int64()),
        ("prefill_tp", pa.int64()), ("prefill_ep", pa.int64()),
        ("prefill_dp_attention", pa.bool_()), ("decode_tp", pa.int64()),
        ("decode_ep", pa.int64()), ("decode_dp_attention", pa.bool_()),
        ("date", pa.string()), ("image", pa.string()), ("run_url", pa.string()),
        ("tput_per_gpu", pa.float64()), ("output_tput_per_gpu", pa.float64()),
        ("input_tput_per_gpu", pa.float64()), ("median_intvty", pa.float64()),
        ("p90_intvty", pa.float64()), ("median_tpot", pa.float64()),
        ("median_ttft", pa.float64()), ("p90_ttft", pa.float64()), ("p99_ttft", pa.float64()),
        ("median_e2el", pa.float64()), ("p90_e2el", pa.float64()),
        ("median_itl", pa.float64()), ("avg_power_w", pa.float64()),
        ("joules_per_total_token", pa.float64()), ("joules_per_output_token", pa.float64()))],
])

#: One row per exactly evaluated candidate of a ``toolkit plan`` search (``plan_id`` = the
#: search, ``rank`` 1.. for the printed plans, null for the rest; infeasible candidates say
#: ``why``). Written with the tier and selection replays the rows name, in one transaction.
PLAN_RUNS = pa.schema([
    pa.field("run_id", pa.string(), nullable=False),  # = plan_id: how a sweep finds the run
    pa.field("plan_id", pa.string(), nullable=False),
    pa.field("rank", pa.int64(), nullable=True),
    pa.field("feasible", pa.bool_(), nullable=False),
    pa.field("why", pa.string(), nullable=True),  # why infeasible
    pa.field("trace", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("hardware", pa.string(), nullable=False),
    pa.field("engine", pa.string(), nullable=False),
    pa.field("layout", pa.string(), nullable=True),
    pa.field("gpus", pa.int64(), nullable=True),
    pa.field("concurrency", pa.int64(), nullable=True),  # the deployment's users
    pa.field("users_per_instance", pa.int64(), nullable=True),  # tier replay's users
    pa.field("converged", pa.bool_(), nullable=True),
    pa.field("device_prefix_tokens", pa.int64(), nullable=True),
    pa.field("hisparse_buffer_tokens", pa.int64(), nullable=True),  # model scale; null = off
    pa.field("engram_hbm_gb", pa.float64(), nullable=False),
    pa.field("host_dram_gb", pa.float64(), nullable=False),  # per instance
    pa.field("ssd_gb", pa.float64(), nullable=False),  # per instance
    pa.field("policy", pa.string(), nullable=False),
    pa.field("gpu_hit_share", pa.float64(), nullable=True),  # token-weighted
    pa.field("host_hit_share", pa.float64(), nullable=True),
    pa.field("storage_hit_share", pa.float64(), nullable=True),
    pa.field("hisparse_misses_per_layer", pa.float64(), nullable=True),  # model scale
    pa.field("interactivity", pa.float64(), nullable=False),  # target tok/s/user
    pa.field("max_p90_ttft_s", pa.float64(), nullable=True),
    pa.field("p90_ttft_s", pa.float64(), nullable=True),
    pa.field("tput_per_gpu", pa.float64(), nullable=True),  # tok/s/GPU, input + output
    pa.field("usd_per_mtok_total", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_total_low", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_total_high", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_gpu", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_dram", pa.float64(), nullable=True),
    pa.field("usd_per_mtok_ssd", pa.float64(), nullable=True),
    pa.field("bound_usd_per_mtok", pa.float64(), nullable=True),  # the search's lower bound
    pa.field("price_tier", pa.string(), nullable=False),
    pa.field("run_ids", pa.string(), nullable=False),  # JSON list: tier (+ selection) runs
    pa.field("searched", pa.int64(), nullable=False),
    pa.field("evaluated_exactly", pa.int64(), nullable=False),
    pa.field("elapsed_s", pa.float64(), nullable=False),
    pa.field("assumptions_json", pa.string(), nullable=False),
    pa.field("config_json", pa.string(), nullable=False),
    pa.field("toolkit_version", pa.string(), nullable=False),
    # the load (null for a candidate the instance search did not size): the fewest
    # instances meeting the SLOs in the cluster replay ``cluster_run_id``
    pa.field("instances", pa.int64(), nullable=True),
    pa.field("gpus_total", pa.int64(), nullable=True),
    pa.field("host_dram_gb_total", pa.float64(), nullable=True),
    pa.field("ssd_gb_total", pa.float64(), nullable=True),
    pa.field("users", pa.int64(), nullable=True),  # closed-loop users; null: open loop
    pa.field("rate_rps", pa.float64(), nullable=True),
    pa.field("router", pa.string(), nullable=True),
    pa.field("binding", pa.string(), nullable=True),  # the SLO(s) N - 1 instances miss
    pa.field("usd_per_hour_total", pa.float64(), nullable=True),
    pa.field("cluster_run_id", pa.string(), nullable=True),
    pa.field("load_json", pa.string(), nullable=True),  # the probes: instances, SLOs, runs
])

#: Tables the store knows, by name. A table is a directory of Parquet files, one per key.
TABLES: dict[str, pa.Schema] = {
    "requests": REQUESTS,
    "request_traces": REQUEST_TRACES,
    "request_labels": REQUEST_LABELS,
    "request_sessions": REQUEST_SESSIONS,
    "replay_runs": REPLAY_RUNS,
    "selections": SELECTIONS,
    "selection_traces": SELECTION_TRACES,
    "selection_requests": SELECTION_REQUESTS,
    "selection_prefill": SELECTION_PREFILL,
    "selection_runs": SELECTION_RUNS,
    "selection_replay": SELECTION_REPLAY,
    "miss_curves": MISS_CURVES,
    "tier_runs": TIER_RUNS,
    "tier_requests": TIER_REQUESTS,
    "cluster_runs": CLUSTER_RUNS,
    "cluster_requests": CLUSTER_REQUESTS,
    "engram_lookups": ENGRAM_LOOKUPS,
    "engram_traces": ENGRAM_TRACES,
    "engram_runs": ENGRAM_RUNS,
    "sweeps": SWEEPS,
    "compare_runs": COMPARE_RUNS,
    "decode_costs": DECODE_COSTS,
    "serving_fronts": SERVING_FRONTS,
    "measured_points": MEASURED_POINTS,
    "plan_runs": PLAN_RUNS,
}



def null_refused(column: str, nulls: int) -> ValueError:
    """The error for ``nulls`` nulls in the required ``column`` (one wording for every
    writer: ``conform`` and :mod:`toolkit.store.parquet.row`)."""
    return ValueError(f"column {column!r} has {nulls} null(s) but is not nullable")


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return ``table`` with exactly ``schema``'s columns, order and types.

    Absent nullable columns are added as nulls, so older writers keep working when a
    nullable column is added to a schema.

    Raises:
        ValueError: a non-nullable column is missing or holds nulls, or a column cannot be
            cast safely.
    """
    if table.schema.equals(schema, check_metadata=True):  # built with it: nulls only
        for i, f in enumerate(schema):
            if not f.nullable and (nulls := table.column(i).null_count):
                raise null_refused(f.name, nulls)
        return table
    names = set(table.column_names)  # a list built per lookup was 0.24 ms of a run row
    missing = [f.name for f in schema if f.name not in names and not f.nullable]
    if missing:
        raise ValueError(f"table lacks column(s) {missing}; expected {schema.names}")
    columns = []
    for f in schema:
        if f.name not in names:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(f.name)
        if not f.nullable and col.null_count:
            raise null_refused(f.name, col.null_count)
        # a column of the right type is taken as it is: a per-chunk results table of
        # 4,096 rows spent more in eleven no-op casts than in being written
        columns.append(col if col.type == f.type else col.cast(f.type, safe=True))
    return pa.Table.from_arrays(columns, schema=schema)
