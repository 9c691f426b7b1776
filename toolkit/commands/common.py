"""Helpers shared by every CLI command module: error handling and common options."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

if TYPE_CHECKING:
    from toolkit.store import Store

StoreOpt = Annotated[Path, typer.Option(
    "--store", help="Store directory (ingest, synth and record create it if missing).")]


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
    except OSError as e:  # disk full, permissions: the store is left as it was
        fail(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")


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


@contextmanager
def cli_store(path: Path, *, create: bool = False) -> Iterator[Store]:
    """Open a store for a command: a missing store is an error unless the command creates
    one, and whatever the store worked around (``Store.problems``) is printed as a warning."""
    import shutil

    from toolkit.store import open_store

    existed = path.exists()
    s = guard(open_store, path, create=create)
    shown, ok = 0, False
    try:
        for p in s.problems:
            typer.echo(f"warning: {p}", err=True)
        shown = len(s.problems)
        with s:
            yield s
        ok = True
    finally:
        for p in s.problems[shown:]:
            typer.echo(f"warning: {p}", err=True)
        if not existed and not ok and not any(s.keys(t) for t in s.tables()):
            # a first ingest that failed leaves no empty store behind
            shutil.rmtree(s.root, ignore_errors=True)
