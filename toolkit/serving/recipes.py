"""Serving recipes as explicit inputs: MTP drafts and acceptance, KV-cache dtype, batch caps and
the engine's software version, per row and per ``cost compare`` call.

Why inputs and not fitted terms: a per-engine term fitted to sparse rows becomes a sink for
whatever the model lacks (an engine's MTP acceptance fitted at 1.68 on one engine and 2.20 on
another made one accelerator look 5x cheaper than a sibling with the same HBM bandwidth). A
recipe value is stated, sourced or labelled as an assumption, and can be changed by the user.

Optional row columns (InferenceX rows carry none of them; defaults below):

* ``mtp_draft_tokens``: draft tokens verified per MTP step;
* ``mtp_accept``: tokens accepted per MTP step (1 .. 1 + drafts);
* ``kv_dtype``: fp8 or bf16 KV cache;
* ``max_running_requests``: the engine's cap on requests decoding per instance (default: the
  engine's own, :func:`engine_caps`);
* ``engine_date``: the engine build's date (``YYYY-MM-DD``); else the row's ``date`` (the run
  date, a proxy for the image it pulled); else the reference date (age 0);
* ``scheduler_recv_interval``: SGLang's ``--scheduler-recv-interval`` (decode iterations between
  two polls for new requests) on an aggregated SGLang instance;
* ``adp_balance_timeout_iters``: TensorRT-LLM's ``attention_dp_config.timeout_iters`` (with
  ``enable_balance``: iterations a prompt may be held until every attention-DP rank has one)
  on an aggregated TensorRT-LLM instance with attention data parallelism.
* ``prefill_max_tokens`` / ``prefill_max_prompts``: tokens and prompts one disaggregated
  prefill forward may take (default: :data:`PREFILL_BATCH_TRT` for Dynamo + TensorRT-LLM,
  :func:`sglang_recipe_limits` for InferenceX's dated Dynamo + SGLang rows, else one
  8,192-token chunk of as many prompts as fit);
* ``prefill_instance_gpus`` / ``decode_instance_gpus``: GPUs per prefill / decode instance of
  a disaggregated row (default: :data:`INSTANCE_GPUS` for InferenceX recipes whose ``tp`` /
  ``ep`` do not give it, else the reported ``max(tp, ep)`` widened to hold the weights);
* ``random_range_ratio``: the benchmark client's ``--random-range-ratio``: prompt and output
  lengths uniform in ``[ratio L, L]`` (default 0.8, InferenceX's configs; 1 = fixed lengths).

The last two gate when a waiting prompt may start its prefill (see
:mod:`toolkit.serving.client`); 1 or 0 turns a gate off.
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import cache

import numpy as np
import polars as pl

MTP_DRAFT_TOKENS = 1
"""Default draft tokens per MTP step: DeepSeek-V3 ships one MTP module (D = 1; DeepSeek-V3
Technical Report, arXiv:2412.19437, section 2.2)."""

MTP_ACCEPT = 1.85
"""Default tokens accepted per MTP step with one draft: DeepSeek-V3 Technical Report,
arXiv:2412.19437, section 5.4.3 ("the acceptance rate of the second token prediction ranges
between 85% and 90%"), lower end: 1 + 0.85."""

KV_DTYPE = "fp8"
"""Default KV-cache dtype (assumed: the FP8 KV caches of the InferenceX DeepSeek recipes)."""

KV_DTYPES = ("fp8", "bf16")

VERSION_RE = re.compile(r"(?:^|[:/_-])v?(\d+\.\d+(?:\.\d+)?(?:\.?(?:post|rc)\d+)*)")
"""An engine version inside an image reference: ``lmsysorg/sglang:v0.5.12-rocm700-mi35x``
-> ``0.5.12``; ``nvcr.io/.../tensorrt-llm/release:1.1.0rc2.post2`` -> ``1.1.0rc2.post2``."""


RECV_INTERVAL_HARDWARE = ("b200", "b300")
"""Accelerators whose InferenceX SGLang scripts set ``--scheduler-recv-interval``
(SemiAnalysisAI/InferenceX ``benchmarks/single_node/fixed_seq_len/dsr1_{fp4,fp8}_{b200,b300}
[_mtp].sh`` @ 843c625, used since 2025-09): 30 at 16 or more users and 10 below; 10 on a TP4
FP8 instance; 1 (off) with DP attention. The H200 and AMD scripts leave SGLang's default, 1."""

ADP_BALANCE_TIMEOUT_ITERS = 60
"""InferenceX's TensorRT-LLM DeepSeek-R1 scripts with DP attention set ``attention_dp_config:
{enable_balance: true, timeout_iters: 60, batching_wait_iters: 0}``
(``dsr1_{fp4,fp8}_{b200,h200}_trt[_mtp].sh`` @ 843c625, since 2025-09)."""


PREFILL_BATCH_TRT: dict[tuple[str, str, str], tuple[int, int]] = {
    # (hardware, precision, ISL/OSL) -> (max_num_tokens, max_batch_size) of the prefill
    # ("ctx") workers in InferenceX's Dynamo + TensorRT-LLM DeepSeek-R1 recipes
    # (SemiAnalysisAI/InferenceX benchmarks/multi_node/srt-slurm-recipes/dsr1/trtllm/
    # <hw>-<precision>/<isl><osl>/disagg/{stp,mtp}/ctx*.yaml, read at each file's last
    # version, before they left the tree; every recipe of a directory agrees, but one of
    # b200-fp8 8k1k's 15, which allows 64 prompts)
    ("b200", "fp4", "1k1k"): (10240, 8), ("b200", "fp4", "8k1k"): (16896, 2),
    ("b200", "fp8", "1k1k"): (16384, 16), ("b200", "fp8", "8k1k"): (8320, 1),
    ("b300", "fp4", "1k1k"): (10240, 8), ("b300", "fp4", "8k1k"): (16896, 2),
    ("b300", "fp8", "1k1k"): (8320, 8), ("b300", "fp8", "8k1k"): (8320, 8),
    ("gb200", "fp4", "1k1k"): (16384, 16), ("gb200", "fp4", "8k1k"): (16640, 2),
    ("gb200", "fp8", "1k1k"): (16384, 16), ("gb200", "fp8", "8k1k"): (16384, 2),
    ("gb300", "fp4", "1k1k"): (16384, 16), ("gb300", "fp4", "8k1k"): (16640, 2),
    ("gb300", "fp8", "1k1k"): (16384, 16), ("gb300", "fp8", "8k1k"): (16384, 2),
    ("h100", "fp8", "1k1k"): (2048, 2), ("h100", "fp8", "8k1k"): (8224, 1),
    ("h200", "fp8", "1k1k"): (8192, 8), ("h200", "fp8", "8k1k"): (16640, 2),
}
"""A disaggregated TensorRT-LLM prefill worker's batch: tokens and prompts per forward. Other
engines and shapes keep the client's default (one 8,192-token chunk, as many prompts as fit);
the optional row columns ``prefill_max_tokens`` / ``prefill_max_prompts`` override both."""


GB200_GPUS_PER_NODE = 4
"""GPUs per GB200 compute tray (a Slurm node of InferenceX's GB200 runner): its Dynamo +
TensorRT-LLM script on the same runner sets ``ntasks_per_node=4`` and places a worker of
``tp`` GPUs on ``(tp + 3) / 4`` nodes (SemiAnalysisAI/InferenceX
``benchmarks/dsr1_fp4_gb200_dynamo-trt_slurm.sh`` @ be3394ea5); the bundled rows' pools are
the configs' ``*_NODES`` x 4 (e.g. ``DECODE_NODES=12`` -> 48 decode GPUs)."""

MI355X_GPUS_PER_NODE = 8
"""GPUs per MI355X node of InferenceX's MoRI-SGLang runs: ``GPUS_PER_NODE`` defaults to 8
("8 for MI355X"), and a worker takes ``*_NODES x GPUS_PER_NODE / *_WORKERS`` GPUs
(SemiAnalysisAI/InferenceX ``benchmarks/multi_node/amd_utils/submit.sh`` @ bba936ee0)."""

_NO_LAYOUT = (1, 1)  # (tp, ep) the early GB200 Dynamo-SGLang configs exported on both sides
_GB200 = ("dsr1", "gb200", "dynamo-sglang")
_MI355X = ("dsr1", "mi355x", "mori-sglang")

INSTANCE_GPUS: dict[tuple[str, str, str, str, str, int, int, tuple[int, int], tuple[int, int]],
                    tuple[int, int]] = {
    # (model, hardware, framework, precision, ISL/OSL, num_prefill_gpu, num_decode_gpu,
    #  reported prefill (tp, ep), reported decode (tp, ep)) -> (GPUs per prefill instance,
    #  GPUs per decode instance) = *_NODES x GPUs per node / num-worker of one search-space
    # block of InferenceX's config (every concurrency of the block), read at the commit in
    # force on the rows' run dates.
    #
    # GB200 Dynamo-SGLang, image lmsysorg/sglang:v0.5.5.post2: "tp, ep, and dp-attn do nothing
    # because they are hardcoded in" the launch scripts; the configs set tp = ep = 1 and the
    # runs exported that, though each block's comment names a wide-EP layout. InferenceX later
    # set ep to exactly these widths ("fix: update ep metadata in gb200 dynamo sglang configs
    # to match comments (#486)", a27b37e5c, 2026-01-19); rows run after it report their ep.
    # .github/configs/nvidia-master.yaml dsr1-fp8-gb200-dynamo-sglang @ be3394ea5 (2025-12-21;
    # the 8K/1K low-latency block also @ 84320a0aa, 2025-12-19, then to 512 users):
    (*_GB200, "fp8", "1k1k", 16, 32, _NO_LAYOUT, _NO_LAYOUT): (8, 32),  # 2 P / 4 nodes, 1 D / 8
    (*_GB200, "fp8", "1k1k", 4, 16, _NO_LAYOUT, _NO_LAYOUT): (4, 4),  # 1 P / 1 node, 4 D / 4
    (*_GB200, "fp8", "1k1k", 24, 48, _NO_LAYOUT, _NO_LAYOUT): (8, 48),  # 3 P / 6, 1 D / 12
    (*_GB200, "fp8", "8k1k", 4, 4, _NO_LAYOUT, _NO_LAYOUT): (4, 4),  # 1 P / 1, 1 D / 1
    (*_GB200, "fp8", "8k1k", 40, 32, _NO_LAYOUT, _NO_LAYOUT): (8, 32),  # 5 P / 10, 1 D / 8
    # dsr1-fp4-gb200-dynamo-sglang @ be3394ea5 (unchanged 2025-12-18 .. 2026-01-19):
    (*_GB200, "fp4", "1k1k", 4, 8, _NO_LAYOUT, _NO_LAYOUT): (4, 4),  # 1 P / 1 node, 2 D / 2
    (*_GB200, "fp4", "1k1k", 16, 48, _NO_LAYOUT, _NO_LAYOUT): (4, 48),  # 4 P / 4, 1 D / 12
    (*_GB200, "fp4", "1k1k", 16, 32, _NO_LAYOUT, _NO_LAYOUT): (4, 32),  # 4 P / 4, 1 D / 8
    (*_GB200, "fp4", "8k1k", 4, 16, _NO_LAYOUT, _NO_LAYOUT): (4, 4),  # 1 P / 1, 4 D / 4
    (*_GB200, "fp4", "8k1k", 24, 48, _NO_LAYOUT, _NO_LAYOUT): (4, 48),  # 6 P / 6, 1 D / 12
    (*_GB200, "fp4", "8k1k", 40, 32, _NO_LAYOUT, _NO_LAYOUT): (4, 32),  # 10 P / 10, 1 D / 8
    # MI355X MoRI-SGLang ("sglang-disagg" then): a worker is *_NODES x 8 / num-worker GPUs,
    # the larger of the reported tp and ep (the config's tp/ep switch EP and DP attention on).
    # .github/configs/amd-master.yaml dsr1-fp8-mi355x-sglang-disagg @ bba936ee0 (2026-02-23):
    (*_MI355X, "fp8", "1k1k", 8, 16, (8, 1), (1, 8)): (8, 8),  # 1 P / 1 node, 2 D / 2 nodes
    (*_MI355X, "fp8", "8k1k", 16, 8, (8, 1), (1, 8)): (8, 8),  # 2 P / 2 nodes, 1 D / 1 node
    # dsr1-fp4-mi355x-sglang-disagg @ ee032b37f (2026-02-13):
    (*_MI355X, "fp4", "1k1k", 8, 16, (1, 8), (1, 8)): (8, 8),  # 1 P / 1 node, 2 D / 2 nodes
}
"""GPUs per prefill and decode instance of disaggregated InferenceX recipes whose exported
``tp`` / ``ep`` do not give the instance width (GB200 Dynamo-SGLang, December 2025) or give
it only as the larger of the two (MI355X MoRI-SGLang, ``tp`` 1 with ``ep`` 8). Other rows:
``max(tp, ep)``, widened to hold the weights (:func:`toolkit.serving.layout.design`); the
optional row columns ``prefill_instance_gpus`` / ``decode_instance_gpus`` override both."""


ENGINE_FAMILY: dict[str, str] = {
    "sglang": "sglang", "dynamo-sglang": "sglang", "mori-sglang": "sglang",
    "trt": "trt", "dynamo-trt": "trt", "vllm": "vllm", "dynamo-vllm": "vllm",
}
"""InferenceX framework labels -> the engine whose scheduler caps the running requests."""

SGLANG_REQ_POOL_MIN, SGLANG_REQ_POOL_MAX, SGLANG_REQ_POOL_PER_CONTEXT = 2048, 4096, 512
"""SGLang's default cap on running requests per scheduler (one per attention-DP rank) when
``--max-running-requests`` is not given: its request pool, ``min(max(int(KV tokens /
context_len x 512), 2048), 4096)`` (sgl-project/sglang
``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py`` ``init_memory`` @
001ccef), further bounded by ``KV tokens // 2`` (``model_runner.py``), which the KV pool of
any real context binds first."""

TRT_MAX_BATCH_SIZE = 2048
"""TensorRT-LLM's default ``max_batch_size`` (requests one executor schedules):
``BuildConfig.max_batch_size = 2048`` (NVIDIA/TensorRT-LLM ``tensorrt_llm/builder.py`` @
008b2b8), the default of ``trtllm-serve --max_batch_size``; per attention-DP rank
(assumed: each rank runs its own executor loop)."""

VLLM_MAX_NUM_SEQS = 256
VLLM_MAX_NUM_SEQS_LARGE = 1024
VLLM_LARGE_GPU_BYTES = 70 * 2**30
"""vLLM's default ``max_num_seqs`` for the OpenAI server: 1,024 on GPUs with >= 70 GiB that
are not A100s, else 256 (vllm-project/vllm ``vllm/engine/arg_utils.py``
``get_batch_defaults`` @ 99d7eb5); per data-parallel engine."""

MORI_DECODE_CAPS = {"dp_per_rank": 160, "ep_only": 256, "no_dp": 128}
"""``--max-running-requests`` of InferenceX's MoRI-SGLang DeepSeek-R1 decode workers on MI355X:
with DP attention the end of ``cuda_graph_bs_range`` (1-160) x the worker's TP size, with
expert parallelism only 256, else 128 (SemiAnalysisAI/InferenceX
``benchmarks/multi_node/amd_utils/models.yaml`` and ``server.sh`` @ 749096c, 2026-03; the
same values at 843c625). From 2026-05-27 (InferenceX 820adf2, "[AMD] Fix eval for dsr1 fp4")
a decode worker with both DP attention and expert parallelism takes the benchmark's largest
concurrency instead: no cap below the users (:data:`MORI_DP_EP_UNCAPPED_FROM`)."""

MORI_DP_EP_UNCAPPED_FROM = "2026-05-27"

TRT_DECODE_BATCHES_FILE = "dynamo_trt_decode_batches.csv"
"""The decode workers' ``max_batch_size`` of InferenceX's Dynamo + TensorRT-LLM DeepSeek-R1
recipes (``toolkit/data/inferencex/``; one row per recipe layout and concurrency, each with
its recipe file and the InferenceX commit, from every version of ``nvidia-master.yaml``:
``benchmarks/inferencex_trt_batches.py``). The recipes set it far below the engine default
(``ctx1_gen3_tep16_batch1``: three decode workers of one request each), and a user beyond the
workers' slots waits for a whole decode before its prefill result is used."""
SGLANG_RECIPES_FILE = "dynamo_sglang_recipes.csv"
"""The decode workers' ``--max-running-requests`` and the prefill workers'
``--max-prefill-tokens``, ``--chunked-prefill-size`` and ``--max-running-requests`` of
InferenceX's Dynamo + SGLang DeepSeek-R1 srt-slurm recipes (``toolkit/data/inferencex/``; one
row per recipe layout and concurrency, each with its recipe file and the InferenceX commit, from
every version of ``nvidia-master.yaml``: ``benchmarks/inferencex_sglang_recipes.py``)."""

TRT_RECIPE_KEYS = ("hardware", "precision", "isl", "osl", "spec_method", "conc",
                   "num_prefill_gpu", "num_decode_gpu", "decode_tp", "decode_dp_attention")


class RecipeError(ValueError):
    """A recipe value is out of range or an engine version is unknown."""


def parse_version(image: str | None) -> str | None:
    """The version in an image reference, or None when it carries none."""
    if not image:
        return None
    m = VERSION_RE.search(image.split("@")[0])
    return m.group(1) if m else None


def _days(date: str) -> float:
    return float(_dt.date.fromisoformat(date[:10]).toordinal())


def age_days(df: pl.DataFrame, reference_date: str) -> np.ndarray:
    """Days from each row's engine date back to ``reference_date``; negative for an engine
    newer than the reference (its fitted drift then applies forward, for at most a year)."""
    ref = _days(reference_date)
    dates = None
    for col in ("engine_date", "date"):
        if col in df.columns:
            s = df[col].cast(pl.String)
            dates = s if dates is None else dates.fill_null(s)
    if dates is None:
        return np.zeros(df.height)
    out = np.array([ref - _days(d) if d else 0.0 for d in dates.to_list()])
    return np.maximum(out, -365.0)


@cache
def _bundled_versions() -> dict[tuple[str, str], str]:
    """(engine, version) -> the earliest bundled run date that used it."""
    from toolkit.serving.points import bundled_points_path

    df = pl.read_csv(bundled_points_path(), columns=["framework", "image", "date"],
                     infer_schema_length=0)
    out: dict[tuple[str, str], str] = {}
    for eng, img, date in df.iter_rows():
        v = parse_version(img)
        if v and date:
            key = (eng, v)
            out[key] = min(out.get(key, date), date)
    return out


def version_date(engine: str, version: str) -> str:
    """The date an engine version stands for: a ``YYYY-MM-DD`` date as given, or the earliest
    bundled InferenceX run of that engine with that version.

    Raises:
        RecipeError: unknown version (the message lists the known ones).
    """
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", version):
        _dt.date.fromisoformat(version)
        return version
    v = parse_version(version) or version.lstrip("v")
    known = _bundled_versions()
    if (engine, v) in known:
        return known[(engine, v)]
    mine = sorted(k[1] for k in known if k[0] == engine)
    raise RecipeError(f"engine {engine!r} version {version!r} is unknown; give a date "
                      f"(YYYY-MM-DD) or one of: {', '.join(mine) or 'none bundled'}")


def mtp_inputs(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (draft tokens, accepted tokens) of MTP rows; (0, 1) for rows without MTP.

    Raises:
        RecipeError: acceptance outside ``1 .. 1 + drafts`` (row named).
    """
    n = df.height
    mtp = (df["spec_method"] == "mtp").to_numpy()

    def col(name: str, default: float) -> np.ndarray:
        if name in df.columns:
            return df[name].cast(pl.Float64, strict=False).fill_null(default).to_numpy()
        return np.full(n, default)

    drafts = col("mtp_draft_tokens", MTP_DRAFT_TOKENS)
    accept = col("mtp_accept", MTP_ACCEPT if MTP_ACCEPT <= 1 + MTP_DRAFT_TOKENS else 1.0)
    bad = mtp & ~((drafts >= 1) & (accept >= 1.0) & (accept <= 1.0 + drafts))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecipeError(f"row {i + 1}: mtp_accept {accept[i]:g} must lie in 1 .. 1 + "
                          f"mtp_draft_tokens ({drafts[i]:g})")
    return np.where(mtp, drafts, 0.0), np.where(mtp, accept, 1.0)


def admission_gates(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row (iterations, kind, DP ranks) of the gate in front of an aggregated instance's
    prefill: kind 0 is SGLang's receive interval (new requests are polled every ``iterations``
    decode iterations, and right after a prefill iteration or when idle), kind 1 TensorRT-LLM's
    attention-DP balance (prompts wait until each of the ``ranks`` has one, a rank has no
    decoding request, or ``iterations`` iterations passed since the last admission). Rows
    without a gate get 1 iteration (off). Defaults are InferenceX's own scripts
    (:data:`RECV_INTERVAL_HARDWARE`, :data:`ADP_BALANCE_TIMEOUT_ITERS`); the optional columns
    ``scheduler_recv_interval`` and ``adp_balance_timeout_iters`` override them.

    Raises:
        RecipeError: a gate below 1 iteration (row named).
    """
    n = df.height
    eng = df["framework"].to_numpy()
    agg = ~df["disagg"].to_numpy().astype(bool)
    dpa = df["decode_dp_attention"].to_numpy().astype(bool)
    tp = df["decode_tp"].to_numpy().astype(np.float64)
    conc = df["conc"].to_numpy().astype(np.float64)
    hw = df["hardware"].to_numpy()
    fp8 = (df["precision"] == "fp8").to_numpy()

    def col(name: str, default: np.ndarray) -> np.ndarray:
        return _counts_column(df, name, default, " (1 = no gate)")

    sg = agg & (eng == "sglang")
    recv = np.where(sg & np.isin(hw, RECV_INTERVAL_HARDWARE),
                    np.where(dpa, 1.0, np.where((tp == 4) & fp8, 10.0,
                                                np.where(conc >= 16, 30.0, 10.0))), 1.0)
    recv = np.where(sg, col("scheduler_recv_interval", recv), 1.0)
    trt = agg & (eng == "trt") & dpa
    adp = np.where(trt, col("adp_balance_timeout_iters",
                            np.full(n, float(ADP_BALANCE_TIMEOUT_ITERS))), 1.0)
    iters = np.where(trt, adp, recv)
    kind = np.where(trt, 1, 0).astype(np.int64)
    ranks = np.where(trt, np.maximum(tp, 1.0), 1.0)
    return iters, kind, ranks


def prefill_batching(df: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (tokens, prompts) one disaggregated prefill forward may take.

    Raises:
        RecipeError: a given value below 1 (row named).
    """
    from toolkit.serving.client import CHUNK_TOKENS, MAX_PREFILL_PROMPTS

    n = df.height
    tokens = np.full(n, float(CHUNK_TOKENS))
    prompts = np.full(n, float(MAX_PREFILL_PROMPTS))
    shape = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}
    trt = (df["framework"] == "dynamo-trt").to_numpy() & df["disagg"].to_numpy().astype(bool)
    for i, (hw, prec, isl, osl) in enumerate(zip(df["hardware"], df["precision"], df["isl"],
                                                 df["osl"], strict=True)):
        got = PREFILL_BATCH_TRT.get((hw, prec, shape.get((isl, osl), ""))) if trt[i] else None
        if got is not None:
            tokens[i], prompts[i] = got
    # InferenceX's Dynamo + SGLang recipes: a prefill forward takes at most
    # --max-prefill-tokens and --chunked-prefill-size tokens of at most
    # --max-running-requests prompts
    sg = sglang_recipe_limits(df)
    # --chunked-prefill-size is the worker's (SGLang divides it over the attention-DP ranks),
    # --max-prefill-tokens each rank's
    ranks = np.where(np.isfinite(sg["prefill_dp_attention_ranks"]),
                     sg["prefill_dp_attention_ranks"], 1.0)
    with np.errstate(invalid="ignore"):
        sg_tokens = np.fmin(sg["prefill_max_prefill_tokens"] * ranks,
                            sg["prefill_chunked_prefill_size"])
    tokens = np.where(np.isfinite(sg_tokens), sg_tokens, tokens)
    sg_prompts = sg["prefill_max_running_requests"]
    prompts = np.where(np.isfinite(sg_prompts), sg_prompts, prompts)
    return (_counts_column(df, "prefill_max_tokens", tokens),
            _counts_column(df, "prefill_max_prompts", prompts))


def instance_gpus(df: pl.DataFrame, pool_pre: np.ndarray, pool_dec: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Per-row GPUs per (prefill, decode) instance where stated: the optional columns
    ``prefill_instance_gpus`` / ``decode_instance_gpus``, else :data:`INSTANCE_GPUS` for the
    row's recipe; NaN where neither says (the layout then derives the width).

    ``pool_pre`` / ``pool_dec``: each row's prefill and decode GPUs (the bounds of a width).

    Raises:
        RecipeError: a given width that is not a whole number of GPUs within its pool, or one
            given on an aggregated row (row and field named).
    """
    n = df.height
    disagg = df["disagg"].to_numpy().astype(bool)
    pre, dec = np.full(n, np.nan), np.full(n, np.nan)
    shape = {(1024, 1024): "1k1k", (8192, 1024): "8k1k"}
    cols = [df[c].to_list() for c in ("model", "hardware", "framework", "precision", "isl",
                                      "osl", "num_prefill_gpu", "num_decode_gpu",
                                      "prefill_tp", "prefill_ep", "decode_tp", "decode_ep")]
    for i, (mod, hw, eng, prec, isl, osl, npg, ndg, tpp, epp, tpd, epd) in enumerate(
            zip(*cols, strict=True)):
        if not disagg[i]:
            continue
        got = INSTANCE_GPUS.get((mod, hw, eng, prec, shape.get((isl, osl), ""), npg, ndg,
                                 (tpp, epp), (tpd, epd)))
        if got is not None:
            pre[i], dec[i] = got
    out = []
    for name, default, pool, side in (("prefill_instance_gpus", pre, pool_pre, "prefill"),
                                      ("decode_instance_gpus", dec, pool_dec, "decode")):
        if name not in df.columns:
            out.append(default)
            continue
        raw = df[name]
        v = raw.cast(pl.Float64, strict=False).to_numpy()
        unreadable = raw.is_not_null().to_numpy() & ~np.isfinite(v)
        if unreadable.any():
            i = int(np.flatnonzero(unreadable)[0])
            raise RecipeError(f"row {i + 1}: {name} {raw[i]!r} is not a number of GPUs")
        given = np.isfinite(v)
        if (given & ~disagg).any():
            i = int(np.flatnonzero(given & ~disagg)[0])
            raise RecipeError(f"row {i + 1}: {name} applies to disaggregated rows only "
                              f"(an aggregated instance is decode_tp GPUs)")
        bad = given & ((v < 1) | (v != np.floor(v)) | (v > pool))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise RecipeError(f"row {i + 1}: {name} {v[i]:g} must be a whole number of GPUs "
                              f"in 1 .. {pool[i]:g} (the row's {side} GPUs)")
        out.append(np.where(given, v, default))
    return out[0], out[1]


def _counts_column(df: pl.DataFrame, name: str, default: np.ndarray, note: str = ""
                   ) -> np.ndarray:
    """An optional per-row count column (iterations, tokens, prompts): given values floored,
    the rest ``default``.

    Raises:
        RecipeError: a given value below 1 (row named).
    """
    if name not in df.columns:
        return default
    v = df[name].cast(pl.Float64, strict=False).to_numpy()
    given = np.isfinite(v)
    bad = given & (v < 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecipeError(f"row {i + 1}: {name} {v[i]:g} must be >= 1{note}")
    return np.where(given, np.floor(v), default)


def length_ratio(df: pl.DataFrame) -> np.ndarray:
    """Per-row ``--random-range-ratio`` of the benchmark client (optional column
    ``random_range_ratio``; default :data:`toolkit.serving.client.RANGE_RATIO`).

    Raises:
        RecipeError: a given value outside (0, 1] (row named).
    """
    from toolkit.serving.client import RANGE_RATIO

    if "random_range_ratio" not in df.columns:
        return np.full(df.height, RANGE_RATIO)
    v = df["random_range_ratio"].cast(pl.Float64, strict=False).to_numpy()
    given = np.isfinite(v)
    bad = given & ((v <= 0) | (v > 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RecipeError(f"row {i + 1}: random_range_ratio {v[i]:g} must be in (0, 1]")
    return np.where(given, v, RANGE_RATIO)


@cache
def _trt_decode_batches() -> pl.DataFrame:
    from toolkit.serving.points import bundled_points_path

    return pl.read_csv(bundled_points_path(TRT_DECODE_BATCHES_FILE), schema_overrides={
        "decode_dp_attention": pl.Boolean, "first_seen": pl.String, "last_seen": pl.String})


def _recipe_lookup(df: pl.DataFrame, framework: str, tab: pl.DataFrame,
                   values: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per row and value column, the value of the recipe of ``tab`` that ran it, or NaN. Only
    InferenceX's own runs (a ``framework`` row with a run ``date``) are matched, on layout,
    shape, MTP and concurrency; where the recipe changed over time, the version in force at
    the run date (the latest first seen on or before it; else the earliest)."""
    n = df.height
    out = {v: np.full(n, np.nan) for v in values}
    if n == 0 or not all(k in df.columns for k in (*TRT_RECIPE_KEYS, "date", "framework")):
        return out
    rows = df.select(*[pl.col(k) for k in TRT_RECIPE_KEYS],
                     pl.col("date").cast(pl.String).fill_null(""),
                     pl.col("framework").cast(pl.String).fill_null(""),
                     pl.int_range(n, dtype=pl.Int64).alias("_row"))
    rows = rows.filter((pl.col("framework") == framework) & (pl.col("date") != ""))
    if rows.height == 0:
        return out
    rows = rows.with_columns(
        [pl.col(k).cast(tab.schema[k], strict=False) for k in TRT_RECIPE_KEYS])
    hit = rows.join(tab, on=list(TRT_RECIPE_KEYS), how="inner")
    if hit.height == 0:
        return out
    # in force at the run date: the latest version first seen on or before it, else the
    # earliest version
    hit = hit.with_columns((pl.col("first_seen") <= pl.col("date")).alias("_before"))
    best = (hit.sort(["_row", "_before", "first_seen"], descending=[False, True, False])
            .group_by("_row", maintain_order=True)
            .agg([pl.col(v).filter(pl.col("_before")).last()
                  .fill_null(pl.col(v).first()) for v in values]))
    idx = best["_row"].to_numpy()
    for v in values:
        out[v][idx] = best[v].cast(pl.Float64).fill_null(np.nan).to_numpy()
    return out


def trt_recipe_batches(df: pl.DataFrame) -> np.ndarray:
    """Per row, the decode ``max_batch_size`` of InferenceX's Dynamo + TensorRT-LLM recipe
    that ran it (:data:`TRT_DECODE_BATCHES_FILE`), or NaN (see :func:`_recipe_lookup`)."""
    if df.height == 0:
        return np.full(0, np.nan)
    return _recipe_lookup(df, "dynamo-trt", _trt_decode_batches(),
                          ("decode_max_batch_size",))["decode_max_batch_size"]


@cache
def _sglang_recipes() -> pl.DataFrame:
    from toolkit.serving.points import bundled_points_path

    return pl.read_csv(bundled_points_path(SGLANG_RECIPES_FILE), schema_overrides={
        "decode_dp_attention": pl.Boolean, "first_seen": pl.String, "last_seen": pl.String})


def sglang_recipe_limits(df: pl.DataFrame) -> dict[str, np.ndarray]:
    """Per row, the limits of InferenceX's Dynamo + SGLang recipe that ran it
    (:data:`SGLANG_RECIPES_FILE`), NaN where the recipe does not state one or no recipe
    matches (see :func:`_recipe_lookup`): ``decode_max_running_requests`` (per decode
    worker: SGLang divides it over the attention-DP ranks), ``prefill_chunked_prefill_size``
    and ``prefill_max_running_requests`` (per prefill worker, likewise divided),
    ``prefill_max_prefill_tokens`` (per attention-DP rank) and
    ``prefill_dp_attention_ranks``."""
    values = ("decode_max_running_requests", "prefill_max_prefill_tokens",
              "prefill_chunked_prefill_size", "prefill_max_running_requests",
              "prefill_dp_attention_ranks")
    if df.height == 0:
        return {v: np.full(0, np.nan) for v in values}
    return _recipe_lookup(df, "dynamo-sglang", _sglang_recipes(), values)


def engine_caps(df: pl.DataFrame, g_dec: np.ndarray, hbm_bytes: np.ndarray,
                hardware: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (cap on running requests per decode instance, SGLang-default flag).

    The optional column ``max_running_requests`` wins; else InferenceX's MoRI-SGLang recipe
    (:data:`MORI_DECODE_CAPS`, rows with a run ``date`` only), InferenceX's Dynamo +
    TensorRT-LLM and Dynamo + SGLang recipes (:func:`trt_recipe_batches`,
    :func:`sglang_recipe_limits`, dated rows only), TensorRT-LLM's
    ``max_batch_size`` and vLLM's ``max_num_seqs`` defaults per scheduler (x attention-DP
    ranks). SGLang's default depends on its KV pool:
    those rows get ``inf`` here and the flag, and :func:`toolkit.serving.model.max_batch`
    applies :data:`SGLANG_REQ_POOL_MIN` .. :data:`SGLANG_REQ_POOL_MAX`. Other engines (ATOM,
    unknown): no cap beyond HBM.

    Raises:
        RecipeError: a given cap below 1 (row named).
    """
    n = df.height
    fam = np.array([ENGINE_FAMILY.get(e, "") for e in df["framework"].to_list()])
    dpa = df["decode_dp_attention"].to_numpy().astype(bool)
    ep = df["decode_ep"].to_numpy().astype(np.float64) > 1
    ranks = np.where(dpa, g_dec, 1.0)
    mori = (df["framework"] == "mori-sglang").to_numpy()
    vllm_seqs = np.where((hbm_bytes >= VLLM_LARGE_GPU_BYTES) & (hardware != "a100"),
                         VLLM_MAX_NUM_SEQS_LARGE, VLLM_MAX_NUM_SEQS)
    cap = np.full(n, np.inf)
    cap = np.where(fam == "trt", TRT_MAX_BATCH_SIZE * ranks, cap)
    cap = np.where(fam == "vllm", vllm_seqs * ranks, cap)
    dated = (df["date"].cast(pl.String).fill_null("").to_numpy().astype(str)
             if "date" in df.columns else np.full(n, ""))
    # the recipe is InferenceX's: it caps InferenceX's runs (rows with a run date), not a
    # sweep or plan of a deployment someone would configure themselves
    uncapped = (dated == "") | (dpa & ep & (dated >= MORI_DP_EP_UNCAPPED_FROM))
    cap = np.where(mori & ~uncapped, np.where(dpa, MORI_DECODE_CAPS["dp_per_rank"] * g_dec,
                                  np.where(ep, MORI_DECODE_CAPS["ep_only"],
                                           MORI_DECODE_CAPS["no_dp"])), cap)
    # InferenceX's Dynamo + TensorRT-LLM recipes set the decode workers' batch (per rank)
    recipe = trt_recipe_batches(df)
    cap = np.where(np.isfinite(recipe), recipe * ranks, cap)
    # InferenceX's Dynamo + SGLang recipes set the decode workers' --max-running-requests
    # (per worker: SGLang divides it over the attention-DP ranks)
    sg_recipe = sglang_recipe_limits(df)["decode_max_running_requests"]
    has_sg = np.isfinite(sg_recipe)
    cap = np.where(has_sg, sg_recipe, cap)
    sglang_default = (fam == "sglang") & ~mori & ~has_sg
    given = _counts_column(df, "max_running_requests", np.full(n, np.nan))
    has = np.isfinite(given)
    return np.where(has, given, cap), sglang_default & ~has
