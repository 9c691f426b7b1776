"""Measured serving points as exported by the tools operators run, in InferenceX's columns.

Three inputs, one output (:func:`read_measured_points`, and the ``measured_points`` store
table through ``toolkit ingest points``):

* **InferenceX** CSV/Parquet with the columns of ``toolkit/data/inferencex/
  dsr1_serving_points.csv``, or its JSON (a list of row objects, flat or with the measured
  values nested under ``"metrics"`` as the InferenceX app's API serves them).
* **sglang.bench_serving** ``--output-file`` JSONL: one result object per line (the file is
  appended to on every run); field names from ``python/sglang/bench_serving.py``
  (sgl-project/sglang commit 0033168f0f58b2bc05aa0273bd475d9c01bafb1c).
* **vllm bench serve** ``--save-result`` JSON (one object; ``--append-result`` makes it one
  object per line); field names from ``vllm/benchmarks/serve.py`` (vllm-project/vllm commit
  009e6d4a1cd6ba3fb2a9fc00f4ec06f5297232a1).

Bench results carry neither the GPU count nor the hardware, so ``gpus`` (GPUs serving the
benchmark, the divisor of every per-GPU throughput) is required for them and ``hardware``,
``model``, ``precision``, ``framework`` fill the columns the file cannot. Every latency is in
seconds and every throughput in tokens/s per GPU, as in InferenceX; interactivity is
``1000 / TPOT_ms`` (tok/s/user). docs/ingest.md lists each mapping.

Per-request lists (``input_lens``, ``output_lens``, ``ttfts``, ``itls``: SGLang's
``--output-details``, vLLM's ``--save-detailed``) also become a request timeline (``requests``
under the same name).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from toolkit.config import MAX_TPUT_PER_GPU
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.bench_layout import (  # noqa: F401  (BENCH_FORMATS: re-exported)
    BENCH_FORMATS,
    BenchLayout,
    fill_bench_layout,
)
from toolkit.ingest.fields import requests_table
from toolkit.ingest.sniff import check_unique
from toolkit.runtime.files import file_problem

STRING, BOOL, INT, FLOAT = pl.String, pl.Boolean, pl.Int64, pl.Float64
#: InferenceX's columns in its CSV order, with types (latencies in s, throughputs per GPU).
INFERENCEX_COLUMNS: dict[str, Any] = {
    "hardware": STRING, "framework": STRING, "model": STRING, "precision": STRING,
    "spec_method": STRING, "disagg": BOOL, "is_multinode": BOOL, "isl": INT, "osl": INT,
    "conc": INT, "num_prefill_gpu": INT, "num_decode_gpu": INT, "prefill_tp": INT,
    "prefill_ep": INT, "prefill_dp_attention": BOOL, "decode_tp": INT, "decode_ep": INT,
    "decode_dp_attention": BOOL, "date": STRING, "image": STRING, "run_url": STRING,
    "tput_per_gpu": FLOAT, "output_tput_per_gpu": FLOAT, "input_tput_per_gpu": FLOAT,
    "median_intvty": FLOAT, "p90_intvty": FLOAT, "median_tpot": FLOAT, "median_ttft": FLOAT,
    "p90_ttft": FLOAT, "p99_ttft": FLOAT, "median_e2el": FLOAT, "p90_e2el": FLOAT,
    "median_itl": FLOAT, "avg_power_w": FLOAT, "joules_per_total_token": FLOAT,
    "joules_per_output_token": FLOAT,
}
#: Columns every point needs: the two axes of a throughput-vs-interactivity front.
REQUIRED = ("tput_per_gpu", "median_intvty")
#: Where each row came from: ``inferencex`` | ``sglang-bench`` | ``vllm-bench``, and its
#: 1-based row (CSV/Parquet row, JSON list index or JSONL line).
PROVENANCE = {"source_format": STRING, "source_row": INT}
POINT_COLUMNS = {**INFERENCEX_COLUMNS, **PROVENANCE}
SIGNATURE = ("tput_per_gpu", "median_intvty")  # an InferenceX row (flat or nested metrics)


class _Where:
    def __init__(self, path: Path | str, unit: str) -> None:
        self.path, self.unit = path, unit

    def err(self, row: int | None, field: str | None, msg: str) -> TraceFormatError:
        return TraceFormatError(self.path, row, field, msg, unit=self.unit)


def read_measured_points(source: str | Path | pl.DataFrame, *, hardware: str | None = None,
                         gpus: int | None = None, framework: str | None = None,
                         model: str | None = None, precision: str | None = None
                         ) -> pl.DataFrame:
    """Measured points in InferenceX's columns (:data:`POINT_COLUMNS`), from a file or a frame.

    Args:
        source: an InferenceX CSV/Parquet/JSON file, an sglang.bench_serving JSONL file, a
            vllm bench serve JSON file, a ``measured_points`` table, or a frame with
            InferenceX columns (or the renamed ones ``cost-at-interactivity`` used to want).
        hardware, framework, model, precision: fill these columns where the file has no
            value (bench results never name the hardware).
        gpus: GPUs that served a bench result (required for them): per-GPU throughput is
            the benchmark's throughput divided by it.

    Raises:
        TraceFormatError: unreadable file, unknown layout, a missing column or a bad value;
            the message names the file, the row (or line) and the column.
    """
    fill = {"hardware": hardware, "framework": framework, "model": model,
            "precision": precision}
    if isinstance(source, pl.DataFrame):
        return _finish(_from_frame(source, _Where("<frame>", "row")), fill,
                       _Where("<frame>", "row"))
    df, _ = _read_file(Path(source), gpus, framework)
    return _finish(df, fill, _Where(Path(source), "row"))


def _read_file(path: Path, gpus: int | None, framework: str | None = None
               ) -> tuple[pl.DataFrame, list[dict] | None]:
    """(points, per-request records of the first bench result that carries them)."""
    if (problem := file_problem(path)) is not None:
        raise TraceFormatError(path, None, None, problem)
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            df = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as e:
            raise TraceFormatError(path, None, None, "not a readable Parquet file: "
                                   f"{str(e).splitlines()[0]}") from None
        return _from_frame(df, _Where(path, "row")), None
    if suffix == ".csv":
        check_unique(path, _csv_header(path), 1)  # Polars renames a second one silently
        try:
            df = pl.read_csv(path, infer_schema_length=0)  # strings; cast row by row
        except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as e:
            raise TraceFormatError(path, None, None, "not a readable CSV file: "
                                   f"{str(e).splitlines()[0]}") from None
        return _from_frame(df, _Where(path, "row")), None
    return _read_json(path, gpus, framework)


def _csv_header(path: Path) -> list[str]:
    """The first row of a CSV file, stripped (empty when the file is)."""
    import csv

    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return [h.strip() for h in next(csv.reader(fh), [])]
    except (csv.Error, UnicodeDecodeError, OSError):
        return []  # the full read reports it


def _json_records(path: Path) -> tuple[list[tuple[int, Any]], str]:
    """``[(row or line, value)]`` and the unit: one JSON value (a list: rows; an object:
    one record) or JSON Lines."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(path, None, None, f"not UTF-8 text: {e.reason}") from None
    try:
        whole = json.loads(text)
    except RecursionError:
        raise TraceFormatError(path, None, None, "JSON nested too deeply") from None
    except ValueError:
        whole = None
    else:
        if isinstance(whole, list):
            return [(i + 1, v) for i, v in enumerate(whole)], "row"
        return [(1, whole)], "line"
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line)))
        except RecursionError:
            raise TraceFormatError(path, lineno, None, "JSON nested too deeply") from None
        except ValueError as e:
            raise TraceFormatError(path, lineno, None, f"invalid JSON: {e}") from None
    return out, "line"


