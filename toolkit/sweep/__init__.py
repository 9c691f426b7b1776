"""Sweeps: one TOML grid of any replay kind, resumable by config, on a local process pool
or a Ray cluster (docs/sweep.md)."""

from toolkit.sweep.grid import Cell, Grid, GridError, load_grid, parse_grid
from toolkit.sweep.run import SweepError, SweepInterrupted, SweepResult, run

__all__ = ["Cell", "Grid", "GridError", "SweepError", "SweepInterrupted", "SweepResult",
           "load_grid", "parse_grid", "run"]
