"""Named SQL over a store's views, shared by the CLI, notebooks, charts and the report.

Each query is a :class:`NamedQuery`: its SQL (DuckDB, ``$name`` parameters, always bound),
what it answers, its parameters with defaults, and its output columns with units. A NULL
filter parameter means "all". Some parameters are resolved in Python before binding (a
hardware name becomes its link figures, a model name its KV bytes per token), so the SQL
never sees a name it has to trust. Run one with :func:`run_query`, ``toolkit sql --query
NAME --param k=v``, or ``store.query(*QUERIES[NAME].bind(store, **params))``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from toolkit import schema
from toolkit.errors import ToolkitError
from toolkit.store import Store


class QueryError(ToolkitError):
    """Unknown query or parameter, or a parameter value the query cannot use."""


@dataclass(frozen=True)
class Param:
    """One parameter of a named query: default (None = all, for filters) and meaning."""

    name: str
    default: Any
    doc: str


@dataclass(frozen=True)
class NamedQuery:
    """A documented query.

    Attributes:
        name: registry key.
        doc: what it answers, in a sentence or two.
        sql: DuckDB SQL with ``$param`` placeholders.
        params: user-facing parameters.
        columns: output columns and their meaning/unit, in order.
        resolve: turns user parameters into SQL parameters (may add derived ones and check
            values); gets the store for existence checks.
        bundled: package tables registered on the connection for the query's duration.
    """

    name: str
    doc: str
    sql: str
    params: tuple[Param, ...] = ()
    columns: tuple[tuple[str, str], ...] = ()
    resolve: Callable[[Store, dict[str, Any]], dict[str, Any]] | None = field(
        default=None, repr=False)
    bundled: tuple[str, ...] = ()

    def bind(self, store: Store, **params: Any) -> tuple[str, dict[str, Any]]:
        """SQL and bound parameters for ``params`` (defaults filled, values resolved)."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise QueryError(f"query {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                             f"its parameters: {', '.join(sorted(known)) or 'none'}")
        args = {p.name: params.get(p.name, p.default) for p in self.params}
        if self.resolve is not None:
            args = self.resolve(store, args)
        used = set(re.findall(r"\$([A-Za-z_]\w*)", self.sql))
        return self.sql, {k: v for k, v in args.items() if k in used}

    def describe(self) -> str:
        """Multi-line help: doc, parameters, columns."""
        lines = [f"{self.name}: {self.doc}"]
        for p in self.params:
            lines.append(f"  --param {p.name}=...  {p.doc} (default: {p.default!r})")
        lines += [f"  -> {c}: {u}" for c, u in self.columns]
        return "\n".join(lines)


# --- parameter resolvers -------------------------------------------------------------------

def _choice(args: dict[str, Any], name: str, choices: tuple[str, ...]) -> None:
    if args[name] not in choices:
        raise QueryError(f"--param {name} must be one of {', '.join(choices)}; "
                         f"got {args[name]!r}")


def _model_bytes(args: dict[str, Any], *, indexer: bool) -> dict[str, Any]:
    from toolkit.models import get_model
    from toolkit.serving.tier_service import kv_bytes_per_token

    try:
        model = get_model(str(args["model"]))
        dtype = str(args["kv_dtype"])
        args["kv_bytes_per_token"] = (kv_bytes_per_token(model, dtype) if indexer
                                      else model.mla_bytes_per_token(dtype))
    except (KeyError, ValueError, ToolkitError) as e:
        raise QueryError(str(e).splitlines()[0]) from None
    return args


