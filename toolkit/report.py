"""Self-contained HTML report of a store: headline tables, one section per analysis present,
hardware provenance, the list of runs; every chart also as SVG and PNG.

Why this shape: a report must open offline years later (all JavaScript inline, one
vega-embed per chart, so one broken chart cannot hide the others) and every figure in it
must be re-derivable: each table and chart comes from a named query (``toolkit sql --query
NAME``), and each headline row names the run it came from.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import altair as alt
import polars as pl

from toolkit import charts as ch
from toolkit.analysis.queries import run_query
from toolkit.store import Store
from toolkit.version import __version__

HTML_NAME = "index.html"


@dataclass(frozen=True)
class Figure:
    """One chart: a file stem, the named query it draws, and what it shows in words."""

    stem: str
    query: str
    explanation: str
    chart: alt.TopLevelMixin


@dataclass(frozen=True)
class Section:
    """One analysis: text, tables (title, frame) and figures."""

    key: str
    title: str
    intro: str
    tables: tuple[tuple[str, pl.DataFrame], ...] = ()
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True)
class Report:
    """Everything the HTML shows, built from a store without drawing anything."""

    title: str
    store_root: str
    headline: tuple[tuple[str, pl.DataFrame], ...]
    sections: tuple[Section, ...]
    provenance: pl.DataFrame
    runs: pl.DataFrame
    figures: tuple[Figure, ...] = field(default=())


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _has(store: Store, table: str) -> bool:
    return bool(store.query(f"SELECT count(*) > 0 FROM {table}").item())


# --- sections --------------------------------------------------------------------------------

def _prefix(store: Store) -> Section | None:
    if not store.query("SELECT count(*) FROM replay_runs WHERE kind = 'prefix'").item():
        return None
    curve = run_query(store, "prefix_hit_curve")
    tok = curve.filter(pl.col("metric") == "token_hit_ratio")
    unb = tok.filter(pl.col("capacity_blocks").is_null())
    bounded = tok.filter(pl.col("capacity_blocks").is_not_null()).sort("capacity_tokens")
    parts = []
    for t in unb["trace"].unique(maintain_order=True):
        u = unb.filter(pl.col("trace") == t)["ratio"].max()
        b = bounded.filter(pl.col("trace") == t)
        s = f"On {t}, an unbounded LRU cache hits {_pct(u)} of prompt tokens"
        if b.height:
            r = b.row(0, named=True)
            s += (f"; the smallest cache replayed ({r['capacity_tokens']:,} tokens, "
                  f"{r['capacity_gb']:.1f} GB of {r['kv_model']} KV) hits {_pct(r['ratio'])}")
        parts.append(s + ".")
    rules = ("; the dashed rules are the unbounded cache, the most any cache can hit"
             if unb.height else "")
    fig = Figure("prefix_hit_ratio", "prefix_hit_curve",
                 "Hit ratio of the prefix-block cache against its capacity (log scale, tokens and "
                 f"GB){rules}. " + " ".join(parts), ch.hit_ratio_vs_capacity(curve))
    return Section("prefix", "Prefix caching", "Block-level replay of request timelines "
                   "(chained prefix-block hashes) through a cache of fixed capacity.",
                   (("Prefix replay runs", run_query(store, "prefix_runs")),), (fig,))


def _selections(store: Store) -> Section | None:
    if not _has(store, "selection_runs"):
        return None
    mrc = run_query(store, "miss_ratio_curve")
    figs = []
    vs = run_query(store, "policy_vs_opt")
    gap = ""
    if vs.height:
        worst = vs.sort("misses_over_opt", descending=True, nulls_last=True).row(0, named=True)
        gap = (f" The largest gap to OPT: {worst['policy']} at {worst['buffer_tokens']:,} tokens "
               f"takes {worst['misses_over_opt']:.2f}x OPT's misses ({worst['trace']}, "
               f"{worst['mode']}).")
    bound = (" the dashed OPT (Belady) line is the bound no online policy can beat."
             if mrc["is_bound"].any() else " No OPT run: no bound is drawn.")
    modes = mrc["mode"].unique().sort().to_list()
    split = (" Plain and HiSparse runs are separate lines (marker: mode)." if len(modes) > 1
             else "")
    figs.append(Figure("miss_ratio_curve", "miss_ratio_curve",
                       "Miss ratio of the per-layer device buffer against its size, per policy "
                       "and trace;" + bound + split + gap, ch.miss_ratio_curves(mrc)))
    cdf = run_query(store, "miss_latency_cdf")
    if cdf.height:
        from toolkit.hardware import get_hardware
        from toolkit.serving.transfer import transfer_path

        p99 = run_query(store, "miss_latency", per="layer")["p99_miss_latency_s"].max()
        fixed_s = transfer_path(get_hardware("gb200"), "sm_kernel", concurrent=True).t_fixed_s
        busy = cdf.filter(pl.col("miss_latency_s") > 0)["miss_latency_s"]
        share = fixed_s / float(busy.median()) if busy.len() else 0.0
        figs.append(Figure(
            "miss_latency_cdf", "miss_latency_cdf",
            "Distribution of the time to fetch one request's missed rows of one layer over "
            "GB200's host link (SM gather kernel, all GPUs loading): one round trip plus bytes "
            "over bandwidth, for the trace's own misses (not scaled to a model's k). The "
            f"assumed {1e6 * fixed_s:.2f} µs round trip is {_pct(share)} of the median "
            "non-zero latency, so the curves measure that assumption more than the policies; "
            f"the worst per-layer p99 is {1e6 * p99:.2f} µs.",
            ch.miss_latency_cdf(cdf, fixed_s=fixed_s, interactive=True)))
    loc = run_query(store, "selection_locality")
    if loc.height:
        tr = loc["trace"].first()
        one = loc.filter(pl.col("trace") == tr)
        figs.append(Figure(
            "selection_locality", "selection_locality",
            f"Per layer of {tr}: share of selected positions among the last 128, share of "
            "selections holding position 0, and overlap with the next step and the next layer "
            f"(|A∩B|/k). Mean step overlap {one['step_overlap_of_k'].mean():.2f}: the share an "
            "LRU buffer can turn into hits.",
            ch.metric_by_layer(one, ["frac_recent", "pos0_rate", "step_overlap_of_k",
                                     "layer_overlap_of_k"],
                               f"{tr}: selection locality per layer")))
    return Section("selections", "Top-k selections (HiSparse device buffer)",
                   "Replays of recorded top-k selections through a per-request, per-layer "
                   "device buffer.",
                   (("Selection replay runs", run_query(store, "selection_runs")),),
                   tuple(figs))


def _tiers(store: Store) -> Section | None:
    if not _has(store, "tier_runs"):
        return None
    reuse = _with_config(run_query(store, "tier_reuse"))
    wide = _tier_rates(reuse)
    best = wide.sort("overall", descending=True).row(0, named=True)
    text = (f"Share of each tier run's prompt tokens served from GPU, host DRAM and storage, "
            f"or recomputed: one bar per run, so each sums to 100%; panels split trace and "
            f"hardware. Highest overall reuse: {_pct(best['overall'])} ({best['trace']}, "
            f"{best['hardware']}, {best['config']}; GPU {_pct(best['GPU (L1)'])}, host "
            f"{_pct(best['host (L2)'])}). " + _concurrency_effect(wide))
    return Section("tiers", "Prefix tiers (GPU / host / storage)",
                   "Timeline replays of the prefix cache across memory tiers with service "
                   "times from the hardware specs.", (),
                   (Figure("tier_reuse", "tier_reuse", text, ch.tier_reuse_bars(reuse)),))


#: What, besides the load, makes two tier runs different configurations.
_POOL = ("device_capacity_tokens", "host_capacity_tokens", "storage_capacity_tokens",
         "policy", "write_policy", "radix_semantics", "model")


def _tokens(n: object) -> str:
    if n is None:
        return "?"
    n = float(n)  # type: ignore[arg-type]
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n / 1e3:.0f}K" if n >= 1e3 else f"{n:.0f}"


def _with_config(reuse: pl.DataFrame) -> pl.DataFrame:
    """A readable label per tier run: load, then what its pools were (host and storage in
    tokens, shown when not all runs share them) and its policy when several were run."""
    runs = reuse.unique("run_id", maintain_order=True)
    varies = {c for c in _POOL if c in runs.columns and runs[c].n_unique() > 1}
    labels = {}
    for r in runs.iter_rows(named=True):
        parts = ["trace arrivals" if r["concurrency"] is None else f"{r['concurrency']} users"]
        if "device_capacity_tokens" in varies:
            parts.append(f"GPU {_tokens(r['device_capacity_tokens'])}")
        if "host_capacity_tokens" in varies:
            parts.append(f"host {_tokens(r['host_capacity_tokens'])}")
        if "storage_capacity_tokens" in varies:
            parts.append(f"SSD {_tokens(r['storage_capacity_tokens'])}")
        for c in ("policy", "write_policy", "radix_semantics", "model"):
            if c in varies:
                parts.append(str(r[c]))
        labels[r["run_id"]] = ", ".join(parts)
    return reuse.with_columns(pl.col("run_id").replace_strict(labels).alias("config"))


def _concurrency_effect(wide: pl.DataFrame) -> str:
    """One sentence on how overall reuse moves with the number of users, computed only
    between runs that differ in nothing else (same trace, hardware, pools and policy)."""
    closed = wide.filter(pl.col("concurrency").is_not_null())
    keys = ["trace", "hardware", *[c for c in _POOL if c in closed.columns]]
    groups = closed.group_by(keys).agg(
        pl.col("concurrency").n_unique().alias("loads"),
        (pl.col("overall").max() - pl.col("overall").min()).alias("spread"),
        pl.col("concurrency").min().alias("lo_users"),
        pl.col("concurrency").max().alias("hi_users"))
    groups = groups.filter(pl.col("loads") > 1)
    if not groups.height:
        return ("No two runs differ only in their number of users, so this chart says "
                "nothing about load.")
    users = "/".join(str(c) for c in _numeric_order(closed["concurrency"]))
    top = groups.sort("spread", descending=True).row(0, named=True)
    if top["spread"] < 0.02:
        return (f"Across {users} users overall reuse moves by at most "
                f"{100 * top['spread']:.2f} points between runs that differ only in their "
                "number of users (same trace, hardware and pools): the load does not "
                "change where prompt tokens come from.")
    return (f"Across {users} users overall reuse moves by up to {100 * top['spread']:.1f} "
            f"points between runs that differ only in their number of users ({top['trace']}, "
            f"{top['hardware']}, {top['lo_users']} to {top['hi_users']} users): more "
            "concurrent users compete for the same pools.")


def _numeric_order(values: pl.Series) -> list:
    return sorted(set(values.drop_nulls().to_list()))


def _tier_rates(reuse: pl.DataFrame) -> pl.DataFrame:
    if "config" not in reuse.columns:
        reuse = _with_config(reuse)
    index = ["run_id", "trace", "hardware", "config", "concurrency",
             *[c for c in _POOL if c in reuse.columns]]
    wide = reuse.pivot(on="source", index=index, values="share")
    hits = [c for c in ("GPU (L1)", "host (L2)", "storage (L3)") if c in wide.columns]
    return wide.with_columns(pl.sum_horizontal(hits).alias("overall")).sort(
        "trace", "hardware", "concurrency", nulls_last=False)


def _cost(store: Store) -> Section | None:
    cost = run_query(store, "cost_per_mtok")
    if not cost.height and not run_query(store, "compare_answers").height:
        return None
    pub = run_query(store, "published_costs")
    what = {"decode": "priced selection replays (the serving model's decode step, one row of "
                      "decode_costs per hardware, batch and overlap)",
            "tiers": "prefix-tier replays timed by the serving model (one tier run per "
                     "hardware and concurrency)"}
    figs = []
    for source in sorted(set(cost["source"])):
        one = cost.filter(pl.col("source") == source)
        cheapest = one.sort("usd_per_mtok_total").row(0, named=True)
        figs.append(Figure(
            f"cost_vs_interactivity_{source}", "cost_per_mtok",
            f"$ per million total tokens against interactivity (tok/s/user) of the "
            f"{what.get(source, source)}, per hardware; lines join each hardware's "
            "Pareto-optimal runs, diamonds are published figures for GLM-5.3 agentic serving "
            "(a different workload, for scale only). Cheapest: "
            f"{cheapest['hardware']} {cheapest['setting']} at "
            f"${cheapest['usd_per_mtok_total']:.4f}/M.",
            ch.cost_pareto(one, pub, f"Cost vs interactivity: {source} "
                           "(lines: Pareto fronts; diamonds: published)", interactive=True)))
    answers = run_query(store, "compare_answers")
    if answers.height:
        ok = answers.filter(pl.col("reachable"))
        at = ok.filter(pl.col("interactivity") == ok["interactivity"].max()) if ok.height \
            else ok
        reach = (ok.group_by("hardware").agg(pl.col("interactivity").max())
                 .sort("hardware").iter_rows())
        figs.append(Figure(
            "cost_compare_band", "compare_answers",
            "$ per million total tokens at target interactivities from `toolkit cost compare` "
            "(GLM-5.2, the demo's agentic mix, p90 TTFT <= 10 s), one line per accelerator and "
            "engine; the shaded band is the 10-90% range of the serving model's "
            "cross-validated error; points by how the answer was reached (filled circles: "
            "measured, half-filled squares: blended, the model's curve corrected by the "
            "nearest measured runs, hollow triangles: modelled); "
            "diamonds are published GLM-5.3 figures (a different workload, for scale). "
            "Fastest target reached: "
            + ", ".join(f"{h} {x:.0f} tok/s/user" for h, x in reach)
            + (f"; at {at['interactivity'][0]:.0f} the band spans "
               f"${at['usd_per_mtok_total_low'].min():.4f}-"
               f"${at['usd_per_mtok_total_high'].max():.4f}/M." if at.height
               and at['usd_per_mtok_total_low'].null_count() < at.height else "."),
            ch.cost_band(answers, pub, "Cost vs interactivity from cost compare "
                         "(band: cross-validated error; diamonds: published)",
                         interactive=True)))
    steps = run_query(store, "step_time")
    if steps.height:
        exposed = steps.filter(pl.col("term_rank") == 2)
        worst = exposed.sort("time_s", descending=True).row(0, named=True)
        figs.append(Figure(
            "step_time", "step_time",
            "Mean decode-step time of each priced selection replay (the serving model, "
            "efficiencies fitted on InferenceX DeepSeek-R1 points), split into the step's "
            "work (GEMMs, attention, communication, overhead) and the miss I/O it does not "
            "hide. Most exposed I/O: "
            f"{worst['config']}, {1e3 * worst['time_s']:.2f} of {1e3 * worst['mean_tpot_s']:.2f}"
            " ms.", ch.step_time_breakdown(steps)))
    return Section("cost", "Cost", "Prices are survey values per GPU-hour (vintage in the "
                   "provenance table); throughput counts input + output tokens.",
                   (("Published figures shown", pub),), tuple(figs))


def _latest_plans(store: Store) -> pl.DataFrame:
    """``capacity_plan_best`` rows of the latest plan search of each trace (the one written
    last; a plan id is the fingerprint of its configuration)."""
    best = run_query(store, "capacity_plan_best")
    if not best.height:
        return best
    written = {}
    for pid in best["plan_id"].unique().to_list():
        stamp = store.source_stamp("plan_runs", pid)
        written[pid] = stamp[1] if stamp else 0
    latest = (pl.DataFrame({"plan_id": list(written), "written": list(written.values())})
              .join(best.select("plan_id", "trace").unique(), on="plan_id")
              .sort("written", "plan_id").group_by("trace").last())
    return best.filter(pl.col("plan_id").is_in(latest["plan_id"].to_list())).sort(
        "trace", "usd_per_mtok_total")


def _plans(store: Store) -> Section | None:
    plans = run_query(store, "capacity_plans")
    if not plans.height:
        return None
    best = _latest_plans(store)
    figs, tables = [], []
    if best.height:
        parts = []
        for tr in best["trace"].unique(maintain_order=True).to_list():
            one = best.filter(pl.col("trace") == tr).sort("usd_per_mtok_total")
            top = one.row(0, named=True)
            s = (f"{tr} (plan {top['plan_id']}, target {top['interactivity']:g} tok/s/user): "
                 f"{top['hardware']} is cheapest at ${top['usd_per_mtok_total']:.4f}/M "
                 f"(GPU ${top['usd_per_mtok_gpu']:.4f}, DRAM ${top['usd_per_mtok_dram']:.4f}, "
                 f"SSD ${top['usd_per_mtok_ssd']:.4f})")
            if one.height > 1:
                nxt = one.row(1, named=True)
                s += (f"; next {nxt['hardware']} at "
                      f"{nxt['usd_per_mtok_total'] / top['usd_per_mtok_total']:.2f}x that")
            parts.append(s + ".")
        figs.append(Figure(
            "plan_cost", "capacity_plan_best",
            "Best plan per accelerator of the latest plan search of each trace, all at that "
            "plan's target interactivity: $ per million total tokens split into what it pays "
            "for (GPUs, host DRAM, SSD), the black bar the 10-90% cross-validated band of "
            "the total. " + " ".join(parts), ch.plan_cost_bars(best)))
        figs.append(Figure(
            "plan_hits", "capacity_plan_best",
            "The same plans: share of prompt tokens served from GPU, host DRAM and SSD (the "
            "rest recomputed). Highest GPU share: "
            + "; ".join(f"{r['trace']} {r['hardware']} {_pct(r['gpu_hit_share'] or 0)}"
                        for r in best.sort("gpu_hit_share", descending=True, nulls_last=True)
                        .group_by("trace", maintain_order=True).first().iter_rows(named=True))
            + ".", ch.plan_hit_bars(best)))
        tables.append(("Best plan per accelerator (latest plan of each trace, at its target)",
                       _best_table(best)))
    tables.append(("Ranked plans of every plan search", plans.drop("run_ids")))
    return Section(
        "plan", "Capacity plan",
        "`toolkit plan`: the cheapest configurations for a recorded workload (named queries "
        "capacity_plan_best and capacity_plans). Hit shares come from the tier replays named "
        "in run_ids, $ from cost compare's front with those shares plus sourced DRAM and NVMe "
        "$/GB-hour.", tuple(tables), tuple(figs))


def _best_table(best: pl.DataFrame) -> pl.DataFrame:
    return best.select(
        "trace", "hardware", "interactivity", "usd_per_mtok_total", "usd_per_mtok_total_low",
        "usd_per_mtok_total_high", "usd_per_mtok_gpu", "usd_per_mtok_dram", "usd_per_mtok_ssd",
        "tput_per_gpu", "p90_ttft_s", "host_dram_gb", "ssd_gb", "gpu_hit_share",
        "host_hit_share", "storage_hit_share", "engine", "layout", "plan_id")


def _engram(store: Store) -> Section | None:
    if not _has(store, "engram_runs"):
        return None
    curve = run_query(store, "engram_hit_curve")
    runs = curve.filter(pl.col("source") == "replay").sort("hit_ratio", descending=True)
    figs = []
    if curve.height:
        best = runs.row(0, named=True) if runs.height else None
        text = ("Hit ratio of an HBM cache of Engram table rows against its size: the grey "
                "line is LRU at every size (one pass over the lookups), points are replays.")
        if best:
            text += (f" Best replay: {best['policy']} at {best['cache_mb']:g} MB hits "
                     f"{_pct(best['hit_ratio'])}.")
        figs.append(Figure("engram_hit_curve", "engram_hit_curve", text,
                           ch.engram_hit_curve(curve)))
    per_token = run_query(store, "engram_bytes_per_token")
    if per_token.height:
        figs.append(Figure(
            "engram_bytes_per_token", "engram_bytes_per_token",
            "Bytes each token reads from HBM and from the backing store (useful row bytes, and "
            "bytes actually read: an SSD moves a whole block per row), per cache size. "
            + _read_amplification(per_token),
            ch.engram_bytes_per_token(per_token)))
    return Section("engram", "Engram table offload", "Hashed N-gram table lookups of real "
                   "text replayed through an HBM row cache over DRAM or SSD.", (), tuple(figs))


def _read_amplification(per_token: pl.DataFrame) -> str:
    """The largest ratio of bytes read to useful bytes from the backing store, if any."""
    cols = set(per_token.columns)
    if not {"tier", "bytes_per_token"} <= cols:
        return ""
    tiers = per_token.group_by("tier").agg(pl.col("bytes_per_token").sum())
    by = dict(zip(tiers["tier"].to_list(), tiers["bytes_per_token"].to_list(), strict=True))
    useful = next((v for k, v in by.items() if "useful" in str(k) and "backing" in str(k)),
                  None)
    read = next((v for k, v in by.items() if "read" in str(k) and "backing" in str(k)), None)
    if not useful or not read:
        return ""
    return (f"Over these runs the backing store reads {read / useful:.1f}x the bytes the "
            "lookups use: the block size, not the row size, sets its traffic.")


def _model_vs_measured(store: Store) -> Section:
    mvm = run_query(store, "model_vs_measured")
    med = float(mvm["rel_err"].abs().median())
    df = mvm.select("hardware", "framework", "precision", "spec_method", "layout", "isl",
                    "osl", "conc", "measured", "predicted")
    fig = Figure("model_vs_measured", "model_vs_measured",
                 f"Held-out predictions of throughput per GPU against {mvm.height} measured "
                 "InferenceX DeepSeek-R1 points (leave-one-hardware-out: the fit that predicts a "
                 f"hardware never saw it); median |error| {_pct(med)}. Dashed: y = x; band: "
                 "±25%.", ch.predicted_vs_measured(df, "tok/s/GPU", "Throughput per GPU"))
    figs = [fig]
    fronts = run_query(store, "serving_fronts")
    for run in fronts["run_id"].unique(maintain_order=True):
        f = fronts.filter(pl.col("run_id") == run)
        r = f.row(0, named=True)
        pts = pl.concat([run_query(store, "measured_points", hardware=hw, isl=r["isl"],
                                   osl=r["osl"], precision=r["precision"])
                         for hw in f["hardware"].unique(maintain_order=True)])
        figs.append(Figure(
            f"serving_fronts_{len(figs)}", "serving_fronts",
            f"Modelled Pareto fronts of {r['model']} {r['precision']} at {r['isl']}/{r['osl']} "
            f"tokens (lines) with the {pts.height} measured points at that shape (diamonds)."
            + _front_gap(f, pts),
            ch.pareto_fronts(f, pts, f"{r['model']} {r['precision']} {r['isl']}/{r['osl']}: "
                             "modelled fronts and measured points")))
    return Section("model_vs_measured", "Serving model vs measured",
                   "The step-level serving model (bundled fit) against measured points "
                   "(SemiAnalysis InferenceX, Apache-2.0).", (), tuple(figs))


def _front_gap(front: pl.DataFrame, pts: pl.DataFrame) -> str:
    """How far the measured points sit from the modelled front of their hardware: the
    measured / modelled throughput at the front point nearest in interactivity (log
    distance), its range and the hardware where it is widest, so the caption never hides a
    gap the chart shows."""
    import math

    ratios = []
    for p in pts.iter_rows(named=True):
        f = front.filter((pl.col("hardware") == p["hardware"]) & (pl.col("interactivity") > 0))
        if not f.height or not p.get("interactivity") or not p.get("tput_per_gpu"):
            continue
        near = min(f.iter_rows(named=True), key=lambda q: abs(
            math.log(q["interactivity"] / p["interactivity"])))
        if near["tput_per_gpu"]:
            ratios.append((p["tput_per_gpu"] / near["tput_per_gpu"], p["hardware"]))
    if not ratios:
        return ""
    lo, hi = min(ratios), max(ratios)
    return (f" Measured / modelled throughput at the nearest front point: {lo[0]:.2f}x "
            f"({lo[1]}) to {hi[0]:.2f}x ({hi[1]}); outside 0.8-1.25x on "
            f"{sum(1 for x, _ in ratios if not 0.8 <= x <= 1.25)} of {len(ratios)} points.")


def _headline(store: Store) -> tuple[tuple[str, pl.DataFrame], ...]:
    out = []
    plans = _latest_plans(store) if _has(store, "plan_runs") else pl.DataFrame()
    if plans.height:
        out.append(("Capacity plan: best plan per accelerator at the plan's target "
                    "interactivity (latest plan of each trace)", _best_table(plans)))
    best = run_query(store, "best_policy")
    if best.height:
        online = store.query("SELECT DISTINCT policy FROM selection_runs WHERE policy NOT IN "
                             "('opt', 'opt-bypass') ORDER BY policy")["policy"].to_list()
        compared = (f"of the {len(online)} online policies replayed: {', '.join(online)}"
                    if len(online) > 1 else f"only {online[0]} was replayed, so nothing was "
                    "compared" if online else "no online policy replayed")
        out.append((f"Best online policy per buffer size ({compared})", best.select(
            "trace", "mode", "buffer_tokens", "best_policy",
            pl.col("best_miss_ratio").round(4), pl.col("opt_miss_ratio").round(4), "run_id")))
    if _has(store, "tier_runs"):
        wide = _tier_rates(run_query(store, "tier_reuse"))
        out.append(("Hit rates per tier (share of prompt tokens)", wide.select(
            "trace", "hardware", "config",
            *[pl.col(c).round(4) for c in wide.columns
              if c in ("GPU (L1)", "host (L2)", "storage (L3)", "overall")], "run_id")))
    answers = run_query(store, "compare_answers")
    if answers.height:
        # one shared target: the highest interactivity every accelerator of a run reaches
        ok = answers.filter(pl.col("reachable"))
        reach = ok.group_by("run_id", "hardware").agg(pl.col("interactivity").max())
        common = reach.group_by("run_id").agg(pl.col("interactivity").min().alias("target"))
        at = ok.join(common, on="run_id").filter(pl.col("interactivity") == pl.col("target"))
        if at.height:
            out.append(("Cost compare: $ per M total tokens per accelerator at one target "
                        "interactivity (the highest every accelerator of the run reaches)",
                        at.sort("run_id", "usd_per_mtok_total").select(
                            "model", "interactivity", "hardware", "engine", "source",
                            "usd_per_mtok_total", "usd_per_mtok_total_low",
                            "usd_per_mtok_total_high", "tput_per_gpu", "p90_ttft_s", "layout",
                            "run_id")))
    cost = run_query(store, "cost_per_mtok")
    if cost.height:
        # like for like: per (source, trace), only runs at least as interactive as the
        # slowest hardware's fastest run, so every hardware is priced at a comparable target
        floor = cost.group_by("source", "trace", "hardware").agg(
            pl.col("interactivity_tok_s_user").max().alias("fastest")).group_by(
            "source", "trace").agg(pl.col("fastest").min().alias("floor"))
        cheapest = (cost.join(floor, on=["source", "trace"])
                    .filter(pl.col("interactivity_tok_s_user") >= pl.col("floor") * 0.999)
                    .sort("usd_per_mtok_total").group_by("source", "trace", "hardware",
                                                         maintain_order=True).first()
                    .sort("source", "trace", "hardware"))
        out.append(("Lowest $ per M total tokens per hardware among runs reaching the same "
                    "interactivity (floor: the slowest hardware's fastest run, per source "
                    "and trace)", cheapest.select(
                        "source", "trace", "hardware", "model", "setting",
                        pl.col("floor").alias("interactivity_floor"),
                        "interactivity_tok_s_user", "usd_per_mtok_total",
                        "usd_per_mtok_output", "usd_per_gpu_hour", "run_id")))
    return tuple(out)


def _with_unit(field: str, value: object) -> str:
    """A spec value in the unit its field name carries (``8000000000000.0`` B/s reads
    ``8,000 GB/s``); names, counts and flags as they are."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)

    def num(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 or float(x).is_integer() else f"{x:.3g}"

    if "_bytes_per_s" in field:
        return f"{num(value / 1e9)} GB/s"
    if field.endswith("_bytes") or "_bytes_" in field:
        if value >= 1e9:
            return f"{num(value / 1e9)} GB ({num(value / 2**30)} GiB)"
        return f"{num(value / 2**10)} KiB" if value >= 1024 else f"{num(value)} B"
    if field.endswith("_s"):
        return f"{num(value * 1e6)} µs" if value < 1e-3 else f"{num(value)} s"
    if field.endswith("_tflops"):
        return f"{num(value)} TFLOP/s"
    if field.endswith("_w"):
        return f"{num(value)} W"
    if field.endswith("_usd_per_gpu_hour"):
        return f"${value:.2f} per GPU-hour"
    return num(value)


def _provenance(store: Store) -> pl.DataFrame:
    from toolkit.hardware import get_hardware

    names: set[str] = set()
    for t in ("tier_runs", "decode_costs", "engram_runs"):
        names |= set(store.query(f"SELECT DISTINCT hardware FROM {t}")["hardware"])
    rows = []
    for n in sorted(names):
        spec = get_hardware(n)
        for f, src in spec.provenance.items():
            rows.append({"hardware": n, "field": f, "value": _with_unit(f, src.value),
                         "kind": src.kind, "source": src.source, "vintage": src.vintage})
    return pl.DataFrame(rows, schema=dict.fromkeys(
        ("hardware", "field", "value", "kind", "source", "vintage"), pl.String))


def build_report(store: Store, title: str = "KV-cache tiering report") -> Report:
    """Collect every section the store has data for; draws and writes nothing."""
    builders: list[Callable[[Store], Section | None]] = [_prefix, _selections, _tiers, _cost,
                                                         _plans, _engram]
    sections = [s for s in (b(store) for b in builders) if s is not None]
    sections.append(_model_vs_measured(store))
    figs = tuple(f for s in sections for f in s.figures)
    return Report(title, str(store.root), _headline(store), tuple(sections),
                  _provenance(store), run_query(store, "runs"), figs)


# --- rendering -------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; }
th { background: #f3f3f3; } .fig { margin: 1em 0 2em; } .muted { color: #666; }
details { margin: 0.5em 0; } summary { cursor: pointer; }
table { display: block; max-width: 100%; overflow-x: auto; }
td { white-space: nowrap; } td.num { text-align: right; }
"""


def _table_html(df: pl.DataFrame, limit: int = 200) -> str:
    """A table formatted as every command prints one (:mod:`toolkit.tables`: separators,
    four significant digits, units and $ in the headers), long text columns last;
    headers break between words, never inside one; cells never break."""
    from toolkit.tables import display_cells

    shown = df.head(limit)
    names, headers, cells, numeric = display_cells(shown)
    head = "".join(f"<th title='{html.escape(n)}'>{html.escape(h.replace('_', ' '))}</th>"
                   for n, h in zip(names, headers, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td class='num'>{html.escape(c[r])}</td>" if num
                         else f"<td>{html.escape(c[r])}</td>"
                         for c, num in zip(cells, numeric, strict=True))
        + "</tr>" for r in range(shown.height))
    more = (f"<p class='muted'>{df.height - limit} more rows: run the named query.</p>"
            if df.height > limit else "")
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _script_json(obj: object) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(obj).replace("</", "<\\/")


def _toc(report: Report) -> str:
    """The table of contents: headline, each section (with its charts), provenance, runs."""
    items = ["<li><a href='#headline'>Headline</a></li>"]
    for s in report.sections:
        sub = "".join(f"<li><a href='#chart-{f.stem}'>{html.escape(_chart_title(f))}</a></li>"
                      for f in s.figures)
        items.append(f"<li><a href='#{s.key}'>{html.escape(s.title)}</a>"
                     + (f"<ul>{sub}</ul>" if sub else "") + "</li>")
    items += ["<li><a href='#provenance'>Hardware figures and their provenance</a></li>",
              "<li><a href='#runs'>Runs</a></li>"]
    return f"<nav id='toc'><h2>Contents</h2><ul>{''.join(items)}</ul></nav>"


def _chart_title(f: Figure) -> str:
    title = f.chart.to_dict().get("title", f.stem)
    if isinstance(title, dict):
        title = title.get("text", f.stem)
    return str(title if isinstance(title, str) else " ".join(title))


def render_html(report: Report, js_bundle: str) -> str:
    """The whole page as one string (``js_bundle``: vega, vega-lite and vega-embed)."""
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(report.title)}"
           f"</title><style>{_CSS}</style><script>{js_bundle}</script></head><body>",
           f"<h1>{html.escape(report.title)}</h1>",
           f"<p class='muted'>Store {html.escape(report.store_root)}; toolkit {__version__}. "
           "Every table and chart below is a named query: <code>toolkit sql --store DIR "
           "--query NAME</code>. Charts: hover for values, click a legend entry to isolate "
           "a series (click empty space to bring all back); drop-downs and sliders under a "
           "chart filter it.</p>", _toc(report), "<h2 id='headline'>Headline</h2>"]
    for cap, df in report.headline:
        out += [f"<h3>{html.escape(cap)}</h3>", _table_html(df)]
    embeds = []
    for s in report.sections:
        out += [f"<h2 id='{s.key}'>{html.escape(s.title)}</h2>", f"<p>{html.escape(s.intro)}</p>"]
        for f in s.figures:
            div = f"chart-{f.stem}"
            out.append(f"<div class='fig'><div id='{div}' class='chart' data-query='{f.query}'>"
                       f"</div><p>{html.escape(f.explanation)} <span class='muted'>(query "
                       f"<code>{f.query}</code>; files {f.stem}.svg, {f.stem}.png)</span></p>"
                       "</div>")
            embeds.append((div, f.chart.to_dict()))
        for cap, df in s.tables:
            out += [f"<details><summary>{html.escape(cap)} ({df.height} rows)</summary>",
                    _table_html(df), "</details>"]
    n_hw = report.provenance["hardware"].n_unique()
    out += ["<h2 id='provenance'>Hardware figures and their provenance</h2>",
            f"<details><summary>Every field of the {n_hw} hardware spec(s) used by a run in "
            f"this store ({report.provenance.height} values, each with its kind and source)"
            "</summary>", _table_html(report.provenance, limit=10_000), "</details>",
            "<h2 id='runs'>Runs</h2>", _table_html(report.runs, limit=10_000)]
    calls = "\n".join(
        f"vegaEmbed('#{div}', {_script_json(spec)}, {{renderer: 'svg', actions: false}})"
        f".catch(e => console.error('{div}', e));" for div, spec in embeds)
    out += [f"<script>\n{calls}\n</script>", "</body></html>"]
    return "\n".join(out)


def _js_bundle() -> str:
    import vl_convert as vlc
    from altair.utils._importers import vl_version_for_vl_convert

    return vlc.javascript_bundle(vl_version=vl_version_for_vl_convert())


def write_report(store: Store, out_dir: str | Path, title: str = "KV-cache tiering report"
                 ) -> Path:
    """Write ``index.html`` plus ``STEM.svg`` and ``STEM.png`` per chart into ``out_dir``.

    Files are produced in a temporary sibling directory and moved in at the end, so a
    failure leaves ``out_dir`` as it was.
    """
    import vl_convert as vlc

    from toolkit.store.guard import check_write_path

    out = Path(out_dir)
    check_write_path(out, "--out", store=store.root)
    report = build_report(store, title)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        (tmp / HTML_NAME).write_text(render_html(report, _js_bundle()), encoding="utf-8")
        for f in report.figures:
            spec = f.chart.to_dict()
            (tmp / f"{f.stem}.svg").write_text(vlc.vegalite_to_svg(spec), encoding="utf-8")
            (tmp / f"{f.stem}.png").write_bytes(vlc.vegalite_to_png(spec, scale=2))
        out.mkdir(exist_ok=True)
        for p in tmp.iterdir():
            p.replace(out / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / HTML_NAME


def chart_divs(page: str) -> list[str]:
    """Ids of the chart containers of a rendered page (what a browser check expects)."""
    return re.findall(r"<div id='(chart-[\w-]+)' class='chart'", page)
