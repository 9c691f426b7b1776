"""Drive SGLang's own ``RadixCache`` over the bundled Mooncake trace; write per-request hits.

This is the reference the toolkit's ``--radix-semantics sglang --sequential`` replay is
tested against (``tests/data/sglang_peer_mooncake.npz``, ``tests/test_tiers_sglang.py``).
It runs in a SEPARATE venv with SGLang; the toolkit does not depend on SGLang::

    python3 -m venv /tmp/sglang-venv
    /tmp/sglang-venv/bin/pip install torch==2.13.0   # the CPU wheel
    /tmp/sglang-venv/bin/pip install --no-deps sglang==0.5.23
    # then the modules its imports need (orjson psutil pybase64 requests triton packaging
    # pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp transformers
    # torchvision dill apache-tvm-ffi sentencepiece compressed-tensors gguf)
    /tmp/sglang-venv/bin/python benchmarks/sglang_peer.py --out tests/data/sglang_peer_mooncake.npz

Protocol, one request at a time in arrival order (ties by line = request_id), which is
SGLang's scheduler path for a lone request with no decode (``schedule_policy`` match,
``alloc_token_slots`` -> ``allocator.evict_to_free_tokens``, ``cache_unfinished_req``):

1. ``match_prefix`` on the prompt's token ids -> ``device_prefix_len`` = GPU hit tokens;
2. ``inc_lock_ref`` on the matched node (the running request's prefix is locked);
3. the request needs ``ceil_page(prompt - hit)`` token slots; if the free slots
   (capacity - tree tokens) are fewer, ``evict(shortfall)``;
4. ``insert`` the prompt (``insert`` page-aligns it), then ``dec_lock_ref``.

Token ids: Mooncake gives one chained hash per 512-token block, not tokens. Token ``j`` of
block ``h`` is ``h * 512 + j``, so two prompts share a token prefix exactly when they share
the block hashes (a partial last block shares its first tokens with a longer one).
``time.monotonic`` inside ``radix_cache`` is replaced by a counter that rises by 1 per call:
the same order of stamps as a real clock, without ties between calls, so runs repeat.

HiCache (the L2 host pool) is not driven. In 0.5.23 there is no ``HiRadixCache`` class:
HiCache is ``UnifiedRadixCache.init_hicache`` with a ``HybridCacheController``, whose base
in ``managers/cache_controller.py`` moves KV between the device and host pools with
``device_module.Event()`` / streams and a real device KV pool. SGLang's CPU unit tests
build ``UnifiedRadixCache.__new__`` shells with fake controllers to test single methods;
driving whole requests that way means faking the controller's write / ack / load-back
protocol (``_execute_kv_backup``, ``writing_check``, ``load_back``, ``loading_check``)
around the Python tree core, which was not done. The host-tier rules are derived from that
source instead (see ``toolkit/replay/tiers/radix.py``); only the device tier is proven here.
``benchmarks/engine_fuzz.py --engine sglang`` reuses :func:`run` on random traces.
"""

from __future__ import annotations

import argparse
import json
import time
import types
from array import array
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
BLOCK = 512
PAGES = (1, 64, 512)
FIXTURE = ROOT / "tests" / "data" / "sglang_peer_mooncake.npz"
CAPACITIES = (-1, 1_048_576, 204_800)  # tokens; -1 = unbounded


class _Clock:
    """A strictly increasing stand-in for ``time.monotonic`` (see module docstring)."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t


class _Allocator:
    """The slice of the KV allocator RadixCache touches: a device and ``free_segment``."""

    device = "cpu"

    def free_segment(self, indices, start_pos=0) -> None:
        return None


def load(path: Path = MOONCAKE) -> tuple[list[np.ndarray], np.ndarray]:
    rows = [json.loads(line) for line in path.open()]
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["timestamp"], i))
    hashes = [np.asarray(rows[i]["hash_ids"], np.int64) for i in order]
    prompt = np.array([rows[i]["input_length"] for i in order], np.int64)
    return hashes, prompt, np.asarray(order, np.int64)


def tokens_of(h: np.ndarray, prompt: int) -> array:
    tok = (h[:, None] * BLOCK + np.arange(BLOCK)[None, :]).reshape(-1)[:prompt]
    return array("q", tok.tobytes())


def run(hashes, prompt, page: int, capacity: int, policy: str = "lru") -> np.ndarray:
    import sglang.srt.mem_cache.radix_cache as rc
    from sglang.srt.mem_cache.base_prefix_cache import (
        EvictParams,
        InsertParams,
        MatchPrefixParams,
    )
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams

    rc.time = types.SimpleNamespace(monotonic=_Clock().monotonic,
                                    perf_counter=time.perf_counter)
    tree = rc.RadixCache(CacheInitParams(
        disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=_Allocator(),
        page_size=page, eviction_policy=policy,
    ))
    hits = np.zeros(len(prompt), np.int64)
    for r, (h, p) in enumerate(zip(hashes, prompt, strict=True)):
        key = rc.RadixKey(tokens_of(h, int(p)))
        m = tree.match_prefix(MatchPrefixParams(key=key))
        hit = m.device_prefix_len
        hits[r] = hit
        tree.inc_lock_ref(m.last_device_node)
        if capacity >= 0:
            need = -(-(int(p) - hit) // page) * page
            free = capacity - tree.evictable_size() - tree.protected_size()
            if need > free:
                tree.evict(EvictParams(num_tokens=need - free))
        tree.insert(InsertParams(key=key))
        tree.dec_lock_ref(m.last_device_node)
    return hits


def main() -> None:
    import sglang

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=FIXTURE)
    ap.add_argument("--pages", type=int, nargs="*", default=list(PAGES))
    ap.add_argument("--capacities", type=int, nargs="*", default=list(CAPACITIES),
                    help="device tokens, -1 unbounded (the extra runs need the defaults)")
    ap.add_argument("--limit", type=int, default=0, help="first N requests only (smoke run)")
    args = ap.parse_args()
    hashes, prompt, order = load()
    if args.limit:
        hashes, prompt, order = hashes[: args.limit], prompt[: args.limit], order[: args.limit]
    cols: dict[str, np.ndarray] = {}
    configs = [(p, c, "lru") for p in args.pages for c in args.capacities]
    if tuple(args.capacities) == CAPACITIES:
        # other policies, and the 1M / 200k-token capacities at 512-token pages
        configs += [(64, 204_800, "lfu"), (64, 204_800, "slru"),
                    (512, 1_000_000, "lru"), (512, 200_000, "lru")]
    for page, cap, policy in configs:
        t0 = time.perf_counter()
        hits = run(hashes, prompt, page, cap, policy)
        name = f"p{page}_c{cap}_{policy}"
        cols[name] = hits.astype(np.int32)
        print(f"{name}: {int(hits.sum()):,} GPU hit tokens of {int(prompt.sum()):,} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    np.savez_compressed(
        args.out, request_id=order.astype(np.int32), prompt_tokens=prompt.astype(np.int32),
        sglang_version=np.array(sglang.__version__), **cols,
    )
    print(f"wrote {args.out} (sglang {sglang.__version__})")


if __name__ == "__main__":
    main()
