"""Selection queries: where top-k selections fall, how they overlap across layers and steps,
and what the selection replays missed (ratios, OPT bound, host-link latency)."""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.analysis.queries.named import (
    CDF_FRACTIONS,
    KV_DTYPE,
    MODEL,
    TRACE,
    NamedQuery,
    Param,
    QueryError,
    choice,
    model_kv_bytes,
)
from toolkit.errors import ToolkitError
from toolkit.store import Store


def _resolve_buffer_capacity(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    """A HiSparse device buffer holds MLA rows only (indexer keys stay in HBM anyway)."""
    return model_kv_bytes(args, indexer=False)


def _resolve_link(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    from toolkit.hardware import get_hardware
    from toolkit.serving.transfer import MECHANISMS, transfer_path

    choice(args, "per", ("step", "layer", "request"))
    choice(args, "mechanism", MECHANISMS)
    try:
        hw = get_hardware(str(args["hardware"]))
    except (KeyError, ValueError, ToolkitError) as e:
        raise QueryError(str(e).splitlines()[0]) from None
    path = transfer_path(hw, str(args["mechanism"]), concurrent=True)
    args.update(t_fixed_s=path.t_fixed_s, link_bytes_per_s=path.bw_peak_bytes_per_s,
                per_run=path.per_run)
    return args


def _resolve_cdf_link(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    args = _resolve_link(store, {**args, "per": "step"})
    return args


def _resolve_anchors(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    from toolkit.models.spec import indexer_layer_ids
    from toolkit.replay.selections import anchor_layers

    n = store.query("SELECT n_layers FROM selection_traces WHERE trace = $t",
                    {"t": args["trace"]})
    if n.height == 0:
        raise QueryError(f"--param trace must name a selection trace; got {args['trace']!r}")
    layers = np.arange(int(n.item()))
    full = indexer_layer_ids(layers.size, int(args["freq"]), int(args["offset"]))
    args["anchors"] = [int(a) for a in anchor_layers(layers, full)]
    return args


#: The selections queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "selection_position_mix", "Where selections fall, per trace and layer: last $window "
        "positions, first $sinks positions, position 0.",
        """
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
        (TRACE, Param("window", 128, "recency window (tokens)"),
         Param("sinks", 4, "leading sink positions")),
        (("trace", "name"), ("layer", "index"), ("selected", "positions"),
         ("frac_recent", "fraction"), ("frac_sinks", "fraction"), ("pos0_rate", "fraction"))),
    NamedQuery(
        "selection_layer_overlap", "Overlap of layer l with layer l+1 at the same "
        "(request, step).",
        """
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
        """, (TRACE,),
        (("trace", "name"), ("layer", "index"), ("pairs", "count"), ("jaccard", "fraction"),
         ("overlap_of_k", "|A∩B| / k"))),
    NamedQuery(
        "selection_step_overlap", "Overlap of a step with the next recorded step, same "
        "(request, layer).",
        """
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
        """, (TRACE,),
        (("trace", "name"), ("layer", "index"), ("pairs", "count"), ("jaccard", "fraction"),
         ("overlap_of_k", "|A∩B| / k"))),
    NamedQuery(
        "selection_locality", "Per trace and layer, the locality figures that decide a "
        "device buffer's misses: recency, sinks, position 0, overlap with the next step and "
        "with the next layer.",
        """
        WITH rows AS (SELECT * FROM selections WHERE ($trace IS NULL OR trace = $trace)),
        mix AS (
            SELECT trace, layer,
                   avg(len(list_filter(topk, lambda p: p >= seq_len - $window)) / len(topk)::DOUBLE)
                       AS frac_recent,
                   avg(len(list_filter(topk, lambda p: p < $sinks)) / len(topk)::DOUBLE)
                       AS frac_sinks,
                   avg(list_contains(topk, 0)::DOUBLE) AS pos0_rate,
                   sum(len(topk))::BIGINT AS selected
            FROM rows GROUP BY ALL),
        st AS (
            SELECT trace, request_id, layer, topk,
                   lag(topk) OVER (PARTITION BY trace, request_id, layer ORDER BY step) AS prev
            FROM rows),
        step_ov AS (
            SELECT st.trace, layer, avg(len(list_intersect(topk, prev)) / t.k::DOUBLE) AS o
            FROM st JOIN selection_traces t USING (trace) WHERE prev IS NOT NULL GROUP BY ALL),
        layer_ov AS (
            SELECT a.trace, a.layer, avg(len(list_intersect(a.topk, b.topk)) / t.k::DOUBLE) AS o
            FROM rows a JOIN rows b ON a.trace = b.trace AND a.request_id = b.request_id
                 AND a.step = b.step AND b.layer = a.layer + 1
            JOIN selection_traces t ON t.trace = a.trace GROUP BY ALL)
        SELECT mix.trace, mix.layer, selected, frac_recent, frac_sinks, pos0_rate,
               step_ov.o AS step_overlap_of_k, layer_ov.o AS layer_overlap_of_k
        FROM mix LEFT JOIN step_ov USING (trace, layer) LEFT JOIN layer_ov USING (trace, layer)
        ORDER BY mix.trace, mix.layer
        """,
        (TRACE, Param("window", 128, "recency window (tokens)"),
         Param("sinks", 4, "leading sink positions")),
        (("trace", "name"), ("layer", "index"), ("selected", "positions"),
         ("frac_recent", "fraction of selected positions in the last $window"),
         ("frac_sinks", "fraction in the first $sinks"),
         ("pos0_rate", "fraction of selections containing position 0"),
         ("step_overlap_of_k", "|this step ∩ next step| / k"),
         ("layer_overlap_of_k", "|layer l ∩ layer l+1| / k; null for the last layer"))),
    NamedQuery(
        "selection_heatmap", "Step x position heat map of one (request, layer): selections "
        "per position bin.",
        """
        SELECT step, (pos // $bin) * $bin AS position_bin, count(*) AS selected
        FROM (SELECT step, unnest(topk) AS pos FROM selections
              WHERE trace = $trace AND layer = $layer AND request_id = $request)
        GROUP BY ALL ORDER BY step, position_bin
        """,
        (TRACE, Param("layer", 0, "layer"), Param("request", 0, "request_id"),
         Param("bin", 64, "position bin width (tokens)")),
        (("step", "decode step"), ("position_bin", "token position of the bin start"),
         ("selected", "selections in the bin"))),
    NamedQuery(
        "selection_misses_per_step", "Misses per decode step (summed over layers and "
        "requests) for each selection run.",
        """
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, s.step,
               sum(s.misses)::BIGINT AS misses, sum(s.bytes_h2d)::BIGINT AS bytes_h2d
        FROM selection_replay s JOIN selection_runs r USING (run_id)
        WHERE ($trace IS NULL OR r.trace = $trace)
        GROUP BY ALL ORDER BY r.policy, r.buffer_tokens, s.step
        """, (TRACE,),
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "tokens per layer per request"), ("indexshare", "bool"),
         ("step", "decode step"), ("misses", "rows"), ("bytes_h2d", "bytes"))),
    NamedQuery(
        "selection_runs", "Selection replay runs, one row per (trace, mode, policy, buffer, "
        "IndexShare).",
        """
        SELECT trace, mode, policy, buffer_tokens, indexshare, accesses, hits, misses,
               round(miss_ratio, 4) AS miss_ratio, bytes_h2d
        FROM selection_runs WHERE ($trace IS NULL OR trace = $trace)
        ORDER BY trace, mode, policy, buffer_tokens, indexshare
        """, (TRACE,),
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "tokens per layer per request"), ("indexshare", "bool"),
         ("accesses", "rows"), ("hits", "rows"), ("misses", "rows"),
         ("miss_ratio", "fraction"), ("bytes_h2d", "bytes"))),
    NamedQuery(
        "miss_ratio_curve", "Miss ratio against device-buffer size, one row per selection run "
        "(policy, buffer); OPT (Belady) rows are the bound no online policy beats. The buffer "
        "is also given in GB per request for the named model.",
        """
        SELECT trace, mode, indexshare, policy, $model AS kv_model, buffer_tokens,
               buffer_tokens * $kv_bytes_per_token / 1e9 AS buffer_gb_per_request,
               accesses, misses, miss_ratio, policy = 'opt' AS is_bound, run_id
        FROM selection_runs
        WHERE ($trace IS NULL OR trace = $trace) AND ($mode IS NULL OR mode = $mode)
        ORDER BY trace, mode, indexshare, policy, buffer_tokens
        """,
        (TRACE, Param("mode", None, "plain | hisparse filter"), MODEL, KV_DTYPE),
        (("trace", "name"), ("mode", "plain | hisparse"), ("indexshare", "bool"),
         ("policy", "name"), ("kv_model", "model of the GB conversion"),
         ("buffer_tokens", "tokens per layer per request"),
         ("buffer_gb_per_request", "GB (1e9 B) of MLA rows over all layers of the model"),
         ("accesses", "rows"), ("misses", "rows"), ("miss_ratio", "fraction"),
         ("is_bound", "true for OPT"), ("run_id", "selection run")),
        resolve=_resolve_buffer_capacity),
    NamedQuery(
        "policy_vs_opt", "Each online policy against OPT at the same trace, mode, buffer and "
        "IndexShare setting: how many more misses it takes than the bound.",
        """
        WITH r AS (SELECT * FROM selection_runs WHERE ($trace IS NULL OR trace = $trace)),
        o AS (SELECT trace, mode, indexshare, buffer_tokens, misses AS opt_misses,
                     miss_ratio AS opt_miss_ratio, run_id AS opt_run_id
              FROM r WHERE policy = 'opt')
        SELECT r.trace, r.mode, r.indexshare, r.buffer_tokens, r.policy, r.misses,
               o.opt_misses, r.miss_ratio, o.opt_miss_ratio,
               r.misses / nullif(o.opt_misses, 0)::DOUBLE AS misses_over_opt,
               r.miss_ratio - o.opt_miss_ratio AS excess_miss_ratio,
               r.run_id, o.opt_run_id
        FROM r JOIN o USING (trace, mode, indexshare, buffer_tokens)
        WHERE r.policy <> 'opt'
        ORDER BY r.trace, r.mode, r.indexshare, r.buffer_tokens, r.policy
        """, (TRACE,),
        (("trace", "name"), ("mode", "plain | hisparse"), ("indexshare", "bool"),
         ("buffer_tokens", "tokens per layer per request"), ("policy", "online policy"),
         ("misses", "rows"), ("opt_misses", "rows"), ("miss_ratio", "fraction"),
         ("opt_miss_ratio", "fraction"), ("misses_over_opt", "ratio; null when OPT has 0"),
         ("excess_miss_ratio", "fraction points above OPT"), ("run_id", "selection run"),
         ("opt_run_id", "the OPT run"))),
    NamedQuery(
        "best_policy", "Best online (non-OPT) policy per trace, mode and buffer size, with "
        "the OPT bound and the run it came from.",
        """
        WITH r AS (SELECT * FROM selection_runs WHERE ($trace IS NULL OR trace = $trace)),
        best AS (SELECT trace, mode, indexshare, buffer_tokens,
                        arg_min(policy, miss_ratio) AS best_policy,
                        min(miss_ratio) AS best_miss_ratio,
                        arg_min(run_id, miss_ratio) AS run_id, count(*) AS policies
                 FROM r WHERE policy NOT IN ('opt', 'opt-bypass') GROUP BY ALL),
        o AS (SELECT trace, mode, indexshare, buffer_tokens, miss_ratio AS opt_miss_ratio
              FROM r WHERE policy = 'opt')
        SELECT best.*, o.opt_miss_ratio
        FROM best LEFT JOIN o USING (trace, mode, indexshare, buffer_tokens)
        ORDER BY trace, mode, indexshare, buffer_tokens
        """, (TRACE,),
        (("trace", "name"), ("mode", "plain | hisparse"), ("indexshare", "bool"),
         ("buffer_tokens", "tokens per layer per request"), ("best_policy", "name"),
         ("best_miss_ratio", "fraction"), ("run_id", "the best policy's run"),
         ("policies", "online policies compared"),
         ("opt_miss_ratio", "fraction; null when OPT was not replayed"))),
    NamedQuery(
        "miss_latency", "Host-to-device miss latency of selection replays: one request's "
        "misses at one layer and step moved alone over the named hardware's host link "
        "(transfer model of toolkit.serving.transfer, all GPUs loading), summarised per step, "
        "layer or request.",
        """
        WITH x AS (
            SELECT s.run_id,
                   CASE $per WHEN 'step' THEN s.step WHEN 'layer' THEN s.layer
                        ELSE s.request_id END AS key,
                   s.misses,
                   CASE WHEN s.misses = 0 THEN 0.0
                        WHEN $per_run THEN s.misses * $t_fixed_s ELSE $t_fixed_s END
                     + s.bytes_h2d / $link_bytes_per_s AS miss_latency_s
            FROM selection_replay s
            WHERE ($run IS NULL OR s.run_id = $run) AND ($trace IS NULL OR s.trace = $trace))
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, x.run_id,
               $hardware AS hardware, $per AS per, x.key, count(*) AS samples,
               avg(x.misses) AS mean_misses,
               quantile_cont(miss_latency_s, 0.5)  AS p50_miss_latency_s,
               quantile_cont(miss_latency_s, 0.9)  AS p90_miss_latency_s,
               quantile_cont(miss_latency_s, 0.99) AS p99_miss_latency_s,
               max(miss_latency_s)                 AS max_miss_latency_s
        FROM x JOIN selection_runs r USING (run_id)
        GROUP BY ALL ORDER BY r.trace, r.mode, r.policy, r.buffer_tokens, x.run_id, x.key
        """,
        (TRACE, Param("run", None, "selection run_id filter"),
         Param("per", "layer", "group by: layer (a summary: p50/p90/p99 per layer) | step | "
               "request"),
         Param("hardware", "gb200", "hardware whose host link moves the misses"),
         Param("mechanism", "sm_kernel", "ce_call | batch_descriptor | sm_kernel")),
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "tokens"), ("indexshare", "bool"), ("run_id", "selection run"),
         ("hardware", "name"), ("per", "step | layer | request"),
         ("key", "the step, layer or request_id"), ("samples", "(request, step, layer) rows"),
         ("mean_misses", "rows per sample"), ("p50_miss_latency_s", "s"),
         ("p90_miss_latency_s", "s"), ("p99_miss_latency_s", "s"),
         ("max_miss_latency_s", "s")),
        resolve=_resolve_link),
    NamedQuery(
        "miss_latency_cdf", "CDF of the miss latency of ``miss_latency`` at 101 fixed "
        "fractions per selection run (a few hundred rows for a chart, not one per sample).",
        f"""
        WITH x AS (
            SELECT s.run_id,
                   CASE WHEN s.misses = 0 THEN 0.0
                        WHEN $per_run THEN s.misses * $t_fixed_s ELSE $t_fixed_s END
                     + s.bytes_h2d / $link_bytes_per_s AS miss_latency_s
            FROM selection_replay s
            WHERE ($run IS NULL OR s.run_id = $run) AND ($trace IS NULL OR s.trace = $trace)),
        q AS (SELECT run_id, quantile_cont(miss_latency_s, [{CDF_FRACTIONS}]) AS qs
              FROM x GROUP BY run_id)
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, q.run_id,
               $hardware AS hardware,
               unnest([{CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS miss_latency_s
        FROM q JOIN selection_runs r USING (run_id)
        ORDER BY r.trace, r.mode, r.policy, r.buffer_tokens, q.run_id, fraction
        """,
        (TRACE, Param("run", None, "selection run_id filter"),
         Param("hardware", "gb200", "hardware whose host link moves the misses"),
         Param("mechanism", "sm_kernel", "ce_call | batch_descriptor | sm_kernel")),
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "tokens"), ("indexshare", "bool"), ("run_id", "selection run"),
         ("hardware", "name"), ("fraction", "of (request, step, layer) samples"),
         ("miss_latency_s", "s")),
        resolve=_resolve_cdf_link),
    NamedQuery(
        "indexshare_overlap", "Under IndexShare (layer i runs its own indexer iff "
        "max(i - offset + 1, 0) % freq == 0), each Shared layer's overlap between its own "
        "selection and the Full layer's it would reuse.",
        """
        WITH s AS (SELECT * FROM selections WHERE trace = $trace),
        m AS (SELECT i::SMALLINT AS layer, $anchors[i + 1]::SMALLINT AS anchor
              FROM range(0, len($anchors)) t(i))
        SELECT m.layer, m.anchor, m.layer - m.anchor AS distance, count(*) AS pairs,
               avg(len(list_intersect(a.topk, b.topk))
                   / (len(a.topk) + len(b.topk) - len(list_intersect(a.topk, b.topk)))
                   ::DOUBLE) AS jaccard,
               avg(len(list_intersect(a.topk, b.topk)) / t.k::DOUBLE) AS overlap_of_k
        FROM m JOIN s a ON a.layer = m.layer
        JOIN s b ON b.request_id = a.request_id AND b.step = a.step AND b.layer = m.anchor
        JOIN selection_traces t ON t.trace = a.trace
        WHERE m.layer <> m.anchor
        GROUP BY ALL ORDER BY m.layer
        """,
        (Param("trace", None, "selection trace (required)"),
         Param("freq", 4, "index_topk_freq"), Param("offset", 3, "index_skip_topk_offset")),
        (("layer", "Shared layer"), ("anchor", "the Full layer it reuses"),
         ("distance", "layers after the Full layer"), ("pairs", "(request, step) pairs"),
         ("jaccard", "fraction"), ("overlap_of_k", "|own ∩ Full| / k")),
        resolve=_resolve_anchors),
)
