"""One door for measured points, wherever they are: the loader behind ``serving fit`` /
``validate`` ``--points``, ``cost compare --measurements`` and ``cost-at-interactivity``.

A source is a file (an InferenceX CSV/Parquet as exported, an InferenceX JSON export, an
``sglang.bench_serving`` JSONL or a ``vllm bench serve`` JSON) or a ``measured_points``
table of a store (``toolkit ingest points``). Every one comes out as the same frame:

* ``for_model=True``: the validated configuration rows :func:`toolkit.serving.points.
  read_points` returns (InferenceX columns, names checked against the registries), which
  the fit, the predictions and ``cost compare`` consume. An InferenceX CSV/Parquet goes
  through ``read_points`` unchanged.
* ``for_model=False``: measured points in InferenceX columns
  (:func:`toolkit.ingest.points.read_measured_points`), context filled, no layout needed
  (a throughput-vs-interactivity front needs none).

Bench results carry no parallel layout, GPU count, accelerator or precision: those come
from :class:`~toolkit.ingest.bench_layout.BenchLayout` (the commands' ``--hardware``,
``--gpus``, ``--tp`` ... flags), never from a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from toolkit.errors import ToolkitError
from toolkit.ingest.bench_layout import BenchLayout, fill_bench_layout
from toolkit.ingest.points import POINT_COLUMNS, read_measured_points
from toolkit.serving.points import PointsError, PointsScope, read_points, validate

#: Files read by ``read_points`` as they always were (InferenceX's CSV/Parquet exports).
TABULAR = (".csv", ".parquet")


@dataclass(frozen=True)
class MeasurementSource:
    """Where measured points are: a file (``path``) or a store's ``measured_points`` table
    (``store`` and ``name``), with what the user said about bench results' servers.

    ``flag_prefix``: how the command spells the layout flags in its messages (``--`` for
    ``serving fit --tp``; ``--measured-`` for ``cost compare --measured-tp``).
    """

    path: str | None = None
    store: str | None = None
    name: str | None = None
    layout: BenchLayout = field(default_factory=BenchLayout)
    flag_prefix: str = "--"

    def __post_init__(self) -> None:
        if (self.path is None) == (self.store is None or self.name is None):
            raise ValueError("measured points: give a file, or a store and a "
                             "measured_points name (--store S --measured-points NAME)")

    @property
    def label(self) -> str:
        return self.path if self.path is not None else (
            f"{self.store}: measured_points/{self.name}")


def as_source(source: str | Path | MeasurementSource) -> MeasurementSource:
    return source if isinstance(source, MeasurementSource) else MeasurementSource(str(source))


def load_measurements(source: str | Path | MeasurementSource, *, for_model: bool = True,
                      notes: list[str] | None = None,
                      scope: PointsScope | None = None) -> pl.DataFrame:
    """Measured points from a file or a store table, as one frame (see the module doc).

    Args:
        source: a file path, or a :class:`MeasurementSource`.
        for_model: return validated configuration rows (every layout column set) rather
            than points that need only a front's columns.
        notes: receives what the loader assumed (engine defaults applied to bench rows)
            and, with ``scope``, what it left out.
        scope: for an InferenceX CSV/Parquet, only the rows of this model, accelerators and
            precision (:class:`toolkit.serving.points.PointsScope`); a dashboard export
            holds every model it measured.

    Raises:
        PointsError: one line naming the file (or store table), the row or line, the field
            and, for bench results, the flag that would supply it.
    """
    src = as_source(source)
    notes = notes if notes is not None else []
    prefix = src.flag_prefix
    if src.path is not None:
        path = Path(src.path)
        if path.suffix.lower() in TABULAR and for_model:
            if src.layout.given():
                notes.append(f"{path}: an InferenceX table carries its own layout and "
                             "names; the bench-result flags do not apply to it")
            return read_points(path, scope, notes)
        try:
            df = read_measured_points(path, gpus=src.layout.gpus,
                                      framework=src.layout.framework)
        except ToolkitError as e:
            raise PointsError(str(e).replace("pass --gpus N", f"pass {prefix}gpus N")) from None
    else:
        df = _from_store(src)
    try:
        df, said = fill_bench_layout(df, src.layout, src.label, require=for_model,
                                     prefix=prefix)
    except ValueError as e:
        raise PointsError(str(e)) from None
    notes.extend(said)
    return validate(df, src.label) if for_model else df


def _from_store(src: MeasurementSource) -> pl.DataFrame:
    from toolkit.store import open_store

    root = Path(str(src.store))
    if not root.is_dir() or not any(root.iterdir()):
        raise PointsError(f"no store at {root}; create one with toolkit ingest points")
    with open_store(root) as s:
        table = s.read("measured_points", str(src.name))
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.select(list(POINT_COLUMNS))
