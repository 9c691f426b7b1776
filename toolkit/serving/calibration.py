"""Calibrated bands: every ``pred_*_low`` / ``pred_*_high`` is a stated central interval.

Why: the old bands (10th/90th percentile of 5-fold residuals per pair) held 61-71% of
held-out measurements where 80% was promised, and p90 TTFT came out about half the measured.
The bands here are **split-conformal quantiles of cross-validated log residuals**
``log(measured / predicted)`` per column and per regime:

* residuals come from the shipped held-out predictions (``fitted/cv/heldout_<scheme>.csv``,
  written by ``toolkit serving validate --out-dir``): a row's residual is always from a fit
  that never saw it;
* a row whose (hardware, engine) pair the fit saw (``basis = fitted-pair``) takes the
  residuals of pairs seen by their fit (5-fold rows and the time split's fitted-pair rows); an
  unseen pair (``shared-terms``) those of unseen pairs (leave-one-hardware-out rows and the
  time split's shared-terms rows);
* a regime is a concurrency band (<= 16, 17-128, > 128 users), for p90 TTFT also x engine
  class (aggregated or disaggregated), falling back to the engine class, then to all rows,
  below :data:`MIN_REGIME_ROWS` residuals (:data:`REGIMES` says which column splits how);
* the quantile levels are inflated for the pool's size (split conformal: the
  ``ceil((n + 1) q) / n`` rank), so a pool of 40 rows gives a slightly wider band than 400;
* p90 TTFT is its **own target**: its prediction is moved by the median residual of its
  (vendor, engine) group where the pool holds :data:`MIN_GROUP_ROWS` of them, else of its
  regime (the replayed client's p90 was about half the measured: no arrival burstiness, no
  engine hiccups are modelled; AMD SGLang's measured p90 is 5-10x its median where other
  engines' is ~2x), a ``fitted`` correction; its band is that centre plus the regime's
  quantiles of each pool row's deviation from its own centre;
* a sparse-attention (DSA) model takes the DSA checks' residuals (``heldout_dsa.csv``: the
  bundled InferenceX GLM-5 runs and the public GLM-5.2 points of ``toolkit/data/dsa``) for the
  columns they measured, without regimes (too few rows), widened to every source's own
  quantiles; :func:`dsa_loso` judges them leave-one-source-out.

The quantiles ship as ``fitted/calibration.json`` (``kind = "fitted"``) with their provenance:
the files, schemes, row counts and method. :func:`coverage` measures the method honestly:
for each held-out fold of a scheme it calibrates on rows *outside* that fold only, then
counts how many of the fold's measured values fall inside their band.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib.resources import files
from pathlib import Path

import numpy as np
import polars as pl

CONFIDENCE = 0.8
"""Default central interval of every band."""
CONFIDENCES = (0.5, 0.8, 0.9)
"""Central intervals the calibration file carries (``--ttft-confidence``)."""
CONC_EDGES = (16, 128)
"""Concurrency bands of a regime: <= 16 users (prefill-bound TTFT, no queue), 17-128,
> 128 (queues and HBM caps decide TTFT)."""
MIN_REGIME_ROWS = 60
"""Fewest residuals a regime needs before it gets its own quantiles."""
MIN_DSA_ROWS = 10
MIN_DSA_SOURCE_ROWS = 5
"""A DSA source with this many rows widens the DSA band to its own quantiles: the sources
disagree (one puts the model's throughput at 1.85x the measured, two at 1.1-1.2x), so a band
pooled by rows would speak for the largest source only."""
MIN_DSA_ENGINE_SOURCES = 2
"""Fewest DSA sources of one (vendor, engine) group before DSA answers of that group are
centred on it: the median over its sources of each source's median residual (a source counts
once, however many rows it has). Why per engine: the DSA sources disagree by engine, not by
model or accelerator (three vLLM publications put the model at 1.6-2.0x the measured
throughput, SGLang's GLM-5.2 cards at 1.25x, TensorRT-LLM's DeepSeek-V3.2 blog at 0.9x), and
vLLM's own side-by-side (perf-eval PR #50: GLM-5.2 on 8x B300, 64 users) measured SGLang 2.3x
vLLM's throughput. Judged leave-one-source-out (:func:`dsa_loso`): the held-out source's
centre comes from the other sources of its group only."""
DSA_ENGINE_CENTRED = ("tput_per_gpu", "output_tput_per_gpu")
"""Columns the DSA engine centre moves. Throughput only: centring TPOT and median TTFT too
raised their leave-one-source-out error (all DSA rows: TPOT 39% -> 42%, TTFT 63% -> 71%;
SGLang's GLM-5.2 card TTFT 36% -> 245%: TTFT residuals swing with load more than by engine)."""

COLUMNS = {"tput_per_gpu": "pred_tput_per_gpu", "output_tput_per_gpu": "pred_output_tput_per_gpu",
           "median_tpot": "pred_median_tpot", "median_ttft": "pred_median_ttft",
           "p90_ttft": "pred_p90_ttft"}
"""Measured column -> predicted column; interactivity (1 / TPOT) takes TPOT's band swapped."""
REGIMES = {"tput_per_gpu": "conc", "output_tput_per_gpu": "conc",
           "median_tpot": "conc", "median_ttft": "all", "p90_ttft": "class-conc"}
"""How each column's residuals are split into regimes (:func:`regime`). Chosen on the nested
coverage this module reports (all, engine class, concurrency band, both; 30 or 60 rows): the
narrowest bands inside 75-88% under 5-fold, leave-one-hardware-out and time; so the coverage
figures are mildly optimistic by that choice. Throughput and TPOT are split by concurrency
band only: with the precision term in the fit, their engine-class x concurrency split held
89% of 5-fold throughput (over the 88% edge) at a median width of 1.90x, the concurrency
split 83% at 1.66x (hardware held out 85%, time 76%). p90 TTFT is split by both (its centring
by regime brought the 5-fold median error to 33%, its group centres further);
median-TTFT splits made its band wider, not better (median width 36x vs 15x)."""
P99 = "pred_p99_ttft"
"""Predicted p99 TTFT: calibrated with p90's centre and band (:func:`apply`)."""
CENTRED = ("p90_ttft",)
"""Columns whose prediction is moved by a median residual (own target)."""
MIN_GROUP_ROWS = 20
"""Fewest residuals of one (vendor, engine) group in a pool before a centred column takes
that group's own median residual as its centre. Why a group and not only a regime: with the
regime's centre, hardware held out, p90 TTFT's median error was 46% (AMD SGLang rows'
measured p90 is 5-10x their median TTFT at 4-64 users, other engines' ~2x, and nothing the
model takes in separates them); with the group's, 37% (`serving validate --from-cv`). A
median of 20 residuals is stable; quantiles per group would not be, so the band's spread
stays the regime's."""
POOLS = {"fitted-pair": (("kfold", "fitted-pair"), ("time", "fitted-pair")),
         "shared-terms": (("hardware", "shared-terms"), ("time", "shared-terms"))}
"""Calibration pool of each basis: (scheme, basis of the held-out row in that scheme)."""
CAL_FILE = "calibration.json"
KEY_COLS = ("run_url", "hardware", "framework", "isl", "osl", "conc", "spec_method",
            "num_prefill_gpu", "num_decode_gpu", "decode_tp", "decode_ep", "tput_per_gpu")
"""What identifies one measured row across the schemes' held-out files."""


def _levels(confidences=CONFIDENCES) -> list[float]:
    return sorted({0.5, *((1 - c) / 2 for c in confidences), *((1 + c) / 2 for c in confidences)})


def regime(conc: np.ndarray, disagg: np.ndarray, mode: str = "class-conc") -> np.ndarray:
    """``<engine class>/<concurrency band>`` of each row (``mode``: which of the two split
    the rows; an unsplit part reads ``any``)."""
    band = np.where(conc <= CONC_EDGES[0], f"<={CONC_EDGES[0]}",
                    np.where(conc <= CONC_EDGES[1], f"<={CONC_EDGES[1]}", f">{CONC_EDGES[1]}"))
    cls = np.where(disagg, "disagg", "agg")
    if mode in ("class", "all"):
        band = np.full(conc.size, "any")
    if mode in ("conc", "all"):
        cls = np.full(conc.size, "any")
    return np.char.add(np.char.add(cls.astype(str), "/"), band.astype(str))


def engine_group(df: pl.DataFrame) -> np.ndarray:
    """``<vendor>/<engine>`` of each row (``amd/sglang``, ``nvidia/dynamo-trt``)."""
    from toolkit.hardware import get_hardware

    vendor = {h: get_hardware(h).vendor for h in df["hardware"].unique().to_list()}
    return df.select(pl.format("{}/{}", pl.col("hardware").replace_strict(vendor),
                               pl.col("framework"))).to_series().to_numpy().astype(str)


def row_keys(df: pl.DataFrame) -> np.ndarray:
    cols = [c for c in KEY_COLS if c in df.columns]
    return df.select(pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in cols],
                                   separator="|")).to_series().to_numpy()


