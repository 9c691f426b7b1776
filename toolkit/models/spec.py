"""Model geometry for sparse-attention (DSA) serving, loaded from TOML with provenance.

Why a spec and not constants: the four savings the toolkit keeps apart (MLA row bytes,
top-k reads, IndexShare, placement) all hang off these few numbers, and each must be
traceable to a config or a paper.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from toolkit.hardware.provenance import (
    Sourced,
    SpecError,
    SpecRegistry,
    build_spec,
    read_toml,
)

KvDtype = Literal["fp8", "bf16"]


@functools.cache  # ``ModelSpec.indexer_layers`` reads it per row of a serving design
def indexer_layer_ids(num_layers: int, freq: int, offset: int) -> tuple[int, ...]:
    """Layers that run their own lightning indexer ("Full"); the rest reuse a top-k.

    The rule is sglang's ``dsa_layer_skips_topk``: layer ``i`` skips iff
    ``max(i - offset + 1, 0) % freq != 0``. ``freq=1`` means every layer is Full.
    """
    if freq < 1:
        raise SpecError(f"index_topk_freq must be >= 1, got {freq}")
    return tuple(i for i in range(num_layers) if max(i - offset + 1, 0) % freq == 0)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model's decode-relevant geometry; every field after ``aliases`` is sourced."""

    name: str
    label: str
    architecture: str
    aliases: tuple[str, ...]
    num_layers: int
    num_dense_layers: int
    hidden_size: int
    num_query_heads: int
    q_lora_rank: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_n_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int
    index_topk: int
    mla_row_bytes_fp8: int
    mla_row_bytes_bf16: int
    indexer_row_bytes: int
    index_topk_freq: int
    index_skip_topk_offset: int
    max_position_embeddings: int | None
    total_params: float
    active_params: float
    weight_bytes_fp8: float
    weight_bytes_bf16: float
    weight_bytes_fp4: float
    n_routed_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    provenance: Mapping[str, Sourced] = dataclasses.field(repr=False, compare=False)

    def sourced(self, field: str) -> Sourced:
        """The value of ``field`` with its kind and source."""
        return self.provenance[field]

    @property
    def indexer_layers(self) -> tuple[int, ...]:
        """Layer ids that hold an indexer key cache and run the indexer each step."""
        if self.index_topk == 0:
            return ()
        return indexer_layer_ids(self.num_layers, self.index_topk_freq, self.index_skip_topk_offset)

    @property
    def routed_expert_params(self) -> float:
        """Parameters of all routed experts (gate, up, down per expert, MoE layers only)."""
        moe_layers = self.num_layers - self.num_dense_layers
        return float(moe_layers * self.n_routed_experts * 3 * self.hidden_size
                     * self.moe_intermediate_size)

    @property
    def dense_params(self) -> float:
        """Parameters every token reads: attention, shared experts, dense MLPs, embeddings."""
        return max(self.total_params - self.routed_expert_params, 0.0)

    def mla_row_bytes(self, kv_dtype: str = "fp8") -> int:
        """Bytes of one token's MLA row in one layer (656 FP8 serving format, 1152 BF16)."""
        if kv_dtype not in ("fp8", "bf16"):
            raise SpecError(f"kv_dtype must be 'fp8' or 'bf16', got {kv_dtype!r}")
        return self.mla_row_bytes_fp8 if kv_dtype == "fp8" else self.mla_row_bytes_bf16

    def mla_bytes_per_token(self, kv_dtype: str = "fp8") -> int:
        """MLA KV bytes per token across all layers."""
        return self.mla_row_bytes(kv_dtype) * self.num_layers

    def indexer_bytes_per_token(self) -> int:
        """Indexer key bytes per token: only indexer (Full) layers keep them."""
        return self.indexer_row_bytes * len(self.indexer_layers)

    def weight_bytes(self, precision: str = "fp8") -> float:
        """Total weight bytes at ``precision`` (fp4 | fp8 | bf16)."""
        try:
            return float(getattr(self, f"weight_bytes_{precision}"))
        except AttributeError:
            raise SpecError(f"precision must be fp4, fp8 or bf16, got {precision!r}") from None


_PLAIN = ("name", "label", "architecture")


def load_model(path_or_dict: str | Path | Mapping[str, Any]) -> ModelSpec:
    """Build a :class:`ModelSpec` from a TOML file or an equivalent dict (not registered)."""
    data, where = read_toml(path_or_dict)
    for key in _PLAIN:
        if not isinstance(data.get(key), str):
            raise SpecError(f"{where}: top-level {key!r} must be a string")
    plain: dict[str, Any] = {k: data[k] for k in _PLAIN}
    plain["name"] = plain["name"].lower()
    plain["aliases"] = tuple(a.lower() for a in data.get("aliases", ()))
    spec = build_spec(ModelSpec, data, where, plain)
    if spec.mla_row_bytes_bf16 != 2 * (spec.kv_lora_rank + spec.qk_rope_head_dim):
        raise SpecError(
            f"{where}: mla_row_bytes_bf16 must be 2 x (kv_lora_rank + qk_rope_head_dim)"
        )
    return spec


MODELS: SpecRegistry[ModelSpec] = SpecRegistry("model", "toolkit.models", load_model)


def register_model(spec: ModelSpec | str | Path | Mapping[str, Any]) -> ModelSpec:
    """Register a spec (or TOML path / dict) under its name and aliases; duplicates raise."""
    if not isinstance(spec, ModelSpec):
        spec = load_model(spec)
    return MODELS.add(spec)


def get_model(name: str, overrides: Mapping[str, Any] | None = None) -> ModelSpec:
    """The registered model ``name`` or alias (case-insensitive), optionally overridden."""
    return MODELS.spec(name, overrides)


def model_names(include_aliases: bool = False) -> list[str]:
    """Registered model names, sorted (canonical names unless ``include_aliases``)."""
    names = MODELS.names()
    return names if include_aliases else sorted({MODELS.get(n).name for n in names})
