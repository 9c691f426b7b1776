"""Build the extension modules of :mod:`toolkit.runtime.aot` (``make setup`` runs this).

``python -m toolkit.runtime.aot.build`` compiles :data:`KERNELS` with numba's ``pycc``
(each kernel for exactly the argument types listed) into extension modules
``toolkit/runtime/aot/_kernels<i>*.so``, one per process building at once (``--parts``,
default 2: pycc compiles on one core, and the two halves took 12.6-13.7 s wall against
18.5 s for one module), and writes ``_kernels.json`` beside them: which module and symbol serve
which kernel and argument types, and a hash of the source files the kernels were compiled
from (a later edit disables the modules until they are built again). It needs a C
compiler and Python's headers; without them it fails, prints why, and the kernels stay
numba's (compiled on first use, cached), so nothing else changes.

The kernels are those a selection replay from the store runs, for every policy and mode
(the store's page decoder, the replay plan, LRU's row kernel and the other policies'
kernels, the results writer): the path where a process's start-up and first-run compile,
not its work, dominated (``benchmarks/cli_latency_bench.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# numba's own kernels while building (never the stand-ins of an older build)
os.environ["TOOLKIT_AOT"] = "0"

_POLICY = ("i4[:]", "i8", "i8", "i8[:]", "u1[:]")  # keys, n_keys, capacity, segments, hits

KERNELS: dict[str, tuple[tuple[str, ...], ...]] = {
    "toolkit.store.parquet.topk_pages:_page_levels": (
        ("u1[:]r", "i8", "i8", "i8", "u1[:]", "u1[:]", "i8[:]", "i8", "i8", "b"),),
    "toolkit.store.parquet.topk_pages:_delta": (("u1[:]r", "i8", "i8", "i4[:]", "i8", "b"),),
    "toolkit.replay.selection_plan:is_sorted_rows": (("i8[:]", "i2[:]", "i4[:]"),),
    "toolkit.replay.selection_plan:layer_major": (("i8[:]", "i2[:]", "i4[:]"),),
    "toolkit.replay.selection_plan:gather_rows": (
        ("i8[:]", "i8[:]", "i2[:]", "i4[:]", "i4[:]", "i8[:]"),),
    "toolkit.policies.lru:lru_rows": (
        ("i4[:]", "i8[:]", "i8[:]", "i4[:]", "b1[:]", "i8", "b", "i8", "i8", "i8", "i8[:]",
         "b1[:]", "i4[:]"),),
    "toolkit.store.parquet.table_kernels:delta_encode": (
        ("i8[:]r", "i8", "u1[:]"), ("i4[:]r", "i8", "u1[:]")),
    # every other policy: the planned path (plan, key check, policy kernel, fold)
    "toolkit.replay.selection_plan:_plan_kernel": (
        ("i4[:]", "i8[:]", "i8[:]", "i4[:]", "b1[:]", "i8", "b", "i8", "i4[:]", "i8[:]",
         "i8[:]", "i8[:]", "b1[:]"),),
    "toolkit.replay.selection_plan:row_hits": (("u1[:]", "i8[:]", "i8[:]"),),
    "toolkit.policies._checks:_key_range": (("i4[:]",),),
    **{f"toolkit.policies.{m}:{m}_kernel": (_POLICY + extra,) for m, extra in (
        ("arc", ()), ("clock", ()), ("fifo", ()), ("lfu", ()), ("opt", ("b",)),
        ("s3fifo", ("i8", "i8", "i8")), ("slru", ("i8",)))},
    # prefix replays: LRU's plain kernel (every other policy's is above) and the totals
    "toolkit.policies.lru:lru_kernel": (_POLICY,),
    "toolkit.replay.prefix:_hit_totals": (("u1[:]", "i8", "i8[:]", "i8[:]", "i8[:]", "i8[:]",
                                           "i8"),),
    "toolkit.replay.prefix:_in_order": (("f8[:]", "i8[:]"),),
    # miss curves over selections: the exact LRU curve and SHARDS sampling
    "toolkit.replay.mrc:_distance_histogram": (("i4[:]", "i8", "i8[:]", "i8"),),
    "toolkit.replay.shards:_dense": (("i4[:]", "i8"),),
    "toolkit.replay.shards:_first_hashes": (("i4[:]", "i8", "i8[:]", "i8", "i8"),),
    "toolkit.replay.shards:_sample": (("i4[:]", "i8[:]", "i8", "i8", "i8"),),
}
"""``module:function`` -> argument types of each signature compiled (see
:func:`toolkit.runtime.aot.arg_key` for the spelling)."""

COMPILE_S: dict[str, float] = {
    "toolkit.policies.lfu:lfu_kernel": 2.7, "toolkit.policies.lru:lru_rows": 1.9,
    "toolkit.policies.arc:arc_kernel": 1.8, "toolkit.store.parquet.table_kernels:delta_encode":
    1.6, "toolkit.store.parquet.topk_pages:_delta": 1.2, "toolkit.policies.opt:opt_kernel": 1.0,
    "toolkit.policies.s3fifo:s3fifo_kernel": 0.9, "toolkit.store.parquet.topk_pages:"
    "_page_levels": 0.8, "toolkit.replay.selection_plan:_plan_kernel": 0.8,
    "toolkit.policies.slru:slru_kernel": 0.7,
}
"""Seconds numba took to compile a kernel's signatures (measured once on the 2-vCPU VM; any
kernel not listed counts 0.3 s). Only balances the parts: a stale figure costs a little wall
time, never a wrong module."""

_PAIR, _TRIPLE = "UniTuple(int64, 2)", "UniTuple(int64, 3)"
RETURNS: dict[str, str] = {
    "toolkit.store.parquet.topk_pages:_page_levels": _TRIPLE,
    "toolkit.store.parquet.topk_pages:_delta": "int64",
    "toolkit.replay.selection_plan:is_sorted_rows": "boolean",
    "toolkit.replay.selection_plan:layer_major": "Tuple((int64[::1], boolean))",
    "toolkit.replay.selection_plan:gather_rows": "Tuple((int64[::1], int32[::1], "
    "int16[::1], int32[::1], boolean[::1], int64[::1]))",
    "toolkit.policies.lru:lru_rows": "int64",
    "toolkit.store.parquet.table_kernels:delta_encode": _TRIPLE,
    "toolkit.replay.selection_plan:_plan_kernel": _PAIR,
    "toolkit.replay.selection_plan:row_hits": "int64[::1]",
    "toolkit.policies._checks:_key_range": "UniTuple(int32, 2)",
    **{f"toolkit.policies.{m}:{m}_kernel": "int64" for m in (
        "arc", "clock", "fifo", "lfu", "opt", "s3fifo", "slru", "lru")},
    "toolkit.replay.prefix:_hit_totals": _TRIPLE,
    "toolkit.replay.prefix:_in_order": "boolean",
    "toolkit.replay.mrc:_distance_histogram": "int64[::1]",
    "toolkit.replay.shards:_dense": "Tuple((int32[::1], int64))",
    "toolkit.replay.shards:_first_hashes": "int64[::1]",
    "toolkit.replay.shards:_sample": "Tuple((int32[::1], int64[::1]))",
}
"""``module:function`` -> its return type, in numba's type names. Declared, not inferred:
asking numba compiled each kernel once more through its JIT (~16 s of a build with an
empty numba cache). A wrong declaration fails the build or changes a result, which
``tests/test_startup_aot.py`` compares with numba's kernels bit for bit."""


