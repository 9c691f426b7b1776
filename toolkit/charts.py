"""Altair chart builders: take query results, return charts, draw nothing."""

from __future__ import annotations

import altair as alt
import polars as pl

_METRIC_LABELS = {"block_hit_ratio": "blocks", "token_hit_ratio": "prompt tokens"}


def hit_ratio_vs_capacity(curve: pl.DataFrame, title: str | None = None) -> alt.LayerChart:
    """Hit ratio against cache capacity (log scale); unbounded runs become dashed rules.

    Args:
        curve: the ``prefix_hit_curve`` query result (trace, policy, capacity_blocks,
            metric, ratio).
    """
    df = curve.with_columns(
        pl.col("metric").replace_strict(_METRIC_LABELS, default=pl.col("metric")).alias("hit of")
    )
    bounded = df.filter(pl.col("capacity_blocks").is_not_null())
    unbounded = df.filter(pl.col("capacity_blocks").is_null())
    color = alt.Color("hit of:N", title="hit ratio of")
    base = alt.Chart(bounded).encode(
        x=alt.X("capacity_blocks:Q", scale=alt.Scale(type="log"), title="LRU capacity (blocks)"),
        y=alt.Y("ratio:Q", title="hit ratio", scale=alt.Scale(domain=[0, 1])),
        color=color,
        detail="trace:N",
        tooltip=[
            "trace", "policy", "capacity_blocks", "hit of", alt.Tooltip("ratio", format=".4f")
        ],
    )
    lines = base.mark_line(point=True)
    rules = (
        alt.Chart(unbounded)
        .mark_rule(strokeDash=[4, 3])
        .encode(y="ratio:Q", color=color, tooltip=["trace", "hit of", "ratio"])
    )
    return (lines + rules).properties(
        title=title or "Prefix-cache hit ratio vs capacity (dashed: unbounded)",
        width=520,
        height=300,
    )


def metric_by_layer(df: pl.DataFrame, metrics: list[str], title: str,
                    y_title: str = "share") -> alt.Chart:
    """One line per metric across layers (e.g. frac_recent, frac_sinks, pos0_rate)."""
    long = df.unpivot(index="layer", on=metrics, variable_name="metric", value_name="value")
    return alt.Chart(long).mark_line(point=True).encode(
        x=alt.X("layer:O", title="layer"),
        y=alt.Y("value:Q", title=y_title),
        color=alt.Color("metric:N", title=None),
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
    """Miss ratio against buffer size, one line per policy (``selection_runs`` query)."""
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("buffer_tokens:Q", scale=alt.Scale(type="log"), title="device buffer (tokens)"),
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


def cost_vs_interactivity(df: pl.DataFrame, title: str) -> alt.Chart:
    """$/M total tokens against interactivity, one line per hardware (batch sweep)."""
    return alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("interactivity_tok_s_user:Q", title="interactivity (tok/s/user)"),
        y=alt.Y("usd_per_million_total_tokens:Q", title="$ per M total tokens",
                scale=alt.Scale(type="log")),
        color=alt.Color("hardware:N"),
        strokeDash=alt.StrokeDash("overlap:N", title="miss I/O overlapped"),
        tooltip=["hardware", "batch_per_gpu", "overlap",
                 alt.Tooltip("interactivity_tok_s_user", format=".1f"),
                 alt.Tooltip("usd_per_million_total_tokens", format=".4f")],
    ).properties(title=title, width=520, height=300)


def link_vs_hbm(df: pl.DataFrame, title: str) -> alt.LayerChart:
    """Miss-transfer time over HBM/compute time per step; above 1 the host link, not HBM,
    sets the step time."""
    line = alt.Chart(df).mark_line(point=True).encode(
        x=alt.X("buffer_tokens:Q", scale=alt.Scale(type="log"), title="device buffer (tokens)"),
        y=alt.Y("link_over_work:Q", title="miss I/O time / HBM+compute time",
                scale=alt.Scale(type="log")),
        color=alt.Color("hardware:N"),
        tooltip=["hardware", "buffer_tokens", alt.Tooltip("link_over_work", format=".3f")],
    )
    rule = alt.Chart(pl.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 3]).encode(y="y:Q")
    return (line + rule).properties(title=title, width=520, height=280)


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
