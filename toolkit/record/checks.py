"""Checks that the NumPy port is the trained model: greedy answers and perplexity."""

from __future__ import annotations

import numpy as np

from toolkit.record.recorder import SmolLM2, blas_threads

#: Token ids that end an assistant turn (<|endoftext|>, <|im_end|>).
STOP_IDS = (0, 2)


def greedy_generate(model: SmolLM2, prompt: str, max_new_tokens: int = 32,
                    threads: int | None = 1) -> str:
    """Greedy (argmax) continuation of ``prompt`` until a stop token, KV-cached."""
    ids = model.encode(prompt)
    cache = model.decoder.new_cache(len(ids) + max_new_tokens)
    out: list[int] = []
    with blas_threads(threads):
        result = model.decoder.forward(ids, cache, logits="last")
        for _ in range(max_new_tokens):
            token = int(np.argmax(result.logits[-1]))
            if token in STOP_IDS:
                break
            out.append(token)
            result = model.decoder.forward(np.array([token]), cache, logits="last")
    return model.decode(out)


def perplexity(model: SmolLM2, ids: np.ndarray, chunk_tokens: int = 256,
               threads: int | None = 1) -> float:
    """exp(mean next-token negative log-likelihood) of ``ids[1:]`` given their prefixes.

    The text runs in chunks through the KV cache so the (tokens, vocab) logits stay small.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) < 2:
        raise ValueError("perplexity needs at least 2 tokens")
    cache = model.decoder.new_cache(len(ids))
    nll = 0.0
    with blas_threads(threads):
        for start in range(0, len(ids) - 1, chunk_tokens):
            chunk = ids[start : min(start + chunk_tokens, len(ids) - 1)]
            logits = model.decoder.forward(chunk, cache, logits="all").logits.astype(np.float64)
            logits -= logits.max(axis=1, keepdims=True)
            log_z = np.log(np.exp(logits).sum(axis=1))
            targets = ids[start + 1 : start + 1 + len(chunk)]
            nll += float((log_z - logits[np.arange(len(chunk)), targets]).sum())
    return float(np.exp(nll / (len(ids) - 1)))
