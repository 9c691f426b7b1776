"""CLI: ``toolkit serving fit|predict|validate`` over InferenceX-style configuration rows."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import fail, guard
from toolkit.commands.measured import (
    DpaOpt,
    EpOpt,
    FrameworkOpt,
    GpusOpt,
    HardwareOpt,
    MeasuredPointsOpt,
    ModelOpt,
    PrecisionOpt,
    SpecOpt,
    StoreOpt,
    TpOpt,
    check_points_name,
    measurement_source,
    show_notes,
)
from toolkit.commands.output import FormatOpt, Output, OutputOpt, check_output_file, render_table

serving_app = typer.Typer(
    help="Serving-performance model: fit efficiencies to measured points, predict TPOT / TTFT "
    "/ throughput per GPU for configurations, cross-validate.",
    no_args_is_help=True,
)

PointsOpt = Annotated[Path | None, typer.Option(
    "--points", help="Measured points: InferenceX CSV/Parquet/JSON as exported, "
    "sglang.bench_serving JSONL or vllm bench serve JSON (bench results need --hardware, "
    "--model, --precision, --gpus, --tp); default: the bundled InferenceX DeepSeek-R1 "
    "points, SemiAnalysis InferenceX, Apache-2.0.")]
ParamsOpt = Annotated[Path | None, typer.Option(
    "--params", help="Parameter file from `serving fit` (default: the bundled fit).")]


def _points(path: Path | None):
    from toolkit.serving.points import bundled_points_path, read_points

    return guard(read_points, path or bundled_points_path())


def _names_in_file(path: Path) -> None:
    """A configurations CSV's unknown ``hardware`` or ``model`` (the names people mistype)
    refused before Polars and the serving model load, in the words of the full validation
    (:func:`toolkit.serving.points.validate`); anything else (Parquet, an unreadable or
    ragged file, empty cells, other columns) is left to it."""
    import csv

    from toolkit.hardware import hardware_names
    from toolkit.models import get_model, model_names
    from toolkit.registry import RegistryError

    if path.suffix.lower() != ".csv" or not path.is_file():
        return
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not {"hardware", "model"} <= set(reader.fieldnames or ()):
                return
            known, seen = set(hardware_names()), set()
            for i, row in enumerate(reader):
                hw, model = row.get("hardware"), row.get("model")
                if hw and hw not in known:
                    fail(f"{path}: row {i + 1} field 'hardware': unknown hardware {hw!r}; "
                         "known: toolkit hardware list")
                if model and model not in seen:
                    try:
                        get_model(model)
                    except RegistryError:
                        fail(f"{path}: row {i + 1} field 'model': unknown model {model!r}; "
                             f"known: {', '.join(model_names())}")
                    seen.add(model)
    except (OSError, UnicodeDecodeError, csv.Error):
        return


def _measured(points: Path | None, store: Path | None, name: str | None, **layout):
    """The fit's rows: ``--points FILE``, ``--store S --measured-points NAME`` or the
    bundled InferenceX points, through the one measurement loader."""
    from toolkit.serving.measurements import load_measurements

    src = measurement_source(points, store, name, file_flag="--points", **layout)
    if src is None:
        return _points(None), "bundled dsr1_serving_points.csv (SemiAnalysis InferenceX)"
    notes: list[str] = []
    df = guard(load_measurements, src, notes=notes)
    show_notes(notes)
    return df, src.label


def _params(path: Path | None):
    from toolkit.serving.params import ServingParams, bundled_params

    return guard(ServingParams.load, path) if path else bundled_params()


@serving_app.command("fit")
def fit_cmd(
    points: PointsOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the parameters (JSON) here; default: print them.")] = None,
    max_nfev: Annotated[int, typer.Option("--max-nfev", min=1,
                                          help="Cap on model evaluations.")] = 100,
    bands: Annotated[bool, typer.Option(
        "--bands/--no-bands", help="Also cross-validate (5-fold and leave-one-hardware-out) "
        "to attach error bands; about 1 + 5 + hardware-count fits.")] = True,
    store: StoreOpt = None,
    measured_points: MeasuredPointsOpt = None,
    hardware: HardwareOpt = None,
    framework: FrameworkOpt = None,
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    ep: EpOpt = None,
    dp_attention: DpaOpt = None,
    spec_method: SpecOpt = None,
) -> None:
    """Least-squares fit of the bounded efficiency terms (log error of TPOT, throughput and,
    at full weight, TTFT at <= 64 users); writes them with kind = "fitted", the data used, in-sample
    residuals and cross-validated error bands. Exits 1 naming every parameter that ends at
    a bound of its range (the model is then compensating for something it lacks)."""
    check_points_name(store, measured_points)
    from toolkit.serving.crossval import fit_with_bands
    from toolkit.serving.fit import bound_report, fit

    if out is not None:
        check_output_file(out, "--out", (".json",))
    df, label = _measured(points, store, measured_points, hardware=hardware, framework=framework,
                         model=model, precision=precision, gpus=gpus, tp=tp, ep=ep,
                         dp_attention=dp_attention, spec_method=spec_method)
    label += f": {df.height} rows"
    t0 = time.perf_counter()

    def progress(i, n, fold):
        print(f"  bands: fold {i}/{n} ({fold}) done, {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)

    if bands:
        params = guard(fit_with_bands, df, fitted_on=label, max_nfev=max_nfev,
                       progress=progress)
    else:
        params = guard(fit, df, fitted_on=label, max_nfev=max_nfev)
    if out is None:
        typer.echo(params.to_json())
    else:
        guard(params.save, out)
        for target, r in params.residuals.items():
            typer.echo(f"{target:<13} in-sample median |err| {r['median_abs_rel_err']:.3f}  "
                       f"p90 {r['p90_abs_rel_err']:.3f}  ({r['rows']} rows)")
        typer.echo(f"wrote {out}")
    at = bound_report(params, df)
    if at:
        names = sorted({f"{b['parameter']} ({b['end']} end of {b['range'][0]:g}..."
                        f"{b['range'][1]:g})" for b in at})
        fail(f"{len(names)} parameter(s) ended at a bound: {'; '.join(names)}; groups: "
             f"{', '.join(sorted({b['group'] for b in at})[:6])}", code=1)


@serving_app.command("predict")
def predict_cmd(
    points: Annotated[Path, typer.Option("--points", help="Input CSV/Parquet: InferenceX "
                                         "config columns (hardware, framework, model, ...).")],
    out: Annotated[Path, typer.Option("--out", help="Output CSV (or .parquet): the input rows "
                                      "in order plus pred_* columns.")],
    params: ParamsOpt = None,
    breakdown: Annotated[bool, typer.Option(
        "--breakdown", help="Also write every step term (term_* columns).")] = False,
) -> None:
    """Predict median TPOT, median / p90 TTFT (s), interactivity and throughput per GPU
    (InferenceX divisors) for every row; unknown hardware, model or engine stops at its row."""
    _names_in_file(points)  # before Polars and the serving model load
    from toolkit.commands.output import write_file
    from toolkit.serving.predict import predict

    check_output_file(out, "--out", (".csv", ".parquet"))
    df = _points(points)
    res = guard(predict, df, _params(params), breakdown=breakdown)
    write_file(res, out)
    typer.echo(f"wrote {res.height} rows to {out}", err=True)


def _fold_count(df, scheme: str) -> int:
    from toolkit.serving.bands import KFOLDS

    if scheme == "hardware":
        return int(df["hardware"].n_unique())
    if scheme == "shape":
        return int(df.select("isl", "osl").unique().height)
    return KFOLDS if scheme == "kfold" else 2


def _coverage(frames: dict, from_cv: Path | None, bundled: bool) -> dict:
    """Nested band coverage of the schemes run (:func:`toolkit.serving.calibration.report`):
    the calibration pool is this run's held-out frames plus, for the bundled points, the
    shipped ones of the schemes not run (the method pools 5-fold, hardware and time)."""
    from toolkit.serving import calibration as cal
    from toolkit.serving.params import bundled_cv_dir

    pool = {s: f for s, f in frames.items() if s in ("kfold", "hardware", "time")}
    src = from_cv if from_cv is not None else (bundled_cv_dir() if bundled else None)
    if src is not None:
        pool = {**cal.cv_frames(src), **pool}
    if not pool:
        return {}
    dsa = cal.dsa_residuals(src) if src is not None else None
    return guard(cal.report, pool, [s for s in frames if s in pool], dsa)


@serving_app.command("calibrate")
def calibrate_cmd(
    cv_dir: Annotated[Path | None, typer.Option(
        "--cv-dir", help="Held-out predictions (heldout_kfold/hardware/time/dsa.csv from "
        "`serving validate --out-dir`); default: the shipped toolkit/serving/fitted/cv.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Calibration file to write (default: the shipped "
        "toolkit/serving/fitted/calibration.json).")] = None,
) -> None:
    """Calibrate the bands: split-conformal quantiles of cross-validated log residuals per
    column, basis and regime (toolkit.serving.calibration), written with their provenance."""
    from toolkit.serving import calibration as cal
    from toolkit.serving.params import bundled_cv_dir

    src = cv_dir or bundled_cv_dir()
    frames = cal.cv_frames(src)
    if not frames:
        fail(f"--cv-dir {src}: no heldout_kfold/hardware/time.csv (write them with "
             "`toolkit serving validate --scheme kfold --out-dir DIR`)")
    table = guard(cal.build, src)
    target = out or cal.bundled_path()
    check_output_file(target, "--out", (".json",))
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    tmp.replace(target)
    cal.bundled_calibration.cache_clear()
    typer.echo(f"wrote {target} (from {', '.join(table['provenance']['files'])})", err=True)
    for line in cal.centre_summary(table):
        typer.echo(line, err=True)


@serving_app.command("validate")
def validate_cmd(
    points: PointsOpt = None,
    scheme: Annotated[str, typer.Option(
        "--scheme", help="hardware, shape, time (fit on older engines, predict newer, and the "
        "reverse), kfold, dsa (GLM-5 decode on H200, never fitted), or both (= hardware, "
        "shape, time and dsa).")] = "both",
    max_nfev: Annotated[int, typer.Option("--max-nfev", min=1,
                                          help="Cap on model evaluations per fold.")] = 100,
    out_dir: Annotated[Path | None, typer.Option(
        "--out-dir", help="Also write held-out predictions and error tables (CSV) here.")] = None,
    from_cv: Annotated[Path | None, typer.Option(
        "--from-cv", help="Fit nothing: score the held-out predictions already in this "
        "directory (heldout_<scheme>.csv, e.g. the shipped toolkit/serving/fitted/cv): errors, "
        "band coverage and the p90 TTFT checks in seconds.")] = None,
    fmt: FormatOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json (no "
                                          "progress).")] = False,
    output: OutputOpt = None,
    store: StoreOpt = None,
    measured_points: MeasuredPointsOpt = None,
    hardware: HardwareOpt = None,
    framework: FrameworkOpt = None,
    model: ModelOpt = None,
    precision: PrecisionOpt = None,
    gpus: GpusOpt = None,
    tp: TpOpt = None,
    ep: EpOpt = None,
    dp_attention: DpaOpt = None,
    spec_method: SpecOpt = None,
) -> None:
    """Leave-one-hardware-out and leave-one-shape-out cross-validation: median / p90 |error|
    of tput_per_gpu, TPOT and TTFT and Spearman rho per hardware, on held-out rows only; the
    calibrated bands' coverage per column and (vendor, engine) group, and the p90 TTFT checks
    (each fold's bands calibrated without it)."""
    check_points_name(store, measured_points)
    import polars as pl

    from toolkit.serving.calibration import CONFIDENCE
    from toolkit.serving.crossval import cross_validate, error_table

    out = Output.from_options(fmt, as_json, output)
    as_json = out.quiet
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        fail(f"--out-dir {out_dir}: exists and is not a directory")
    if out_dir is not None:
        from toolkit.store.guard import check_write_path

        guard(check_write_path, out_dir, "--out-dir", store=store)
    df, _ = _measured(points, store, measured_points, hardware=hardware, framework=framework,
                         model=model, precision=precision, gpus=gpus, tp=tp, ep=ep,
                         dp_attention=dp_attention, spec_method=spec_method)
    schemes = ("hardware", "shape", "time", "dsa") if scheme == "both" else (scheme,)
    result = {}
    frames = {}
    t0 = time.perf_counter()
    fits = sum(_fold_count(df, s) for s in schemes if s != "dsa")
    if not as_json and from_cv is None and fits:
        print(f"validate: {fits} fits of {df.height} rows; expect ~{fits * 35 // 60 + 1} min on "
              "2 quiet cores (progress per fold below)", file=sys.stderr, flush=True)
    for s in schemes:
        if from_cv is not None:
            path = from_cv / f"heldout_{s}.csv"
            if not path.exists():
                fail(f"--from-cv {from_cv}: no {path.name} (write it with --out-dir)")
            frames[s] = guard(pl.read_csv, path, infer_schema_length=None)
            result[s] = error_table(frames[s], by="source" if s == "dsa" and "source" in
                                    frames[s].columns else "hardware")
            continue
        if s == "dsa":  # out-of-sample model and engine: no fit needed
            from toolkit.serving.crossval import dsa_decode_check

            pred = guard(dsa_decode_check)
            frames[s] = pred
            result[s] = error_table(pred, by="source")
            if out_dir:
                guard(out_dir.mkdir, parents=True, exist_ok=True)
                pred.write_csv(out_dir / f"heldout_{s}.csv")
                result[s].write_csv(out_dir / f"errors_{s}.csv")
            continue
        def progress(i, n, fold, s=s):
            if not as_json:
                print(f"  {s}: fold {i}/{n} ({fold}) done, {time.perf_counter() - t0:.0f} s",
                      file=sys.stderr, flush=True)

        pred = guard(cross_validate, df, s, max_nfev=max_nfev, progress=progress)
        frames[s] = pred
        table = error_table(pred)
        result[s] = table
        if out_dir:
            guard(out_dir.mkdir, parents=True, exist_ok=True)
            pred.write_csv(out_dir / f"heldout_{s}.csv")
            table.write_csv(out_dir / f"errors_{s}.csv")
    cov = _coverage(frames, from_cv, points is None and store is None)
    loso = None
    if "dsa" in frames and "source" in frames["dsa"].columns:
        from toolkit.serving.calibration import dsa_loso

        loso = guard(dsa_loso, frames["dsa"])
    p99 = None
    if "dsa" in frames:
        from toolkit.serving.calibration import dsa_p99_check

        p99 = guard(dsa_p99_check, frames["dsa"])
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps({s: t.to_dicts() for s, t in result.items()}
                              | {"coverage": {s: {"table": c["coverage"].to_dicts(),
                                                  "p90_ttft": c["p90_ttft"],
                                                  "ttft_bound": c["ttft_bound"]}
                                              for s, c in cov.items()}}
                              | ({"dsa_leave_one_source_out": loso.to_dicts()}
                                 if loso is not None else {})
                              | ({"dsa_p99_ttft": p99} if p99 else {})))
        return
    if out.fmt != "table" or out.path is not None:
        out.emit(pl.concat([t.with_columns(pl.lit(s).alias("scheme")).select("scheme", *t.columns)
                            for s, t in result.items()], how="diagonal"))
        return
    for s, t in result.items():
        title = {"time": "fit on older rows, predict newer (and the reverse)",
                 "kfold": "5-fold", "dsa": "sparse-attention (DSA) models, every measured point by "
                 "source (GLM-5 and GLM-5.2; InferenceX and public engine docs): never fitted"
                 }.get(s, f"leave-one-{s}-out")
        typer.echo(render_table(t, title=f"{title} (held-out rows only; errors are "
                                "|pred/measured - 1|)"))
        if s == "dsa" and loso is not None:
            typer.echo(render_table(loso, title="leave one source out (each source's "
                                    "bands from the others' residuals):"))
        if s == "dsa" and p99 and p99.get("rows"):
            typer.echo(f"p99 TTFT ({', '.join(p99['sources'])}: the runs record p99, not p90; "
                       "the dense p90 centre and band applied, no p99 in any fit): "
                       f"{p99['rows']} rows, median |error| {p99['median_abs_err']:.1%}, median "
                       f"predicted/measured {p99['median_pred_over_measured']:.2f}, band "
                       f"coverage {p99['coverage']:.1%}")
        if s in cov:
            c = cov[s]
            keep = ["group", "rows", *(k for k in c["coverage"].columns
                                       if k.endswith("_coverage"))]
            typer.echo(render_table(c["coverage"].select(keep), title=(
                f"band coverage ({int(100 * CONFIDENCE)}% central bands, each fold "
                "calibrated on rows outside it):")))
            p = c["p90_ttft"]
            if p.get("rows"):
                typer.echo(f"p90 TTFT: {p['rows']} rows, median |error| "
                           f"{p['median_abs_err']:.1%}, median predicted/measured "
                           f"{p['median_pred_over_measured']:.2f}, band coverage "
                           f"{p['coverage']:.1%}")
            for b in c["ttft_bound"]:
                if b["said_to_meet"]:
                    typer.echo(f"  --ttft-confidence {b['confidence']}: p90 TTFT <= "
                               f"{b['bound_s']:g} s said of {b['said_to_meet']} rows, "
                               f"{b['measured_over']} measured over "
                               f"({b['share_over']:.0%})")
