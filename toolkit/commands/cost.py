"""CLI: ``toolkit hardware list|show`` and ``toolkit cost``; thin layers over the library.

Mount in ``toolkit/cli.py``::

    app.add_typer(hardware_app, name="hardware")
    app.command("cost")(cost_cmd)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands import measured as m
from toolkit.commands.common import (
    check_key,
    check_names,
    choices,
    cli_store,
    fail,
    field_default,
    guard,
    ttft_bound,
)
from toolkit.commands.output import FormatOpt, Output, OutputOpt, render_table
from toolkit.cost.config import CompareConfig
from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

hardware_app = typer.Typer(help="Accelerator specs with provenance.", no_args_is_help=True)


@hardware_app.command("list")
def hardware_list_cmd(fmt: FormatOpt = None,
                      as_json: Annotated[bool, typer.Option(
                          "--json", help="Same as --format json.")] = False,
                      output: OutputOpt = None) -> None:
    """List registered accelerators with HBM, host link and hyperscaler price."""
    from toolkit.hardware import get_hardware, hardware_names

    out = Output.from_options(fmt, as_json, output)
    rows = []
    for name in hardware_names():
        hw = get_hardware(name)
        rows.append({"name": name, "label": hw.label, "hbm_bytes": hw.hbm_bytes,
                     "hbm_usable_bytes": hw.hbm_usable_bytes,
                     "hbm_bandwidth_bytes_per_s": hw.hbm_bandwidth_bytes_per_s,
                     "host_link": hw.host_link,
                     "price_hyperscaler_usd_per_gpu_hour": hw.price_hyperscaler_usd_per_gpu_hour,
                     "price_vintage": hw.price_vintage()})
    if out.fmt != "table" or out.path is not None:
        out.emit(rows)
        return
    # HBM as the vendors size it (GiB; "192 GB" on a GB200 is 192 GiB) with the usable GB
    out.emit([{"name": r["name"], "label": r["label"], "hbm_gib": r["hbm_bytes"] / 2**30,
               "hbm_usable_gb": r["hbm_usable_bytes"] / 1e9,
               "hbm_bandwidth_bytes_per_s": r["hbm_bandwidth_bytes_per_s"],
               "price_hyperscaler_usd_per_gpu_hour": r["price_hyperscaler_usd_per_gpu_hour"],
               "price_vintage": r["price_vintage"], "host_link": r["host_link"]}
              for r in rows])


@hardware_app.command("show")
def hardware_show_cmd(
    name: Annotated[str, typer.Argument(help=f"Accelerator: {choices('hardware')}.")],
    fmt: FormatOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    output: OutputOpt = None,
) -> None:
    """Print every value of one spec with its kind and source."""
    from toolkit.hardware import get_hardware

    out = Output.from_options(fmt, as_json, output)
    try:
        hw = get_hardware(name)
    except RegistryError as e:
        fail(str(e))
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps({
            "name": hw.name,
            "label": hw.label,
            "vendor": hw.vendor,
            "fields": {k: s.__dict__ for k, s in hw.provenance.items()},
        }))
        return
    if out.fmt != "table" or out.path is not None:
        out.emit([{"field": k, **s.__dict__} for k, s in hw.provenance.items()])
        return
    typer.echo(render_table(_spec_rows(hw), title=f"{hw.label} ({hw.name}, {hw.vendor})",
                            wrap_text=True))


def _spec_rows(hw) -> object:
    """One row per spec field (a note on its own row): the value with its unit, HBM in GiB
    with the decimal GB beside it."""
    import polars as pl

    from toolkit.commands.output import value_text

    rows = []
    for field, s in hw.provenance.items():
        if s.value is None:
            value = "n/a"
        elif field.startswith("hbm") and field.endswith("_bytes"):
            value = f"{s.value / 2**30:,.1f} GiB ({s.value / 1e9:,.1f} GB)"
        else:
            value = value_text(field, s.value)
        extra = f" [{s.vintage}]" if s.vintage else ""
        rows.append({"field": field, "value": value, "kind": s.kind, "source": s.source + extra})
        if s.note:
            rows.append({"field": "", "value": "", "kind": "note", "source": s.note})
    return pl.DataFrame(rows, schema={k: pl.String for k in ("field", "value", "kind",
                                                             "source")})


_HARDWARE = typer.Option("--hardware", help=f"Accelerator: {choices('hardware')}.")
_TPUT = typer.Option("--tokens-per-s-per-gpu", min=0.0, max=1e7,
                     help="Throughput per GPU (at most 1e7, beyond any measurement).")
PriceTierOpt = Annotated[str, typer.Option("--price-tier",
                                           help="hyperscaler, neocloud or rental.")]
SurveyOpt = Annotated[str | None, typer.Option("--survey",
                                               help="Earlier price survey, e.g. 2025-08.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Same as --format json.")]


def cost_cmd(
    hardware: Annotated[str, _HARDWARE],
    tokens_per_s_per_gpu: Annotated[float, _TPUT],
    price_tier: PriceTierOpt = "hyperscaler",
    survey: SurveyOpt = None,
    as_json: JsonOpt = False,
    fmt: str | None = None,
    output: Path | None = None,
) -> None:
    """$ per million tokens at a throughput (InferenceX: $/GPU-hr / (tok/s/GPU x 3600 / 1e6))."""
    check_names(hardware=hardware)
    from toolkit.cost.price import quote

    out = Output.from_options(fmt, as_json, output)
    from toolkit.hardware import get_hardware

    try:
        q = quote(get_hardware(hardware), tokens_per_s_per_gpu, price_tier, survey=survey)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    row = {
        "hardware": q.hardware,
        "price_tier": q.price_tier,
        "survey": q.survey,
        "usd_per_gpu_hour": q.usd_per_gpu_hour,
        "usd_per_million_tokens": q.usd_per_million_tokens,
    }
    out.emit(row)


def cost_at_interactivity_cmd(
    interactivity: Annotated[
        float, typer.Option("--interactivity", min=0.0, help="Target tok/s/user.")
    ],
    measurements: Annotated[
        Path | None, typer.Option("--measurements", help="InferenceX CSV/JSON/Parquet as "
                                  "exported (hardware, framework, conc, tput_per_gpu, "
                                  "median_intvty, p90_ttft), the renamed layout, "
                                  "sglang.bench_serving JSONL or vllm bench serve JSON (with "
                                  "--gpus and --hardware).")
    ] = None,
    price_tier: Annotated[
        str, typer.Option("--price-tier", help="hyperscaler, neocloud or rental.")
    ] = "hyperscaler",
    max_p90_ttft_s: Annotated[
        float | None, typer.Option("--max-p90-ttft-s", help="Drop slower points first.")
    ] = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
    store: m.StoreOpt = None,
    measured_points: m.MeasuredPointsOpt = None,
    hardware: m.HardwareOpt = None,
    framework: m.FrameworkOpt = None,
    model: m.ModelOpt = None,
    precision: m.PrecisionOpt = None,
    gpus: m.GpusOpt = None,
) -> None:
    """$/M tokens per (hardware, engine, model, precision, ISL, OSL) at a target
    interactivity: Steffen spline on each series' throughput-vs-interactivity Pareto front,
    as InferenceX does."""
    m.check_points_name(store, measured_points)
    from toolkit.cost.interpolate import cost_at_interactivity, read_measurements

    out = Output.from_options(fmt, as_json, output)
    src = m.measurement_source(measurements, store, measured_points,
                               file_flag="--measurements", hardware=hardware,
                               framework=framework, model=model, precision=precision,
                               gpus=gpus)
    if src is None:
        fail("give --measurements FILE, or --store S --measured-points NAME")
    notes: list[str] = []
    try:
        df = cost_at_interactivity(read_measurements(src, notes=notes), interactivity,
                                   price_tier, max_p90_ttft_s=max_p90_ttft_s)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    m.show_notes(notes)
    out.emit(df)


cost_app = typer.Typer(
    help="$ per million tokens: at a given throughput (no subcommand), or `compare` "
    "accelerators from the serving model.",
    invoke_without_command=True,
)


@cost_app.callback()
def cost_group(
    ctx: typer.Context,
    hardware: Annotated[str | None, _HARDWARE] = None,
    tokens_per_s_per_gpu: Annotated[float | None, _TPUT] = None,
    price_tier: PriceTierOpt = "hyperscaler",
    survey: SurveyOpt = None,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """$ per million tokens at a throughput (InferenceX: $/GPU-hr / (tok/s/GPU x 3600 / 1e6))."""
    if ctx.invoked_subcommand:
        return
    if hardware is None or tokens_per_s_per_gpu is None:
        fail("give --hardware and --tokens-per-s-per-gpu, or a subcommand (toolkit cost compare)")
    cost_cmd(hardware, tokens_per_s_per_gpu, price_tier, survey, as_json, fmt, output)


def _csv_list(text: str, what: str, cast=str) -> tuple:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        fail(f"{what}: give at least one value")
    try:
        return tuple(cast(t) for t in items)
    except ValueError:
        fail(f"{what}: {text!r} is not a comma-separated list of numbers")


_ttft_bound = ttft_bound  # the one parser, shared with `plan`


_DEFAULT_TTFT = field_default(CompareConfig, "max_p90_ttft_s")

TABLE_COLUMNS = ("hardware", "engine", "interactivity", "source", "basis", "reachable", "edge",
                 "tput_per_gpu", "tput_per_gpu_low", "tput_per_gpu_high", "p90_ttft_s",
                 "p90_ttft_s_low", "p90_ttft_s_high",
                 "gpus", "usd_per_mtok_total", "usd_per_mtok_total_low",
                 "usd_per_mtok_total_high", "cost_ratio_total_vs_first", "layout")


SELECTION_COLUMNS = ("hardware", "engine", "interactivity", "usd_per_mtok_total",
                     "usd_per_mtok_total_hisparse", "usd_per_mtok_total_misses_low",
                     "usd_per_mtok_total_misses_high", "capacity_gain_usd_per_mtok",
                     "fetch_cost_usd_per_mtok", "tput_per_gpu", "tput_per_gpu_hisparse",
                     "tput_ratio_hisparse", "layout_hisparse")


def _compare_selections(cfg, params: Path | None, store: Path, trace: str,
                        buffer_tokens: int | None, overlap: bool, out: Output) -> None:
    """``cost compare --selections``: the same question with and without HiSparse at the
    trace's misses (toolkit.cost.hisparse)."""
    import polars as pl

    from toolkit.cost.hisparse import compare_with_hisparse, meta, trace_misses
    from toolkit.models import get_model
    from toolkit.serving.params import ServingParams, bundled_params

    with cli_store(store) as s:
        misses = guard(trace_misses, s, trace, guard(get_model, cfg.model), buffer_tokens,
                       cfg.isl + cfg.osl / 2)
    try:
        p = ServingParams.load(params) if params else bundled_params()
        df = compare_with_hisparse(cfg, p, misses, overlap=overlap)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    info = {"model": cfg.model, "isl": cfg.isl, "osl": cfg.osl, "precision": cfg.precision,
            "price_tier": cfg.price_tier, "max_p90_ttft_s": cfg.max_p90_ttft_s,
            "params_kind": p.kind, **meta(misses, overlap)}
    from toolkit.serving.crossval import dsa_caveat

    info["dsa_caveat"] = dsa_caveat()
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps({**info, "rows": df.to_dicts()}, default=str))
        return
    if out.fmt != "table" or out.path is not None:
        out.emit(df)
        return
    m_ = misses
    lines = {
        "model": f"{cfg.model} (k = {m_.model_k}), isl {cfg.isl}, osl {cfg.osl}, "
                 f"{cfg.precision}, {cfg.price_tier} prices, serving model only",
        "selections": f"{m_.trace}: {m_.rows:,} rows, k = {m_.trace_k}, replayed (HiSparse, "
                      f"LRU) at buffer {m_.trace_buffer_tokens} = {m_.buffer_tokens} at the "
                      f"model's k; miss ratio {m_.miss_ratio:.4f}",
        "misses_per_layer": f"{m_.miss_rows_per_layer:,.1f} host rows per request, layer and "
                            f"step (band {m_.miss_rows_per_layer_low:,.1f}-"
                            f"{m_.miss_rows_per_layer_high:,.1f}); {m_.scaling}",
        "fetches": "overlapped with the layer's work" if overlap else
                   "each decode step waits for them (no overlap)",
        "note": info["hisparse_note"], "dsa_caveat": info["dsa_caveat"]}
    for k, v in lines.items():
        typer.echo(f"{k:<18}  {v}")
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=260, float_precision=3,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        typer.echo(str(df.select([c for c in SELECTION_COLUMNS if c in df.columns])))


