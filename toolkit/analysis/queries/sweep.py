"""Sweep queries: the result surface of one sweep, its cells joined to the runs that answer
them.

Each is ``$sweep_id``-parametrised; skipped cells point at the run that answered them, so a
resumed sweep shows every cell. The sweep package writes the ``sweeps`` table and reads
nothing from here.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from toolkit.analysis.queries.named import NamedQuery, Param, QueryError
from toolkit.store import Store

_SQL: dict[str, str] = {
    # Status of every cell of one sweep: which run answers it, how long it took, why it
    # failed. Columns: cell, status, run_id, seconds (s), error, cell_json.
    "sweep_cells": """
        SELECT cell, status, run_id, seconds, error, cell_json
        FROM sweeps WHERE sweep_id = $sweep_id ORDER BY cell
    """,
    # Selection sweep surface: miss ratio (misses / accesses) and host->device bytes per
    # (policy, buffer_tokens, mode, IndexShare) cell. Columns: trace, mode, policy,
    # buffer_tokens (slots per request x layer), indexshare, miss_ratio, misses, bytes_h2d.
    "sweep_miss_surface": """
        SELECT r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare, r.miss_ratio,
               r.misses, r.bytes_h2d, s.cell, s.status, s.run_id
        FROM sweeps s JOIN selection_runs r USING (run_id)
        WHERE s.sweep_id = $sweep_id
        ORDER BY r.trace, r.mode, r.policy, r.buffer_tokens, r.indexshare
    """,
    # Tier sweep surface: $ per million total tokens and hit rates per (hardware,
    # concurrency, device pool) cell. Columns: trace, hardware, concurrency (users),
    # device_capacity_tokens, usd_per_million_total_tokens ($/M input + output tokens),
    # tokens_per_s_per_gpu, gpu_hit_rate, host_hit_rate, overall_hit_rate, p90_ttft_s (s).
    "sweep_cost_surface": """
        SELECT r.trace, r.hardware, r.concurrency, r.device_capacity_tokens,
               r.radix_semantics, r.usd_per_million_total_tokens, r.tokens_per_s_per_gpu,
               r.gpu_hit_rate, r.host_hit_rate, r.overall_hit_rate, r.p90_ttft_s,
               s.cell, s.status, s.run_id
        FROM sweeps s JOIN tier_runs r USING (run_id)
        WHERE s.sweep_id = $sweep_id
        ORDER BY r.trace, r.hardware, r.device_capacity_tokens, r.concurrency
    """,
}


def _resolve_sweep(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    if not args["sweep_id"]:
        raise QueryError("sweep queries need --param sweep_id=ID (toolkit sweep --json prints "
                         "it; list them with: SELECT DISTINCT sweep_id FROM sweeps)")
    return args


_SWEEP = (Param("sweep_id", None, "the sweep's id (required; printed by toolkit sweep)"),)

#: The sweep queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "sweep_cells", "Every cell of one sweep: its status, the run that answers it, "
        "its wall time and error.", _SQL["sweep_cells"], _SWEEP,
        (("cell", "index in the grid's product order"), ("status", "done | skipped | failed"),
         ("run_id", "answering run"), ("seconds", "cell wall time (s; 0 if skipped)"),
         ("error", "error text of a failed cell"), ("cell_json", "the cell's settings")),
        resolve=_resolve_sweep),
    NamedQuery(
        "sweep_miss_surface", "Selection sweep surface: miss ratio and host-to-device "
        "bytes per (mode, policy, buffer, IndexShare) cell.",
        _SQL["sweep_miss_surface"], _SWEEP,
        (("trace", "name"), ("mode", "plain | hisparse"), ("policy", "name"),
         ("buffer_tokens", "slots per (request, layer) buffer (tokens)"),
         ("indexshare", "IndexShare on"), ("miss_ratio", "misses / accesses"),
         ("misses", "count"), ("bytes_h2d", "bytes fetched host -> device"),
         ("cell", "grid index"), ("status", "done | skipped"), ("run_id", "id")),
        resolve=_resolve_sweep),
    NamedQuery(
        "sweep_cost_surface", "Tier sweep surface: $ per million tokens and hit rates per "
        "(hardware, device pool, concurrency) cell.", _SQL["sweep_cost_surface"],
        _SWEEP,
        (("trace", "name"), ("hardware", "name"), ("concurrency", "closed-loop users"),
         ("device_capacity_tokens", "GPU prefix pool (tokens)"),
         ("radix_semantics", "sglang | page"),
         ("usd_per_million_total_tokens", "$ per M input + output tokens"),
         ("tokens_per_s_per_gpu", "tok/s/GPU"), ("gpu_hit_rate", "share"),
         ("host_hit_rate", "share"), ("overall_hit_rate", "share"),
         ("p90_ttft_s", "s"), ("cell", "grid index"), ("status", "done | skipped"),
         ("run_id", "id")),
        resolve=_resolve_sweep),
)


def sweep_query(store: Store, name: str, sweep_id: str) -> pl.DataFrame:
    """Run the sweep query ``name`` for ``sweep_id`` (the same as ``run_query(store, name,
    sweep_id=...)`` or ``toolkit sql --query``, restricted to the sweep queries)."""
    by_name = {q.name: q for q in NAMED}
    if name not in by_name:
        raise KeyError(f"unknown sweep query {name!r}; known: {', '.join(sorted(by_name))}")
    return by_name[name].run(store, sweep_id=sweep_id)
