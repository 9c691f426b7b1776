"""The replay kernels compiled ahead of time (``toolkit.runtime.aot``): the same results as
numba's, bit for bit, and a warm CLI replay that never imports numba.

The extension is built by ``make setup`` (``python -m toolkit.runtime.aot.build``); where
it is missing or older than its sources these tests skip, and the kernels are numba's.
Timings: ``benchmarks/cli_latency_bench.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import toolkit
from toolkit.ingest import ingest_file
from toolkit.runtime import aot

ROOT = Path(__file__).resolve().parents[1]

needs_extension = pytest.mark.skipif(
    not aot._load_table(), reason="AOT extension not built or older than its sources "
    "(python -m toolkit.runtime.aot.build)")


def _run(code: str, aot_on: bool) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOOLKIT_AOT": "1" if aot_on else "0",
           "TOOLKIT_PROGRESS": "0"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return res


REPLAY = """import json, sys
from toolkit.cli import app
sys.argv = ['toolkit', 'replay', 'selections', '--store', {store!r}, '--trace', 'syn',
            '--mode', 'hisparse', '--buffer-tokens', '256', '--workers', '1', '--json']
try:
    app()
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(m for m in ('numba', 'llvmlite', 'scipy') if m in sys.modules)))
"""


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with the bundled SmolLM2 selections (real, k = 64, 30 layers)."""
    root = tmp_path_factory.mktemp("aot") / "store"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "bundle", ROOT / "traces/smollm2", "smollm2",
                    select="smollm2-softmax-sum")
    return root


def _results_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "selection_replay" in p.parts and ".staging" not in p.parts}


PAIRS = [("lru", "hisparse"), ("lru", "plain"), ("arc", "plain"), ("clock", "hisparse"),
         ("fifo", "plain"), ("lfu", "hisparse"), ("opt", "plain"), ("opt-bypass", "hisparse"),
         ("slru", "plain"), ("s3fifo", "hisparse"), ("lru", "hisparse", "empty")]
"""(policy, mode[, initial]): every policy whose kernel the extension holds, both modes."""

REPLAYS = """import json, sys
from toolkit.replay.config import SelectionReplayConfig
from toolkit.replay.selections import replay_selections
from toolkit.store import open_store
out = []
with open_store({store!r}) as s:
    for policy, mode, *initial in {pairs!r}:
        r = replay_selections(s, SelectionReplayConfig('smollm2', policy, 256, mode=mode,
                              initial=(initial or ['first'])[0]), workers=2, progress=False)
        r.pop('elapsed_s')
        out.append(r)
print(json.dumps(out))
print(json.dumps(sorted(m for m in ('numba', 'llvmlite', 'scipy') if m in sys.modules)))
"""


@needs_extension
def test_aot_equals_jit_bit_for_bit(smollm2: Path, tmp_path: Path):
    """Replays of the bundled real trace through every policy the extension holds, in both
    modes and on two threads, give the same summaries and write the same per-row result
    files, byte for byte (the results writer's encoder is compiled too), with the
    extension as with numba; the first imports no numba at all."""
    out = {}
    for on in (True, False):
        store = tmp_path / f"aot{int(on)}"
        shutil.copytree(smollm2, store)
        lines = _run(REPLAYS.format(store=str(store), pairs=PAIRS), on).stdout.splitlines()
        out[on] = json.loads(lines[-2]), json.loads(lines[-1]), _results_files(store)
    assert out[True][1] == [], "the compiled kernels' path imported " + str(out[True][1])
    assert "numba" in out[False][1]
    assert out[True][0] == out[False][0]
    assert len({r["run_id"] for r in out[True][0]}) == len(PAIRS)
    assert all(r["hits"] > 0 and r["misses"] > 0 for r in out[True][0])
    assert len(out[True][2]) >= len(PAIRS) and out[True][2] == out[False][2]


MRC = """import sys
from toolkit.cli import app
sys.argv = ['toolkit', 'replay', 'mrc', '--store', {store!r}, '--trace', 'smollm2',
            '--policy', {policy!r}, *{extra!r}, '--workers', '2', '--json']
try:
    app()
except SystemExit as e:
    assert not e.code, e.code
import json
print(json.dumps(sorted(m for m in ('numba', 'llvmlite', 'scipy') if m in sys.modules)))
"""


@needs_extension
@pytest.mark.parametrize("policy,extra", [("lru", []), ("fifo", ["--sample-rate", "0.5"]),
                                          ("opt", ["--sample-keys", "200"])])
