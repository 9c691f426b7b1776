"""Helpers shared by every CLI command module: error handling and common options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

StoreOpt = Annotated[Path, typer.Option("--store", help="Store directory (created if missing).")]


def fail(msg: str, code: int = 2) -> None:
    """Print ``error: msg`` on stderr and exit (2: bad input or usage; 1: query failed)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def guard(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Turn the errors a user can fix into one line on stderr, not a traceback."""
    try:
        return fn(*args, **kwargs)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))


def print_record(row: dict[str, Any], as_json: bool) -> None:
    """One run summary: a JSON object, or aligned ``key  value`` lines."""
    if as_json:
        typer.echo(json.dumps(row, sort_keys=False))
        return
    width = max(len(k) for k in row)
    for k, v in row.items():
        if k == "config_json":
            continue
        shown = f"{v:.6f}" if isinstance(v, float) else str(v)
        typer.echo(f"{k:<{width}}  {shown}")
