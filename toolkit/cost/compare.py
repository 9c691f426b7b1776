"""Cost per million tokens per accelerator at a target interactivity: measured first, then
the serving model, with error bands.

The question a capacity planner asks ("what does a million tokens of model M cost on GB200,
GB300 and MI355X at 150 tok/s/user?") is answered the way InferenceX answers it: a Pareto
front of throughput per GPU vs interactivity per (hardware, engine), only points whose p90
TTFT meets a bound (10 s unless told otherwise; a modelled point's on the upper end of its
band at ``--ttft-confidence``), Steffen's monotone spline at the target, and the hourly price
divided by the tokens. Candidates are the **measured** points (bundled InferenceX rows, or
``--measurements``) within the bound and the serving model's sweep of layouts and
concurrency, each modelled point corrected by the residuals of the measured runs nearest
it (:func:`_corrected`); the label says whether measured points answer densely
(``measured``), together with the model (``blended``) or not at all (``model``). A target
beyond every front's end is unreachable (no price); one within :data:`EDGE_FRACTION` of the
end is flagged.

One rule makes the answers consistent with each other: the answer at a target is the best
deployment meeting *at least* that target within the bound, computed from points chosen
and corrected without regard to the targets asked or the bound. So a target asked alone
answers as it does beside others, a lower target never costs more, and a looser bound never
costs more (:func:`_answer`, :func:`_nested_series`, :data:`NEAR_FRONT`).
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


def engines_on(hw: str) -> list[str]:
    """Every engine that runs on ``hw``'s vendor's parts (:data:`ENGINE_VENDORS`)."""
    vendor = get_hardware(hw).vendor
    return [e for e in ENGINES if ENGINE_VENDORS.get(e, vendor) == vendor]


def check_engine(hw: str, engine: str, flag: str = "--engine") -> None:
    """Refuse an engine that is unknown or does not run on ``hw`` (TensorRT-LLM on AMD
    parts, ATOM or MoRI on NVIDIA's): the sweep would otherwise price a deployment no one
    can run. The message names the flag (``flag``) and the engines valid for ``hw``.

    Raises:
        ValueError: one line, ``--engine HW=ENGINE: ...; engines for HW: ...``.
    """
    valid = engines_on(hw)
    if engine in valid:
        return
    why = (f"unknown engine {engine!r}" if engine not in ENGINES else
           f"{engine} does not run on {hw} ({get_hardware(hw).vendor})")
    raise ValueError(f"{flag} {hw}={engine}: {why}; engines for {hw}: {', '.join(valid)}")


def engines_for(cfg: CompareConfig, hw: str) -> list[str]:
    """The engines compared on ``hw``: the one given or defaulted, or with ``all_engines``
    every engine that runs on its vendor's parts.

    Raises:
        ValueError: the engine given for ``hw`` does not run on it (:func:`check_engine`).
    """
    if not cfg.all_engines:
        engine = cfg.engines.get(hw, DEFAULT_ENGINES.get(hw, "sglang"))
        check_engine(hw, engine)
        return [engine]
    return engines_on(hw)


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
surrogate puts it near its (hardware, engine) front: throughput within 1/0.7 of the best at
its interactivity or faster. The replay of thousands of users per point is what costs;
points far below the front cannot change an answer. The kept set depends on no target, so
the answer at a target is the same whichever other targets the call asks (it once kept only
points near the asked targets: 10 tok/s/user asked alone then answered from a 1-user
point at $20.80/M, asked beside 100 at $0.15/M)."""
TTFT_PRUNE = 5.0
"""A swept point whose steady-state surrogate puts its p90 TTFT above this many times the
bound is not replayed: on the bundled sweeps (DeepSeek-R1 and GLM-5.2 over five accelerators,
bounds 2 s and 10 s) the replay's p90 TTFT was never below 0.39x the surrogate's, and no
point that met its bound had a surrogate above 2.3x it. Such points are the highest
concurrencies (thousands of users each), most of the replay's cost, and the bound would drop
them anyway. A looser bound keeps a superset, so it can only add deployments."""


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


def candidates(rows: pl.DataFrame, params: ServingParams,
               max_p90_ttft_s: float | None = None) -> pl.DataFrame:
    """The swept rows worth replaying (see :data:`NEAR_FRONT`: the same for every target)
    and, with a bound, plausibly within it (:data:`TTFT_PRUNE`)."""
    s = _surrogate(rows, params)
    x, y = s["median_intvty"], s["tput_per_gpu"]
    keep = np.zeros(rows.height, dtype=bool)
    key = (rows["hardware"] + "/" + rows["framework"]).to_numpy()
    for k in np.unique(key):
        idx = np.flatnonzero(key == k)
        order = idx[np.argsort(-x[idx], kind="stable")]  # fastest first
        best = np.maximum.accumulate(y[order])  # best throughput at >= this interactivity
        keep[order] = y[order] >= NEAR_FRONT * best
    if max_p90_ttft_s is not None:
        keep &= s["p90_ttft_s"] <= TTFT_PRUNE * max_p90_ttft_s
    return rows.filter(pl.Series(keep))


MEASURED_KEYS = ("hardware", "framework", "model", "precision", "isl", "osl")


def measurement_scope(cfg: CompareConfig) -> PointsScope:
    """The rows of a measurements file ``cfg`` asks about (the rest are left out)."""
    return PointsScope(cfg.model, cfg.hardware, cfg.precision)


def measured_points(cfg: CompareConfig, *, ttft_bound: bool = True) -> pl.DataFrame:
    """Measured rows that answer ``cfg``: the bundled InferenceX points (DeepSeek-R1 serving
    points; GLM-5 decode-SLO points on 8x H200, see :data:`P90_FROM_P99`) plus
    ``cfg.measurements`` (a file any :func:`toolkit.serving.measurements.load_measurements`
    reads, or a :class:`~toolkit.serving.measurements.MeasurementSource` naming a bench file
    with its layout or a store's ``measured_points`` table), for its model, precision and
    shape, MTP rows only when ``mtp = "on"``, p90 TTFT within the bound (every p90 TTFT
    with ``ttft_bound=False``: how far the measured runs reach, whatever their TTFT)."""
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
    if ttft_bound and cfg.max_p90_ttft_s is not None:
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
        if k == "blend_log_shift":  # a log shift may be negative
            out[k] = v if np.isfinite(v) else None
            continue
        out[k] = max(0.0, v) if np.isfinite(v) else None  # no band without fitted bands
    # the point one would run: the cheapest front point that still meets the target
    meets = np.flatnonzero(x >= target)
    out["_at"] = int(meets[0]) if meets.size else None
    return out


def _series(g: pl.DataFrame, xcol: str, ycols: dict[str, str]) -> tuple:
    """One front through every point of ``g``: its interactivities, the ``ycols`` series
    along it, ``g`` and the front's row numbers in ``g``."""
    x = g[xcol].to_numpy()
    front = pareto_front(x, g[ycols["tput_per_gpu"]].to_numpy())
    return x[front], {k: g[c].to_numpy()[front] for k, c in ycols.items()}, g, front


def _nested_series(g: pl.DataFrame, xcol: str, ycols: dict[str, str], ttft_col: str) -> list:
    """One front per p90 TTFT threshold: the points of ``g`` with p90 TTFT at or below each
    distinct value (a missing TTFT counts as the largest). The answer is the best of them
    (:func:`_at_target`), so a looser bound, which only adds thresholds, never answers less:
    one front through every point can (a point added at the low end changes the spline's end
    slope, and with it the curve between the next points)."""
    t = g[ttft_col].cast(pl.Float64).to_numpy()  # a null reads as NaN
    t = np.where(np.isnan(t), np.inf, t)
    x, y = g[xcol].to_numpy(), g[ycols["tput_per_gpu"]].to_numpy()
    cols = {k: g[c].to_numpy() for k, c in ycols.items()}
    out, seen = [], set()
    for tau in np.unique(t):
        idx = np.flatnonzero(t <= tau)
        front = idx[pareto_front(x[idx], y[idx])]
        key = front.tobytes()
        if key in seen:
            continue
        seen.add(key)
        out.append((x[front], {k: v[front] for k, v in cols.items()}, g, front))
    return out


LAYOUT_KEYS = ("disagg", "num_prefill_gpu", "num_decode_gpu", "prefill_tp", "prefill_ep",
               "prefill_dp_attention", "decode_tp", "decode_ep", "decode_dp_attention",
               "spec_method")
"""What makes two swept points one layout: the model interpolates only along one layout's
concurrency sweep (:func:`_layout_series`)."""


def _layout_series(g: pl.DataFrame, xcol: str, ycols: dict[str, str],
                   ttft_col: str = "pred_p90_ttft") -> list:
    """One front per layout, over its concurrencies (and per TTFT threshold,
    :func:`_nested_series`). The model's answer at a target is the best of these fronts
    there (:func:`_at_target`), not one front through every layout's points: between two
    concurrencies of one layout lies a concurrency one can run, between two layouts lies no
    deployment (each user gets one layout's speed), and interpolating across layouts let an
    accelerator that offers one more layout (GB300's 4-GPU instance) answer below a sibling
    whose every point it matches (4% below GB200 at a matched engine)."""
    return [s for part in g.partition_by(list(LAYOUT_KEYS), maintain_order=True)
            for s in _nested_series(part, xcol, ycols, ttft_col)]



def _bounded_points(cfg: CompareConfig, params: ServingParams,
                    what_if: dict[str, float] | None) -> pl.DataFrame:
    """The modelled points of ``cfg``'s sweep (with ``what_if`` set on every row) that meet
    its TTFT bound at its stated confidence: the bound is read on the p90 TTFT band's upper
    end (``TTFT_KEY``), and the fronts nest by the same value (:func:`_nested_series`), so a
    looser bound only adds points. Shared by :func:`compare` and :func:`layout_answers`."""
    from toolkit.serving.calibration import active_calibration, upper

    rows = sweep(cfg)
    if what_if:
        rows = rows.with_columns(pl.lit(float(v)).alias(k) for k, v in what_if.items())
    pts = predict(candidates(rows, params, cfg.max_p90_ttft_s), params)
    pts = pts.with_columns(pl.Series(TTFT_KEY, upper(pts, active_calibration(params),
                                                     cfg.ttft_confidence), pl.Float64))
    if cfg.max_p90_ttft_s is not None:
        pts = pts.filter(pl.col(TTFT_KEY) <= cfg.max_p90_ttft_s)
    return pts

def compare(cfg: CompareConfig, params: ServingParams | None = None, *,
            what_if: dict[str, float] | None = None) -> pl.DataFrame:
    """$/M total and output tokens per (hardware, engine) at each target interactivity.

    Each target is answered on its own (the same answer whichever other targets are asked)
    by the best deployment that meets *at least* that target within the TTFT bound (a
    modelled point's bound on the upper end of its p90 TTFT band at ``cfg.ttft_confidence``),
    so a lower target or a looser bound never costs more (:func:`_answer`).

    ``what_if``: serving-model columns set on every swept row (``host_prefix_fraction``,
    ``miss_rows_per_layer``, ``device_buffer_tokens``, ``hisparse_overlap``): how
    ``toolkit plan`` asks the same question with its tiers' hit shares and HiSparse misses.

    Returns:
        One row per (hardware, engine, interactivity): ``source`` (measured, blended or
        model), ``basis`` (measured, fitted-pair or shared-terms), ``reachable`` and ``edge``,
        the interpolated throughputs with their calibrated low/high band, the layout, GPU
        count and p90 TTFT (with band) of the front point that meets the target, the blend's
        points and log shift, $/GPU-hr with its survey, $/M total (with band) and output, the
        model's uncorrected answer beside, and the ratios to the first hardware's first engine.
    """
    params = params or bundled_params()
    pts = _bounded_points(cfg, params, what_if)
    meas_all = measured_points(cfg, ttft_bound=False)
    meas = (meas_all.filter(pl.col("p90_ttft") <= cfg.max_p90_ttft_s)
            if meas_all.height and cfg.max_p90_ttft_s is not None else meas_all)
    model_y = {"tput_per_gpu": "pred_tput_per_gpu",
               "output_tput_per_gpu": "pred_output_tput_per_gpu",
               "tput_per_gpu_low": "pred_tput_per_gpu_low",
               "tput_per_gpu_high": "pred_tput_per_gpu_high",
               "p90_ttft_s": "pred_p90_ttft"}
    blend_y = {**model_y, "blend_log_shift": "_shift"}
    mea_y = {"tput_per_gpu": "tput_per_gpu", "output_tput_per_gpu": "output_tput_per_gpu",
             "p90_ttft_s": "p90_ttft"}
    out = []
    for hw in cfg.hardware:
        spec = get_hardware(hw)
        price = spec.price_usd_per_gpu_hour(cfg.price_tier)
        for engine in engines_for(cfg, hw):
            g = pts.filter((pl.col("hardware") == hw) & (pl.col("framework") == engine))
            pair = (pl.col("hardware") == hw) & (pl.col("framework") == engine)
            m = meas.filter(pair) if meas.height else meas
            m_all = meas_all.filter(pair) if meas_all.height else meas_all
            if g.height == 0 and m.height == 0:
                bound = cfg.max_p90_ttft_s
                out += [_unreachable(hw, engine, t, price, spec.price_vintage(cfg.price_tier),
                                     f"no modelled point meets p90 TTFT <= {bound} s")
                        | {"ttft_confidence": cfg.ttft_confidence}
                        for t in cfg.interactivity]
                continue
            mod = (_layout_series(g, "pred_median_intvty", model_y, TTFT_KEY) if g.height
                   else None)
            fixed = _corrected(g, _residuals(m_all, params)) if g.height else None
            blended = (_layout_series(fixed, "pred_median_intvty", blend_y, TTFT_KEY)
                       if fixed is not None and fixed["_n"].max() > 0 else None)
            mea = _nested_series(m, "median_intvty", mea_y, "p90_ttft") if m.height else None
            mea_x = (m["median_intvty"].to_numpy()[pareto_front(
                m["median_intvty"].to_numpy(), m["tput_per_gpu"].to_numpy())]
                     if m.height else None)
            basis = str(g["basis"][0]) if g.height else "shared-terms"
            for target in cfg.interactivity:
                row = _answer(hw, engine, float(target), mod, blended, mea, mea_x, basis)
                row["ttft_confidence"] = cfg.ttft_confidence
                row.update(usd_per_gpu_hour=price,
                           price_survey=spec.price_vintage(cfg.price_tier))
                _price(row, price)
                out.append(row)
    return _ratios(pl.DataFrame(out, infer_schema_length=None), cfg.hardware[0])


def layout_answers(cfg: CompareConfig, params: ServingParams | None = None, *,
                   what_if: dict[str, float] | None = None) -> list[dict]:
    """Every serving layout (``conc`` aside) whose own front meets each target within the
    bound, one row per (hardware, engine, target, layout): the front point that meets it
    (``layout``, ``gpus``, ``conc``) and the throughput there with its band.

    Why: :func:`compare` answers with the best layout's throughput per GPU, which is the
    cheapest per token only when the load fills whole instances of it; ``toolkit plan``
    sizes each of these for a load (:mod:`toolkit.plan.load`), where a smaller layout can
    need fewer GPUs. The model's points, corrected by the measured runs as :func:`compare`
    corrects them (``blended``); measured fronts are not split by layout here."""
    params = params or bundled_params()
    pts = _bounded_points(cfg, params, what_if)
    meas_all = measured_points(cfg, ttft_bound=False)
    ys = {"tput_per_gpu": "pred_tput_per_gpu", "tput_per_gpu_low": "pred_tput_per_gpu_low",
          "tput_per_gpu_high": "pred_tput_per_gpu_high", "p90_ttft_s": "pred_p90_ttft"}
    out: list[dict] = []
    for hw in cfg.hardware:
        for engine in engines_for(cfg, hw):
            g = pts.filter((pl.col("hardware") == hw) & (pl.col("framework") == engine))
            if g.height == 0:
                continue
            m_all = (meas_all.filter((pl.col("hardware") == hw)
                                     & (pl.col("framework") == engine))
                     if meas_all.height else meas_all)
            fixed = _corrected(g, _residuals(m_all, params))
            use = fixed if fixed["_n"].max() > 0 else g
            series = _layout_series(use, "pred_median_intvty", ys, TTFT_KEY)
            for target in cfg.interactivity:
                best: dict[str, dict] = {}
                for x, y, part, front in series:
                    a = _front_answer(x, y, float(target))
                    if not a["reachable"] or not a["tput_per_gpu"] or a["_at"] is None:
                        continue
                    r = part.row(int(front[a["_at"]]), named=True)
                    text = _layout_text(r)
                    key = text.rsplit(" conc ", 1)[0]
                    if key in best and best[key]["tput_per_gpu"] >= a["tput_per_gpu"]:
                        continue
                    best[key] = {"hardware": hw, "engine": engine,
                                 "interactivity": float(target), "layout": text,
                                 "gpus": _gpus(r), "conc": int(r["conc"]),
                                 "tput_per_gpu": a["tput_per_gpu"],
                                 "tput_per_gpu_low": a.get("tput_per_gpu_low")
                                 or a["tput_per_gpu"],
                                 "tput_per_gpu_high": a.get("tput_per_gpu_high")
                                 or a["tput_per_gpu"],
                                 "p90_ttft_s": a.get("p90_ttft_s")}
                out += [best[k] for k in sorted(best)]
    return out


TTFT_KEY = "_p90_ttft_bound_s"
"""A modelled point's p90 TTFT as the bound sees it: the upper end of its band at
``--ttft-confidence`` (:func:`toolkit.serving.calibration.upper`)."""


def _at_target(series, target: float) -> dict | None:
    """A front's answer at ``target`` plus the front row that meets it (``_row``); for a
    list of fronts (one per layout and TTFT threshold), the best reachable one's answer,
    with ``reachable`` and ``edge`` judged against the farthest any of them reaches."""
    if series is None or (isinstance(series, list) and not series):
        return None
    one = not isinstance(series, list)
    series = [series] if one else series
    key = "tput_per_gpu"
    # throughput alone on every front (cheap), every series on the chosen one
    tries = [_front_answer(x, {key: ys[key]}, target) for x, ys, *_ in series]
    end = max(a["front_max_interactivity"] for a in tries)
    reach = [i for i, a in enumerate(tries) if a["reachable"] and a[key] is not None]
    i = (max(reach, key=lambda j: tries[j][key]) if reach
         else max(range(len(tries)), key=lambda j: tries[j]["front_max_interactivity"]))
    x, ys, g, front = series[i]
    ans = _front_answer(x, ys, target)
    ans["_row"] = (g.row(int(front[ans["_at"]]), named=True) if ans["_at"] is not None
                   else None)
    ans["_x"], ans["_y"] = x, ys[key]
    return {**ans, "front_max_interactivity": end,
            "edge": bool(ans["reachable"] and target >= (1 - EDGE_FRACTION) * end)}


MEASURED_WINDOW = 1.25
"""An answer is ``measured`` only where the measured front brackets the target closely: a
point within 25% interactivity on each side of it and 3+ points within that window
(:data:`MEASURED_MIN_POINTS`); else ``blended`` (the model's points corrected by the nearest
measured points' residuals). Across 56 answers that rested on 2-5 points the model's figure
was a median 1.65x (0.36x-5.2x) the measured: sparse points are not an answer by themselves."""
MEASURED_MIN_POINTS = 3
BLEND_POINTS = 3
"""Nearest measured points (in log interactivity) whose residuals correct a modelled point."""
BLEND_WINDOW = 2.0
"""The measured points within 2x of a modelled point's interactivity correct it (assumed:
farther points run another regime, e.g. batch-bound instead of latency-bound). With none
within 2x, the nearest still do, the band widened by the whole shift: a modelled point left
uncorrected beside corrected ones would win wherever the model is optimistic (GLM-5 on H200
vLLM: the model 2x the measured runs, its uncorrected points just beyond 2x answered every
target)."""
MIN_HALF_WIDTH = 0.03
"""Smallest log half-width of a measured or blended answer's band (assumed: ~3% run-to-run
spread of a benchmark point); a measured band is the larger of this and the front's
leave-one-out interpolation error near the target. Never zero width."""


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


def _residuals(m: pl.DataFrame, params: ServingParams) -> tuple[np.ndarray, np.ndarray]:
    """Each measured run's interactivity and log residual (measured / modelled throughput of
    the same configuration, what cross-validation scores), whatever its p90 TTFT: the
    correction of the model's points depends on no target and no bound."""
    if m.height == 0:
        return np.empty(0), np.empty(0)
    rows = validate(m.with_columns(pl.col("disagg").alias("is_multinode")), "measured points")
    p = predict(rows, params, bands=False)["pred_tput_per_gpu"].to_numpy()
    x, y = m["median_intvty"].to_numpy(), m["tput_per_gpu"].to_numpy()
    ok = np.isfinite(p) & (p > 0) & np.isfinite(y) & (y > 0) & np.isfinite(x) & (x > 0)
    return x[ok], np.log(y[ok] / p[ok])


def _corrected(g: pl.DataFrame, res: tuple[np.ndarray, np.ndarray]) -> pl.DataFrame:
    """The model's points each corrected by the mean log residual of the
    :data:`BLEND_POINTS` measured runs nearest its interactivity (within
    :data:`BLEND_WINDOW`): throughputs scaled, the band widened by those residuals' spread
    (root sum of squares, at least :data:`MIN_HALF_WIDTH`). ``_n`` counts the runs used (0:
    the point is the model's), ``_shift`` is the log shift. A fixed correction of points, so
    the best point meeting a target still costs no more at a lower target or looser bound."""
    xr, r = res
    x = g["pred_median_intvty"].to_numpy()
    n, shift, spread = np.zeros(x.size, int), np.zeros(x.size), np.zeros(x.size)
    if xr.size:
        d = np.abs(np.log(np.maximum(x, 1e-12)[:, None] / xr[None, :]))
        for i in range(x.size):
            ok = np.flatnonzero(d[i] <= np.log(BLEND_WINDOW))
            far = ok.size == 0  # none within 2x: the nearest, however far, less surely
            ok = np.arange(xr.size) if far else ok
            near = ok[np.argsort(d[i, ok], kind="stable")[:BLEND_POINTS]]
            n[i], shift[i] = near.size, float(np.mean(r[near]))
            spread[i] = float(np.std(r[near], ddof=1)) if near.size > 1 else 0.0
            if far:
                spread[i] = float(np.hypot(spread[i], shift[i]))
    v = g["pred_tput_per_gpu"].to_numpy()
    lo = np.where(g["pred_tput_per_gpu_low"].fill_null(np.nan).to_numpy() > 0,
                  g["pred_tput_per_gpu_low"].fill_null(np.nan).to_numpy(), v)
    hi = np.where(g["pred_tput_per_gpu_high"].fill_null(np.nan).to_numpy() > 0,
                  g["pred_tput_per_gpu_high"].fill_null(np.nan).to_numpy(), v)
    with np.errstate(divide="ignore", invalid="ignore"):
        lo_w = np.maximum(np.hypot(np.nan_to_num(np.log(v / lo)), spread), MIN_HALF_WIDTH)
        hi_w = np.maximum(np.hypot(np.nan_to_num(np.log(hi / v)), spread), MIN_HALF_WIDTH)
    c = v * np.exp(shift)
    used = n > 0
    return g.with_columns(
        pl.Series("pred_tput_per_gpu", c),
        pl.Series("pred_output_tput_per_gpu",
                  g["pred_output_tput_per_gpu"].to_numpy() * np.exp(shift)),
        pl.Series("pred_tput_per_gpu_low", np.where(used, c * np.exp(-lo_w), lo)),
        pl.Series("pred_tput_per_gpu_high", np.where(used, c * np.exp(hi_w), hi)),
        pl.Series("_shift", shift), pl.Series("_n", n))


def _answer(hw: str, engine: str, target: float, mod, blended, mea, mea_x, basis: str
            ) -> dict:
    """The answer at ``target``: the best deployment that meets at least the target, of the
    model's points (each corrected by its nearest measured runs, ``blended``: a fixed
    correction, :func:`_corrected`) and the measured runs within the bound (``mea``).

    Every candidate is chosen without regard to the target or the other targets asked, and
    a looser bound only adds candidates, so the cost never falls as the target rises nor
    rises as the bound loosens. The label: ``measured`` when the measured front wins and
    brackets the target densely (:func:`_dense`), or wins where the model reaches nothing;
    ``blended`` when a corrected point wins, or the measured front wins where too sparse to
    answer by itself; ``model`` when the winning point had no measured run within 2x."""
    row: dict = {"hardware": hw, "engine": engine, "interactivity": target}
    model_ans = _at_target(mod, target)
    cand = _at_target(blended, target) if blended is not None else model_ans
    mea_ans = _at_target(mea, target)
    cand_ok = cand is not None and cand["reachable"] and cand["tput_per_gpu"] is not None
    mea_ok = mea_ans is not None and mea_ans["reachable"] and mea_ans["tput_per_gpu"] is not None
    use_measured = mea_ok and not (cand_ok and cand["tput_per_gpu"] > mea_ans["tput_per_gpu"])
    dense = _dense(mea_x, target) if use_measured else None
    ans = mea_ans if use_measured else (cand or mea_ans)
    at = ans["_row"]
    n = int(at.get("_n") or 0) if at and not use_measured and blended is not None else 0
    note = None
    if use_measured:
        source = "measured" if dense is not None or not cand_ok else "blended"
    else:
        source = "blended" if n else "model"
    row.update(source=source, basis="measured" if use_measured else basis,
               reachable=ans["reachable"], edge=ans["edge"], clamped=ans["clamped"],
               front_max_interactivity=ans["front_max_interactivity"],
               tput_per_gpu=ans["tput_per_gpu"],
               output_tput_per_gpu=ans["output_tput_per_gpu"],
               tput_per_gpu_low=ans.get("tput_per_gpu_low", ans["tput_per_gpu"]),
               tput_per_gpu_high=ans.get("tput_per_gpu_high", ans["tput_per_gpu"]),
               blend_points=n, blend_log_shift=ans.get("blend_log_shift") if n else None)
    if use_measured:
        x, y = ans["_x"], ans["_y"]
        h = _loo_half_width(x, y, np.arange(x.size) if dense is None else
                            np.flatnonzero((x >= target / MEASURED_WINDOW)
                                           & (x <= target * MEASURED_WINDOW)))
        row.update(tput_per_gpu_low=ans["tput_per_gpu"] * np.exp(-h),
                   tput_per_gpu_high=ans["tput_per_gpu"] * np.exp(h))
        if dense is None:
            note = (f"measured front reached, model not: {mea_x.size} measured point(s), not "
                    "dense around the target" if not cand_ok else
                    f"the measured front beats the corrected model here, but its "
                    f"{mea_x.size} point(s) are not dense around the target")
    row.update(p90_ttft_s=None, p90_ttft_s_low=None, p90_ttft_s_high=None,
               layout=_layout_text(at) if at else None, gpus=_gpus(at) if at else None,
               conc=int(at["conc"]) if at else None,
               measured_points=0 if mea_x is None else int(mea_x.size),
               model_tput_per_gpu=model_ans["tput_per_gpu"] if model_ans else None,
               model_reachable=model_ans["reachable"] if model_ans else False)
    if use_measured and at is not None and at["p90_ttft"] is not None:
        row["p90_ttft_s"] = row["p90_ttft_s_low"] = row["p90_ttft_s_high"] = float(
            at["p90_ttft"])
    if not use_measured and at is not None:
        row["p90_ttft_s"] = _f(at.get("pred_p90_ttft"))
        row["p90_ttft_s_low"] = _f(at.get("pred_p90_ttft_low"))
        row["p90_ttft_s_high"] = _f(at.get("pred_p90_ttft_high"))
    if use_measured and at is not None and at.get(P90_FROM_P99):
        note = "; ".join(([note] if note else []) + [
            "p90_ttft_s is the measured run's p99 TTFT (it recorded no p90): an upper bound"])
    if note:
        row["note"] = note
    return row


def _f(v) -> float | None:
    return float(v) if v is not None and np.isfinite(v) else None


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
