"""Tier replay queries: where prompt tokens came from, TTFT, and $/M tokens per run."""

from __future__ import annotations

from toolkit.analysis.queries.named import CDF_FRACTIONS, HW_FILTER, TRACE, NamedQuery

#: The tiers queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "tier_shares", "Long form of tier replays: one row per (run, source) with the "
        "share of prompt tokens.",
        """
        SELECT run_id, trace, hardware, concurrency, device_capacity_tokens, source, rate
        FROM tier_runs
        UNPIVOT (rate FOR source IN (gpu_hit_rate, host_hit_rate, storage_hit_rate))
        ORDER BY trace, hardware, device_capacity_tokens, concurrency, source
        """, (),
        (("run_id", "tier run"), ("trace", "name"), ("hardware", "name"),
         ("concurrency", "users; null = trace arrivals"),
         ("device_capacity_tokens", "tokens"),
         ("source", "gpu_hit_rate | host_hit_rate | storage_hit_rate"),
         ("rate", "fraction of prompt tokens"))),
    NamedQuery(
        "tier_reuse", "Where each tier replay's prompt tokens came from (GPU, host, storage "
        "or recomputed), one row per (run, source); shares of a run sum to 1.",
        """
        WITH r AS (SELECT * FROM tier_runs
                   WHERE ($trace IS NULL OR trace = $trace)
                     AND ($hardware IS NULL OR hardware = $hardware))
        SELECT run_id, trace, hardware, model, arrivals, concurrency, device_capacity_tokens,
               host_capacity_tokens, storage_capacity_tokens, policy, write_policy,
               radix_semantics, prompt_tokens, s.source, s.source_rank, s.tokens,
               s.tokens / prompt_tokens::DOUBLE AS share
        FROM r, (VALUES ('GPU (L1)', 1, r.device_hit_tokens),
                        ('host (L2)', 2, r.host_hit_tokens),
                        ('storage (L3)', 3, r.storage_hit_tokens),
                        ('recomputed', 4, r.computed_tokens)) s(source, source_rank, tokens)
        ORDER BY trace, hardware, device_capacity_tokens, concurrency NULLS FIRST, run_id,
                 source_rank
        """, (TRACE, HW_FILTER),
        (("run_id", "tier run"), ("trace", "name"), ("hardware", "name"), ("model", "name"),
         ("arrivals", "trace | scaled:F | from:T | closed"),
         ("concurrency", "users; null = open loop"), ("device_capacity_tokens", "tokens"),
         ("host_capacity_tokens", "tokens"), ("storage_capacity_tokens", "tokens"),
         ("policy", "eviction"), ("write_policy", "host write policy"),
         ("radix_semantics", "sglang | page"), ("prompt_tokens", "tokens"),
         ("source", "GPU (L1) | host (L2) | storage (L3) | recomputed"),
         ("source_rank", "1-4, stacking order"), ("tokens", "prompt tokens"),
         ("share", "fraction of prompt tokens"))),
    NamedQuery(
        "tier_ttft_cdf", "TTFT CDF per tier run at 101 fixed fractions.",
        f"""
        WITH q AS (
            SELECT run_id, quantile_cont(ttft_s, [{CDF_FRACTIONS}]) AS qs
            FROM tier_requests GROUP BY run_id)
        SELECT q.run_id, t.hardware, t.concurrency, t.device_capacity_tokens,
               unnest([{CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS ttft_s
        FROM q JOIN tier_runs t USING (run_id)
        ORDER BY q.run_id, fraction
        """, (),
        (("run_id", "tier run"), ("hardware", "name"), ("concurrency", "users"),
         ("device_capacity_tokens", "tokens"), ("fraction", "of requests"), ("ttft_s", "s"))),
    NamedQuery(
        "tier_cost", "$/M tokens per tier run (InferenceX arithmetic on the replay's "
        "throughput).",
        """
        SELECT run_id, hardware, concurrency, device_capacity_tokens,
               round(overall_hit_rate, 4) AS overall_hit_rate,
               round(tokens_per_s_per_gpu, 1) AS tokens_per_s_per_gpu,
               usd_per_gpu_hour,
               round(usd_per_million_total_tokens, 4) AS usd_per_m_total,
               round(usd_per_million_output_tokens, 3) AS usd_per_m_output,
               round(p90_ttft_s, 3) AS p90_ttft_s
        FROM tier_runs ORDER BY hardware, concurrency
        """, (),
        (("run_id", "tier run"), ("hardware", "name"), ("concurrency", "users"),
         ("device_capacity_tokens", "tokens"), ("overall_hit_rate", "fraction"),
         ("tokens_per_s_per_gpu", "tok/s/GPU, input + output"),
         ("usd_per_gpu_hour", "$"), ("usd_per_m_total", "$ per M total tokens"),
         ("usd_per_m_output", "$ per M output tokens"), ("p90_ttft_s", "s"))),
)
