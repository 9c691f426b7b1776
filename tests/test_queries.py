"""Named queries on a small store built from the bundled real traces: documented columns,
exact figures, and differential checks against independent computations."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from toolkit.analysis import QUERIES, run_query
from toolkit.analysis.queries import QueryError
from toolkit.cli import app
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.serving.transfer import transfer_path

runner = CliRunner()

#: Parameters that make each query return rows on the analysis store.
PARAMS = {
    "selection_heatmap": {"trace": "smollm2", "layer": 15, "request": 0, "bin": 32},
    "indexshare_overlap": {"trace": "smollm2"},
    "engram_tokens_per_usd": {"cache_bytes": 1e6},
}


def _run_ids(store, policy: str, buffer_tokens: int) -> str:
    return store.query("SELECT run_id FROM selection_runs WHERE policy = $p AND "
                       "buffer_tokens = $b", {"p": policy, "b": buffer_tokens}).item()


def _params(store, name: str) -> dict:
    if name == "run_compare":
        return {"run_a": _run_ids(store, "lru", 64), "run_b": _run_ids(store, "lru", 128)}
    return PARAMS.get(name, {})


class TestRegistry:
    # the sweep_* queries need a sweep: tests/test_sweep.py checks their columns
    @pytest.mark.parametrize("name", sorted(n for n in QUERIES if not n.startswith("sweep_")))
    def test_documented_columns_are_the_output(self, analysis_store, name):
        """Each query's documented columns are exactly what it returns, and it returns rows."""
        q = QUERIES[name]
        assert q.doc and q.columns
        df = run_query(analysis_store, name, **_params(analysis_store, name))
        assert df.columns == [c for c, _ in q.columns]
        assert df.height > 0

    def test_required_names_exist(self):
        """The issue's named queries are all registered under their exact names."""
        for n in ("tier_reuse", "miss_latency", "cost_per_mtok", "miss_ratio_curve",
                  "policy_vs_opt", "selection_locality", "run_compare", "model_vs_measured"):
            assert n in QUERIES

    def test_unknown_query_lists_known(self, analysis_store):
        """A mistyped name is one error listing the valid names."""
        with pytest.raises(QueryError, match="unknown query 'tier_reus'.*tier_reuse"):
            run_query(analysis_store, "tier_reus")

    def test_unknown_param_lists_params(self, analysis_store):
        """A parameter the query does not take is refused with the ones it does."""
        with pytest.raises(QueryError, match="no parameter.*hw.*hardware, trace"):
            run_query(analysis_store, "tier_reuse", hw="gb200")

    def test_bad_choice(self, analysis_store):
        """An enumerated parameter names its choices."""
        with pytest.raises(QueryError, match="per must be one of step, layer, request"):
            run_query(analysis_store, "miss_latency", per="token")

    def test_bind_runs_through_store_query(self, analysis_store):
        """``store.query(*QUERIES[name].bind(...))`` gives the same frame as run_query."""
        sql, args = QUERIES["miss_ratio_curve"].bind(analysis_store, trace="smollm2")
        assert analysis_store.query(sql, args).equals(
            run_query(analysis_store, "miss_ratio_curve", trace="smollm2"))

    def test_run_compare_needs_existing_runs(self, analysis_store):
        """A run id that is not in the store is an error naming it."""
        with pytest.raises(QueryError, match="no run 'nope'"):
            run_query(analysis_store, "run_compare", run_a="nope",
                      run_b=_run_ids(analysis_store, "lru", 64))


class TestTierReuse:
    def test_shares_match_tier_runs(self, analysis_store):
        """GPU/host shares equal the runs' own hit rates and every run's shares sum to 1."""
        df = run_query(analysis_store, "tier_reuse")
        runs = analysis_store.query("SELECT run_id, gpu_hit_rate, host_hit_rate FROM tier_runs")
        wide = df.pivot(on="source", index="run_id", values="share").join(runs, on="run_id")
        assert wide.height == 4
        np.testing.assert_allclose(wide["GPU (L1)"], wide["gpu_hit_rate"], rtol=1e-12)
        np.testing.assert_allclose(wide["host (L2)"], wide["host_hit_rate"], rtol=1e-12)
        sums = df.group_by("run_id").agg(pl.col("share").sum())["share"]
        np.testing.assert_allclose(sums, 1.0, rtol=1e-12)

    def test_exact_tokens_gb200_8_users(self, analysis_store):
        """Pinned token counts per source for GB200 at 8 users on the Mooncake trace."""
        df = run_query(analysis_store, "tier_reuse", hardware="gb200").filter(
            pl.col("concurrency") == 8)
        assert dict(zip(df["source"], df["tokens"], strict=True)) == {
            "GPU (L1)": 9_953_280, "host (L2)": 11_744_768, "storage (L3)": 0,
            "recomputed": 123_095_775}


