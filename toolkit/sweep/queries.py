"""SQL over a sweep's cells joined to their runs: the result surface of one sweep.

Registered as named queries in :mod:`toolkit.analysis.queries` (each is
``$sweep_id``-parametrised; skipped cells point at the run that answered them, so a resumed
sweep shows every cell).
"""

from __future__ import annotations

import polars as pl

from toolkit.store import Store

SWEEP_QUERIES: dict[str, str] = {
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


def sweep_query(store: Store, name: str, sweep_id: str) -> pl.DataFrame:
    """Run one of :data:`SWEEP_QUERIES` for ``sweep_id`` (they are registered named
    queries too: ``run_query(store, name, sweep_id=...)``, ``toolkit sql --query``)."""
    from toolkit.analysis.queries import run_query

    if name not in SWEEP_QUERIES:
        raise KeyError(f"unknown sweep query {name!r}; known: "
                       f"{', '.join(sorted(SWEEP_QUERIES))}")
    return run_query(store, name, sweep_id=sweep_id)
