"""DuckDB's own rows for ``toolkit sql``'s table and JSON output, without Polars.

Importing Polars takes ~0.3 s, more than opening the store and running a small query, so
``toolkit sql`` reads a plain result with DuckDB's ``fetchall`` and prints it through the
same table and JSON code as every command (:mod:`toolkit.commands.output`). Only results
whose columns are all plain scalars (integers, floats, text, booleans) under distinct
names come this way: those convert to the same Python values either way. Anything else
(dates, decimals, lists, structs, NULL columns, repeated names, which Polars renames) goes
through Polars as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_NUMERIC = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
                      "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE"})
_PLAIN = _NUMERIC | {"BOOLEAN", "VARCHAR"}


class _Dtype:
    def __init__(self, numeric: bool) -> None:
        self._numeric = numeric

    def is_numeric(self) -> bool:
        return self._numeric

    def is_nested(self) -> bool:
        return False


class _Column(list):
    def to_list(self) -> list[Any]:
        return list(self)

    def n_unique(self) -> int:
        # NaN is one value, as for Polars (``nan != nan`` would count each)
        return len({("nan",) if isinstance(v, float) and v != v else v for v in self})


class Fetched:
    """The rows of a plain DuckDB result and the part of Polars' ``DataFrame`` API that
    :func:`toolkit.commands.output.emit` uses for the table and JSON formats."""

    def __init__(self, columns: list[str], numeric: list[bool],
                 rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self._numeric = numeric
        self._rows = rows

    @classmethod
    def of(cls, rel: Any) -> Fetched | None:
        """The relation's rows, or None (nothing fetched) if a column is not plain."""
        types = [str(t) for t in rel.types]
        if not all(t in _PLAIN for t in types) or len(set(rel.columns)) < len(rel.columns):
            return None
        return cls(list(rel.columns), [t in _NUMERIC for t in types], rel.fetchall())

    @property
    def width(self) -> int:
        return len(self.columns)

    @property
    def height(self) -> int:
        return len(self._rows)

    @property
    def schema(self) -> dict[str, _Dtype]:
        return {c: _Dtype(n) for c, n in zip(self.columns, self._numeric, strict=True)}

    def iter_rows(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)

    def get_column(self, name: str) -> _Column:
        i = self.columns.index(name)
        return _Column(r[i] for r in self._rows)

    def head(self, n: int) -> Fetched:
        return Fetched(self.columns, self._numeric, self._rows[:n])

    def drop(self, names: list[str]) -> Fetched:
        return self.select([c for c in self.columns if c not in names])

    def select(self, names: list[str]) -> Fetched:
        idx = [self.columns.index(c) for c in names]
        return Fetched(names, [self._numeric[i] for i in idx],
                       [tuple(r[i] for i in idx) for r in self._rows])

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r, strict=True)) for r in self._rows]
