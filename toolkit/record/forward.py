"""NumPy forward pass of a Llama-style decoder with a KV cache and selection scores.

One function, :meth:`Decoder.forward`, runs any number of new tokens against the cache:
a prompt prefill, a single decode step, or one causal-masked pass over a whole text
(teacher forcing). For the query rows asked for it also returns, per layer, the score
every key position gets:

* ``"softmax-sum"``: softmax attention weights summed over the query heads, the target
  a DSA lightning indexer is trained to imitate (an *oracle indexer*);
* ``"relu"``: ``sum_heads ReLU(q . k) / sqrt(d)`` with the model's post-RoPE q and k,
  the functional form of the DSA indexer applied to the model's own heads.

Positions a query may not attend to (the future) score ``-inf``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from toolkit.record.gguf_model import ModelWeights

SCORES = ("softmax-sum", "relu")


@dataclass
class KVCache:
    """Keys (post-RoPE) and values of every layer, preallocated for ``capacity`` tokens."""

    keys: np.ndarray  # (n_layers, n_kv_heads, capacity, head_dim)
    values: np.ndarray
    length: int = 0

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]


@dataclass(frozen=True)
class ForwardResult:
    """Output of one :meth:`Decoder.forward` call.

    Attributes:
        logits: (n_rows, vocab) next-token logits for the rows asked for, or None.
        scores: (n_layers, n_score_rows, cache_length) key scores, or None.
    """

    logits: np.ndarray | None
    scores: np.ndarray | None


class Decoder:
    """Llama-style decoder (RMSNorm, GQA, interleaved RoPE, SwiGLU, tied LM head)."""

    def __init__(self, weights: ModelWeights) -> None:
        self.weights = weights
        self.config = c = weights.config
        self.dtype = weights.embedding.dtype
        half = c.head_dim // 2
        inv_freq = c.rope_base ** (-np.arange(half, dtype=np.float64) * 2.0 / c.head_dim)
        angles = np.arange(c.context_tokens, dtype=np.float64)[:, None] * inv_freq[None, :]
        self._cos = np.cos(angles).astype(self.dtype)  # (context, head_dim/2)
        self._sin = np.sin(angles).astype(self.dtype)

    def new_cache(self, capacity: int) -> KVCache:
        """An empty cache for up to ``capacity`` tokens."""
        c = self.config
        if capacity > c.context_tokens:
            raise ValueError(f"capacity {capacity} exceeds the model context {c.context_tokens}")
        shape = (c.n_layers, c.n_kv_heads, capacity, c.head_dim)
        return KVCache(np.zeros(shape, self.dtype), np.zeros(shape, self.dtype))

    def _rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        ms = np.mean(x * x, axis=-1, keepdims=True)
        return x / np.sqrt(ms + self.config.rms_eps) * weight

    def _rope(self, x: np.ndarray, positions: slice) -> np.ndarray:
        # x: (n, heads, head_dim); adjacent pairs (2i, 2i+1) rotate by pos * inv_freq[i],
        # matching the GGUF row permutation of attn_q / attn_k.
        cos = self._cos[positions][:, None, :]
        sin = self._sin[positions][:, None, :]
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        out = np.empty_like(pairs)
        out[..., 0] = x0 * cos - x1 * sin
        out[..., 1] = x0 * sin + x1 * cos
        return out.reshape(x.shape)

    def forward(
        self,
        token_ids: np.ndarray,
        cache: KVCache,
        *,
        score: str | None = None,
        score_from: int = 0,
        logits: str = "last",
    ) -> ForwardResult:
        """Run ``token_ids`` at positions ``cache.length ...`` and append them to the cache.

        Args:
            token_ids: 1-D int array of the new tokens.
            cache: updated in place.
            score: "softmax-sum", "relu" or None (no scores).
            score_from: first row of ``token_ids`` whose key scores are returned.
            logits: "last", "all" or "none".
        """
        c = self.config
        token_ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        n = token_ids.shape[0]
        start, end = cache.length, cache.length + n
        if end > cache.capacity:
            raise ValueError(f"cache holds {cache.capacity} tokens; forward needs {end}")
        if score is not None and score not in SCORES:
            raise ValueError(f"score {score!r} unknown; choose one of {SCORES}")
        h, kv, d = c.n_heads, c.n_kv_heads, c.head_dim
        group = h // kv
        scale = float(1.0 / np.sqrt(d))  # Python float: a NumPy float64 would upcast fp32
        n_scored = n - score_from if score is not None else 0
        scores = (
            np.empty((c.n_layers, n_scored, end), self.dtype) if n_scored > 0 else None
        )
        # causal mask of the new rows against all cached + new keys
        mask = np.arange(end)[None, :] > (start + np.arange(n))[:, None]  # (n, end)
        x = self.weights.embedding[token_ids]
        for li, layer in enumerate(self.weights.layers):
            qkv = self._rms_norm(x, layer.attn_norm) @ layer.wqkv
            q = self._rope(qkv[:, : h * d].reshape(n, h, d), slice(start, end))
            k = self._rope(qkv[:, h * d : (h + kv) * d].reshape(n, kv, d), slice(start, end))
            v = qkv[:, (h + kv) * d :].reshape(n, kv, d)
            cache.keys[li, :, start:end] = k.transpose(1, 0, 2)
            cache.values[li, :, start:end] = v.transpose(1, 0, 2)
            keys = cache.keys[li, :, :end]  # (kv, end, d)
            # query head j uses kv head j // group, as Llama's repeat_kv does
            qg = q.reshape(n, kv, group, d).transpose(1, 2, 0, 3).reshape(kv, group * n, d)
            # per-KV-head 2-D matmuls: NumPy's stacked matmul misses BLAS on these shapes
            att = np.stack([qg[j] @ keys[j].T for j in range(kv)]).reshape(kv, group, n, end)
            att *= scale
            att[..., mask] = -np.inf
            if score == "relu":
                relu = np.maximum(att[:, :, score_from:], 0).sum(axis=(0, 1))
                relu[mask[score_from:]] = -np.inf
                scores[li] = relu
            att -= att.max(axis=-1, keepdims=True)
            np.exp(att, out=att)
            att /= att.sum(axis=-1, keepdims=True)
            if score == "softmax-sum":
                summed = att[:, :, score_from:].sum(axis=(0, 1))
                summed[mask[score_from:]] = -np.inf
                scores[li] = summed
            att = att.reshape(kv, group * n, end)
            out = np.stack([att[j] @ cache.values[li, j, :end] for j in range(kv)])
            out = out.reshape(kv, group, n, d).transpose(2, 0, 1, 3).reshape(n, h * d)
            x = x + out @ layer.wo
            gate_up = self._rms_norm(x, layer.ffn_norm) @ layer.w_gate_up
            gate, up = gate_up[:, : c.d_ffn], gate_up[:, c.d_ffn :]
            # SiLU via tanh: no overflow warning for very negative gates
            silu = gate * (0.5 + 0.5 * np.tanh(0.5 * gate))
            x = x + (silu * up) @ layer.w_down
        cache.length = end
        result_logits = None
        if logits != "none":
            rows = x[-1:] if logits == "last" else x
            normed = self._rms_norm(rows, self.weights.output_norm)
            result_logits = normed @ self.weights.embedding.T  # tied LM head
        return ForwardResult(result_logits, scores)