def numba_type(key: str) -> Any:
    from numba.core import types

    scalar = {"b": types.boolean, "f8": types.float64}
    if key in scalar:
        return scalar[key]
    if key.endswith(("[:]", "[:]r")):
        base = key.split("[", 1)[0]
        dtype = types.boolean if base == "b1" else getattr(types, _name(base))
        return types.Array(dtype, 1, "C", readonly=key.endswith("r"))
    return getattr(types, _name(key))


def _name(key: str) -> str:
    return {"i": "int", "u": "uint", "f": "float"}[key[0]] + str(8 * int(key[1:]))


def _sources(funcs: list[Any]) -> list[str]:
    """The files whose code the kernels compile: their modules and, transitively, those
    of the kernels and intrinsics they call."""
    from numba.core.dispatcher import Dispatcher
    from numba.core.extending import _Intrinsic

    root = Path(__file__).resolve().parents[3]
    files: set[str] = set()
    seen: set[int] = set()
    todo = list(funcs)
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        code = getattr(f, "__code__", None)
        path = Path(getattr(code, "co_filename", "")).resolve()
        if code is None or not path.is_relative_to(root / "toolkit"):
            continue
        files.add(path.relative_to(root).as_posix())
        names = set(code.co_names)
        for c in code.co_consts:  # nested functions (an intrinsic's codegen)
            if hasattr(c, "co_names"):
                names |= set(c.co_names)
        for name in names:
            g = f.__globals__.get(name)
            if isinstance(g, Dispatcher):
                todo.append(g.py_func)
            elif isinstance(g, _Intrinsic):
                todo.append(g._defn)
    files.add("toolkit/runtime/aot/__init__.py")
    files.add("toolkit/runtime/aot/build.py")
    return sorted(files)


def partition(parts: int) -> list[list[str]]:
    """:data:`KERNELS` in ``parts`` groups of about equal compile time (longest first, each
    to the lightest group)."""
    groups: list[list[str]] = [[] for _ in range(max(parts, 1))]
    load = [0.0] * len(groups)
    for k in sorted(KERNELS, key=lambda k: (-COMPILE_S.get(k, 0.3), k)):
        i = load.index(min(load))
        groups[i].append(k)
        load[i] += COMPILE_S.get(k, 0.3)
    return [g for g in groups if g]


