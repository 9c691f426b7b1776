"""Trace-replay toolkit for KV-cache memory tiering in sparse-attention LLM serving.

Start with :func:`open_store`; see README.md for the CLI.
"""

from toolkit.store import Store, open_store

__version__ = "0.1.0"
__all__ = ["Store", "open_store", "__version__"]
