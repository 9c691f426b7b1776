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
    taken = np.zeros(context0 + steps, dtype=np.bool_)  # scratch: positions in the middle set
    mid = np.empty(0, dtype=np.int64)
    for t in range(steps):
        ctx = context0 + t
        lo, hi = sinks, ctx - window  # middle positions lie in [lo, hi)
        mid = mid[mid < hi]
        n_keep = min(mid.size, int(round(keep * n_mid)))
        mid = rng.permutation(mid)[:n_keep]
        taken[mid] = True
        while mid.size < n_mid:  # fresh uniform picks, distinct and not already kept
            cand = np.unique(rng.integers(lo, hi, size=2 * (n_mid - mid.size)))
            cand = rng.permutation(cand[~taken[cand]])[: n_mid - mid.size]
            taken[cand] = True
            mid = np.concatenate([mid, cand])
        taken[mid] = False
        row = np.concatenate([np.arange(sinks), mid, np.arange(hi, ctx)])
        out[t] = rng.permutation(row)
    return out.ravel(), context0 + steps
