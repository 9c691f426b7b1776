"""`toolkit sql --query NAME --param k=v` and `--list-queries`: the named-query registry
from the command line."""

from __future__ import annotations

import polars as pl

from toolkit.analysis.queries import QUERIES, QueryError, get_query, run_query
from toolkit.commands.common import fail
from toolkit.store import Store


def list_named() -> str:
    """Every named query with its parameters and output columns (units)."""
    return "\n\n".join(QUERIES[n].describe() for n in sorted(QUERIES))


def _value(text: str) -> int | float | str | None:
    """``--param`` values: integers and floats as numbers, ``null`` as NULL (all)."""
    if text.lower() in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def run_named(store: Store, name: str, params: list[str]) -> pl.DataFrame:
    """Parse ``k=v`` pairs and run the named query; bad input is a one-line error."""
    try:
        q = get_query(name)
    except QueryError as e:
        fail(str(e))
    kwargs = {}
    for p in params:
        key, sep, val = p.partition("=")
        if not sep or not key:
            fail(f"--param must be k=v, got {p!r}; parameters of {name}: "
                 f"{', '.join(x.name for x in q.params) or 'none'}")
        kwargs[key.strip()] = _value(val.strip())
    try:
        return run_query(store, name, **kwargs)
    except QueryError as e:
        fail(str(e))
    raise AssertionError("unreachable")  # pragma: no cover
