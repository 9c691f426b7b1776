"""Cluster replay: one instance is the tier replay request for request; N instances keep
separate caches (differential check against single-instance replays of each instance's
share); routers on worked cases; cache-aware vs round-robin on the bundled Mooncake trace;
properties on random chained traces; the CLI and the tables."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.budget import examples
from tests.test_tiers import _chain, _hashes, _store_trace
from toolkit.cost.from_replay import run_cluster, run_tiers
from toolkit.ingest.fields import requests_table
from toolkit.replay.tiers import (
    CLUSTER_REQUESTS,
    CLUSTER_RUNS,
    RUN_KEYS,
    UNBOUNDED,
    ClusterReplayConfig,
    TierReplayConfig,
)
from toolkit.replay.tiers.cluster import stream_for

HITS = ("device_hit_tokens", "host_hit_tokens", "storage_hit_tokens")
TIER_HITS = ("device_tokens", "host_tokens", "storage_tokens")


def _cols(t, names):
    return np.column_stack([t.column(n).to_numpy() for n in names])


@pytest.mark.parametrize("kw", [
    {},  # SGLang radix + HiCache host tier, the trace's own arrivals
    {"concurrency": 48, "device_tokens": 200_000, "host_tokens": 300_000,
     "storage_tokens": 2_000_000},  # closed loop, evictions in all three tiers
    {"concurrency": 32, "engine_semantics": "vllm", "offload_policy": "lru",
     "device_tokens": 300_000, "host_tokens": 600_000},
    {"concurrency": 16, "radix_semantics": "page", "device_tokens": 100_000,
     "max_running": 8},
])
def test_one_instance_is_the_tier_replay(mooncake_store, kw):
    """``replay cluster`` with one instance and round-robin = ``replay tiers``: hits per
    tier, admission, TTFT and finish of every request, and the run's totals."""
    t = TierReplayConfig("conv", **kw)
    a = run_tiers(mooncake_store, t, save=False)
    b = run_cluster(mooncake_store, ClusterReplayConfig(t), save=False)
    ra, rb = a.requests, b.requests
    assert ra.column("request_id").equals(rb.column("request_id"))
    assert np.array_equal(_cols(ra, TIER_HITS), _cols(rb, HITS))
    for col in ("admit_s", "first_token_s", "finish_s", "ttft_s"):
        assert np.array_equal(ra.column(col).to_numpy(), rb.column(col).to_numpy()), col
    assert set(rb.column("instance").to_pylist()) == {0}
    for k in ("device_hit_tokens", "host_hit_tokens", "storage_hit_tokens", "p50_ttft_s",
              "p90_ttft_s", "device_capacity_tokens", "host_capacity_tokens"):
        assert a.summary[k] == b.summary[k], k
    assert b.summary["gpus"] == 8


@pytest.mark.parametrize("kw", [
    {"device_tokens": 60_000, "host_tokens": 90_000, "storage_tokens": 200_000},
    {"device_tokens": 60_000, "host_tokens": 90_000, "radix_semantics": "page",
     "policy": "lfu"},
    {"device_tokens": 60_000, "host_tokens": 90_000, "engine_semantics": "vllm",
     "offload_policy": "arc"},
])
def test_instances_keep_separate_caches(mooncake_store, kw):
    """Round-robin with every request finished before the next arrives sends request k to
    instance k mod N; each instance's hits then equal a single-instance replay of its own
    share of the trace (bounded tiers, so evictions happen). The instances number their
    keys locally; the single replays use the trace's global numbering."""
    conv = mooncake_store.read("requests", "conv").slice(0, 600)
    n = conv.num_rows
    far = requests_table("far", [i * 1e5 for i in range(n)],
                         conv.column("input_tokens").to_pylist(),
                         conv.column("output_tokens").to_pylist(), 512,
                         conv.column("block_hashes").to_pylist())
    mooncake_store.write("requests", "far", far, replace=True)
    res = run_cluster(mooncake_store, ClusterReplayConfig(
        TierReplayConfig("far", **kw), instances=3), save=False).requests
    inst = res.column("instance").to_numpy()
    assert np.array_equal(inst, np.arange(n) % 3)
    for i in range(3):
        part = far.take(np.flatnonzero(np.arange(n) % 3 == i))
        name = f"far{i}"
        mooncake_store.write("requests", name, part.set_column(
            0, "trace", part.column("trace").cast("string").fill_null(name)), replace=True)
        one = run_tiers(mooncake_store, TierReplayConfig(name, **kw), save=False).requests
        mine = res.filter(res.column("instance").to_numpy() == i)
        assert np.array_equal(_cols(one, TIER_HITS), _cols(mine, HITS)), i
    assert int(_cols(res, HITS).sum()) > 0


def _tiny(store, name, rows, spacing=1e4):
    """rows: hash lists (4-token blocks); prompts are whole blocks."""
    return _store_trace(store, rows, name=name, spacing=spacing, outputs=[2] * len(rows))


