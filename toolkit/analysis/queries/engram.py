"""Engram queries: row-cache hit curves, bytes per token by tier, tokens per dollar."""

from __future__ import annotations

from toolkit.analysis.queries.named import TRACE, NamedQuery, Param

#: The engram queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "engram_hit_curve", "Engram row-cache hit ratio against HBM cache size: the one-pass "
        "LRU curve (miss_curves, every $step rows) and the replayed policies (engram_runs).",
        """
        WITH rb AS (SELECT trace, row_bytes FROM engram_traces),
        top AS (SELECT trace, max(capacity) AS cap FROM miss_curves WHERE kind = 'engram'
                GROUP BY trace),
        curve AS (
            SELECT m.trace, 'lru (one pass)' AS policy, 'curve' AS source,
                   m.capacity * rb.row_bytes / 1e6 AS cache_mb, 1 - m.miss_ratio AS hit_ratio
            FROM miss_curves m JOIN rb USING (trace) JOIN top USING (trace)
            WHERE m.kind = 'engram' AND m.capacity > 0
              AND (m.capacity % $step = 0 OR m.capacity = top.cap)),
        runs AS (
            SELECT trace, policy, 'replay', hbm_cache_bytes / 1e6, hit_ratio FROM engram_runs
            WHERE backing = 'dram' AND hardware = $hardware)
        SELECT * FROM (SELECT * FROM curve UNION ALL SELECT * FROM runs)
        WHERE $trace IS NULL OR trace = $trace
        ORDER BY trace, source, policy, cache_mb
        """,
        (TRACE, Param("step", 500, "keep every step-th capacity of the one-pass curve"),
         Param("hardware", "gb200", "hardware of the replays shown")),
        (("trace", "name"), ("policy", "name"), ("source", "curve | replay"),
         ("cache_mb", "MB (1e6 B) of HBM row cache"), ("hit_ratio", "fraction"))),
    NamedQuery(
        "engram_bytes_per_token", "Bytes each token reads from HBM and from the backing tier "
        "(useful row bytes, and bytes actually read incl. SSD block granularity).",
        """
        SELECT e.trace, e.backing, e.hbm_cache_bytes / 1e6 AS cache_mb, e.hit_ratio,
               t.tier, t.tier_rank, t.bytes_per_token
        FROM engram_runs e, (VALUES ('HBM', 1, e.hbm_bytes_per_token),
                                    ('backing, useful', 2, e.backing_bytes_per_token),
                                    ('backing, read', 3, e.backing_read_bytes_per_token))
                            t(tier, tier_rank, bytes_per_token)
        WHERE e.policy = $policy AND e.hardware = $hardware
          AND ($trace IS NULL OR e.trace = $trace)
        ORDER BY e.trace, e.backing, cache_mb, t.tier_rank
        """,
        (TRACE, Param("policy", "lru", "replay policy"),
         Param("hardware", "gb200", "hardware")),
        (("trace", "name"), ("backing", "dram | ssd"), ("cache_mb", "MB of HBM row cache"),
         ("hit_ratio", "fraction"), ("tier", "HBM | backing, useful | backing, read"),
         ("tier_rank", "display order"), ("bytes_per_token", "bytes"))),
    NamedQuery(
        "engram_tokens_per_usd", "Tokens per dollar with the Engram table in HBM, or in DRAM "
        "/ on SSD behind an HBM row cache of $cache_bytes, fetches synchronous or overlapped.",
        """
        WITH r AS (SELECT * FROM engram_runs WHERE policy = $policy
                     AND hbm_cache_bytes = $cache_bytes AND ($trace IS NULL OR trace = $trace))
        SELECT hardware, 'hbm' AS placement, 'none' AS fetch_mode,
               any_value(tokens_per_usd_hbm) / 1e6 AS m_tokens_per_usd
          FROM r GROUP BY hardware
        UNION ALL
        SELECT hardware, backing, 'overlapped', tokens_per_usd_overlapped / 1e6 FROM r
        UNION ALL
        SELECT hardware, backing, 'sync', tokens_per_usd_sync / 1e6 FROM r
        ORDER BY hardware, placement, fetch_mode
        """,
        (TRACE, Param("policy", "lru", "replay policy"),
         Param("cache_bytes", 1e7, "HBM row cache (bytes)")),
        (("hardware", "name"), ("placement", "hbm | dram | ssd"),
         ("fetch_mode", "none | sync | overlapped"), ("m_tokens_per_usd", "M tokens per $"))),
)
