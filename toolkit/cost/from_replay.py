"""Prices of replays. :func:`cost_of_replay`: decode-step cost of a stored selection
replay: misses per (request, step, layer) in, latency distribution, tokens/s/GPU and
$/M tokens out. :func:`price_tier_run` and :func:`run_tiers`: $/M tokens of a tier
replay from its measured throughput.

Step and prefill times are the fitted serving model's (:mod:`toolkit.serving.scenario`).
Labelled assumptions on top:

* Every request in a batch of ``batch_per_gpu`` behaves like the replayed (request, step)
  sample: same context length, same misses per layer (DP attention, expert-parallel MoE
  over ``gpus_per_replica`` GPUs).
* A trace with fewer layers than the model (e.g. a 30-layer SmolLM2 recording priced as
  78-layer GLM-5.2) maps model layer ``j`` to trace layer ``floor(j * n_trace / n_model)``,
  keeping the depth profile of the misses; the step model takes their mean per layer.
* Throughput counts input + output tokens (InferenceX's definition). A request costs
  ``OSL x mean TPOT / batch`` GPU-seconds of decode plus the serving model's prefill of
  ``ISL`` tokens on one instance (no prefix-cache hits). ISL and OSL default to the trace's
  mean prompt length and decode steps; pass the workload's own to price a real mix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from toolkit.cost.price import usd_per_million_tokens
from toolkit.errors import ToolkitError
from toolkit.hardware import HardwareSpec, get_hardware
from toolkit.models import ModelSpec, get_model
from toolkit.replay.tiers import (
    ClusterReplayConfig,
    PageStream,
    TierReplayConfig,
    TierReplayResult,
    replay_tiers,
    save_result,
)
from toolkit.serving.scenario import Deployment, decode, label, prefill
from toolkit.serving.tier_service import TierServiceModel
from toolkit.store import Store

PRICE_TIERS = ("hyperscaler", "neocloud", "rental")


@dataclass(frozen=True)
class ReplayCost:
    """Per-step table, per-layer miss latency and the run-level summary."""

    steps: pl.DataFrame
    layers: pl.DataFrame
    summary: dict[str, float | int | str | bool]


def _replay_rows(store: Store, run_id: str) -> tuple[pl.DataFrame, dict]:
    run = store.query("SELECT * FROM selection_runs WHERE run_id = $run", {"run": run_id})
    if run.height == 0:
        raise ToolkitError(f"no selection replay run {run_id!r} in {store.root}")
    rows = store.query(
        "SELECT request_id, step, layer, seq_len, misses FROM selection_replay "
        "WHERE run_id = $run ORDER BY request_id, step, layer", {"run": run_id})
    return rows, run.row(0, named=True)


def _fitted_scale(store: Store, run: dict, rows: pl.DataFrame, model: ModelSpec,
                  target_context_tokens: float):
    """The run's misses carried to ``model``'s k and ``target_context_tokens`` by the
    measured selection-scaling fit (the one :func:`toolkit.replay.selection_scaling.
    scale_misses` that ``cost compare --selections``, ``plan`` and the serving what-ifs use)."""
    from toolkit.replay.selection_scaling import scale_misses

    trace_k = int(store.query("SELECT k FROM selection_traces WHERE trace = $t",
                              {"t": run["trace"]}).item())
    accesses = int(run["accesses"])
    ratio = int(run["misses"]) / accesses if accesses else 0.0
    return trace_k, scale_misses(
        ratio, trace_k=trace_k, model_k=model.index_topk,
        buffer_ratio=float(run["buffer_tokens"]) / trace_k,
        context_tokens=float(rows["seq_len"].mean()),
        target_context_tokens=target_context_tokens)


def cost_of_replay(
    store: Store,
    run_id: str,
    model: ModelSpec,
    hardware: HardwareSpec,
    *,
    batch_per_gpu: int = 32,
    overlap: bool = False,
    engine: str = "sglang",
    gpus_per_replica: int = 8,
    kv_dtype: str = "fp8",
    isl_tokens: float | None = None,
    osl_tokens: float | None = None,
    miss_scale: float | None = None,
) -> ReplayCost:
    """Price a selection replay run on ``hardware`` with ``model``'s geometry.

    Every (request, step) sample becomes one point of the serving model's decode step
    (:func:`toolkit.serving.scenario.decode`) at its context and its misses per layer.

    The misses are carried from the trace's k to the model's k by the measured
    selection-scaling fit at the workload's mean context ``ISL + OSL / 2``
    (:func:`toolkit.replay.selection_scaling.scale_misses`, the same function ``cost compare
    --selections``, ``plan`` and the HiSparse what-ifs use): each sample's misses times
    ``model k / trace k x fit factor``, clipped at the model's k, the device buffer keeping
    its buffer / k ratio. The summary carries the fit's label (an extrapolation from a 135M
    dense model's selections, with its range) and the band's TPOT, throughput and $/M.
    ``miss_scale`` replaces the fit with a constant multiplier of misses and buffer (0 = the
    same step with no buffer and no host fetches); a constant is an assumption and is
    labelled one.
    """
    rows, run = _replay_rows(store, run_id)
    n_t = int(rows["layer"].max()) + 1
    n_m = model.num_layers
    layer_map = (np.arange(n_m) * n_t) // n_m
    wide = rows.pivot(on="layer", index=["request_id", "step"], values="misses",
                      aggregate_function="first").sort("request_id", "step")
    ctx = rows.group_by("request_id", "step").agg(pl.col("seq_len").first()).sort(
        "request_id", "step")
    miss = np.column_stack([wide[str(j)].fill_null(0).to_numpy() for j in range(n_t)])
    miss_t = miss[:, layer_map].astype(np.float64)  # [samples, model layers], trace scale
    seq = ctx["seq_len"].to_numpy()
    if isl_tokens is None:
        isl_tokens = float(store.query(
            "SELECT avg(prompt_tokens) FROM selection_requests WHERE trace = $t",
            {"t": run["trace"]}).item())
    if osl_tokens is None:
        osl_tokens = float(wide.group_by("request_id").len()["len"].mean())
    if miss_scale is None and model.index_topk > 0:
        trace_k, scaled = _fitted_scale(store, run, rows, model, isl_tokens + osl_tokens / 2)
        scales = scaled.row_scale
        cap = float(model.index_topk)
        buffer = float(run["buffer_tokens"]) * model.index_topk / trace_k
        scaling = scaled.label
    else:
        scales = (1.0 if miss_scale is None else float(miss_scale),)
        cap = np.inf
        buffer = float(run["buffer_tokens"]) * scales[0]
        scaling = ("dense model: misses as replayed" if miss_scale is None else
                   f"misses x{scales[0]:g} (a constant: an assumption, not a measurement)")
    dep = Deployment(model.name, hardware.name, engine=engine, kv_dtype=kv_dtype,
                     gpus_per_instance=gpus_per_replica)
    prefill_gpu_s = float(prefill(dep, new_tokens=max(isl_tokens, 1.0)).gpu_s[0])

    def step_at(scale: float, ovl: bool):
        m = np.minimum(miss_t * scale, cap)
        return m, decode(dep, batch_per_gpu=batch_per_gpu, context_tokens=np.maximum(seq, 2),
                         misses_per_layer=m, overlap=ovl, device_buffer_tokens=buffer)

    def total_tput(tpot: np.ndarray) -> float:
        per_request_gpu_s = osl_tokens * float(tpot.mean()) / batch_per_gpu + prefill_gpu_s
        return (isl_tokens + osl_tokens) / per_request_gpu_s

    miss_m, step = step_at(scales[0], overlap)
    sync = step if not overlap else step_at(scales[0], False)[1]
    tpot = step.tpot_s
    t_work = step.t_work_s
    steps = pl.DataFrame({
        "request_id": wide["request_id"], "step": wide["step"], "seq_len": seq,
        "misses_per_layer": miss_m.mean(axis=1), "t_work_s": t_work,
        "t_miss_s": sync.t_miss_s, "t_miss_exposed_s": step.t_miss_s, "tpot_s": tpot,
    })
    layers = pl.DataFrame({
        "layer": np.arange(n_m), "trace_layer": layer_map,
        "mean_misses": miss_m.mean(axis=0), "p99_misses": np.percentile(miss_m, 99, axis=0),
    })
    decode_gpu_s = osl_tokens * float(tpot.mean()) / batch_per_gpu
    per_request_gpu_s = decode_gpu_s + prefill_gpu_s
    out_tput = osl_tokens / per_request_gpu_s
    total = total_tput(tpot)
    # the fit's band: the same pricing at its two ends (equal to the answer without a fit)
    band = [total_tput(step_at(sc, overlap)[1].tpot_s) for sc in scales[1:]] or [total, total]
    summary: dict[str, float | int | str | bool] = {
        "run_id": run_id, "model": model.name, "hardware": hardware.name,
        "engine": engine, "batch_per_gpu": batch_per_gpu, "overlap": overlap,
        "mechanism": "sm_kernel", "miss_scale": scales[0],
        "miss_scale_low": scales[1] if len(scales) > 1 else scales[0],
        "miss_scale_high": scales[2] if len(scales) > 1 else scales[0],
        "miss_scaling": scaling, "device_buffer_tokens": buffer, "times": label(),
        "max_batch_per_gpu": float(step.max_batch_per_gpu.min()),
        "p50_tpot_s": float(np.percentile(tpot, 50)),
        "p90_tpot_s": float(np.percentile(tpot, 90)),
        "p99_tpot_s": float(np.percentile(tpot, 99)),
        "mean_tpot_s": float(tpot.mean()),
        "interactivity_tok_s_user": 1.0 / float(np.percentile(tpot, 50)),
        "miss_share_of_step": float(step.t_miss_s.sum() / step.t_step_s.sum()),
        "isl_tokens": isl_tokens, "osl_tokens": osl_tokens,
        "prefill_share_of_gpu_time": prefill_gpu_s / per_request_gpu_s,
        "output_tokens_per_s_per_gpu": out_tput,
        "total_tokens_per_s_per_gpu": total,
        "input_tokens_per_s_per_gpu": total - out_tput,
        # more misses -> lower throughput: the band's high-miss end is the low throughput
        "total_tokens_per_s_per_gpu_low": min(band), "total_tokens_per_s_per_gpu_high": max(band),
    }
    for tier in PRICE_TIERS:
        price = hardware.price_usd_per_gpu_hour(tier)
        summary[f"usd_per_gpu_hour_{tier}"] = price
        for kind in ("total", "input", "output"):
            tput = float(summary[f"{kind}_tokens_per_s_per_gpu"])
            summary[f"usd_per_million_{kind}_tokens_{tier}"] = float(
                usd_per_million_tokens(price, tput))
        for end, tput in (("low", max(band)), ("high", min(band))):
            summary[f"usd_per_million_total_tokens_{tier}_{end}"] = float(
                usd_per_million_tokens(price, tput))
    return ReplayCost(steps, layers, summary)


def price_tier_run(result: TierReplayResult, hardware: HardwareSpec,
                   price_tier: str = "hyperscaler") -> TierReplayResult:
    """Fill a tier run's price columns: ``hardware``'s $/GPU-hour at ``price_tier`` and
    $/M total and output tokens at the run's measured tokens/s/GPU (None at zero rate)."""
    s = result.summary
    price = hardware.price_usd_per_gpu_hour(price_tier)
    tput = s["tokens_per_s_per_gpu"]
    out_tput = s["output_tokens_per_s_per_gpu"]
    priced = {
        **s, "usd_per_gpu_hour": price,
        "usd_per_million_total_tokens": float(usd_per_million_tokens(price, tput))
        if tput > 0 else None,
        "usd_per_million_output_tokens": float(usd_per_million_tokens(price, out_tput))
        if out_tput > 0 else None,
    }
    return replace(result, summary=priced)


