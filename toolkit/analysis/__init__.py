"""Named DuckDB queries and pure functions over their results (no plotting here)."""

from toolkit.analysis.queries import QUERIES, run_query
from toolkit.analysis.queries.sweep import sweep_query

__all__ = ["QUERIES", "run_query", "sweep_query"]
