"""Cost queries: $ per million tokens of every priced run, the published figures beside
them, and the decode step time behind a priced selection replay."""

from __future__ import annotations

from toolkit.analysis.queries.named import HW_FILTER, TRACE, NamedQuery

#: The cost queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "cost_per_mtok", "$ per million tokens of every priced run (tier replays and priced "
        "selection replays), with interactivity and whether the run is on its hardware's "
        "Pareto front (no cheaper run at equal or higher interactivity).",
        """
        WITH c AS (
            SELECT 'tiers' AS source, run_id, trace, model, hardware,
                   coalesce('concurrency ' || concurrency, 'arrivals ' || arrivals) AS setting,
                   1.0 / p50_tpot_s AS interactivity_tok_s_user,
                   tokens_per_s_per_gpu AS total_tokens_per_s_per_gpu,
                   usd_per_gpu_hour,
                   usd_per_million_total_tokens AS usd_per_mtok_total,
                   usd_per_million_output_tokens AS usd_per_mtok_output
            FROM tier_runs WHERE p50_tpot_s > 0 AND usd_per_million_total_tokens IS NOT NULL
            UNION ALL
            SELECT 'decode', run_id, trace, model, hardware,
                   'batch ' || batch_per_gpu || CASE WHEN overlap THEN ' overlapped'
                                                     ELSE ' sync' END,
                   interactivity_tok_s_user, total_tokens_per_s_per_gpu, usd_per_gpu_hour,
                   usd_per_million_total_tokens, usd_per_million_output_tokens
            FROM decode_costs),
        f AS (SELECT * FROM c WHERE ($hardware IS NULL OR hardware = $hardware)
                               AND ($trace IS NULL OR trace = $trace))
        SELECT f.*, NOT EXISTS (
                   SELECT 1 FROM f g WHERE g.source = f.source AND g.hardware = f.hardware
                     AND g.model = f.model AND g.trace = f.trace
                     AND g.interactivity_tok_s_user >= f.interactivity_tok_s_user
                     AND g.usd_per_mtok_total <= f.usd_per_mtok_total
                     AND (g.interactivity_tok_s_user > f.interactivity_tok_s_user
                          OR g.usd_per_mtok_total < f.usd_per_mtok_total)) AS on_front
        FROM f ORDER BY source, hardware, interactivity_tok_s_user
        """, (TRACE, HW_FILTER),
        (("source", "tiers | decode"), ("run_id", "tier run or decode_costs run"),
         ("trace", "name"), ("model", "name"), ("hardware", "name"),
         ("setting", "concurrency / batch / overlap"),
         ("interactivity_tok_s_user", "tok/s/user = 1 / p50 TPOT"),
         ("total_tokens_per_s_per_gpu", "tok/s/GPU, input + output"),
         ("usd_per_gpu_hour", "$ (price tier of the run)"),
         ("usd_per_mtok_total", "$ per M total tokens"),
         ("usd_per_mtok_output", "$ per M output tokens"),
         ("on_front", "on its (source, hardware, model, trace) Pareto front"))),
    NamedQuery(
        "published_costs", "Published $/M-token figures quoted for comparison (bundled, "
        "never fitted to); overlay them on cost_per_mtok.",
        """
        SELECT hardware, engine, model,
               interactivity_tok_s_user::DOUBLE AS interactivity_tok_s_user,
               usd_per_mtok_total,
               condition, derivation, source
        FROM published_costs ORDER BY hardware, interactivity_tok_s_user
        """, (),
        (("hardware", "name"), ("engine", "serving engine"), ("model", "name"),
         ("interactivity_tok_s_user", "tok/s/user"), ("usd_per_mtok_total", "$ per M total"),
         ("condition", "e.g. a TTFT bound"), ("derivation", "quoted | derived (how)"),
         ("source", "where it was published")),
        bundled=("published_costs",)),
    NamedQuery(
        "compare_answers", "`cost compare` answers stored in compare_runs: per (run, "
        "hardware, engine, target interactivity) the source (measured | model), basis, "
        "whether the target is reachable, the throughput and $/M with their 10-90% "
        "cross-validated band, p90 TTFT, GPUs and layout of the front point that meets it.",
        """
        SELECT run_id, model, hardware, engine, interactivity, source, basis, reachable, edge,
               tput_per_gpu, tput_per_gpu_low, tput_per_gpu_high, usd_per_mtok_total,
               usd_per_mtok_total_low, usd_per_mtok_total_high, p90_ttft_s, gpus, layout,
               isl, osl, cached_prefix_fraction, max_p90_ttft_s
        FROM compare_runs
        WHERE ($hardware IS NULL OR hardware = $hardware)
        ORDER BY run_id, hardware, engine, interactivity
        """, (HW_FILTER,),
        (("run_id", "compare run"), ("model", "name"), ("hardware", "name"),
         ("engine", "serving engine"), ("interactivity", "target tok/s/user"),
         ("source", "measured | model"), ("basis", "measured | fitted-pair | shared-terms"),
         ("reachable", "target within the front (else no price)"),
         ("edge", "within 15% of the front's end"),
         ("tput_per_gpu", "tok/s/GPU, input + output"), ("tput_per_gpu_low", "10% band"),
         ("tput_per_gpu_high", "90% band"), ("usd_per_mtok_total", "$ per M total tokens"),
         ("usd_per_mtok_total_low", "$, band"), ("usd_per_mtok_total_high", "$, band"),
         ("p90_ttft_s", "s"), ("gpus", "GPUs of the front point"), ("layout", "label"),
         ("isl", "tokens"), ("osl", "tokens"), ("cached_prefix_fraction", "0-1"),
         ("max_p90_ttft_s", "s bound (null = none)"))),
    NamedQuery(
        "step_time", "Decode step time of each priced selection replay split into its "
        "terms (HBM/compute work, exposed miss I/O), one row per (run, term).",
        """
        SELECT d.run_id, d.hardware, d.model, d.batch_per_gpu, d.overlap,
               d.hardware || ' b' || d.batch_per_gpu
                   || CASE WHEN d.overlap THEN ' overlapped' ELSE ' sync' END AS config,
               t.term, t.term_rank, t.time_s, d.mean_tpot_s
        FROM decode_costs d, (VALUES ('HBM / compute work', 1, d.mean_t_work_s),
                                     ('miss I/O (exposed)', 2, d.mean_t_miss_exposed_s))
                             t(term, term_rank, time_s)
        WHERE ($hardware IS NULL OR d.hardware = $hardware)
        ORDER BY d.hardware, d.batch_per_gpu, d.overlap, t.term_rank
        """, (HW_FILTER,),
        (("run_id", "decode_costs run"), ("hardware", "name"), ("model", "name"),
         ("batch_per_gpu", "requests"), ("overlap", "bool"), ("config", "label"),
         ("term", "HBM / compute work | miss I/O (exposed)"), ("term_rank", "stack order"),
         ("time_s", "s per decode step (mean)"), ("mean_tpot_s", "s; terms sum to it"))),
    NamedQuery(
        "capacity_plans", "`toolkit plan`'s ranked plans stored in plan_runs: per (plan, "
        "rank) the accelerator, layout, memory split, hit shares per tier, p90 TTFT, "
        "throughput and $/M total tokens split into GPU, DRAM and SSD, and the replays used.",
        """
        SELECT plan_id, rank, trace, model, hardware, engine, layout, gpus, concurrency,
               device_prefix_tokens, hisparse_buffer_tokens, host_dram_gb, ssd_gb, policy,
               gpu_hit_share, host_hit_share, storage_hit_share, interactivity, p90_ttft_s,
               tput_per_gpu, usd_per_mtok_total, usd_per_mtok_total_low,
               usd_per_mtok_total_high, usd_per_mtok_gpu, usd_per_mtok_dram, usd_per_mtok_ssd,
               run_ids
        FROM plan_runs
        WHERE rank IS NOT NULL AND ($hardware IS NULL OR hardware = $hardware)
        ORDER BY plan_id, rank
        """, (HW_FILTER,),
        (("plan_id", "plan search"), ("rank", "1 = cheapest"), ("trace", "name"),
         ("model", "name"), ("hardware", "name"), ("engine", "serving engine"),
         ("layout", "label"), ("gpus", "GPUs of the front point"),
         ("concurrency", "users of the deployment"), ("device_prefix_tokens", "tokens"),
         ("hisparse_buffer_tokens", "tokens per request per layer (null = off)"),
         ("host_dram_gb", "GB per instance"), ("ssd_gb", "GB per instance"),
         ("policy", "prefix-cache eviction"), ("gpu_hit_share", "0-1 of prompt tokens"),
         ("host_hit_share", "0-1"), ("storage_hit_share", "0-1"),
         ("interactivity", "target tok/s/user"), ("p90_ttft_s", "s"),
         ("tput_per_gpu", "tok/s/GPU, input + output"),
         ("usd_per_mtok_total", "$ per M total tokens"), ("usd_per_mtok_total_low", "$, band"),
         ("usd_per_mtok_total_high", "$, band"), ("usd_per_mtok_gpu", "$ per M, GPUs"),
         ("usd_per_mtok_dram", "$ per M, host DRAM"), ("usd_per_mtok_ssd", "$ per M, SSD"),
         ("run_ids", "JSON list of tier / selection run ids"))),
    NamedQuery(
        "capacity_plan_best", "Per plan search and accelerator, its cheapest feasible "
        "candidate that was evaluated exactly (ranked or not), at the plan's target: $/M "
        "total with its band and GPU / DRAM / SSD split, hit shares per tier, memory split.",
        """
        SELECT plan_id, trace, model, hardware, engine, layout, gpus, interactivity,
               max_p90_ttft_s, p90_ttft_s, tput_per_gpu, host_dram_gb, ssd_gb, policy,
               device_prefix_tokens, hisparse_buffer_tokens, gpu_hit_share, host_hit_share,
               storage_hit_share, usd_per_mtok_total, usd_per_mtok_total_low,
               usd_per_mtok_total_high, usd_per_mtok_gpu, usd_per_mtok_dram, usd_per_mtok_ssd,
               rank, run_ids
        FROM plan_runs
        WHERE feasible AND usd_per_mtok_total IS NOT NULL
          AND ($hardware IS NULL OR hardware = $hardware)
        QUALIFY row_number() OVER (PARTITION BY plan_id, hardware
                                   ORDER BY usd_per_mtok_total, rank NULLS LAST) = 1
        ORDER BY plan_id, usd_per_mtok_total
        """, (HW_FILTER,),
        (("plan_id", "plan search"), ("trace", "name"), ("model", "name"),
         ("hardware", "name"), ("engine", "serving engine"), ("layout", "label"),
         ("gpus", "GPUs of the front point"), ("interactivity", "the plan's target tok/s/user"),
         ("max_p90_ttft_s", "s, the plan's bound"), ("p90_ttft_s", "s"),
         ("tput_per_gpu", "tok/s/GPU, input + output"), ("host_dram_gb", "GB per instance"),
         ("ssd_gb", "GB per instance"), ("policy", "prefix-cache eviction"),
         ("device_prefix_tokens", "tokens"), ("hisparse_buffer_tokens", "tokens (null = off)"),
         ("gpu_hit_share", "0-1 of prompt tokens"), ("host_hit_share", "0-1"),
         ("storage_hit_share", "0-1"), ("usd_per_mtok_total", "$ per M total tokens"),
         ("usd_per_mtok_total_low", "$, band"), ("usd_per_mtok_total_high", "$, band"),
         ("usd_per_mtok_gpu", "$ per M, GPUs"), ("usd_per_mtok_dram", "$ per M, host DRAM"),
         ("usd_per_mtok_ssd", "$ per M, SSD"), ("rank", "its rank in the plan (null: not "
                                                "among the printed plans)"),
         ("run_ids", "JSON list of tier / selection run ids"))),
)
