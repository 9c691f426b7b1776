"""Cost per million tokens per accelerator at a target interactivity: measured first, then
the serving model, with error bands.

The question a capacity planner asks ("what does a million tokens of model M cost on GB200,
GB300 and MI355X at 150 tok/s/user?") is answered the way InferenceX answers it: a Pareto
front of throughput per GPU vs interactivity per (hardware, engine), only points whose p90
TTFT meets a bound (10 s unless told otherwise), Steffen's monotone spline at the target, and
the hourly price divided by the tokens. The front comes from **measured** points (bundled
InferenceX rows, or ``--measurements``) when they cover the hardware, engine, model,
precision and shape and reach the target; otherwise from the serving model's sweep of layouts
and concurrency, whose low/high bands come from cross-validated residuals. A target beyond a
front's end is unreachable (no price); one within :data:`EDGE_FRACTION` of the end is flagged.
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
from toolkit.serving.points import ENGINES, PointsScope, validate
from toolkit.serving.predict import predict

DEFAULT_ENGINES: dict[str, str] = {
    "gb200": "dynamo-sglang",
    "gb300": "dynamo-trt",
    "mi355x": "atom",
}
"""Engine per accelerator when none is given: the pairings of the published GLM-5.3 serving
comparison (GB200 + Dynamo-SGLang, GB300 + Dynamo-TRT-LLM, MI355X + ATOM); "sglang" else."""

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)

ENGINE_VENDORS: dict[str, str] = {"trt": "nvidia", "dynamo-trt": "nvidia", "atom": "amd",
                                  "mori-sglang": "amd"}
"""Engines that run on one vendor's parts only (TensorRT-LLM: NVIDIA; ATOM, MoRI: AMD)."""

EDGE_FRACTION = 0.15
"""A target within 15% of a front's highest interactivity is flagged ``edge``: the answer
rests on the last one or two points of the front."""


def engines_for(cfg: CompareConfig, hw: str) -> list[str]:
    """The engines compared on ``hw``: the one given or defaulted, or with ``all_engines``
    every engine that runs on its vendor's parts."""
    if not cfg.all_engines:
        return [cfg.engines.get(hw, DEFAULT_ENGINES.get(hw, "sglang"))]
    vendor = get_hardware(hw).vendor
    return [e for e in ENGINES if ENGINE_VENDORS.get(e, vendor) == vendor]


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
    """Every (hardware, engine, layout, MTP, concurrency) point of ``cfg`` as validated rows
    with the recipe columns, ready for :func:`toolkit.serving.predict.predict`."""
    from toolkit.serving.recipes import version_date

    model = get_model(cfg.model)
    rows = []
    for hw, engine in ((h, e) for h in cfg.hardware for e in engines_for(cfg, h)):
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r} for {hw}; known: {sorted(ENGINES)}")
        version = cfg.engine_versions.get(hw)
        engine_date = version_date(engine, version) if version else None
        spec = get_hardware(hw)
        prec = cfg.precision if (cfg.precision != "fp4" or spec.dense_fp4_tflops) else "fp8"
        weights = model.weight_bytes("fp8" if prec == "fp4" else prec)
        weights_gpus = int(2 ** np.ceil(np.log2(max(weights / (0.75 * spec.hbm_usable_bytes),
                                                    1.0))))
        for lay in _layouts(hw, engine, weights_gpus):
            for spec_method in (("none", "mtp") if cfg.mtp == "on" else ("none",)):
                for conc in CONCURRENCY:
                    rows.append({"hardware": hw, "framework": engine, "model": model.name,
                                 "precision": prec, "spec_method": spec_method,
                                 "is_multinode": lay["disagg"], "isl": cfg.isl, "osl": cfg.osl,
                                 "conc": conc, **lay, "engine_date": engine_date})
    if not rows:
        raise ValueError("no layout fits the model on the given hardware")
    extra = [pl.lit(cfg.cached_prefix_fraction).alias("cached_prefix_fraction"),
             pl.lit(cfg.kv_dtype).alias("kv_dtype")]
    if cfg.mtp_draft_tokens is not None:
        extra.append(pl.lit(float(cfg.mtp_draft_tokens)).alias("mtp_draft_tokens"))
    if cfg.mtp_accept is not None:
        extra.append(pl.lit(float(cfg.mtp_accept)).alias("mtp_accept"))
    return validate(pl.DataFrame(rows, infer_schema_length=None),
                    "cost compare sweep").with_columns(extra)


