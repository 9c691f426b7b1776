"""Read the decode workers' ``max_batch_size`` of InferenceX's Dynamo + TensorRT-LLM
DeepSeek-R1 recipes out of InferenceX's git history and write
``toolkit/data/inferencex/dynamo_trt_decode_batches.csv``.

Why: a TensorRT-LLM decode worker admits at most ``max_batch_size`` requests (per attention-DP
rank), and InferenceX's disaggregated recipes set it far below the engine's default of 2,048:
``ctx1_gen3_tep16_batch1`` runs three decode workers of one request each, so six users wait
for a whole 1,024-token decode of another request before their first token (H100, 12.7 s
measured TTFT). The recipe file name carries the value (``..._batch<N>_...``); each search-space
entry of InferenceX's ``nvidia-master.yaml`` names its recipe (``CONFIG_FILE=``) next to the
concurrencies and the worker layout it ran.

Every version of the master config is read (``git log`` of ``.github/configs/`` and, after the
move, ``configs/``), so a row measured at any date finds the recipe of its layout and
concurrency; where versions disagree each value is kept with the dates it was in force.

Usage (needs a clone of SemiAnalysisAI/InferenceX; ~3 min)::

    python benchmarks/inferencex_trt_batches.py /path/to/InferenceX
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "toolkit/data/inferencex/dynamo_trt_decode_batches.csv"
CONFIG_PATHS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
RECIPE = re.compile(r"gen(\d+)_(dep|tep|tp|dp)(\d+)_batch(\d+)")
COLUMNS = ("hardware", "precision", "isl", "osl", "spec_method", "conc", "num_prefill_gpu",
           "num_decode_gpu", "decode_tp", "decode_dp_attention", "decode_max_batch_size",
           "config_file", "first_seen", "last_seen", "commit")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False).stdout


def _entries(cfg: dict):
    for name, e in cfg.items():
        if not (isinstance(e, dict) and name.startswith("dsr1-")
                and e.get("framework") == "dynamo-trt"):
            continue
        _, precision, hardware, *_ = name.split("-")
        for seq in e.get("seq-len-configs", []):
            for ss in seq.get("search-space", []):
                pre, dec = ss.get("prefill", {}), ss.get("decode", {})
                files = [s for s in (pre.get("additional-settings") or [])
                         + (dec.get("additional-settings") or []) if "CONFIG_FILE" in str(s)]
                m = RECIPE.search(files[0]) if files else None
                if not m:
                    continue
                for conc in ss.get("conc-list") or []:
                    yield ((hardware, precision, seq["isl"], seq["osl"],
                            ss.get("spec-decoding", "none"), int(conc),
                            pre["num-worker"] * max(pre["tp"], pre["ep"]),
                            dec["num-worker"] * max(dec["tp"], dec["ep"]), dec["tp"],
                            bool(dec["dp-attn"])),
                           (int(m.group(4)), files[0].split("=", 1)[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a clone of SemiAnalysisAI/InferenceX")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    seen: dict[tuple, dict[tuple, list]] = {}
    log = _git(args.repo, "log", "--format=%H %ad", "--date=short", "--", *CONFIG_PATHS)
    for line in log.splitlines():
        commit, date = line.split()
        text = "".join(_git(args.repo, "show", f"{commit}:{p}") for p in CONFIG_PATHS)
        try:
            cfg = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        for key, value in _entries(cfg):
            seen.setdefault(key, {}).setdefault(value, []).append((date, commit))
    rows = []
    for key, values in seen.items():
        for (batch, cfile), hits in values.items():
            first, last = min(hits), max(hits)
            rows.append((*key, batch, cfile, first[0], last[0], last[1]))
    rows.sort()
    with args.out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"{len(rows)} recipe entries ({len(seen)} layouts) -> {args.out}")


if __name__ == "__main__":
    main()