@cost_app.command("compare")
def cost_compare_cmd(
    model: Annotated[str, typer.Option("--model", help=f"Model spec: {choices('model')}.")],
    hardware: Annotated[str, typer.Option("--hardware", help="Comma-separated accelerators "
                                          f"({choices('hardware')}); ratios are to the first.")]
    = "gb200,gb300,mi355x",
    interactivity: Annotated[str, typer.Option("--interactivity", help="Comma-separated "
                                               "targets, tok/s/user.")] = (
        ",".join(f"{x:g}" for x in field_default(CompareConfig, "interactivity"))),
    max_p90_ttft_s: Annotated[str, typer.Option(
        "--max-p90-ttft-s", help="Keep only points (measured or modelled) whose p90 TTFT meets "
        "this many seconds; 'none' keeps every point.")] = (
        "none" if _DEFAULT_TTFT is None else f"{_DEFAULT_TTFT:g}"),
    ttft_confidence: Annotated[float, typer.Option(
        "--ttft-confidence", help="Confidence at which a modelled point meets the p90 TTFT "
        "bound: 0.5, 0.8 or 0.9 (the upper end of the predicted p90 TTFT's central band at "
        "that confidence; 0.8: the 80% band's upper end).")] = field_default(
        CompareConfig, "ttft_confidence"),
    price_tier: Annotated[str, typer.Option("--price-tier", help="hyperscaler, neocloud or "
                                            "rental.")] = field_default(CompareConfig,
                                                                        "price_tier"),
    precision: Annotated[str, typer.Option(
        "--precision", help="fp4, fp8 or bf16 weights.")] = field_default(
        CompareConfig, "precision"),
    isl: Annotated[int, typer.Option("--isl", min=1, help="Input tokens per request.")] = (
        field_default(CompareConfig, "isl")),
    osl: Annotated[int, typer.Option("--osl", min=2, help="Output tokens per request.")] = (
        field_default(CompareConfig, "osl")),
    cached_prefix_fraction: Annotated[float, typer.Option(
        "--cached-prefix-fraction", min=0.0, max=1.0,
        help="Share of prompt tokens served from a prefix cache (agentic traffic: ~0.9).")] = (
        field_default(CompareConfig, "cached_prefix_fraction")),
    engine: Annotated[list[str] | None, typer.Option(
        "--engine", help="HW=ENGINE[@VERSION], repeatable (defaults: gb200=dynamo-sglang, "
        "gb300=dynamo-trt, mi355x=atom, else sglang); VERSION is a bundled image tag (e.g. "
        "0.5.8.post1) or a date YYYY-MM-DD.")] = None,
    all_engines: Annotated[bool, typer.Option(
        "--all-engines", help="Compare every engine that runs on each accelerator (with "
        "measured points, fitted terms or shared terms) instead of one per accelerator.")] = (
        field_default(CompareConfig, "all_engines")),
    mtp: Annotated[str, typer.Option("--mtp", help="on: fronts may use MTP layouts; off: no "
                                     "speculative decoding.")] = field_default(
        CompareConfig, "mtp"),
    mtp_accept: Annotated[float | None, typer.Option(
        "--mtp-accept", min=1.0, help="Tokens accepted per MTP step (default 1.85 with one "
        "draft: DeepSeek-V3 report, arXiv:2412.19437 section 5.4.3).")] = None,
    mtp_draft_tokens: Annotated[int | None, typer.Option(
        "--mtp-draft-tokens", min=1, help="Draft tokens verified per MTP step (default 1).")] = (
        None),
    kv_dtype: Annotated[str, typer.Option("--kv-dtype", help="KV-cache dtype: fp8 or bf16.")] = (
        field_default(CompareConfig, "kv_dtype")),
    measurements: Annotated[Path | None, typer.Option(
        "--measurements", help="Measured points used before the model where they cover the "
        "question: InferenceX CSV/Parquet/JSON as exported, sglang.bench_serving JSONL or "
        "vllm bench serve JSON (bench results need the --measured-* flags).")] = None,
    store: m.StoreOpt = None,
    measured_points: m.MeasuredPointsOpt = None,
    measured_hardware: m.MHardwareOpt = None,
    measured_framework: m.MFrameworkOpt = None,
    measured_model: m.MModelOpt = None,
    measured_precision: m.MPrecisionOpt = None,
    measured_gpus: m.MGpusOpt = None,
    measured_tp: m.MTpOpt = None,
    measured_ep: m.MEpOpt = None,
    measured_dp_attention: m.MDpaOpt = None,
    measured_spec_method: m.MSpecOpt = None,
    measured: Annotated[bool, typer.Option(
        "--measured/--model-only", help="Answer from the bundled InferenceX measurements where "
        "they cover the question (default), or from the model only.")] = True,
    params: Annotated[Path | None, typer.Option(
        "--params", help="Fitted parameters (toolkit serving fit); default: the bundled "
        "fit on InferenceX DeepSeek-R1 points.")] = None,
    selections: Annotated[str | None, typer.Option(
        "--selections", help="Selection trace in --store: price the DSA model with HiSparse "
        "at the trace's replayed misses, beside the answer without it (capacity gain and "
        "fetch cost in $/M; model-only).")] = None,
    buffer_tokens: Annotated[int | None, typer.Option(
        "--buffer-tokens", min=1, help="With --selections: HiSparse device buffer per request "
        "per layer at the model's k (default 2 x k).")] = None,
    overlap: Annotated[bool, typer.Option(
        "--overlap", help="With --selections: host fetches overlap the layer's work "
        "(plan-then-IO); default: each step waits for them.")] = False,
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """$ per million tokens per accelerator at target interactivities: from measured points
    where they cover the question, else from the serving model's Pareto front of layouts x
    concurrency, with low/high bands, a p90 TTFT bound (10 s by default) and `reachable` /
    `edge` flags."""
    check_names(hardware=hardware, model=model)  # before the serving model's libraries load
    if selections is not None and store is not None:
        check_key(store, "selections", selections, "selection trace")
    m.check_points_name(store, measured_points)
    from toolkit.cost.compare import compare, engines_for, measurement_scope
    from toolkit.serving.params import ServingParams, bundled_params

    out = Output.from_options(fmt, as_json, output)
    engines, versions = {}, {}
    asked = {h.lower() for h in _csv_list(hardware, "--hardware")}
    for item in engine or []:
        hw, sep, eng = item.partition("=")
        if not sep or not eng.strip() or not hw.strip():
            fail(f"--engine {item!r}: expected HW=ENGINE[@VERSION], e.g. gb300=dynamo-trt")
        if hw.strip().lower() not in asked:  # it was silently ignored
            fail(f"--engine {item!r}: {hw.strip()} is not among --hardware {hardware}")
        if hw.strip().lower() in engines:
            fail(f"--engine {item!r}: {hw.strip()} is given an engine twice")
        eng, _, version = eng.partition("@")
        from toolkit.serving.points import FRAMEWORK_ALIASES

        eng = eng.strip().lower()
        engines[hw.strip().lower()] = FRAMEWORK_ALIASES.get(eng, eng)
        if version.strip():
            versions[hw.strip().lower()] = version.strip()
    if mtp not in ("on", "off"):
        fail(f"--mtp {mtp!r}: give on or off")
    ttft = _ttft_bound(max_p90_ttft_s)
    src = m.measurement_source(  # --store alone holds the --selections trace
        measurements, None if selections and measured_points is None else store,
        measured_points, file_flag="--measurements",
        prefix="--measured-", hardware=measured_hardware, framework=measured_framework,
        model=measured_model, precision=measured_precision, gpus=measured_gpus,
        tp=measured_tp, ep=measured_ep, dp_attention=measured_dp_attention,
        spec_method=measured_spec_method)
    try:
        cfg = CompareConfig(
            model=model, hardware=tuple(h.lower() for h in _csv_list(hardware, "--hardware")),
            interactivity=_csv_list(interactivity, "--interactivity", float),
            max_p90_ttft_s=ttft, price_tier=price_tier, precision=precision,
            isl=isl, osl=osl, cached_prefix_fraction=cached_prefix_fraction, engines=engines,
            mtp=mtp, mtp_accept=mtp_accept, mtp_draft_tokens=mtp_draft_tokens,
            kv_dtype=kv_dtype, engine_versions=versions, all_engines=all_engines,
            measured=measured, measurements=(
                src.path if src is not None and src.path and not src.layout.given()
                else src), ttft_confidence=ttft_confidence)
        for hw in cfg.hardware:  # an engine that does not run on its hardware: refused
            engines_for(cfg, hw)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    if selections is None and (buffer_tokens is not None or overlap):
        fail("--buffer-tokens and --overlap apply to --selections TRACE")
    if selections is not None:
        if store is None:
            fail("--selections needs --store (the store holding the selection trace)")
        _compare_selections(cfg, params, store, selections, buffer_tokens, overlap, out)
        return
    if src is not None:  # refuse a bad file before the sweep; show what was assumed
        from toolkit.serving.measurements import load_measurements

        notes: list[str] = []
        try:
            load_measurements(src, notes=notes, scope=measurement_scope(cfg))
        except (ToolkitError, RegistryError, ValueError) as e:
            fail(str(e))
        m.show_notes(notes)
    try:
        p = ServingParams.load(params) if params else bundled_params()
        df = compare(cfg, p)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    meta = {"model": model, "isl": isl, "osl": osl, "precision": precision,
            "cached_prefix_fraction": cached_prefix_fraction, "price_tier": price_tier,
            "max_p90_ttft_s": ttft, "ttft_confidence": ttft_confidence, "mtp": mtp,
            "kv_dtype": kv_dtype,
            "params_kind": p.kind, "params_fitted_on": p.fitted_on,
            "note": "source=measured rows come from measured points (SemiAnalysis InferenceX, "
                    "Apache-2.0, or --measurements) that bracket the target within 25% "
                    "interactivity with 3+ points; source=blended rows: the best of the "
                    "measured runs and the model's points, each point corrected once by the "
                    "residuals of its nearest measured runs; source=model rows "
                    "from the serving model fitted on InferenceX DeepSeek-R1 points; every "
                    "_low/_high is an 80% central band calibrated on cross-validated "
                    "residuals; the p90 TTFT bound applies to the upper end of the p90 TTFT "
                    "band at --ttft-confidence; reachable=false: the target lies beyond the "
                    "front (no price)"}
    from toolkit.models import get_model

    if get_model(model).index_topk > 0:
        from toolkit.serving.crossval import dsa_caveat

        meta["dsa_caveat"] = dsa_caveat()
    if out.fmt == "json" and out.path is None:
        typer.echo(json.dumps({**meta, "rows": df.to_dicts()}))
        return
    if out.fmt != "table" or out.path is not None:
        out.emit(df)
        return
    for k, v in meta.items():
        typer.echo(f"{k:<24}  {v}")
    typer.echo(render_table(df.select([c for c in TABLE_COLUMNS if c in df.columns])))
