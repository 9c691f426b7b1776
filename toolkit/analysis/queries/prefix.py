"""Prefix-cache queries: the traces' request timelines and the prefix replay runs."""

from __future__ import annotations

from typing import Any

from toolkit.analysis.queries.named import KV_DTYPE, MODEL, TRACE, NamedQuery, model_kv_bytes
from toolkit.store import Store


def _resolve_prefix_capacity(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    """A prefix cache holds whole tokens: MLA rows and indexer keys of every layer."""
    return model_kv_bytes(args, indexer=True)


#: The prefix queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "trace_summary", "One row per request timeline: size, lengths, duration, blocks.",
        """
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
        """, (TRACE,),
        (("trace", "name"), ("requests", "count"), ("input_tokens", "tokens"),
         ("output_tokens", "tokens"), ("mean_input_tokens", "tokens"),
         ("mean_output_tokens", "tokens"), ("duration_s", "s"), ("block_tokens", "tokens"),
         ("block_lookups", "blocks"), ("distinct_blocks", "blocks"))),
    NamedQuery(
        "prefix_runs", "Prefix replay runs, one row per (trace, policy, capacity); "
        "unbounded last.",
        """
        SELECT trace, policy, capacity_blocks,
               requests, block_lookups, block_hits,
               round(block_hit_ratio, 4)                    AS block_hit_ratio,
               round(token_hit_ratio, 4)                    AS token_hit_ratio,
               round(prefix_token_hit_ratio, 4)             AS prefix_token_hit_ratio,
               evictions
        FROM replay_runs
        WHERE kind = 'prefix' AND ($trace IS NULL OR trace = $trace)
        ORDER BY trace, policy, capacity_blocks NULLS LAST
        """, (TRACE,),
        (("trace", "name"), ("policy", "name"), ("capacity_blocks", "blocks; null = unbounded"),
         ("requests", "count"), ("block_lookups", "blocks"), ("block_hits", "blocks"),
         ("block_hit_ratio", "fraction of block lookups"),
         ("token_hit_ratio", "fraction of prompt tokens"),
         ("prefix_token_hit_ratio", "fraction of prompt tokens, leading run only"),
         ("evictions", "blocks"))),
    NamedQuery(
        "prefix_hit_curve", "Hit ratio vs capacity, long form (one row per run and metric), "
        "capacity also in tokens and in GB of the named model's KV.",
        """
        WITH bt AS (SELECT trace, any_value(block_tokens) AS block_tokens
                    FROM requests GROUP BY trace)
        SELECT u.trace, policy, capacity_blocks, $model AS kv_model,
               capacity_blocks * bt.block_tokens                       AS capacity_tokens,
               capacity_blocks * bt.block_tokens * $kv_bytes_per_token / 1e9 AS capacity_gb,
               metric, ratio
        FROM replay_runs
        UNPIVOT (ratio FOR metric IN (block_hit_ratio, token_hit_ratio)) u
        LEFT JOIN bt USING (trace)
        WHERE kind = 'prefix' AND ($trace IS NULL OR u.trace = $trace)
        ORDER BY u.trace, policy, metric, capacity_blocks NULLS LAST
        """, (TRACE, MODEL, KV_DTYPE),
        (("trace", "name"), ("policy", "name"), ("capacity_blocks", "blocks; null = unbounded"),
         ("kv_model", "model of the GB conversion"), ("capacity_tokens", "tokens"),
         ("capacity_gb", "GB (1e9 B) of KV: MLA rows + indexer keys, all layers"),
         ("metric", "block_hit_ratio | token_hit_ratio"), ("ratio", "fraction")),
        resolve=_resolve_prefix_capacity),
)
