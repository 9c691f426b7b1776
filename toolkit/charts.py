"""Altair chart builders: take query results, return charts, draw nothing."""

from __future__ import annotations

import altair as alt
import polars as pl

_METRIC_LABELS = {"block_hit_ratio": "share of block lookups",
                  "token_hit_ratio": "share of prompt tokens"}


def _fit(values: pl.Series, *, log: bool = False, zero: bool = True) -> alt.Scale:
    """A scale whose domain spans the data (with a little headroom), not a fixed [0, 1]."""
    v = values.drop_nulls().cast(pl.Float64)
    if log:
        v = v.filter(v > 0)
    if v.is_empty():
        return alt.Scale(type="log") if log else alt.Scale(zero=zero)
    lo, hi = float(v.min()), float(v.max())
    if log:
        return alt.Scale(type="log", domain=[lo / 1.15, hi * 1.15], nice=False)
    hi = hi * 1.05 if hi > 0 else 1.0
    return alt.Scale(domain=[0.0 if zero else lo, hi], nice=False)


def _numeric_order(values: pl.Series) -> list:
    """Distinct values sorted as numbers, for categorical axes and legends (4 < 16)."""
    return sorted(set(values.drop_nulls().to_list()))


def isolate_on_legend(chart: alt.Chart, field: str, name: str) -> alt.Chart:
    """Clicking a legend entry of ``field`` isolates that series (the others fade; shift-
    click adds one, a click on empty space brings all back), as a dashboard legend does."""
    sel = alt.selection_point(fields=[field], bind="legend", name=name)
    return chart.add_params(sel).encode(
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.12)))


def choose(name: str, field: str, options: list, label: str) -> alt.Parameter:
    """A drop-down over ``options`` (first entry "all") that filters rows on ``field``;
    pair it with :func:`chosen` in each layer's ``transform_filter``."""
    opts = [None, *options]
    return alt.param(name=name, value=None, bind=alt.binding_select(
        options=opts, labels=["all", *[str(o) for o in options]], name=f"{label} "))


def chosen(name: str, field: str) -> str:
    """The filter expression of a :func:`choose` drop-down."""
    return f"{name} == null || datum['{field}'] == {name}"


def _capacity_axis(df: pl.DataFrame, tokens: str, gb: str, model: str, what: str) -> alt.Axis:
    """Tokens axis whose labels also give GB of the named model's KV (GB = tokens x bytes
    per token / 1e9, the ratio read from the query's own columns)."""
    both = df.filter(pl.col(tokens).is_not_null() & (pl.col(tokens) > 0))
    per_token_gb = float((both[gb] / both[tokens]).first()) if both.height else 0.0
    gb_expr = f"datum.value * {per_token_gb!r}"
    return alt.Axis(  # exact token counts; sizes below 0.1 GB in MB
        title=what.format(model=model), values=_numeric_order(both[tokens]),
        labelExpr=f"format(datum.value, ',') + ' / ' + ({gb_expr} < 0.1 ? "
                  f"format({gb_expr} * 1000, ',.3~r') + ' MB' : "
                  f"format({gb_expr}, ',.3~r') + ' GB')",
        labelAngle=-30, labelOverlap=True)


def hit_ratio_vs_capacity(curve: pl.DataFrame, title: str | None = None) -> alt.LayerChart:
    """Hit ratio against cache capacity (log scale, tokens and GB); unbounded runs become
    dashed rules. One legend: which share is plotted.

    Args:
        curve: the ``prefix_hit_curve`` query result.
    """
    df = curve.with_columns(
        pl.col("metric").replace_strict(_METRIC_LABELS, default=pl.col("metric")).alias("hit of")
    )
    bounded = df.filter(pl.col("capacity_blocks").is_not_null())
    unbounded = df.filter(pl.col("capacity_blocks").is_null())
    model = str(curve["kv_model"].first()) if "kv_model" in curve.columns else "model"
    color = alt.Color("hit of:N", title="hit ratio as", sort=list(_METRIC_LABELS.values()))
    y = alt.Y("ratio:Q", title="hit ratio", scale=_fit(df["ratio"]), axis=alt.Axis(format="%"))
    base = alt.Chart(bounded).encode(
        x=alt.X("capacity_tokens:Q", scale=_fit(bounded["capacity_tokens"], log=True),
                axis=_capacity_axis(bounded, "capacity_tokens", "capacity_gb", model,
                                    "LRU capacity (tokens / GB of {model} KV)")),
        y=y, color=color, detail="trace:N",
        tooltip=["trace", "policy", "capacity_blocks", "capacity_tokens",
                 alt.Tooltip("capacity_gb", format=".1f"), "hit of",
                 alt.Tooltip("ratio", format=".4f")],
    )
    lines = base.mark_line(point=True)
    rules = (
        alt.Chart(unbounded)
        .mark_rule(strokeDash=[4, 3])
        .encode(y=y, color=color, tooltip=["trace", "hit of", alt.Tooltip("ratio", format=".4f")])
    )
    return (lines + rules).properties(
        title=title or "Prefix-cache hit ratio vs capacity (dashed: unbounded)",
        width=520,
        height=300,
    )


