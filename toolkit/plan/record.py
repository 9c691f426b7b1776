"""``plan_runs``: a search's evaluated candidates, written with the replays they name."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from toolkit.config import config_json, fingerprint
from toolkit.plan.config import PlanConfig
from toolkit.store import Store, bounded_key


def plan_id(cfg: PlanConfig, ctx: Any = None) -> str:
    """The search's id: trace, model and the fingerprint of its normalised config, so the
    same question re-asked replaces its rows."""
    return bounded_key(f"plan-{cfg.trace}-{cfg.model}-{fingerprint(cfg)[:8]}")


def rows(cfg: PlanConfig, result: Any) -> list[dict[str, Any]]:
    """One ``plan_runs`` row per exactly evaluated candidate."""
    from toolkit.version import __version__

    out = []
    for ev in result.evaluated:
        c = ev["candidate"]
        p = (ev.get("load") or {}).get("plan") or ev.get("plan") or {}
        tier = ev.get("tier") or {}
        run_ids = p.get("run_ids") or ([tier["run_id"]] if tier else [])
        usd = p.get("usd_breakdown") or {}
        out.append({
            "run_id": result.plan_id, "plan_id": result.plan_id, "rank": p.get("rank"),
            "feasible": ev["feasible"],
            "why": ev.get("why"), "trace": cfg.trace, "model": cfg.model,
            "hardware": c.hardware, "engine": c.engine, "layout": p.get("layout"),
            "gpus": p.get("gpus"), "concurrency": p.get("concurrency"),
            "users_per_instance": ev.get("users"), "converged": ev.get("converged"),
            "device_prefix_tokens": p.get("device_prefix_tokens",
                                          tier.get("device_capacity_tokens")),
            "hisparse_buffer_tokens": ev.get("hisparse_buffer_tokens"),
            "engram_hbm_gb": ev.get("engram_hbm_gb", 0.0), "host_dram_gb": c.host_dram_gb,
            "ssd_gb": c.ssd_gb,
            "policy": c.policy,
            "gpu_hit_share": p.get("gpu_hit_share", tier.get("gpu_hit_rate")),
            "host_hit_share": p.get("host_hit_share", tier.get("host_hit_rate")),
            "storage_hit_share": p.get("storage_hit_share", tier.get("storage_hit_rate")),
            "hisparse_misses_per_layer": p.get("hisparse_misses_per_layer"),
            "interactivity": cfg.interactivity, "max_p90_ttft_s": cfg.max_p90_ttft_s,
            "p90_ttft_s": p.get("p90_ttft_s"), "tput_per_gpu": p.get("tput_per_gpu"),
            "usd_per_mtok_total": p.get("usd_per_mtok_total"),
            "usd_per_mtok_total_low": p.get("usd_per_mtok_total_low"),
            "usd_per_mtok_total_high": p.get("usd_per_mtok_total_high"),
            "usd_per_mtok_gpu": usd.get("gpu"), "usd_per_mtok_dram": usd.get("dram"),
            "usd_per_mtok_ssd": usd.get("ssd"),
            "bound_usd_per_mtok": ev["bound"] if ev.get("bound") not in (None,
                                                                       float("inf")) else None,
            "price_tier": cfg.price_tier, "run_ids": json.dumps(run_ids),
            "searched": result.searched, "evaluated_exactly": result.evaluated_exactly,
            "elapsed_s": result.elapsed_s,
            "assumptions_json": json.dumps(result.assumptions),
            "config_json": config_json(cfg), "toolkit_version": __version__,
            **_load_columns(ev),
        })
    return out


def _load_columns(ev: dict[str, Any]) -> dict[str, Any]:
    """The load's columns of a candidate the instance search sized (all null otherwise)."""
    load = ev.get("load")
    if not load:
        return {}
    probes = [{"instances": q.instances, "ok": q.ok, "misses": list(q.misses),
               "p90_ttft_s": q.summary["p90_ttft_s"],
               "median_tpot_s": q.summary.get("median_tpot_s"),
               "run_id": q.summary["run_id"]} for q in load["probes"]]
    out: dict[str, Any] = {"load_json": json.dumps({"probes": probes,
                                                    "why": load.get("why")})}
    if load.get("best") is None:
        return out
    p = load["plan"]
    out.update({k: p[k] for k in ("instances", "gpus_total", "host_dram_gb_total",
                                  "ssd_gb_total", "users", "rate_rps", "router", "binding",
                                  "usd_per_hour_total", "cluster_run_id")})
    return out


def cluster_results(ev: dict[str, Any]) -> list[Any]:
    """The cluster replays a sized candidate's row names: at its answer and one instance
    below it (the run that shows what binds)."""
    load = ev.get("load") or {}
    best = load.get("best")
    if best is None:
        return []
    return [q.result for q in load["probes"]
            if q.instances in (best.instances, best.instances - 1)]


def save_plan(store: Store, cfg: PlanConfig, ctx: Any, result: Any) -> None:
    """Write ``plan_runs`` and every tier, selection, Engram and cluster replay its rows
    name, all or nothing (one store transaction)."""
    from toolkit.replay.selections import replay_selections
    from toolkit.replay.tiers import save_result
    from toolkit.schema import PLAN_RUNS

    table = rows(cfg, result)
    names = set(PLAN_RUNS.names)
    table = [{k: v for k, v in r.items() if k in names} for r in table]
    with store.transaction():
        tiers = {ev["tier"]["run_id"]: ev["tier"]["result"] for ev in result.evaluated
                 if ev.get("tier")}
        for res in tiers.values():
            save_result(store, res)
        sels = {ev["sel"]["run_id"]: ev["sel"]["cfg"] for ev in result.evaluated
                if ev.get("sel")}
        for scfg in sels.values():
            replay_selections(store, scfg, rows=ctx.rows, progress=False)
        engrams = {ev["engram"]["run"]["run_id"]: ev["engram"]["run"]
                   for ev in result.evaluated if (ev.get("engram") or {}).get("run")}
        for run_id, row in engrams.items():
            store.write_row("engram_runs", run_id, row, replace=True)
        from toolkit.replay.tiers.cluster import save_cluster

        clusters = {r.summary["run_id"]: r for ev in result.evaluated
                    for r in cluster_results(ev)}
        for res in clusters.values():
            save_cluster(store, res)
        store.write("plan_runs", result.plan_id,
                    pa.Table.from_pylist(table, schema=PLAN_RUNS), replace=True)
