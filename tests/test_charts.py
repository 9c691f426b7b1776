"""Chart builders: one per named query, asserted on ``chart.to_dict()`` (nothing drawn)."""

from __future__ import annotations

import polars as pl
import pytest

from toolkit import charts as ch
from toolkit.analysis import run_query


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def _legends(spec: dict) -> set[str]:
    """Titles of every colour legend in a (possibly layered/faceted) spec."""
    inner = spec.get("spec", spec)
    return {layer["encoding"]["color"].get("title") for layer in _layers(inner)
            if "color" in layer.get("encoding", {})}


class TestPrefixCurve:
    def test_one_readable_legend_and_capacity_in_gb(self, analysis_store):
        """Legend names the share, not raw column names or policies; the x axis gives tokens
        and GB of the named model at the replayed capacities; y is fitted to the data."""
        curve = run_query(analysis_store, "prefix_hit_curve", trace="mc")
        spec = ch.hit_ratio_vs_capacity(curve).to_dict()
        assert _legends(spec) == {"hit ratio as"}
        line = spec["layer"][0]["encoding"]
        assert line["color"]["sort"] == ["share of block lookups", "share of prompt tokens"]
        assert line["x"]["field"] == "capacity_tokens"
        assert line["x"]["axis"]["values"] == [512_000, 5_120_000]
        assert "GB of glm-5.2 KV" in line["x"]["axis"]["title"]
        assert "GB" in line["x"]["axis"]["labelExpr"]
        top = curve["ratio"].max()
        assert line["y"]["scale"]["domain"] == pytest.approx([0.0, top * 1.05])
        values = {r["hit of"] for r in spec["datasets"][spec["layer"][0]["data"]["name"]]}
        assert values == {"share of block lookups", "share of prompt tokens"}


class TestTierReuse:
    def test_stacked_in_numeric_order(self, analysis_store):
        """One bar per run (so a bar sums to 100%), runs in numeric order of users and
        labelled with their load; bars stack GPU, host, storage, recomputed; one panel
        column per hardware, one row per trace."""
        reuse = run_query(analysis_store, "tier_reuse")
        spec = ch.tier_reuse_bars(reuse).to_dict()
        enc = spec["spec"]["encoding"]
        assert spec["spec"]["mark"]["type"] == "bar"
        users = dict(reuse.select("run_id", "concurrency").unique().iter_rows())
        assert enc["x"]["field"] == "run_id" and len(enc["x"]["sort"]) == len(users)
        for hw in ("gb200", "mi355x"):
            mine = [r for r in enc["x"]["sort"] if hw in r]
            assert [users[r] for r in mine] == [8, 16]
        assert "8 users" in enc["x"]["axis"]["labelExpr"]
        assert spec["facet"]["row"]["field"] == "trace"
        assert enc["color"]["sort"] == ["GPU (L1)", "host (L2)", "storage (L3)", "recomputed"]
        assert enc["y"]["stack"] == "zero" and enc["order"]["field"] == "source_rank"
        assert spec["facet"]["column"]["sort"] == ["gb200", "mi355x"]

    def test_upright_labels_and_no_empty_slots(self, analysis_store):
        """Load labels stay upright (a lone "8" on its side reads as ∞) and each panel has
        only the loads replayed on its hardware."""
        spec = ch.tier_reuse_bars(run_query(analysis_store, "tier_reuse")).to_dict()
        assert spec["spec"]["encoding"]["x"]["axis"]["labelAngle"] == 0
        assert spec["resolve"]["scale"]["x"] == "independent"

    def test_numeric_sort_beyond_single_digits(self):
        """4, 8, 16, 32 sort as numbers (not 16, 32, 4, 8)."""
        rows = [{"run_id": f"r{c}", "hardware": "gb200", "concurrency": c, "source": s,
                 "source_rank": i, "share": 0.5, "tokens": 1}
                for c in (16, 32, 4, 8) for i, s in enumerate(("GPU (L1)", "recomputed"), 1)]
        spec = ch.tier_reuse_bars(pl.DataFrame(rows)).to_dict()
        assert spec["spec"]["encoding"]["x"]["sort"] == ["r4", "r8", "r16", "r32"]