NEAR_FRONT = 0.7
"""A swept point is replayed through InferenceX's client only when the fast steady-state
surrogate puts it near the answer: throughput within 1/0.7 of the best at its interactivity
or faster, and interactivity within :data:`WINDOW` of a target (plus each front's points that
bracket a target). The replay of thousands of users per point is what costs; points far from
every target or far below the front cannot change an answer."""
WINDOW = 1.6
TTFT_PRUNE = 5.0
"""A swept point whose steady-state surrogate puts its p90 TTFT above this many times the
bound is not replayed: on the bundled sweeps (DeepSeek-R1 and GLM-5.2 over five accelerators,
bounds 2 s and 10 s) the replay's p90 TTFT was never below 0.39x the surrogate's, and no
point that met its bound had a surrogate above 2.3x it. Such points are the highest
concurrencies (thousands of users each), most of the replay's cost, and the bound would drop
them anyway."""


def ttft_plausible(rows: pl.DataFrame, params: ServingParams,
                   max_p90_ttft_s: float | None) -> np.ndarray:
    """Rows whose surrogate p90 TTFT is within :data:`TTFT_PRUNE` x the bound (all rows
    without a bound)."""
    if max_p90_ttft_s is None or rows.height == 0:
        return np.ones(rows.height, dtype=bool)
    return _surrogate(rows, params)["p90_ttft_s"] <= TTFT_PRUNE * max_p90_ttft_s


def _surrogate(rows: pl.DataFrame, params: ServingParams) -> dict[str, np.ndarray]:
    from toolkit.serving.layout import design
    from toolkit.serving.model import solve
    from toolkit.serving.predict import levels

    d = design(rows, reference_date=params.reference_date)
    return solve(d, params.row_values(levels(d)))


def candidates(rows: pl.DataFrame, params: ServingParams, targets: tuple[float, ...],
               max_p90_ttft_s: float | None = None) -> pl.DataFrame:
    """The swept rows worth replaying for ``targets`` (see :data:`NEAR_FRONT`) and, with a
    bound, plausibly within it (:data:`TTFT_PRUNE`)."""
    s = _surrogate(rows, params)
    x, y = s["median_intvty"], s["tput_per_gpu"]
    t = np.asarray(targets, dtype=np.float64)
    near_t = np.zeros(rows.height, dtype=bool)
    for v in t:
        near_t |= (x >= v / WINDOW) & (x <= v * WINDOW)
    keep = np.zeros(rows.height, dtype=bool)
    key = (rows["hardware"] + "/" + rows["framework"]).to_numpy()
    for k in np.unique(key):
        idx = np.flatnonzero(key == k)
        order = idx[np.argsort(-x[idx], kind="stable")]  # fastest first
        best = np.maximum.accumulate(y[order])  # best throughput at >= this interactivity
        keep[order] = (y[order] >= NEAR_FRONT * best) & near_t[order]
        front = idx[pareto_front(x[idx], y[idx])]  # by increasing interactivity
        fx = x[front]
        for v in t:  # the front points on either side of each target, and its two ends
            j = int(np.searchsorted(fx, v))
            keep[front[max(j - 2, 0):min(j + 2, front.size)]] = True
        keep[front[[0, -1]]] = True
    if max_p90_ttft_s is not None:
        keep &= s["p90_ttft_s"] <= TTFT_PRUNE * max_p90_ttft_s
    return rows.filter(pl.Series(keep))


MEASURED_KEYS = ("hardware", "framework", "model", "precision", "isl", "osl")


def measurement_scope(cfg: CompareConfig) -> PointsScope:
    """The rows of a measurements file ``cfg`` asks about (the rest are left out)."""
    return PointsScope(cfg.model, cfg.hardware, cfg.precision)