def tier_reuse_bars(reuse: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """Stacked bars, one per tier run: where its prompt tokens came from (GPU, host,
    storage, recomputed), so each bar sums to 100%. Panels: one column per hardware, one
    row per trace; bars in a panel ordered by users, then pool sizes, labelled with the
    run's configuration (``config`` column when given, else the load).

    Args:
        reuse: the ``tier_reuse`` query result, optionally with a ``config`` label column
            (the report adds users, host and storage sizes, policy).
    """
    df = reuse.with_columns(
        pl.when(pl.col("concurrency").is_null()).then(pl.lit("trace arrivals"))
        .otherwise(pl.format("{} users", "concurrency")).alias("load"))
    if "config" not in df.columns:
        df = df.with_columns(pl.col("load").alias("config"))
    if "trace" not in df.columns:
        df = df.with_columns(pl.lit("trace").alias("trace"))
    order = (df.sort("trace", "hardware", pl.col("concurrency").fill_null(-1),
                     *[c for c in ("device_capacity_tokens", "host_capacity_tokens",
                                   "storage_capacity_tokens") if c in df.columns], "run_id")
             ["run_id"].unique(maintain_order=True).to_list())
    labels = dict(df.select("run_id", "config").unique().iter_rows())
    sources = df.sort("source_rank")["source"].unique(maintain_order=True).to_list()
    per_panel = int(df.group_by("trace", "hardware").agg(pl.col("run_id").n_unique())
                    ["run_id"].max() or 1)
    sel = alt.selection_point(fields=["source"], bind="legend", name="tier_source")
    chart = alt.Chart(df).mark_bar().encode(
        x=alt.X("run_id:N", title=None, sort=order, axis=alt.Axis(
            labelAngle=-35 if per_panel > 2 else 0, labelLimit=160,
            labelExpr=f"({_js_object(labels)})[datum.value]")),
        y=alt.Y("share:Q", title="share of prompt tokens", stack="zero",
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        color=alt.Color("source:N", title="served from", sort=sources),
        order=alt.Order("source_rank:Q"),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.25)),
        tooltip=["trace", "hardware", "config", "source", alt.Tooltip("share:Q", format=".1%"),
                 alt.Tooltip("tokens:Q", format=","), "run_id"],
    ).add_params(sel).properties(width=max(90, 34 * per_panel), height=220)
    hws = _numeric_order(df["hardware"])
    traces = _numeric_order(df["trace"])
    # each panel shows only the runs replayed on its hardware and trace (no empty slots)
    return chart.facet(column=alt.Column("hardware:N", title=None, sort=hws),
                       row=alt.Row("trace:N", title=None, sort=traces)).resolve_scale(
        x="independent").properties(
        title=title or "Where prompt tokens come from, one bar per tier run")


def _js_object(mapping: dict) -> str:
    """A JavaScript object literal (for a Vega ``labelExpr`` lookup)."""
    import json

    return json.dumps({str(k): str(v) for k, v in mapping.items()})


