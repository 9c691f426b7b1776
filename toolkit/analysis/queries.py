"""Named SQL over a store's views, shared by the CLI, notebooks, charts and the demo.

Parameters use DuckDB's ``$name`` syntax; a NULL parameter means "all".
"""

from __future__ import annotations

from typing import Any

import polars as pl

from toolkit.store import Store

_CDF_FRACTIONS = ", ".join(f"{i / 100:.2f}" for i in range(0, 101))

QUERIES: dict[str, str] = {
    # One row per request timeline: size, lengths, duration and distinct blocks.
    "trace_summary": """
        SELECT trace,
               count(*)                                     AS requests,
               sum(input_tokens)::BIGINT                    AS input_tokens,
               sum(output_tokens)::BIGINT                   AS output_tokens,
               round(avg(input_tokens), 1)                  AS mean_input_tokens,
               round(avg(output_tokens), 1)                 AS mean_output_tokens,
               round(max(arrival_s), 3)                     AS duration_s,
               any_value(block_tokens)                      AS block_tokens,
               sum(len(block_hashes))::BIGINT               AS block_lookups,
               (SELECT count(DISTINCT h) FROM (
                    SELECT unnest(r2.block_hashes) AS h FROM requests r2
                    WHERE r2.trace = r.trace))              AS distinct_blocks
        FROM requests r
        WHERE $trace IS NULL OR trace = $trace
        GROUP BY trace
        ORDER BY trace
    """,
    # Prefix replay runs, one row per (trace, policy, capacity); unbounded last.
    "prefix_runs": """
        SELECT trace, policy, capacity_blocks,
               requests, block_lookups, block_hits,
               round(block_hit_ratio, 4)                    AS block_hit_ratio,
               round(token_hit_ratio, 4)                    AS token_hit_ratio,
               round(prefix_token_hit_ratio, 4)             AS prefix_token_hit_ratio,
               evictions
        FROM replay_runs
        WHERE kind = 'prefix' AND ($trace IS NULL OR trace = $trace)
        ORDER BY trace, policy, capacity_blocks NULLS LAST
    """,
    # Long form of the hit-ratio curve for charts: one row per (run, metric).
    "prefix_hit_curve": """
        SELECT trace, policy, capacity_blocks, metric, ratio
        FROM replay_runs
        UNPIVOT (ratio FOR metric IN (block_hit_ratio, token_hit_ratio))
        WHERE kind = 'prefix' AND ($trace IS NULL OR trace = $trace)
        ORDER BY trace, policy, metric, capacity_blocks NULLS LAST
    """,
    # Where selections fall, per trace and layer: recency window W, sinks S, position 0.
    "selection_position_mix": """
        WITH rows AS (
            SELECT trace, layer, seq_len, topk FROM selections
            WHERE ($trace IS NULL OR trace = $trace)
        ), flat AS (SELECT trace, layer, seq_len, unnest(topk) AS pos FROM rows)
        SELECT f.trace, f.layer,
               count(*)                                            AS selected,
               avg((f.pos >= f.seq_len - $window)::DOUBLE)         AS frac_recent,
               avg((f.pos < $sinks)::DOUBLE)                       AS frac_sinks,
               any_value(p0.pos0_rate)                             AS pos0_rate
        FROM flat f JOIN (
            SELECT trace, layer, avg(list_contains(topk, 0)::DOUBLE) AS pos0_rate
            FROM rows GROUP BY ALL) p0 USING (trace, layer)
        GROUP BY f.trace, f.layer ORDER BY f.trace, f.layer
    """,
    # Overlap of layer l with layer l+1 at the same (request, step).
    "selection_layer_overlap": """
        WITH s AS (SELECT * FROM selections WHERE ($trace IS NULL OR trace = $trace)),
        pairs AS (
            SELECT a.trace, a.layer, len(list_intersect(a.topk, b.topk)) AS inter,
                   len(a.topk) AS na, len(b.topk) AS nb, t.k
            FROM s a JOIN s b ON a.trace = b.trace AND a.request_id = b.request_id
                 AND a.step = b.step AND b.layer = a.layer + 1
            JOIN selection_traces t ON t.trace = a.trace)
        SELECT trace, layer, count(*) AS pairs,
               avg(inter / (na + nb - inter)::DOUBLE)  AS jaccard,
               avg(inter / k::DOUBLE)                  AS overlap_of_k
        FROM pairs GROUP BY ALL ORDER BY trace, layer
    """,
    # Overlap of a step with the next recorded step, same (request, layer).
    "selection_step_overlap": """
        WITH s AS (
            SELECT trace, request_id, layer, step, topk,
                   lag(topk) OVER (PARTITION BY trace, request_id, layer ORDER BY step) AS prev
            FROM selections WHERE ($trace IS NULL OR trace = $trace)),
        pairs AS (
            SELECT s.trace, layer, len(list_intersect(topk, prev)) AS inter,
                   len(topk) AS na, len(prev) AS nb, t.k
            FROM s JOIN selection_traces t USING (trace) WHERE prev IS NOT NULL)
        SELECT trace, layer, count(*) AS pairs,
               avg(inter / (na + nb - inter)::DOUBLE)  AS jaccard,
               avg(inter / k::DOUBLE)                  AS overlap_of_k
        FROM pairs GROUP BY ALL ORDER BY trace, layer
    """,
    # Step x position heat map of one (request, layer): selections per position bin.
    "selection_heatmap": """
        SELECT step, (pos // $bin) * $bin AS position_bin, count(*) AS selected
        FROM (SELECT step, unnest(topk) AS pos FROM selections
              WHERE trace = $trace AND layer = $layer AND request_id = $request)
        GROUP BY ALL ORDER BY step, position_bin
    """,
    # Misses per decode step (summed over layers and requests) for each selection run.
    "selection_misses_per_step": """
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, s.step,
               sum(s.misses)::BIGINT AS misses, sum(s.bytes_h2d)::BIGINT AS bytes_h2d
        FROM selection_replay s JOIN selection_runs r USING (run_id)
        WHERE ($trace IS NULL OR r.trace = $trace)
        GROUP BY ALL ORDER BY r.policy, r.buffer_tokens, s.step
    """,
    # Selection replay runs, one row per (trace, mode, policy, buffer, IndexShare).
    "selection_runs": """
        SELECT trace, mode, policy, buffer_tokens, indexshare, accesses, hits, misses,
               round(miss_ratio, 4) AS miss_ratio, bytes_h2d
        FROM selection_runs WHERE ($trace IS NULL OR trace = $trace)
        ORDER BY trace, mode, policy, buffer_tokens, indexshare
    """,
    # Long form: one row per (run, source) with the share of prompt tokens.
    "tier_shares": """
        SELECT run_id, trace, hardware, concurrency, device_capacity_tokens, source, rate
        FROM tier_runs
        UNPIVOT (rate FOR source IN (gpu_hit_rate, host_hit_rate, storage_hit_rate))
        ORDER BY trace, hardware, device_capacity_tokens, concurrency, source
    """,
    # TTFT CDF per run at 101 fixed fractions (charts need a few hundred rows, not one
    # per request).
    "tier_ttft_cdf": f"""
        WITH q AS (
            SELECT run_id, quantile_cont(ttft_s, [{_CDF_FRACTIONS}]) AS qs
            FROM tier_requests GROUP BY run_id)
        SELECT q.run_id, t.hardware, t.concurrency, t.device_capacity_tokens,
               unnest([{_CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS ttft_s
        FROM q JOIN tier_runs t USING (run_id)
        ORDER BY q.run_id, fraction
    """,
    # $/M tokens per run (InferenceX arithmetic on the replay's throughput).
    "tier_cost": """
        SELECT run_id, hardware, concurrency, device_capacity_tokens,
               round(overall_hit_rate, 4) AS overall_hit_rate,
               round(tokens_per_s_per_gpu, 1) AS tokens_per_s_per_gpu,
               usd_per_gpu_hour,
               round(usd_per_million_total_tokens, 4) AS usd_per_m_total,
               round(usd_per_million_output_tokens, 3) AS usd_per_m_output,
               round(p90_ttft_s, 3) AS p90_ttft_s
        FROM tier_runs ORDER BY hardware, concurrency
    """,
}

#: Parameter defaults; ``None`` means "all" for filters.
DEFAULTS: dict[str, Any] = {
    "trace": None, "window": 128, "sinks": 4, "layer": 0, "request": 0, "bin": 64,
}


def run_query(store: Store, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query; unspecified parameters take :data:`DEFAULTS`."""
    try:
        sql = QUERIES[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(sorted(QUERIES))}") from None
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise KeyError(f"unknown parameter(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    args = {p: params.get(p, d) for p, d in DEFAULTS.items() if f"${p}" in sql}
    return store.con.sql(sql, params=args).pl() if args else store.query(sql)
