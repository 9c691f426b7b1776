"""Cost per million tokens per accelerator at a target interactivity, from the serving model.

The question a capacity planner asks ("what does a million tokens of model M cost on GB200,
GB300 and MI355X at 150 tok/s/user?") is answered the way InferenceX answers it from
measurements, with the serving model in place of the measurements: sweep layouts and
concurrency per hardware, keep the Pareto front of throughput per GPU vs interactivity
(optionally only points whose p90 TTFT meets a bound), interpolate the front at the target
with Steffen's monotone spline, and divide the hourly price by the tokens.
"""

from __future__ import annotations

import itertools

import numpy as np
import polars as pl

from toolkit.cost.config import CompareConfig
from toolkit.cost.interpolate import pareto_front, steffen_interpolate
from toolkit.cost.price import usd_per_million_tokens
from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.serving.params import ServingParams, bundled_params
from toolkit.serving.points import ENGINES, validate
from toolkit.serving.predict import predict

DEFAULT_ENGINES: dict[str, str] = {
    "gb200": "dynamo-sglang",
    "gb300": "dynamo-trt",
    "mi355x": "atom",
}
"""Engine per accelerator when none is given: the pairings of the published GLM-5.3 serving
comparison (GB200 + Dynamo-SGLang, GB300 + Dynamo-TRT-LLM, MI355X + ATOM); "sglang" else."""

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _layouts(hw: str, engine: str, weights_gpus: int) -> list[dict]:
    """Candidate parallel layouts for one accelerator and engine (InferenceX-style recipes)."""
    spec = get_hardware(hw)
    disagg = engine.startswith("dynamo") or engine == "mori-sglang"
    out = []
    if not disagg:
        for tp in (4, 8):
            if tp < weights_gpus:
                continue
            for ep, dp in ((1, False), (tp, False), (tp, True)):
                out.append(dict(disagg=False, num_prefill_gpu=tp, num_decode_gpu=tp,
                                prefill_tp=tp, prefill_ep=ep, prefill_dp_attention=dp,
                                decode_tp=tp, decode_ep=ep, decode_dp_attention=dp))
        return out
    dom = int(spec.scaleup_domain_gpus)
    decode_pools = sorted({p for p in (8, 16, 32, 48, 64, 72) if p <= max(dom, 8)
                           and p >= weights_gpus})
    for n_pre, n_dec in itertools.product((4, 8, 16, 24), decode_pools):
        if n_pre < weights_gpus:
            continue
        for dec_w in sorted({8, n_dec}):
            if dec_w < weights_gpus:
                continue
            out.append(dict(disagg=True, num_prefill_gpu=n_pre, num_decode_gpu=n_dec,
                            prefill_tp=n_pre, prefill_ep=n_pre, prefill_dp_attention=True,
                            decode_tp=dec_w, decode_ep=dec_w, decode_dp_attention=dec_w > 8))
    return out


def sweep(cfg: CompareConfig) -> pl.DataFrame:
    """Model every (hardware, layout, MTP, concurrency) point of ``cfg``: validated rows with
    the ``pred_*`` columns (see :func:`toolkit.serving.predict.predict`)."""
    model = get_model(cfg.model)
    rows = []
    for hw in cfg.hardware:
        engine = cfg.engines.get(hw, DEFAULT_ENGINES.get(hw, "sglang"))
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r} for {hw}; known: {sorted(ENGINES)}")
        spec = get_hardware(hw)
        prec = cfg.precision if (cfg.precision != "fp4" or spec.dense_fp4_tflops) else "fp8"
        weights = model.weight_bytes("fp8" if prec == "fp4" else prec)
        weights_gpus = int(2 ** np.ceil(np.log2(max(weights / (0.75 * spec.hbm_usable_bytes),
                                                    1.0))))
        for lay in _layouts(hw, engine, weights_gpus):
            for spec_method in (("none", "mtp") if cfg.mtp else ("none",)):
                for conc in CONCURRENCY:
                    rows.append({"hardware": hw, "framework": engine, "model": model.name,
                                 "precision": prec, "spec_method": spec_method,
                                 "is_multinode": lay["disagg"], "isl": cfg.isl, "osl": cfg.osl,
                                 "conc": conc, **lay})
    if not rows:
        raise ValueError("no layout fits the model on the given hardware")
    df = validate(pl.DataFrame(rows), "cost compare sweep").with_columns(
        pl.lit(cfg.cached_prefix_fraction).alias("cached_prefix_fraction"))
    return df