class TestPrefixCurve:
    def test_capacity_in_tokens_and_gb(self, analysis_store):
        """1,000 blocks of 512 tokens; a prefix cache holds MLA rows (78 x 656 B) and the
        indexer keys of GLM-5.2's 21 Full layers (21 x 132 B) per token."""
        df = run_query(analysis_store, "prefix_hit_curve", trace="mc").filter(
            pl.col("capacity_blocks") == 1_000)
        assert df["capacity_tokens"].to_list() == [512_000, 512_000]
        assert df["capacity_gb"][0] == pytest.approx(512_000 * (78 * 656 + 21 * 132) / 1e9)
        ratios = dict(zip(df["metric"], df["ratio"], strict=True))
        assert ratios["block_hit_ratio"] == pytest.approx(12_831 / 288_500)


class TestMissLatency:
    @pytest.mark.parametrize("per,col", [("layer", "layer"), ("step", "step"),
                                         ("request", "request_id")])
    def test_matches_numpy_transfer_model(self, analysis_store, per, col):
        """Percentiles equal NumPy's over the transfer model applied row by row."""
        run = _run_ids(analysis_store, "lru", 128)
        rows = analysis_store.query(
            "SELECT step, layer, request_id, misses FROM selection_replay WHERE run_id = $r",
            {"r": run})
        path = transfer_path(get_hardware("gb200"), "sm_kernel", concurrent=True)
        lat = np.where(rows["misses"].to_numpy() > 0,
                       path.time_s(rows["misses"].to_numpy(), 656), 0.0)
        got = run_query(analysis_store, "miss_latency", run=run, per=per).sort("key")
        keys = rows[col].to_numpy()
        for key, p50, p99 in got.select("key", "p50_miss_latency_s",
                                        "p99_miss_latency_s").iter_rows():
            sel = lat[keys == key]
            assert p50 == pytest.approx(np.percentile(sel, 50), rel=1e-9, abs=1e-15)
            assert p99 == pytest.approx(np.percentile(sel, 99), rel=1e-9, abs=1e-15)

    def test_cdf_ends_at_max(self, analysis_store):
        """The CDF's last fraction is the largest per-row latency of the run."""
        run = _run_ids(analysis_store, "lru", 64)
        cdf = run_query(analysis_store, "miss_latency_cdf", run=run)
        worst = run_query(analysis_store, "miss_latency", run=run, per="layer")
        assert cdf.height == 101
        assert cdf["miss_latency_s"][-1] == pytest.approx(worst["max_miss_latency_s"].max())
        assert (cdf["miss_latency_s"].diff().drop_nulls() >= 0).all()


