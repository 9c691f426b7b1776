"""What a named query is (:class:`NamedQuery`, :class:`Param`, :class:`QueryError`) and the
parameters and resolvers several areas share."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.csv as pacsv

from toolkit.errors import ToolkitError
from toolkit.store import Store


class QueryError(ToolkitError):
    """Unknown query or parameter, or a parameter value the query cannot use."""


@dataclass(frozen=True)
class Param:
    """One parameter of a named query: default (None = all, for filters) and meaning."""

    name: str
    default: Any
    doc: str


@dataclass(frozen=True)
class NamedQuery:
    """A documented query.

    Attributes:
        name: registry key.
        doc: what it answers, in a sentence or two.
        sql: DuckDB SQL with ``$param`` placeholders.
        params: user-facing parameters.
        columns: output columns and their meaning/unit, in order.
        resolve: turns user parameters into SQL parameters (may add derived ones and check
            values); gets the store for existence checks.
        bundled: package tables registered on the connection for the query's duration.
    """

    name: str
    doc: str
    sql: str
    params: tuple[Param, ...] = ()
    columns: tuple[tuple[str, str], ...] = ()
    resolve: Callable[[Store, dict[str, Any]], dict[str, Any]] | None = field(
        default=None, repr=False)
    bundled: tuple[str, ...] = ()

    def bind(self, store: Store, **params: Any) -> tuple[str, dict[str, Any]]:
        """SQL and bound parameters for ``params`` (defaults filled, values resolved)."""
        known = {p.name for p in self.params}
        unknown = sorted(set(params) - known)
        if unknown:
            raise QueryError(f"query {self.name!r} has no parameter(s) {', '.join(unknown)}; "
                             f"its parameters: {', '.join(sorted(known)) or 'none'}")
        args = {p.name: params.get(p.name, p.default) for p in self.params}
        if self.resolve is not None:
            args = self.resolve(store, args)
        used = set(re.findall(r"\$([A-Za-z_]\w*)", self.sql))
        return self.sql, {k: v for k, v in args.items() if k in used}

    def run(self, store: Store, **params: Any) -> pl.DataFrame:
        """Bind ``params`` and run the query on ``store``'s connection, with its bundled
        tables registered for the query's duration.

        Raises:
            QueryError: unknown parameter, or an invalid parameter value.
        """
        sql, args = self.bind(store, **params)
        con = store.con
        for t in self.bundled:
            con.register(t, _bundled_table(t))
        try:
            return store.query(sql, args or None)  # read-only, under the shared store lock
        finally:
            for t in self.bundled:
                con.unregister(t)

    def describe(self) -> str:
        """Multi-line help: doc, parameters, columns."""
        lines = [f"{self.name}: {self.doc}"]
        for p in self.params:
            lines.append(f"  --param {p.name}=...  {p.doc} (default: {p.default!r})")
        lines += [f"  -> {c}: {u}" for c, u in self.columns]
        return "\n".join(lines)


@cache
def _bundled_table(name: str) -> pa.Table:
    if name == "serving_heldout":
        from toolkit.serving.params import bundled_cv_dir

        path = bundled_cv_dir() / "heldout_hardware.csv"
    elif name == "published_costs":
        path = files("toolkit").joinpath("data", "published", "cost_points.csv")
    else:  # pragma: no cover - registry bug
        raise KeyError(name)
    return pacsv.read_csv(str(path))


def choice(args: dict[str, Any], name: str, choices: tuple[str, ...]) -> None:
    """Refuse a parameter value outside ``choices`` (it would reach a ``CASE``)."""
    if args[name] not in choices:
        raise QueryError(f"--param {name} must be one of {', '.join(choices)}; "
                         f"got {args[name]!r}")


def model_kv_bytes(args: dict[str, Any], *, indexer: bool) -> dict[str, Any]:
    """Resolve ``model``/``kv_dtype`` to ``kv_bytes_per_token`` (with the indexer keys, or
    MLA rows only), so the SQL gets a number, never a model name to look up."""
    from toolkit.models import get_model
    from toolkit.serving.tier_service import kv_bytes_per_token

    try:
        model = get_model(str(args["model"]))
        dtype = str(args["kv_dtype"])
        args["kv_bytes_per_token"] = (kv_bytes_per_token(model, dtype) if indexer
                                      else model.mla_bytes_per_token(dtype))
    except (KeyError, ValueError, ToolkitError) as e:
        raise QueryError(str(e).splitlines()[0]) from None
    return args


#: The 101 fractions 0.00..1.00 a CDF query reports (a chart's worth of rows per run).
CDF_FRACTIONS = ", ".join(f"{i / 100:.2f}" for i in range(0, 101))

TRACE = Param("trace", None, "trace name filter")
HW_FILTER = Param("hardware", None, "hardware name filter")
MODEL = Param("model", "glm-5.2", "model whose KV bytes/token convert tokens to GB")
KV_DTYPE = Param("kv_dtype", "fp8", "KV precision for the GB conversion: fp8 | bf16")