def run_tiers(store: Store, cfg: TierReplayConfig, *, stream: PageStream | None = None,
              save: bool = True) -> TierReplayResult:
    """Replay ``cfg`` with the serving model's times for its hardware and model, price it
    at ``cfg.price_tier``; with ``save`` write ``tier_runs``/``tier_requests``.

    The one place a tier run's spec names are looked up. Pass ``stream`` to reuse one
    flattened trace across a sweep.
    """
    hw, model = get_hardware(cfg.hardware), get_model(cfg.model)
    result = replay_tiers(store, cfg, TierServiceModel(hw, model, cfg.assumptions),
                          stream=stream)
    result = price_tier_run(result, hw, cfg.price_tier)
    if save:
        save_result(store, result)
    return result


def run_cluster(store: Store, cfg: ClusterReplayConfig, *, stream: PageStream | None = None,
                save: bool = True, progress: bool | None = False) -> Any:
    """Replay ``cfg`` (N instances behind a router) with the serving model's per-instance
    times, price it at ``cfg.tiers.price_tier``; with ``save`` write ``cluster_runs`` and
    ``cluster_requests``. Returns a
    :class:`~toolkit.replay.tiers.cluster.ClusterReplayResult` whose ``summary`` starts
    with the issue's keys (:data:`toolkit.replay.tiers.cluster.RUN_KEYS`).

    The place a cluster run's spec names are looked up, beside :func:`run_tiers`. Pass
    ``stream`` (:func:`toolkit.replay.tiers.cluster.stream_for`) to reuse one flattened
    trace across an instance search; ``progress=None`` shows a bar on a terminal.
    """
    from toolkit.replay.tiers.cluster import replay_cluster, save_cluster, with_price

    t = cfg.tiers
    hw, model = get_hardware(t.hardware), get_model(t.model)
    decode = None
    if cfg.decode is not None:  # the decode pool: its own layout, the instance's engine
        d = cfg.decode
        decode = TierServiceModel(hw, model, replace(
            t.assumptions, gpus_per_replica=d.gpus, dp_attention=d.dp_attention,
            expert_parallel=d.expert_parallel, mtp=d.mtp))
    result = replay_cluster(store, cfg, TierServiceModel(hw, model, t.assumptions),
                            decode=decode, stream=stream, progress=progress)
    result = with_price(result, hw.price_usd_per_gpu_hour(t.price_tier),
                        usd_per_million_tokens)
    if save:
        save_cluster(store, result)
    return result
