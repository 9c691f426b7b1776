"""Cluster replay topologies: DP-attention ranks as separate prefix caches of one instance,
and disaggregated prefill/decode deployments.

* Ranks: with unbounded caches (admission never waits) ``instances=2, ranks=4`` routes and
  hits exactly as 8 single-rank instances; a rank prefills at 1/ranks of its instance's
  speed, so no request's prefill ends earlier than on an instance of its own.
* Disaggregated: an independent pure-Python event simulation of the documented rules
  (a prefill lane per rank at 1/ranks of the instance's speed, handoff at the prefill's
  end, decode pool with the fewest running + waiting, FCFS admission under its token and
  running caps, KV transfer, TPOT at the pool's batch) reproduces every request's prefill
  end, decode pool, batch, first token and finish, given the kernel's hits.
* One disaggregated deployment with an unbounded decode pool and no transfer prefills
  exactly as the aggregated replay (same hits, prefill ends = first tokens).
* The CLI's ``--layout`` forms and their refusals.
"""

from __future__ import annotations

import heapq
import json
from collections import deque
from dataclasses import dataclass

import numpy as np
import pytest
from typer.testing import CliRunner

from toolkit.cli import app
from toolkit.replay.tiers import (
    UNBOUNDED,
    ClusterReplayConfig,
    DecodePool,
    ServiceAssumptions,
    ServiceTimes,
    TierReplayConfig,
)
from toolkit.replay.tiers.cluster import replay_cluster

HITS = ("device_hit_tokens", "host_hit_tokens", "storage_hit_tokens")


@dataclass(frozen=True)
class FakeService:
    """Round numbers instead of the serving model (the replay takes any TierService)."""

    per_token_s: float = 2e-5
    transfer_s_per_token: float = 3e-6
    tpot0_s: float = 0.02
    tpot_slope_s: float = 0.002
    pool_tokens: int = 10**9

    def times(self, context_tokens: int, max_batch: int) -> ServiceTimes:
        b = np.arange(max_batch + 1, dtype=np.float64)
        return ServiceTimes(
            kv_bytes_per_token=1000, prefill_s_per_token=self.per_token_s,
            prefill_s_per_token_context=0.0, host_fixed_s=0.0, host_s_per_token=0.0,
            storage_fixed_s=0.0, storage_s_per_token=0.0,
            tpot_by_batch_s=self.tpot0_s + self.tpot_slope_s * b,
            context_tokens=int(context_tokens),
            kv_transfer_s_per_token=self.transfer_s_per_token)

    def default_device_tokens(self) -> int:
        return self.pool_tokens


def _dpa(gpus: int) -> ServiceAssumptions:
    return ServiceAssumptions(gpus_per_replica=gpus, dp_attention=True, expert_parallel=True)


def _col(t, name):
    return t.column(name).to_numpy(zero_copy_only=False)


@pytest.fixture(scope="module")
def conv300(mooncake_store):
    """The first 300 Mooncake conversation requests as their own trace."""
    t = mooncake_store.read("requests", "conv").slice(0, 300)
    mooncake_store.write("requests", "conv300", t.set_column(
        0, "trace", t.column("trace").cast("string").fill_null("conv300")), replace=True)
    return mooncake_store