def miss_latency_cdf(cdf: pl.DataFrame, title: str | None = None,
                     fixed_s: float | None = None, interactive: bool = False) -> alt.Chart:
    """CDF of per-(request, step, layer) miss latency, one line per run (the
    ``miss_latency_cdf`` query), latency in microseconds.

    The x axis spans the non-zero latencies (samples without a miss sit at 0, off the
    axis: the curve's height at its left edge); colour is the policy and the dash the
    buffer size, so no two runs look alike. ``fixed_s``: the assumed fixed cost of one
    transfer, drawn as a rule and named in the subtitle, since it dominates the curve.
    """
    df = cdf.with_columns(
        (pl.col("miss_latency_s") * 1e6).alias("miss_latency_us"),
        pl.format("{} buffer {}", "policy", "buffer_tokens").alias("run"),
        pl.col("buffer_tokens").cast(pl.String).alias("buffer"))
    hw = str(df["hardware"].first()) if df.height else ""
    busy = df.filter(pl.col("miss_latency_us") > 0)["miss_latency_us"]
    lo = float(busy.min()) if busy.len() else 0.0
    hi = float(busy.max()) if busy.len() else 1.0
    if fixed_s is not None:
        lo = min(lo, fixed_s * 1e6)
    pad = max(hi - lo, 1e-3) * 0.05
    buffers = [str(b) for b in _numeric_order(df["buffer_tokens"])]
    scale = alt.Scale(domain=[max(lo - pad, 0.0), hi + pad], nice=False, zero=False)
    line = alt.Chart(df).mark_line(interpolate="step-after", clip=True).encode(
        x=alt.X("miss_latency_us:Q", title=f"miss latency per (request, layer, step) on {hw} "
                "(µs)", scale=scale),
        y=alt.Y("fraction:Q", title="fraction of samples", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%")),
        color=alt.Color("policy:N", title="policy", sort=_numeric_order(df["policy"])),
        strokeDash=alt.StrokeDash("buffer:N", title="buffer (tokens)", sort=buffers),
        detail="run:N",
        tooltip=["run", alt.Tooltip("miss_latency_us:Q", format=".3f"),
                 alt.Tooltip("fraction:Q", format=".0%")],
    )
    if interactive:
        line = isolate_on_legend(line, "policy", "cdf_policy")
    head = title or "Miss-latency CDF"
    if fixed_s is None:
        return line.properties(title=head, width=520, height=280)
    note = (f"assumed fixed cost per transfer {fixed_s * 1e6:.2f} µs (grey rule; a model "
            "assumption, not measured) dominates every curve")
    rule = alt.Chart(pl.DataFrame({"fixed_us": [fixed_s * 1e6]})).mark_rule(
        color="grey", strokeDash=[2, 2]).encode(x=alt.X("fixed_us:Q", scale=scale))
    return (rule + line).properties(title=alt.Title(head, subtitle=note), width=520,
                                    height=280)


def cost_pareto(cost: pl.DataFrame, published: pl.DataFrame | None = None,
                title: str | None = None, interactive: bool = False) -> alt.LayerChart:
    """$ per M total tokens against interactivity per hardware (the ``cost_per_mtok``
    query): every run as a faint point, each hardware's Pareto front as a line, published
    figures (``published_costs``) as black-edged diamonds."""
    hws = _numeric_order(cost["hardware"])
    if published is not None:
        hws = _numeric_order(pl.concat([cost["hardware"], published["hardware"]]))
    color = alt.Color("hardware:N", title="hardware", sort=hws)
    xs = cost["interactivity_tok_s_user"]
    ys = cost["usd_per_mtok_total"]
    if published is not None and published.height:
        xs = pl.concat([xs, published["interactivity_tok_s_user"]])
        ys = pl.concat([ys, published["usd_per_mtok_total"]])
    x = alt.X("interactivity_tok_s_user:Q", title="interactivity (tok/s/user)",
              scale=_fit(xs, log=True))
    y = alt.Y("usd_per_mtok_total:Q", title="$ per M total tokens", scale=_fit(ys, log=True))
    tip = ["hardware", "source", "setting", "run_id",
           alt.Tooltip("interactivity_tok_s_user:Q", format=".1f"),
           alt.Tooltip("usd_per_mtok_total:Q", format=".4f")]
    points = alt.Chart(cost).mark_point(opacity=0.45).encode(x=x, y=y, color=color,
                                                             tooltip=tip)
    # one front per (source, trace, hardware): a line never joins different traces
    fronts = cost.filter(pl.col("on_front"))
    several = cost["trace"].n_unique() > 1
    if several:
        fronts = fronts.with_columns(pl.format("{} {}", "source", "trace").alias("front"))
    dash = alt.StrokeDash("trace:N", title="trace") if several else alt.Undefined
    front = alt.Chart(fronts).mark_line(point=True).encode(
        x=x, y=y, color=color, detail="front:N" if several else "source:N", strokeDash=dash,
        order="interactivity_tok_s_user:Q", tooltip=[*tip, "trace"] if several else tip)
    if interactive:  # legend click isolates a hardware (the report; a static SVG has none)
        front = isolate_on_legend(front, "hardware", "pareto_hw")
    layers = points + front
    if published is not None and published.height:
        layers += alt.Chart(published).mark_point(
            shape="diamond", size=110, filled=True, stroke="black", strokeWidth=1).encode(
            x=x, y=y, color=color,
            tooltip=["hardware", "engine", "model", "condition", "derivation", "source",
                     alt.Tooltip("usd_per_mtok_total:Q", format=".4f")])
    return layers.properties(
        title=title or "Cost vs interactivity (lines: Pareto fronts; diamonds: published)",
        width=520, height=300)


def miss_ratio_curves(mrc: pl.DataFrame, title: str | None = None) -> alt.LayerChart:
    """Miss ratio against device-buffer size, one line per online policy and the OPT bound
    dashed (the ``miss_ratio_curve`` query); buffer in tokens and GB per request."""
    df = mrc.with_columns(pl.when(pl.col("is_bound")).then(pl.lit("OPT (bound)"))
                          .otherwise(pl.col("policy")).alias("policy_label"),
                          # a line joins one trace's runs of one mode, never plain and
                          # HiSparse runs (cold restarts or not) of the same policy
                          pl.format("{} {}", "trace", "mode").alias("series"))
    model = str(mrc["kv_model"].first()) if "kv_model" in mrc.columns else "model"
    labels = sorted(set(df.filter(~pl.col("is_bound"))["policy_label"].to_list()))
    labels += ["OPT (bound)"] if df["is_bound"].any() else []
    x = alt.X("buffer_tokens:Q", scale=_fit(df["buffer_tokens"], log=True),
              axis=_capacity_axis(df, "buffer_tokens", "buffer_gb_per_request", model,
                                  "device buffer (tokens per layer / GB per request, all "
                                  "layers of {model})"))
    color = alt.Color("policy_label:N", title="policy", sort=labels)
    return alt.Chart(df).mark_line(point=True).encode(
        x=x, y=alt.Y("miss_ratio:Q", title="miss ratio", scale=_fit(df["miss_ratio"]),
                      axis=alt.Axis(format="%")),
        color=color,
        strokeDash=alt.condition("datum.is_bound", alt.value([5, 3]), alt.value([1, 0])),
        detail="series:N",
        shape=(alt.Shape("mode:N", title="mode") if df["mode"].n_unique() > 1
               else alt.Undefined),
        tooltip=["trace", "mode", "policy_label", "buffer_tokens",
                 alt.Tooltip("buffer_gb_per_request:Q", format=".4f"),
                 alt.Tooltip("miss_ratio:Q", format=".4f"), "run_id"],
    ).properties(title=title or "Miss ratio vs device buffer (dashed: OPT bound)",
                 width=520, height=280)


def step_time_breakdown(steps: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """Stacked mean decode-step time per priced configuration, one segment per term (the
    ``step_time`` query), in milliseconds."""
    df = steps.with_columns((pl.col("time_s") * 1e3).alias("time_ms"))
    configs = (df.sort("hardware", "batch_per_gpu", "overlap")["config"]
               .unique(maintain_order=True).to_list())
    terms = df.sort("term_rank")["term"].unique(maintain_order=True).to_list()
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("config:N", title=None, sort=configs, axis=alt.Axis(labelAngle=-30)),
        y=alt.Y("time_ms:Q", title="mean decode step (ms)", stack="zero",
                scale=_fit(df.group_by("config").agg(pl.col("time_ms").sum())["time_ms"])),
        color=alt.Color("term:N", title="term", sort=terms),
        order=alt.Order("term_rank:Q"),
        tooltip=["config", "term", alt.Tooltip("time_ms:Q", format=".3f"), "run_id"],
    ).properties(title=title or "Decode step time by term", width=max(200, 60 * len(configs)),
                 height=260)


def indexshare_bars(share: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """Overlap of each Shared layer with the Full layer it reuses, coloured by distance
    from that layer (the ``indexshare_overlap`` query)."""
    dist = [str(d) for d in _numeric_order(share["distance"])]
    df = share.with_columns(pl.col("distance").cast(pl.String))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("layer:O", title="Shared layer", sort=_numeric_order(share["layer"])),
        y=alt.Y("overlap_of_k:Q", title="|own ∩ Full| / k", scale=_fit(share["overlap_of_k"]),
                axis=alt.Axis(format="%")),
        color=alt.Color("distance:N", title="layers after its Full layer", sort=dist),
        tooltip=["layer", "anchor", "distance", alt.Tooltip("overlap_of_k:Q", format=".3f")],
    ).properties(title=title or "IndexShare: a Shared layer's overlap with its Full layer",
                 width=520, height=240)


def engram_hit_curve(curve: pl.DataFrame, title: str | None = None) -> alt.LayerChart:
    """Engram row-cache hit ratio against cache size: the one-pass LRU curve as a grey line,
    replayed policies as points (the ``engram_hit_curve`` query)."""
    line_df = curve.filter(pl.col("source") == "curve")
    dots_df = curve.filter(pl.col("source") == "replay")
    x = alt.X("cache_mb:Q", title="HBM row cache (MB)",
              scale=_fit(curve["cache_mb"], log=True))
    y = alt.Y("hit_ratio:Q", title="hit ratio", scale=_fit(curve["hit_ratio"]),
              axis=alt.Axis(format="%"))
    line = alt.Chart(line_df).mark_line(color="gray").encode(
        x=x, y=y, tooltip=[alt.Tooltip("cache_mb:Q", format=".2f"),
                           alt.Tooltip("hit_ratio:Q", format=".4f")])
    policies = _numeric_order(dots_df["policy"])
    dots = alt.Chart(dots_df).mark_point(filled=True, size=60).encode(
        x=x, y=y, color=alt.Color("policy:N", title="replayed policy", sort=policies),
        shape=alt.Shape("policy:N", sort=policies, legend=None),
        tooltip=["policy", "cache_mb", alt.Tooltip("hit_ratio:Q", format=".4f")])
    return (line + dots).properties(
        title=title or "Engram row-cache hit ratio (grey: one-pass LRU)", width=520, height=260)


def engram_bytes_per_token(df: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """Bytes per token from each tier by cache size, one panel per backing store (the
    ``engram_bytes_per_token`` query); log y, since SSD block reads dwarf the rest."""
    tiers = df.sort("tier_rank")["tier"].unique(maintain_order=True).to_list()
    sizes = _numeric_order(df["cache_mb"])
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("cache_mb:O", title="HBM row cache (MB)", sort=sizes),
        xOffset=alt.XOffset("tier:N", sort=tiers),
        y=alt.Y("bytes_per_token:Q", title="bytes per token (log)", stack=None,
                scale=_fit(df["bytes_per_token"], log=True)),
        color=alt.Color("tier:N", title="read from", sort=tiers),
        tooltip=["backing", "cache_mb", "tier", alt.Tooltip("bytes_per_token:Q", format=",.0f")],
    ).properties(width=240, height=200).facet(
        column=alt.Column("backing:N", title="backing store", sort=["dram", "ssd"])
    ).properties(title=title or "Engram bytes per token by tier")


def engram_tokens_per_usd(df: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """Tokens per dollar per placement and fetch mode, one panel per hardware (the
    ``engram_tokens_per_usd`` query)."""
    modes = [m for m in ("none", "sync", "overlapped") if m in set(df["fetch_mode"])]
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("placement:N", sort=["hbm", "dram", "ssd"], title=None),
        xOffset=alt.XOffset("fetch_mode:N", sort=modes),
        y=alt.Y("m_tokens_per_usd:Q", title="M tokens per $"),
        color=alt.Color("fetch_mode:N", title="fetch", sort=modes),
        tooltip=["hardware", "placement", "fetch_mode",
                 alt.Tooltip("m_tokens_per_usd:Q", format=".2f")],
    ).properties(width=110, height=220).facet(
        column=alt.Column("hardware:N", title=None, sort=_numeric_order(df["hardware"]))
    ).properties(title=title or "Engram table placement: tokens per dollar")


#: Readable legend labels for the ``selection_locality`` columns.
LOCALITY_LABELS = {
    "frac_recent": "in the recency window", "frac_sinks": "in the sink positions",
    "pos0_rate": "selections holding position 0",
    "step_overlap_of_k": "overlap with the next step", "layer_overlap_of_k":
    "overlap with the next layer",
}


def metric_by_layer(df: pl.DataFrame, metrics: list[str], title: str,
                    y_title: str = "share", labels: dict[str, str] | None = None) -> alt.Chart:
    """One line per metric across layers (e.g. frac_recent, frac_sinks, pos0_rate), the
    legend showing ``labels`` (default :data:`LOCALITY_LABELS`), never raw column names."""
    names = {**LOCALITY_LABELS, **(labels or {})}
    long = df.unpivot(index="layer", on=metrics, variable_name="metric", value_name="value")
    long = long.with_columns(pl.col("metric").replace_strict(names, default=pl.col("metric")))
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("layer:O", title="layer"),
        y=alt.Y("value:Q", title=y_title, scale=_fit(long["value"])),
        color=alt.Color("metric:N", title=None, sort=[names.get(m, m) for m in metrics]),
        tooltip=["layer", "metric", alt.Tooltip("value", format=".3f")],
    ).properties(title=title, width=520, height=240)


