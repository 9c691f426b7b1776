"""Prefix-block replay of a request timeline through one block cache.

Semantics (also in README.md): requests are replayed in arrival order; each request
looks up its blocks in order; a lookup hits if the block is cached; every looked-up
block becomes most recently used (inserted on a miss, evicting per policy when full);
no capacity means unbounded. Block ``i`` of a request covers
``min(block_tokens, input_tokens - block_tokens*i)`` tokens, floored at 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit import __version__
from toolkit.config import config_json, fingerprint
from toolkit.errors import ToolkitError
from toolkit.policies import policies
from toolkit.replay.keys import dense_ids
from toolkit.store import Store, bounded_key


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
        cap = "inf" if self.capacity_blocks is None else str(self.capacity_blocks)
        return bounded_key(f"prefix-{self.trace}-{self.policy}-{cap}-{fingerprint(self)[:8]}")


@dataclass(frozen=True)
class BlockStream:
    """A request timeline flattened to one lookup per (request, block), in replay order.

    Attributes:
        keys: dense block ids (int64), remapped from the trace's hashes.
        n_keys: number of distinct blocks.
        tokens: tokens each lookup covers.
        starts: offset of each request's first lookup (length = requests).
        lengths: lookups per request.
        prompt_tokens: input tokens per request.
    """

    keys: np.ndarray
    n_keys: int
    tokens: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    prompt_tokens: np.ndarray


def block_stream(requests: pa.Table) -> BlockStream:
    """Flatten a ``requests`` table (already in arrival order) into a :class:`BlockStream`."""
    hashes = requests.column("block_hashes").combine_chunks()
    lengths = pc.list_value_length(hashes).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = hashes.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    keys, n_keys = dense_ids(flat)
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    prompt = requests.column("input_tokens").to_numpy().astype(np.int64)
    bt = requests.column("block_tokens").fill_null(0).to_numpy().astype(np.int64)
    # position of each lookup within its request
    req_of = np.repeat(np.arange(lengths.size), lengths)
    pos = np.arange(flat.size, dtype=np.int64) - starts[req_of]
    tokens = np.clip(prompt[req_of] - bt[req_of] * pos, 0, bt[req_of])
    return BlockStream(keys, n_keys, tokens, starts, lengths, prompt)


def summarize(stream: BlockStream, hits: np.ndarray) -> dict[str, Any]:
    """Run-level counts; ratios are over prompt tokens / block lookups (0 when empty)."""
    n = hits.size
    hit_tokens = int(stream.tokens[hits].sum())
    # leading run of hits per request: index of the first miss (or the request length)
    pos = np.arange(n, dtype=np.int64) - np.repeat(stream.starts, stream.lengths)
    miss_pos = np.where(hits, np.iinfo(np.int64).max, pos)
    run = stream.lengths.copy()
    nonempty = stream.lengths > 0
    if n:
        first_miss = np.minimum.reduceat(miss_pos, stream.starts[nonempty])
        run[nonempty] = np.minimum(first_miss, stream.lengths[nonempty])
    csum = np.concatenate([[0], np.cumsum(stream.tokens)])
    prefix_tokens = int((csum[stream.starts + run] - csum[stream.starts]).sum())
    prompt_tokens = int(stream.prompt_tokens.sum())
    hit_count = int(hits.sum())

    def ratio(a: int, b: int) -> float:
        return a / b if b else 0.0

    return {
        "requests": int(stream.lengths.size),
        "prompt_tokens": prompt_tokens,
        "block_lookups": int(n),
        "block_hits": hit_count,
        "block_hit_ratio": ratio(hit_count, n),
        "hit_tokens": hit_tokens,
        "token_hit_ratio": ratio(hit_tokens, prompt_tokens),
        "prefix_hit_blocks": int(run.sum()),
        "prefix_hit_tokens": prefix_tokens,
        "prefix_token_hit_ratio": ratio(prefix_tokens, prompt_tokens),
    }


def load_stream(store: Store, trace: str) -> BlockStream:
    """Read a trace from the store in arrival order and flatten it."""
    table = store.read("requests", trace)
    order = pc.sort_indices(table, [("arrival_s", "ascending"), ("request_id", "ascending")])
    table = table.take(order)
    if pc.sum(pc.list_value_length(table.column("block_hashes"))).as_py() in (None, 0):
        raise ToolkitError(
            f"trace {trace!r} has no prefix-block hashes (e.g. an Azure timeline); "
            "prefix replay needs a trace with hashes such as Mooncake's"
        )
    return block_stream(table)


def replay_prefix(
    store: Store,
    cfg: PrefixReplayConfig,
    *,
    stream: BlockStream | None = None,
    save: bool = True,
) -> dict[str, Any]:
    """Replay ``cfg`` and return the summary (also written to ``replay_runs``).

    Pass ``stream`` to reuse one flattened trace across a capacity sweep.
    """
    policy = policies.get(cfg.policy)
    stream = stream or load_stream(store, cfg.trace)
    capacity = stream.n_keys if cfg.capacity_blocks is None else cfg.capacity_blocks
    t0 = time.perf_counter()
    sim = policy.simulate(stream.keys, stream.n_keys, min(capacity, stream.n_keys))
    summary = summarize(stream, sim.hits)
    elapsed = time.perf_counter() - t0
    row = {
        "run_id": cfg.run_id,
        "kind": "prefix",
        "trace": cfg.trace,
        "policy": cfg.policy,
        "capacity_blocks": cfg.capacity_blocks,
        "config_json": config_json(cfg),
        **summary,
        "evictions": sim.evictions,
        "elapsed_s": elapsed,
        "toolkit_version": __version__,
    }
    if save:
        store.write("replay_runs", cfg.run_id, pa.Table.from_pylist([row]), replace=True)
    return row


def sweep_prefix(
    store: Store, trace: str, capacities: list[int | None], policy: str = "lru"
) -> list[dict[str, Any]]:
    """Replay one trace at several capacities, flattening it once."""
    stream = load_stream(store, trace)
    return [
        replay_prefix(store, PrefixReplayConfig(trace, policy, c), stream=stream)
        for c in capacities
    ]
