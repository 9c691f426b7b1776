"""The replay configs (prefix, selections, Engram) as plain frozen dataclasses.

They sit apart from the replay engines so the CLI can read their field defaults (its option
defaults) without importing numba, Arrow or the store; the engines import them from here.
Stdlib-only at import time: the store's key check and the policy registry are imported
where a method needs them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from toolkit.config import check_number, fingerprint


@dataclass(frozen=True)
class PrefixReplayConfig:
    """One prefix replay.

    Attributes:
        trace: name of a request timeline in the store.
        policy: registered policy name.
        capacity_blocks: cache size in blocks; ``None`` is unbounded.
    """

    trace: str
    policy: str = "lru"
    capacity_blocks: int | None = None

    def __post_init__(self) -> None:
        if self.capacity_blocks is not None and self.capacity_blocks < 0:
            raise ValueError(f"capacity_blocks must be >= 0, got {self.capacity_blocks}")

    @property
    def run_id(self) -> str:
        from toolkit.store import bounded_key

        cap = "inf" if self.capacity_blocks is None else str(self.capacity_blocks)
        return bounded_key(f"prefix-{self.trace}-{self.policy}-{cap}-{fingerprint(self)[:8]}")


MODES = ("plain", "hisparse")
MAX_LAYER = 32766  # a trace's layers are int16 with n_layers = max + 1 (toolkit.schema)
KV_DTYPES = ("fp8", "bf16")
DEFAULT_ROW_BYTES = 656  # FP8 MLA row (512 fp8 + 16 scales + 128 bf16 rope; FlashMLA's format)


@dataclass(frozen=True)
class SelectionReplayConfig:
    """One selection replay.

    Attributes:
        trace: selection trace name in the store.
        policy: registered policy name.
        buffer_tokens: device-buffer slots per (request, layer); ``None`` = 2 x k (HiSparse).
        mode: ``"plain"`` or ``"hisparse"``.
        initial: HiSparse buffer contents when a sequence first outgrows it:
            ``"first"`` (tokens 0..N-1, staging path) or ``"empty"`` (PD direct path).
        full_layers: IndexShare Full layers (hisparse mode); every other layer reuses the
            nearest preceding Full layer's selection. ``None`` = every layer has its own.
        row_bytes: bytes moved host->device per miss (MLA row; 656 = FP8 FlashMLA).
        model: model spec the row bytes and IndexShare layers came from (``None`` = none;
            :func:`model_config` fills them); recorded so runs can be told apart in SQL.
        kv_dtype: MLA row format behind ``row_bytes``: ``"fp8"`` or ``"bf16"``.
    """

    trace: str
    policy: str = "lru"
    buffer_tokens: int | None = None
    mode: str = "hisparse"
    initial: str = "first"
    full_layers: tuple[int, ...] | None = None
    row_bytes: int = DEFAULT_ROW_BYTES
    model: str | None = None
    kv_dtype: str = "fp8"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.initial not in ("first", "empty"):
            raise ValueError(f"initial must be 'first' or 'empty', got {self.initial!r}")
        if self.buffer_tokens is not None and self.buffer_tokens < 1:
            raise ValueError(f"buffer_tokens must be >= 1, got {self.buffer_tokens}")
        if self.full_layers is not None and self.mode != "hisparse":
            raise ValueError("IndexShare (full_layers) applies to mode='hisparse' only")
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {self.kv_dtype!r}")
        check_number("row_bytes", self.row_bytes, lo=1)
        for layer in self.full_layers or ():
            check_number("full_layers", layer, lo=0, hi=MAX_LAYER)

    def resolved(self, k: int) -> SelectionReplayConfig:
        """This config with the default buffer (2 x k) filled in: the form that is
        fingerprinted, so leaving ``buffer_tokens`` out and giving 2 x k are one run."""
        return self if self.buffer_tokens else dataclasses.replace(self, buffer_tokens=2 * k)

    def run_id(self, buffer_tokens: int | None = None) -> str:
        """Run key of this config; call on :meth:`resolved` (``buffer_tokens`` is kept for
        callers that pass the size they resolved themselves)."""
        cfg = self if buffer_tokens is None else dataclasses.replace(
            self, buffer_tokens=buffer_tokens)
        if cfg.buffer_tokens is None:
            raise ValueError("run_id needs a resolved buffer size; call resolved(k) first")
        from toolkit.store import bounded_key

        return bounded_key(f"sel-{cfg.trace}-{cfg.mode}-{cfg.policy}-{cfg.buffer_tokens}-"
                           f"{fingerprint(cfg)[:8]}")


BACKINGS = ("dram", "ssd")


@dataclass(frozen=True)
class EngramReplayConfig:
    """One Engram replay (the priced deployment is part of the run's identity)."""

    trace: str
    hbm_cache_bytes: float
    backing: str = "dram"
    policy: str = "lru"
    hardware: str = "gb200"
    model: str = "deepseek-v3.2"
    table_bytes: float = 200e9
    context_tokens: int = 8192
    max_batch_per_gpu: int = 256
    price_tier: str = "hyperscaler"

    def __post_init__(self) -> None:
        if self.backing not in BACKINGS:
            raise ValueError(f"--backing must be one of {', '.join(BACKINGS)}; "
                             f"got {self.backing!r}")
        if self.hbm_cache_bytes < 0:
            raise ValueError(f"--hbm-cache-gb must be >= 0; got {self.hbm_cache_bytes / 1e9}")
        from toolkit.policies import policies

        policies.get(self.policy)  # unknown names fail here, listing the known ones

    @property
    def run_id(self) -> str:
        return f"engram-{self.trace}-{self.policy}-{self.backing}-{fingerprint(self)[:8]}"