def residuals(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Long frame of cross-validated log residuals: key, scheme, fold, basis, regime, column,
    ``r = log(measured / predicted)``."""
    out = []
    for scheme, df in frames.items():
        keys = row_keys(df)
        conc, disagg = df["conc"].to_numpy(), df["disagg"].cast(pl.Boolean).to_numpy()
        group = engine_group(df)
        for m, p in COLUMNS.items():
            if m not in df.columns or p not in df.columns:
                continue
            reg = regime(conc, disagg, REGIMES[m])
            meas = df[m].cast(pl.Float64).to_numpy()
            pred = df[p].cast(pl.Float64).to_numpy()
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred) & (pred > 0)
            if not ok.any():
                continue
            out.append(pl.DataFrame({
                "key": keys[ok], "scheme": scheme,
                "fold": df["fold"].cast(pl.String).to_numpy()[ok] if "fold" in df.columns
                else np.full(ok.sum(), scheme),
                "basis": df["basis"].to_numpy()[ok], "regime": reg[ok], "group": group[ok],
                "column": m, "r": np.log(meas[ok] / pred[ok])}))
    return pl.concat(out) if out else pl.DataFrame()


def conformal_quantiles(r: np.ndarray, levels: list[float]) -> list[float]:
    """Split-conformal quantiles: level q takes the ``ceil((n + 1) q)``-th smallest residual
    (the ``floor((n + 1) q)``-th for a lower level), clamped to the sample."""
    s = np.sort(r)
    n = s.size
    out = []
    for q in levels:
        k = math.ceil((n + 1) * q) if q >= 0.5 else math.floor((n + 1) * q)
        out.append(float(s[min(max(k, 1), n) - 1]))
    return out


def _envelope(r: np.ndarray, schemes: np.ndarray, levels: list[float],
              min_rows: int | None = None) -> list[float]:
    """Quantiles of the pooled residuals, widened to every member scheme's own (lower levels
    the smallest, upper the largest; the median pooled): a band must hold under each way of
    holding rows out, not only on their average."""
    q = np.array([conformal_quantiles(r, levels)]
                 + [conformal_quantiles(r[schemes == s], levels) for s in np.unique(schemes)
                    if (schemes == s).sum() >= (min_rows or MIN_REGIME_ROWS)])
    return [float(q[0, i]) if lv == 0.5 else float(q[:, i].min() if lv < 0.5 else q[:, i].max())
            for i, lv in enumerate(levels)]


def calibrate(res: pl.DataFrame, dsa: pl.DataFrame | None = None,
              confidences=CONFIDENCES) -> dict:
    """Quantile tables per basis -> column -> regime (plus engine class and ``all``), and a
    ``dsa`` table per column, from residual frames (:func:`residuals`). A centred column's
    regimes also carry their median residual (``centre``) and its ``q`` are quantiles of the
    deviations from each row's own centre; its ``engine_groups`` the groups' centres."""
    levels = _levels(confidences)
    table: dict = {"levels": levels, "regimes": dict(REGIMES), "groups": {}}
    for basis, members in POOLS.items():
        if res.height == 0:
            continue
        sel = pl.lit(False)
        for scheme, b in members:
            sel = sel | ((pl.col("scheme") == scheme) & (pl.col("basis") == b))
        pool = res.filter(sel)
        cols: dict = {}
        for m in COLUMNS:
            g = pool.filter(pl.col("column") == m) if pool.height else pool
            if g.height == 0:
                continue
            reg = g["regime"].to_numpy().astype(str)
            r, sch = g["r"].to_numpy(), g["scheme"].to_numpy().astype(str)
            masks = {"all": np.ones(r.size, dtype=bool)}
            for cls in ("agg", "disagg"):
                masks[cls] = np.char.startswith(reg, cls + "/")
            masks.update({str(name): reg == name for name in np.unique(reg)})
            masks = {k: v for k, v in masks.items() if k == "all" or v.sum() >= MIN_REGIME_ROWS}
            if m not in CENTRED:
                cols[m] = {k: {"rows": int(v.sum()), "q": _envelope(r[v], sch[v], levels)}
                           for k, v in masks.items()}
                continue
            # centred: each residual's own centre (its group's median, else its regime's,
            # with the regime fallbacks), the band from the deviations around it
            grp = g["group"].to_numpy().astype(str)
            groups = {str(k): {"rows": int((grp == k).sum()),
                               "centre": float(np.median(r[grp == k]))}
                      for k in np.unique(grp) if (grp == k).sum() >= MIN_GROUP_ROWS}
            centres = {k: float(np.median(r[v])) for k, v in masks.items()}
            own = np.array([groups[k]["centre"] if k in groups else _fallback(centres, n)
                            for k, n in zip(grp, reg, strict=True)])
            d = r - own
            entries = {k: {"rows": int(v.sum()), "centre": centres[k],
                           "q": _envelope(d[v], sch[v], levels)} for k, v in masks.items()}
            cols[m] = {**entries, "engine_groups": groups}
        table["groups"][basis] = cols
    if dsa is not None and dsa.height:
        cols = {}
        for m in COLUMNS:
            g = dsa.filter(pl.col("column") == m)
            r = g["r"].to_numpy()
            if r.size < MIN_DSA_ROWS:
                continue
            src = g["fold"].to_numpy().astype(str)
            grp = g["group"].to_numpy().astype(str)
            # every source counts, however many rows it has; a group without its own centre
            # takes the raw residuals' band (its engine's offset is unknown: any of theirs)
            entry = {"rows": int(r.size), "q": _envelope(r, src, levels, MIN_DSA_SOURCE_ROWS)}
            engines = dsa_engine_centres(r, src, grp) if m in DSA_ENGINE_CENTRED else {}
            if engines:
                # a centred group's band: the spread of its rows around their own centre
                mine = np.isin(grp, list(engines))
                dev = r[mine] - np.array([engines[k]["centre"] for k in grp[mine]])
                entry |= {"engine_centres": engines,
                          "q_centred": _envelope(dev, src[mine], levels, MIN_DSA_SOURCE_ROWS)}
            cols[m] = {"all": entry}
        table["groups"]["dsa"] = cols
    return table


def dsa_engine_centres(r: np.ndarray, source: np.ndarray, group: np.ndarray) -> dict:
    """Per (vendor, engine) group with :data:`MIN_DSA_ENGINE_SOURCES` sources or more: the
    median over its sources of each source's median log residual, and the sources' names."""
    out = {}
    for k in np.unique(group):
        mine = group == k
        srcs = sorted(set(source[mine].tolist()))
        if len(srcs) >= MIN_DSA_ENGINE_SOURCES:
            med = [float(np.median(r[mine & (source == s)])) for s in srcs]
            out[str(k)] = {"centre": float(np.median(med)), "sources": srcs}
    return out


def _fallback(table: dict, name: str):
    """``table``'s value for regime ``name``, else for its engine class, else ``all``."""
    for key in (name, name.split("/")[0], "all"):
        if key in table:
            return table[key]
    return None