class TestSelections:
    def test_miss_ratio_curve_exact(self, analysis_store):
        """LRU at 2k = 128 slots misses 15.66% of the real SmolLM2 trace; 128 tokens of
        GLM-5.2 FP8 KV over 78 layers are 128 x 78 x 656 B."""
        df = run_query(analysis_store, "miss_ratio_curve").filter(
            (pl.col("policy") == "lru") & (pl.col("buffer_tokens") == 128)).row(0, named=True)
        assert df["misses"] == 307_873 and df["accesses"] == 1_966_080
        assert df["buffer_gb_per_request"] == pytest.approx(
            128 * get_model("glm-5.2").mla_bytes_per_token("fp8") / 1e9)
        assert df["buffer_gb_per_request"] == pytest.approx(128 * 78 * 656 / 1e9)

    def test_policy_vs_opt_exact(self, analysis_store):
        """LRU takes 2.147x OPT's misses at a 64-slot buffer, 1.711x at 128."""
        df = run_query(analysis_store, "policy_vs_opt").sort("buffer_tokens")
        assert df["misses"].to_list() == [840_079, 307_873]
        assert df["opt_misses"].to_list() == [391_271, 179_892]
        assert df["misses_over_opt"].to_list() == pytest.approx(
            [840_079 / 391_271, 307_873 / 179_892])

    def test_best_policy_never_opt(self, analysis_store):
        """The best online policy is an online one, and OPT never misses more."""
        df = run_query(analysis_store, "best_policy")
        assert set(df["best_policy"]) == {"lru"}
        assert (df["opt_miss_ratio"] <= df["best_miss_ratio"]).all()

    def test_locality_matches_separate_queries(self, analysis_store):
        """selection_locality (list_filter formulation) equals the unnest-based queries."""
        loc = run_query(analysis_store, "selection_locality", trace="smollm2", window=128)
        mix = run_query(analysis_store, "selection_position_mix", trace="smollm2", window=128)
        step = run_query(analysis_store, "selection_step_overlap", trace="smollm2")
        lay = run_query(analysis_store, "selection_layer_overlap", trace="smollm2")
        for a, b in (("frac_recent", mix["frac_recent"]), ("frac_sinks", mix["frac_sinks"]),
                     ("pos0_rate", mix["pos0_rate"]),
                     ("step_overlap_of_k", step["overlap_of_k"])):
            np.testing.assert_allclose(loc[a], b, rtol=1e-12)
        np.testing.assert_allclose(loc["layer_overlap_of_k"][:-1], lay["overlap_of_k"],
                                   rtol=1e-12)
        assert loc["layer_overlap_of_k"][-1] is None
        assert loc["frac_recent"][0] == pytest.approx(0.847992, abs=1e-6)


class TestCost:
    def test_front_is_pareto(self, analysis_store):
        """on_front marks exactly the runs no other run of the same source and hardware
        beats on both interactivity and cost (brute force)."""
        df = run_query(analysis_store, "cost_per_mtok")
        for r in df.iter_rows(named=True):
            same = df.filter((pl.col("source") == r["source"])
                             & (pl.col("hardware") == r["hardware"]))
            dominated = any(
                o["interactivity_tok_s_user"] >= r["interactivity_tok_s_user"]
                and o["usd_per_mtok_total"] <= r["usd_per_mtok_total"]
                and (o["interactivity_tok_s_user"] > r["interactivity_tok_s_user"]
                     or o["usd_per_mtok_total"] < r["usd_per_mtok_total"])
                for o in same.iter_rows(named=True))
            assert r["on_front"] == (not dominated)

    def test_exact_tier_cost(self, analysis_store):
        """GB200 at 8 users: $1.86/GPU-hr over the replay's tokens/s."""
        r = run_query(analysis_store, "cost_per_mtok", hardware="gb200").filter(
            pl.col("setting") == "concurrency 8").row(0, named=True)
        assert r["usd_per_gpu_hour"] == 1.86
        assert r["usd_per_mtok_total"] == pytest.approx(
            1.86 / (r["total_tokens_per_s_per_gpu"] * 3600 / 1e6))
        assert r["usd_per_mtok_total"] == pytest.approx(0.178806, abs=1e-6)  # serving-model times

    def test_step_terms_sum_to_tpot(self, analysis_store):
        """Stacked terms add up to the mean decode step; overlap hides some miss I/O."""
        df = run_query(analysis_store, "step_time")
        sums = df.group_by("run_id").agg(pl.col("time_s").sum(), pl.col("mean_tpot_s").first())
        np.testing.assert_allclose(sums["time_s"], sums["mean_tpot_s"], rtol=1e-12)
        exposed = df.filter((pl.col("term_rank") == 2) & (pl.col("batch_per_gpu") == 64))
        sync = exposed.filter(~pl.col("overlap"))["time_s"].item()
        assert exposed.filter(pl.col("overlap"))["time_s"].item() < sync

    def test_published_points(self, analysis_store):
        """The bundled published figures, as quoted."""
        df = run_query(analysis_store, "published_costs")
        assert df.filter(pl.col("hardware") == "gb200")["usd_per_mtok_total"].item() == 0.044


