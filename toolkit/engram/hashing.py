"""Engram addressing: compressed token ids -> suffix N-grams -> multi-head hashed rows.

Follows ``engram_demo_v1.py`` of ``deepseek-ai/Engram`` at commit
``11a020e54de33c1e83034fd82f7f6eb484019dca`` (read through the code index; no code copied)
and the paper (arXiv 2601.07372, "Conditional Memory via Scalable Lookup"):

* **Tokenizer compression.** Every backbone token id is decoded alone; the text is
  normalised (NFKC, NFD, strip accents, lowercase, whitespace runs -> one space, a lone
  space kept, strip) and ids with equal normalised text share one *canonical* id, numbered
  in order of first appearance. A decode containing U+FFFD (a partial UTF-8 byte) keys on
  the raw token string instead; an empty normalisation keys on the raw decode.
* **Suffix N-grams.** At position t the n-gram is (c[t], c[t-1], ..., c[t-n+1]); positions
  before the start of a sequence are the compressed pad id.
* **Hash.** Per Engram layer, multipliers ``m_k = 2 r_k + 1`` with ``r`` drawn by
  ``numpy.random.default_rng(seed + 10007 * layer_id).integers(0, half_bound, max_n)``,
  ``half_bound = max(1, (2**63 - 1) // compressed_vocab // 2)``, so no product overflows.
  ``mix = XOR_k c[t-k] * m_k``; head j of order n reads row ``mix % p`` of its own table,
  whose size ``p`` is the next prime above ``table_rows - 1`` not used by any earlier
  (layer, order, head) table, searched layer by layer, order by order, head by head.

Deviations from the reference (each a choice the reference leaves to its config):

* Backbone tokenizer: SmolLM2's (the one the recorder ships), not DeepSeek-V3's; so the
  default ``table_rows`` is 5 x SmolLM2's vocabulary (49,152 x 5), mirroring the reference's
  5 x DeepSeek-V3 vocabulary (129,280 x 5).
* Pad id: the reference's ``pad_id = 2`` is DeepSeek-V3's pad token; SmolLM2 has no pad
  token, so the default is id 0 (``<|endoftext|>``), compressed like any id.
* ``ngram_orders`` may omit orders (the reference always hashes every n in 2..max_n); the
  multipliers are still drawn for ``max_n`` and the prime search visits only the listed
  orders. With the default (2, 3) this is exactly the reference.
* One ``table_rows`` for every order (the reference takes one per order).
* Long texts are hashed in chunks; the last ``max_n - 1`` compressed ids of a chunk are the
  history of the next, so rows are identical to hashing the whole sequence at once.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from toolkit.runtime.aot import nb

REFERENCE_COMMIT = "deepseek-ai/Engram@11a020e54de33c1e83034fd82f7f6eb484019dca engram_demo_v1.py"
LAYER_SEED_PRIME = 10007  # reference: base_seed = seed + PRIME_1 * layer_id
REPLACEMENT_CHAR = "\ufffd"
MAX_TABLE_ROWS = 2**31 - 2**24  # rows are stored as int32; leaves room for the prime search
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class EngramConfig:
    """What decides the rows an Engram module reads (plus the row width, for pricing).

    Attributes:
        ngram_orders: N-gram orders hashed (reference: 2..max_ngram_size = 2, 3).
        heads: hash heads per order (reference ``n_head_per_ngram`` = 8).
        table_rows: lower bound of every head's prime table size; None = 5 x vocabulary.
        layer_ids: backbone layers carrying an Engram module (reference [1, 15]).
        seed: hash seed (reference 0).
        pad_token_id: backbone id used before the start of a sequence.
        embed_dim_per_ngram: embedding width per order, split over heads (reference 512).
        row_dtype: storage dtype of a row; "bf16" is assumed for serving (the demo's
            ``nn.Embedding`` is fp32).
        tokenizer: backbone tokenizer name.
    """

    ngram_orders: tuple[int, ...] = (2, 3)
    heads: int = 8
    table_rows: int | None = None
    layer_ids: tuple[int, ...] = (1, 15)
    seed: int = 0
    pad_token_id: int = 0
    embed_dim_per_ngram: int = 512
    row_dtype: str = "bf16"
    tokenizer: str = "smollm2"
    reference: str = field(default=REFERENCE_COMMIT)

    def __post_init__(self) -> None:
        orders = self.ngram_orders
        if not orders or list(orders) != sorted(set(orders)) or orders[0] < 2:
            raise ValueError(f"ngram orders must be distinct, ascending and >= 2; got {orders}")
        if self.heads < 1:
            raise ValueError(f"heads must be >= 1; got {self.heads}")
        if self.table_rows is not None and not 2 <= self.table_rows <= MAX_TABLE_ROWS:
            raise ValueError(f"table rows must be in [2, {MAX_TABLE_ROWS}]; got {self.table_rows}")
        ids = self.layer_ids
        if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
            raise ValueError(f"layer ids must be distinct and >= 0; got {ids}")
        if self.embed_dim_per_ngram % self.heads:
            raise ValueError(f"embed dim per n-gram {self.embed_dim_per_ngram} is not a "
                             f"multiple of heads {self.heads}")
        if self.row_dtype not in DTYPE_BYTES:
            raise ValueError(f"row dtype must be one of {', '.join(DTYPE_BYTES)}; "
                             f"got {self.row_dtype!r}")

    @property
    def max_n(self) -> int:
        return max(self.ngram_orders)

    @property
    def row_bytes(self) -> int:
        """One head's row: (embed_dim_per_ngram / heads) x dtype bytes."""
        return self.embed_dim_per_ngram // self.heads * DTYPE_BYTES[self.row_dtype]

    @property
    def lookups_per_token(self) -> int:
        return len(self.layer_ids) * len(self.ngram_orders) * self.heads

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def default_layer_ids(n_layers: int) -> tuple[int, ...]:
    """``n`` Engram layers at 1, 15, 29, ...: the reference's [1, 15] extended by its stride."""
    if n_layers < 1:
        raise ValueError(f"--layers must be >= 1; got {n_layers}")
    return tuple(1 + 14 * i for i in range(n_layers))