class TestSelections:
    def test_miss_ratio_curves_opt_dashed(self, analysis_store):
        """Policies in one legend with OPT labelled as the bound and drawn dashed."""
        spec = ch.miss_ratio_curves(run_query(analysis_store, "miss_ratio_curve")).to_dict()
        enc = spec["encoding"]
        assert enc["color"]["sort"] == ["lru", "OPT (bound)"]
        assert enc["strokeDash"]["condition"]["test"] == "datum.is_bound"
        assert enc["x"]["axis"]["values"] == [64, 128]
        assert "GB per request" in enc["x"]["axis"]["title"]
        assert enc["x"]["scale"]["type"] == "log"

    def test_miss_latency_cdf(self, analysis_store):
        """Colour is the policy and the dash the buffer, so no two runs look alike; latency
        in µs on an axis zoomed to the non-zero latencies; fraction on [0, 1]."""
        cdf = run_query(analysis_store, "miss_latency_cdf")
        spec = ch.miss_latency_cdf(cdf).to_dict()
        enc = spec["encoding"]
        assert spec["mark"]["type"] == "line" and spec["mark"]["clip"] is True
        assert enc["x"]["field"] == "miss_latency_us"
        assert enc["color"]["field"] == "policy" and enc["color"]["sort"] == ["lru", "opt"]
        assert enc["strokeDash"]["field"] == "buffer" and enc["strokeDash"]["sort"] == [
            "64", "128"]
        assert enc["y"]["scale"]["domain"] == [0, 1]
        busy = cdf.filter(pl.col("miss_latency_s") > 0)["miss_latency_s"] * 1e6
        lo, hi = enc["x"]["scale"]["domain"]
        assert 0 < lo < busy.min() and busy.max() < hi
        assert (hi - lo) < 1.2 * (busy.max() - busy.min())  # the data fill the axis

    def test_miss_latency_cdf_names_the_assumed_round_trip(self, analysis_store):
        """Given the assumed fixed cost, the chart draws it as a rule and says in its
        subtitle that it is an assumption that dominates the curves."""
        spec = ch.miss_latency_cdf(run_query(analysis_store, "miss_latency_cdf"),
                                   fixed_s=1.3e-6).to_dict()
        rule, line = spec["layer"]
        assert rule["mark"]["type"] == "rule"
        assert rule["encoding"]["x"]["scale"] == line["encoding"]["x"]["scale"]
        assert spec["title"]["subtitle"].startswith("assumed fixed cost per transfer 1.30 µs")
        assert "assumption" in spec["title"]["subtitle"]

    def test_capacity_labels_exact_tokens_and_mb(self, analysis_store):
        """Buffer ticks read as exact tokens (128, not 130) and sizes below 0.1 GB in MB."""
        spec = ch.miss_ratio_curves(run_query(analysis_store, "miss_ratio_curve")).to_dict()
        expr = spec["encoding"]["x"]["axis"]["labelExpr"]
        assert "format(datum.value, ',')" in expr and "'.2~s'" not in expr
        assert "< 0.1 ?" in expr and "' MB'" in expr and "' GB'" in expr

    def test_misses_vs_buffer_axis_spans_the_data(self, analysis_store):
        """The log axis spans the replayed buffer sizes only, ticked at each of them."""
        runs = run_query(analysis_store, "selection_runs")
        spec = ch.misses_vs_buffer(runs, "t").to_dict()
        x = spec["encoding"]["x"]
        sizes = sorted(set(runs["buffer_tokens"]))
        assert x["axis"]["values"] == sizes and x["scale"]["type"] == "log"
        lo, hi = x["scale"]["domain"]
        assert sizes[0] / 1.2 < lo < sizes[0] and sizes[-1] < hi < sizes[-1] * 1.2

    def test_heatmap(self, analysis_store):
        """Heat map of step x position bin, coloured by count."""
        heat = run_query(analysis_store, "selection_heatmap", trace="smollm2", layer=15,
                         request=0, bin=32)
        spec = ch.selection_heatmap(heat, "t").to_dict()
        assert spec["mark"]["type"] == "rect"
        assert spec["encoding"]["color"]["field"] == "selected"


class TestCost:
    def test_pareto_with_published(self, analysis_store):
        """Points, front lines and published diamonds share one hardware legend whose
        domain includes hardware only the published figures have."""
        cost = run_query(analysis_store, "cost_per_mtok")
        pub = run_query(analysis_store, "published_costs")
        spec = ch.cost_pareto(cost, pub).to_dict()
        marks = [layer["mark"]["type"] for layer in spec["layer"]]
        assert marks == ["point", "line", "point"]
        assert spec["layer"][2]["mark"]["shape"] == "diamond"
        assert _legends(spec) == {"hardware"}
        assert spec["layer"][0]["encoding"]["color"]["sort"] == ["gb200", "gb300", "mi355x"]
        front = spec["datasets"][spec["layer"][1]["data"]["name"]]
        assert all(r["on_front"] for r in front)
        lo, hi = spec["layer"][0]["encoding"]["y"]["scale"]["domain"]
        assert lo < 0.044 and hi > cost["usd_per_mtok_total"].max()

    @pytest.mark.parametrize("interactive", [False, True])
    def test_cost_band_marks_measured_blended_and_model_apart(self, interactive):
        """The cost chart's points encode ``source`` in shape and fill with one legend:
        measured, blended and modelled answers are three distinct (shape, fill) pairs."""
        rows = [{"hardware": "gb200", "engine": "dynamo-sglang", "model": "glm-5.2",
                 "interactivity": x, "source": s, "basis": "fitted-pair", "layout": "8P+8D",
                 "reachable": True, "usd_per_mtok_total": c, "usd_per_mtok_total_low": c * 0.8,
                 "usd_per_mtok_total_high": c * 1.3, "p90_ttft_s": 2.0}
                for x, s, c in [(20.0, "measured", 0.05), (40.0, "blended", 0.08),
                                (60.0, "model", 0.12)]]
        spec = ch.cost_band(pl.DataFrame(rows), interactive=interactive).to_dict()
        pts = [la for la in spec["layer"] if la["mark"]["type"] == "point"][0]
        enc = pts["encoding"]
        assert enc["shape"]["field"] == "source" and enc["shape"]["title"] == "answer from"
        assert enc["fillOpacity"]["field"] == "source"
        kinds = enc["shape"]["scale"]["domain"]
        assert kinds == ["measured", "blended", "model"]
        pairs = set(zip(enc["shape"]["scale"]["range"], enc["fillOpacity"]["scale"]["range"],
                        strict=True))
        assert len(pairs) == 3
        fill = dict(zip(kinds, enc["fillOpacity"]["scale"]["range"], strict=True))
        assert fill["measured"] == 1.0 and fill["model"] == 0.0
        assert 0.0 < fill["blended"] < 1.0
        assert enc["fillOpacity"]["legend"] is None  # one legend (shape) names the sources

    def test_step_time_stacked_terms(self, analysis_store):
        """Work below exposed miss I/O, configurations sorted by hardware and batch."""
        spec = ch.step_time_breakdown(run_query(analysis_store, "step_time")).to_dict()
        enc = spec["encoding"]
        assert enc["color"]["sort"] == ["HBM / compute work", "miss I/O (exposed)"]
        assert enc["x"]["sort"] == ["gb200 b16 sync", "gb200 b64 sync", "gb200 b64 overlapped"]
        assert enc["y"]["field"] == "time_ms"