def measured_points(cfg: CompareConfig) -> pl.DataFrame:
    """Measured rows that answer ``cfg``: the bundled InferenceX points (DeepSeek-R1 serving
    points; GLM-5 decode-SLO points on 8x H200, see :data:`P90_FROM_P99`) plus
    ``cfg.measurements`` (a file any :func:`toolkit.serving.measurements.load_measurements`
    reads, or a :class:`~toolkit.serving.measurements.MeasurementSource` naming a bench file
    with its layout or a store's ``measured_points`` table), for its model, precision and
    shape, MTP rows only when ``mtp = "on"``, p90 TTFT within the bound."""
    from toolkit.serving.measurements import load_measurements
    from toolkit.serving.points import bundled_points_path, read_points

    if not cfg.measured and cfg.measurements is None:
        return pl.DataFrame()
    frames = [read_points(bundled_points_path()), _bundled_dsa_points()] if cfg.measured else []
    if cfg.measurements is not None:
        frames.append(load_measurements(cfg.measurements, scope=measurement_scope(cfg)))
    need = ("tput_per_gpu", "median_intvty", "p90_ttft")
    frames = [f for f in frames if all(c in f.columns for c in need)]
    if not frames:
        return pl.DataFrame()
    frames = [f.with_columns(pl.lit(None, pl.Float64).alias(c) for c in (
        "output_tput_per_gpu", P90_FROM_P99) if c not in f.columns) for f in frames]
    df = pl.concat([f.select(*CONFIG_KEEP, *need, pl.col("output_tput_per_gpu").cast(pl.Float64),
                             pl.col(P90_FROM_P99).cast(pl.Boolean))
                    for f in frames], how="vertical_relaxed")
    df = df.filter((pl.col("model") == get_model(cfg.model).name)
                   & (pl.col("precision") == cfg.precision)
                   & (pl.col("isl") == cfg.isl) & (pl.col("osl") == cfg.osl)
                   & pl.col("tput_per_gpu").is_not_null() & pl.col("median_intvty").is_not_null())
    if cfg.mtp == "off":
        df = df.filter(pl.col("spec_method") == "none")
    if cfg.max_p90_ttft_s is not None:
        df = df.filter(pl.col("p90_ttft") <= cfg.max_p90_ttft_s)
    return df


P90_FROM_P99 = "p90_ttft_is_p99"
"""Marks measured rows whose runs recorded median and p99 TTFT but no p90 (the bundled GLM-5
decode-SLO points): their p99 stands in for p90. It is an upper bound, so the TTFT bound keeps
only rows that surely meet it, and an answer from such a row says so in ``note``."""


def _bundled_dsa_points() -> pl.DataFrame:
    """The bundled GLM-5 (DSA) points on 8x H200 with vLLM as measured rows
    (:func:`toolkit.serving.crossval.dsa_decode_points`), p99 TTFT as the p90 column."""
    from toolkit.serving.crossval import dsa_decode_points

    return dsa_decode_points().with_columns(pl.col("p99_ttft").alias("p90_ttft"),
                                            pl.lit(True).alias(P90_FROM_P99))


CONFIG_KEEP = ("hardware", "framework", "model", "precision", "spec_method", "disagg", "isl",
               "osl", "conc", "num_prefill_gpu", "num_decode_gpu", "prefill_tp", "prefill_ep",
               "prefill_dp_attention", "decode_tp", "decode_ep", "decode_dp_attention")


def _gpus(r: dict) -> int:
    return int(r["num_prefill_gpu"] + r["num_decode_gpu"]) if r["disagg"] else int(
        r["decode_tp"])


def _front_answer(x: np.ndarray, ys: dict[str, np.ndarray], target: float) -> dict:
    """Interpolate every series in ``ys`` along the front ``x`` at ``target``; reachable
    only up to the front's end, ``clamped`` below its start (the front's first throughput,
    a floor: a lower interactivity is always available)."""
    reachable = bool(target <= x[-1])
    out = {"reachable": reachable,
           "edge": bool(reachable and target >= (1 - EDGE_FRACTION) * x[-1]),
           "clamped": bool(target < x[0]), "front_max_interactivity": float(x[-1])}
    for k, y in ys.items():
        v = float(steffen_interpolate(x, y, target)) if reachable else float("nan")
        out[k] = max(0.0, v) if np.isfinite(v) else None  # no band without fitted bands
    # the point one would run: the cheapest front point that still meets the target
    meets = np.flatnonzero(x >= target)
    out["_at"] = int(meets[0]) if meets.size else None
    return out


