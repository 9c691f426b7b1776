"""Decode-step and prefill times of one deployment, from the fitted serving model.

Why this module: the tier replay's service times, HiSparse stall pricing, Engram pricing and
the demo all ask the same questions: "how long is a decode step of model M on hardware H at
batch B and context L, with these host misses?" and "how long does a prefill of N tokens
take?". They ask here and nowhere else, so every time the toolkit reports comes from one
model: the step-level serving model (:mod:`toolkit.serving.model`) with its efficiencies
fitted on the bundled InferenceX DeepSeek-R1 points (:func:`toolkit.serving.params.bundled_params`,
``kind = "fitted"``). Model and hardware enter through their specs (``toolkit/models``,
``toolkit/hardware``); a model that was never measured (GLM-5.x) uses its own specs with the
efficiencies of that fit.

How: each question becomes rows in InferenceX's column layout (one per point, vectorised),
resolved by :func:`toolkit.serving.layout.design` and evaluated by
:func:`toolkit.serving.model.decode_terms` / :func:`~toolkit.serving.model.prefill_terms`.
The callers see only :class:`Deployment`, :func:`decode` and :func:`prefill`, so the model's
internals can change behind them.

Conventions (labelled):

* A decode step here is a **decode-only** step (a disaggregated decode instance): no prefill
  tokens ride along; callers price prefill separately with :func:`prefill`.
* ``context_tokens`` is the mean context of the requests in the step; the rows carry
  ``isl = context - 1`` and ``osl = 2`` so the model's mean context ``isl + osl / 2`` is
  exactly ``context_tokens``.
* HiSparse misses enter as host rows fetched per request per layer per step; a per-layer
  tuple is averaged over the layers (the step model fetches every layer's rows with one
  round trip per layer).
* ``batch_per_gpu`` is the instance's batch divided by its GPUs, so decode tokens/s/GPU is
  ``batch_per_gpu / TPOT`` with DP or TP attention alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from toolkit.errors import ToolkitError
from toolkit.hardware import HardwareSpec, get_hardware
from toolkit.models import ModelSpec, get_model
from toolkit.registry import RegistryError
from toolkit.serving.layout import design
from toolkit.serving.model import decode_terms, max_batch, prefill_terms
from toolkit.serving.params import ServingParams, bundled_params
from toolkit.serving.points import validate
from toolkit.serving.predict import levels


class ScenarioError(ToolkitError):
    """A scenario the serving model cannot evaluate (bad shape, unknown name, bad value)."""


@dataclass(frozen=True)
class Deployment:
    """One serving instance: what is served, on what, with which engine and layout.

    Attributes:
        model: registered model name (``toolkit models list``).
        hardware: registered accelerator name (``toolkit hardware list``).
        engine: engine whose fitted terms apply (``sglang``, ``trt``, ``vllm``, ``atom``,
            ``dynamo-sglang``, ...); an engine without fitted terms uses the shared ones.
        precision: weight precision: fp8 | fp4 | bf16.
        kv_dtype: KV-cache dtype: fp8 | bf16.
        gpus_per_instance: GPUs of one instance (tensor/expert parallel width).
        dp_attention: data-parallel attention (each GPU holds its own requests' KV) instead
            of tensor-parallel attention (every GPU reads every request's latent rows).
        expert_parallel: MoE experts sharded over the GPUs (dispatch + combine) instead of
            tensor-parallel MoE (all-reduce).
        mtp: multi-token prediction (drafts and accepted tokens per step from the recipe
            defaults, :mod:`toolkit.serving.recipes`).
    """

    model: str
    hardware: str
    engine: str = "sglang"
    precision: str = "fp8"
    kv_dtype: str = "fp8"
    gpus_per_instance: int = 8
    dp_attention: bool = True
    expert_parallel: bool = True
    mtp: bool = False

    def __post_init__(self) -> None:
        for name in ("model", "hardware"):
            v = getattr(self, name)
            if isinstance(v, ModelSpec | HardwareSpec):
                object.__setattr__(self, name, _registered_name(v))
        if self.gpus_per_instance < 1:
            raise ScenarioError(f"gpus_per_instance must be >= 1, got {self.gpus_per_instance}")
        if self.kv_dtype not in ("fp8", "bf16"):
            raise ScenarioError(f"kv_dtype must be fp8 or bf16, got {self.kv_dtype!r}")
        _row(self)  # unknown names fail here, naming the field

    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def hardware_spec(self) -> HardwareSpec:
        return get_hardware(self.hardware)


def _registered_name(spec: ModelSpec | HardwareSpec) -> str:
    """The registry name of ``spec``; refuses a spec that differs from the registered one,
    because the serving model reads specs by name."""
    get = get_model if isinstance(spec, ModelSpec) else get_hardware
    try:
        same = get(spec.name) == spec
    except RegistryError:
        same = False
    if not same:
        raise ScenarioError(f"spec {spec.name!r} is not the registered one; register it "
                            "(toolkit.models.register_model / toolkit.hardware) to evaluate it")
    return spec.name


@dataclass(frozen=True)
class DecodeStep:
    """Decode-step figures of each evaluated point (arrays, one entry per point, per GPU).

    Attributes:
        terms: the model's per-term breakdown: bytes (``weight_bytes``, ``kv_bytes``,
            ``indexer_bytes``, ``comm_bytes``, ``miss_bytes``), FLOPs (``gemm_flops``,
            ``attention_flops``) and seconds (``t_dense_gemm_s``, ``t_moe_gemm_s``,
            ``t_attention_s``, ``t_comm_s``, ``t_overhead_s``, ``t_miss_s`` = exposed miss
            I/O, ``t_step_s``, ``tpot_s``, ...).
        batch_per_gpu: requests per GPU (instance batch / GPUs).
        max_batch_per_gpu: requests per GPU that fit in HBM at this context.
        params_kind, params_source: "fitted" and the fit it came from (or "assumed").
    """

    terms: dict[str, np.ndarray] = field(repr=False)
    batch_per_gpu: np.ndarray
    max_batch_per_gpu: np.ndarray
    layers: int
    params_kind: str
    params_source: str

    @property
    def t_step_s(self) -> np.ndarray:
        return self.terms["t_step_s"]

    @property
    def tpot_s(self) -> np.ndarray:
        """Seconds per output token of one request (step time / accepted tokens)."""
        return self.terms["tpot_s"]

    @property
    def t_miss_s(self) -> np.ndarray:
        """Host-fetch time the step waits for (all of it when synchronous)."""
        return self.terms["t_miss_s"]

    @property
    def t_work_s(self) -> np.ndarray:
        """Everything but miss I/O: overhead, GEMMs, attention, communication."""
        return self.terms["t_step_s"] - self.terms["t_miss_s"]

    @property
    def t_layer_s(self) -> np.ndarray:
        """Time of one layer's work, the step's work split evenly over its layers (overhead
        excluded; the step model is step-level, so layers are taken as equal)."""
        return (self.t_work_s - self.terms["t_overhead_s"]) / self.layers

    @property
    def tokens_per_s_per_gpu(self) -> np.ndarray:
        """Decode (output) tokens per second per GPU."""
        return self.batch_per_gpu / self.tpot_s

    @property
    def interactivity_tok_s_user(self) -> np.ndarray:
        return 1.0 / self.tpot_s

    def table(self) -> pl.DataFrame:
        """One row per point: batch, the figures above and every term."""
        head = {"batch_per_gpu": self.batch_per_gpu, "max_batch_per_gpu": self.max_batch_per_gpu,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "interactivity_tok_s_user": self.interactivity_tok_s_user}
        return pl.DataFrame({**head, **self.terms})


@lru_cache(maxsize=1)
def _bundled() -> ServingParams:
    return bundled_params()


def _params(params: ServingParams | None) -> ServingParams:
    return params if params is not None else _bundled()


@lru_cache(maxsize=256)
def _row(dep: Deployment) -> pl.DataFrame:
    """``dep`` as one validated InferenceX-column row (names checked against the registries)."""
    g, ep = dep.gpus_per_instance, dep.gpus_per_instance if dep.expert_parallel else 1
    one = pl.DataFrame({
        "hardware": [dep.hardware], "framework": [dep.engine], "model": [dep.model],
        "precision": [dep.precision], "spec_method": ["mtp" if dep.mtp else "none"],
        "disagg": [True], "is_multinode": [False], "isl": [2], "osl": [2], "conc": [1],
        "num_prefill_gpu": [g], "num_decode_gpu": [g], "prefill_tp": [g], "prefill_ep": [ep],
        "prefill_dp_attention": [dep.dp_attention], "decode_tp": [g], "decode_ep": [ep],
        "decode_dp_attention": [dep.dp_attention],
    })
    try:
        return validate(one, f"scenario {dep.model} on {dep.hardware} ({dep.engine})")
    except ToolkitError as e:
        raise ScenarioError(str(e).replace(" row 1 field", " field")) from None


def _frame(dep: Deployment, n: int, isl: np.ndarray, osl: np.ndarray, conc: np.ndarray,
           extra: dict[str, Any]) -> pl.DataFrame:
    """``n`` rows of ``dep`` with their own shape and what-if columns."""
    return _row(dep).select(pl.all().gather(np.zeros(n, dtype=np.int64))).with_columns(
        pl.Series("isl", isl.astype(np.int64)), pl.Series("osl", osl.astype(np.int64)),
        pl.Series("conc", conc.astype(np.int64)),
        *[pl.Series(k, np.broadcast_to(np.asarray(v, dtype=np.float64), (n,)))
          for k, v in extra.items()])


def _misses(misses: npt.ArrayLike | tuple[float, ...], layers: int, n: int,
            model: str) -> np.ndarray:
    """Mean host rows per request per layer, one per point.

    A tuple is one value per model layer (for every point); a 2-D array is points x layers;
    a scalar or 1-D array is already the per-layer mean (one per point)."""
    if isinstance(misses, tuple | list):
        arr = np.asarray(misses, dtype=np.float64)
        if arr.ndim != 1 or arr.size != layers:
            raise ScenarioError(f"misses_per_layer has {arr.size} entries; {model} has "
                                f"{layers} layers (give one per layer, or one number)")
        out = np.full(n, arr.mean())
    else:
        arr = np.asarray(misses, dtype=np.float64)
        if arr.ndim == 2:
            if arr.shape[1] != layers:
                raise ScenarioError(f"misses_per_layer has {arr.shape[1]} columns; {model} "
                                    f"has {layers} layers")
            arr = arr.mean(axis=1)
        out = np.broadcast_to(arr, (n,)).astype(np.float64)
    if np.any(~np.isfinite(out)) or np.any(out < 0):
        raise ScenarioError("misses_per_layer must be finite and >= 0")
    return out


def decode(
    dep: Deployment,
    *,
    context_tokens: npt.ArrayLike,
    batch_per_gpu: npt.ArrayLike | None = None,
    batch_per_instance: npt.ArrayLike | None = None,
    misses_per_layer: npt.ArrayLike | tuple[float, ...] = 0.0,
    device_buffer_tokens: npt.ArrayLike = 0,
    overlap: bool = False,
    params: ServingParams | None = None,
) -> DecodeStep:
    """Decode-step time, TPOT and tokens/s/GPU of ``dep``, with the term breakdown.

    Array arguments broadcast against each other: one point per entry.

    Args:
        context_tokens: mean context (history) of the batch's requests, >= 2.
        batch_per_gpu: requests per GPU (> 0); or give ``batch_per_instance`` instead.
        misses_per_layer: HiSparse host rows fetched per request per layer this step: one
            number (or one per point), a tuple with one entry per model layer, or a
            points x layers array; per-layer values are averaged.
        device_buffer_tokens: HiSparse device buffer per request per layer (0 = all KV in
            HBM); sets the HBM capacity (``max_batch_per_gpu``), not the step time.
        overlap: miss fetches overlap the layers' work (plan-then-IO prefetch) and only the
            excess shows; otherwise the step waits for all of them (HiSparse v1).
        params: fitted parameters; default the bundled fit.

    Raises:
        ScenarioError: both or neither batch given, a non-positive batch, context < 2, a
            per-layer tuple of the wrong length, or a name the serving model does not know.
    """
    if (batch_per_gpu is None) == (batch_per_instance is None):
        raise ScenarioError("give exactly one of batch_per_gpu and batch_per_instance")
    g = dep.gpus_per_instance
    per_gpu = batch_per_gpu is not None
    b = np.asarray(batch_per_gpu if per_gpu else batch_per_instance, dtype=np.float64)
    ctx = np.asarray(context_tokens, dtype=np.float64)
    if np.any(~(b > 0)) or np.any(~np.isfinite(b)):
        raise ScenarioError(f"batch must be > 0, got {b.min() if b.size else b}")
    if np.any(~(ctx >= 2)):
        raise ScenarioError(f"context_tokens must be >= 2, got {ctx.min()}")
    buf = np.asarray(device_buffer_tokens, dtype=np.float64)
    shapes = [np.shape(b), np.shape(ctx), np.shape(buf)]
    if not isinstance(misses_per_layer, tuple | list) and np.ndim(misses_per_layer) >= 1:
        shapes.append(np.shape(misses_per_layer)[:1])
    if any(len(s) > 1 for s in shapes):
        raise ScenarioError("batch, context and buffer must be numbers or 1-D arrays")
    try:
        n = (np.broadcast_shapes(*shapes) or (1,))[0]
    except ValueError:
        raise ScenarioError(f"point arrays of different lengths: {shapes}") from None
    spec = dep.model_spec
    miss = _misses(misses_per_layer, spec.num_layers, n, dep.model)
    b_inst = np.broadcast_to(b * g if per_gpu else b, (n,)).astype(np.float64)
    ctx = np.broadcast_to(np.round(ctx), (n,))
    isl = ctx - 1.0
    df = _frame(dep, n, isl, np.full(n, 2.0), np.maximum(np.round(b_inst), 1.0), {
        "miss_rows_per_layer": miss, "hisparse_overlap": float(overlap),
        "device_buffer_tokens": np.broadcast_to(buf, (n,))})
    d = design(df, kv_dtype=dep.kv_dtype)
    p = _params(params)
    terms = decode_terms(d, p.row_values(levels(d)), b_inst)
    return DecodeStep(
        terms={k: np.asarray(v, dtype=np.float64) + 0.0 * b_inst for k, v in terms.items()},
        batch_per_gpu=b_inst / g, max_batch_per_gpu=max_batch(d) / g,
        layers=spec.num_layers, params_kind=p.kind, params_source=p.source or p.fitted_on)


@dataclass(frozen=True)
class PrefillTime:
    """Prefill of one request on one instance (arrays, one entry per point).

    Attributes:
        t_s: seconds from the first to the last prompt chunk (compute + one weight read
            and one step overhead per chunk), without queueing or a KV transfer.
        gpu_s: GPU-seconds (``t_s`` x GPUs of the instance).
        kv_transfer_s: moving the prompt's whole KV to a decode instance, were the instance
            a disaggregated prefill (the model's prefill -> decode link and efficiency).
    """

    t_s: np.ndarray
    gpu_s: np.ndarray
    params_kind: str
    kv_transfer_s: np.ndarray | None = None


def prefill(dep: Deployment, *, new_tokens: npt.ArrayLike, cached_tokens: npt.ArrayLike = 0,
            params: ServingParams | None = None) -> PrefillTime:
    """Prefill time of ``new_tokens`` prompt tokens after ``cached_tokens`` already cached
    (attention still reads them), on one instance of ``dep``."""
    new = np.asarray(new_tokens, dtype=np.float64)
    cached = np.asarray(cached_tokens, dtype=np.float64)
    if np.any(~(new >= 1)) or np.any(~(cached >= 0)):
        raise ScenarioError("new_tokens must be >= 1 and cached_tokens >= 0")
    new, cached = np.broadcast_arrays(np.round(new), np.round(cached))
    new, cached = np.atleast_1d(new), np.atleast_1d(cached)
    n = new.size
    isl = new + cached
    df = _frame(dep, n, isl, np.full(n, 2.0), np.ones(n), {
        "cached_prefix_fraction": cached / isl, "host_prefix_fraction": 0.0})
    d = design(df, kv_dtype=dep.kv_dtype)
    p = _params(params)
    terms = prefill_terms(d, p.row_values(levels(d)))
    t = np.asarray(terms["t_prefill_s"], dtype=np.float64)
    return PrefillTime(t_s=t, gpu_s=t * d.g_pre, params_kind=p.kind,
                       kv_transfer_s=np.asarray(terms["t_kv_transfer_s"], dtype=np.float64))


def label(params: ServingParams | None = None) -> str:
    """One line saying where the times come from, for tables and reports."""
    p = _params(params)
    if p.kind == "fitted":
        return (f"serving model, efficiencies fitted on {p.fitted_on or p.source}; "
                "model and hardware from their specs")
    return "serving model with assumed (unfitted) efficiencies; model and hardware specs"
