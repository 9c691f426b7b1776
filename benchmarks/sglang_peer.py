"""Drive SGLang's own prefix caches over the bundled Mooncake trace; write per-request hits.

Two references for the toolkit's ``--sequential`` tier replay: the device tier
(``RadixCache``; ``tests/data/sglang_peer_mooncake.npz``, ``tests/test_tiers_sglang.py``)
and, with ``--host-tokens``, the device + host (HiCache, L2) tiers of ``UnifiedRadixCache``
(``tests/data/sglang_host_peer_mooncake.npz``, ``tests/test_tiers_sglang_host.py``).
It runs in a SEPARATE venv with SGLang; the toolkit does not depend on SGLang::

    python3 -m venv /tmp/sglang-venv
    /tmp/sglang-venv/bin/pip install torch==2.13.0   # the CPU wheel
    /tmp/sglang-venv/bin/pip install --no-deps sglang==0.5.23
    # then the modules its imports need (orjson psutil pybase64 requests triton packaging
    # pillow starlette msgspec pydantic pyzmq tqdm ipython aiohttp transformers
    # torchvision dill apache-tvm-ffi sentencepiece compressed-tensors gguf)
    /tmp/sglang-venv/bin/python benchmarks/sglang_peer.py --out tests/data/sglang_peer_mooncake.npz
    # host tier: the modules the unified cache's imports also need (openai,
    # partial_json_parser, datasets), then
    /tmp/sglang-venv/bin/python benchmarks/sglang_peer.py --host-tokens 409600 819200
    # host pools below the device pool (hicache_ratio 0.25 / 0.5 / 0.75), three page sizes,
    # the first 2,000 requests, running counts every 100 (about 7 minutes on 2 busy cores)
    /tmp/sglang-venv/bin/python benchmarks/sglang_peer.py --host-tokens 25600 51200 76800 \
        --device-tokens 102400 --page 1 16 64 --limit 2000 --every 100 \
        --out tests/data/sglang_host_ratio_peer_mooncake.npz

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

Host tier (``--host-tokens``): HiCache driven through SGLang's own classes
------------------------------------------------------------------------------
In 0.5.23 there is no ``HiRadixCache`` class and the scheduler's default tree cache is
``UnifiedRadixCache`` (``mem_cache/registry.py``: ``create_unified_radix_cache``), with
HiCache set up by ``UnifiedRadixCache.init_hicache``. :func:`run_host` builds it the way
SGLang's own CPU unit-test kit does (``sglang/test/kits/unified_radix_cache``:
``build_fixture`` + ``_init_hicache``, which calls the real ``init_hicache``), one
request at a time, ``--page`` tokens a page, ``--device-tokens`` on the device:

REAL (SGLang 0.5.23 code, unmodified): ``UnifiedRadixCache`` and its default Rust tree core
(``RustUnifiedTreeCore``: match, split, insert, hit counting, LRU/LFU leaf eviction,
demotion to host, host-leaf eviction, write-back deferred demote, load-back commit),
``FullComponent``, ``init_hicache`` -> ``attach_hybrid_pool_to_unified_cache`` ->
``HybridCacheController`` (write / load queues, ack queues, ``allocate_host_transfers``),
the host KV pool ``MHATokenToKVPoolHost`` and its page allocator (host capacity, sized by
``hicache_ratio`` = host / device tokens plus SGLang's one padding page), the device
``MHATokenToKVPool`` + ``TokenToKVPoolAllocator`` (1 head x 1 dim x 1 layer: only
indices matter), ``write_through_threshold`` (1 for write_through, 2 otherwise),
``load_back_threshold`` (10), ``evict_to_free_tokens`` / ``evict_for_alloc``,
``init_load_back`` / ``load_back`` / ``writing_check`` / ``loading_check`` /
``flush_pending_backups``.

STUBBED: (1) ``HybridCacheController.l2_transfer_engine`` (``L2TransferEngine``, which
copies KV bytes on device streams with sgl-kernel kernels) by ``_InstantL2``: no bytes
move and every transfer's ack events report done at once, so each ack is processed at
the next ``check_hicache_events``-equivalent poll (after every request), as it would be
once the copy finished; (2) ``pool_host.common._cuda_host_register`` (pinning with
``cudaHostRegister``) by a no-op; (3) ``torchvision``, imported by
``sglang.srt.configs`` for image models and never used by the cache, by an empty module
when it cannot be imported; (4) the scheduler itself: the request protocol below
mirrors ``schedule_policy.PrefillAdder.add_one_req`` and ``cache_finished_req`` for a
lone request with no decode and no storage (L3) backend.

Protocol per request (arrival order, one at a time):

1. ``match_prefix`` -> ``device_prefix_len`` (GPU hit tokens), ``host_hit_length``;
2. ``inc_lock_ref(last_device_node)``; if ``host_hit_length > 0``, ``init_load_back``
   (``load_back`` declines runs shorter than ``load_back_threshold`` and evicts device
   leaves to make room), then ``ready_to_load_host_cache``; the loaded tokens are the
   request's host hit tokens, and its lock moves to the loaded node;
3. ``allocator.evict_to_free_tokens(cache, ceil_page(prompt - cached))``, allocate;
4. ``insert`` the page-aligned prompt with ``prev_prefix_len`` = the cached prefix (the
   scheduler's ``cache_protected_len``), even when all of it was cached: the scheduler's
   ``checkpoint_into_tree`` always inserts, and that insert stamps and counts the path
   (which selective write-through backs up on); free the partial page, ``dec_lock_ref``;
5. poll: ``flush_pending_backups`` (submits write-through / selective backups queued by
   ``insert``), ``writing_check`` and ``loading_check`` over every ack.

Running counts (``--every``): tokens of host writes, of backups refused for want of host
room, of host copies freed and of device tokens evicted, after each request, counted by
wrappers on the cache instance around SGLang's own ``_execute_kv_backup``, host pool
``free`` and ``_evict`` (:func:`_count_transfers`); they change nothing SGLang does.
Host pools are ``--host-tokens`` N: SGLang is given ``hicache_ratio = N / device`` and
allocates ``int(device x ratio)`` tokens in whole pages plus one padding page, the
``_capacity`` the fixture records (``TierReplayConfig.host_pool_tokens`` sizes
``--host-ratio`` the same way).

Prompts longer than the device pool are skipped whole (0 hits), as SGLang's scheduler
never admits them and as the toolkit counts them (``oversize_requests``).
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
# host-tier mode: one device pool and page, two host pools (SGLang's default
# hicache_ratio 2, and 4), every write policy
HOST_FIXTURE = ROOT / "tests" / "data" / "sglang_host_peer_mooncake.npz"
HOST_PAGE = 64
HOST_DEVICE_TOKENS = 204_800
HOST_TOKENS = (409_600, 819_200)
WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")


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


class _Done:
    """A device event that has already fired (``query`` True, ``synchronize`` returns)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def record(self, *args) -> None:
        return None

    def wait(self, *args) -> None:
        return None


