"""Drive vLLM's own ``KVCacheManager`` over the bundled Mooncake trace; write per-request hits.

This is the reference the toolkit's ``--engine-semantics vllm --sequential`` replay is
tested against (``tests/data/vllm_peer_mooncake.npz``, ``tests/test_tiers_vllm.py``).
It runs in a SEPARATE venv; the toolkit does not depend on vLLM::

    python3 -m venv /work/venvs/vllm
    /work/venvs/vllm/bin/pip install torch==2.13.0        # the CPU wheel
    /work/venvs/vllm/bin/pip install --no-deps vllm==0.33.0
    # then what ``import vllm.v1.core.kv_cache_manager`` needs: numpy msgspec pydantic
    # psutil cloudpickle pyzmq "transformers<5.21" tqdm requests cachetools regex
    # sentencepiece prometheus_client cbor2 aiohttp openai openai_harmony pillow
    # py-cpuinfo xgrammar fastapi partial_json_parser llguidance (and what else it asks)
    /work/venvs/vllm/bin/python benchmarks/vllm_peer.py --out tests/data/vllm_peer_mooncake.npz

What is real: ``KVCacheManager`` (its coordinator, ``FullAttentionManager`` and
``BlockPool`` with the free-block queue and the hash-to-block map), ``Request`` and the
request block hasher (``get_request_block_hasher`` with sha256), all vLLM 0.33.0 code
unchanged. What is stubbed: the scheduler. This script plays its part for a lone request
with no decode, one at a time in arrival order (ties by line = request_id):

1. ``get_computed_blocks(req)`` -> (blocks, hit tokens) = GPU hit tokens;
2. ``allocate_slots(req, prompt - hit, hit, blocks)`` (None = the prompt can never fit:
   recorded as a 0-token hit, nothing held);
3. ``free(req)`` (the request finished).

The CPU offloading tier (``--offload``, fixture ``tests/data/vllm_offload_mooncake.npz``):
what is real is ``CPUOffloadingManager`` with its ``LRUCachePolicy`` / ``ARCCachePolicy``
(``v1/kv_offload/cpu/``), ``ReqContext`` and ``make_offload_key``. The connector's
scheduler side (``OffloadingConnectorScheduler``, 2,400 lines of step bookkeeping) is
played by this script, making the manager calls it makes for a lone request with the
default config (offloaded block = GPU block, ``store_threshold`` 0, chunk-level policy,
no partial tail, no sliding window), transfers completing before the next call:

1. ``on_new_request``; GPU hit ``d`` blocks as above;
2. ``lookup`` of the keys after the GPU hit, up to the prompt's full blocks (not capped at
   ``prompt - 1``: ``_lookup_complete_chunks``), counting the leading hits ``h``;
3. ``h > 0``: ``prepare_load`` then ``complete_load`` of those keys
   (``update_state_after_alloc``), the store starting after them (chunk-level policy);
   ``h == 0``: the store offers every full block from 0 (``next_stored_chunk_idx = 0``);
4. ``prepare_store`` of the offered keys, ``complete_store`` of the stored ones
   (``_build_store_jobs``); a failed ``prepare_store`` (None) is retried once when the
   request finishes, as the finished-request pass does;
5. ``free``, then ``on_request_finished`` (end of ``_build_connector_meta``).

GPU allocation uses vLLM's sync-load call (``num_external_computed_tokens = h * block``);
an async load allocates the same blocks in two steps, leaving the same pool state for a
lone request. Requests that can never fit the GPU pool are skipped (no offload calls).

Token ids: Mooncake gives one chained hash per 512-token block. Token ``j`` of block ``h``
is ``h * 512 + j`` (as in ``sglang_peer.py``), so two prompts share a token prefix exactly
when they share block hashes.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT / "traces" / "mooncake" / "conversation_trace.jsonl"
BLOCK = 512
FIXTURE = ROOT / "tests" / "data" / "vllm_peer_mooncake.npz"
# (block tokens, device tokens); -1 = unbounded (at 512-token blocks: a pool of 9M 16-token
# blocks takes vLLM minutes to build)
CONFIGS = ((16, 1_048_576), (16, 204_800), (64, 204_800), (512, 1_000_000), (512, -1))
OFFLOAD_FIXTURE = ROOT / "tests" / "data" / "vllm_offload_mooncake.npz"
# (block tokens, device tokens, host tokens, policy)
OFFLOAD_CONFIGS = tuple((16, 204_800, host, pol) for host in (1_048_576, 8_388_608)
                        for pol in ("lru", "arc")) + (
    (64, 204_800, 1_048_576, "lru"), (64, 204_800, 1_048_576, "arc"))


def load(path: Path = MOONCAKE):
    rows = [json.loads(line) for line in path.open()]
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["timestamp"], i))
    hashes = [np.asarray(rows[i]["hash_ids"], np.int64) for i in order]
    prompt = np.array([rows[i]["input_length"] for i in order], np.int64)
    return hashes, prompt, np.asarray(order, np.int64)


def tokens_of(h: np.ndarray, prompt: int, block: int = BLOCK) -> list[int]:
    return (h[:, None] * block + np.arange(block)[None, :]).reshape(-1)[:prompt].tolist()


class Peer:
    """vLLM's KV-cache manager over one full-attention group of ``num_blocks`` blocks."""

    def __init__(self, block_tokens: int, num_blocks: int, host_blocks: int = 0,
                 policy: str = "lru"):
        import torch
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.request import Request

        init_none_hash(sha256)
        spec = FullAttentionSpec(block_size=block_tokens, num_kv_heads=1, head_size=1,
                                 dtype=torch.float32)
        cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(["layer"], spec)])
        self.mgr = KVCacheManager(cfg, max_model_len=1 << 30, scheduler_block_size=block_tokens,
                                  hash_block_size=block_tokens, enable_caching=True)
        self.hasher = get_request_block_hasher(block_tokens, sha256)
        self.sp = SamplingParams(max_tokens=1)
        self.Request = Request
        self.n = 0
        self.bt = block_tokens
        self.num_blocks = num_blocks
        self.cpu = None
        if host_blocks > 0:
            from vllm.v1.kv_offload.base import ReqContext, make_offload_key
            from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

            self.cpu = CPUOffloadingManager(num_chunks=host_blocks, cache_policy=policy)
            self.ReqContext = ReqContext
            self.key = make_offload_key

    def offload_request(self, tokens: list[int]) -> tuple[int, int]:
        """One lone request through the GPU pool and the CPU offloading manager, calling
        the manager as the connector's scheduler side does (module docstring).
        Returns (GPU hit tokens, CPU hit tokens)."""
        bt = self.bt
        req = self.Request(str(self.n), tokens, self.sp, None, block_hasher=self.hasher)
        self.n += 1
        if -(-len(tokens) // bt) > self.num_blocks - 1:
            return 0, 0  # never fits (the null block takes one): never scheduled
        cpu = self.cpu
        ctx = self.ReqContext(req_id=req.request_id)
        keys = [self.key(bh, 0) for bh in req.block_hashes]
        for i, k in enumerate(keys):
            ctx.set_offload_key_position(k, (i + 1) * bt)
        cpu.on_new_request(ctx)
        blocks, hit = self.mgr.get_computed_blocks(req)[:2]
        d = hit // bt
        h = 0
        for k in keys[d:]:
            if cpu.lookup(k, ctx).name == "MISS":
                break
            h += 1
        got = self.mgr.allocate_slots(req, len(tokens) - hit - h * bt, hit, blocks,
                                      num_external_computed_tokens=h * bt)
        assert got is not None
        start = 0
        if h:
            cpu.prepare_load(keys[d:d + h], ctx)
            cpu.complete_load(keys[d:d + h], ctx)
            start = d + h
        offer = keys[start:]
        if offer:
            for _ in range(2):  # the step's store, then the finished-request pass
                out = cpu.prepare_store(offer, ctx)
                if out is not None:
                    if out.keys_to_store:
                        cpu.complete_store(out.keys_to_store, ctx)
                    break
        self.mgr.free(req)
        cpu.on_request_finished(ctx)
        return int(hit), h * bt

    def request(self, tokens: list[int]) -> int:
        """One lone request: match, allocate, free. Returns its GPU hit tokens."""
        req = self.Request(str(self.n), tokens, self.sp, None, block_hasher=self.hasher)
        self.n += 1
        blocks, hit = self.mgr.get_computed_blocks(req)[:2]
        got = self.mgr.allocate_slots(req, len(tokens) - hit, hit, blocks)
        if got is None:
            return 0  # never fits: the toolkit counts it oversize and holds nothing
        self.mgr.free(req)
        return int(hit)


def run(hashes, prompt, block_tokens: int, device_tokens: int) -> np.ndarray:
    if device_tokens < 0:
        num_blocks = int(-(-prompt // block_tokens).max() + (-(-prompt // block_tokens)).sum()
                         + 2)
    else:
        num_blocks = device_tokens // block_tokens
    peer = Peer(block_tokens, num_blocks)
    hits = np.zeros(len(prompt), np.int64)
    for r, (h, p) in enumerate(zip(hashes, prompt, strict=True)):
        hits[r] = peer.request(tokens_of(h, int(p)))
    return hits


def run_offload(hashes, prompt, block_tokens: int, device_tokens: int, host_tokens: int,
                policy: str) -> tuple[np.ndarray, np.ndarray]:
    peer = Peer(block_tokens, device_tokens // block_tokens, host_tokens // block_tokens,
                policy)
    gpu = np.zeros(len(prompt), np.int64)
    cpu = np.zeros(len(prompt), np.int64)
    for r, (h, p) in enumerate(zip(hashes, prompt, strict=True)):
        gpu[r], cpu[r] = peer.offload_request(tokens_of(h, int(p)))
    return gpu, cpu


def main() -> None:
    import vllm

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="first N requests only (smoke run)")
    ap.add_argument("--offload", action="store_true",
                    help="the CPU offloading tier (OFFLOAD_CONFIGS) instead of the GPU tier")
    args = ap.parse_args()
    hashes, prompt, order = load()
    if args.limit:
        hashes, prompt, order = hashes[: args.limit], prompt[: args.limit], order[: args.limit]
    if args.offload:
        out = args.out or OFFLOAD_FIXTURE
        cols: dict[str, np.ndarray] = {}
        for bt, dev, host, pol in OFFLOAD_CONFIGS:
            t0 = time.perf_counter()
            gpu, cpu = run_offload(hashes, prompt, bt, dev, host, pol)
            name = f"b{bt}_c{dev}_h{host}_{pol}"
            cols[name + "_gpu"] = gpu.astype(np.int32)
            cols[name + "_cpu"] = cpu.astype(np.int32)
            print(f"{name}: {int(gpu.sum()):,} GPU + {int(cpu.sum()):,} CPU hit tokens of "
                  f"{int(prompt.sum()):,} ({time.perf_counter() - t0:.1f} s)", flush=True)
        np.savez_compressed(
            out, request_id=order.astype(np.int32), prompt_tokens=prompt.astype(np.int32),
            vllm_version=np.array(vllm.__version__), **cols,
        )
        print(f"wrote {out} (vllm {vllm.__version__})")
        return
    args.out = args.out or FIXTURE
    cols: dict[str, np.ndarray] = {}
    for bt, cap in CONFIGS:
        t0 = time.perf_counter()
        hits = run(hashes, prompt, bt, cap)
        name = f"b{bt}_c{cap}"
        cols[name] = hits.astype(np.int32)
        print(f"{name}: {int(hits.sum()):,} GPU hit tokens of {int(prompt.sum()):,} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    np.savez_compressed(
        args.out, request_id=order.astype(np.int32), prompt_tokens=prompt.astype(np.int32),
        vllm_version=np.array(vllm.__version__), **cols,
    )
    print(f"wrote {args.out} (vllm {vllm.__version__})")


if __name__ == "__main__":
    main()