def _resolve_prefix_capacity(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    """A prefix cache holds whole tokens: MLA rows and indexer keys of every layer."""
    return _model_bytes(args, indexer=True)


def _resolve_buffer_capacity(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    """A HiSparse device buffer holds MLA rows only (indexer keys stay in HBM anyway)."""
    return _model_bytes(args, indexer=False)


def _resolve_link(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    from toolkit.hardware import get_hardware
    from toolkit.serving.transfer import MECHANISMS, transfer_path

    _choice(args, "per", ("step", "layer", "request"))
    _choice(args, "mechanism", MECHANISMS)
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


def _resolve_runs(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    for k in ("run_a", "run_b"):
        if not args[k]:
            raise QueryError(f"query run_compare needs --param {k}=RUN_ID "
                             "(list runs with: toolkit sql --query runs)")
        n = store.query(f"SELECT count(*) FROM ({_RUNS_SQL}) WHERE run_id = $r",
                        {"r": str(args[k])}).item()
        if n == 0:
            raise QueryError(f"no run {args[k]!r} in {store.root} "
                             "(list runs with: toolkit sql --query runs)")
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


def _resolve_group(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    _choice(args, "group", ("hardware", "framework"))
    return args


def _resolve_metric(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    _choice(args, "metric", tuple(_MVM_METRICS))
    args["unit"] = _MVM_METRICS[str(args["metric"])]
    return args


# --- bundled tables ------------------------------------------------------------------------

@cache
def _bundled_table(name: str) -> pa.Table:
    if name == "serving_heldout":
        path = files("toolkit.serving").joinpath("fitted", "cv", "heldout_hardware.csv")
    elif name == "published_costs":
        path = files("toolkit").joinpath("data", "published", "cost_points.csv")
    else:  # pragma: no cover - registry bug
        raise KeyError(name)
    return pacsv.read_csv(str(path))


# --- SQL -----------------------------------------------------------------------------------

_CDF_FRACTIONS = ", ".join(f"{i / 100:.2f}" for i in range(0, 101))
_MVM_METRICS = {"tput_per_gpu": "tok/s/GPU (input + output)", "median_tpot": "s",
                "median_ttft": "s", "median_intvty": "tok/s/user"}

#: Run tables and their descriptive (non-numeric) columns, for ``runs`` and ``run_compare``.
_RUN_TABLES = ("replay_runs", "selection_runs", "tier_runs", "engram_runs", "decode_costs")
_SKIP = {"run_id", "config_json"}


def _long_columns(table: str) -> str:
    """VALUES rows (metric, order, number, text) for every column of a run table."""
    rows = []
    for i, f in enumerate(schema.TABLES[table]):
        if f.name in _SKIP:
            continue
        numeric = pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
        num = f"{f.name}::DOUBLE" if numeric else "NULL::DOUBLE"
        txt = "NULL::VARCHAR" if numeric else f"{f.name}::VARCHAR"
        rows.append(f"('{f.name}', {i}, {num}, {txt})")
    return (f"SELECT '{table}' AS kind, run_id, m.* FROM {table}, "
            f"(VALUES {', '.join(rows)}) m(metric, ord, num, txt) "
            "WHERE run_id IN ($run_a, $run_b)")


_RUNS_SQL = " UNION ALL ".join([
    "SELECT 'prefix' AS kind, run_id, trace, policy || ' ' || coalesce("
    "capacity_blocks::VARCHAR || ' blocks', 'unbounded') AS label FROM replay_runs",
    "SELECT 'selections', run_id, trace, mode || ' ' || policy || ' buffer ' || buffer_tokens"
    " || CASE WHEN indexshare THEN ' indexshare' ELSE '' END FROM selection_runs",
    "SELECT 'tiers', run_id, trace, hardware || ' ' || model || ' ' || coalesce("
    "'concurrency ' || concurrency::VARCHAR, 'arrivals ' || arrivals) FROM tier_runs",
    "SELECT 'engram', run_id, trace, policy || ' ' || backing || ' ' || hardware FROM engram_runs",
    "SELECT 'decode_cost', run_id, trace, hardware || ' ' || model || ' batch ' || batch_per_gpu"
    " || CASE WHEN overlap THEN ' overlapped' ELSE ' sync' END FROM decode_costs",
    "SELECT DISTINCT 'serving_fronts', run_id, model, 'modelled fronts ' || precision || ' '"
    " || isl || '/' || osl FROM serving_fronts",
])

_TRACE = Param("trace", None, "trace name filter")
_HW_FILTER = Param("hardware", None, "hardware name filter")
_MODEL = Param("model", "glm-5.2", "model whose KV bytes/token convert tokens to GB")
_KV = Param("kv_dtype", "fp8", "KV precision for the GB conversion: fp8 | bf16")

_LIST: list[NamedQuery] = [
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
        """, (_TRACE,),
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
        """, (_TRACE,),
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
        """, (_TRACE, _MODEL, _KV),
        (("trace", "name"), ("policy", "name"), ("capacity_blocks", "blocks; null = unbounded"),
         ("kv_model", "model of the GB conversion"), ("capacity_tokens", "tokens"),
         ("capacity_gb", "GB (1e9 B) of KV: MLA rows + indexer keys, all layers"),
         ("metric", "block_hit_ratio | token_hit_ratio"), ("ratio", "fraction")),
        resolve=_resolve_prefix_capacity),
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
        (_TRACE, Param("window", 128, "recency window (tokens)"),
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
        """, (_TRACE,),
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
        """, (_TRACE,),
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
        (_TRACE, Param("window", 128, "recency window (tokens)"),
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
        (_TRACE, Param("layer", 0, "layer"), Param("request", 0, "request_id"),
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
        """, (_TRACE,),
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
        """, (_TRACE,),
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
        (_TRACE, Param("mode", None, "plain | hisparse filter"), _MODEL, _KV),
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
        """, (_TRACE,),
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
                 FROM r WHERE policy <> 'opt' GROUP BY ALL),
        o AS (SELECT trace, mode, indexshare, buffer_tokens, miss_ratio AS opt_miss_ratio
              FROM r WHERE policy = 'opt')
        SELECT best.*, o.opt_miss_ratio
        FROM best LEFT JOIN o USING (trace, mode, indexshare, buffer_tokens)
        ORDER BY trace, mode, indexshare, buffer_tokens
        """, (_TRACE,),
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
        (_TRACE, Param("run", None, "selection run_id filter"),
         Param("per", "step", "group by: step | layer | request"),
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
        q AS (SELECT run_id, quantile_cont(miss_latency_s, [{_CDF_FRACTIONS}]) AS qs
              FROM x GROUP BY run_id)
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, q.run_id,
               $hardware AS hardware,
               unnest([{_CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS miss_latency_s
        FROM q JOIN selection_runs r USING (run_id)
        ORDER BY r.trace, r.mode, r.policy, r.buffer_tokens, q.run_id, fraction
        """,
        (_TRACE, Param("run", None, "selection run_id filter"),
         Param("hardware", "gb200", "hardware whose host link moves the misses"),
         Param("mechanism", "sm_kernel", "ce_call | batch_descriptor | sm_kernel")),
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "tokens"), ("indexshare", "bool"), ("run_id", "selection run"),
         ("hardware", "name"), ("fraction", "of (request, step, layer) samples"),
         ("miss_latency_s", "s")),
        resolve=_resolve_cdf_link),
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
               host_capacity_tokens, prompt_tokens, s.source, s.source_rank, s.tokens,
               s.tokens / prompt_tokens::DOUBLE AS share
        FROM r, (VALUES ('GPU (L1)', 1, r.device_hit_tokens),
                        ('host (L2)', 2, r.host_hit_tokens),
                        ('storage (L3)', 3, r.storage_hit_tokens),
                        ('recomputed', 4, r.computed_tokens)) s(source, source_rank, tokens)
        ORDER BY trace, hardware, device_capacity_tokens, concurrency NULLS FIRST, run_id,
                 source_rank
        """, (_TRACE, _HW_FILTER),
        (("run_id", "tier run"), ("trace", "name"), ("hardware", "name"), ("model", "name"),
         ("arrivals", "trace | scaled:F | from:T | closed"),
         ("concurrency", "users; null = open loop"), ("device_capacity_tokens", "tokens"),
         ("host_capacity_tokens", "tokens"), ("prompt_tokens", "tokens"),
         ("source", "GPU (L1) | host (L2) | storage (L3) | recomputed"),
         ("source_rank", "1-4, stacking order"), ("tokens", "prompt tokens"),
         ("share", "fraction of prompt tokens"))),
    NamedQuery(
        "tier_ttft_cdf", "TTFT CDF per tier run at 101 fixed fractions.",
        f"""
        WITH q AS (
            SELECT run_id, quantile_cont(ttft_s, [{_CDF_FRACTIONS}]) AS qs
            FROM tier_requests GROUP BY run_id)
        SELECT q.run_id, t.hardware, t.concurrency, t.device_capacity_tokens,
               unnest([{_CDF_FRACTIONS}]::DOUBLE[]) AS fraction, unnest(q.qs) AS ttft_s
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
        """, (_TRACE, _HW_FILTER),
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
        """, (_HW_FILTER,),
        (("run_id", "decode_costs run"), ("hardware", "name"), ("model", "name"),
         ("batch_per_gpu", "requests"), ("overlap", "bool"), ("config", "label"),
         ("term", "HBM / compute work | miss I/O (exposed)"), ("term_rank", "stack order"),
         ("time_s", "s per decode step (mean)"), ("mean_tpot_s", "s; terms sum to it"))),
    NamedQuery(
        "model_vs_measured", "The serving model's held-out predictions (leave-one-hardware-"
        "out) against measured InferenceX DeepSeek-R1 points (bundled), for one metric.",
        """
        SELECT hardware, framework, precision, spec_method, isl, osl, conc,
               CASE WHEN disagg THEN 'disagg P' || num_prefill_gpu || '/D' || num_decode_gpu
                                 || ' TP' || decode_tp || ' EP' || decode_ep
                    ELSE 'TP' || decode_tp || ' EP' || decode_ep END
               || CASE WHEN decode_dp_attention THEN ' DPA' ELSE '' END AS layout,
               $metric AS metric, $unit AS unit, measured, predicted,
               predicted / measured - 1 AS rel_err
        FROM (SELECT *,
                     CASE $metric WHEN 'tput_per_gpu' THEN tput_per_gpu
                                  WHEN 'median_tpot' THEN median_tpot
                                  WHEN 'median_ttft' THEN median_ttft
                                  ELSE median_intvty END AS measured,
                     CASE $metric WHEN 'tput_per_gpu' THEN pred_tput_per_gpu
                                  WHEN 'median_tpot' THEN pred_median_tpot
                                  WHEN 'median_ttft' THEN pred_median_ttft
                                  ELSE pred_median_intvty END AS predicted
              FROM serving_heldout)
        WHERE measured > 0 AND ($hardware IS NULL OR hardware = $hardware)
        ORDER BY hardware, framework, isl, osl, conc
        """,
        (Param("metric", "tput_per_gpu", "tput_per_gpu | median_tpot | median_ttft | "
                                          "median_intvty"), _HW_FILTER),
        (("hardware", "name"), ("framework", "engine"), ("precision", "fp4 | fp8"),
         ("spec_method", "none | mtp"), ("isl", "tokens"), ("osl", "tokens"),
         ("conc", "concurrent requests"), ("layout", "parallelism"), ("metric", "name"),
         ("unit", "of measured/predicted"), ("measured", "value in unit"),
         ("predicted", "value in unit (held out)"), ("rel_err", "predicted / measured - 1")),
        resolve=_resolve_metric, bundled=("serving_heldout",)),
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
    NamedQuery(
        "model_error", "Held-out error of the serving model per hardware or per engine, one "
        "row per (group, metric): median and p90 of |predicted / measured - 1|.",
        """
        WITH h AS (SELECT CASE $group WHEN 'hardware' THEN hardware ELSE framework END AS key,
                          * FROM serving_heldout),
        e AS (SELECT key, m.metric, m.metric_rank, abs(m.predicted / m.measured - 1) AS err
              FROM h, (VALUES ('throughput per GPU', 1, h.tput_per_gpu, h.pred_tput_per_gpu),
                              ('TPOT', 2, h.median_tpot, h.pred_median_tpot),
                              ('TTFT', 3, h.median_ttft, h.pred_median_ttft))
                      m(metric, metric_rank, measured, predicted)
              WHERE m.measured > 0)
        SELECT key, metric, metric_rank, count(*) AS rows, median(err) AS median_abs_err,
               quantile_cont(err, 0.9) AS p90_abs_err
        FROM e GROUP BY ALL ORDER BY key, metric_rank
        """,
        (Param("group", "hardware", "hardware | framework"),),
        (("key", "the hardware or engine"), ("metric", "throughput per GPU | TPOT | TTFT"),
         ("metric_rank", "display order"), ("rows", "held-out points"),
         ("median_abs_err", "fraction"), ("p90_abs_err", "fraction")),
        resolve=_resolve_group, bundled=("serving_heldout",)),
    NamedQuery(
        "serving_fronts", "Modelled Pareto fronts (serving model) of throughput per GPU vs "
        "interactivity per hardware, as recorded by toolkit.cost.records.record_serving_fronts.",
        """
        SELECT run_id, model, precision, isl, osl, hardware, framework, layout,
               interactivity_tok_s_user AS interactivity, tput_per_gpu
        FROM serving_fronts
        WHERE ($run IS NULL OR run_id = $run) AND ($hardware IS NULL OR hardware = $hardware)
        ORDER BY run_id, hardware, interactivity
        """,
        (Param("run", None, "fronts run_id filter"), _HW_FILTER),
        (("run_id", "fronts run"), ("model", "name"), ("precision", "fp4 | fp8"),
         ("isl", "tokens"), ("osl", "tokens"), ("hardware", "name"), ("framework", "engine"),
         ("layout", "parallelism"), ("interactivity", "tok/s/user (predicted median)"),
         ("tput_per_gpu", "tok/s/GPU, input + output (predicted)"))),
    NamedQuery(
        "measured_points", "Measured InferenceX DeepSeek-R1 points (bundled) at one shape: "
        "interactivity and throughput per GPU, for overlaying on modelled fronts.",
        """
        SELECT hardware, framework, precision, isl, osl, conc,
               'TP' || decode_tp || ' EP' || decode_ep AS layout,
               median_intvty AS interactivity, tput_per_gpu
        FROM serving_heldout
        WHERE ($hardware IS NULL OR hardware = $hardware) AND isl = $isl AND osl = $osl
          AND precision = $precision
        ORDER BY hardware, framework, conc
        """,
        (_HW_FILTER, Param("isl", 8192, "input tokens"), Param("osl", 1024, "output tokens"),
         Param("precision", "fp4", "fp4 | fp8")),
        (("hardware", "name"), ("framework", "engine"), ("precision", "fp4 | fp8"),
         ("isl", "tokens"), ("osl", "tokens"), ("conc", "concurrent requests"),
         ("layout", "decode TP/EP"), ("interactivity", "tok/s/user (median)"),
         ("tput_per_gpu", "tok/s/GPU, input + output")),
        bundled=("serving_heldout",)),
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
        (_TRACE, Param("step", 500, "keep every step-th capacity of the one-pass curve"),
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
        (_TRACE, Param("policy", "lru", "replay policy"),
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
        (_TRACE, Param("policy", "lru", "replay policy"),
         Param("cache_bytes", 1e7, "HBM row cache (bytes)")),
        (("hardware", "name"), ("placement", "hbm | dram | ssd"),
         ("fetch_mode", "none | sync | overlapped"), ("m_tokens_per_usd", "M tokens per $"))),
    NamedQuery(
        "runs", "Every run in the store, one row each: kind, id, trace and a readable label.",
        f"SELECT * FROM ({_RUNS_SQL}) ORDER BY kind, trace, run_id", (),
        (("kind", "prefix | selections | tiers | engram | decode_cost | serving_fronts"),
         ("run_id", "id"), ("trace", "trace name (model name for serving_fronts)"),
         ("label", "the run's configuration in words"))),
    NamedQuery(
        "run_compare", "Any two runs side by side: every column of their run rows (config "
        "and results), with the difference and ratio where numeric.",
        f"""
        WITH l AS ({' UNION ALL '.join(_long_columns(t) for t in _RUN_TABLES)}),
        a AS (SELECT * FROM l WHERE run_id = $run_a),
        b AS (SELECT * FROM l WHERE run_id = $run_b)
        SELECT coalesce(a.metric, b.metric) AS metric,
               coalesce(a.txt, a.num::VARCHAR) AS a, coalesce(b.txt, b.num::VARCHAR) AS b,
               b.num - a.num AS b_minus_a, b.num / nullif(a.num, 0) AS b_over_a
        FROM a FULL OUTER JOIN b ON a.metric = b.metric
        ORDER BY coalesce(a.ord, 1000 + b.ord)
        """,
        (Param("run_a", None, "first run_id (required)"),
         Param("run_b", None, "second run_id (required)")),
        (("metric", "column of the run table"), ("a", "value in run_a (as text)"),
         ("b", "value in run_b (as text)"), ("b_minus_a", "numeric difference"),
         ("b_over_a", "numeric ratio")),
        resolve=_resolve_runs),
]



def _resolve_sweep(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    if not args["sweep_id"]:
        raise QueryError("sweep queries need --param sweep_id=ID (toolkit sweep --json prints "
                         "it; list them with: SELECT DISTINCT sweep_id FROM sweeps)")
    return args


def _sweep_queries() -> list[NamedQuery]:
    """The sweep result surfaces (SQL kept next to the sweep code, documented here)."""
    from toolkit.sweep.queries import SWEEP_QUERIES

    sweep = (Param("sweep_id", None, "the sweep's id (required; printed by toolkit sweep)"),)
    return [
        NamedQuery(
            "sweep_cells", "Every cell of one sweep: its status, the run that answers it, "
            "its wall time and error.", SWEEP_QUERIES["sweep_cells"], sweep,
            (("cell", "index in the grid's product order"), ("status", "done | skipped | failed"),
             ("run_id", "answering run"), ("seconds", "cell wall time (s; 0 if skipped)"),
             ("error", "error text of a failed cell"), ("cell_json", "the cell's settings")),
            resolve=_resolve_sweep),
        NamedQuery(
            "sweep_miss_surface", "Selection sweep surface: miss ratio and host-to-device "
            "bytes per (mode, policy, buffer, IndexShare) cell.",
            SWEEP_QUERIES["sweep_miss_surface"], sweep,
            (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
             ("buffer_tokens", "slots per (request, layer) buffer (tokens)"),
             ("indexshare", "IndexShare on"), ("miss_ratio", "misses / accesses"),
             ("misses", "count"), ("bytes_h2d", "bytes fetched host -> device"),
             ("cell", "grid index"), ("status", "done | skipped"), ("run_id", "id")),
            resolve=_resolve_sweep),
        NamedQuery(
            "sweep_cost_surface", "Tier sweep surface: $ per million tokens and hit rates per "
            "(hardware, device pool, concurrency) cell.", SWEEP_QUERIES["sweep_cost_surface"],
            sweep,
            (("trace", "name"), ("hardware", "name"), ("concurrency", "closed-loop users"),
             ("device_capacity_tokens", "GPU prefix pool (tokens)"),
             ("radix_semantics", "sglang | page"),
             ("usd_per_million_total_tokens", "$ per M input + output tokens"),
             ("tokens_per_s_per_gpu", "tok/s/GPU"), ("gpu_hit_rate", "share"),
             ("host_hit_rate", "share"), ("overall_hit_rate", "share"),
             ("p90_ttft_s", "s"), ("cell", "grid index"), ("status", "done | skipped"),
             ("run_id", "id")),
            resolve=_resolve_sweep),
    ]


_LIST.extend(_sweep_queries())

#: Every named query by name.
QUERIES: Mapping[str, NamedQuery] = {q.name: q for q in _LIST}


def get_query(name: str) -> NamedQuery:
    """The named query, or a one-line error listing the valid names."""
    try:
        return QUERIES[name]
    except KeyError:
        raise QueryError(f"unknown query {name!r}; known: {', '.join(sorted(QUERIES))}"
                         ) from None


def run_query(store: Store, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query; unspecified parameters take their defaults.

    Raises:
        QueryError: unknown query or parameter, or an invalid parameter value.
    """
    q = get_query(name)
    sql, args = q.bind(store, **params)
    con = store.con
    for t in q.bundled:
        con.register(t, _bundled_table(t))
    try:
        return con.sql(sql, params=args).pl() if args else store.query(sql)
    finally:
        for t in q.bundled:
            con.unregister(t)