class _InstantL2:
    """Stands in for SGLang's ``L2TransferEngine``: the controller's write and load queues,
    host allocation and acks stay real; no KV bytes are copied, and every transfer is
    complete when submitted."""

    def submit_device_to_host(self, transfers):
        from sglang.srt.mem_cache.l2_transfer import TransferCompletion

        return TransferCompletion(_Done(), _Done(), False)

    def submit_host_to_device(self, transfers, *, transfer_layer_id_max, start_event=None,
                              on_layer_done=None):
        from sglang.srt.mem_cache.l2_transfer import TransferCompletion

        return TransferCompletion(_Done(), _Done(), False)


def _stub_torchvision() -> None:
    """``sglang.srt.configs`` imports torchvision (image processors); the cache never uses
    it, and a CPU torch often has no matching torchvision. Install an empty stand-in only
    when the real one cannot be imported."""
    import enum
    import importlib.machinery
    import sys

    try:
        import torchvision  # noqa: F401
        return
    except Exception:
        for k in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[k]

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        NEAREST_EXACT = "nearest-exact"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"
        BOX = "box"
        HAMMING = "hamming"
        LANCZOS = "lanczos"

    def attr(mod_name):
        def get(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {"__init__": lambda self, *a, **k: None})
        return get

    names = ("torchvision", "torchvision.transforms", "torchvision.transforms.functional",
             "torchvision.transforms.v2", "torchvision.transforms.v2.functional",
             "torchvision.io", "torchvision.ops")
    for name in names:
        m = types.ModuleType(name)
        m.__spec__ = importlib.machinery.ModuleSpec(name, None)
        m.__file__ = f"<stub {name}>"
        m.__version__ = "0.0+stub"
        m.__getattr__ = attr(name)
        sys.modules[name] = m
    for name in names[1:]:
        parent, _, child = name.rpartition(".")
        setattr(sys.modules[parent], child, sys.modules[name])
    sys.modules["torchvision.transforms"].InterpolationMode = InterpolationMode