def _series(g: pl.DataFrame, xcol: str, ycols: dict[str, str]) -> tuple[np.ndarray, dict,
                                                                        pl.DataFrame]:
    x = g[xcol].to_numpy()
    front = pareto_front(x, g[ycols["tput_per_gpu"]].to_numpy())
    f = g[front.tolist()]
    return f[xcol].to_numpy(), {k: f[c].to_numpy() for k, c in ycols.items()}, f


LAYOUT_KEYS = ("disagg", "num_prefill_gpu", "num_decode_gpu", "prefill_tp", "prefill_ep",
               "prefill_dp_attention", "decode_tp", "decode_ep", "decode_dp_attention",
               "spec_method")
"""What makes two swept points one layout: the model interpolates only along one layout's
concurrency sweep (:func:`_layout_series`)."""


def _layout_series(g: pl.DataFrame, xcol: str, ycols: dict[str, str]) -> list:
    """One front per layout, over its concurrencies. The model's answer at a target is the
    best of these fronts there (:func:`_at_target`), not one front through every layout's
    points: between two concurrencies of one layout lies a concurrency one can run, between
    two layouts lies no deployment (each user gets one layout's speed), and interpolating
    across layouts let an accelerator that offers one more layout (GB300's 4-GPU instance)
    answer below a sibling whose every point it matches (4% below GB200 at a matched engine)."""
    return [_series(part, xcol, ycols)
            for part in g.partition_by(list(LAYOUT_KEYS), maintain_order=True)]


def compare(cfg: CompareConfig, params: ServingParams | None = None, *,
            what_if: dict[str, float] | None = None) -> pl.DataFrame:
    """$/M total and output tokens per (hardware, engine) at each target interactivity.

    ``what_if``: serving-model columns set on every swept row (``host_prefix_fraction``,
    ``miss_rows_per_layer``, ``device_buffer_tokens``, ``hisparse_overlap``): how
    ``toolkit plan`` asks the same question with its tiers' hit shares and HiSparse misses.

    Returns:
        One row per (hardware, engine, interactivity): ``source`` (measured or model),
        ``basis`` (measured, fitted-pair or shared-terms), ``reachable`` and ``edge``, the
        interpolated throughputs with their low/high band, the layout, GPU count and p90 TTFT
        of the front point that meets the target, $/GPU-hr with its survey, $/M total (with
        band) and output, the model's answer beside a measured one, and the ratios to the
        first hardware's first engine.
    """
    params = params or bundled_params()
    rows = sweep(cfg)
    if what_if:
        rows = rows.with_columns(pl.lit(float(v)).alias(k) for k, v in what_if.items())
    pts = predict(candidates(rows, params, cfg.interactivity, cfg.max_p90_ttft_s), params)
    if cfg.max_p90_ttft_s is not None:  # the bound at the stated confidence: band's upper end
        from toolkit.serving.calibration import active_calibration, upper

        up = upper(pts, active_calibration(params), cfg.ttft_confidence)
        pts = pts.filter(pl.Series(up <= cfg.max_p90_ttft_s))
    meas = measured_points(cfg)
    model_y = {"tput_per_gpu": "pred_tput_per_gpu",
               "output_tput_per_gpu": "pred_output_tput_per_gpu",
               "tput_per_gpu_low": "pred_tput_per_gpu_low",
               "tput_per_gpu_high": "pred_tput_per_gpu_high",
               "p90_ttft_s": "pred_p90_ttft"}
    out = []
    for hw in cfg.hardware:
        spec = get_hardware(hw)
        price = spec.price_usd_per_gpu_hour(cfg.price_tier)
        for engine in engines_for(cfg, hw):
            g = pts.filter((pl.col("hardware") == hw) & (pl.col("framework") == engine))
            m = (meas.filter((pl.col("hardware") == hw) & (pl.col("framework") == engine))
                 if meas.height else meas)
            if g.height == 0 and m.height == 0:
                bound = cfg.max_p90_ttft_s
                out += [_unreachable(hw, engine, t, price, spec.price_vintage(cfg.price_tier),
                                     f"no modelled point meets p90 TTFT <= {bound} s")
                        | {"ttft_confidence": cfg.ttft_confidence}
                        for t in cfg.interactivity]
                continue
            mod = _layout_series(g, "pred_median_intvty", model_y) if g.height else None
            mea = (_series(m, "median_intvty", {"tput_per_gpu": "tput_per_gpu",
                                                "output_tput_per_gpu": "output_tput_per_gpu",
                                                "p90_ttft_s": "p90_ttft"})
                   if m.height else None)
            basis = str(g["basis"][0]) if g.height else "shared-terms"
            for target in cfg.interactivity:
                row = _answer(hw, engine, float(target), mod, mea, basis)
                row["ttft_confidence"] = cfg.ttft_confidence
                row.update(usd_per_gpu_hour=price,
                           price_survey=spec.price_vintage(cfg.price_tier))
                _price(row, price)
                out.append(row)
    return _ratios(pl.DataFrame(out, infer_schema_length=None), cfg.hardware[0])


