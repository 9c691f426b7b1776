"""Helpers shared by every CLI command module: error handling and common options."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from toolkit.errors import ToolkitError
from toolkit.registry import RegistryError

if TYPE_CHECKING:
    from toolkit.store import Store

#: Largest size in GB a command accepts (1 PB): beyond any machine, and far inside int64
#: once turned into tokens, rows or blocks.
MAX_GB = 1e6

StoreOpt = Annotated[Path, typer.Option(
    "--store", help="Store directory (ingest, synth and record create it if missing; other "
    "commands need an existing one).")]


def field_default(config: type, name: str) -> Any:
    """The default of field ``name`` of the config dataclass ``config``: an option whose value
    ends up in that field takes its default from here, so each default is declared once
    (``tests/test_cli_defaults.py`` checks every such option)."""
    field = {f.name: f for f in dataclasses.fields(config)}[name]
    if field.default is dataclasses.MISSING:
        raise TypeError(f"{config.__name__}.{name} has no plain default")
    return field.default


def fail(msg: str, code: int = 2) -> None:
    """Print ``error: msg`` on stderr and exit (2: bad input or usage; 1: query failed)."""
    from tqdm.std import tqdm

    with tqdm.external_write_mode(file=sys.stderr):  # not glued to a progress line
        typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)


def guard(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Turn the errors a user can fix into one line on stderr, not a traceback."""
    try:
        return fn(*args, **kwargs)
    except (ToolkitError, RegistryError, ValueError) as e:
        fail(str(e))
    except OverflowError as e:  # a number beyond int64 reached a kernel or Arrow
        fail(f"a value is too large for the replay ({e}); use smaller sizes")
    except OSError as e:  # disk full, permissions: the store is left as it was
        fail(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")


@contextmanager
def cli_store(path: Path, *, create: bool = False) -> Iterator[Store]:
    """Open a store for a command: a missing store is an error unless the command creates
    one, and whatever the store worked around (``Store.problems``) is printed as a warning."""
    import shutil

    from toolkit.store import open_store

    existed = path.exists()
    if not create and (not existed or (path.is_dir() and not any(path.iterdir()))):
        # a mistyped --store must not answer queries with zero rows from an empty store
        fail(f"no store at {path}; create one with toolkit ingest")
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


def ttft_bound(text: str) -> float | None:
    """``--max-p90-ttft-s``: a positive number of seconds, or ``none`` (no bound); the
    same words for ``cost compare`` and ``plan``."""
    if text.strip().lower() == "none":
        return None
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not v > 0 or v == float("inf"):
        fail(f"--max-p90-ttft-s {text!r}: give a positive number of seconds or 'none'")
    return v


def check_workers(value: int | None) -> int | None:
    """Option callback of every ``--workers``: a count beyond what this machine can run
    is one line naming the flag, before anything is allocated."""
    from toolkit.runtime.pool import resolve_workers

    if value is not None:
        guard(resolve_workers, value)
    return value


def choices(family: str) -> str:
    """The registered names of a plugin family, for option help: ``--help`` then lists
    what ``--policy``/``--hardware``/``--model`` accept, third-party plug-ins included."""
    if family == "policy":
        from toolkit.policies import policies

        names = policies.names()
    elif family == "hardware":
        from toolkit.hardware import hardware_names

        names = hardware_names()
    else:  # every name the registry accepts: canonical names with their aliases
        from toolkit.models import MODELS, model_names

        names = [n + (f" (alias {', '.join(MODELS.get(n).aliases)})"
                      if MODELS.get(n).aliases else "") for n in model_names()]
    return ", ".join(names)


def require_key(s: Store, table: str, name: str, what: str = "requests") -> None:
    """Refuse a name the store does not hold (a trace, a run) before any kernel or heavy
    library loads, so a typo costs the store's opening, not a replay's start-up; one line
    naming the table and the names it does hold."""
    keys = s.keys(table)
    if name not in keys:
        known = ", ".join(keys[:20]) + (", ..." if len(keys) > 20 else "") or "none"
        fail(f"no {what} named {name!r} in store {s.root} (table {table}); known: {known}")


def check_names(*, hardware: str | Iterable[str] | None = None, model: str | None = None,
                flags: tuple[str, str] = ("--hardware", "--model")) -> None:
    """Refuse an unknown accelerator or model name from the spec registries alone (TOML
    files, no NumPy, Polars, DuckDB or numba: ~50 ms), before a command opens its store or
    loads a kernel, so a typo costs the CLI's start-up and nothing more; one line naming
    the flag and the names the registry holds (third-party plug-ins included).

    Args:
        hardware: one name or several (``"gb200,gb300"`` is split at commas).
        model: a model name or alias.
        flags: the options' names as the command spells them, for the message.
    """
    if hardware is not None:
        from toolkit.hardware import get_hardware

        names = hardware.split(",") if isinstance(hardware, str) else list(hardware)
        for name in (n.strip() for n in names):
            if name:
                try:
                    get_hardware(name)
                except RegistryError as e:
                    fail(f"{flags[0]} {name}: {e} (toolkit hardware list)")
    if model is not None:
        from toolkit.models import get_model

        try:
            get_model(model)
        except RegistryError as e:
            fail(f"{flags[1]} {model}: {e} (toolkit models list)")


def check_key(store: Path, table: str, name: str, what: str = "requests") -> None:
    """:func:`require_key` for a command that opens its store later (or inside a library
    call): opens the store, checks ``name`` in ``table``, closes it."""
    with cli_store(store) as s:
        require_key(s, table, name, what)


#: The tables whose keys are trace names (request timelines, selection traces, Engram
#: lookup traces): a named query's ``trace`` parameter names one of them.
TRACE_TABLES = ("requests", "selections", "engram_traces")


def check_trace_param(s: Store, params: list[str]) -> None:
    """``toolkit sql --query NAME --param trace=T``: a trace the store does not hold is one
    line naming it and the traces it does hold, not an empty table; checked before the
    named queries (and Polars) load."""
    for p in params:
        key, sep, value = p.partition("=")
        name = value.strip()
        if key.strip() != "trace" or not sep or name.lower() in ("", "null", "none"):
            continue
        known = sorted(set().union(*(s.keys(t) for t in TRACE_TABLES)))
        if name not in known:
            shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "") or "none"
            fail(f"--param trace={name}: no trace named {name!r} in store {s.root} (tables "
                 f"{', '.join(TRACE_TABLES)}); known: {shown}; `toolkit info --store "
                 f"{s.root}` lists every table")
