"""Plain-Python policies written for clarity, to check the compiled kernels against.

Not registered: they implement the same Protocol but run ~50x slower than the kernels.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from toolkit.policies import SimResult, as_segments, check_keys


class PythonLRU:
    """LRU on an ``OrderedDict`` (last item = most recently used)."""

    name = "lru-python"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        keys = check_keys(keys, n_keys)
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        starts = as_segments(segments, keys.size).tolist()
        ends = [*starts[1:], keys.size][: len(starts)]  # no segments for an empty stream
        hits = np.zeros(keys.size, dtype=np.bool_)
        evictions = 0
        stream = keys.tolist()
        for lo, hi in zip(starts, ends, strict=True):
            cache: OrderedDict[int, None] = OrderedDict()
            for i in range(lo, hi):
                k = stream[i]
                if k in cache:
                    hits[i] = True
                    cache.move_to_end(k)
                elif capacity:
                    if len(cache) == capacity:
                        cache.popitem(last=False)
                        evictions += 1
                    cache[k] = None
        return SimResult(hits, evictions)


class PythonOPT:
    """Belady by brute force: on a full miss, scan the cache for the key used furthest
    ahead (O(capacity) per eviction). ``bypass`` declines a missed key used no sooner."""

    def __init__(self, bypass: bool = False) -> None:
        self.bypass = bypass
        self.name = "opt-python-bypass" if bypass else "opt-python"

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        keys = check_keys(keys, n_keys)
        starts = as_segments(segments, keys.size).tolist()
        ends = [*starts[1:], keys.size][: len(starts)]
        hits = np.zeros(keys.size, dtype=np.bool_)
        evictions = 0
        stream = keys.tolist()
        for lo, hi in zip(starts, ends, strict=True):
            nxt = [hi] * (hi - lo)  # hi stands for "never again in this segment"
            seen: dict[int, int] = {}
            for i in range(hi - 1, lo - 1, -1):
                nxt[i - lo] = seen.get(stream[i], hi)
                seen[stream[i]] = i
            cache: dict[int, int] = {}  # key -> its next use
            for i in range(lo, hi):
                k, nu = stream[i], nxt[i - lo]
                if k in cache:
                    hits[i] = True
                    cache[k] = nu
                    continue
                if not capacity:
                    continue
                if len(cache) == capacity:
                    victim = max(cache, key=cache.__getitem__)
                    if self.bypass and nu >= cache[victim]:
                        continue
                    del cache[victim]
                    evictions += 1
                cache[k] = nu
        return SimResult(hits, evictions)
