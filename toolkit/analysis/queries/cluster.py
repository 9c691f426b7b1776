"""Cluster replay queries: hit share by tier against users per instance, TTFT CDF per
router, load per instance (``cluster_runs`` / ``cluster_requests``)."""

from __future__ import annotations

from toolkit.analysis.queries.named import CDF_FRACTIONS, HW_FILTER, TRACE, NamedQuery, Param

ROUTER = Param("router", None, "router name (round-robin, least-load, cache-aware, "
                               "kv-router); null = all")

#: The cluster queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "cluster_hit_shares", "Where each cluster replay's prompt tokens came from (GPU, "
        "host, storage, recomputed) against users per instance, one row per (run, source); "
        "shares of a run sum to 1 (AgentX's 'share of reused prompt tokens' per tier is the "
        "GPU and host rows).",
        """
        WITH r AS (SELECT * FROM cluster_runs
                   WHERE ($trace IS NULL OR trace = $trace)
                     AND ($hardware IS NULL OR hardware = $hardware)
                     AND ($router IS NULL OR router = $router))
        SELECT run_id, trace, hardware, router, instances, users,
               users / instances::DOUBLE AS users_per_instance, device_capacity_tokens,
               host_capacity_tokens, s.source, s.source_rank, s.tokens,
               s.tokens / prompt_tokens::DOUBLE AS share
        FROM r, (VALUES ('GPU (L1)', 1, r.device_hit_tokens),
                        ('host (L2)', 2, r.host_hit_tokens),
                        ('storage (L3)', 3, r.storage_hit_tokens),
                        ('recomputed', 4, r.computed_tokens)) s(source, source_rank, tokens)
        ORDER BY trace, hardware, router, instances, users NULLS FIRST, run_id, source_rank
        """, (TRACE, HW_FILTER, ROUTER),
        (("run_id", "cluster run"), ("trace", "name"), ("hardware", "name"),
         ("router", "name"), ("instances", "count"), ("users", "closed-loop users; null = "
                                                      "open loop"),
         ("users_per_instance", "users / instances"),
         ("device_capacity_tokens", "tokens per instance"),
         ("host_capacity_tokens", "tokens per instance"),
         ("source", "GPU (L1) | host (L2) | storage (L3) | recomputed"),
         ("source_rank", "1-4, stacking order"), ("tokens", "prompt tokens"),
         ("share", "fraction of prompt tokens"))),
    NamedQuery(
        "cluster_ttft_cdf", "TTFT CDF per cluster run at 101 fixed fractions, labelled by "
        "router, instances and load.",
        f"""
        WITH q AS (
            SELECT run_id, quantile_cont(ttft_s, [{CDF_FRACTIONS}]) AS qs
            FROM cluster_requests GROUP BY run_id)
        SELECT q.run_id, c.trace, c.hardware, c.router, c.instances, c.users, c.rate_rps,
               unnest([{CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS ttft_s
        FROM q JOIN cluster_runs c USING (run_id)
        WHERE ($trace IS NULL OR c.trace = $trace) AND ($router IS NULL OR c.router = $router)
        ORDER BY c.router, c.instances, q.run_id, fraction
        """, (TRACE, ROUTER),
        (("run_id", "cluster run"), ("trace", "name"), ("hardware", "name"),
         ("router", "name"), ("instances", "count"), ("users", "closed-loop users"),
         ("rate_rps", "requests/s (offered, or achieved when closed loop)"),
         ("fraction", "of requests"), ("ttft_s", "s"))),
    NamedQuery(
        "cluster_instance_load", "Load per instance of each cluster replay: requests, prompt "
        "tokens, hit tokens by tier, mean queue wait and p90 TTFT, and the instance's share "
        "of the run's requests (1 / instances when perfectly balanced).",
        """
        SELECT q.run_id, c.router, c.instances, c.users, q.instance,
               count(*) AS requests, sum(q.prompt_tokens) AS prompt_tokens,
               sum(q.device_hit_tokens) AS device_hit_tokens,
               sum(q.host_hit_tokens) AS host_hit_tokens,
               sum(q.storage_hit_tokens) AS storage_hit_tokens,
               avg(q.queue_wait_s) AS mean_queue_wait_s,
               quantile_cont(q.ttft_s, 0.9) AS p90_ttft_s,
               count(*) / any_value(c.requests)::DOUBLE AS request_share
        FROM cluster_requests q JOIN cluster_runs c USING (run_id)
        WHERE ($trace IS NULL OR c.trace = $trace) AND ($router IS NULL OR c.router = $router)
        GROUP BY q.run_id, c.router, c.instances, c.users, q.instance
        ORDER BY c.router, c.instances, q.run_id, q.instance
        """, (TRACE, ROUTER),
        (("run_id", "cluster run"), ("router", "name"), ("instances", "count"),
         ("users", "closed-loop users"), ("instance", "0-based"), ("requests", "count"),
         ("prompt_tokens", "tokens"), ("device_hit_tokens", "tokens"),
         ("host_hit_tokens", "tokens"), ("storage_hit_tokens", "tokens"),
         ("mean_queue_wait_s", "s"), ("p90_ttft_s", "s"),
         ("request_share", "fraction of the run's requests"))),
)