def _read_json(path: Path, gpus: int | None, framework: str | None = None
               ) -> tuple[pl.DataFrame, list[dict] | None]:
    records, unit = _json_records(path)
    where = _Where(path, unit)
    if not records:
        raise where.err(None, None, "no records in file")
    rows: list[dict] = []
    details: list[dict] | None = None
    for at, rec in records:
        if not isinstance(rec, dict):
            raise where.err(at, None, f"expected a JSON object, got {type(rec).__name__}")
        kind = classify(rec)
        if kind is None:
            raise where.err(at, None, "neither an InferenceX point (tput_per_gpu, "
                            "median_intvty) nor an sglang.bench_serving / vllm bench serve "
                            "result (median_ttft_ms, median_tpot_ms, output_throughput); "
                            f"keys: {sorted(rec)[:12]}")
        if kind == "inferencex":
            flat = {k: v for k, v in rec.items() if k != "metrics"}
            metrics = rec.get("metrics")
            if metrics is not None:
                if not isinstance(metrics, dict):
                    raise where.err(at, "metrics", "expected an object")
                flat.update(metrics)
            rows.append({**{k: flat.get(k) for k in INFERENCEX_COLUMNS},
                         "source_format": "inferencex", "source_row": at})
            continue
        rows.append(bench_point(rec, kind, gpus, where, at, framework))
        if "input_lens" in rec and details is None:
            details = [{"at": at, "kind": kind, **rec}]
        elif "input_lens" in rec:
            note(f"{path}:{at}: per-request lists of a further result not stored as a "
                 "timeline (only the first result's are)")
    df = _cast_rows(rows, where)
    return df, details


