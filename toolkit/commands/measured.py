"""The flags that say where measured points are and what a bench result cannot say about its
server; shared by ``serving fit`` / ``validate``, ``cost-at-interactivity`` and ``cost
compare`` so each spells them the same way (``cost compare``, whose ``--hardware``,
``--model`` and ``--precision`` ask the question, prefixes them: ``--measured-tp``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolkit.commands.common import check_key, fail

PANEL = "Bench results (sglang.bench_serving JSONL, vllm bench serve JSON)"

HELP = {
    "hardware": "Accelerator that served the benchmark (bench results never name it).",
    "framework": "Engine (InferenceX's framework), for rows without one (bench results "
                 "name theirs: sglang, vllm).",
    "model": "Model served (name or alias); replaces a model_id that names no registered "
             "model.",
    "precision": "Weights' precision: fp4, fp8 or bf16.",
    "gpus": "GPUs that served the benchmark: per-GPU throughput = throughput / GPUS.",
    "tp": "Tensor-parallel size of the one aggregated instance (= --gpus).",
    "ep": "Expert-parallel size (default 1, the engines' default).",
    "dp_attention": "DP attention was on (default off, the engines' default).",
    "spec_method": "Speculative decoding: none (default) or mtp.",
}


def _opt(flag: str, key: str, *aliases: str, **kw):
    return typer.Option(flag, *aliases, help=HELP[key], rich_help_panel=PANEL, **kw)


StoreOpt = Annotated[Path | None, typer.Option(
    "--store", help="Store holding the measured_points table named by --measured-points.")]
MeasuredPointsOpt = Annotated[str | None, typer.Option(
    "--measured-points", help="A measured_points table (toolkit ingest points) in --store, "
    "instead of a file.")]

HardwareOpt = Annotated[str | None, _opt("--hardware", "hardware")]
FrameworkOpt = Annotated[str | None, _opt("--framework", "framework", "--engine")]
ModelOpt = Annotated[str | None, _opt("--model", "model")]
PrecisionOpt = Annotated[str | None, _opt("--precision", "precision")]
GpusOpt = Annotated[int | None, _opt("--gpus", "gpus", min=1)]
TpOpt = Annotated[int | None, _opt("--tp", "tp", min=1)]
EpOpt = Annotated[int | None, _opt("--ep", "ep", min=1)]
DpaOpt = Annotated[bool | None, _opt("--dp-attention/--no-dp-attention", "dp_attention")]
SpecOpt = Annotated[str | None, _opt("--spec-method", "spec_method")]

MHardwareOpt = Annotated[str | None, _opt("--measured-hardware", "hardware")]
MFrameworkOpt = Annotated[str | None, _opt("--measured-framework", "framework",
                                           "--measured-engine")]
MModelOpt = Annotated[str | None, _opt("--measured-model", "model")]
MPrecisionOpt = Annotated[str | None, _opt("--measured-precision", "precision")]
MGpusOpt = Annotated[int | None, _opt("--measured-gpus", "gpus", min=1)]
MTpOpt = Annotated[int | None, _opt("--measured-tp", "tp", min=1)]
MEpOpt = Annotated[int | None, _opt("--measured-ep", "ep", min=1)]
MDpaOpt = Annotated[bool | None, _opt("--measured-dp-attention/--measured-no-dp-attention",
                                      "dp_attention")]
MSpecOpt = Annotated[str | None, _opt("--measured-spec-method", "spec_method")]


def measurement_source(path: Path | None, store: Path | None, name: str | None, *,
                       file_flag: str, prefix: str = "--", **layout):
    """The :class:`~toolkit.serving.measurements.MeasurementSource` the flags name, or None
    when none was given; a mixed or half-given pair stops with one line."""
    from toolkit.ingest.bench_layout import BenchLayout
    from toolkit.serving.measurements import MeasurementSource

    if path is not None and (store is not None or name is not None):
        fail(f"give {file_flag} FILE or --store S --measured-points NAME, not both")
    if (store is None) != (name is None):
        fail("--store and --measured-points go together: --store S --measured-points NAME")
    try:
        bench = BenchLayout(**layout)
    except ValueError as e:
        fail(str(e).replace("--", prefix, 1))
    if path is None and store is None:
        if bench.given():
            fail(f"{', '.join(prefix + k.replace('_', '-') for k in bench.given())}: these "
                 f"describe a bench result; give it with {file_flag} FILE or --store S "
                 "--measured-points NAME")
        return None
    if store is not None and not (store.is_dir() and any(store.iterdir())):
        fail(f"no store at {store}; create one with toolkit ingest points")
    return MeasurementSource(path=str(path) if path is not None else None,
                             store=str(store) if store is not None else None, name=name,
                             layout=bench, flag_prefix=prefix)


def check_points_name(store: Path | None, name: str | None) -> None:
    """``--store S --measured-points NAME``: a name the store does not hold is one line
    naming the table, before the serving model's libraries (Polars, SciPy) load; anything
    else about the pair is left to :func:`measurement_source`."""
    if store is not None and name is not None and store.is_dir() and any(store.iterdir()):
        check_key(store, "measured_points", name, "measured points")


def show_notes(notes: list[str]) -> None:
    for n in notes:
        typer.echo(f"note: {n}", err=True)