# -- tokenizer compression ---------------------------------------------------------------
def _normalizer() -> Any:
    from tokenizers import Regex, normalizers

    sentinel = "\ue000"
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), sentinel),  # keep a lone space through Strip
        normalizers.Strip(),
        normalizers.Replace(sentinel, " "),
    ])


def compression_table(tokenizer: Any) -> tuple[np.ndarray, int]:
    """``(lookup, n_canonical)``: canonical id of every backbone id, numbered by first use.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (decode / id_to_token / get_vocab_size).
    """
    norm = _normalizer()
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    key_to_new: dict[str, int] = {}
    lookup = np.empty(vocab, dtype=np.int64)
    for tid in range(vocab):  # once per vocabulary (49K ids), cached per tokenizer
        text = tokenizer.decode([tid], skip_special_tokens=False)
        if REPLACEMENT_CHAR in text:
            key = tokenizer.id_to_token(tid)
        else:
            key = norm.normalize_str(text) or text
        lookup[tid] = key_to_new.setdefault(key, len(key_to_new))
    return lookup, len(key_to_new)


@lru_cache(maxsize=2)
def load_backbone_tokenizer(name: str = "smollm2") -> Any:
    """The backbone tokenizer by name (only SmolLM2's ships with the recorder)."""
    if name != "smollm2":
        raise ValueError(f"unknown tokenizer {name!r}; known: smollm2")
    from toolkit.record.gguf_model import load_tokenizer

    return load_tokenizer()


@lru_cache(maxsize=2)
def _cached_compression(name: str) -> tuple[np.ndarray, int]:
    return compression_table(load_backbone_tokenizer(name))


