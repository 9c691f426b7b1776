"""Trace-replay toolkit for KV-cache memory tiering in sparse-attention LLM serving.

Start with ``toolkit.open(path)`` (a :class:`~toolkit.workspace.Workspace`: ingest,
replay, query); see README.md for the CLI. Importing the package loads nothing heavy
(no DuckDB, Polars, Arrow or numba) and changes no process-wide setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolkit.store import Store, open_store
    from toolkit.workspace import Workspace, open

from toolkit.version import __version__

__all__ = ["Store", "Workspace", "__version__", "open", "open_store", "plan"]

_LAZY = {"Store": "toolkit.store", "open_store": "toolkit.store",
         "Workspace": "toolkit.workspace", "open": "toolkit.workspace",
         "plan": "toolkit.plan"}


def __getattr__(name: str) -> Any:
    """Load the public names on first use, so ``import toolkit`` stays cheap."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
