"""Named SQL over a store's views, shared by the CLI, notebooks, charts and the demo.

Parameters use DuckDB's ``$name`` syntax; a NULL parameter means "all".
"""

from __future__ import annotations

from typing import Any

import polars as pl

from toolkit.store import Store

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
}


def run_query(store: Store, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query; unspecified parameters default to NULL ("all")."""
    try:
        sql = QUERIES[name]
    except KeyError:
        raise KeyError(f"unknown query {name!r}; known: {', '.join(sorted(QUERIES))}") from None
    wanted = {p for p in ("trace",) if f"${p}" in sql}
    args = {p: params.get(p) for p in wanted}
    return store.con.sql(sql, params=args).pl() if args else store.query(sql)
