"""CLI: ``toolkit replay mrc`` for any policy, or with sampling; mounted through
``commands.selections.replay_mrc_cmd``, which keeps the exact one-pass LRU curve."""

from __future__ import annotations

from typing import Annotated

import typer

from toolkit.commands.common import choices, fail, guard

PolicyOpt = Annotated[str, typer.Option(
    "--policy", help=f"Cache policy: {choices('policy')}. lru without sampling is the exact "
    "one-pass curve (stored in miss_curves); any other policy, or lru with --sample-rate or "
    "--sample-keys, is estimated from a spatially sampled stream (SHARDS for lru, mini "
    "caches otherwise); --sample-rate 1 replays every size exactly.")]
SampleRateOpt = Annotated[float | None, typer.Option(
    "--sample-rate", min=0.0, max=1.0, help="Keep this share of the keys (fixed-rate "
    "SHARDS), e.g. 0.01; 1 = exact per-size replays; at least 1e-6.")]
SampleKeysOpt = Annotated[int | None, typer.Option(
    "--sample-keys", min=1, help="Keep this many distinct keys (fixed-size SHARDS; default "
    "65536 when neither sampling option is given).")]


MIN_SAMPLE_RATE = 1e-6
"""Smallest ``--sample-rate``: SHARDS is accurate from ~0.001 (Waldspurger et al., FAST
'15); far below it a trace keeps (almost) no key and every miss ratio read 0, capacity 0
included. (Kept here, not in ``toolkit.replay.shards``: that module is a source of the
ahead-of-time kernels, whose build any edit invalidates.)"""


def policy_curve_rows(store, trace: str, kind: str, sizes: list[int], policy: str,
                      sample_rate: float | None, sample_keys: int | None,
                      workers: int | None) -> list[dict]:
    """The rows ``replay mrc`` prints for a sampled or non-LRU curve."""
    from toolkit.replay.mrc import policy_miss_curve, stored_streams

    if sample_rate is not None and sample_keys is not None:
        fail("give --sample-rate or --sample-keys, not both")
    if sample_rate is not None and not MIN_SAMPLE_RATE <= sample_rate <= 1:
        fail(f"--sample-rate must lie in [{MIN_SAMPLE_RATE:g}, 1], got {sample_rate:g}")
    if kind == "selections" and trace not in store.keys("selections"):
        known = ", ".join(store.keys("selections")) or "none"
        fail(f"no selection trace {trace!r} in {store.root}; known: {known}")
    streams = guard(stored_streams, store, trace, kind, workers)
    curve = guard(policy_miss_curve, streams, sizes, policy, sample_rate=sample_rate,
                  sample_keys=sample_keys, workers=workers)
    return [{"capacity": int(c), "accesses": curve.accesses, "misses": int(m),
             "miss_ratio": float(r), "policy": policy, "method": curve.method,
             "sample_rate": curve.sample_rate}
            for c, m, r in zip(curve.sizes, curve.misses, curve.miss_ratio, strict=True)]
