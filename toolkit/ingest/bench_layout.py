"""What a benchmark result cannot say about the server it measured, given by the user.

``sglang.bench_serving`` and ``vllm bench serve`` record latencies and throughputs of a
client; the server's parallel layout (tensor / expert parallel size, DP attention), its GPU
count, the accelerator, the weights' precision and speculative decoding are not in the
file. The serving model needs every one of them, so they come from flags
(:class:`BenchLayout`), never from a guess: a field the model needs and nobody gave stops
the load with one line naming the file, the line and the flag to pass.

Only rows read from bench results (``source_format`` sglang-bench / vllm-bench) are
filled; InferenceX rows carry their own layout. docs/ingest.md lists each mapping.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import polars as pl

from toolkit.models import get_model
from toolkit.registry import RegistryError

#: ``source_format`` of rows read from bench results (the rows this module fills).
BENCH_FORMATS = ("sglang-bench", "vllm-bench")


@dataclass(frozen=True)
class BenchLayout:
    """The server behind a bench result, as the user states it (None: not given).

    Attributes:
        hardware: accelerator name (``toolkit hardware list``).
        framework: engine; bench results already name theirs (sglang, vllm), so this fills
            only rows without one.
        model: model name or alias; replaces a ``model_id`` (vLLM) that names no
            registered model.
        precision: weights' precision: fp4, fp8 or bf16.
        gpus: GPUs that served the benchmark (the divisor of every per-GPU throughput).
        tp: tensor-parallel size of the one aggregated instance (``--tp-size`` /
            ``--tensor-parallel-size``).
        ep: expert-parallel size (default 1, the engines' default).
        dp_attention: DP attention on (default off, the engines' default).
        spec_method: ``none`` or ``mtp`` (default none: no speculative decoding).
    """

    hardware: str | None = None
    framework: str | None = None
    model: str | None = None
    precision: str | None = None
    gpus: int | None = None
    tp: int | None = None
    ep: int | None = None
    dp_attention: bool | None = None
    spec_method: str | None = None

    def __post_init__(self) -> None:
        for f in ("hardware", "framework", "model", "precision", "spec_method"):
            v = getattr(self, f)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ValueError(f"--{flag(f)}: give a non-empty name, got {v!r}")
            if v is not None:
                object.__setattr__(self, f, v.strip().lower())
        for f in ("gpus", "tp", "ep"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"--{flag(f)}: give a positive integer, got {v!r}")

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


#: Engine defaults applied when a flag is not given (each applied default is reported).
DEFAULTS = {"ep": 1, "dp_attention": False, "spec_method": "none"}

#: The flag that gives each field (``ep`` -> ``--ep``); commands whose plain names are
#: taken prefix them (``cost compare --measured-tp``).
FLAGS = {"hardware": "hardware", "framework": "framework", "model": "model",
         "precision": "precision", "gpus": "gpus", "tp": "tp", "ep": "ep",
         "dp_attention": "dp-attention", "spec_method": "spec-method"}


def flag(field: str, prefix: str = "") -> str:
    return f"{prefix}{FLAGS[field]}"


class LayoutError(ValueError):
    """A bench row lacks something only the user can say (the message names the flag)."""


def resolve_model(name: str | None) -> str | None:
    """A registered model's canonical name for ``name`` or its last path part
    (``deepseek-ai/DeepSeek-R1`` -> ``dsr1`` through the alias ``deepseek-r1``); None when
    neither is registered."""
    if name is None:
        return None
    for candidate in (name, name.rsplit("/", 1)[-1]):
        try:
            return get_model(candidate.strip().lower()).name
        except RegistryError:
            continue
    return None


def fill_bench_layout(df: pl.DataFrame, layout: BenchLayout, where: str, *,
                      require: bool, prefix: str = "--", resolve: bool = True
                      ) -> tuple[pl.DataFrame, list[str]]:
    """Fill the layout and context columns of bench rows from ``layout``.

    Args:
        df: measured points in InferenceX columns with ``source_format`` and ``source_row``.
        layout: what the user said about the server.
        where: the file or table, for messages.
        require: refuse a bench row the serving model cannot describe (no ``tp``, no
            hardware, model or precision, ``gpus`` that differ from ``tp``); without it,
            fill what is given and leave the rest null (``ingest points``).
        prefix: how the command spells the flags (``--`` or ``--measured-``).
        resolve: replace model ids by registered names (off when storing a table, which
            keeps the file's own ``model_id``).

    Returns:
        The frame and the notes to show (defaults applied).

    Raises:
        LayoutError: one line naming ``where``, the line and the field, and the flag.
    """
    notes: list[str] = []
    bench = df["source_format"].is_in(list(BENCH_FORMATS))
    # context columns fill nulls in any row (bench results never name the hardware)
    for f in ("hardware", "framework", "precision"):
        v = getattr(layout, f)
        if v is not None:
            df = df.with_columns(pl.col(f).fill_null(v))
    given_model = (resolve_model(layout.model) if resolve else None) or layout.model
    models = []
    for m, b in zip(df["model"].to_list(), bench.to_list(), strict=True):
        known = resolve_model(m) if resolve else None
        # a bench's model_id is a repository path; the flag names it when no alias does
        models.append(known or (given_model if m is None or (b and given_model) else m))
    df = df.with_columns(pl.Series("model", models, dtype=pl.String))
    if not bench.any():
        return df, notes
    gpus = df["num_decode_gpu"]
    if layout.gpus is not None:
        clash = (bench & gpus.is_not_null() & (gpus != layout.gpus)).fill_null(False).arg_true()
        if clash.len():
            i = int(clash[0])
            raise LayoutError(f"{_at(df, i, where)} field 'num_decode_gpu': the row was "
                              f"stored with {gpus[i]} GPU(s) (its tput_per_gpu divides by "
                              f"them); {flag('gpus', prefix)} {layout.gpus} disagrees")
        df = df.with_columns([pl.when(bench).then(pl.col(c).fill_null(layout.gpus))
                              .otherwise(pl.col(c)).alias(c)
                              for c in ("num_prefill_gpu", "num_decode_gpu")])
    if not require and layout.tp is None:  # a front needs no layout: fill none
        return df, notes
    stored = {"ep": "decode_ep", "dp_attention": "decode_dp_attention",
              "spec_method": "spec_method"}
    used = []
    values = {}
    for f in ("tp", "ep", "dp_attention", "spec_method"):
        v = getattr(layout, f)
        if v is None and f in DEFAULTS:
            v = DEFAULTS[f]
            if (bench & df[stored[f]].is_null()).any():  # a default that fills something
                used.append(f"{flag(f, prefix)} {str(v).lower()}")
        values[f] = v
    fills = {"disagg": False, "is_multinode": False, "spec_method": values["spec_method"],
             "prefill_ep": values["ep"], "decode_ep": values["ep"],
             "prefill_dp_attention": values["dp_attention"],
             "decode_dp_attention": values["dp_attention"]}
    if values["tp"] is not None:
        fills.update(prefill_tp=values["tp"], decode_tp=values["tp"])
    df = df.with_columns([pl.when(bench).then(pl.col(c).fill_null(pl.lit(v)))
                          .otherwise(pl.col(c)).alias(c) for c, v in fills.items()])
    if used:
        notes.append(f"{where}: bench rows use the engines' defaults {', '.join(used)} "
                     "(give the flags if the server ran otherwise)")
    if require:
        _check_complete(df, bench, where, prefix)
    return df, notes


def _at(df: pl.DataFrame, i: int, where: str) -> str:
    unit = "line" if df["source_format"][i] in BENCH_FORMATS else "row"
    return f"{where}: {unit} {df['source_row'][i]}"


def _check_complete(df: pl.DataFrame, bench: pl.Series, where: str, prefix: str) -> None:
    """Every bench row carries what the serving model reads, and describes one aggregated
    instance of ``tp`` GPUs (the model's aggregated case)."""
    need = (("hardware", "hardware", "the accelerator that served the benchmark"),
            ("model", "model", "a registered model (toolkit models list)"),
            ("precision", "precision", "the weights' precision: fp4, fp8 or bf16"),
            ("num_decode_gpu", "gpus", "the GPUs that served it"),
            ("decode_tp", "tp", "the server's tensor-parallel size"))
    unknown = pl.Series([resolve_model(m) is None for m in df["model"].to_list()])
    for col, f, what in need:
        missing = df[col].is_null() | (unknown if col == "model" else False)
        bad = (bench & missing).fill_null(False).arg_true()
        if bad.len():
            i = int(bad[0])
            extra = (f" (its model_id {df['model'][i]!r} names no registered model)"
                     if col == "model" and df["model"][i] else "")
            raise LayoutError(f"{_at(df, i, where)} field {col!r}: the {df['source_format'][i]} "
                              f"result does not record {what}{extra}; pass "
                              f"{flag(f, prefix)}")
    bad = (bench & (df["decode_tp"] != df["num_decode_gpu"])).fill_null(False).arg_true()
    if bad.len():
        i = int(bad[0])
        raise LayoutError(f"{_at(df, i, where)} fields 'decode_tp', 'num_decode_gpu': "
                          f"{flag('tp', prefix)} {df['decode_tp'][i]} on "
                          f"{flag('gpus', prefix)} {df['num_decode_gpu'][i]}: the serving "
                          "model describes one aggregated instance of TP GPUs; benchmark one "
                          "instance (gpus = tp), with DP attention and EP inside it")
    bad = (bench & df["conc"].is_null()).fill_null(False).arg_true()
    if bad.len():
        i = int(bad[0])
        raise LayoutError(f"{_at(df, i, where)} field 'max_concurrency': null (a request-rate "
                          "run); the serving model needs the client's concurrency: rerun the "
                          "benchmark with --max-concurrency N")
