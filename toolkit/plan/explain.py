"""``toolkit plan explain``: why a stored plan was chosen, from ``plan_runs`` alone."""

from __future__ import annotations

import json
from typing import Any

from toolkit.plan.search import PlanError
from toolkit.store import Store

DIMENSIONS = ("hardware", "host_dram_gb", "ssd_gb", "policy", "hisparse_buffer_tokens",
              "device_prefix_tokens", "engram_hbm_gb")
"""The dimensions an alternative is sought along (the serving layout and concurrency are
read off the front at the target, so their alternative is another row of the front)."""

TTFT_SLACK = 0.1
"""A p90 TTFT within 10% of its bound is reported as the binding constraint."""


def _front_binding(p: dict[str, Any]) -> str:
    """What binds a plan at the front (no load): p90 TTFT within 10% of its bound, else the
    interactivity target."""
    bound = p["max_p90_ttft_s"]
    slack = None if bound is None or p["p90_ttft_s"] is None else 1 - p["p90_ttft_s"] / bound
    if slack is not None and slack < TTFT_SLACK:
        return (f"p90 TTFT: {p['p90_ttft_s']:.2f} s of the {bound:g} s bound "
                f"({slack:.0%} slack)")
    return (f"interactivity: {p['interactivity']:g} tok/s/user sets the front point "
            f"({p['layout']}); p90 TTFT {p['p90_ttft_s']:.2f} s"
            + (f" has {slack:.0%} slack to {bound:g} s" if slack is not None else ""))


def load_binding(p: dict[str, Any]) -> str:
    """What binds a plan at its load, in words: the SLO(s) the cluster replay of one
    instance fewer misses (with its figures), or the floor of one instance."""
    load = json.loads(p["load_json"]) if p.get("load_json") else {"probes": []}
    n = p["instances"]
    below = next((q for q in load["probes"] if q["instances"] == n - 1), None)
    what = (f"{p['users']} users" if p.get("users") is not None
            else f"{p['rate_rps']:.3g} requests/s")
    head = (f"at {what} ({p['router']} router) {n} x {p['layout']} = {p['gpus_total']} GPUs "
            f"meet p90 TTFT {p['p90_ttft_s']:.2f} s <= {p['max_p90_ttft_s']} s and "
            f"{p['interactivity']:g} tok/s/user")
    if n == 1 or below is None:
        return head + "; one instance is the floor (the load does not fill it)"
    tpot = below["median_tpot_s"]
    return (head + f"; {n - 1} would miss {' and '.join(below['misses'])} (p90 TTFT "
            f"{below['p90_ttft_s']:.2f} s, {1.0 / tpot if tpot else 0.0:.1f} tok/s/user)")


def explain(store: Store, plan: str) -> dict[str, Any]:
    """The plan ``plan`` (``PLAN_ID`` or ``PLAN_ID/RANK``): its row, the binding constraint
    and the cheapest exactly evaluated alternative along each dimension."""
    pid, _, rank = plan.partition("/")
    try:
        r = int(rank) if rank else 1
    except ValueError:
        raise PlanError(f"--plan {plan!r}: RANK after '/' must be a number") from None
    rows = store.query("SELECT * FROM plan_runs WHERE plan_id = $p", {"p": pid}).to_dicts()
    if not rows:
        raise PlanError(f"--plan {pid!r}: no such plan in {store.root}'s plan_runs")
    chosen = [x for x in rows if x["rank"] == r]
    if not chosen:
        raise PlanError(f"--plan {plan!r}: plan {pid} has ranks 1-"
                        f"{max(x['rank'] or 0 for x in rows)}")
    p = chosen[0]
    binding = load_binding(p) if p.get("instances") is not None else _front_binding(p)
    alts = {}
    if p.get("instances") is not None:  # at the load, compare only sized alternatives
        rows = [x for x in rows if x.get("instances") is not None or not x["feasible"]]
    for dim in DIMENSIONS:
        others = [x for x in rows if x[dim] != p[dim]]
        ok = sorted((x for x in others if x["feasible"]), key=lambda x: x["usd_per_mtok_total"])
        if ok:
            a = ok[0]
            alts[dim] = {"value": a[dim], "usd_per_mtok_total": a["usd_per_mtok_total"],
                         "delta_usd_per_mtok": a["usd_per_mtok_total"] - p["usd_per_mtok_total"],
                         "ratio": a["usd_per_mtok_total"] / p["usd_per_mtok_total"],
                         "rank": a["rank"], "hardware": a["hardware"], "layout": a["layout"]}
        elif others:
            lb = sorted((x for x in others if x["bound_usd_per_mtok"] is not None),
                        key=lambda x: x["bound_usd_per_mtok"])
            a = lb[0] if lb else others[0]
            alts[dim] = {"value": a[dim], "usd_per_mtok_total": None,
                         "bound_usd_per_mtok": a["bound_usd_per_mtok"], "why": a["why"]}
        else:
            alts[dim] = {"value": None, "why": "no alternative evaluated exactly (pruned by "
                         "its lower bound, or a single option was allowed)"}
    keep = ("plan_id", "rank", "hardware", "engine", "layout", "gpus", "concurrency",
            "device_prefix_tokens", "hisparse_buffer_tokens", "engram_hbm_gb", "host_dram_gb",
            "ssd_gb",
            "policy", "gpu_hit_share", "host_hit_share", "storage_hit_share", "p90_ttft_s",
            "tput_per_gpu", "usd_per_mtok_total", "usd_per_mtok_gpu", "usd_per_mtok_dram",
            "usd_per_mtok_ssd", "instances", "gpus_total", "host_dram_gb_total",
            "ssd_gb_total", "users", "rate_rps", "router", "binding", "usd_per_hour_total",
            "cluster_run_id")
    return {"plan": {k: p[k] for k in keep}, "run_ids": json.loads(p["run_ids"]),
            "binding": binding, "alternatives": alts,
            "evaluated_exactly": p["evaluated_exactly"], "searched": p["searched"],
            "assumptions": json.loads(p["assumptions_json"])}


def explain_text(out: dict[str, Any]) -> str:
    p = out["plan"]
    lines = [f"plan {p['plan_id']}/{p['rank']}: {p['hardware']} {p['engine']} {p['layout']} "
             f"at ${p['usd_per_mtok_total']:.4f}/M total (GPU {p['usd_per_mtok_gpu']:.4f}, "
             f"DRAM {p['usd_per_mtok_dram']:.4f}, SSD {p['usd_per_mtok_ssd']:.4f})",
             f"binding constraint: {out['binding']}",
             f"runs: {', '.join(out['run_ids'])}",
             "next-best alternative per dimension (exactly evaluated candidates only; "
             f"{out['evaluated_exactly']} of {out['searched']}):"]
    for dim, a in out["alternatives"].items():
        if a.get("usd_per_mtok_total") is not None:
            lines.append(f"  {dim}: {p[dim]} -> {a['value']}: ${a['usd_per_mtok_total']:.4f}/M "
                         f"({a['ratio']:.3f}x, {a['delta_usd_per_mtok']:+.4f})")
        else:
            if a.get("value") is None:  # nothing to go to: say why, not "-> None"
                lines.append(f"  {dim}: {p[dim]}, {a['why']}")
            else:
                lines.append(f"  {dim}: {p[dim]} -> {a['value']}: {a['why']}")
    return "\n".join(lines)
