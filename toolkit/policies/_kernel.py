"""The shared Python side of every built-in policy: validate, allocate, call the kernel.

Kernels index memory with keys, so validation happens here, once, before any compiled
code runs.
"""

from __future__ import annotations

from collections.abc import Callable

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from toolkit.policies import SimResult, as_segments, check_keys, compact_keys
from toolkit.runtime.memory import check_memory

U = np.uintp
"""Index cast for kernels' hot loops: ``a[U(i)]`` instead of ``a[i]``. numba must allow a
negative signed index to wrap around, which adds a compare and select to every load and
store on the access's dependency chain; an unsigned index has none. Measured 1.3-1.6x on
LRU (k = 2048 stream). Only for indices known to be >= 0."""


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Ask for the cache line holding ``arr[idx]`` (``llvm.prefetch``: a read, kept in
    every cache level); it never faults, whatever ``idx``."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]))
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


ROWS_AHEAD = 4
"""How many rows ahead a row kernel asks for the positions it will read (see
:func:`prefetch_row`)."""


@nb.njit(inline="always")
def prefetch_row(values, offsets, src, r):  # pragma: no cover - compiled
    """Prefetch the first 64 positions of replay row ``r + ROWS_AHEAD`` (stored row
    ``src[r + ROWS_AHEAD]``). Replay reads rows in (request, layer, step) order, but
    recorders write them step by step, so consecutive replay rows lie a whole step of
    layers apart and each row began with cache misses the hardware prefetcher could not
    foresee: on the real SmolLM2 trace (k = 64, 30 layers) LRU's row kernel took 7.6-8.6
    ms at its best, 6.8 with this, as fast as the same rows laid out in replay order
    (benchmarks/RESULTS.md, stop 28)."""
    if r + ROWS_AHEAD < src.shape[0]:
        s = src[r + ROWS_AHEAD]
        lo = offsets[U(s)]
        hi = min(offsets[U(s + 1)], lo + 64)
        for q in range(lo, hi, 16):
            _prefetch(values, U(q))


INT32_LIMIT = 2**31 - 8  # room for the list sentinels kept after the last key


def run_kernel(
    kernel: Callable[..., int],
    keys: np.ndarray,
    n_keys: int,
    capacity: int,
    segments: np.ndarray | None,
    *extra: object,
) -> SimResult:
    """Call ``kernel(keys, n_keys, capacity, segments, hits, *extra) -> evictions``.

    Raises:
        ValueError: on out-of-range keys, a key space too large for int32 links, badly
            formed segments or a negative capacity.
    """
    keys = check_keys(keys, n_keys)
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0, got {capacity}")
    keys, n_keys = compact_keys(keys, n_keys)
    # a cache at least as large as the keys it ever sees never evicts, under every policy:
    # sizing by the keys, not by the requested slots, keeps 2**40-slot buffers cheap
    capacity = min(int(capacity), int(n_keys))
    check_memory(24.0 * n_keys + 24.0 * capacity + 9.0 * keys.size,
                 f"a {kernel.__name__} replay of {keys.size:,} accesses over {n_keys:,} keys")
    if n_keys >= INT32_LIMIT:
        raise ValueError(
            f"n_keys must be < {INT32_LIMIT} (kernels link keys with int32), got {n_keys}"
        )
    # every kernel writes hits[i] for every access (segments cover [0, n)): no memset
    hits = np.empty(keys.size, dtype=np.uint8)
    ev = kernel(keys, int(n_keys), int(capacity), as_segments(segments, keys.size), hits, *extra)
    return SimResult(hits.view(np.bool_), int(ev))


class KernelPolicy:
    """Base of the built-ins whose kernel takes no extra arguments: subclasses set
    ``name`` and ``kernel`` (wrapped in ``staticmethod``) and inherit ``simulate``."""

    name: str
    kernel: Callable[..., int]

    def simulate(
        self,
        keys: np.ndarray,
        n_keys: int,
        capacity: int,
        segments: np.ndarray | None = None,
    ) -> SimResult:
        return run_kernel(self.kernel, keys, n_keys, capacity, segments)