def build_host_cache(page: int, device_tokens: int, host_tokens: int, write_policy: str,
                     policy: str = "lru", host_ratio: float | None = None):
    """SGLang's ``UnifiedRadixCache`` with HiCache, built as its CPU unit-test kit builds
    it (``build_fixture`` + ``init_hicache``), ``hicache_ratio`` = ``host_ratio`` or else
    ``host_tokens / device_tokens``. Returns (cache, device allocator)."""
    import atexit

    _stub_torchvision()
    import sglang.srt.mem_cache.pool_host.common as host_common
    import torch
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    host_common._cuda_host_register = lambda *a, **k: None  # no pinning on CPU
    args = ServerArgs(model_path="dummy", page_size=page, hicache_io_backend="kernel",
                      hicache_write_policy=write_policy,
                      hicache_ratio=host_ratio if host_ratio is not None
                      else host_tokens / device_tokens)
    set_global_server_args_for_scheduler(args)
    kv = MHATokenToKVPool(size=device_tokens, page_size=page, dtype=torch.bfloat16,
                          head_num=1, head_dim=1, layer_num=1, device="cpu",
                          enable_memory_saver=False)
    allocator = TokenToKVPoolAllocator(size=device_tokens, dtype=torch.bfloat16,
                                       device="cpu", kvcache=kv, need_sort=False)
    params = CacheInitParams(
        req_to_token_pool=ReqToTokenPool(size=4, max_context_len=8, device="cpu",
                                         enable_memory_saver=False),
        token_to_kv_pool_allocator=allocator, page_size=page, disable=False,
        tree_components=(ComponentType.FULL,), eviction_policy=policy,
    )
    cache = UnifiedRadixCache(params=params)
    if host_tokens > 0 or host_ratio:
        cache.init_hicache(args, params)
        atexit.unregister(cache.shutdown)
        cache.cache_controller.l2_transfer_engine = _InstantL2()
    return cache, allocator


def _poll(cache) -> None:
    """The scheduler's per-step ``check_hicache_events`` with every transfer done."""
    cc = cache.cache_controller
    if cc is None:
        return
    cache.flush_pending_backups()
    cache.writing_check(finish_count=len(cc.ack_write_queue))
    cache.loading_check(finish_count=len(cc.ack_load_queue))


# running counts (tokens) :func:`run_host` records after every request, named as the
# toolkit's tier counters (``toolkit.schema.TIER_COUNTERS``)
COUNTS = ("host_writes", "host_backup_failures", "host_evictions", "device_evictions")


def _count_transfers(cache) -> dict[str, int]:
    """Count, without changing what they do, the tokens SGLang's cache moves: each
    ``_execute_kv_backup`` (one node's device -> host backup) that is written
    (``host_writes``) or refused for want of host room after ``evict_host``
    (``host_backup_failures``); each host-pool ``free`` (``host_evictions``: host copies
    evicted or dropped); each ``_evict``'s device tokens (``device_evictions``: leaves
    demoted to host or deleted). The wrappers sit on the instance, so SGLang's classes
    are untouched."""
    tally = dict.fromkeys(COUNTS, 0)
    cc = cache.cache_controller
    evict = cache._evict

    def counted_evict(*args, **kwargs):
        res = evict(*args, **kwargs)
        tally["device_evictions"] += int(res.num_tokens_evicted)
        return res

    cache._evict = counted_evict
    if cc is None:
        return tally
    backup = cache._execute_kv_backup
    free = cc.mem_pool_host.free

    def counted_backup(node_id, device_value, comp_xfers, sidecar_xfers):
        res = backup(node_id, device_value, comp_xfers, sidecar_xfers)
        if res is None:
            tally["host_backup_failures"] += len(device_value)
        else:
            tally["host_writes"] += len(res)
        return res

    def counted_free(indices, *args, **kwargs):
        tally["host_evictions"] += len(indices)
        return free(indices, *args, **kwargs)

    cache._execute_kv_backup = counted_backup
    cc.mem_pool_host.free = counted_free
    return tally


