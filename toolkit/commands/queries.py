"""`toolkit sql --query NAME --param k=v` and `--list-queries`: the named-query registry
from the command line."""

from __future__ import annotations

import polars as pl

from toolkit.analysis.queries import QUERIES, QueryError, get_query, run_query
from toolkit.commands.common import fail
from toolkit.store import Store


def list_named(name: str | None = None) -> str:
    """The named queries, one line each (name, parameters, what it returns); with
    ``name``, that query's whole description: parameters with defaults, columns with
    units."""
    if name is not None:
        try:
            return get_query(name).describe()
        except QueryError as e:
            fail(str(e))
    from toolkit.commands.output import render_table

    rows = [{"query": n, "params": ", ".join(p.name for p in QUERIES[n].params),
             "returns": QUERIES[n].doc.split(". ")[0].rstrip(".")} for n in sorted(QUERIES)]
    return (render_table(pl.DataFrame(rows)) + f"\n{len(rows)} queries; `toolkit sql "
            "--list-queries --query NAME` describes one (parameters, columns and units)")


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