class TestMoreBuilders:
    def test_engram_bytes_log_bars_unstacked(self, analysis_store):
        """Log-scale bars must not stack from zero (they would vanish); tiers in order."""
        spec = ch.engram_bytes_per_token(
            run_query(analysis_store, "engram_bytes_per_token")).to_dict()
        enc = spec["spec"]["encoding"]
        assert enc["y"]["stack"] is None and enc["y"]["scale"]["type"] == "log"
        assert enc["color"]["sort"] == ["HBM", "backing, useful", "backing, read"]
        assert spec["facet"]["column"]["sort"] == ["dram", "ssd"]

    def test_engram_hit_curve_layers(self, analysis_store):
        """Grey one-pass line under replayed points, one legend for the policies."""
        spec = ch.engram_hit_curve(run_query(analysis_store, "engram_hit_curve")).to_dict()
        assert [lyr["mark"]["type"] for lyr in spec["layer"]] == ["line", "point"]
        assert _legends(spec) == {"replayed policy"}

    def test_indexshare_distance_order(self, analysis_store):
        """Distance legend sorted as numbers; the y domain fitted to the overlaps."""
        share = run_query(analysis_store, "indexshare_overlap", trace="smollm2")
        spec = ch.indexshare_bars(share).to_dict()
        assert spec["encoding"]["color"]["sort"] == ["1", "2", "3"]
        assert spec["encoding"]["y"]["scale"]["domain"][1] == pytest.approx(
            share["overlap_of_k"].max() * 1.05)

    def test_locality_legend_readable(self, analysis_store):
        """No raw column names in the legend (the nb02 defect)."""
        loc = run_query(analysis_store, "selection_locality", trace="smollm2")
        spec = ch.metric_by_layer(loc, ["frac_recent", "pos0_rate"], "t").to_dict()
        values = {r["metric"] for r in spec["datasets"][spec["data"]["name"]]}
        assert values == {"in the recency window", "selections holding position 0"}


class TestCluster:
    def test_hit_shares_with_reference(self, analysis_store):
        """GPU/host shares against users per instance, dashed by router, published points
        as hollow marks; the recomputed share is not a line."""
        shares = run_query(analysis_store, "cluster_hit_shares", trace="mc")
        assert set(shares["users_per_instance"].to_list()) == {4.0, 8.0}
        ref = pl.DataFrame({"users_per_instance": [8.0, 16.0], "source": ["GPU (L1)"] * 2,
                            "share": [0.903, 0.548], "label": ["AgentX"] * 2})
        spec = ch.cluster_hit_shares(shares, ref).to_dict()
        assert len(spec["layer"]) == 2
        line = spec["layer"][0]["encoding"]
        assert line["strokeDash"]["field"] == "router"
        data = spec["datasets"][spec["layer"][0]["data"]["name"]]
        assert {r["source"] for r in data} == {"GPU (L1)", "host (L2)", "storage (L3)"}

    def test_ttft_cdf_per_router_and_load(self, analysis_store):
        cdf = run_query(analysis_store, "cluster_ttft_cdf", trace="mc")
        assert cdf["run_id"].n_unique() == 4 and cdf.height == 4 * 101
        spec = ch.cluster_ttft_cdf(cdf).to_dict()
        assert spec["encoding"]["color"]["field"] == "router"
        assert spec["encoding"]["x"]["scale"]["type"] == "log"

    def test_instance_load_sums_to_one(self, analysis_store):
        load = run_query(analysis_store, "cluster_instance_load")
        sums = load.group_by("run_id").agg(pl.col("request_share").sum())["request_share"]
        assert sums.to_list() == pytest.approx([1.0] * 4)
        assert ch.cluster_instance_load(load).to_dict()["facet"]["column"]["field"] == "router"