def _lookup(entries: dict, reg: np.ndarray, levels: list[float],
            group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Quantile rows (n x levels) for each row's regime, with the fallbacks, and each row's
    centre: its engine group's, else its regime's (NaN where none is stored: the quantiles
    are then of the residuals themselves)."""
    out = np.full((reg.size, len(levels)), np.nan)
    centre = np.full(reg.size, np.nan)
    for name in np.unique(reg):
        if e := _fallback(entries, str(name)):
            out[reg == name] = e["q"]
            centre[reg == name] = e.get("centre", np.nan)
    groups = entries.get("engine_groups", {})
    if group is not None and groups:
        for k in np.unique(group):
            if (c := groups.get(str(k))) is not None:
                centre[group == k] = c["centre"]
    return out, centre


def band_logs(cal: dict, column: str, basis: np.ndarray, reg: np.ndarray,
              dsa: np.ndarray | None = None, confidence: float = CONFIDENCE,
              centred: tuple[str, ...] = CENTRED, group: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the log shift of the point prediction (0 unless the column is centred) and
    the log low / high of the ``confidence`` central interval around the unshifted one.
    ``group``: each row's (vendor, engine) (:func:`engine_group`), for a centred column's
    group centres."""
    levels = cal["levels"]
    n = basis.size
    q = np.full((n, len(levels)), np.nan)
    own = np.full(n, np.nan)  # a centre stored with quantiles of deviations around it
    for b in ("fitted-pair", "shared-terms"):
        entries = cal["groups"].get(b, {}).get(column)
        mask = basis == b
        if entries and mask.any():
            q[mask], own[mask] = _lookup(entries, reg[mask], levels,
                                         None if group is None else group[mask])
    engine_centred = np.zeros(n, dtype=bool)
    if dsa is not None and dsa.any():
        entries = cal["groups"].get("dsa", {}).get(column)
        if entries:
            e = entries["all"]
            q[dsa], own[dsa] = e["q"], e.get("centre", np.nan)
            ec = e.get("engine_centres")
            if ec and group is not None:
                idx = np.flatnonzero(dsa)
                c = np.array([ec[k]["centre"] if k in ec else np.nan for k in group[idx]])
                has = np.isfinite(c)
                own[idx[has]] = c[has]
                q[idx[has]] = e["q_centred"]
                engine_centred[idx[has]] = True
    lo_i = _level_index(levels, (1 - confidence) / 2)
    hi_i = _level_index(levels, (1 + confidence) / 2)
    mid_i = _level_index(levels, 0.5)
    q = q + np.nan_to_num(own)[:, None]
    centre = np.where(np.isnan(own), q[:, mid_i], own) if column in centred else np.zeros(n)
    # a DSA answer of a group with enough DSA sources moves to its engine's centre, whatever
    # the column (:data:`MIN_DSA_ENGINE_SOURCES`)
    centre = np.where(engine_centred, own, centre)
    lo, hi = q[:, lo_i], q[:, hi_i]
    # the band holds the point answer: a quantile on the wrong side of it is the point itself
    lo, hi = np.minimum(lo, centre), np.maximum(hi, centre)
    return centre, lo, hi


def _level_index(levels: list[float], q: float) -> int:
    for i, v in enumerate(levels):
        if abs(v - q) < 1e-9:
            return i
    raise ValueError(f"confidence level {q:g} is not in the calibration ({levels})")


def apply(df: pl.DataFrame, cal: dict, basis: np.ndarray, *,
          confidence: float = CONFIDENCE, centred: tuple[str, ...] = CENTRED) -> pl.DataFrame:
    """Centre the centred columns and add ``pred_*_low`` / ``pred_*_high`` for every
    ``pred_*`` column of ``df`` (interactivity from TPOT's band, swapped)."""
    conc, disagg = df["conc"].to_numpy(), df["disagg"].cast(pl.Boolean).to_numpy()
    dsa = is_dsa(df)
    group = engine_group(df)
    cols = []
    modes = cal.get("regimes", REGIMES)
    for m, p in COLUMNS.items():
        if p not in df.columns:
            continue
        reg = regime(conc, disagg, modes.get(m, "all"))
        c, lo, hi = band_logs(cal, m, basis, reg, dsa, confidence, centred, group)
        v = df[p].cast(pl.Float64).to_numpy()
        cols += [pl.Series(p, v * np.exp(c)), pl.Series(f"{p}_low", v * np.exp(lo)),
                 pl.Series(f"{p}_high", v * np.exp(hi))]
        if m == "median_tpot" and "pred_median_intvty" in df.columns:
            iv = df["pred_median_intvty"].cast(pl.Float64).to_numpy()
            cols += [pl.Series("pred_median_intvty_low", iv * np.exp(-hi)),
                     pl.Series("pred_median_intvty_high", iv * np.exp(-lo))]
        if m == "p90_ttft" and P99 in df.columns:
            # no calibrated source records a p99: it moves with p90's centre and band
            # (checked on the DSA runs that record one, :func:`dsa_p99_check`)
            v99 = df[P99].cast(pl.Float64).to_numpy()
            cols += [pl.Series(P99, v99 * np.exp(c)), pl.Series(f"{P99}_low", v99 * np.exp(lo)),
                     pl.Series(f"{P99}_high", v99 * np.exp(hi))]
    return df.with_columns(cols)


def is_dsa(df: pl.DataFrame) -> np.ndarray:
    """Rows of a sparse-attention (DSA) model (an indexer top-k)."""
    from toolkit.models import get_model

    names = df["model"].to_list()
    flags = {n: get_model(n).index_topk > 0 for n in set(names)}
    return np.array([flags[n] for n in names], dtype=bool)


def cv_frames(cv_dir: Path, schemes=("kfold", "hardware", "time")) -> dict[str, pl.DataFrame]:
    """The held-out prediction files of ``cv_dir`` that exist, by scheme."""
    return {s: pl.read_csv(cv_dir / f"heldout_{s}.csv", infer_schema_length=None)
            for s in schemes if (cv_dir / f"heldout_{s}.csv").exists()}


def dsa_residuals(cv_dir: Path) -> pl.DataFrame | None:
    """Residuals of the DSA check. Its runs recorded p99 TTFT, not p90: p90 TTFT keeps the
    dense calibration (a p99 would move the p90 prediction ~17x up)."""
    path = cv_dir / "heldout_dsa.csv"
    if not path.exists():
        return None
    df = pl.read_csv(path, infer_schema_length=None).drop("p90_ttft", strict=False)
    if "basis" not in df.columns:
        df = df.with_columns(pl.lit("dsa").alias("basis"))
    return residuals({"dsa": df})


def build(cv_dir: Path) -> dict:
    """The calibration file's content from the held-out files of ``cv_dir``."""
    frames = cv_frames(cv_dir)
    res = residuals(frames)
    cal = calibrate(res, dsa_residuals(cv_dir))
    cal.update(kind="fitted", method=(
        "split-conformal quantiles of cross-validated log(measured / predicted) per column, "
        "basis pool (fitted-pair: 5-fold + time fitted-pair rows; shared-terms: leave-one-"
        "hardware-out + time shared-terms rows) and regime (concurrency band "
        f"<= {CONC_EDGES[0]}, <= {CONC_EDGES[1]}, more, for throughput and TPOT; x engine "
        f"class for p90 TTFT; none for median TTFT; fallback engine class, all below "
        f"{MIN_REGIME_ROWS} rows); p90 TTFT centred on its (vendor, engine) group's median "
        f"residual (>= {MIN_GROUP_ROWS} rows), else its regime's, its band the regime's "
        "quantiles of deviations from each row's own centre; DSA "
        "models from the DSA check's residuals"),
        provenance={"files": sorted(f"heldout_{s}.csv" for s in frames)
                    + (["heldout_dsa.csv"] if (cv_dir / "heldout_dsa.csv").exists() else []),
                    "rows": {s: f.height for s, f in frames.items()},
                    "written_by": "toolkit serving calibrate"},
        confidences=list(CONFIDENCES), default_confidence=CONFIDENCE)
    return cal


def centre_summary(cal: dict) -> list[str]:
    """One line per basis pool and centred column: the factor each (vendor, engine) group's
    prediction is multiplied by (``exp`` of its centre), and the regimes' for the rest, so a
    user sees how far the fitted correction moves a p90 TTFT before trusting it."""
    out = []
    for basis, cols in cal.get("groups", {}).items():
        for m in CENTRED:
            e = cols.get(m)
            if not e or "engine_groups" not in e:
                continue
            groups = ", ".join(f"{k} x{math.exp(v['centre']):.2f} ({v['rows']} rows)"
                               for k, v in sorted(e["engine_groups"].items()))
            regimes = ", ".join(f"{k} x{math.exp(v['centre']):.2f}"
                                for k, v in sorted(e.items())
                                if k != "engine_groups" and "centre" in v)
            out.append(f"{m} centre, {basis} pool: {groups or 'no group with enough rows'}; "
                       f"other rows by regime: {regimes}")
    return out


def bundled_path() -> Path:
    return Path(str(files("toolkit.serving").joinpath("fitted", CAL_FILE)))


def active_calibration(params=None) -> dict | None:
    """A parameter file's own ``bands.calibration``, else the shipped one."""
    own = params.bands.get("calibration") if params is not None and params.bands else None
    return own or bundled_calibration()


@cache
def bundled_calibration() -> dict | None:
    """The shipped calibration (``None`` before ``toolkit serving calibrate`` ever ran)."""
    path = bundled_path()
    return json.loads(path.read_text()) if path.exists() else None


def nested_bands(frames: dict[str, pl.DataFrame], scheme: str,
                 dsa: pl.DataFrame | None = None, confidence: float = CONFIDENCE
                 ) -> pl.DataFrame:
    """The held-out rows of ``scheme`` with their calibrated prediction and band, each fold's
    bands calibrated on residuals of rows outside that fold only (in every scheme's pool)."""
    res = residuals(frames)
    test = frames[scheme]
    keys = row_keys(test)
    folds = test["fold"].cast(pl.String).to_numpy()
    out = []
    for f in np.unique(folds):
        in_fold = set(keys[folds == f].tolist())
        cal = calibrate(res.filter(~pl.col("key").is_in(list(in_fold))), dsa)
        part = test.filter(pl.Series(folds == f))
        out.append(apply(part, cal, part["basis"].to_numpy(), confidence=confidence))
    return pl.concat(out, how="diagonal_relaxed")


def coverage_table(banded: pl.DataFrame, by: str = "group") -> pl.DataFrame:
    """Share of measured values inside their band per (vendor, engine) group and overall,
    per column, with the band's median width (high / low)."""
    df = banded.with_columns(pl.Series(by, engine_group(banded)))
    rows = []
    cols = {**COLUMNS, "median_intvty": "pred_median_intvty"}
    for name, g in [*((k, df.filter(pl.col(by) == k)) for k in sorted(df[by].unique())),
                    ("all", df)]:
        row: dict = {by: name, "rows": g.height}
        for m, p in cols.items():
            if m not in g.columns or f"{p}_low" not in g.columns:
                continue
            meas = g[m].cast(pl.Float64).to_numpy()
            lo, hi = g[f"{p}_low"].to_numpy(), g[f"{p}_high"].to_numpy()
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(lo) & np.isfinite(hi)
            row[f"{m}_n"] = int(ok.sum())
            row[f"{m}_coverage"] = (float(np.mean((meas[ok] >= lo[ok]) & (meas[ok] <= hi[ok])))
                                    if ok.any() else None)
            row[f"{m}_width"] = float(np.median(hi[ok] / lo[ok])) if ok.any() else None
        rows.append(row)
    return pl.DataFrame(rows)


def p90_check(banded: pl.DataFrame, column: str = "p90_ttft") -> dict:
    """A TTFT tail (``p90_ttft``, or ``p99_ttft`` where a source records that) as its own
    target on held-out rows: median |error|, median predicted / measured (bias) and band
    coverage."""
    meas = banded[column].cast(pl.Float64).to_numpy()
    pred = banded[f"pred_{column}"].to_numpy()
    lo, hi = banded[f"pred_{column}_low"].to_numpy(), banded[f"pred_{column}_high"].to_numpy()
    ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred) & np.isfinite(lo)
    if not ok.any():
        return {"rows": 0}
    ratio = pred[ok] / meas[ok]
    return {"rows": int(ok.sum()), "median_abs_err": float(np.median(np.abs(ratio - 1))),
            "median_pred_over_measured": float(np.median(ratio)),
            "coverage": float(np.mean((meas[ok] >= lo[ok]) & (meas[ok] <= hi[ok])))}