def test_aot_miss_curves_equal_jit(smollm2: Path, policy: str, extra: list[str]):
    """Miss curves over the bundled selections (LRU's exact curve, SHARDS at a fixed rate
    and a fixed size) print the same with the extension as with numba, without numba."""
    out = {}
    for on in (True, False):
        lines = _run(MRC.format(store=str(smollm2), policy=policy, extra=extra),
                     on).stdout.splitlines()
        out[on] = lines[:-1], json.loads(lines[-1])
    assert out[True][1] == [] and "numba" in out[False][1]
    assert out[True][0] == out[False][0] and len(json.loads(out[True][0][0])) > 2


PREFIX = """import sys
from toolkit.cli import app
sys.argv = ['toolkit', 'replay', 'prefix', '--store', {store!r}, '--trace', 'conv',
            '--policy', {policy!r}, '--capacity-blocks', '10000', '--json']
try:
    app()
except SystemExit as e:
    assert not e.code, e.code
import json
print(json.dumps(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules)))
"""


@needs_extension
@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_aot_prefix_replay_equals_jit(tmp_path: Path, policy: str):
    """A prefix replay of the bundled Mooncake conversation trace gives the same summary
    with the extension as with numba, without numba."""
    store = tmp_path / "mc"
    with toolkit.open_store(store, create=True) as s:
        ingest_file(s, "mooncake", ROOT / "traces/mooncake/conversation_trace.jsonl", "conv")
    out = {}
    for on in (True, False):
        lines = _run(PREFIX.format(store=str(store), policy=policy), on).stdout.splitlines()
        summary = json.loads(lines[-2])
        out[on] = {k: v for k, v in summary.items() if "elapsed" not in k}, \
            json.loads(lines[-1])
    assert out[True][1] == [] and "numba" in out[False][1]
    assert out[True][0] == out[False][0] and out[True][0]["block_hits"] > 0


@needs_extension
def test_warm_cli_replay_imports_no_numba(tmp_path: Path):
    """The replay the start-up benchmark times (k = 2048, HiSparse, LRU, one worker) runs
    and saves its results without importing numba, llvmlite or SciPy."""
    store = tmp_path / "s"
    _run("from toolkit.store import open_store\n"
         "from toolkit.synth.selections import SyntheticSelectionConfig, generate\n"
         f"with open_store({str(store)!r}, create=True) as s:\n"
         "    s.write_many(generate(SyntheticSelectionConfig(requests=1, prompt_tokens=4096, "
         "steps=4, layers=2, k=2048, seed=1), 'syn'), 'syn')", False)
    code = REPLAY.format(store=str(store))
    lines = _run(code, True).stdout.splitlines()
    assert json.loads(lines[-2])["accesses"] == 4 * 2 * 2048
    assert json.loads(lines[-1]) == []


@needs_extension
def test_other_argument_types_fall_back_to_numba():
    """A call no compiled signature matches imports numba and runs numba's kernel (never
    the Python function); every other stand-in then becomes numba's dispatcher, and a call
    that matches still runs the compiled function: numba never compiles that signature."""
    code = """import sys, json
import numpy as np
from toolkit.replay import selection_plan as sp
from toolkit.runtime import aot
assert aot.ACTIVE and 'numba' not in sys.modules
r, la, st = np.array([0, 0, 1]), np.array([0, 1, 0], np.int16), np.array([0, 0, 0], np.int32)
a = bool(sp.is_sorted_rows(r, la, st))          # int64 request ids: compiled
before = 'numba' in sys.modules
b = bool(sp.is_sorted_rows(r.astype(np.int32), la, st))  # int32: numba's
c = bool(sp.is_sorted_rows(r, la, st))          # int64 again, numba imported: compiled
from toolkit.runtime import jit
print(json.dumps([a, before, b, c, 'numba' in sys.modules, type(sp.is_sorted_rows).__name__,
                  len(sp.is_sorted_rows.real.signatures), type(jit.prefetch_row).__name__,
                  jit.nb.__name__]))
"""
    got = json.loads(_run(code, True).stdout.splitlines()[-1])
    assert got == [True, False, True, True, True, "LazyKernel", 1, "CPUDispatcher", "numba"]