def _at_target(series, target: float) -> dict | None:
    """A front's answer at ``target`` plus the front row that meets it (``_row``); for a
    list of fronts (one per layout), the best reachable one's answer, with ``reachable`` and
    ``edge`` judged against the farthest any of them reaches."""
    if series is None:
        return None
    if isinstance(series, list):
        answers = [_at_target(s, target) for s in series]
        end = max(a["front_max_interactivity"] for a in answers)
        reach = [a for a in answers if a["reachable"] and a["tput_per_gpu"] is not None]
        best = (max(reach, key=lambda a: a["tput_per_gpu"]) if reach
                else max(answers, key=lambda a: a["front_max_interactivity"]))
        return {**best, "front_max_interactivity": end,
                "edge": bool(best["reachable"] and target >= (1 - EDGE_FRACTION) * end)}
    x, ys, f = series
    ans = _front_answer(x, ys, target)
    ans["_row"] = f[ans["_at"]].to_dicts()[0] if ans["_at"] is not None else None
    return ans


MEASURED_WINDOW = 1.25
"""An answer is ``measured`` only where the measured front brackets the target closely: a
point within 25% interactivity on each side of it and 3+ points within that window
(:data:`MEASURED_MIN_POINTS`); else ``blended`` (the model's front corrected by the nearest
measured points' residuals). Across 56 answers that rested on 2-5 points the model's figure
was a median 1.65x (0.36x-5.2x) the measured: sparse points are not an answer by themselves."""
MEASURED_MIN_POINTS = 3
BLEND_POINTS = 3
"""Nearest measured points (in log interactivity) whose residuals correct a blended answer."""
BLEND_WINDOW = 2.0
"""Only measured points within 2x of the target's interactivity correct it (assumed: farther
points run another regime, e.g. batch-bound instead of latency-bound); with none, the answer
stays the model's."""
MIN_HALF_WIDTH = 0.03
"""Smallest log half-width of a measured answer's band (assumed: ~3% run-to-run spread of a
benchmark point); the band is the larger of this and the front's leave-one-out
interpolation error near the target. Never zero width."""


def _dense(x: np.ndarray, target: float) -> np.ndarray | None:
    """Indices of the measured front points within the window, when they bracket the target
    densely enough to answer by themselves (None otherwise)."""
    near = np.flatnonzero((x >= target / MEASURED_WINDOW) & (x <= target * MEASURED_WINDOW))
    if near.size < MEASURED_MIN_POINTS or not ((x[near] <= target).any()
                                               and (x[near] >= target).any()):
        return None
    return near


def _loo_half_width(x: np.ndarray, y: np.ndarray, near: np.ndarray) -> float:
    """Median |log error| of re-interpolating each interior near point without it."""
    errs = []
    for i in near:
        if 0 < i < x.size - 1:
            keep = np.arange(x.size) != i
            v = float(steffen_interpolate(x[keep], y[keep], x[i]))
            if v > 0 and y[i] > 0:
                errs.append(abs(np.log(y[i] / v)))
    return max(float(np.median(errs)) if errs else 0.0, MIN_HALF_WIDTH)