# -- primes and multipliers --------------------------------------------------------------
def is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (bases 2..41)."""
    if n < 2:
        return False
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for p in small:
        if n % p == 0:
            return n == p
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def table_primes(cfg: EngramConfig, table_rows: int) -> np.ndarray:
    """``[layer, order, head]`` prime table sizes, distinct across all tables."""
    seen: set[int] = set()
    out = np.empty((len(cfg.layer_ids), len(cfg.ngram_orders), cfg.heads), dtype=np.int64)
    for li in range(len(cfg.layer_ids)):
        for oi in range(len(cfg.ngram_orders)):
            candidate = table_rows - 1
            for h in range(cfg.heads):
                candidate += 1
                while not is_prime(candidate) or candidate in seen:
                    candidate += 1
                seen.add(candidate)
                out[li, oi, h] = candidate
    return out


def layer_multipliers(cfg: EngramConfig, compressed_vocab: int) -> np.ndarray:
    """``[layer, k]`` odd multipliers for the k-th most recent token of an N-gram."""
    half_bound = max(1, np.iinfo(np.int64).max // compressed_vocab // 2)
    out = np.empty((len(cfg.layer_ids), cfg.max_n), dtype=np.int64)
    for li, layer_id in enumerate(cfg.layer_ids):
        rng = np.random.default_rng(int(cfg.seed + LAYER_SEED_PRIME * layer_id))
        out[li] = rng.integers(0, half_bound, size=(cfg.max_n,), dtype=np.int64) * 2 + 1
    return out


# -- hashing -----------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def hash_rows(ids, history, orders, mults, primes):  # pragma: no cover - compiled
    """Rows read at every position: ``out[t, layer, order, head]``.

    Args:
        ids: compressed ids of this chunk (int64).
        history: the ``max_n - 1`` compressed ids before the chunk, oldest first (pad ids
            at a sequence start).
        orders: N-gram orders (int64).
        mults: ``[layer, k]`` multipliers; primes: ``[layer, order, head]`` table sizes.
    """
    t_n = ids.shape[0]
    n_hist = history.shape[0]
    n_layers, n_orders, n_heads = primes.shape
    out = np.empty((t_n, n_layers, n_orders, n_heads), dtype=np.int64)
    for t in range(t_n):
        for li in range(n_layers):
            mix = np.int64(0)
            k_done = 0
            for oi in range(n_orders):
                n = orders[oi]
                for k in range(k_done, n):  # extend the XOR from the previous order
                    j = t - k
                    tok = ids[j] if j >= 0 else history[n_hist + j]
                    mix ^= tok * mults[li, k]
                k_done = n
                for h in range(n_heads):
                    out[t, li, oi, h] = mix % primes[li, oi, h]
    return out


@dataclass(frozen=True)
class EngramHasher:
    """A config with its tokenizer tables resolved: compress, then hash, chunk by chunk."""

    cfg: EngramConfig
    lookup: np.ndarray = field(repr=False)
    compressed_vocab: int
    table_rows: int
    primes: np.ndarray = field(repr=False)
    mults: np.ndarray = field(repr=False)
    pad_compressed: int

    @classmethod
    def build(cls, cfg: EngramConfig, lookup: np.ndarray | None = None,
              compressed_vocab: int | None = None) -> EngramHasher:
        """Resolve ``cfg`` (loads the tokenizer unless ``lookup`` is given)."""
        if lookup is None:
            lookup, compressed_vocab = _cached_compression(cfg.tokenizer)
        assert compressed_vocab is not None
        if not 0 <= cfg.pad_token_id < lookup.shape[0]:
            raise ValueError(f"pad token id {cfg.pad_token_id} outside the vocabulary "
                             f"[0, {lookup.shape[0]})")
        rows = cfg.table_rows if cfg.table_rows is not None else 5 * lookup.shape[0]
        return cls(cfg, lookup, compressed_vocab, rows, table_primes(cfg, rows),
                   layer_multipliers(cfg, compressed_vocab), int(lookup[cfg.pad_token_id]))

    def start_history(self) -> np.ndarray:
        return np.full(self.cfg.max_n - 1, self.pad_compressed, dtype=np.int64)

    def compress(self, token_ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.lookup.shape[0]):
            raise ValueError(f"token ids must lie in [0, {self.lookup.shape[0]})")
        return self.lookup[ids]

    def rows(self, compressed: np.ndarray, history: np.ndarray) -> np.ndarray:
        """``[t, layer, order, head]`` rows of a chunk of compressed ids."""
        return hash_rows(np.ascontiguousarray(compressed, dtype=np.int64),
                         np.ascontiguousarray(history, dtype=np.int64),
                         np.asarray(self.cfg.ngram_orders, dtype=np.int64),
                         self.mults, self.primes)

    def table_offsets(self) -> np.ndarray:
        """``[layer, order, head]`` start of each table in one global row space."""
        flat = self.primes.ravel()
        return (np.cumsum(flat) - flat).reshape(self.primes.shape)

    @property
    def total_rows(self) -> int:
        return int(self.primes.sum())

    def metadata(self) -> dict[str, Any]:
        """What a trace stores next to its lookups (enough to recompute every row)."""
        return {
            "config_json": self.cfg.to_json(),
            "compressed_vocab": self.compressed_vocab,
            "backbone_vocab": int(self.lookup.shape[0]),
            "table_rows": self.table_rows,
            "total_rows": self.total_rows,
            "row_bytes": self.cfg.row_bytes,
            "primes_json": json.dumps(self.primes.tolist()),
            "multipliers_json": json.dumps(self.mults.tolist()),
            "pad_compressed": self.pad_compressed,
        }


def normalise_for_check(text: str) -> str:
    """Pure-Python twin of the compression normaliser (differential test of ``_normalizer``)."""
    import re

    s = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", text))
    s = "".join(ch for ch in s if unicodedata.category(ch) != "Mn").lower()
    s = re.sub(r"[ \t\r\n]+", " ", s)
    return s if s == " " else s.strip()
