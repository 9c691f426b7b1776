"""Prefix-block replay of a request timeline through one block cache.

Semantics (also in README.md): requests are replayed in arrival order; each request
looks up its blocks in order; a lookup hits if the block is cached; every looked-up
block becomes most recently used (inserted on a miss, evicting per policy when full);
no capacity means unbounded. Block ``i`` of a request covers
``min(block_tokens, input_tokens - block_tokens*i)`` tokens, floored at 0.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numba as nb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from toolkit import __version__
from toolkit.config import config_json, fingerprint
from toolkit.errors import ToolkitError
from toolkit.policies import policies
from toolkit.replay.keys import dense_ids
from toolkit.replay.parallel import ordered_results, resolve_workers
from toolkit.replay.progress import progress as progress_bar
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


@nb.njit(cache=True, nogil=True)
def _lookup_tokens(offsets, prompt, block_tokens):  # pragma: no cover - compiled
    """Tokens each lookup covers: block i of a request covers
    ``min(bt, prompt - bt * i)``, floored at 0 (one pass, no per-lookup index arrays)."""
    n_req = offsets.shape[0] - 1
    tokens = np.empty(offsets[n_req] - offsets[0], dtype=np.int64)
    base = offsets[0]
    for r in range(n_req):
        bt = block_tokens[r]
        left = prompt[r]
        for j in range(offsets[r] - base, offsets[r + 1] - base):
            tokens[j] = min(max(left, 0), bt)
            left -= bt
    return tokens


def block_stream(requests: pa.Table) -> BlockStream:
    """Flatten a ``requests`` table (already in arrival order) into a :class:`BlockStream`."""
    hashes = requests.column("block_hashes").combine_chunks()
    offsets = hashes.offsets.to_numpy().astype(np.int64)
    flat = hashes.flatten().to_numpy(zero_copy_only=False)
    keys, n_keys = dense_ids(flat)
    lengths = np.diff(offsets)
    starts = offsets[:-1] - offsets[0]
    prompt = requests.column("input_tokens").to_numpy().astype(np.int64)
    bt = requests.column("block_tokens").fill_null(0).to_numpy().astype(np.int64)
    tokens = _lookup_tokens(offsets, prompt, bt)
    return BlockStream(keys, n_keys, tokens, starts, lengths, prompt)


@nb.njit(cache=True, nogil=True)
def _hit_totals(hits, tokens, starts, lengths):  # pragma: no cover - compiled
    """(hit lookups, hit tokens, prefix-hit blocks, prefix-hit tokens) in one pass: a
    request's prefix hit is its leading run of hits."""
    hit_count = 0
    hit_tokens = 0
    run_blocks = 0
    run_tokens = 0
    for r in range(starts.shape[0]):
        in_run = True
        for j in range(starts[r], starts[r] + lengths[r]):
            if hits[j]:
                hit_count += 1
                hit_tokens += tokens[j]
                if in_run:
                    run_blocks += 1
                    run_tokens += tokens[j]
            else:
                in_run = False
    return hit_count, hit_tokens, run_blocks, run_tokens


def summarize(stream: BlockStream, hits: np.ndarray) -> dict[str, Any]:
    """Run-level counts; ratios are over prompt tokens / block lookups (0 when empty)."""
    n = hits.size
    flags = np.asarray(hits, dtype=np.bool_).view(np.uint8)
    hit_count, hit_tokens, run_blocks, prefix_tokens = (int(x) for x in _hit_totals(
        flags, stream.tokens, stream.starts, stream.lengths))
    prompt_tokens = int(stream.prompt_tokens.sum())

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
        "prefix_hit_blocks": run_blocks,
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
    store: Store, trace: str, capacities: list[int | None], policy: str = "lru",
    *, workers: int | None = None, save: bool = True, progress: bool | None = None,
) -> list[dict[str, Any]]:
    """Replay one trace at several capacities, flattening it once.

    Capacities replay on ``workers`` threads (``None`` = every core; the kernels release
    the GIL); rows come back in the order of ``capacities`` and are written from this
    thread, so the result does not depend on ``workers``. ``progress``: a bar of block
    lookups replayed (``None`` = on a terminal or in a notebook, after 2 s).
    """
    stream = load_stream(store, trace)
    cfgs = [PrefixReplayConfig(trace, policy, c) for c in capacities]
    work = [functools.partial(replay_prefix, store, c, stream=stream, save=False) for c in cfgs]
    rows = []
    with progress_bar(len(cfgs) * stream.keys.size, f"prefix sweep {trace}", progress,
                      unit="lookup") as bar:
        for row in ordered_results(work, resolve_workers(workers)):
            rows.append(row)
            bar.update(stream.keys.size)
    if save:
        for cfg, row in zip(cfgs, rows, strict=True):
            store.write("replay_runs", cfg.run_id, pa.Table.from_pylist([row]), replace=True)
    return rows