class TestRunsAndCompare:
    def test_runs_lists_every_run(self, analysis_store):
        """One row per run: 3 prefix + 4 tiers + 4 selections + 3 priced + 3 Engram + 1
        set of modelled fronts."""
        df = run_query(analysis_store, "runs")
        assert df.group_by("kind").len().sort("kind").rows() == [
            ("decode_cost", 3), ("engram", 3), ("prefix", 3), ("selections", 4),
            ("serving_fronts", 1), ("tiers", 4)]

    def test_compare_two_selection_runs(self, analysis_store):
        """Side by side: config text equal, buffer and misses differ by the stored amounts."""
        df = run_query(analysis_store, "run_compare", **_params(analysis_store, "run_compare"))
        row = {r["metric"]: r for r in df.iter_rows(named=True)}
        assert row["policy"]["a"] == row["policy"]["b"] == "lru"
        assert row["buffer_tokens"]["b_minus_a"] == 64
        assert row["misses"]["b_minus_a"] == 307_873 - 840_079
        assert row["misses"]["b_over_a"] == pytest.approx(307_873 / 840_079)

    def test_compare_across_kinds(self, analysis_store):
        """A tier run against a prefix run: shared columns align, the others are one-sided."""
        tier = analysis_store.query("SELECT min(run_id) FROM tier_runs").item()
        pre = analysis_store.query("SELECT min(run_id) FROM replay_runs").item()
        df = run_query(analysis_store, "run_compare", run_a=tier, run_b=pre)
        row = {r["metric"]: r for r in df.iter_rows(named=True)}
        assert row["requests"]["a"] == row["requests"]["b"] == "12031.0"
        assert row["hardware"]["b"] is None and row["block_hits"]["a"] is None


class TestModelVsMeasured:
    def test_rows_and_error(self, analysis_store):
        """300 held-out throughput points; rel_err recomputed from the bundled CSV."""
        df = run_query(analysis_store, "model_vs_measured")
        assert df.height == 300
        np.testing.assert_allclose(df["rel_err"], df["predicted"] / df["measured"] - 1)
        tpot = run_query(analysis_store, "model_vs_measured", metric="median_tpot",
                         hardware="mi355x")
        assert set(tpot["hardware"]) == {"mi355x"} and set(tpot["unit"]) == {"s"}