def build_part(out_dir: Path, kernels: list[str], index: int,
               verbose: bool = False) -> dict[str, Any]:
    """Compile ``kernels`` into the module ``_kernels<index>`` in ``out_dir``; returns its
    exports and the source files they were compiled from."""
    import numba
    import numba.pycc.compiler as pycc_compiler
    from numba.pycc import CC

    class Flags(pycc_compiler.Flags):  # type: ignore[misc,name-defined]
        """As numba's kernels are compiled here (``nogil=True``): the wrapper releases the
        GIL, so worker threads run the compiled kernels in parallel."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.release_gil = True

    pycc_compiler.Flags = Flags
    module_name = f"_kernels{index}"
    cc = CC(module_name)
    cc.target_cpu = "host"  # as numba's JIT compiles: for this machine
    cc.verbose = verbose
    exports, funcs = [], []
    for kernel in sorted(kernels):
        module, name = kernel.split(":")
        disp = getattr(importlib.import_module(module), name)
        funcs.append(disp.py_func)
        for args in KERNELS[kernel]:
            argtypes = tuple(numba_type(a) for a in args)
            ret = eval(RETURNS[kernel], {}, vars(numba.types))  # a type name from RETURNS
            # the symbol names the kernel and its argument types: an extension and a
            # stamp from different builds can then only miss each other (numba serves),
            # never pair a kernel with another's types
            tag = hashlib.sha1(",".join(args).encode()).hexdigest()[:10]
            symbol = f"{module.replace('.', '_')}__{name}__{tag}"
            cc.export(symbol, ret(*argtypes))(disp.py_func)
            exports.append({"kernel": kernel, "args": list(args), "module": module_name,
                            "symbol": symbol})
    cc.output_dir = str(out_dir)
    cc.compile()
    built = [p for p in out_dir.iterdir()
             if p.name.startswith(module_name + ".") and p.suffix in (".so", ".pyd")]
    if len(built) != 1:
        raise RuntimeError(f"pycc wrote {[p.name for p in built]}, expected one module")
    return {"numba": numba.__version__, "exports": exports, "sources": _sources(funcs)}


def build(out_dir: Path, verbose: bool = False, parts: int = 2) -> dict[str, Any]:
    """Compile :data:`KERNELS` into ``out_dir`` on ``parts`` processes at once; returns the
    stamp written beside the modules. All or nothing: the modules replace the old ones only
    once every part has compiled."""
    import subprocess

    from toolkit.runtime.aot import _source_hash

    groups = partition(parts)
    with tempfile.TemporaryDirectory(prefix="toolkit-aot-") as tmp:
        tmp_dir = Path(tmp)
        if len(groups) == 1:
            results = [build_part(tmp_dir, groups[0], 0, verbose)]
        else:
            procs = []
            for i, group in enumerate(groups):
                (tmp_dir / f"part{i}.in.json").write_text(json.dumps(group))
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "toolkit.runtime.aot.build", "--part", str(i),
                     "--out", tmp, *(["--verbose"] if verbose else [])],
                    stderr=subprocess.PIPE, text=True))
            errors = [p.communicate()[1] for p in procs]  # waits for every part
            for i, (p, err) in enumerate(zip(procs, errors, strict=True)):
                if p.returncode != 0:
                    last = (err.strip().splitlines() or ["no message"])[-1]
                    raise RuntimeError(f"part {i} of {len(groups)} failed: {last}")
            results = [json.loads((tmp_dir / f"part{i}.out.json").read_text())
                       for i in range(len(groups))]
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob("_kernels*"):
            old.unlink()
        for p in tmp_dir.iterdir():
            if p.name.startswith("_kernels"):
                shutil.move(str(p), out_dir / p.name)
    sources = sorted({f for r in results for f in r["sources"]})  # each names aot's own
    stamp = {"numba": results[0]["numba"],
             "exports": [e for r in results for e in r["exports"]],
             "sources": sources, "sources_sha256": _source_hash(sources)}
    (out_dir / "_kernels.json").write_text(json.dumps(stamp, indent=1) + "\n")
    return stamp


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--parts", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes compiling at once (default: 2, or 1 on one core)")
    ap.add_argument("--part", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part is not None:  # one part of a parallel build (see build)
        group = json.loads((args.out / f"part{args.part}.in.json").read_text())
        result = build_part(args.out, group, args.part, args.verbose)
        (args.out / f"part{args.part}.out.json").write_text(json.dumps(result))
        return 0
    here = Path(__file__).resolve().parent
    t0 = time.perf_counter()
    try:
        stamp = build(here, args.verbose, max(args.parts, 1))
    except Exception as e:
        for old in here.glob("_kernels*"):
            old.unlink()
        why = " ".join(str(e).split())  # one line (pycc's messages span several)
        print(f"aot build failed ({type(e).__name__}: {why}); the replay kernels will be "
              "numba's, compiled on first use", file=sys.stderr)
        return 1
    n_modules = len({e["module"] for e in stamp["exports"]})
    print(f"aot build: {len(stamp['exports'])} kernel signature(s) compiled ahead of time "
          f"into {n_modules} module(s) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