def upper(df: pl.DataFrame, cal: dict | None, confidence: float,
          column: str = "p90_ttft") -> np.ndarray:
    """The upper end of each row's ``confidence`` central band for a (calibrated) predicted
    column of ``df``: what ``--ttft-confidence`` compares with the TTFT bound. Without a
    calibration, the prediction itself."""
    p = COLUMNS[column]
    v = df[p].cast(pl.Float64).to_numpy()
    if cal is None or df.height == 0:
        return v
    conc, disagg = df["conc"].to_numpy(), df["disagg"].cast(pl.Boolean).to_numpy()
    reg = regime(conc, disagg, cal.get("regimes", REGIMES).get(column, "all"))
    basis = (df["basis"].to_numpy() if "basis" in df.columns
             else np.full(df.height, "fitted-pair"))
    c, _, hi = band_logs(cal, column, basis, reg, is_dsa(df), confidence,
                         group=engine_group(df))
    return v * np.exp(hi - c)


def bound_check(frames: dict[str, pl.DataFrame], scheme: str, dsa=None,
                bounds_s=(1.0, 2.0, 5.0, 10.0)) -> list[dict]:
    """Of held-out rows said to meet a p90 TTFT bound at each confidence (the upper end of
    the confidence's central band within the bound), how many were measured over it."""
    rows = []
    for c in CONFIDENCES:
        b = nested_bands(frames, scheme, dsa, confidence=c)
        meas = b["p90_ttft"].cast(pl.Float64).to_numpy()
        up = b["pred_p90_ttft_high"].to_numpy()
        ok = np.isfinite(meas) & (meas > 0) & np.isfinite(up)
        for bound in bounds_s:
            said = ok & (up <= bound)
            rows.append({"scheme": scheme, "confidence": c, "bound_s": bound,
                         "said_to_meet": int(said.sum()),
                         "measured_over": int((said & (meas > bound)).sum()),
                         "share_over": (float(np.mean(meas[said] > bound)) if said.any()
                                        else None)})
    return rows