def selection_heatmap(df: pl.DataFrame, title: str) -> alt.Chart:
    """Decode step x position-bin heat map (the ``selection_heatmap`` query)."""
    return alt.Chart(df).mark_rect().encode(
        x=alt.X("position_bin:O", title="token position (bin start)",
                axis=alt.Axis(labelOverlap=True, labelAngle=-90)),
        y=alt.Y("step:O", title="decode step", axis=alt.Axis(labelOverlap=True)),
        color=alt.Color("selected:Q", title="selected", scale=alt.Scale(scheme="viridis")),
        tooltip=["step", "position_bin", "selected"],
    ).properties(title=title, width=560, height=300)


def misses_vs_buffer(df: pl.DataFrame, title: str) -> alt.Chart:
    """Miss ratio against buffer size, one line per policy (``selection_runs`` query); the
    log axis spans the buffer sizes replayed, ticked at each of them."""
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("buffer_tokens:Q", scale=_fit(df["buffer_tokens"], log=True),
                axis=alt.Axis(values=_numeric_order(df["buffer_tokens"]), format=","),
                title="device buffer (tokens)"),
        y=alt.Y("miss_ratio:Q", title="miss ratio"),
        color=alt.Color("policy:N"),
        tooltip=["policy", "buffer_tokens", alt.Tooltip("miss_ratio", format=".4f"), "misses"],
    ).properties(title=title, width=520, height=280)


def misses_per_step(df: pl.DataFrame, title: str) -> alt.Chart:
    """Misses per decode step, one line per series (``selection_misses_per_step``)."""
    return alt.Chart(df).mark_line().encode(
        x=alt.X("step:Q", title="decode step"),
        y=alt.Y("misses:Q", title="misses (all layers)"),
        color=alt.Color("series:N", title=None),
        tooltip=["series", "step", "misses"],
    ).properties(title=title, width=520, height=260)


def grouped_bars(df: pl.DataFrame, x: str, y: str, color: str, title: str,
                 y_title: str | None = None) -> alt.Chart:
    """Bars of ``y`` per ``x``, side by side per ``color`` (gap to OPT, bytes by setting)."""
    return alt.Chart(df).mark_bar().encode(
        x=alt.X(f"{x}:N", title=x.replace("_", " ")),
        xOffset=f"{color}:N",
        y=alt.Y(f"{y}:Q", title=y_title or y.replace("_", " ")),
        color=alt.Color(f"{color}:N"),
        tooltip=[x, color, alt.Tooltip(y, format=",.4g")],
    ).properties(title=title, width=520, height=260)


_TIER_SOURCE = {"gpu_hit_rate": "GPU (L1)", "host_hit_rate": "host (L2)",
           "storage_hit_rate": "storage (L3)"}