def _model_at(mod, xs: np.ndarray) -> np.ndarray:
    """The model's throughput at each interactivity (NaN where it does not reach)."""
    out = np.full(xs.size, np.nan)
    for i, v in enumerate(xs):
        a = _at_target(mod, float(v))
        if a and a["reachable"] and a["tput_per_gpu"]:
            out[i] = a["tput_per_gpu"]
    return out


def _answer(hw: str, engine: str, target: float, mod, mea, basis: str) -> dict:
    row: dict = {"hardware": hw, "engine": engine, "interactivity": target}
    model_ans, mea_ans = _at_target(mod, target), _at_target(mea, target)
    row.update(blend_points=0, blend_log_shift=None)
    dense = (_dense(mea[0], target) if mea_ans is not None and mea_ans["reachable"]
             else None)
    model_ok = model_ans is not None and model_ans["reachable"] and model_ans[
        "tput_per_gpu"] is not None
    use_measured = dense is not None or (mea_ans is not None and mea_ans["reachable"]
                                         and not model_ok)
    blend = None
    if not use_measured and mea is not None and model_ok:
        blend = _blend(mod, mea, target, model_ans)
    ans = mea_ans if use_measured else (model_ans or mea_ans)
    source = "measured" if use_measured else ("blended" if blend else "model")
    row.update(source=source, basis="measured" if use_measured else basis,
               reachable=ans["reachable"], edge=ans["edge"], clamped=ans["clamped"],
               front_max_interactivity=ans["front_max_interactivity"],
               tput_per_gpu=ans["tput_per_gpu"],
               output_tput_per_gpu=ans["output_tput_per_gpu"],
               tput_per_gpu_low=ans.get("tput_per_gpu_low", ans["tput_per_gpu"]),
               tput_per_gpu_high=ans.get("tput_per_gpu_high", ans["tput_per_gpu"]))
    if use_measured and ans["tput_per_gpu"] is not None:
        x, ys, _ = mea
        h = _loo_half_width(x, ys["tput_per_gpu"], dense if dense is not None
                            else np.arange(x.size))
        row.update(tput_per_gpu_low=ans["tput_per_gpu"] * np.exp(-h),
                   tput_per_gpu_high=ans["tput_per_gpu"] * np.exp(h))
        if dense is None:
            row["note"] = (f"measured front reached, model not: {x.size} measured point(s), "
                           "not dense around the target")
    if blend:
        row.update(blend)
    at = ans["_row"]
    row.update(p90_ttft_s=ans["p90_ttft_s"] if not use_measured else (
                   float(at["p90_ttft"]) if at and at["p90_ttft"] is not None else None),
               p90_ttft_s_low=None, p90_ttft_s_high=None,
               layout=_layout_text(at) if at else None, gpus=_gpus(at) if at else None,
               conc=int(at["conc"]) if at else None,
               measured_points=0 if mea is None else int(mea[2].height),
               model_tput_per_gpu=model_ans["tput_per_gpu"] if model_ans else None,
               model_reachable=model_ans["reachable"] if model_ans else False)
    if use_measured:
        row["p90_ttft_s_low"] = row["p90_ttft_s_high"] = row["p90_ttft_s"]
    if not use_measured and ans["p90_ttft_s"] is not None and at is not None:
        row["p90_ttft_s"] = float(at["pred_p90_ttft"])
        row["p90_ttft_s_low"] = _f(at.get("pred_p90_ttft_low"))
        row["p90_ttft_s_high"] = _f(at.get("pred_p90_ttft_high"))
    if use_measured and at is not None and at.get(P90_FROM_P99):
        row["note"] = ("p90_ttft_s is the measured run's p99 TTFT (it recorded no p90): an "
                       "upper bound")
    return row


def _f(v) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


