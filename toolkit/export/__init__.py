"""Exports for other tools: a tier replay as a Perfetto / Chrome trace-event timeline
(:mod:`toolkit.export.perfetto`) and a whole store as Parquet files with a README of their
schemas (:mod:`toolkit.export.tables`).

Sits beside ``analysis`` in the layers: it reads the store and, for the timeline, rebuilds a
run's service times with the serving model; nothing below imports it.
"""

from __future__ import annotations

from toolkit.export.perfetto import tier_trace, write_perfetto
from toolkit.export.tables import export_store

__all__ = ["export_store", "tier_trace", "write_perfetto"]