class TestMoreQueries:
    def test_indexshare_matches_locality_function(self, analysis_store):
        """The SQL anchor mapping equals toolkit.analysis.locality.indexshare_overlap."""
        from toolkit.analysis.locality import indexshare_overlap
        from toolkit.models.spec import indexer_layer_ids

        got = run_query(analysis_store, "indexshare_overlap", trace="smollm2", freq=4, offset=3)
        ref = indexshare_overlap(analysis_store, "smollm2", indexer_layer_ids(30, 4, 3))
        assert got["layer"].to_list() == ref["layer"].to_list()
        assert got["anchor"].to_list() == ref["anchor"].to_list()
        np.testing.assert_allclose(got["overlap_of_k"], ref["overlap_of_k"], rtol=1e-12)
        assert len(got) == 30 - 9  # 9 Full layers of 30 under GLM-5.2's rule

    def test_model_error_matches_polars(self, analysis_store):
        """Median held-out throughput error per hardware, recomputed from the bundled CSV."""
        from toolkit.serving.params import bundled_cv_dir

        csv = pl.read_csv(bundled_cv_dir() / "heldout_hardware.csv")
        ref = csv.group_by("hardware").agg(
            ((pl.col("pred_tput_per_gpu") / pl.col("tput_per_gpu") - 1).abs().median())
            .alias("e")).sort("hardware")
        got = run_query(analysis_store, "model_error").filter(
            pl.col("metric") == "throughput per GPU").sort("key")
        assert got["key"].to_list() == ref["hardware"].to_list()
        np.testing.assert_allclose(got["median_abs_err"], ref["e"], rtol=1e-12)

    def test_engram_lru_replay_on_one_pass_curve(self, analysis_store):
        """The 1 MB LRU replay's hit ratio is the one-pass curve's at its capacity."""
        rows = analysis_store.query("SELECT capacity_rows, hit_ratio FROM engram_runs "
                                    "WHERE policy = 'lru' AND backing = 'dram'").row(0)
        curve = analysis_store.query(
            "SELECT 1 - miss_ratio FROM miss_curves WHERE kind = 'engram' AND capacity = $c",
            {"c": rows[0]}).item()
        assert rows[1] == pytest.approx(curve, rel=1e-12)
        df = run_query(analysis_store, "engram_hit_curve", step=1000)
        assert set(df["source"]) == {"curve", "replay"}
        assert set(df.filter(pl.col("source") == "replay")["policy"]) == {"lru", "opt"}

    def test_engram_tokens_per_usd(self, analysis_store):
        """HBM placement once per hardware, DRAM and SSD with both fetch modes."""
        df = run_query(analysis_store, "engram_tokens_per_usd", cache_bytes=1e6)
        assert sorted(zip(df["placement"], df["fetch_mode"], strict=True)) == [
            ("dram", "overlapped"), ("dram", "sync"), ("hbm", "none"),
            ("ssd", "overlapped"), ("ssd", "sync")]
        ssd = analysis_store.query("SELECT tokens_per_usd_sync FROM engram_runs WHERE "
                                   "backing = 'ssd'").item()
        got = df.filter((pl.col("placement") == "ssd") & (pl.col("fetch_mode") == "sync"))
        assert got["m_tokens_per_usd"].item() == pytest.approx(ssd / 1e6)

    def test_serving_fronts_are_pareto(self, analysis_store):
        """Per hardware, interactivity rises and throughput falls along the front (no point
        dominates another)."""
        df = run_query(analysis_store, "serving_fronts")
        assert set(df["hardware"]) == {"gb200", "mi355x"}
        for hw in ("gb200", "mi355x"):
            f = df.filter(pl.col("hardware") == hw).sort("interactivity")
            assert f.height >= 2
            assert (f["tput_per_gpu"].diff().drop_nulls() < 0).all()

    def test_measured_points(self, analysis_store):
        """GB200 FP4 8K/1K points of the bundled InferenceX data."""
        df = run_query(analysis_store, "measured_points", hardware="gb200")
        assert df.height > 0 and set(df["isl"]) == {8192} and set(df["precision"]) == {"fp4"}


class TestCli:
    def test_list_queries(self):
        """--list-queries needs no store and lists every query on one line (name,
        parameters, what it returns); with --query NAME it describes that one's columns."""
        res = runner.invoke(app, ["sql", "--list-queries"])
        assert res.exit_code == 0
        names = [ln.split()[0] for ln in res.output.splitlines()[2:-1]]
        assert names == sorted(QUERIES)
        assert len(res.output.splitlines()) == len(QUERIES) + 3
        res = runner.invoke(app, ["sql", "--list-queries", "--query", "miss_latency"])
        assert res.exit_code == 0 and "-> p99_miss_latency_s: s" in res.output
        res = runner.invoke(app, ["sql", "--list-queries", "--query", "nope"])
        assert res.exit_code == 2

    def test_query_with_params_csv(self, analysis_store):
        """--query NAME --param k=v runs the named query with bound parameters."""
        res = runner.invoke(app, ["sql", "--store", str(analysis_store.root), "--format", "csv",
                                  "--query", "tier_reuse", "--param", "hardware=mi355x"])
        assert res.exit_code == 0, res.output
        df = pl.read_csv(res.stdout.encode())
        assert df.height == 8 and set(df["hardware"]) == {"mi355x"}

    @pytest.mark.parametrize("args,msg", [
        (["--query", "nope"], "unknown query 'nope'; known: best_policy"),
        (["--query", "tier_reuse", "--param", "hw=x"], "no parameter(s) hw"),
        (["--query", "tier_reuse", "--param", "hardware"], "--param must be k=v"),
        (["--query", "miss_latency", "--param", "hardware=tpu9"], "tpu9"),
    ])
    def test_bad_query_input_is_one_line(self, analysis_store, args, msg):
        """Bad names and parameters exit 2 with one line naming the problem."""
        res = runner.invoke(app, ["sql", "--store", str(analysis_store.root), *args])
        assert res.exit_code == 2
        assert msg in res.output and len(res.output.strip().splitlines()) == 1
