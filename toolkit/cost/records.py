"""Priced selection replays as store rows (``decode_costs``).

Why: :func:`toolkit.cost.from_replay.cost_of_replay` returns a summary in memory; a report,
a named query or a notebook must be able to re-derive every $/M figure with SQL, so each
priced configuration is written once, keyed by a fingerprint of its config (re-pricing the
same configuration replaces the same row).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from toolkit.config import config_json, fingerprint
from toolkit.cost.compare import CompareConfig, sweep, ttft_plausible
from toolkit.cost.from_replay import cost_of_replay
from toolkit.cost.interpolate import pareto_front
from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.store import Store, bounded_key
from toolkit.version import __version__


@dataclasses.dataclass(frozen=True)
class DecodeCostConfig:
    """One pricing of a stored selection replay (see ``cost_of_replay`` for each field).

    Attributes:
        selection_run_id: a ``selection_runs`` row.
        model, hardware: spec names.
        batch_per_gpu: requests decoding together per GPU.
        overlap: miss I/O overlapped with compute (plan-then-IO) instead of synchronous.
        engine: engine whose fitted serving-model terms time the step.
        miss_scale: None (default) carries the replayed misses to the model's k by the
            measured selection-scaling fit, with its band; a number multiplies misses and
            buffer by that constant instead (0 = no offload; a constant is an assumption).
        isl_tokens, osl_tokens: workload shape; ``None`` takes the trace's own.
        price_tier: hyperscaler | neocloud | rental.
    """

    selection_run_id: str
    model: str = "glm-5.2"
    hardware: str = "gb200"
    batch_per_gpu: int = 32
    overlap: bool = False
    engine: str = "sglang"
    kv_dtype: str = "fp8"
    miss_scale: float | None = None
    isl_tokens: float | None = None
    osl_tokens: float | None = None
    price_tier: str = "hyperscaler"

    @property
    def run_id(self) -> str:
        """Store key: readable prefix plus the config fingerprint."""
        ovl = "ovl" if self.overlap else "sync"
        return bounded_key(f"cost-{self.hardware}-b{self.batch_per_gpu}-{ovl}-"
                           f"{fingerprint(self)[:8]}")


def record_replay_cost(store: Store, cfg: DecodeCostConfig) -> dict[str, Any]:
    """Price ``cfg`` with the serving model's decode step and write (or replace) its
    ``decode_costs`` row; returns the row."""
    res = cost_of_replay(
        store, cfg.selection_run_id, get_model(cfg.model), get_hardware(cfg.hardware),
        batch_per_gpu=cfg.batch_per_gpu, overlap=cfg.overlap, engine=cfg.engine,
        kv_dtype=cfg.kv_dtype, isl_tokens=cfg.isl_tokens, osl_tokens=cfg.osl_tokens,
        miss_scale=cfg.miss_scale)
    s, steps = res.summary, res.steps
    trace = store.query("SELECT trace FROM selection_runs WHERE run_id = $r",
                        {"r": cfg.selection_run_id}).item()
    mean_work = float(steps["t_work_s"].mean())  # all but miss I/O: GEMMs, attention, comm
    tier = cfg.price_tier
    row = {
        "run_id": cfg.run_id, "selection_run_id": cfg.selection_run_id, "trace": trace,
        "model": cfg.model, "hardware": cfg.hardware, "batch_per_gpu": cfg.batch_per_gpu,
        "overlap": cfg.overlap, "mechanism": str(s["mechanism"]), "kv_dtype": cfg.kv_dtype,
        "miss_scale": float(s["miss_scale"]), "miss_scaling": str(s["miss_scaling"]),
        "isl_tokens": float(s["isl_tokens"]),
        "osl_tokens": float(s["osl_tokens"]), "price_tier": tier,
        **{f"{q}_tpot_s": float(s[f"{q}_tpot_s"]) for q in ("p50", "p90", "p99", "mean")},
        "mean_t_work_s": mean_work, "mean_t_miss_s": float(steps["t_miss_s"].mean()),
        "mean_t_miss_exposed_s": float(steps["t_miss_exposed_s"].mean()),
        "miss_share_of_step": float(s["miss_share_of_step"]),
        "prefill_share_of_gpu_time": float(s["prefill_share_of_gpu_time"]),
        "interactivity_tok_s_user": float(s["interactivity_tok_s_user"]),
        "total_tokens_per_s_per_gpu": float(s["total_tokens_per_s_per_gpu"]),
        "output_tokens_per_s_per_gpu": float(s["output_tokens_per_s_per_gpu"]),
        "usd_per_gpu_hour": float(s[f"usd_per_gpu_hour_{tier}"]),
        "usd_per_million_total_tokens": float(s[f"usd_per_million_total_tokens_{tier}"]),
        "usd_per_million_total_tokens_low": float(
            s[f"usd_per_million_total_tokens_{tier}_low"]),
        "usd_per_million_total_tokens_high": float(
            s[f"usd_per_million_total_tokens_{tier}_high"]),
        "usd_per_million_output_tokens": float(s[f"usd_per_million_output_tokens_{tier}"]),
        "config_json": config_json(cfg), "toolkit_version": __version__,
    }
    store.write_row("decode_costs", cfg.run_id, row, replace=True)
    return row


def record_serving_fronts(store: Store, cfg: CompareConfig) -> str:
    """Sweep the serving model over ``cfg``'s layouts x concurrency per hardware, keep each
    hardware's Pareto front (throughput per GPU vs interactivity) among the points that meet
    ``cfg.max_p90_ttft_s`` (all points when it is None), and write it to ``serving_fronts``;
    returns the run id (re-recording the same config replaces it). A front without the bound
    ends at thousands of users whose prompts wait minutes: no one would run those points."""
    from toolkit.serving import predict
    from toolkit.serving.params import bundled_params

    run_id = bounded_key(f"fronts-{cfg.model}-{fingerprint(cfg)[:8]}")
    rows = sweep(cfg)
    modelled = predict(rows.filter(pl.Series(ttft_plausible(rows, bundled_params(),
                                                            cfg.max_p90_ttft_s))))
    if cfg.max_p90_ttft_s is not None:  # the bound at cfg's confidence, as cost compare
        from toolkit.serving.calibration import active_calibration, upper

        up = upper(modelled, active_calibration(bundled_params()), cfg.ttft_confidence)
        modelled = modelled.filter(pl.Series(up <= cfg.max_p90_ttft_s))
    parts = []
    for hw in cfg.hardware:
        g = modelled.filter(pl.col("hardware") == hw)
        if g.height == 0:
            continue
        idx = pareto_front(g["pred_median_intvty"].to_numpy(), g["pred_tput_per_gpu"].to_numpy())
        parts.append(g[idx.tolist()].select(
            "hardware", "framework",
            pl.format("{} P{}/D{} TP{} EP{}", pl.when(pl.col("disagg")).then(pl.lit("disagg"))
                      .otherwise(pl.lit("agg")), "num_prefill_gpu", "num_decode_gpu",
                      "decode_tp", "decode_ep").alias("layout"),
            pl.col("pred_median_intvty").alias("interactivity_tok_s_user"),
            pl.col("pred_tput_per_gpu").alias("tput_per_gpu")))
    if not parts:
        raise ToolkitError(f"no modelled point of {cfg.model} on {', '.join(cfg.hardware)} "
                           f"meets p90 TTFT <= {cfg.max_p90_ttft_s} s: no front to record "
                           "(raise the bound, or pass None for the unbounded fronts)")
    fronts = pl.concat(parts).with_columns(
        run_id=pl.lit(run_id), model=pl.lit(cfg.model), precision=pl.lit(cfg.precision),
        isl=pl.lit(cfg.isl, pl.Int64), osl=pl.lit(cfg.osl, pl.Int64),
        config_json=pl.lit(config_json(cfg)))
    store.write("serving_fronts", run_id, fronts.to_arrow(), replace=True)
    return run_id
