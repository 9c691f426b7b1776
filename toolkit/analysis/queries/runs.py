"""Queries over every run table at once: list the runs, compare any two."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from toolkit import schema
from toolkit.analysis.queries.named import NamedQuery, Param, QueryError
from toolkit.store import Store

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


#: The runs queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
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
)
