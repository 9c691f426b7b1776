"""``toolkit sql`` prints a plain result from DuckDB's own rows (no Polars import): the
table and JSON it prints must be the ones the Polars frame of the same result gives."""

from __future__ import annotations

import duckdb
import pytest

from toolkit.commands.fetched import Fetched
from toolkit.commands.output import Output

QUERIES = [
    "SELECT 1",
    "SELECT 42 AS x, 'a' AS s, true AS b, 2.5 AS not_plain_decimal",
    "SELECT i, i * 1000003 AS big_bytes, i / 7 AS ratio, i::FLOAT / 3 AS f32_s, "
    "'row ' || i AS name, i % 2 = 0 AS even FROM range(5) t(i)",
    # nulls, NaN, infinities, unsigned and small integers
    "SELECT * FROM (VALUES (NULL::BIGINT, 'nan'::DOUBLE, 1::UTINYINT, -3::SMALLINT), "
    "(7, 'inf'::DOUBLE, 255, NULL), (NULL, NULL, 0, 2)) t(a, x_s, u, s)",
    # a value every row shares goes above a grid too wide for the terminal
    "SELECT 'same value for all the rows here' AS model, i AS step, repeat('x', 60) AS pad, "
    "i * 1e9 AS capacity_bytes FROM range(3) t(i)",
    # too wide even then: one block per row, long values cut
    "SELECT i, repeat('y', 300) AS long_text, repeat('z', 90) AS other FROM range(2) t(i)",
    "SELECT 'nan'::DOUBLE AS a FROM range(3)",  # one distinct value for both
    # more rows than a table shows
    "SELECT i, i / 2 AS half FROM range(250) t(i)",
    "SELECT * FROM range(3) WHERE false",  # no rows
    "SELECT 1 AS a, 2 AS a",  # repeated names: Polars renames, so Polars prints
    "SELECT DATE '2024-01-02' AS d, [1, 2] AS l",  # not plain: Polars prints
]


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_duckdb_rows_print_as_the_polars_frame(sql, fmt, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    con = duckdb.connect()
    Output(fmt).emit(con.sql(sql).pl())
    want = capsys.readouterr().out
    rel = con.sql(sql)
    rows = Fetched.of(rel)
    Output(fmt).emit(rows if rows is not None else rel.pl())
    assert capsys.readouterr().out == want
    plain = "decimal" not in sql and "AS a, 2 AS a" not in sql and "DATE" not in sql
    assert (rows is not None) == plain