def report(frames: dict[str, pl.DataFrame], schemes, dsa=None) -> dict:
    """Per scheme: coverage per column and (vendor, engine) group, the p90 TTFT check and the
    TTFT-bound check, all on rows held out of their own calibration (:func:`nested_bands`)."""
    out = {}
    for s in schemes:
        if s not in frames:
            continue
        b = nested_bands(frames, s, dsa)
        out[s] = {"coverage": coverage_table(b), "p90_ttft": p90_check(b),
                  "ttft_bound": bound_check(frames, s, dsa)}
    return out


def dsa_p99_check(dsa: pl.DataFrame, cal: dict | None = None) -> dict:
    """p99 TTFT where a DSA source records it (the InferenceX GLM-5 runs record p99, not
    p90), as its own target: the calibration's p90 centre and band applied to the raw p99
    (:func:`apply`); no p99 and no DSA p90 is in any calibration, so every row is held out."""
    cal = cal if cal is not None else bundled_calibration()
    if cal is None or "p99_ttft" not in dsa.columns or P99 not in dsa.columns:
        return {"rows": 0}
    rows = dsa.filter(pl.col("p99_ttft").cast(pl.Float64, strict=False) > 0)
    if rows.height == 0:
        return {"rows": 0}
    banded = apply(rows, cal, np.full(rows.height, "shared-terms"))
    return p90_check(banded, "p99_ttft") | {
        "sources": sorted(set(rows["source"].to_list())) if "source" in rows.columns else []}