def _blend(mod, mea, target: float, model_ans: dict) -> dict | None:
    """The model's answer corrected by the mean log residual (measured / model) of the
    :data:`BLEND_POINTS` measured front points nearest the target (within
    :data:`BLEND_WINDOW`) that the model also reaches;
    band: the model's calibrated band widened by those residuals' spread (root sum of
    squares). None when no measured point is comparable."""
    x, ys, _ = mea
    m = _model_at(mod, x)
    ok = np.flatnonzero(np.isfinite(m) & (ys["tput_per_gpu"] > 0)
                        & (np.abs(np.log(x / target)) <= np.log(BLEND_WINDOW)))
    if ok.size == 0:
        return None
    near = ok[np.argsort(np.abs(np.log(x[ok] / target)), kind="stable")[:BLEND_POINTS]]
    r = np.log(ys["tput_per_gpu"][near] / m[near])
    shift, spread = float(np.mean(r)), float(np.std(r, ddof=1)) if r.size > 1 else 0.0
    v = model_ans["tput_per_gpu"]
    lo = model_ans.get("tput_per_gpu_low") or v
    hi = model_ans.get("tput_per_gpu_high") or v
    lo_w = float(np.hypot(np.log(v / lo), spread)) if lo > 0 else spread
    hi_w = float(np.hypot(np.log(hi / v), spread)) if v > 0 else spread
    lo_w, hi_w = max(lo_w, MIN_HALF_WIDTH), max(hi_w, MIN_HALF_WIDTH)
    c = v * np.exp(shift)
    out = model_ans.get("output_tput_per_gpu")
    return {"tput_per_gpu": c, "tput_per_gpu_low": c * np.exp(-lo_w),
            "tput_per_gpu_high": c * np.exp(hi_w),
            "output_tput_per_gpu": out * np.exp(shift) if out is not None else None,
            "blend_points": int(near.size), "blend_log_shift": shift}


def _price(row: dict, price: float) -> None:
    for k, t in (("usd_per_mtok_total", "tput_per_gpu"),
                 ("usd_per_mtok_total_low", "tput_per_gpu_high"),
                 ("usd_per_mtok_total_high", "tput_per_gpu_low"),
                 ("usd_per_mtok_output", "output_tput_per_gpu"),
                 ("model_usd_per_mtok_total", "model_tput_per_gpu")):
        v = row.get(t)
        row[k] = _usd(price, v) if v is not None and row["reachable"] or (
            k.startswith("model") and v is not None) else None


def _unreachable(hw: str, engine: str, target: float, price: float, survey: str,
                 why: str) -> dict:
    return {"hardware": hw, "engine": engine, "interactivity": target, "source": "model",
            "basis": "shared-terms", "reachable": False, "edge": False, "clamped": False,
            "front_max_interactivity": None, "tput_per_gpu": None, "output_tput_per_gpu": None,
            "tput_per_gpu_low": None, "tput_per_gpu_high": None, "p90_ttft_s": None,
            "p90_ttft_s_low": None, "p90_ttft_s_high": None, "blend_points": 0,
            "blend_log_shift": None, "layout": None, "gpus": None, "conc": None,
            "measured_points": 0, "model_tput_per_gpu": None,
            "model_reachable": False, "usd_per_gpu_hour": price, "price_survey": survey,
            "usd_per_mtok_total": None, "usd_per_mtok_total_low": None,
            "usd_per_mtok_total_high": None, "usd_per_mtok_output": None,
            "model_usd_per_mtok_total": None, "note": why}


def _ratios(df: pl.DataFrame, first: str) -> pl.DataFrame:
    base = (df.filter(pl.col("hardware") == first).group_by("interactivity", maintain_order=True)
            .first().select("interactivity", pl.col("usd_per_mtok_total").alias("_bt"),
                            pl.col("usd_per_mtok_output").alias("_bo"),
                            pl.col("tput_per_gpu").alias("_bp")))
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


def _layout_text(r: dict) -> str:
    mtp = "+MTP" if r["spec_method"] == "mtp" else ""
    if r["disagg"]:
        return (f"disagg P{r['num_prefill_gpu']}/D{r['num_decode_gpu']} decode TP{r['decode_tp']}"
                f" EP{r['decode_ep']}{' DPA' if r['decode_dp_attention'] else ''}{mtp} "
                f"conc {r['conc']}")
    return (f"TP{r['decode_tp']} EP{r['decode_ep']}{' DPA' if r['decode_dp_attention'] else ''}"
            f"{mtp} conc {r['conc']}")
