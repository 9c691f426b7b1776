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
    bound = p["max_p90_ttft_s"]
    slack = None if bound is None or p["p90_ttft_s"] is None else 1 - p["p90_ttft_s"] / bound
    if slack is not None and slack < TTFT_SLACK:
        binding = (f"p90 TTFT: {p['p90_ttft_s']:.2f} s of the {bound:g} s bound "
                   f"({slack:.0%} slack)")
    else:
        binding = (f"interactivity: {p['interactivity']:g} tok/s/user sets the front point "
                   f"({p['layout']}); p90 TTFT {p['p90_ttft_s']:.2f} s"
                   + (f" has {slack:.0%} slack to {bound:g} s" if slack is not None else ""))
    alts = {}
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
            "usd_per_mtok_ssd")
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
