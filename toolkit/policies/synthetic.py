"""Seeded synthetic access streams shaped like decode-time sparse attention.

Real top-k selections are not bundled at scale, so tests and benchmarks use this
stand-in: each decode step selects ``k`` KV positions of a growing context, made of
attention sinks, a recent window, and a "middle" set that mostly persists from step to
step. Fresh middle picks are uniform, which is harsher on caches than real traces.
"""

from __future__ import annotations

import numpy as np


def sparse_attention_stream(
    steps: int,
    k: int = 2048,
    sinks: int = 64,
    window: int = 512,
    keep: float = 0.85,
    context0: int = 8000,
    seed: int = 0,
) -> tuple[np.ndarray, int]:
    """Return ``(keys, n_keys)``: ``steps * k`` int64 positions, shuffled within a step.

    Step ``t`` sees a context of ``context0 + t`` positions; the middle set has
    ``k - sinks - window`` positions outside sinks and window, of which a ``keep``
    share carries over from the previous step and the rest are drawn fresh.
    """
    rng = np.random.default_rng(seed)
    n_mid = k - sinks - window
    if n_mid < 0 or context0 < k:
        raise ValueError("need k >= sinks + window and context0 >= k")
    out = np.empty((steps, k), dtype=np.int64)
    mid = np.empty(0, dtype=np.int64)
    for t in range(steps):
        ctx = context0 + t
        lo, hi = sinks, ctx - window  # middle positions lie in [lo, hi)
        mid = mid[mid < hi]
        n_keep = min(mid.size, int(round(keep * n_mid)))
        kept = rng.choice(mid, size=n_keep, replace=False) if n_keep else mid[:0]
        fresh = np.setdiff1d(rng.choice(np.arange(lo, hi), size=min(2 * n_mid, hi - lo), replace=False), kept)
        mid = np.concatenate([kept, rng.permutation(fresh)[: n_mid - n_keep]])
        row = np.concatenate([np.arange(sinks), mid, np.arange(hi, ctx)])
        out[t] = rng.permutation(row)
    return out.ravel(), context0 + steps
