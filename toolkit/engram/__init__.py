"""Engram conditional memory: which hashed N-gram table rows each token reads.

Engram (DeepSeek, arXiv 2601.07372) adds hashed N-gram embedding tables to a few backbone
layers. The rows a token reads depend only on the token ids, so the lookup stream of any
text can be computed exactly (``hashing``), stored as ``engram_lookups`` (``record``),
replayed through an HBM row cache over DRAM or SSD (``toolkit.replay.engram``) and priced
(``toolkit.cost.engram``).
"""

from toolkit.engram.hashing import (
    REFERENCE_COMMIT,
    EngramConfig,
    EngramHasher,
    compression_table,
    is_prime,
    layer_multipliers,
    table_primes,
)

__all__ = [
    "REFERENCE_COMMIT",
    "EngramConfig",
    "EngramHasher",
    "compression_table",
    "is_prime",
    "layer_multipliers",
    "table_primes",
]
