"""Named SQL over a store's views, shared by the CLI, notebooks, charts and the report.

Each query is a :class:`NamedQuery`: its SQL (DuckDB, ``$name`` parameters, always bound),
what it answers, its parameters with defaults, and its output columns with units. A NULL
filter parameter means "all". Some parameters are resolved in Python before binding (a
hardware name becomes its link figures, a model name its KV bytes per token), so the SQL
never sees a name it has to trust. Run one with :func:`run_query`, ``toolkit sql --query
NAME --param k=v``, or ``store.query(*QUERIES[NAME].bind(store, **params))``.

The queries live by area, one module each (prefix, selections, tiers, cluster, cost,
serving, engram, runs, sweep); this module is the registry over all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from toolkit.analysis.queries import (
    cluster,
    cost,
    engram,
    prefix,
    runs,
    selections,
    serving,
    sweep,
    tiers,
)
from toolkit.analysis.queries.named import NamedQuery, Param, QueryError
from toolkit.store import Store

__all__ = ["QUERIES", "NamedQuery", "Param", "QueryError", "get_query", "run_query"]

_AREAS = (prefix, selections, tiers, cluster, cost, serving, engram, runs, sweep)

#: Every named query by name.
QUERIES: Mapping[str, NamedQuery] = {q.name: q for area in _AREAS for q in area.NAMED}
assert len(QUERIES) == sum(len(a.NAMED) for a in _AREAS), "a query name is used twice"


def get_query(name: str) -> NamedQuery:
    """The named query, or a one-line error listing the valid names."""
    try:
        return QUERIES[name]
    except KeyError:
        raise QueryError(f"unknown query {name!r}; known: {', '.join(sorted(QUERIES))}"
                         ) from None


def run_query(store: Store, name: str, **params: Any) -> pl.DataFrame:
    """Run the named query; unspecified parameters take their defaults.

    Raises:
        QueryError: unknown query or parameter, or an invalid parameter value.
    """
    return get_query(name).run(store, **params)