def _measured_pair(g: pl.DataFrame, m: str, p: str):
    """Measured, predicted and band of column ``m`` per row; throughput falls back to the
    output throughput where a source publishes only that (its total would rest on an
    assumed length mix: the comparison on output tokens is the same one)."""
    def cols(m, p):
        return (g[m].cast(pl.Float64).to_numpy() if m in g.columns else np.full(g.height, np.nan),
                g[p].to_numpy(), g[f"{p}_low"].to_numpy(), g[f"{p}_high"].to_numpy())

    meas, pred, lo, hi = cols(m, p)
    if m == "tput_per_gpu" and "output_tput_per_gpu" in g.columns:
        om, op, olo, ohi = cols("output_tput_per_gpu", "pred_output_tput_per_gpu")
        use = ~np.isfinite(meas)
        meas, pred = np.where(use, om, meas), np.where(use, op, pred)
        lo, hi = np.where(use, olo, lo), np.where(use, ohi, hi)
    return meas, pred, lo, hi


def dsa_loso(dsa: pl.DataFrame, centred: bool = False) -> pl.DataFrame:
    """Leave-one-source-out check of the DSA bands: each source's rows get bands (and, for a
    (vendor, engine) group the other sources still centre, the throughput centre,
    :data:`MIN_DSA_ENGINE_SOURCES`) calibrated on the other sources' residuals only.
    ``centred``: also move throughput, TPOT and TTFT predictions by the other sources' median
    residual (one DSA-wide term, tried and not shipped: it lowered the held-out error less).
    Per source and overall: median |error| of throughput,
    TPOT and median TTFT, and band coverage."""
    res = residuals({"dsa": dsa.with_columns(pl.col("source").alias("fold"))})
    src = dsa["source"].to_numpy().astype(str)
    out, parts = [], []
    for s in np.unique(src):
        cal = calibrate(pl.DataFrame(), res.filter(pl.col("fold") != s))
        part = dsa.filter(pl.Series(src == s))
        parts.append(apply(part, cal, np.full(part.height, "shared-terms"),
                           centred=tuple(COLUMNS) if centred else CENTRED))
    banded = pl.concat(parts, how="diagonal_relaxed")
    for name, g in [*((s, banded.filter(pl.col("source") == s)) for s in np.unique(src)),
                    ("all", banded)]:
        row: dict = {"source": str(name), "rows": g.height}
        for m, p in (("tput_per_gpu", "pred_tput_per_gpu"), ("median_tpot", "pred_median_tpot"),
                     ("median_ttft", "pred_median_ttft")):
            meas, pred, lo, hi = _measured_pair(g, m, p)
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(lo)
            if not ok.any():  # a source that does not publish this column
                row |= {f"{m}_median_err": None, f"{m}_median_ratio": None,
                        f"{m}_coverage": None}
                continue
            row[f"{m}_median_err"] = float(np.median(np.abs(pred[ok] / meas[ok] - 1)))
            row[f"{m}_median_ratio"] = float(np.median(pred[ok] / meas[ok]))
            row[f"{m}_coverage"] = float(np.mean((meas[ok] >= lo[ok]) & (meas[ok] <= hi[ok])))
        out.append(row)
    return pl.DataFrame(out)
