"""Serving configurations in InferenceX's column layout: read, validate, resolve to specs.

Why a strict reader: a capacity planner's CSV names hardware, engines and layouts by hand, and
a typo must stop the prediction at the row and field that hold it rather than silently fall
back to some default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import polars as pl

from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware, hardware_names
from toolkit.models import get_model, model_names
from toolkit.registry import RegistryError
from toolkit.runtime.files import file_problem

CONFIG_COLUMNS: dict[str, type[pl.DataType]] = {
    "hardware": pl.String,
    "framework": pl.String,
    "model": pl.String,
    "precision": pl.String,
    "spec_method": pl.String,
    "disagg": pl.Boolean,
    "is_multinode": pl.Boolean,
    "isl": pl.Int64,
    "osl": pl.Int64,
    "conc": pl.Int64,
    "num_prefill_gpu": pl.Int64,
    "num_decode_gpu": pl.Int64,
    "prefill_tp": pl.Int64,
    "prefill_ep": pl.Int64,
    "prefill_dp_attention": pl.Boolean,
    "decode_tp": pl.Int64,
    "decode_ep": pl.Int64,
    "decode_dp_attention": pl.Boolean,
}
"""The configuration columns ``serving predict`` needs (InferenceX names and meanings)."""

OPTIONAL_COLUMNS = ("date", "image")
MEASURED_COLUMNS = ("tput_per_gpu", "output_tput_per_gpu", "median_tpot", "median_ttft",
                    "p90_ttft", "median_intvty")

ENGINES: dict[str, str] = {
    "sglang": "SGLang, one aggregated instance (prefill and decode share GPUs)",
    "trt": "TensorRT-LLM, aggregated",
    "vllm": "vLLM, aggregated",
    "atom": "AMD ATOM, aggregated",
    "dynamo-sglang": "NVIDIA Dynamo over SGLang workers, disaggregated prefill/decode",
    "dynamo-trt": "NVIDIA Dynamo over TensorRT-LLM workers, disaggregated",
    "dynamo-vllm": "NVIDIA Dynamo over vLLM workers, disaggregated",
    "mori-sglang": "SGLang with AMD MoRI transfer, disaggregated",
}
"""Engines the serving model knows; an engine without fitted terms uses the global ones."""

FRAMEWORK_ALIASES: dict[str, str] = {
    "sglang-disagg": "mori-sglang",
    "trtllm": "trt",
    "dynamo-trtllm": "dynamo-trt",
}
"""Older InferenceX names of engines -> the names it uses now (and this table uses): the
InferenceX dashboard's own mapping (SemiAnalysisAI/InferenceX-app,
``packages/constants/src/framework-aliases.ts``), so rows exported before a rename read
the same as rows exported after it."""

PRECISIONS = ("fp4", "fp8", "bf16")
SPEC_METHODS = ("none", "mtp")


class PointsError(ToolkitError):
    """A serving-points table is missing a column or holds a value the model cannot use."""


def bundled_points_path(name: str = "dsr1_serving_points.csv") -> Path:
    """Path of a bundled InferenceX file (``toolkit/data/inferencex``; Apache-2.0, attributed)."""
    return Path(str(files("toolkit").joinpath("data", "inferencex", name)))


@dataclass(frozen=True)
class PointsScope:
    """The rows a question is about (``cost compare``'s model, accelerators, precision).

    InferenceX exports every model and accelerator it measured; rows outside the scope
    (another model, accelerator or precision, or an engine the toolkit does not know) are
    left out, counted in a note, and never validated, so a dashboard export answers a
    DeepSeek-R1 question whatever else it holds. Rows inside are validated in full."""

    model: str
    hardware: tuple[str, ...]
    precision: str


def read_points(path: str | Path, scope: PointsScope | None = None,
                notes: list[str] | None = None) -> pl.DataFrame:
    """Read a CSV/Parquet of serving configurations and validate it (see :func:`validate`);
    with ``scope``, only the rows in it (an empty frame if none), what was left out noted in
    ``notes``, errors naming the file's own row numbers.

    Raises:
        PointsError: unreadable file, missing column, or a bad value (row and field named).
    """
    path = Path(path)
    if (problem := file_problem(path)) is not None:
        raise PointsError(f"{path}: {problem}")
    if (problem := _csv_problem(path)) is not None:  # Polars pads or drops ragged rows
        raise PointsError(problem)
    try:
        if path.suffix == ".parquet":
            df = pl.read_parquet(path)
        else:
            df = pl.read_csv(path, infer_schema_length=0)  # all strings: we cast, row by row
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as e:
        raise PointsError(_csv_problem(path) or f"{path}: not a readable CSV/Parquet file: "
                          f"{str(e).strip().splitlines()[0]}") from None
    if scope is None:
        return validate(df, str(path))
    return _validate_in_scope(df, str(path), scope, notes if notes is not None else [])


def _validate_in_scope(df: pl.DataFrame, where: str, scope: PointsScope,
                       notes: list[str]) -> pl.DataFrame:
    missing = [c for c in ("model", "hardware", "precision", "framework") if c not in df.columns]
    if missing:
        return validate(df, where)  # its message names every missing column

    def names(col: str) -> pl.Series:
        return df[col].cast(pl.String).str.strip_chars().str.to_lowercase()

    given = names("model")
    canonical: dict[str | None, str | None] = {}
    for name in given.unique().to_list():
        try:
            canonical[name] = get_model(name).name if name else None
        except RegistryError:
            canonical[name] = None
    model = given.replace_strict(canonical, default=None)
    engine = names("framework").replace(FRAMEWORK_ALIASES)
    asked = ((model == get_model(scope.model).name)
             & names("hardware").is_in(list(scope.hardware))
             & (names("precision") == scope.precision)).fill_null(False)
    known = engine.is_in(sorted(ENGINES)).fill_null(False)
    keep = asked & known
    other = int((~asked).sum())
    if other:
        notes.append(f"{where}: {other:,} of {df.height:,} rows are for other models, "
                     "accelerators or precisions: left out")
    if (n_unknown := int((asked & ~known).sum())):
        unknown = sorted({str(e) for e in engine.filter(asked & ~known).to_list()})
        notes.append(f"{where}: {n_unknown:,} rows name engines the toolkit "
                     f"does not model ({', '.join(unknown)}; known: "
                     f"{', '.join(sorted(ENGINES))}): left out")
    rows = keep.arg_true()
    if rows.len() == 0:
        return pl.DataFrame()
    try:
        return validate(df.filter(keep), where)
    except PointsError as e:  # the row number of the file, not of the rows kept
        m = re.match(rf"{re.escape(where)}: row (\d+)\b", str(e))
        if m is None:
            raise
        line = int(rows[int(m.group(1)) - 1]) + 1
        raise PointsError(f"{where}: row {line}{str(e)[m.end():]}") from None


def _cast_column(df: pl.DataFrame, col: str, dtype: type[pl.DataType], where: str) -> pl.Series:
    s = df[col]
    if dtype == pl.Boolean and s.dtype == pl.String:
        low = s.str.to_lowercase().str.strip_chars()
        ok = low.is_in(["true", "false", "1", "0"])
        out = low.is_in(["true", "1"])
    else:
        out = s.cast(dtype, strict=False)
        ok = out.is_not_null()
    bad = (~ok | s.is_null()).arg_true()
    if bad.len():
        i = int(bad[0])
        raise PointsError(f"{where}: row {i + 1} field {col!r}: {s[i]!r} is not a valid "
                          f"{'true/false' if dtype == pl.Boolean else 'integer'}")
    return out.alias(col)


def validate(df: pl.DataFrame, where: str = "<frame>") -> pl.DataFrame:
    """Cast the configuration columns, check every name against the registries.

    Rows are numbered from 1 as in a spreadsheet (the header is not a row). Extra columns
    (measurements, ``run_url``) are kept as they are.
    """
    missing = [c for c in CONFIG_COLUMNS if c not in df.columns]
    if missing:
        raise PointsError(f"{where}: missing column(s) {missing}; need {list(CONFIG_COLUMNS)}")
    if df.height == 0:
        raise PointsError(f"{where}: no rows")
    cols = []
    for col, dtype in CONFIG_COLUMNS.items():
        if dtype == pl.String:
            s = df[col].cast(pl.String)
            nulls = s.is_null().arg_true()
            if nulls.len():
                raise PointsError(f"{where}: row {int(nulls[0]) + 1} field {col!r} is empty")
            s = s.str.strip_chars().str.to_lowercase()
            if col == "framework":
                s = s.replace(FRAMEWORK_ALIASES)
            cols.append(s.alias(col))
        else:
            cols.append(_cast_column(df, col, dtype, where))
    out = _check_names(df.with_columns(cols), where)
    for col in ("isl", "osl", "conc", "num_prefill_gpu", "num_decode_gpu", "prefill_tp",
                "prefill_ep", "decode_tp", "decode_ep"):
        bad = (out[col] < 1).arg_true()
        if bad.len():
            i = int(bad[0])
            raise PointsError(f"{where}: row {i + 1} field {col!r} must be >= 1, got {out[col][i]}")
    bad = (out["osl"] < 2).arg_true()
    if bad.len():
        raise PointsError(f"{where}: row {int(bad[0]) + 1} field 'osl' must be >= 2 (TPOT is "
                          "defined over output tokens after the first)")
    for col in MEASURED_COLUMNS:
        if col in out.columns and out[col].dtype == pl.String:
            out = out.with_columns(pl.col(col).cast(pl.Float64, strict=False))
    from toolkit.ingest.points import point_problem

    if (found := point_problem(out)) is not None:  # 1e308 throughputs, 2026-13-45
        i, col, why = found
        raise PointsError(f"{where}: row {i + 1} field {col!r}: {why}")
    return _check_whatif_and_layout(out, where)


def _check_names(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """Refuse unknown names; models come back under their registry names (an alias such as
    InferenceX's ``glm5`` reads as ``glm-5``, so measured rows match ``--model glm-5``)."""
    checks = {
        "hardware": (set(hardware_names()), "toolkit hardware list"),
        "framework": (set(ENGINES), "engines: " + ", ".join(sorted(ENGINES))),
        "precision": (set(PRECISIONS), ", ".join(PRECISIONS)),
        "spec_method": (set(SPEC_METHODS), ", ".join(SPEC_METHODS)),
    }
    for col, (known, hint) in checks.items():
        bad = (~df[col].is_in(sorted(known))).arg_true()
        if bad.len():
            i = int(bad[0])
            raise PointsError(f"{where}: row {i + 1} field {col!r}: unknown {col} "
                              f"{df[col][i]!r}; known: {hint}")
    canonical = {}
    for i, name in enumerate(df["model"].to_list()):
        if name in canonical:
            continue
        try:
            canonical[name] = get_model(name).name
        except RegistryError:
            raise PointsError(f"{where}: row {i + 1} field 'model': unknown model {name!r}; "
                              f"known: {', '.join(model_names())}") from None
    for i, (hw, prec) in enumerate(zip(df["hardware"], df["precision"], strict=True)):
        if prec == "fp4" and get_hardware(hw).dense_fp4_tflops is None:
            raise PointsError(f"{where}: row {i + 1} field 'precision': {hw} has no FP4 "
                              "tensor cores")
    return df.with_columns(pl.col("model").replace(canonical))


MAX_GPUS = 65_536
"""Most GPUs one configuration may use (prefill or decode pool): beyond the largest
clusters built, and what keeps a typo such as ``1e9`` from reaching the model."""

FRACTION_COLUMNS = ("cached_prefix_fraction", "host_prefix_fraction",
                    "prefix_reserve_fraction")
NON_NEGATIVE_COLUMNS = ("device_buffer_tokens", "miss_rows_per_layer", "engram_hbm_bytes",
                        "engram_miss_bytes", "engram_layers")
BOOLEAN_WHATIF = ("hisparse_overlap",)


def _check_whatif_and_layout(df: pl.DataFrame, where: str) -> pl.DataFrame:
    """Refuse what-if values outside their range and layouts their GPU counts cannot hold,
    at the row and field, as the trace readers do (a NaN fraction would otherwise come out
    as NaN predictions, a fraction of 2 as a negative prompt). Returns ``df`` with the
    what-if columns cast (numbers to Float64, ``hisparse_overlap`` to Boolean)."""
    def first(mask: pl.Series) -> int | None:
        bad = mask.fill_null(False).arg_true()
        return int(bad[0]) if bad.len() else None

    def number(col: str) -> pl.Series:
        s = df[col]
        out = s.cast(pl.Float64, strict=False)
        i = first(out.is_null() & s.is_not_null())
        if i is not None:
            raise PointsError(f"{where}: row {i + 1} field {col!r}: {s[i]!r} is not a number")
        i = first(~out.is_finite())
        if i is not None:
            raise PointsError(f"{where}: row {i + 1} field {col!r} must be finite, "
                              f"got {out[i]!r}")
        return out

    cols = []
    for col in FRACTION_COLUMNS + NON_NEGATIVE_COLUMNS:
        if col not in df.columns:
            continue
        v = number(col)
        hi = 1.0 if col in FRACTION_COLUMNS else None
        i = first((v < 0) | (v > hi) if hi is not None else v < 0)
        if i is not None:
            want = "in [0, 1]" if hi is not None else ">= 0"
            raise PointsError(f"{where}: row {i + 1} field {col!r} must be {want}, "
                              f"got {v[i]!r}")
        cols.append(v.alias(col))
    for col in BOOLEAN_WHATIF:
        if col not in df.columns:
            continue
        s = df[col]
        if s.dtype != pl.Boolean:
            low = s.cast(pl.String).str.strip_chars().str.to_lowercase()
            i = first(~low.is_in(["true", "false", "1", "0", "1.0", "0.0"]) & s.is_not_null())
            if i is not None:
                raise PointsError(f"{where}: row {i + 1} field {col!r}: {s[i]!r} is not "
                                  "true/false")
            s = low.is_in(["true", "1", "1.0"]).alias(col)
        cols.append(s)
    for pool in ("prefill", "decode"):
        n_col = f"num_{pool}_gpu"
        i = first(df[n_col] > MAX_GPUS)
        if i is not None:
            raise PointsError(f"{where}: row {i + 1} field {n_col!r}: {df[n_col][i]:,} GPUs; "
                              f"at most {MAX_GPUS:,}")
        # tensor parallelism spans GPUs of its pool; expert parallelism beyond the pool is
        # capped to it by the layout (an instance never spans more than its pool)
        col = f"{pool}_tp"
        i = first(df[col] > df[n_col])
        if i is not None:
            raise PointsError(f"{where}: row {i + 1} fields {col!r}, {n_col!r}: "
                              f"{col} = {df[col][i]} needs more GPUs than {n_col} = "
                              f"{df[n_col][i]}")
    return df.with_columns(cols) if cols else df


def _csv_problem(path: Path) -> str | None:
    """The first CSV syntax error of ``path`` as one line naming its row (rows counted
    from 1 after the header, as :func:`validate` counts them), or None."""
    import csv

    if path.suffix == ".parquet":
        return None
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = csv.reader(fh, strict=True)
            header = next(rows, None)
            if header is None:
                return f"{path}: empty file"
            names = [h.strip() for h in header]
            dup = next((h for i, h in enumerate(names) if h and h in names[:i]), None)
            if dup is not None:  # Polars renames the second one: the first was used silently
                return (f"{path}: header field {dup!r}: column appears twice in the header; "
                        "which one holds the data is ambiguous")
            for i, row in enumerate(rows, start=1):
                if row and len(row) != len(header):
                    return (f"{path}: row {i}: {len(row)} fields where the header has "
                            f"{len(header)} (a stray comma or quote)")
    except csv.Error as e:
        return f"{path}: row {max(rows.line_num - 1, 1)}: malformed CSV: {e}"
    except UnicodeDecodeError as e:
        return f"{path}: not UTF-8 text (byte {e.start})"
    return None
