"""Prices of replays. :func:`cost_of_replay`: decode-step cost of a stored selection
replay: misses per (request, step, layer) in, latency distribution, tokens/s/GPU and
$/M tokens out. :func:`price_tier_run` and :func:`run_tiers`: $/M tokens of a tier
replay from its measured throughput.

Labelled assumptions, beyond those of :mod:`toolkit.serving.step`:

* Every request in a batch of ``batch_per_gpu`` behaves like the replayed (request, step)
  sample: same context length, same misses per layer.
* A trace with fewer layers than the model (e.g. a 30-layer SmolLM2 recording priced as
  78-layer GLM-5.2) maps model layer ``j`` to trace layer ``floor(j * n_trace / n_model)``,
  keeping the depth profile of the misses.
* Throughput counts input + output tokens (InferenceX's definition). A request costs
  ``OSL x mean TPOT / batch`` GPU-seconds of decode plus ``2 x active params x ISL /
  (dense FP8 FLOP/s x compute efficiency)`` GPU-seconds of prefill (linear FLOPs only;
  prefill attention and prefix-cache hits ignored). ISL and OSL default to the trace's
  mean prompt length and decode steps; pass the workload's own to price a real mix.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from toolkit.cost.price import usd_per_million_tokens
from toolkit.errors import ToolkitError
from toolkit.hardware import HardwareSpec, get_hardware
from toolkit.models import ModelSpec, get_model
from toolkit.replay.tiers import (
    PageStream,
    TierReplayConfig,
    TierReplayResult,
    replay_tiers,
    save_result,
)
from toolkit.serving.step import DecodeScenario, decode_step
from toolkit.serving.tier_service import TierServiceModel
from toolkit.serving.transfer import transfer_path
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


def cost_of_replay(
    store: Store,
    run_id: str,
    model: ModelSpec,
    hardware: HardwareSpec,
    *,
    batch_per_gpu: int = 32,
    overlap: bool = False,
    mechanism: str = "sm_kernel",
    gpus_per_replica: int = 8,
    kv_dtype: str = "fp8",
    isl_tokens: float | None = None,
    osl_tokens: float | None = None,
    compute_efficiency: float = 0.5,
    miss_scale: float = 1.0,
) -> ReplayCost:
    """Price a selection replay run on ``hardware`` with ``model``'s geometry.

    ``miss_scale`` multiplies every replayed miss count; pricing a small-k recording at a
    model's k (e.g. k = 64 -> 2048) with ``miss_scale = 2048 / 64`` keeps the trace's miss
    ratio per row, which is an assumption, not a measurement.
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
    miss_m = miss[:, layer_map].astype(np.float64) * miss_scale  # [samples, model layers]
    row_bytes = model.mla_row_bytes(kv_dtype)
    path = transfer_path(hardware, mechanism, concurrent=True)
    t_miss = np.asarray(path.time_s(miss_m * batch_per_gpu, row_bytes), dtype=np.float64)
    t_miss = np.where(miss_m > 0, t_miss, 0.0)
    # work time per layer depends on context only: one decode_step per distinct context
    seq = ctx["seq_len"].to_numpy()
    work = {}
    for L in np.unique(seq):
        res = decode_step(DecodeScenario(model, hardware, batch_per_gpu, int(L),
                                         kv_dtype=kv_dtype, gpus_per_replica=gpus_per_replica,
                                         mechanism=mechanism))
        work[int(L)] = np.maximum(res.layers["t_hbm_s"].to_numpy(),
                                  res.layers["t_compute_s"].to_numpy())
    t_work = np.stack([work[int(L)] for L in seq])
    t_layer = np.maximum(t_work, t_miss) if overlap else t_work + t_miss
    tpot = t_layer.sum(axis=1)
    steps = pl.DataFrame({
        "request_id": wide["request_id"], "step": wide["step"], "seq_len": seq,
        "misses_per_layer": miss_m.mean(axis=1), "t_work_s": t_work.sum(axis=1),
        "t_miss_s": t_miss.sum(axis=1), "tpot_s": tpot,
    })
    layers = pl.DataFrame({
        "layer": np.arange(n_m), "trace_layer": layer_map,
        "mean_misses": miss_m.mean(axis=0), "mean_miss_latency_s": t_miss.mean(axis=0),
        "p99_miss_latency_s": np.percentile(t_miss, 99, axis=0),
    })
    if isl_tokens is None:
        isl_tokens = float(store.query(
            "SELECT avg(prompt_tokens) FROM selection_requests WHERE trace = $t",
            {"t": run["trace"]}).item())
    if osl_tokens is None:
        osl_tokens = float(steps.group_by("request_id").len()["len"].mean())
    decode_gpu_s = osl_tokens * float(tpot.mean()) / batch_per_gpu
    prefill_gpu_s = 2 * model.active_params * isl_tokens / (
        hardware.dense_fp8_tflops * 1e12 * compute_efficiency)
    per_request_gpu_s = decode_gpu_s + prefill_gpu_s
    out_tput = osl_tokens / per_request_gpu_s
    total_tput = (isl_tokens + osl_tokens) / per_request_gpu_s
    summary: dict[str, float | int | str | bool] = {
        "run_id": run_id, "model": model.name, "hardware": hardware.name,
        "batch_per_gpu": batch_per_gpu, "overlap": overlap, "mechanism": mechanism,
        "miss_scale": miss_scale,
        "p50_tpot_s": float(np.percentile(tpot, 50)),
        "p90_tpot_s": float(np.percentile(tpot, 90)),
        "p99_tpot_s": float(np.percentile(tpot, 99)),
        "mean_tpot_s": float(tpot.mean()),
        "interactivity_tok_s_user": 1.0 / float(np.percentile(tpot, 50)),
        "miss_share_of_step": float(t_miss.sum() / t_layer.sum()),
        "isl_tokens": isl_tokens, "osl_tokens": osl_tokens,
        "prefill_share_of_gpu_time": prefill_gpu_s / per_request_gpu_s,
        "output_tokens_per_s_per_gpu": out_tput,
        "total_tokens_per_s_per_gpu": total_tput,
        "input_tokens_per_s_per_gpu": total_tput - out_tput,
    }
    for tier in PRICE_TIERS:
        price = hardware.price_usd_per_gpu_hour(tier)
        summary[f"usd_per_gpu_hour_{tier}"] = price
        for kind in ("total", "input", "output"):
            tput = float(summary[f"{kind}_tokens_per_s_per_gpu"])
            summary[f"usd_per_million_{kind}_tokens_{tier}"] = float(
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
