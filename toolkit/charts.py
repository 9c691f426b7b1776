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