def classify(rec: dict) -> str | None:
    """``inferencex``, ``sglang-bench``, ``vllm-bench`` or None for an unknown object."""
    metrics = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
    if all(k in rec or k in metrics for k in SIGNATURE):
        return "inferencex"
    if not all(k in rec for k in ("median_ttft_ms", "median_tpot_ms", "output_throughput")):
        return None
    if "total_token_throughput" in rec or "endpoint_type" in rec or "model_id" in rec:
        return "vllm-bench"
    if "input_throughput" in rec or "total_output_tokens_retokenized" in rec:
        return "sglang-bench"
    return None


def _finite(v: object) -> bool:
    """A JSON number a float64 holds (an integer of 400 digits is not one)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _num(rec: dict, key: str, where: _Where, at: int, *, required: bool = False,
         positive: bool = False) -> float | None:
    v = rec.get(key)
    if v is None:
        if required:
            raise where.err(at, key, "missing")
        return None
    if not _finite(v):
        raise where.err(at, key, f"expected a finite number, got {v!r}"[:120])
    if v < 0 or (positive and v == 0):
        raise where.err(at, key, f"must be {'> 0' if positive else '>= 0'}, got {v}")
    return float(v)


#: A bench result's ``backend`` (its first dash-separated word) -> the engine it measured.
#: sglang.bench_serving and vllm bench serve also drive TGI, Truss, DeepSpeed-MII and
#: others; those points stand for no engine the toolkit models and are refused.
BACKEND_ENGINES = {"sglang": "sglang", "vllm": "vllm", "trt": "trt", "tensorrt": "trt",
                   "trtllm": "trt", "lmdeploy": "lmdeploy"}


def bench_engine(rec: dict, kind: str, framework: str | None, where: _Where,
                 at: int) -> str:
    """The engine a bench result measured: its ``backend``; ``framework`` (the user's
    ``--framework``) when it names none or only the generic OpenAI client, and it must
    agree with a backend that names one. A TGI, Truss or missing backend was stored as
    sglang, so a TGI benchmark answered "measured" for SGLang."""
    given = framework.strip().lower() if framework else None
    given = BACKEND_ENGINES.get(given, given) if given else None
    backend = rec.get("backend")
    if backend is None:
        if given:
            return given
        raise where.err(at, "backend", "missing: the result does not name the engine it "
                        "measured; pass --framework NAME")
    if not isinstance(backend, str) or not backend.strip():
        raise where.err(at, "backend", f"expected an engine name, got {backend!r}"[:120])
    base = backend.strip().lower().split("-")[0]
    engine = BACKEND_ENGINES.get(base)
    if engine is None and base == "openai":  # any OpenAI-compatible server
        engine = given or ("vllm" if kind == "vllm-bench" else None)
        if engine is None:
            raise where.err(at, "backend", f"{backend!r} does not say which engine served "
                            "it; pass --framework NAME")
    if engine is None:
        raise where.err(at, "backend", f"{backend!r} is not an engine the toolkit models "
                        f"({', '.join(sorted(set(BACKEND_ENGINES.values())))}): its points "
                        "cannot stand for one")
    if given and given != engine:
        raise where.err(at, "backend", f"{backend!r} measured {engine}, not --framework "
                        f"{framework}")
    return engine


def bench_point(rec: dict, kind: str, gpus: int | None, where: _Where, at: int,
                framework: str | None = None) -> dict:
    """One bench result -> one point in InferenceX columns (ms -> s, totals -> per GPU);
    ``framework``: the user's ``--framework`` (see :func:`bench_engine`)."""
    if gpus is None:
        raise where.err(at, None, f"{kind} results do not say how many GPUs served them: "
                        "pass --gpus N (the divisor of tput_per_gpu)")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise where.err(None, None, f"gpus must be a positive integer, got {gpus!r}")

    def ms(key: str) -> float | None:
        v = _num(rec, key, where, at)
        return None if v is None else v / 1000.0

    tpot_ms = _num(rec, "median_tpot_ms", where, at, required=True, positive=True)
    out_tput = _num(rec, "output_throughput", where, at, required=True)
    if kind == "vllm-bench":
        total = _num(rec, "total_token_throughput", where, at)
        if total is not None and total < out_tput * (1 - 1e-9):
            raise where.err(at, "total_token_throughput", f"{total} is below "
                            f"output_throughput {out_tput}: the total counts the output too")
        in_tput = None if total is None else max(total - out_tput, 0.0)
        e2e = ("median_e2el_ms", "p90_e2el_ms")
    else:
        in_tput = _num(rec, "input_throughput", where, at)
        total = None if in_tput is None else in_tput + out_tput
        e2e = ("median_e2e_latency_ms", "p90_e2e_latency_ms")
    done = rec.get("completed")
    if done is not None and (isinstance(done, bool) or not isinstance(done, int) or done < 0):
        raise where.err(at, "completed", f"expected a request count, got {done!r}"[:120])
    dur = _num(rec, "duration", where, at)
    tin = _num(rec, "total_input_tokens", where, at)
    tout = _num(rec, "total_output_tokens", where, at)
    if total is None:
        if not (dur and tin is not None and tout is not None):
            raise where.err(at, "total_token_throughput", "missing, and no duration / "
                            "total_input_tokens / total_output_tokens to derive it")
        total = (tin + tout) / dur
        in_tput = tin / dur
    p90_tpot = _num(rec, "p90_tpot_ms", where, at, positive=True)
    p90_ttft = ms("p90_ttft_ms")
    ttfts = rec.get("ttfts")
    if ttfts is not None and not isinstance(ttfts, list):
        raise where.err(at, "ttfts", f"expected a list of times in s, got {ttfts!r}"[:120])
    for i, x in enumerate(ttfts or []):  # a NaN made p90_ttft null, silently
        if not (_finite(x) and x >= 0):
            raise where.err(at, f"ttfts[{i}]", f"expected a time in s >= 0, got {x!r}"[:120])
    if p90_ttft is None and ttfts:
        p90_ttft = float(np.percentile(np.asarray(ttfts, np.float64), 90))
    conc = rec.get("max_concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 1):
        raise where.err(at, "max_concurrency", f"expected a positive integer or null, got "
                        f"{conc!r}")
    engine = bench_engine(rec, kind, framework, where, at)

    def mean_len(total_tokens: float | None) -> int | None:  # measured, per completed request
        return None if total_tokens is None or not done else int(round(total_tokens / done))

    model_id = rec.get("model_id")
    return {
        **dict.fromkeys(INFERENCEX_COLUMNS),
        "framework": engine,
        "model": model_id if isinstance(model_id, str) else None,
        "isl": mean_len(tin), "osl": mean_len(tout), "conc": conc,
        "date": bench_date(rec.get("date"), where, at),
        # the GPUs that served it (the divisor above); the rest of the layout is not recorded
        "num_prefill_gpu": gpus, "num_decode_gpu": gpus,
        "tput_per_gpu": total / gpus, "output_tput_per_gpu": out_tput / gpus,
        "input_tput_per_gpu": None if in_tput is None else in_tput / gpus,
        "median_intvty": 1000.0 / tpot_ms,
        "p90_intvty": None if p90_tpot is None else 1000.0 / p90_tpot,
        "median_tpot": tpot_ms / 1000.0, "median_ttft": ms("median_ttft_ms"),
        "p90_ttft": p90_ttft, "p99_ttft": ms("p99_ttft_ms"),
        "median_e2el": ms(e2e[0]), "p90_e2el": ms(e2e[1]), "median_itl": ms("median_itl_ms"),
        "source_format": kind, "source_row": at,
    }


def bench_date(value: object, where: _Where | None = None, at: int | None = None
               ) -> str | None:
    """A bench result's ``date`` as an ISO day: vLLM writes ``YYYYMMDD-HHMMSS``; anything
    else that is not already ``YYYY-MM-DD...`` is dropped (the date only ages the engine).
    A day that does not exist (2026-13-45) is refused, naming the field, when ``where``
    is given (it was stored, and ``serving fit`` failed on it later)."""
    if not isinstance(value, str):
        return None
    v = value.strip()
    day = None
    if len(v) >= 8 and v[:8].isdigit():
        day = f"{v[:4]}-{v[4:6]}-{v[6:8]}"
    elif len(v) >= 10 and v[4] == "-" and v[7] == "-" and (v[:4] + v[5:7] + v[8:10]).isdigit():
        day = v[:10]
    if day is not None and date_problem(day) is not None:
        if where is not None:
            raise where.err(at, "date", f"{value!r} is not a day that exists")
        return None
    return day


def date_problem(value: str) -> str | None:
    """Why ``value`` is not an ISO day (``YYYY-MM-DD``, optionally followed by a time),
    or None."""
    import datetime

    try:
        datetime.date.fromisoformat(value.strip()[:10])
    except ValueError:
        return f"{value!r} is not a date (YYYY-MM-DD) that exists"
    return None


#: The column names ``cost-at-interactivity`` used to ask for, mapped to InferenceX's.
RENAMED = {"engine": "framework", "concurrency": "conc",
           "median_interactivity": "median_intvty", "p90_ttft_s": "p90_ttft"}


def _from_frame(df: pl.DataFrame, where: _Where) -> pl.DataFrame:
    """A frame with InferenceX columns (strings or typed; or the renamed layout)."""
    renames = {old: new for old, new in RENAMED.items()
               if old in df.columns and new not in df.columns}
    given = df.columns
    df = df.rename(renames)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise where.err(None, missing[0], f"missing column; need InferenceX columns "
                        f"{list(REQUIRED)} (and hardware, framework, conc, ...); the table "
                        f"has {given[:15]}{' ...' if len(given) > 15 else ''}")
    if "source_format" not in df.columns:
        df = df.with_columns(pl.lit("inferencex").alias("source_format"))
    if "source_row" not in df.columns:
        df = df.with_columns(pl.int_range(1, df.height + 1, dtype=pl.Int64).alias("source_row"))
    return _cast_frame(df, where)


def _cast_rows(rows: list[dict], where: _Where) -> pl.DataFrame:
    if not rows:
        raise where.err(None, None, "no points")
    data = {c: [r.get(c) for r in rows] for c in POINT_COLUMNS}
    # JSON values may be of any type: check them one by one, naming the row
    for c, dtype in POINT_COLUMNS.items():
        for r in rows:
            v = r.get(c)
            if v is None:
                continue
            if dtype == STRING and not isinstance(v, str):
                raise where.err(r["source_row"], c, f"expected a string, got {v!r}"[:120])
            if dtype == BOOL and not isinstance(v, bool):
                raise where.err(r["source_row"], c, f"expected true/false, got {v!r}"[:120])
            if dtype == INT and (isinstance(v, bool) or not isinstance(v, int)
                                 or not -(1 << 63) <= v < 1 << 63):
                raise where.err(r["source_row"], c, f"expected an integer, got {v!r}"[:120])
            if dtype == FLOAT and not _finite(v):
                raise where.err(r["source_row"], c, f"expected a finite number, got {v!r}"
                                [:120])
    df = pl.DataFrame([pl.Series(c, data[c], dtype=t, strict=False)
                       for c, t in POINT_COLUMNS.items()])
    return _check_values(df, where)


def _cast_frame(df: pl.DataFrame, where: _Where) -> pl.DataFrame:
    cols = []
    for c, dtype in POINT_COLUMNS.items():
        if c not in df.columns:
            cols.append(pl.Series(c, [None] * df.height, dtype=dtype))
            continue
        s = df[c]
        if s.dtype == dtype:
            cols.append(s)
            continue
        if dtype == BOOL and s.dtype == pl.String:
            low = s.str.strip_chars().str.to_lowercase()
            ok = low.is_in(["true", "false", "1", "0"]) | low.is_null() | (low == "")
            out = pl.when(low == "").then(None).otherwise(low.is_in(["true", "1"]))
            out = pl.select(out.alias(c)).to_series()
        elif s.dtype == pl.String:
            stripped = s.str.strip_chars()
            blank = stripped.is_null() | (stripped == "")
            out = pl.select(pl.when(blank).then(None).otherwise(stripped)).to_series()
            out = out.cast(dtype, strict=False) if dtype != STRING else out
            ok = blank | out.is_not_null()
            if dtype == FLOAT:
                ok = ok & (blank | out.is_finite().fill_null(False))
        else:
            out = s.cast(dtype, strict=False)
            ok = s.is_null() | out.is_not_null()
        bad = (~ok).arg_true()
        if bad.len():
            i = int(bad[0])
            want = {STRING: "text", BOOL: "true/false", INT: "an integer",
                    FLOAT: "a finite number"}[dtype]
            raise where.err(int(df["source_row"][i]) if "source_row" in df.columns else i + 1,
                            c, f"{s[i]!r} is not {want}"[:160])
        cols.append(out.alias(c))
    return _check_values(pl.DataFrame(cols), where)


MAX_INTVTY = 1e5
"""Most tokens/s per user (a 10 us TPOT): ~300x the highest InferenceX reports."""
TPUT_COLUMNS = ("tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu")


def point_problem(df: pl.DataFrame) -> tuple[int, str, str] | None:
    """The first (row index, field, why) of a measured point no measurement can have: a
    throughput beyond :data:`MAX_TPUT_PER_GPU`, an interactivity beyond
    :data:`MAX_INTVTY`, a date that does not exist; None when every row is possible.
    Shared by ``ingest points`` and the readers of ``serving fit`` / ``cost compare``."""
    limits = {**dict.fromkeys(TPUT_COLUMNS, MAX_TPUT_PER_GPU),
              "median_intvty": MAX_INTVTY, "p90_intvty": MAX_INTVTY}
    for c, hi in limits.items():
        if c not in df.columns:
            continue
        v = df[c].cast(pl.Float64, strict=False)
        bad = (v > hi).fill_null(False).arg_true()
        if bad.len():
            i = int(bad[0])
            return i, c, f"{v[i]:g} is beyond any measurement (at most {hi:g})"
    if "date" in df.columns:
        for i, d in enumerate(df["date"].cast(pl.String).to_list()):
            if d is not None and d.strip() and (why := date_problem(d)) is not None:
                return i, "date", why
    return None


def _check_values(df: pl.DataFrame, where: _Where) -> pl.DataFrame:
    """Every point needs a positive throughput and interactivity; counts are >= 1."""
    if df.height == 0:
        raise where.err(None, None, "no points")
    for c in REQUIRED:
        bad = (df[c].is_null() | ~(df[c] > 0).fill_null(False)).arg_true()
        if bad.len():
            i = int(bad[0])
            raise where.err(int(df["source_row"][i]), c,
                            f"must be a positive number, got {df[c][i]!r}")
    if (found := point_problem(df)) is not None:
        i, c, msg = found
        raise where.err(int(df["source_row"][i]), c, msg)
    for c in ("isl", "osl", "conc", "num_prefill_gpu", "num_decode_gpu", "prefill_tp",
              "prefill_ep", "decode_tp", "decode_ep"):
        bad = (df[c] < 1).fill_null(False).arg_true()
        if bad.len():
            i = int(bad[0])
            raise where.err(int(df["source_row"][i]), c, f"must be >= 1, got {df[c][i]}")
    for c, t in INFERENCEX_COLUMNS.items():
        if t == FLOAT and c not in REQUIRED:
            bad = (df[c] < 0).fill_null(False).arg_true()
            if bad.len():
                i = int(bad[0])
                raise where.err(int(df["source_row"][i]), c, f"must be >= 0, got {df[c][i]}")
    return df


def _finish(df: pl.DataFrame, fill: dict[str, str | None], where: _Where) -> pl.DataFrame:
    for c, v in fill.items():
        if v is not None:
            if not isinstance(v, str) or not v.strip():
                raise where.err(None, None, f"{c} must be a non-empty name, got {v!r}")
            df = df.with_columns(pl.col(c).fill_null(v.strip().lower()))
    return df.select(list(POINT_COLUMNS))


def _timeline(path: Path, trace: str, rec: dict) -> pa.Table:
    """The per-request lists of one bench result as a request timeline."""
    where = _Where(path, "line")
    at = rec["at"]
    lens = {}
    for key in ("input_lens", "output_lens"):
        v = rec.get(key)
        if not isinstance(v, list):
            raise where.err(at, key, "expected a list of token counts")
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x < 1 << 63:
                raise where.err(at, f"{key}[{i}]", f"expected a token count, got {x!r}"[:100])
        lens[key] = v
    n = len(lens["input_lens"])
    if len(lens["output_lens"]) != n:
        raise where.err(at, "output_lens", f"{len(lens['output_lens'])} values for {n} "
                        "input_lens")
    if n == 0:
        raise where.err(at, "input_lens", "empty")
    starts = rec.get("start_times")
    ids = np.arange(n)
    if starts is not None and (not isinstance(starts, list) or len(starts) != n):
        got = f"{len(starts)} values" if isinstance(starts, list) else repr(starts)[:40]
        raise where.err(at, "start_times", f"{got} for {n} requests (input_lens): every "
                        "request needs its send time")
    if starts is not None:
        for i, x in enumerate(starts):
            if not _finite(x):
                raise where.err(at, f"start_times[{i}]", f"expected a time in s, got {x!r}")
        t = np.asarray(starts, np.float64)
        ids = np.argsort(t, kind="stable")
        with np.errstate(over="ignore"):
            arrival_np = t[ids] - t[ids[0]]
        if not np.isfinite(arrival_np).all():  # e.g. -1e308 and 1e308: the span is inf
            raise where.err(at, "start_times", "the send times span more than a float "
                            "holds (an infinite arrival_s)")
        arrival = arrival_np.tolist()
    else:
        arrival = [0.0] * n
        note(f"{path}:{at}: the result records no send times: every request's arrival_s is "
             "0 (replay the timeline closed-loop, e.g. `replay tiers --concurrency N`)")
    errors = rec.get("errors")
    failed = sum(1 for e in errors if e) if isinstance(errors, list) else 0
    if failed:
        note(f"{path}:{at}: kept {failed} failed request(s) (non-empty errors) of {n}")
    inp = [lens["input_lens"][i] for i in ids]
    out = [lens["output_lens"][i] for i in ids]
    table = requests_table(trace, arrival, inp, out, None, None)
    return table.set_column(1, "request_id", pa.array(ids.astype(np.int64), pa.int64()))


def read(path: Path, name: str, *, hardware: str | None = None, gpus: int | None = None,
         framework: str | None = None, model: str | None = None,
         precision: str | None = None, tp: int | None = None, ep: int | None = None,
         dp_attention: bool | None = None, spec_method: str | None = None
         ) -> dict[str, pa.Table]:
    """The ``measured_points`` rows of ``path`` (and, for a bench result with per-request
    lists, its ``requests`` timeline under the same name). Given ``tp``, bench rows also
    store their server's layout (``ep``, ``dp_attention``, ``spec_method`` default to the
    engines' defaults, noted), so the table serves ``serving fit`` without further flags."""
    from toolkit.schema import MEASURED_POINTS

    df, details = _read_file(path, gpus, framework)
    df = _finish(df, {"hardware": hardware, "framework": framework, "model": model,
                      "precision": precision}, _Where(path, "row"))
    if tp is not None or ep is not None or dp_attention is not None or spec_method:
        if tp is None:
            raise TraceFormatError(path, None, "decode_tp", "--ep, --dp-attention and "
                                   "--spec-method describe a layout: give --tp N with them")
        try:
            df, said = fill_bench_layout(df, BenchLayout(gpus=gpus, tp=tp, ep=ep,
                                                         dp_attention=dp_attention,
                                                         spec_method=spec_method),
                                         str(path), require=False, resolve=False)
        except ValueError as e:
            raise TraceFormatError(path, None, None, str(e)) from None
        for n in said:
            note(n)
    df = df.with_columns(pl.lit(name).alias("name"), pl.lit(str(path)).alias("source"))
    tables = {"measured_points": df.select(MEASURED_POINTS.names).to_arrow()
              .cast(MEASURED_POINTS)}
    if details:
        tables["requests"] = _timeline(path, name, details[0])
        tables["request_traces"] = pa.table({"trace": [name], "format": [details[0]["kind"]],
                                             "source": [str(path)], "synthetic": [False]})
        note(f"{path}: stored the per-request lists of line {details[0]['at']} as the request "
             f"timeline requests/{name} ({tables['requests'].num_rows:,} requests)")
    return tables


READER = Reader("points", "measured_points", read,
                "Measured serving points: InferenceX CSV/JSON, sglang.bench_serving JSONL, "
                "vllm bench serve JSON")
