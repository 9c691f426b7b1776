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

from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

hardware_app = typer.Typer(help="Accelerator specs with provenance.", no_args_is_help=True)


def fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


@hardware_app.command("list")
def hardware_list_cmd() -> None:
    """List registered accelerators with HBM, host link and hyperscaler price."""
    from toolkit.hardware import get_hardware, hardware_names

    for name in hardware_names():
        hw = get_hardware(name)
        typer.echo(
            f"{name:<8} {hw.label:<14} HBM {hw.hbm_bytes / 1e9:>4.0f} GB  "
            f"{hw.hbm_bandwidth_bytes_per_s / 1e12:.2f} TB/s  {hw.host_link:<22} "
            f"${hw.price_hyperscaler_usd_per_gpu_hour:.2f}/GPU-hr ({hw.price_vintage()})"
        )


@hardware_app.command("show")
def hardware_show_cmd(
    name: Annotated[str, typer.Argument(help="Accelerator name, e.g. gb200.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Print every value of one spec with its kind and source."""
    from toolkit.hardware import get_hardware

    try:
        hw = get_hardware(name)
    except RegistryError as e:
        fail(str(e))
    if as_json:
        out = {
            "name": hw.name,
            "label": hw.label,
            "vendor": hw.vendor,
            "fields": {k: s.__dict__ for k, s in hw.provenance.items()},
        }
        typer.echo(json.dumps(out))
        return
    typer.echo(f"{hw.label} ({hw.name}, {hw.vendor})")
    width = max(len(k) for k in hw.provenance)
    for field, s in hw.provenance.items():
        if s.value is None:
            value = "n/a"
        else:
            value = s.value if isinstance(s.value, str) else f"{s.value:.6g}"
        extra = f" [{s.vintage}]" if s.vintage else ""
        typer.echo(f"{field:<{width}}  {value:<14} {s.kind:<8} {s.source}{extra}")
        if s.note:
            typer.echo(f"{'':<{width}}  {'':<14} {'note':<8} {s.note}")


def cost_cmd(
    hardware: Annotated[str, typer.Option("--hardware", help="Accelerator name, e.g. gb200.")],
    tokens_per_s_per_gpu: Annotated[
        float, typer.Option("--tokens-per-s-per-gpu", min=0.0, help="Throughput per GPU.")
    ],
    price_tier: Annotated[
        str, typer.Option("--price-tier", help="hyperscaler, neocloud or rental.")
    ] = "hyperscaler",
    survey: Annotated[
        str | None, typer.Option("--survey", help="Earlier price survey, e.g. 2025-08.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """$ per million tokens at a throughput (InferenceX: $/GPU-hr / (tok/s/GPU x 3600 / 1e6))."""
    from toolkit.cost.price import quote
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
    if as_json:
        typer.echo(json.dumps(row))
        return
    for k, v in row.items():
        typer.echo(f"{k:<22}  {v:.6f}" if isinstance(v, float) else f"{k:<22}  {v}")


def cost_at_interactivity_cmd(
    measurements: Annotated[
        Path, typer.Option("--measurements", help="CSV/Parquet: hardware, engine, concurrency, "
                           "tput_per_gpu, median_interactivity, p90_ttft_s.")
    ],
    interactivity: Annotated[
        float, typer.Option("--interactivity", min=0.0, help="Target tok/s/user.")
    ],
    price_tier: Annotated[
        str, typer.Option("--price-tier", help="hyperscaler, neocloud or rental.")
    ] = "hyperscaler",
    max_p90_ttft_s: Annotated[
        float | None, typer.Option("--max-p90-ttft-s", help="Drop slower points first.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON rows.")] = False,
) -> None:
    """$/M tokens per (hardware, engine) at a target interactivity: Steffen spline on each
    series' throughput-vs-interactivity Pareto front, as InferenceX does."""
    import polars as pl

    from toolkit.cost.interpolate import cost_at_interactivity, read_measurements

    try:
        df = cost_at_interactivity(read_measurements(measurements), interactivity, price_tier,
                                   max_p90_ttft_s=max_p90_ttft_s)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    if as_json:
        typer.echo(json.dumps(df.to_dicts()))
    else:
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200,
                       tbl_hide_dataframe_shape=True):
            typer.echo(str(df))