def test_ranks_are_separate_caches_at_a_share_of_the_instance(conv300):
    """2 instances x 4 DPA ranks = 8 caches: the same routing and hits as 8 single-rank
    instances (unbounded caches, so admission never waits); a rank prefills at a quarter of
    its instance's speed, so never ahead of an instance of its own."""
    t = TierReplayConfig("conv300", device_tokens=UNBOUNDED, host_ratio=0.0,
                         assumptions=_dpa(4))
    svc = FakeService()
    a = replay_cluster(conv300, ClusterReplayConfig(t, instances=2, ranks=4), svc).requests
    b = replay_cluster(conv300, ClusterReplayConfig(t, instances=8), svc).requests
    n = a.num_rows
    assert np.array_equal(_col(a, "instance"), (np.arange(n) % 8) // 4)
    assert np.array_equal(_col(a, "rank"), np.arange(n) % 4)
    assert np.array_equal(_col(b, "instance"), np.arange(n) % 8)
    for h in HITS:
        assert np.array_equal(_col(a, h), _col(b, h)), h
    assert _col(a, "device_hit_tokens").sum() > 0
    pa_, pb = _col(a, "prefill_end_s"), _col(b, "prefill_end_s")
    assert np.all(pa_ >= pb - 1e-12)
    assert np.any(pa_ > pb + 1e-6)
    # TPOT is the instance's batch (4 ranks' requests), so it is never below the rank's
    ta, tb = _col(a, "running_at_admit"), _col(b, "running_at_admit")
    assert np.all(ta >= tb)


def _reference(arr, prompt, out, hits, caches, ranks, svc, tpot, dcap_tokens, dcap_running):
    """The disaggregated rules in plain Python (round-robin over caches)."""
    r_n = len(arr)
    groups = caches // ranks
    pf_free = [0.0] * caches
    drun, dused = [0] * groups, [0] * groups
    dq: list[deque] = [deque() for _ in range(groups)]
    pre, first, fin = [0.0] * r_n, [0.0] * r_n, [0.0] * r_n
    dinst, batch = [-1] * r_n, [0] * r_n
    heap: list[tuple[float, int]] = []

    def admit(d, now):
        while dq[d]:
            r = dq[d][0]
            need = prompt[r] + out[r]
            if drun[d] > 0 and ((dcap_running and drun[d] >= dcap_running)
                                or (dcap_tokens >= 0 and dused[d] + need > dcap_tokens)):
                break
            dq[d].popleft()
            drun[d] += 1
            dused[d] += need
            first[r] = now + svc.transfer_s_per_token * prompt[r]
            batch[r] = drun[d]
            fin[r] = first[r] + tpot[min(drun[d], len(tpot) - 1)] * max(out[r] - 1, 0)
            heapq.heappush(heap, (fin[r], r))

    i = done = 0
    while done < r_n:
        ta = arr[i] if i < r_n else np.inf
        tf = heap[0][0] if heap else np.inf
        if tf <= ta:
            now, e = heapq.heappop(heap)
            if e >= r_n:  # handoff
                r = e - r_n
                d = min(range(groups), key=lambda g: (drun[g] + len(dq[g]), g))
                dinst[r] = d
                dq[d].append(r)
                admit(d, now)
            else:
                d = dinst[e]
                drun[d] -= 1
                dused[d] -= prompt[e] + out[e]
                admit(d, now)
                done += 1
        else:
            r = i
            i += 1
            c = r % caches  # a rank's lane at 1/ranks of the instance's speed
            start = max(ta, pf_free[c])
            pre[r] = start + svc.per_token_s * ranks * max(prompt[r] - hits[r], 0)
            pf_free[c] = pre[r]
            heapq.heappush(heap, (pre[r], r_n + r))
    return pre, first, fin, dinst, batch


@pytest.mark.parametrize("instances,ranks,dcap_tokens,dcap_running", [
    (2, 1, UNBOUNDED, 3),  # running cap binds
    (1, 2, 60_000, 0),  # token budget binds (prompts ~12K tokens)
    (3, 2, 90_000, 4),
])
def test_disaggregated_matches_reference(conv300, instances, ranks, dcap_tokens,
                                         dcap_running):
    # unbounded prefill caches: admission never waits, so prefills start in arrival order
    t = TierReplayConfig("conv300", device_tokens=UNBOUNDED, host_ratio=0.0,
                         assumptions=_dpa(2))
    svc = FakeService()
    dec = DecodePool(gpus=4, device_tokens=dcap_tokens, max_running=dcap_running)
    cfg = ClusterReplayConfig(t, instances=instances, ranks=ranks, decode=dec, rate_rps=4.0)
    res = replay_cluster(conv300, cfg, svc, decode=svc)
    q = res.requests
    arr, prompt, out = _col(q, "arrival_s"), _col(q, "prompt_tokens"), _col(q, "output_tokens")
    hits = sum(_col(q, h) for h in HITS)
    assert np.array_equal(_col(q, "admit_s"), arr)
    n = q.num_rows
    tpot = svc.times(0, min(dcap_running or 4096, n)).tpot_by_batch_s
    pre, first, fin, dinst, batch = _reference(
        list(arr), list(prompt), list(out), list(hits), instances * ranks, ranks, svc, tpot,
        dcap_tokens, dcap_running)
    np.testing.assert_allclose(_col(q, "prefill_end_s"), pre, rtol=0, atol=1e-9)
    np.testing.assert_allclose(_col(q, "first_token_s"), first, rtol=0, atol=1e-9)
    np.testing.assert_allclose(_col(q, "finish_s"), fin, rtol=0, atol=1e-9)
    assert _col(q, "decode_instance").tolist() == dinst
    assert _col(q, "running_at_admit").tolist() == batch
    s = res.summary
    assert s["mean_decode_wait_s"] > 0  # the caps made requests wait for a decode slot
    assert s["gpus"] == instances * (2 + 4)
    assert s["layout"] == "disagg:dp2/dp4"
    # the decode pool never ran more than its cap at once
    if dcap_running:
        ev = sorted([(f, -1) for f in _col(q, "finish_s")]
                    + [(f - svc.transfer_s_per_token * p + 1e-9, 1)  # admitted (float slack)
                       for f, p in zip(_col(q, "first_token_s"), prompt, strict=True)])
        assert max(np.cumsum([e for _, e in ev])) <= dcap_running * instances


def test_one_disaggregated_deployment_prefills_as_aggregated(conv300):
    """Unbounded caches and decode pool, no transfer: the prefill side is the aggregated
    replay (same hits; its prefill ends are the aggregated first tokens). With a bounded
    cache they differ by design: an aggregated request holds its pages until it finishes
    decoding, a disaggregated one only until its prefill ends."""
    t = TierReplayConfig("conv300", device_tokens=UNBOUNDED, host_ratio=0.0)
    svc = FakeService(transfer_s_per_token=0.0)
    agg = replay_cluster(conv300, ClusterReplayConfig(t, rate_rps=2.0), svc).requests
    dis = replay_cluster(conv300, ClusterReplayConfig(
        t, rate_rps=2.0, decode=DecodePool(gpus=8, device_tokens=UNBOUNDED)), svc,
        decode=svc).requests
    for h in HITS:
        assert np.array_equal(_col(agg, h), _col(dis, h)), h
    np.testing.assert_array_equal(_col(dis, "prefill_end_s"), _col(agg, "first_token_s"))
    np.testing.assert_array_equal(_col(dis, "first_token_s"), _col(agg, "first_token_s"))
    assert agg.column("decode_instance").null_count == agg.num_rows


def test_refusals():
    t = TierReplayConfig("x")
    with pytest.raises(ValueError, match="DP-attention ranks"):
        ClusterReplayConfig(t, ranks=2)
    with pytest.raises(ValueError, match="ranks"):
        ClusterReplayConfig(TierReplayConfig("x", assumptions=_dpa(4)), ranks=8)
    with pytest.raises(ValueError, match="decode.gpus"):
        DecodePool(gpus=0)


def test_replay_cluster_needs_decode_service(conv300):
    cfg = ClusterReplayConfig(TierReplayConfig("conv300"), decode=DecodePool(gpus=8))
    with pytest.raises(ValueError, match="decode pool's service"):
        replay_cluster(conv300, cfg, FakeService())


@pytest.mark.parametrize("layout,gpus,ranks,decode", [
    ("tp8", 8, 1, 0),
    ("dp8", 8, 8, 0),
    ("disagg:dp8/dp16", 24, 8, 16),
    ("disagg P8/D16 decode TP16 EP16 DPA+MTP", 24, 8, 16),
    ("TP8 EP8 DPA", 8, 8, 0),
])
def test_cli_layouts(conv300, layout, gpus, ranks, decode):
    r = CliRunner().invoke(app, [
        "replay", "cluster", "--store", str(conv300.root), "--trace", "conv300",
        "--hardware", "gb200", "--model", "glm-5.2", "--layout", layout, "--instances", "2",
        "--rate", "2", "--no-save", "--json"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["gpus"] == 2 * gpus
    assert s["ranks_per_instance"] == ranks
    assert s["decode_gpus_per_instance"] == decode
    assert (s["mean_decode_wait_s"] is None) == (decode == 0)
    assert s["p90_ttft_s"] > 0


def test_cli_bad_layout(conv300):
    r = CliRunner().invoke(app, [
        "replay", "cluster", "--store", str(conv300.root), "--trace", "conv300",
        "--layout", "pp4", "--no-save", "--json"])
    assert r.exit_code != 0
    assert "--layout 'pp4'" in r.output and "disagg:P/D" in r.output


def test_session_affinity_pins_a_session_to_its_cache(tmp_path):
    """SYNTHETIC agent sessions. With a long TTL every turn of a session goes where its
    first turn went, whatever the router (round-robin scatters them); a TTL shorter than
    every gap between a session's turns binds nothing, so routing is the router's alone."""
    import toolkit
    from toolkit.synth.agentic import AgenticConfig, write_agentic

    with toolkit.open_store(tmp_path / "s", create=True) as store:
        write_agentic(store, AgenticConfig(sessions=12, turns_min=3, turns_max=6), "agent")
        t = TierReplayConfig("agent", device_tokens=UNBOUNDED, host_ratio=0.0)
        svc = FakeService()

        def run(ttl):
            return replay_cluster(store, ClusterReplayConfig(
                t, instances=4, session_affinity_ttl_s=ttl), svc).requests

        plain, sticky = run(0.0), run(1e6)
    sid, arr = _col(sticky, "session_id"), _col(sticky, "arrival_s")
    sessions = [np.flatnonzero(sid == s_) for s_ in np.unique(sid)]
    for rows in sessions:
        assert len(set(_col(sticky, "instance")[rows].tolist())) == 1
    assert any(len(set(_col(plain, "instance")[rows].tolist())) > 1 for rows in sessions)
    assert _col(sticky, "device_hit_tokens").sum() > _col(plain, "device_hit_tokens").sum()
    gap = min(np.diff(arr[rows]).min() for rows in sessions if len(rows) > 1)
    assert gap > 0
    with toolkit.open_store(tmp_path / "s") as store:
        short = replay_cluster(store, ClusterReplayConfig(
            t, instances=4, session_affinity_ttl_s=gap / 2), svc).requests
    assert np.array_equal(_col(short, "instance"), _col(plain, "instance"))