@needs_extension
def test_kernel_modules_imported_after_numba_keep_the_extension():
    """numba imported first (as ``toolkit warm-up``, the demo and a tier replay do): a
    kernel module imported afterwards still runs its compiled signatures, and its other
    kernels are numba's dispatchers."""
    code = """import sys, json
import numpy as np
from toolkit.runtime import aot
import numba
from toolkit.replay import selection_plan as sp
from toolkit.replay.tiers import pieces
r, la, st = np.array([0, 0, 1]), np.array([0, 1, 0], np.int16), np.array([0, 0, 0], np.int32)
a = bool(sp.is_sorted_rows(r, la, st))
print(json.dumps([aot.ACTIVE, a, type(sp.is_sorted_rows).__name__,
                  len(sp.is_sorted_rows.real.signatures), type(pieces._emit).__name__]))
"""
    got = json.loads(_run(code, True).stdout.splitlines()[-1])
    assert got == [True, True, "LazyKernel", 0, "CPUDispatcher"]


def test_no_kernel_calls_a_compiled_kernel():
    """A kernel the extension holds stays a stand-in once numba is imported, which a
    numba kernel calling it as a global could not inline: only Python calls such kernels."""
    import ast

    from toolkit.runtime.aot.build import KERNELS

    exported = {name.rsplit(":", 1)[-1] for name in KERNELS}
    calls = []
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef) and any(
                    "njit" in ast.unparse(d) for d in fn.decorator_list):
                calls += [(path.name, fn.name, c.func.id) for c in ast.walk(fn)
                          if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                          and c.func.id in exported and c.func.id != fn.name]
    assert exported and calls == []


@needs_extension
def test_a_changed_source_disables_the_extension(tmp_path: Path, monkeypatch):
    """An extension whose sources changed since it was built is not used."""
    stamp = json.loads(aot.STAMP.read_text())
    stamp["sources_sha256"] = "0" * 64
    stale = tmp_path / "_kernels.json"
    stale.write_text(json.dumps(stamp))
    monkeypatch.setattr(aot, "STAMP", stale)
    monkeypatch.setattr(aot, "_TABLE", None)
    assert aot._load_table() == {}


@pytest.mark.parametrize("value,key", [
    (True, "b"), (np.bool_(False), "b"), (3, "i8"), (1 << 63, None), (2.5, "f8"),
    (np.int64(3), "i8"), (np.arange(3, dtype=np.int32), "i4[:]"),
    (np.zeros(2, np.bool_), "b1[:]"), (np.arange(6)[::2], None),
    (np.zeros((2, 2), np.int64), None), ("x", None),
])
def test_argument_keys_follow_numbas_types(value, key):
    """The key that picks a compiled signature is numba's type of the argument; anything
    without an exact match (strided, 2-D, out of int64) gets none and goes to numba."""
    assert aot.arg_key(value) == key
    if isinstance(value, np.ndarray) and key is not None:
        ro = value.view()
        ro.flags.writeable = False
        assert aot.arg_key(ro) == key + "r"


def test_every_compiled_kernel_declares_its_return_type():
    """The build takes return types from RETURNS (not from numba's JIT): one per kernel,
    each a type numba can read."""
    import numba

    from toolkit.runtime.aot.build import KERNELS, RETURNS

    assert set(RETURNS) == set(KERNELS)
    for name in RETURNS.values():
        assert isinstance(eval(name, {}, vars(numba.types)), numba.types.Type)


@pytest.mark.parametrize("parts", [1, 2, 3])
def test_the_build_parts_hold_every_kernel_once_and_balance(parts: int):
    """``make setup`` compiles the extension on two processes at once (one module each):
    every kernel lands in exactly one part, and no part carries more than the largest
    kernel beyond an even share of the measured compile time."""
    from toolkit.runtime.aot.build import COMPILE_S, KERNELS, partition

    groups = partition(parts)
    assert sorted(k for g in groups for k in g) == sorted(KERNELS)
    assert len(groups) == parts
    cost = [sum(COMPILE_S.get(k, 0.3) for k in g) for g in groups]
    assert max(cost) - min(cost) <= max(COMPILE_S.values())
    assert set(COMPILE_S) <= set(KERNELS)  # a renamed kernel leaves no stale figure


@needs_extension
def test_every_export_names_a_built_module():
    """The stamp names the module of each symbol, and every module it names was built."""
    import importlib.util

    from toolkit.runtime.aot.build import KERNELS

    stamp = json.loads(aot.STAMP.read_text())
    modules = {e["module"] for e in stamp["exports"]}
    assert modules and all(importlib.util.find_spec(f"{aot.PACKAGE}.{m}") for m in modules)
    assert {e["kernel"] for e in stamp["exports"]} == set(KERNELS)
