"""Write a SYNTHETIC SGLang indexer top-k capture, encoded the way SGLang encodes it.

SGLang (sgl-project/sglang ``state_capturer/indexer_topk.py`` @ ``02d3f4b2``,
``managers/tokenizer_manager.py``) returns ``meta_info["indexer_topk"]`` as
``pybase64.b64encode(tensor.numpy().tobytes())`` of an int32 tensor of shape
``(prompt_tokens + completion_tokens - 1, num_indexer_layers, index_topk)``: row ``i`` is
the query at position ``i`` (request-local positions ``0 .. i``, ``-1`` padding). This
script builds such tensors from made-up selections (a sink, a recent window and seeded
random picks: SYNTHETIC, never measured) and writes them as ``/generate`` responses (a JSON
list, as a batched ``/generate`` returns) or OpenAI-compatible responses (JSONL, payload in
``sglext``). Every response carries ``"synthetic": true``, the toolkit's own marker (SGLang
sends no such key), so the ingested trace is labelled SYNTHETIC.

    python tests/sglang_capture.py OUT.json [--openai]
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import numpy as np

#: (prompt_tokens, completion_tokens) per request of the default sample.
REQUESTS = ((12, 6), (9, 4), (20, 3))
LAYERS, K, SEED = 3, 8, 52


def topk_tensor(prompt: int, completion: int, layers: int = LAYERS, k: int = K,
                seed: int = SEED) -> np.ndarray:
    """int32 ``(prompt + completion - 1, layers, k)``: row ``i`` selects from ``0 .. i``."""
    rng = np.random.default_rng(seed + 1000 * prompt + completion)
    rows = prompt + completion - 1
    out = np.full((rows, layers, k), -1, dtype=np.int32)
    for i in range(rows):
        for layer in range(layers):
            cand = np.arange(i + 1)
            if cand.size <= k:
                picked = rng.permutation(cand)  # fewer candidates than k: the rest is -1
            elif k < 3:
                picked = rng.choice(cand, k, replace=False)
            else:  # sink + the 2 newest + random others, in score (not position) order
                fixed = np.unique([0, i, i - 1])
                rest = rng.choice(np.setdiff1d(cand, fixed), k - fixed.size, replace=False)
                picked = rng.permutation(np.concatenate([fixed, rest]))
            out[i, layer, :picked.size] = picked
    return out


def encode(t: np.ndarray) -> str:
    """As SGLang: raw little-endian int32 bytes of the C-contiguous tensor, base64."""
    return base64.b64encode(np.ascontiguousarray(t, dtype="<i4").tobytes()).decode("utf-8")


def generate_response(i: int, prompt: int, completion: int, t: np.ndarray) -> dict:
    return {"text": "SYNTHETIC", "synthetic": True,
            "meta_info": {"id": f"synthetic-{i}", "finish_reason": {"type": "length"},
                          "prompt_tokens": prompt, "completion_tokens": completion,
                          "cached_tokens": 0, "indexer_topk": encode(t)}}


def openai_response(i: int, prompt: int, completion: int, t: np.ndarray) -> dict:
    return {"id": f"synthetic-{i}", "object": "chat.completion", "synthetic": True,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "SYNTHETIC"},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
            "sglext": {"indexer_topk": encode(t)}}


def write(path: Path, openai: bool = False, requests=REQUESTS, first: int = 0) -> Path:
    """Write the sample (request ids from ``first``); returns ``path``. ``/generate``: a
    JSON list; OpenAI: JSONL."""
    make = openai_response if openai else generate_response
    recs = [make(i, p, c, topk_tensor(p, c)) for i, (p, c) in enumerate(requests, start=first)]
    path.write_text("\n".join(map(json.dumps, recs)) + "\n" if openai else json.dumps(recs))
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1])
    print(write(out, openai="--openai" in sys.argv[2:]))