@pytest.mark.parametrize("router,expected", [
    ("round-robin", [0, 1, 0, 1]),
    ("least-load", [0, 0, 0, 0]),  # nothing outstanding at any arrival: lowest index
    # SGLang: no match -> the smallest router tree; a match > 30% of the prompt -> its owner
    ("cache-aware", [0, 1, 1, 0]),
    # Dynamo: equal cost -> the emptier device; the cached prefix lowers prefill blocks
    ("kv-router", [0, 1, 1, 0]),
])
def test_routers_worked_case(store, router, expected):
    """P, Q, Q+more, P+more, each alone in the system: who goes where."""
    name = _tiny(store, "w", [[1, 2, 3], [7, 8, 9], [7, 8, 9, 10], [1, 2, 3, 4]])
    res = run_cluster(store, ClusterReplayConfig(TierReplayConfig(name), instances=2,
                                                 router=router), save=False)
    assert res.requests.column("instance").to_pylist() == expected
    dev = res.requests.column("device_hit_tokens").to_pylist()
    if router == "round-robin":
        assert dev == [0, 0, 0, 0]  # each extension lands where its prefix is not
    else:
        assert dev == [0, 0, 12, 12]  # each extension finds its prefix


def test_sglang_balance_threshold(store):
    """With balance_abs_threshold 0 and rel 1.0 any imbalance routes to the least loaded,
    whatever the prefix match (SGLang's is_imbalanced: both conditions)."""
    rows = [[1, 2, 3]] * 4
    name = _tiny(store, "b", rows, spacing=1e-3)  # all four outstanding together
    t = TierReplayConfig(name)
    aware = run_cluster(store, ClusterReplayConfig(t, instances=2, router="cache-aware"),
                        save=False).requests.column("instance").to_pylist()
    assert aware == [0, 0, 0, 0]  # balanced under 64 outstanding: follow the prefix
    strict = run_cluster(store, ClusterReplayConfig(
        t, instances=2, router="cache-aware", balance_abs_threshold=0,
        balance_rel_threshold=1.0), save=False).requests.column("instance").to_pylist()
    assert strict == [0, 1, 0, 1]


@pytest.mark.parametrize("load", [{}, {"concurrency": 64}])
def test_cache_aware_beats_round_robin_on_mooncake(mooncake_store, load):
    """On the bundled Mooncake conversation trace, SGLang-style cache-aware routing and
    Dynamo-style KV routing hit more prompt tokens than round-robin (8 GB200 instances)."""
    t = TierReplayConfig("conv", **load)
    ps = stream_for(mooncake_store, ClusterReplayConfig(t))
    hits = {}
    for router in ("round-robin", "cache-aware", "kv-router"):
        s = run_cluster(mooncake_store, ClusterReplayConfig(t, instances=8, router=router),
                        stream=ps, save=False).summary
        hits[router] = s["device_hit_tokens"] + s["host_hit_tokens"] + s["storage_hit_tokens"]
    assert hits["cache-aware"] > 2 * hits["round-robin"]
    assert hits["kv-router"] > hits["round-robin"]


def test_deterministic_and_saved(mooncake_store):
    """Same config, same rows; the run is stored under its fingerprinted id, all keys of
    the issue first."""
    cfg = ClusterReplayConfig(TierReplayConfig("conv", concurrency=32), instances=4,
                              router="kv-router")
    a = run_cluster(mooncake_store, cfg, save=True)
    b = run_cluster(mooncake_store, cfg, save=False)
    assert a.requests.equals(b.requests)
    assert list(a.summary)[:16] == list(RUN_KEYS)
    assert a.runs.schema.equals(CLUSTER_RUNS) and a.requests.schema.equals(CLUSTER_REQUESTS)
    got = mooncake_store.query("SELECT instances, router, users, gpus FROM cluster_runs "
                               "WHERE run_id = $r", {"r": cfg.run_id})
    assert got.row(0) == (4, "kv-router", 32, 32)
    n = mooncake_store.query("SELECT count(*) AS n FROM cluster_requests WHERE run_id = $r",
                             {"r": cfg.run_id}).item()
    assert n == 12031


def test_rate_rescales_arrivals(mooncake_store):
    """--rate R: the trace's arrival times rescaled to a mean of R requests/s."""
    s = run_cluster(mooncake_store, ClusterReplayConfig(
        TierReplayConfig("conv"), instances=2, rate_rps=5.0), save=False).summary
    assert s["rate_rps"] == pytest.approx(5.0)
    assert s["arrivals"] == "rate:5"


def test_workspace_replay_cluster(mooncake_store):
    """``Workspace.replay_cluster`` takes the tier fields and the router knobs by name."""
    import toolkit

    ws = toolkit.open(mooncake_store.root)
    res = ws.replay_cluster("conv", instances=2, router="cache-aware", concurrency=16,
                            cache_threshold=0.5, save=False)
    cfg = json.loads(res.summary["config_json"])
    assert cfg["cache_threshold"] == 0.5 and cfg["tiers"]["concurrency"] == 16
    assert res.summary["instances"] == 2 and res.summary["users"] == 16


