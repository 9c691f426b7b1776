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
    from toolkit.commands.output import write_file
    from toolkit.serving.predict import predict

    check_output_file(out, "--out", (".csv", ".parquet"))
    df = _points(points)
    res = guard(predict, df, _params(params), breakdown=breakdown)
    write_file(res, out)
    typer.echo(f"wrote {res.height} rows to {out}", err=True)


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
    of tput_per_gpu, TPOT and TTFT and Spearman rho per hardware, on held-out rows only."""
    import polars as pl

    from toolkit.serving.crossval import cross_validate, error_table

    out = Output.from_options(fmt, as_json, output)
    as_json = out.quiet
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        fail(f"--out-dir {out_dir}: exists and is not a directory")
    df, _ = _measured(points, store, measured_points, hardware=hardware, framework=framework,
                         model=model, precision=precision, gpus=gpus, tp=tp, ep=ep,
                         dp_attention=dp_attention, spec_method=spec_method)
    schemes = ("hardware", "shape", "time", "dsa") if scheme == "both" else (scheme,)
    result = {}
    t0 = time.perf_counter()
    for s in schemes:
        if s == "dsa":  # out-of-sample model and engine: no fit needed
            from toolkit.serving.crossval import dsa_decode_check

            pred = guard(dsa_decode_check)
            result[s] = error_table(pred)
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
        table = error_table(pred)
        result[s] = table
        if out_dir:
            guard(out_dir.mkdir, parents=True, exist_ok=True)
            pred.write_csv(out_dir / f"heldout_{s}.csv")
            table.write_csv(out_dir / f"errors_{s}.csv")
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps({s: t.to_dicts() for s, t in result.items()}))
        return
    if out.fmt != "table" or out.path is not None:
        out.emit(pl.concat([t.with_columns(pl.lit(s).alias("scheme")).select("scheme", *t.columns)
                            for s, t in result.items()], how="diagonal"))
        return
    for s, t in result.items():
        title = {"time": "fit on older rows, predict newer (and the reverse)",
                 "kfold": "5-fold", "dsa": "GLM-5 (DSA) decode on 8x H200, vLLM: never fitted"
                 }.get(s, f"leave-one-{s}-out")
        typer.echo(render_table(t, title=f"{title} (held-out rows only; errors are "
                                "|pred/measured - 1|)"))