def tier_share_bars(shares: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """Stacked bars: share of prompt tokens by source against concurrency."""
    df = shares.with_columns(pl.col("source").replace_strict(_TIER_SOURCE).alias("source"))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("concurrency:O", title="concurrency (users)"),
        y=alt.Y("sum(rate):Q", title="share of prompt tokens", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("source:N", title="served from"),
        column=alt.Column("label:N", title=None) if "label" in df.columns else alt.Undefined,
        tooltip=["concurrency", "source", alt.Tooltip("rate", format=".3f")],
    ).properties(title=title or "Prompt-token source vs concurrency", width=220, height=260)


def ttft_cdf(cdf: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """TTFT CDF per configuration (log x)."""
    df = cdf.with_columns(pl.col("ttft_s").clip(lower_bound=1e-4))
    return alt.Chart(df).mark_line().encode(
        x=alt.X("ttft_s:Q", scale=alt.Scale(type="log"), title="TTFT (s)"),
        y=alt.Y("fraction:Q", title="fraction of requests"),
        color=alt.Color("config:N", title="configuration"),
    ).properties(title=title or "TTFT CDF", width=520, height=280)


def cost_bars(cost: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """$ per million total tokens per hardware."""
    return alt.Chart(cost).mark_bar().encode(
        x=alt.X("hardware:N"), y=alt.Y("usd_per_m_total:Q", title="$ / M total tokens"),
        tooltip=["hardware", "usd_per_m_total", "tokens_per_s_per_gpu", "p90_ttft_s"],
    ).properties(title=title or "$ per million total tokens", width=300, height=240)


_HW_ORDER = ["b200", "b300", "gb200", "gb300", "h100", "h200", "mi300x", "mi325x", "mi355x"]


def predicted_vs_measured(df: pl.DataFrame, metric: str, title: str) -> alt.LayerChart:
    """Log-log scatter of a model's prediction against the measurement, one colour per
    hardware, the y = x line and the +-25% band; hovering shows the configuration.

    Args:
        df: rows with ``hardware``, ``framework``, ``layout``, ``conc``, ``isl``, ``osl``,
            ``measured`` and ``predicted`` (the ``model_vs_measured`` query in notebook 06).
        metric: axis label, with its unit.
    """
    lo = float(min(df["measured"].min(), df["predicted"].min())) * 0.8
    hi = float(max(df["measured"].max(), df["predicted"].max())) * 1.25
    scale = alt.Scale(type="log", domain=[lo, hi])
    hw = [h for h in _HW_ORDER if h in set(df["hardware"])]
    points = alt.Chart(df).mark_circle(size=45, opacity=0.75).encode(
        x=alt.X("measured:Q", scale=scale, title=f"measured {metric}"),
        y=alt.Y("predicted:Q", scale=scale, title=f"predicted {metric} (held out)"),
        color=alt.Color("hardware:N", sort=hw, title="hardware"),
        tooltip=["hardware", "framework", "precision", "spec_method", "layout", "isl", "osl",
                 "conc", alt.Tooltip("measured:Q", format=".4g"),
                 alt.Tooltip("predicted:Q", format=".4g")],
    )
    line = pl.DataFrame({"measured": [lo, hi], "predicted": [lo, hi]})
    band = pl.DataFrame({"measured": [lo, hi], "upper": [lo * 1.25, hi * 1.25],
                         "lower": [lo * 0.75, hi * 0.75]})
    ref = alt.Chart(line).mark_line(color="gray", strokeDash=[4, 3]).encode(
        x=alt.X("measured:Q", scale=scale), y=alt.Y("predicted:Q", scale=scale))
    area = alt.Chart(band).mark_area(opacity=0.12, color="gray").encode(
        x=alt.X("measured:Q", scale=scale), y=alt.Y("lower:Q", scale=scale), y2="upper:Q")
    return (area + ref + points).properties(title=title, width=420, height=380)


def error_by_group(df: pl.DataFrame, group: str, title: str) -> alt.Chart:
    """Median absolute relative error per group, one bar per metric (``metric``, ``group``,
    ``median_abs_err``, ``rows``); the 25% target is a rule."""
    bars = alt.Chart(df).mark_bar().encode(
        x=alt.X(f"{group}:N", title=group, sort=_HW_ORDER if group == "hardware" else None),
        xOffset=alt.XOffset("metric:N"),
        y=alt.Y("median_abs_err:Q", title="median |predicted / measured - 1|",
                axis=alt.Axis(format="%")),
        color=alt.Color("metric:N", title="metric"),
        tooltip=[group, "metric", "rows", alt.Tooltip("median_abs_err:Q", format=".1%")],
    )
    target = alt.Chart(pl.DataFrame({"y": [0.25]})).mark_rule(
        color="black", strokeDash=[4, 3]).encode(y="y:Q")
    return (bars + target).properties(title=title, width=460, height=260)


def pareto_fronts(model: pl.DataFrame, measured: pl.DataFrame, title: str) -> alt.LayerChart:
    """Modelled Pareto fronts of throughput per GPU vs interactivity per hardware (lines)
    with measured points over them (``hardware``, ``interactivity``, ``tput_per_gpu``)."""
    hw = [h for h in _HW_ORDER if h in set(model["hardware"]) | set(measured["hardware"])]
    color = alt.Color("hardware:N", sort=hw, title="hardware")
    x = alt.X("interactivity:Q", title="interactivity (tok/s/user)",
              scale=alt.Scale(type="log"))
    y = alt.Y("tput_per_gpu:Q", title="throughput per GPU (tok/s, input + output)",
              scale=alt.Scale(type="log"))
    lines = alt.Chart(model).mark_line(strokeWidth=2).encode(
        x=x, y=y, color=color, order="interactivity:Q",
        tooltip=["hardware", "framework", "layout",
                 alt.Tooltip("interactivity:Q", format=".1f"),
                 alt.Tooltip("tput_per_gpu:Q", format=",.0f")])
    dots = alt.Chart(measured).mark_point(filled=True, size=60, shape="diamond").encode(
        x=x, y=y, color=color,
        tooltip=["hardware", "framework", "layout", "conc",
                 alt.Tooltip("interactivity:Q", format=".1f"),
                 alt.Tooltip("tput_per_gpu:Q", format=",.0f")])
    return (lines + dots).properties(title=title, width=520, height=320)


def hit_rate_vs_users(df: pl.DataFrame, title: str) -> alt.Chart:
    """Prefix-cache hit rate (GPU, host) against concurrent users, measured vs modelled,
    one panel per offload setting (``users``, ``offload``, ``tier``, ``source``, ``rate``)."""
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("users:Q", scale=alt.Scale(type="log", base=2), title="concurrent users"),
        y=alt.Y("rate:Q", title="share of prompt tokens", scale=alt.Scale(domain=[0, 1]),
                axis=alt.Axis(format="%")),
        color=alt.Color("tier:N", title="served from", sort=["GPU", "host"]),
        strokeDash=alt.StrokeDash("source:N", title=None, sort=["measured", "model"]),
        tooltip=["offload", "users", "tier", "source", alt.Tooltip("rate:Q", format=".1%")],
    ).properties(width=300, height=220).facet(
        column=alt.Column("offload:N", title="CPU offload", sort=["off", "on"])
    ).properties(title=title)


def sweep_surface(df: pl.DataFrame, x: str, y: str, value: str, title: str,
                  value_title: str | None = None, fmt: str = ".3f",
                  facet: str | None = None) -> alt.Chart:
    """A sweep's result surface: one cell per (x, y) coloured by ``value`` and labelled
    with it (e.g. miss ratio by policy x buffer, $/M tokens by hardware x concurrency).

    Numeric axes are ordinal in numeric order (64 before 128); ``facet`` repeats the
    surface per value of another column (e.g. mode). Input: a ``sweep_*_surface`` query.
    """
    def axis(field: str) -> tuple[str, list]:
        values = df[field].unique().sort().to_list()
        return f"{field}:O", values

    xf, xs = axis(x)
    yf, ys = axis(y)
    label = value_title or value.replace("_", " ")
    base = alt.Chart(df).encode(
        x=alt.X(xf, sort=xs, title=x.replace("_", " "), axis=alt.Axis(labelAngle=0)),
        y=alt.Y(yf, sort=ys, title=y.replace("_", " ")),
    )
    lo, hi = float(df[value].min()), float(df[value].max())
    mid = (lo + hi) / 2
    rect = base.mark_rect().encode(
        color=alt.Color(f"{value}:Q", title=label, scale=alt.Scale(scheme="viridis")),
        tooltip=[x, y, alt.Tooltip(value, format=fmt)],
    )
    text = base.mark_text(fontSize=10).encode(
        text=alt.Text(f"{value}:Q", format=fmt),
        color=alt.condition(alt.datum[value] > mid, alt.value("black"), alt.value("white")),
    )
    chart = (rect + text).properties(width=max(40 * len(xs), 200), height=24 * len(ys) + 20)
    if facet:
        return chart.facet(column=alt.Column(f"{facet}:N", title=None)).properties(title=title)
    return chart.properties(title=title)


ANSWER_SOURCES: dict[str, tuple[str, float]] = {
    "measured": ("circle", 1.0), "blended": ("square", 0.45), "model": ("triangle-up", 0.0)}
"""``cost compare``'s answer sources -> (point shape, fill opacity) in :func:`cost_band`."""


def cost_band(compare: pl.DataFrame, published: pl.DataFrame | None = None,
              title: str | None = None, interactive: bool = False) -> alt.LayerChart:
    """$ per M total tokens against target interactivity per hardware from ``cost compare``
    rows: a line through the reachable targets, the shaded 10-90% band of cross-validated
    errors; points marked by how the answer was reached (:data:`ANSWER_SOURCES`: measured
    filled circles, blended half-filled squares, modelled hollow triangles, one legend);
    published figures (``published_costs``) as black-edged diamonds. ``interactive`` (the
    report): drop-downs choose the accelerator and model, a slider draws the target
    interactivity, a legend click isolates a series."""
    df = compare.filter(pl.col("reachable")).with_columns(
        pl.format("{} ({})", "hardware", "engine").alias("series"))
    series = _numeric_order(df["series"]) if df.height else []
    color = alt.Color("series:N", title="hardware (engine)", sort=series)
    ys = pl.concat([df["usd_per_mtok_total_low"], df["usd_per_mtok_total_high"],
                    df["usd_per_mtok_total"]]).drop_nulls()
    xs = df["interactivity"]
    if published is not None and published.height:
        ys = pl.concat([ys, published["usd_per_mtok_total"].cast(pl.Float64)])
        xs = pl.concat([xs, published["interactivity_tok_s_user"].cast(pl.Float64)])
    x = alt.X("interactivity:Q", title="target interactivity (tok/s/user)",
              scale=_fit(xs, zero=False))
    y = alt.Y("usd_per_mtok_total:Q", title="$ per M total tokens", scale=_fit(ys, log=True))
    tip = ["hardware", "engine", "source", "basis", "layout",
           alt.Tooltip("interactivity:Q", format=".0f"),
           alt.Tooltip("usd_per_mtok_total:Q", format=".4f"),
           alt.Tooltip("usd_per_mtok_total_low:Q", format=".4f"),
           alt.Tooltip("usd_per_mtok_total_high:Q", format=".4f"),
           alt.Tooltip("p90_ttft_s:Q", format=".2f")]
    # drop-downs: model and accelerator; a slider: the target interactivity (a rule)
    models = _numeric_order(df["model"]) if "model" in df.columns else []
    hws = _numeric_order(df["hardware"])
    filters = [(choose("band_hw", "hardware", hws, "accelerator"), "hardware")]
    if len(models) > 1:
        filters.append((choose("band_model", "model", models, "model"), "model"))
    params = [prm for prm, _ in filters]
    lo_x = float(xs.min()) if xs.len() else 0.0
    hi_x = float(xs.max()) if xs.len() else 1.0
    target = alt.param(name="band_target", value=hi_x, bind=alt.binding_range(
        min=lo_x, max=hi_x, step=max((hi_x - lo_x) / 100, 1.0),
        name="target interactivity (tok/s/user) "))
    sel = alt.selection_point(fields=["series"], bind="legend", name="band_series")

    def only(chart: alt.Chart) -> alt.Chart:
        for prm, fld in filters:
            chart = chart.transform_filter(chosen(prm.name, fld))
        return chart

    fade = alt.condition(sel, alt.value(1.0), alt.value(0.12)) if interactive else alt.Undefined
    if not interactive:
        filters = []
    # one band and line per compare run: answers of different runs are never joined
    detail = ("run_id:N" if "run_id" in df.columns and df["run_id"].n_unique() > 1
              else alt.Undefined)
    band = only(alt.Chart(df).mark_area(opacity=0.18).encode(
        x=x, y=alt.Y("usd_per_mtok_total_low:Q", scale=_fit(ys, log=True),
                     title="$ per M total tokens"),
        y2="usd_per_mtok_total_high:Q", color=color, detail=detail))
    line = only(alt.Chart(df).mark_line().encode(x=x, y=y, color=color, detail=detail,
                                                 opacity=fade))
    # how an answer was reached, in shape and fill: measured (filled circle), blended (the
    # model's curve corrected by the nearest measured runs: half-filled square) and model
    # (hollow triangle); one legend names them
    kinds = [k for k in ANSWER_SOURCES if k in set(df["source"].to_list())] or list(
        ANSWER_SOURCES)
    pts = only(alt.Chart(df).mark_point(size=60, filled=True, strokeWidth=1.5).encode(
        x=x, y=y, stroke=color, tooltip=tip, opacity=fade,
        fill=color,
        shape=alt.Shape("source:N", title="answer from", scale=alt.Scale(
            domain=kinds, range=[ANSWER_SOURCES[k][0] for k in kinds])),
        fillOpacity=alt.FillOpacity("source:O", sort=kinds, legend=None, scale=alt.Scale(
            domain=kinds, range=[ANSWER_SOURCES[k][1] for k in kinds]))))
    layers = band + line
    if interactive:
        pts = pts.add_params(sel, target, *params)
        rule = alt.Chart(pl.DataFrame({"zero": [0]})).mark_rule(
            color="grey", strokeDash=[3, 3]).transform_calculate(
            interactivity="band_target").encode(x=x, tooltip=[alt.Tooltip(
                "interactivity:Q", title="target tok/s/user", format=".0f")])
        layers = layers + pts + rule
    else:
        layers = layers + pts
    if published is not None and published.height:
        pub = published.with_columns(pl.col("interactivity_tok_s_user").alias("interactivity"),
                                     pl.format("{} ({}), published", "hardware",
                                               "engine").alias("series"))
        layers += alt.Chart(pub).mark_point(shape="diamond", size=110, filled=True,
                                            color="black").encode(
            x=x, y=y, tooltip=["hardware", "engine", "model", "condition", "source",
                               alt.Tooltip("usd_per_mtok_total:Q", format=".4f")])
    return layers.properties(
        title=title or "Cost vs interactivity (band: 10-90% cross-validated error)",
        width=520, height=300)


def front_band(compare: pl.DataFrame, measured: pl.DataFrame, title: str) -> alt.LayerChart:
    """Modelled throughput per GPU against target interactivity (``cost compare`` rows with
    ``--model-only``) as a line with its shaded 10-90% cross-validated band, one colour per
    hardware, and measured points (``measured_points`` query) as diamonds."""
    df = compare.filter(pl.col("reachable"))
    hw = [h for h in _HW_ORDER if h in set(df["hardware"]) | set(measured["hardware"])]
    color = alt.Color("hardware:N", sort=hw, title="hardware")
    ys = pl.concat([df["tput_per_gpu_low"], df["tput_per_gpu_high"],
                    measured["tput_per_gpu"].cast(pl.Float64)]).drop_nulls()
    xs = pl.concat([df["interactivity"], measured["interactivity"].cast(pl.Float64)])
    x = alt.X("interactivity:Q", title="interactivity (tok/s/user)", scale=_fit(xs, log=True))
    yscale = _fit(ys, log=True)
    band = alt.Chart(df).mark_area(opacity=0.2).encode(
        x=x, y=alt.Y("tput_per_gpu_low:Q", scale=yscale, title="tok/s/GPU (total)"),
        y2="tput_per_gpu_high:Q", color=color)
    line = alt.Chart(df).mark_line().encode(
        x=x, y=alt.Y("tput_per_gpu:Q", scale=yscale), color=color,
        tooltip=["hardware", "engine", "basis", "layout",
                 alt.Tooltip("tput_per_gpu:Q", format=".0f")])
    pts = alt.Chart(measured).mark_point(shape="diamond", size=70, filled=True,
                                         stroke="black", strokeWidth=0.6).encode(
        x=x, y=alt.Y("tput_per_gpu:Q", scale=yscale), color=color,
        tooltip=["hardware", "framework", alt.Tooltip("tput_per_gpu:Q", format=".0f")])
    return (band + line + pts).properties(title=title, width=520, height=320)


def cluster_hit_shares(shares: pl.DataFrame, reference: pl.DataFrame | None = None,
                       title: str | None = None) -> alt.LayerChart:
    """Share of prompt tokens served from GPU and host against users per instance, one
    line per (tier, router) (the ``cluster_hit_shares`` query). ``reference``: published
    points beside them (columns ``users_per_instance``, ``source`` as in the query, e.g.
    ``GPU (L1)``, ``share``, ``label``), drawn as large hollow marks."""
    df = shares.filter(pl.col("source").is_in(["GPU (L1)", "host (L2)", "storage (L3)"])
                       & pl.col("users_per_instance").is_not_null())
    color = alt.Color("source:N", title="served from",
                      sort=["GPU (L1)", "host (L2)", "storage (L3)"])
    y = alt.Y("share:Q", title="share of prompt tokens", scale=alt.Scale(domain=[0, 1]),
              axis=alt.Axis(format="%"))
    x = alt.X("users_per_instance:Q", title="users per instance",
              scale=alt.Scale(type="log", base=2))
    lines = alt.Chart(df).mark_line(point=True).encode(
        x=x, y=y, color=color, strokeDash=alt.StrokeDash("router:N", title="router"),
        tooltip=["router", "instances", "users", "source",
                 alt.Tooltip("share:Q", format=".1%"), "run_id"])
    layers = [lines]
    if reference is not None and reference.height:
        layers.append(alt.Chart(reference).mark_point(size=160, filled=False,
                                                      strokeWidth=2).encode(
            x=x, y=y, color=color, shape=alt.Shape("label:N", title="published"),
            tooltip=["label", "source", alt.Tooltip("share:Q", format=".1%")]))
    return alt.layer(*layers).properties(
        title=title or "Where prompt tokens come from, by users per instance",
        width=420, height=260)


def cluster_ttft_cdf(cdf: pl.DataFrame, title: str | None = None) -> alt.Chart:
    """TTFT CDF per cluster run, one colour per router (log x; the ``cluster_ttft_cdf``
    query); runs of the same router at other loads or sizes are told apart by dash."""
    df = cdf.with_columns(
        pl.col("ttft_s").clip(lower_bound=1e-4),
        pl.format("x{} {}", "instances",
                  pl.when(pl.col("users").is_null()).then(pl.lit("open loop"))
                  .otherwise(pl.format("{} users", "users"))).alias("setup"))
    return alt.Chart(df).mark_line().encode(
        x=alt.X("ttft_s:Q", scale=alt.Scale(type="log"), title="TTFT (s)"),
        y=alt.Y("fraction:Q", title="fraction of requests"),
        color=alt.Color("router:N", title="router"),
        strokeDash=alt.StrokeDash("setup:N", title="instances, load"),
        detail="run_id:N",
        tooltip=["router", "setup", alt.Tooltip("ttft_s:Q", format=".3f"), "fraction"],
    ).properties(title=title or "TTFT CDF per router", width=520, height=280)


def cluster_instance_load(load: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """Requests per instance (share of the run's), one panel per router (the
    ``cluster_instance_load`` query); a balanced router sits at 1/instances."""
    df = load.with_columns(
        pl.format("x{} {}", "instances",
                  pl.when(pl.col("users").is_null()).then(pl.lit("open"))
                  .otherwise(pl.format("{}u", "users"))).alias("setup"))
    return alt.Chart(df).mark_bar().encode(
        x=alt.X("instance:O", title="instance"),
        y=alt.Y("request_share:Q", title="share of requests", axis=alt.Axis(format="%")),
        color=alt.Color("setup:N", title="instances, users"),
        xOffset="setup:N",
        tooltip=["router", "setup", "instance", "requests",
                 alt.Tooltip("request_share:Q", format=".1%"),
                 alt.Tooltip("p90_ttft_s:Q", format=".2f")],
    ).properties(width=260, height=200).facet(
        column=alt.Column("router:N", title=None)).properties(
        title=title or "Load per instance")


#: $ per M total tokens split by what it pays for, in stacking order.
PLAN_COST_PARTS = {"usd_per_mtok_gpu": "GPU", "usd_per_mtok_dram": "host DRAM",
                   "usd_per_mtok_ssd": "SSD"}
#: Hit shares of a plan, in stacking order (the rest is recomputed).
PLAN_HIT_PARTS = {"gpu_hit_share": "GPU (L1)", "host_hit_share": "host (L2)",
                  "storage_hit_share": "storage (L3)"}


def plan_cost_bars(best: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """$ per M total tokens of each accelerator's best plan, stacked into GPU, host DRAM and
    SSD, with the 10-90% cross-validated band of the total as an error bar; one panel per
    trace (``best``: one row per trace and hardware, the ``capacity_plan_best`` rows)."""
    parts = best.unpivot(index=["trace", "hardware", "plan_id", "interactivity",
                                "usd_per_mtok_total", "usd_per_mtok_total_low",
                                "usd_per_mtok_total_high", "layout"],
                         on=list(PLAN_COST_PARTS), variable_name="part",
                         value_name="usd_per_mtok").with_columns(
        pl.col("part").replace_strict(PLAN_COST_PARTS).alias("pays for"),
        pl.col("part").replace_strict({k: i for i, k in enumerate(PLAN_COST_PARTS)},
                                      return_dtype=pl.Int64).alias("part_rank"))
    hws = _numeric_order(best["hardware"])
    x = alt.X("hardware:N", title=None, sort=hws, axis=alt.Axis(labelAngle=0))
    sel = alt.selection_point(fields=["pays for"], bind="legend", name="plan_part")
    bars = alt.Chart(parts).mark_bar().encode(
        x=x, y=alt.Y("usd_per_mtok:Q", title="$ per M total tokens", stack="zero"),
        color=alt.Color("pays for:N", sort=list(PLAN_COST_PARTS.values()), title="pays for"),
        order=alt.Order("part_rank:Q"),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.25)),
        tooltip=["trace", "hardware", "pays for", alt.Tooltip("usd_per_mtok:Q", format=".4f"),
                 alt.Tooltip("usd_per_mtok_total:Q", format=".4f"),
                 alt.Tooltip("interactivity:Q", title="target tok/s/user"), "layout",
                 "plan_id"]).add_params(sel)
    band = alt.Chart(parts).mark_rule(color="black").encode(
        x=x, y="usd_per_mtok_total_low:Q", y2="usd_per_mtok_total_high:Q",
        tooltip=[alt.Tooltip("usd_per_mtok_total_low:Q", title="band low", format=".4f"),
                 alt.Tooltip("usd_per_mtok_total_high:Q", title="band high", format=".4f")])
    return (bars + band).properties(width=max(120, 60 * len(hws)), height=240).facet(
        column=alt.Column("trace:N", title="trace", sort=_numeric_order(best["trace"]))
    ).properties(title=title or "Best plan per accelerator: $/M by what it pays for "
                 "(bar: 10-90% band of the total)")


def plan_hit_bars(best: pl.DataFrame, title: str | None = None) -> alt.FacetChart:
    """Share of prompt tokens each accelerator's best plan serves from GPU, host and SSD
    (the rest recomputed), one bar per plan summing to 100%; one panel per trace."""
    rows = best.with_columns((1 - pl.sum_horizontal(list(PLAN_HIT_PARTS))).clip(0, 1)
                             .alias("recomputed_share"))
    names = {**PLAN_HIT_PARTS, "recomputed_share": "recomputed"}
    parts = rows.unpivot(index=["trace", "hardware", "plan_id"], on=list(names),
                         variable_name="part", value_name="share").with_columns(
        pl.col("part").replace_strict(names).alias("served from"),
        pl.col("part").replace_strict({k: i for i, k in enumerate(names)},
                                      return_dtype=pl.Int64).alias("part_rank"))
    hws = _numeric_order(best["hardware"])
    sel = alt.selection_point(fields=["served from"], bind="legend", name="plan_tier")
    return alt.Chart(parts).mark_bar().encode(
        x=alt.X("hardware:N", title=None, sort=hws, axis=alt.Axis(labelAngle=0)),
        y=alt.Y("share:Q", title="share of prompt tokens", stack="zero",
                scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        color=alt.Color("served from:N", sort=list(names.values())),
        order=alt.Order("part_rank:Q"),
        opacity=alt.condition(sel, alt.value(1.0), alt.value(0.25)),
        tooltip=["trace", "hardware", "served from", alt.Tooltip("share:Q", format=".1%"),
                 "plan_id"],
    ).add_params(sel).properties(width=max(120, 60 * len(hws)), height=220).facet(
        column=alt.Column("trace:N", title="trace", sort=_numeric_order(best["trace"]))
    ).properties(title=title or "Best plan per accelerator: where prompt tokens come from")