def test_bad_config():
    t = TierReplayConfig("x")
    with pytest.raises(ValueError, match="router must be one of"):
        ClusterReplayConfig(t, router="random")
    with pytest.raises(ValueError, match="instances"):
        ClusterReplayConfig(t, instances=0)
    with pytest.raises(ValueError, match="not both"):
        ClusterReplayConfig(TierReplayConfig("x", concurrency=4), rate_rps=2.0)
    with pytest.raises(ValueError, match="sequential"):
        ClusterReplayConfig(TierReplayConfig("x", sequential=True))


def test_cli_json_and_refusals(mooncake_store):
    """``toolkit replay cluster --json`` prints the issue's keys first; a bad flag is one
    line naming it and writes nothing."""
    from typer.testing import CliRunner

    from toolkit.cli import app

    root = str(mooncake_store.root)
    r = CliRunner().invoke(app, ["replay", "cluster", "--store", root, "--trace", "conv",
                                 "--instances", "2", "--router", "least-load", "--users", "8",
                                 "--layout", "tp8", "--no-save", "--json"])
    assert r.exit_code == 0, r.output
    rec = json.loads(r.output)
    assert list(rec)[:16] == list(RUN_KEYS)
    assert rec["gpus"] == 16 and rec["users"] == 8 and rec["instances"] == 2
    before = mooncake_store.query("SELECT count(*) FROM cluster_runs").item() \
        if "cluster_runs" in mooncake_store.tables() else 0
    for bad, word in ((["--router", "random"], "router"), (["--layout", "pp8"], "--layout"),
                      (["--users", "4", "--rate", "2"], "one of"),
                      (["--rate", "0"], "--rate")):
        r = CliRunner().invoke(app, ["replay", "cluster", "--store", root, "--trace", "conv",
                                     *bad])
        assert r.exit_code != 0 and word in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1
    after = mooncake_store.query("SELECT count(*) FROM cluster_runs").item() \
        if "cluster_runs" in mooncake_store.tables() else 0
    assert after == before


class TestProperties:
    @pytest.mark.slow
    @settings(max_examples=examples(30), deadline=None)
    @given(raw=_hashes, n=st.integers(1, 4),
           router=st.sampled_from(["round-robin", "least-load", "cache-aware", "kv-router"]),
           dev=st.integers(0, 12), users=st.sampled_from([None, 1, 3]),
           sem=st.sampled_from(["sglang", "page"]))
    def test_accounting_and_sharding(self, tmp_path_factory, raw, n, router, dev, users, sem):
        """Every request runs on one instance in range; its sources add up to its prompt;
        and N instances with unbounded caches never hit more than one unbounded instance
        (splitting traffic can only lose reuse)."""
        import toolkit

        with toolkit.open_store(tmp_path_factory.mktemp("c"), create=True) as store:
            name = _store_trace(store, _chain(raw), spacing=0.5, outputs=[3] * len(raw))
            t = TierReplayConfig(name, device_tokens=4 * dev, host_tokens=0,
                                 concurrency=users, radix_semantics=sem)
            res = run_cluster(store, ClusterReplayConfig(t, instances=n, router=router),
                              save=False)
            unb = TierReplayConfig(name, device_tokens=UNBOUNDED, concurrency=users,
                                   radix_semantics=sem)
            many = run_cluster(store, ClusterReplayConfig(unb, instances=n, router=router),
                               save=False).summary
            one = run_tiers(store, unb, save=False).summary
        q = res.requests
        inst = q.column("instance").to_numpy()
        assert ((inst >= 0) & (inst < n)).all()
        src = _cols(q, (*HITS, "computed_tokens")).sum(axis=1)
        assert np.array_equal(src, q.column("prompt_tokens").to_numpy())
        assert (q.column("queue_wait_s").to_numpy() >= 0).all()
        assert many["device_hit_tokens"] <= one["device_hit_tokens"]
        if n == 1:
            assert many["device_hit_tokens"] == one["device_hit_tokens"]


def test_perfetto_instances_as_tracks(mooncake_store, tmp_path):
    """``export perfetto`` of a cluster run: one process per instance, each with its
    prefill lane; phases rebuilt from the service times on every instance."""
    from tests.test_table_points_export import check_trace_event_format
    from toolkit.export import write_perfetto

    cfg = ClusterReplayConfig(TierReplayConfig("conv", concurrency=24), instances=3,
                              router="cache-aware")
    run_cluster(mooncake_store, cfg, save=True)
    out = write_perfetto(mooncake_store, cfg.run_id, tmp_path / "c.json")
    assert out["slices"]["prefill"] == 12031
    assert out["phases"] == "rebuilt from the run's service times"
    trace = json.loads((tmp_path / "c.json").read_text())
    check_trace_event_format(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    assert sorted(names) == [1, 2, 3]
    assert all(n.startswith(f"instance {p - 1}:") for p, n in names.items())
    per_pid = {}
    for e in trace["traceEvents"]:
        if e["name"] == "prefill":
            per_pid[e["pid"]] = per_pid.get(e["pid"], 0) + 1
    got = mooncake_store.query(
        "SELECT instance + 1 AS pid, count(*) AS n FROM cluster_requests WHERE run_id = $r "
        "GROUP BY ALL ORDER BY pid", {"r": cfg.run_id}).rows()
    assert sorted(per_pid.items()) == got
