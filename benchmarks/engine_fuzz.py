"""Differential fuzzing: the toolkit's sequential tier replay vs the engines' own cache code.

Thousands of small random traces (shared prefixes, branching sessions, partial last
blocks and pages, ties in arrival, capacities near the working set) go through
``replay tiers --sequential`` and through the engine's real cache classes, request by
request; the script reports how many requests were checked and the first divergent case.

The engines live in their own venvs (not the toolkit's, not ``make test``). This script
runs under the toolkit's venv and calls itself under the engine's python for the engine
side, passing the cases as JSON::

    .venv/bin/python benchmarks/engine_fuzz.py --engine vllm \\
        --engine-python /work/venvs/vllm/bin/python --cases 2000
    .venv/bin/python benchmarks/engine_fuzz.py --engine sglang \\
        --engine-python /work/venvs/sglang/bin/python --cases 2000
    .venv/bin/python benchmarks/engine_fuzz.py --engine vllm-offload \\
        --engine-python /work/venvs/vllm/bin/python --cases 2000

Engines: ``vllm`` = vLLM's ``KVCacheManager`` (``benchmarks/vllm_peer.py``'s driver) vs
``--engine-semantics vllm``; ``sglang`` = SGLang's ``RadixCache`` (``sglang_peer.py``'s
driver) vs the default sglang radix semantics, device tier only (``--host-gb 0``);
``vllm-offload`` = vLLM's ``KVCacheManager`` plus its ``CPUOffloadingManager`` (LRU or
ARC, ``vllm_peer.py --offload``'s driver) vs ``--engine-semantics vllm --offload-policy``,
comparing GPU and CPU hit tokens of every request, with CPU capacities near the working
set; ``sglang-host`` = SGLang's ``UnifiedRadixCache`` with HiCache (``sglang_peer.py
--host-tokens``'s driver: real controller, host pool and tree, no byte copies) vs the
default sglang semantics with a host tier, comparing GPU and host hit tokens, over the
three write policies, lru and lfu eviction, and host pools from one page to about half the
working set. For ``sglang-host`` and ``vllm-offload`` every other case on average takes its
host pool from a ``--host-ratio`` in [0.05, 1) instead (a host smaller than the device,
where SGLang's write-through backups fail); ``sglang-host`` also compares the host pool's
size and each case's totals of host writes, backup failures and host and device
evictions. The report counts, per write (offload) policy, the cases whose host pool is
smaller than the device pool.

In the SGLang venv the PyPI torchvision wheel (CUDA-built) cannot load on CPU torch; it is
uninstalled and an empty stand-in module satisfies the multimodal config imports on the
way to ``radix_cache`` (no cache code uses it).

Trace model: 8-token trace blocks with chained hashes; token ``j`` of block ``h`` is
``h * 8 + j``. Any divergent case is printed as a JSON line, to become a regular test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 8  # tokens per trace block in the fuzz traces


def gen_case(rng: np.random.Generator, engine: str,
             rng_ratio: np.random.Generator | None = None) -> dict:
    """One random trace and cache setting (see the module docstring). ``rng_ratio``
    (sglang-host, vllm-offload) draws, for every other case on average, a ``host_ratio`` in
    [0.05, 1) that sizes the host pool as the toolkit's ``--host-ratio`` does (SGLang's pool
    with its padding page; vLLM: ratio x device) instead of a pool in tokens; its own
    stream keeps a seed's traces, pools and policies as they were."""
    n = int(rng.integers(1, 25))
    fan = int(rng.integers(1, 5))  # children per node: low = long shared prefixes
    ids: dict[tuple, int] = {}
    hashes, prompts = [], []
    for _ in range(n):
        depth = int(rng.integers(1, 7))
        path: tuple = ()
        row = []
        for _ in range(depth):
            path = (*path, int(rng.integers(0, fan)))
            row.append(ids.setdefault(path, len(ids)))
        hashes.append(row)
        prompts.append(BLOCK * (depth - 1) + int(rng.integers(1, BLOCK + 1)))
    arrival = np.sort(rng.integers(0, max(n // 2, 1), n)).astype(float).tolist()  # ties
    units = [2, 4, 8, 16] if engine.startswith("vllm") else [1, 2, 4, 8]
    unit = int(rng.choice(units))
    work = sum(prompts)
    # SGLang's scheduler never admits a prompt larger than the pool (the toolkit counts it
    # oversize and skips it) but sglang_peer's driver would insert it over capacity: keep
    # every prompt within the pool there. vLLM's allocate_slots refuses it like the toolkit.
    low = unit if engine == "vllm" else max(-(-p // unit) * unit for p in prompts)
    cap = -1 if rng.random() < 0.1 else int(rng.integers(low, max(work // 2, low) + 2 * unit))
    case = {"hashes": hashes, "prompts": prompts, "arrival": arrival, "unit": unit,
            "cap": cap}
    if engine == "vllm-offload":
        # a GPU pool that fits every prompt but little more; a CPU tier near the working set
        need = max(-(-p // unit) for p in prompts) + 1
        case["cap"] = unit * int(rng.integers(need, 2 * need + 2))
        chunks = sum(p // unit for p in prompts)
        case["host"] = unit * int(rng.integers(1, max(chunks // 2, 1) + 3))
        case["policy"] = str(rng.choice(["lru", "arc"]))
        if rng_ratio is not None and rng_ratio.random() < 0.5:
            # a CPU tier below the GPU pool, from --host-ratio: vLLM has no ratio (it sizes
            # the tier in bytes, v1/kv_offload/cpu/spec.py) nor padding, so R x device
            # tokens in whole blocks (at least one: a tier of none is no tier)
            ratio = round(float(rng_ratio.uniform(0.05, 1.0)), 2)
            if int(case["cap"] * ratio) >= unit:
                case["host_ratio"] = ratio
                case["host"] = int(case["cap"] * ratio) // unit * unit
    if engine == "sglang-host":
        # HiCache: a device pool that fits every prompt but little more (the allocator is
        # real, so bounded), a host pool from one page to about half the working set, a
        # write policy, an eviction policy (device and host leaves alike)
        need = max(-(-p // unit) for p in prompts)
        case["cap"] = unit * int(rng.integers(need, 2 * need + 2))
        rng.integers(1, max(work // unit, 1) + 2)  # an unused draw: keeps seeds' cases
        case["write"] = str(rng.choice(["write_through", "write_through_selective",
                                        "write_back"]))
        chunks = sum(p // unit for p in prompts)
        case["host"] = unit * int(rng.integers(1, max(chunks // 2, 1) + 3))
        case["policy"] = str(rng.choice(["lru", "lfu"]))
        if rng_ratio is not None and rng_ratio.random() < 0.5:
            # SGLang's --hicache-ratio below 1: a host pool smaller than the device's, where
            # write-through backups fail (the toolkit sizes it from the ratio too)
            case["host_ratio"] = round(float(rng_ratio.uniform(0.05, 1.0)), 2)
            case["host"] = int(case["cap"] * case["host_ratio"])
    return case


def order_of(case: dict) -> list[int]:
    """Replay order: (arrival, line), as the toolkit sorts (request id = line)."""
    return sorted(range(len(case["prompts"])), key=lambda i: (case["arrival"][i], i))


def tokens(h: list[int], prompt: int) -> list[int]:
    return [x * BLOCK + j for x in h for j in range(BLOCK)][:prompt]


# -- engine side (runs under the engine's python) ----------------------------------------
def engine_vllm(case: dict) -> list[int]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from vllm_peer import Peer

    bt, cap = case["unit"], case["cap"]
    nb = sum(-(-p // bt) for p in case["prompts"])
    peer = Peer(bt, nb + 2 if cap < 0 else max(cap // bt, 1))
    out = [0] * len(case["prompts"])
    for i in order_of(case):
        out[i] = peer.request(tokens(case["hashes"][i], case["prompts"][i]))
    return out


def engine_vllm_offload(case: dict) -> list[list[int]]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from vllm_peer import Peer

    bt = case["unit"]
    peer = Peer(bt, case["cap"] // bt, case["host"] // bt, case["policy"])
    out = [[0, 0]] * len(case["prompts"])
    for i in order_of(case):
        out[i] = list(peer.offload_request(tokens(case["hashes"][i], case["prompts"][i])))
    return out


def _stub_torchvision() -> None:
    """SGLang's config package imports torchvision.transforms for multimodal models; the
    PyPI torchvision wheel is CUDA-built and fails its operator registration on CPU torch.
    No cache code uses it, so an empty stand-in is enough to import ``radix_cache``."""
    import importlib.util
    import types

    try:
        import torchvision.transforms  # noqa: F401
        return
    except Exception:  # any failure of the real wheel: stub it
        for k in [k for k in sys.modules if k.startswith("torchvision")]:
            del sys.modules[k]
    import transformers.utils.import_utils  # noqa: F401 - decides "no torchvision" first

    tv = types.ModuleType("torchvision")
    tv.__spec__ = importlib.util.spec_from_loader("torchvision", loader=None)
    tr = types.ModuleType("torchvision.transforms")
    tr.__spec__ = importlib.util.spec_from_loader("torchvision.transforms", loader=None)
    tr.InterpolationMode = types.SimpleNamespace(BICUBIC=3, BILINEAR=2)
    fn = types.ModuleType("torchvision.transforms.functional")
    fn.__spec__ = importlib.util.spec_from_loader(fn.__name__, loader=None)
    fn.InterpolationMode = tr.InterpolationMode
    tr.__path__ = []
    tv.__path__ = []
    tr.functional = fn
    tv.transforms = tr
    sys.modules["torchvision"] = tv
    sys.modules["torchvision.transforms"] = tr
    sys.modules[fn.__name__] = fn


def _sglang_inputs(case: dict):
    """SGLang's peer module and a case's requests in arrival order: (module, order, block
    hashes, prompt lengths)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    _stub_torchvision()
    import sglang_peer as sp

    sp.BLOCK = BLOCK
    order = order_of(case)
    hashes = [np.asarray(case["hashes"][i], np.int64) for i in order]
    prompt = np.asarray([case["prompts"][i] for i in order], np.int64)
    return sp, order, hashes, prompt


def engine_sglang(case: dict) -> list[int]:
    sp, order, hashes, prompt = _sglang_inputs(case)
    hits = sp.run(hashes, prompt, case["unit"], case["cap"])
    out = [0] * len(order)
    for k, i in enumerate(order):
        out[i] = int(hits[k])
    return out


def engine_sglang_host(case: dict) -> list:
    """Per request [GPU hit tokens, host hit tokens] from SGLang's UnifiedRadixCache with
    HiCache (``sglang_peer.run_host``), then the host pool's size as SGLang allocated it,
    then the case's totals of ``sglang_peer.COUNTS`` (host writes, backup failures, host
    and device evictions, tokens). A ``host_ratio`` case gives SGLang that ratio."""
    sp, order, hashes, prompt = _sglang_inputs(case)
    gpu, host, capacity, running = sp.run_host(
        hashes, prompt, case["unit"], case["cap"], case["host"], case["write"],
        case.get("policy", "lru"), host_ratio=case.get("host_ratio"))
    out: list = [[0, 0]] * len(order)
    for k, i in enumerate(order):
        out[i] = [int(gpu[k]), int(host[k])]
    counts = running[-1].tolist() if len(order) else [0] * len(sp.COUNTS)
    return [*out, int(capacity), counts]


# -- toolkit side ----------------------------------------------------------------------------
COUNTS = ("host_writes", "host_backup_failures", "host_evictions", "device_evictions")


def toolkit_hits(store, case: dict, engine: str) -> list:
    """The toolkit's per-request answers, in the engine's format."""
    return toolkit_run(store, case, engine)[0]


def toolkit_run(store, case: dict, engine: str) -> tuple[list, dict]:
    """(per-request answers, the run's summary). An sglang-host case with a
    ``host_ratio`` is sized by the toolkit from that ratio (``--host-ratio``), else it
    gets the pool SGLang allocated (``host_capacity``)."""
    from toolkit.cost.from_replay import run_tiers
    from toolkit.ingest.fields import requests_table
    from toolkit.replay.tiers import TierReplayConfig

    n = len(case["prompts"])
    t = requests_table("f", case["arrival"], case["prompts"], [1] * n, BLOCK, case["hashes"])
    store.write("requests", "f", t, replace=True)
    kw = ({"engine_semantics": "vllm", "block_tokens": case["unit"]}
          if engine.startswith("vllm") else {"page_tokens": case["unit"]})
    host = 0
    if engine == "vllm-offload":
        kw["offload_policy"] = case["policy"]
        host = case["host"]
        if "host_ratio" in case:
            host = None
            kw["host_ratio"] = case["host_ratio"]
    if engine == "sglang-host":
        kw["write_policy"] = case["write"]
        kw["policy"] = case.get("policy", "lru")
        host = case["host_capacity"]  # as SGLang sized it (one padding page more)
        if "host_ratio" in case:
            host = None
            kw["host_ratio"] = case["host_ratio"]
    res = run_tiers(store, TierReplayConfig("f", device_tokens=case["cap"], host_tokens=host,
                                            sequential=True, **kw), save=False)
    rid = res.requests.column("request_id").to_pylist()
    dev = res.requests.column("device_tokens").to_pylist()
    if engine in ("vllm-offload", "sglang-host"):
        pairs = dict(zip(rid, zip(dev, res.requests.column("host_tokens").to_pylist(),
                                  strict=True), strict=True))
        return [list(pairs[i]) for i in range(n)], res.summary
    got = dict(zip(rid, dev, strict=True))
    return [got[i] for i in range(n)], res.summary


def ratio_report(cases: list[dict], engine: str) -> list[str]:
    """Lines counting the cases whose host pool is smaller than the device pool, by write
    policy (sglang-host) or offload policy (vllm-offload)."""
    if engine not in ("vllm-offload", "sglang-host"):
        return []
    key = "write" if engine == "sglang-host" else "policy"
    lines = []
    for pol in sorted({c[key] for c in cases}):
        mine = [c for c in cases if c[key] == pol]
        host = [c.get("host_capacity", c["host"]) for c in mine]
        below = sum(h < c["cap"] for h, c in zip(host, mine, strict=True))
        ratio = sum("host_ratio" in c for c in mine)
        lines.append(f"  {pol}: {len(mine)} cases, {below} with a host pool smaller than the "
                     f"device pool" + (f", {ratio} sized by --host-ratio" if ratio else ""))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("vllm", "sglang", "vllm-offload", "sglang-host"),
                    required=True)
    ap.add_argument("--engine-python", default=sys.executable)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixture", type=Path,
                    help="also write the cases and the engine's answers here (JSON), for "
                         "tests/test_tiers_fuzz_cases.py")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # engine side: cases file
    args = ap.parse_args()
    if args.serve:
        cases = json.loads(args.serve.read_text())
        fn = {"vllm": engine_vllm, "sglang": engine_sglang,
              "vllm-offload": engine_vllm_offload,
              "sglang-host": engine_sglang_host}[args.engine]
        json.dump([fn(c) for c in cases], sys.stdout)
        return
    import toolkit

    rng = np.random.default_rng(args.seed)
    rng_ratio = (np.random.default_rng([args.seed, 1])
                 if args.engine in ("sglang-host", "vllm-offload") else None)
    cases = [gen_case(rng, args.engine, rng_ratio) for _ in range(args.cases)]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "cases.json"
        f.write_text(json.dumps(cases))
        proc = subprocess.run([args.engine_python, __file__, "--engine", args.engine,
                               "--serve", str(f)], capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"engine side failed:\n{proc.stderr[-3000:]}")
        want = json.loads(proc.stdout)
        if args.engine == "sglang-host":  # each answer ends with the pool's size, counts
            for case, ans in zip(cases, want, strict=True):
                case["engine_counts"] = ans.pop()
                case["host_capacity"] = ans.pop()
        if args.fixture:
            mod = args.engine.split("-")[0]  # sglang-host -> sglang
            ver = subprocess.run([args.engine_python, "-c", f"import {mod}; "
                                  f"print({mod}.__version__)"], capture_output=True,
                                 text=True, check=True).stdout.strip().splitlines()[-1]
            args.fixture.write_text(json.dumps(
                {"engine": args.engine, "version": ver, "seed": args.seed, "cases": cases,
                 "engine_hits": want}, separators=(",", ":")) + "\n")
        t_engine = time.perf_counter() - t0
        checked = 0
        first = None
        with toolkit.open_store(Path(tmp) / "s", create=True) as store:
            got_all = []
            count_diffs: list[dict] = []
            for k, case in enumerate(cases):
                got, summary = toolkit_run(store, case, args.engine)
                got_all.append(got)
                checked += len(got)
                if args.engine == "sglang-host":
                    # the same pool (a divergence), and the same totals of host writes,
                    # backup failures, host and device evictions (the summary counts
                    # pages; a case whose hits agree but counts do not is listed apart)
                    got = [*got, summary["host_capacity_tokens"]]
                    want[k] = [*want[k], case["host_capacity"]]
                    tk = [summary[c] * case["unit"] for c in COUNTS]
                    if got == want[k] and tk != case["engine_counts"]:
                        count_diffs.append({"case": k, **case, "toolkit_counts": tk})
                if got != want[k] and first is None:
                    first = {"case": k, **case, "toolkit": got, "engine": want[k]}
                    break
    print(f"{args.engine}: {len(cases) if first is None else first['case'] + 1} cases, "
          f"{checked} requests checked, engine {t_engine:.0f} s, "
          f"total {time.perf_counter() - t0:.0f} s")
    for line in ratio_report(cases[: len(got_all)], args.engine):
        print(line)
    if args.engine in ("vllm-offload", "sglang-host"):
        tier = [h for k in range(len(got_all)) for _, h in want[k][: len(got_all[k])]]
        print(f"{sum(h > 0 for h in tier)} of those requests hit the host / CPU tier "
              f"({sum(tier)} tokens)")
    if args.engine == "sglang-host":
        print(f"{len(count_diffs)} cases with equal hits differ in the counts "
              f"({', '.join(COUNTS)})")
        for d in count_diffs[:3]:
            print("COUNTS DIFFER " + json.dumps(d))
    if first is None:
        print("no divergence")
    else:
        print("FIRST DIVERGENCE " + json.dumps(first))
        sys.exit(1)


if __name__ == "__main__":
    main()
