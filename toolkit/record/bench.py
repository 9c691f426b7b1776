"""Measure the recorder's cost: seconds per 1,000 decode steps at ~2K context, peak RSS.

Run from the repository root::

    python -m toolkit.record.bench [--prompt-tokens 1536] [--steps 1000] [--k 64]

Decode steps run from ``prompt_tokens`` to ``prompt_tokens + steps`` context (default
1536 -> 2536, mean ~2K), teacher-forced on traces/smollm2/texts/GPL-3.txt.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> dict:
    """Print (and return) load, prefill and decode timings and peak RSS as JSON."""
    from toolkit.record.recorder import load_smollm2, record_request

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt-tokens", type=int, default=1536)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--score", default="softmax-sum")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (0: default)")
    parser.add_argument("--text", type=Path, default=Path("traces/smollm2/texts/GPL-3.txt"))
    args = parser.parse_args(argv)
    threads = args.threads or None

    t0 = time.perf_counter()
    model = load_smollm2()
    load_s = time.perf_counter() - t0
    ids = model.encode(args.text.read_text(encoding="utf-8"))
    kw = dict(prompt_tokens=args.prompt_tokens, k=args.k, score=args.score, threads=threads)
    t0 = time.perf_counter()
    record_request(model, ids, steps=1, **kw)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    record_request(model, ids, steps=args.steps, **kw)
    total_s = time.perf_counter() - t0
    decode_s = total_s - prefill_s
    result = {
        "prompt_tokens": args.prompt_tokens,
        "steps": args.steps,
        "k": args.k,
        "score": args.score,
        "blas_threads": threads,
        "load_s": round(load_s, 2),
        "prefill_s": round(prefill_s, 2),
        "decode_s_per_1000_steps": round(decode_s / (args.steps - 1) * 1000, 1),
        "decode_ms_per_step": round(decode_s / (args.steps - 1) * 1000, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