def compare(cfg: CompareConfig, params: ServingParams | None = None) -> pl.DataFrame:
    """$/M total and output tokens per hardware at each target interactivity.

    Returns:
        One row per (hardware, interactivity): the interpolated throughputs, the layout of
        the nearest front point, p90 TTFT there, $/GPU-hr with its survey, $/M total and
        output, and the ratios to the first hardware.
    """
    params = params or bundled_params()
    pts = predict(sweep(cfg), params)
    if cfg.max_p90_ttft_s is not None:
        pts = pts.filter(pl.col("pred_p90_ttft") <= cfg.max_p90_ttft_s)
    out = []
    for hw in cfg.hardware:
        g = pts.filter(pl.col("hardware") == hw)
        if g.height == 0:
            raise ValueError(f"{hw}: no modelled point meets p90 TTFT <= {cfg.max_p90_ttft_s} s")
        x = g["pred_median_intvty"].to_numpy()
        y = g["pred_tput_per_gpu"].to_numpy()
        front = pareto_front(x, y)
        fx, fy = x[front], y[front]
        fo = g["pred_output_tput_per_gpu"].to_numpy()[front]
        spec = get_hardware(hw)
        price = spec.price_usd_per_gpu_hour(cfg.price_tier)
        for target in cfg.interactivity:
            tput = float(steffen_interpolate(fx, fy, target))
            otput = float(steffen_interpolate(fx, fo, target))
            near = g[int(front[np.argmin(np.abs(fx - target))])]
            out.append({
                "hardware": hw,
                "engine": near["framework"][0],
                "interactivity": float(target),
                "clamped": not (fx[0] <= target <= fx[-1]),
                "front_max_interactivity": float(fx[-1]),
                "tput_per_gpu": tput,
                "output_tput_per_gpu": otput,
                "p90_ttft_s": float(near["pred_p90_ttft"][0]),
                "layout": _layout_text(near),
                "usd_per_gpu_hour": price,
                "price_survey": spec.price_vintage(cfg.price_tier),
                "usd_per_mtok_total": _usd(price, tput),
                "usd_per_mtok_output": _usd(price, otput),
            })
    df = pl.DataFrame(out)
    first = cfg.hardware[0]
    base = df.filter(pl.col("hardware") == first).select(
        "interactivity", pl.col("usd_per_mtok_total").alias("_bt"),
        pl.col("usd_per_mtok_output").alias("_bo"), pl.col("tput_per_gpu").alias("_bp"))
    return (df.join(base, on="interactivity", how="left")
              .with_columns((pl.col("usd_per_mtok_total") / pl.col("_bt")).alias(
                                "cost_ratio_total_vs_first"),
                            (pl.col("usd_per_mtok_output") / pl.col("_bo")).alias(
                                "cost_ratio_output_vs_first"),
                            (pl.col("tput_per_gpu") / pl.col("_bp")).alias(
                                "tput_ratio_vs_first"))
              .drop("_bt", "_bo", "_bp"))


def _usd(price: float, tput: float) -> float:
    return float(usd_per_million_tokens(price, tput)) if tput > 0 else float("inf")


def _layout_text(row: pl.DataFrame) -> str:
    r = row.to_dicts()[0]
    mtp = "+MTP" if r["spec_method"] == "mtp" else ""
    if r["disagg"]:
        return (f"disagg P{r['num_prefill_gpu']}/D{r['num_decode_gpu']} decode TP{r['decode_tp']}"
                f" EP{r['decode_ep']}{' DPA' if r['decode_dp_attention'] else ''}{mtp} "
                f"conc {r['conc']}")
    return (f"TP{r['decode_tp']} EP{r['decode_ep']}{' DPA' if r['decode_dp_attention'] else ''}"
            f"{mtp} conc {r['conc']}")
