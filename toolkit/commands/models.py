"""CLI: ``toolkit models list|show``, the model specs replays and prices are computed for."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit.commands.common import choices, guard
from toolkit.commands.output import FormatOpt, JsonOpt, Output, OutputOpt

models_app = typer.Typer(help="Model specs (geometry for row bytes, IndexShare, weights) "
                         "with the source of every value.", no_args_is_help=True)


@models_app.command("list")
def models_list_cmd(fmt: FormatOpt = None, as_json: JsonOpt = False,
                    output: OutputOpt = None) -> None:
    """List registered models: layers, top-k, IndexShare period, KV bytes per token."""
    from toolkit.models import get_model, model_names
    from toolkit.serving.tier_service import kv_bytes_per_token

    out = Output.from_options(fmt, as_json, output)
    rows = []
    for name in model_names():
        m = get_model(name)
        rows.append({"name": m.name, "label": m.label, "aliases": ", ".join(m.aliases),
                     "layers": m.num_layers, "index_topk": m.index_topk,
                     "index_topk_freq": m.index_topk_freq,
                     "mla_row_bytes_fp8": m.mla_row_bytes_fp8,
                     "kv_bytes_per_token_fp8": kv_bytes_per_token(m),
                     "total_params_b": round(m.total_params / 1e9, 1)})
    out.emit(rows)


@models_app.command("show")
def models_show_cmd(
    name: Annotated[str, typer.Argument(help=f"Model name: {choices('model')}.")],
    fmt: FormatOpt = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Print every value of one model spec with its kind and source."""
    from toolkit.models import get_model

    out = Output.from_options(fmt, as_json, output)
    m = guard(get_model, name)
    rows = [{"field": field, "value": s.value, "kind": s.kind, "source": s.source,
             "note": s.note} for field, s in m.provenance.items()]
    if out.fmt == "table" and out.path is None:
        typer.echo(f"{m.label} ({m.name}; aliases: {', '.join(m.aliases) or 'none'})")
        width = max(len(r["field"]) for r in rows)
        for r in rows:
            v = r["value"]
            shown = "n/a" if v is None else v if isinstance(v, str) else f"{v:.6g}"
            typer.echo(f"{r['field']:<{width}}  {shown:<14} {r['kind']:<8} {r['source']}")
            if r["note"]:
                typer.echo(f"{'':<{width}}  {'':<14} {'note':<8} {r['note']}")
        return
    out.emit(rows)
