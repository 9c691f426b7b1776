"""Miss-ratio curves for every policy from a spatially sampled stream (SHARDS, mini caches).

Spatial sampling keeps every access to a key whose hash falls under a threshold ``T``
out of ``P = 2^24``: the sampled stream has rate ``R = T / P`` of the keys and, in
expectation, of the accesses, and a cache of ``c`` slots behaves like a cache of ``R * c``
slots on it (Waldspurger et al., SHARDS, FAST '15; miniature simulations, ATC '17).

- LRU: the sampled stream's stack distances, scaled by ``1 / R``, give every size in one
  pass (SHARDS).
- Any other policy: one replay per size of a mini cache of ``round(R * c)`` slots over the
  sampled stream (miniature simulation). It costs ``R`` of a full replay per size.

Fixed rate (``sample_rate``) or fixed size (``sample_keys``): the latter keeps the
``sample_keys`` keys of smallest hash, the set that SHARDS' fixed-size mode ends with
(it lowers ``T`` as keys arrive); computing the threshold before the replay makes every
size's mini cache see the same sample. In a segmented stream (one cold buffer per request
x layer) a key is a (segment, key) pair, so each buffer keeps its own random subset.

The estimate divides sampled misses by the expected sampled accesses ``R * N``
(SHARDS-adj): a hot key that happens to be in, or out of, the sample moves the hit count,
not the denominator.
"""

from __future__ import annotations

import numpy as np

from toolkit.runtime.aot import nb

HASH_SPACE = 1 << 24
"""``P``: sampling thresholds are integers in ``[0, P]``."""


@nb.njit(inline="always")
def _mix(x):  # pragma: no cover - compiled
    """splitmix64's finaliser: a uniform 64-bit hash of a 64-bit integer."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(inline="always")
def _key_hash(seg, key, salt):  # pragma: no cover - compiled
    v = (np.uint64(seg) << np.uint64(32)) ^ np.uint64(key) ^ np.uint64(salt)
    return np.int64(_mix(v) & np.uint64(HASH_SPACE - 1))


@nb.njit(cache=True, nogil=True)
def _first_hashes(keys, n_keys, segments, salt, seg_base):  # pragma: no cover - compiled
    """The hash of every distinct (segment, key) pair (in no particular order).

    One segment: a byte per key marks the keys present, then each is hashed once (a byte
    map stays in cache where a stamp per key of a 10M-key stream does not: 5x faster on
    100M accesses). Several: a stamp per key remembers the last segment that hashed it."""
    n = keys.shape[0]
    n_seg = segments.shape[0]
    if n_seg == 1:
        seen = np.zeros(n_keys, dtype=np.uint8)
        for i in range(segments[0], n):
            seen[keys[i]] = 1
        out = np.empty(n_keys, dtype=np.int64)
        m = 0
        for k in range(n_keys):
            if seen[k]:
                out[m] = _key_hash(seg_base, k, salt)
                m += 1
        return out[:m]
    stamp = np.full(n_keys, -1, dtype=np.int32)
    out = np.empty(n, dtype=np.int64)
    m = 0
    for s in range(n_seg):
        hi = segments[s + 1] if s + 1 < n_seg else n
        for i in range(segments[s], hi):
            k = keys[i]
            if stamp[k] != s:
                stamp[k] = s
                out[m] = _key_hash(seg_base + s, k, salt)
                m += 1
    return out[:m]


@nb.njit(cache=True, nogil=True)
def _sample(keys, segments, threshold, salt, seg_base):  # pragma: no cover - compiled
    """Accesses whose (segment, key) hash is below ``threshold``, and the sampled
    stream's segment starts (one per input segment, empty ones included)."""
    n = keys.shape[0]
    out = np.empty(n, dtype=keys.dtype)
    starts = np.empty(segments.shape[0], dtype=np.int64)
    m = 0
    n_seg = segments.shape[0]
    for s in range(n_seg):
        starts[s] = m
        hi = segments[s + 1] if s + 1 < n_seg else n
        for i in range(segments[s], hi):
            k = keys[i]
            if _key_hash(seg_base + s, k, salt) < threshold:
                out[m] = k
                m += 1
    return out[:m], starts


#: Smallest ``--sample-rate``: SHARDS is accurate from ~0.001 (Waldspurger et al., FAST
#: '15); far below it a trace keeps no key and every miss ratio read 0, capacity 0 included.
MIN_SAMPLE_RATE = 1e-6


def threshold_for_rate(rate: float) -> int:
    """The hash threshold of a sampling rate in [:data:`MIN_SAMPLE_RATE`, 1]."""
    if not MIN_SAMPLE_RATE <= rate <= 1:
        raise ValueError(f"--sample-rate must lie in [{MIN_SAMPLE_RATE:g}, 1], got {rate}")
    return max(1, round(rate * HASH_SPACE))


def smallest_hashes(keys: np.ndarray, n_keys: int, segments: np.ndarray, count: int,
                    salt: int, seg_base: int = 0) -> np.ndarray:
    """The ``count`` smallest (segment, key) hashes of a stream, sorted (fewer if it has
    fewer distinct pairs): chunks of a long trace merge theirs to find a fixed-size
    threshold with :func:`threshold_for_keys`."""
    h = _first_hashes(keys, int(n_keys), segments, np.int64(salt), np.int64(seg_base))
    if h.size > count:
        h = np.partition(h, count - 1)[:count]
    return np.sort(h)


def threshold_for_keys(hashes: np.ndarray, count: int) -> int:
    """The threshold that keeps ``count`` distinct keys, given the smallest hashes; every
    key (threshold ``P``) when the stream has no more than ``count``."""
    if count < 1:
        raise ValueError(f"--sample-keys must be >= 1, got {count}")
    if hashes.size <= count:
        return HASH_SPACE
    return int(np.partition(hashes, count)[count])  # keys with hash < it: about ``count``


def sample_stream(keys: np.ndarray, segments: np.ndarray, threshold: int, salt: int,
                  seg_base: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(sampled keys, their segment starts) at ``threshold`` out of :data:`HASH_SPACE`."""
    if threshold >= HASH_SPACE:
        return keys, segments
    return _sample(keys, segments, np.int64(threshold), np.int64(salt), np.int64(seg_base))


def mini_capacity(capacity: int, rate: float) -> int:
    """A cache of ``capacity`` slots, scaled to the sampled stream (at least one slot)."""
    return 0 if capacity <= 0 else max(1, round(capacity * rate))


@nb.njit(cache=True, nogil=True)
def _dense(keys, n_keys):  # pragma: no cover - compiled
    """Renumber keys 0.. in order of first appearance: (keys as int32, distinct count)."""
    ids = np.full(n_keys, -1, dtype=np.int32)
    out = np.empty(keys.shape[0], dtype=np.int32)
    m = 0
    for i in range(keys.shape[0]):
        k = keys[i]
        if ids[k] < 0:
            ids[k] = m
            m += 1
        out[i] = ids[k]
    return out, m


def dense_keys(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, int]:
    """A sample's keys renumbered densely, so a mini cache's arrays follow the sample's
    keys, not the whole key space (policies compare keys only for equality)."""
    out, m = _dense(keys, int(n_keys))
    return out, max(int(m), 1)