def run_host(hashes, prompt, page: int, device_tokens: int, host_tokens: int,
             write_policy: str, policy: str = "lru", progress: int = 0,
             host_ratio: float | None = None):
    """Per-request (GPU hit tokens, host hit tokens) from SGLang's HiCache, the host
    pool's capacity in tokens as SGLang sized it (see the module docstring), and the
    running counts (:data:`COUNTS`, one row per request). ``host_ratio`` is passed to
    SGLang as ``hicache_ratio`` instead of ``host_tokens / device_tokens``."""
    _stub_torchvision()
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import (
        InitLoadBackParams,
        InsertParams,
        MatchPrefixParams,
    )
    from sglang.srt.mem_cache.radix_cache import RadixKey

    cache, allocator = build_host_cache(page, device_tokens, host_tokens, write_policy,
                                        policy, host_ratio)
    cc = cache.cache_controller
    host_capacity = cc.mem_pool_host.available_size() if cc is not None else 0
    tally = _count_transfers(cache)
    gpu = np.zeros(len(prompt), np.int64)
    host = np.zeros(len(prompt), np.int64)
    running = np.zeros((len(prompt), len(COUNTS)), np.int64)
    empty = torch.empty((0,), dtype=torch.int64)
    t0 = time.perf_counter()
    for r, (h, p) in enumerate(zip(hashes, prompt, strict=True)):
        p = int(p)
        if -(-p // page) * page > device_tokens:
            continue  # never admitted (oversize)
        toks = tokens_of(h, p)
        m = cache.match_prefix(MatchPrefixParams(key=RadixKey(toks)))
        gpu[r] = m.device_prefix_len
        last = m.last_device_node
        lock = cache.inc_lock_ref(last).to_dec_params()
        loaded = 0
        if m.host_hit_length > 0:
            req = types.SimpleNamespace(
                rid=r, last_node=last, extra_key=None, swa_host_hit_length=0,
                mamba_host_hit_length=0, kv=types.SimpleNamespace(mamba_pool_idx=None))
            loaded, new_last = cache.init_load_back(InitLoadBackParams(
                best_match_node=m.best_match_node, host_hit_length=m.host_hit_length,
                req=req))
            if loaded:
                cache.ready_to_load_host_cache()
                new_lock = cache.inc_lock_ref(new_last).to_dec_params()
                cache.dec_lock_ref(last, lock)
                last, lock = new_last, new_lock
        host[r] = loaded
        cached = int(m.device_prefix_len) + int(loaded)
        need = -(-(p - cached) // page) * page
        new = empty
        if need > 0:
            allocator.evict_to_free_tokens(cache, need)
            new = allocator.alloc(need)
            if new is None:
                raise RuntimeError(f"request {r}: {need} device tokens not allocatable")
        value = torch.cat([cache.path_device_indices(last)[:cached], new])
        key_len = p // page * page
        if key_len > 0:
            # always, as the scheduler does (step 4); the tree adopts slots past ``cached``
            # where it re-fills host-only nodes (a host run the load-back declined) and
            # frees duplicates itself
            cache.insert(InsertParams(key=RadixKey(toks[:key_len]), value=value[:key_len],
                                      prev_prefix_len=cached))
        if len(value) > max(key_len, cached):
            allocator.free(value[max(key_len, cached):])  # the partial page
        cache.dec_lock_ref(last, lock)
        _poll(cache)
        running[r] = [tally[k] for k in COUNTS]
        if progress and (r + 1) % progress == 0:
            print(f"  {r + 1:,} requests, {time.perf_counter() - t0:.0f} s", flush=True)
    return gpu, host, host_capacity, running


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
    _stub_torchvision()
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


def host_column(write_policy: str, host_tokens: int) -> str:
    """The fixture's column prefix of one host-tier configuration."""
    return f"{write_policy}_h{host_tokens}"


def main_host(args, hashes, prompt, order) -> None:
    """Host-tier mode. One page size: columns ``{write}_h{host}`` and a scalar
    ``page_tokens`` (the six-configuration fixture); several: ``p{page}_{write}_h{host}``
    and ``page_tokens`` lists them. ``--every K`` also stores each configuration's
    running counts (:data:`COUNTS`) after requests K, 2K, ... as ``{name}_running``."""
    import sglang

    cols: dict[str, np.ndarray] = {}
    pages = args.page
    at = np.arange(args.every, len(prompt) + 1, args.every) if args.every else None
    for page in pages:
        for write in args.write_policies:
            for host_tokens in args.host_tokens:
                t0 = time.perf_counter()
                gpu, host, capacity, running = run_host(
                    hashes, prompt, page, args.device_tokens, host_tokens, write,
                    progress=args.progress)
                name = host_column(write, host_tokens)
                name = name if len(pages) == 1 else f"p{page}_{name}"
                cols[f"{name}_gpu"] = gpu.astype(np.int32)
                cols[f"{name}_host"] = host.astype(np.int32)
                cols[f"{name}_capacity"] = np.array(capacity, np.int64)
                if at is not None:
                    cols[f"{name}_running"] = running[at - 1]
                tail = ", ".join(f"{k} {v:,}" for k, v in zip(COUNTS, running[-1].tolist(),
                                                                  strict=True))
                print(f"{name}: host pool {capacity:,} tokens; {int(gpu.sum()):,} GPU and "
                      f"{int(host.sum()):,} host hit tokens of {int(prompt.sum()):,}; {tail} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
    out = HOST_FIXTURE if args.out == FIXTURE else args.out
    extra = {} if at is None else {"running_after": at.astype(np.int32),
                                   "running_counts": np.array(COUNTS)}
    np.savez_compressed(
        out, request_id=order.astype(np.int32), prompt_tokens=prompt.astype(np.int32),
        sglang_version=np.array(sglang.__version__),
        page_tokens=np.array(pages[0] if len(pages) == 1 else pages),
        device_tokens=np.array(args.device_tokens), **extra, **cols,
    )
    print(f"wrote {out} (sglang {sglang.__version__})")


def main() -> None:
    import sglang

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=FIXTURE,
                    help=f"default {FIXTURE.name}; with --host-tokens {HOST_FIXTURE.name}")
    ap.add_argument("--pages", type=int, nargs="*", default=list(PAGES))
    ap.add_argument("--capacities", type=int, nargs="*", default=list(CAPACITIES),
                    help="device tokens, -1 unbounded (the extra runs need the defaults)")
    ap.add_argument("--limit", type=int, default=0, help="first N requests only (smoke run)")
    ap.add_argument("--host-tokens", type=int, nargs="*", default=None,
                    help="host-tier mode: SGLang's UnifiedRadixCache + HiCache with these "
                         f"host pools in tokens (the fixture uses {HOST_TOKENS})")
    ap.add_argument("--write-policies", nargs="*", default=list(WRITE_POLICIES),
                    choices=WRITE_POLICIES, help="host-tier mode: HiCache write policies")
    ap.add_argument("--device-tokens", type=int, default=HOST_DEVICE_TOKENS,
                    help="host-tier mode: the device pool in tokens")
    ap.add_argument("--page", type=int, nargs="+", default=[HOST_PAGE],
                    help="host-tier mode: page sizes")
    ap.add_argument("--every", type=int, default=0,
                    help="host-tier mode: store running counts every N requests (0: never)")
    ap.add_argument("--progress", type=int, default=2000,
                    help="host-tier mode: print progress every N requests (0: never)")
    args = ap.parse_args()
    hashes, prompt, order = load()
    if args.limit:
        hashes, prompt, order = hashes[: args.limit], prompt[: args.limit], order[: args.limit]
    if args.host_tokens is not None:
        main_host(args, hashes, prompt, order)
        return
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
