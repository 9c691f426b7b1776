"""Read the batching limits of InferenceX's Dynamo + SGLang DeepSeek-R1 recipes out of
InferenceX's git history and write ``toolkit/data/inferencex/dynamo_sglang_recipes.csv``.

Why: an SGLang decode worker admits at most ``--max-running-requests`` requests and a prefill
worker batches at most ``--max-prefill-tokens`` / ``--chunked-prefill-size`` tokens of at most
``--max-running-requests`` prompts; InferenceX's disaggregated srt-slurm recipes set them far
below the engine's defaults (H100 ``h100-fp8-1p2d-max-tp-mtp``: 2,048-token prefill of two
prompts, 128 running decode requests). SGLang divides ``--max-running-requests`` over the
attention-DP ranks (``ModelRunner``: ``server_args.max_running_requests // dp_size``) and, with
DP attention, the chunked-prefill size too (``ServerArgs``: ``chunked_prefill_size //
dp_size``), so both are per *worker*, as stored here; ``--max-prefill-tokens`` is each DP
rank's budget, so a prefill worker's is ``prefill_dp_attention_ranks`` times it.

Each search-space entry of InferenceX's ``nvidia-master.yaml`` names its recipe
(``CONFIG_FILE=recipes/...``) next to the concurrencies and the worker layout it ran. The
recipe YAMLs are read from InferenceX's own copy of them
(``benchmarks/multi_node/srt-slurm-recipes/dsr1/sglang/<hw>-<precision>/<isl>/<osl>/disagg/``,
as first imported at :data:`RECIPES_COMMIT`), matched on hardware, precision, ISL/OSL, MTP and
file name. Recipes with several variants in one file (``zip_override_*``) and the Dec 2025
GB200 entries (``SCRIPT_MODE=``, whose scripts live outside InferenceX) are not read.

Every version of the master config is read (``git log`` of ``.github/configs/`` and, after the
move, ``configs/``); where versions disagree each value is kept with the dates it was in force.

Usage (needs a clone of SemiAnalysisAI/InferenceX; ~3 min)::

    python benchmarks/inferencex_sglang_recipes.py /path/to/InferenceX
"""

from __future__ import annotations

import argparse
import csv
import subprocess
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parents[1] / "toolkit/data/inferencex/dynamo_sglang_recipes.csv"
CONFIG_PATHS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
RECIPES_COMMIT = "77de8570d26edfbac0e4cdbcca75ee11be4211c4"
RECIPES_DIR = "benchmarks/multi_node/srt-slurm-recipes/dsr1/sglang/"
COLUMNS = ("hardware", "precision", "isl", "osl", "spec_method", "conc", "num_prefill_gpu",
           "num_decode_gpu", "decode_tp", "decode_dp_attention",
           "decode_max_running_requests", "prefill_max_prefill_tokens",
           "prefill_chunked_prefill_size", "prefill_max_running_requests",
           "prefill_dp_attention_ranks", "speculative_num_draft_tokens", "config_file",
           "recipe_path", "first_seen", "last_seen", "commit")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False).stdout


def _recipes(repo: Path) -> dict[tuple, tuple]:
    """(hardware, precision, isl, osl, mode, file name) -> (path, limits) of every plain
    recipe in InferenceX's tree at :data:`RECIPES_COMMIT`."""
    out = {}
    names = _git(repo, "ls-tree", "-r", "--name-only", RECIPES_COMMIT, "--", RECIPES_DIR)
    for path in names.split():
        parts = path[len(RECIPES_DIR):].split("/")
        if len(parts) != 6 or parts[3] != "disagg":
            continue
        hwp, isl, osl, _, mode, name = parts
        doc = yaml.safe_load(_git(repo, "show", f"{RECIPES_COMMIT}:{path}")) or {}
        sg = (doc.get("backend") or {}).get("sglang_config") or {}
        pre, dec = sg.get("prefill") or {}, sg.get("decode") or {}
        if not dec:
            continue
        hw, prec = hwp.split("-", 1)
        pre_dp = (pre.get("dp-size") or pre.get("data-parallel-size") or 1
                  if pre.get("enable-dp-attention") else 1)
        limits = (dec.get("max-running-requests"), pre.get("max-prefill-tokens"),
                  pre.get("chunked-prefill-size"), pre.get("max-running-requests"), pre_dp,
                  dec.get("speculative-num-draft-tokens"))
        isl_n, osl_n = (int(s.rstrip("k")) * 1024 for s in (isl, osl))
        out[(hw, prec, isl_n, osl_n, mode, name)] = (path, limits)
    return out


def _scenarios(e: dict):
    yield from e.get("seq-len-configs") or []
    yield from ((e.get("scenarios") or {}).get("fixed-seq-len") or [])


def _entries(cfg: dict, recipes: dict):
    for name, e in cfg.items():
        if not (isinstance(e, dict) and name.startswith("dsr1-")
                and e.get("framework") == "dynamo-sglang"):
            continue
        _, precision, hardware, *_ = name.split("-")
        for seq in _scenarios(e):
            for ss in seq.get("search-space") or []:
                pre, dec = ss.get("prefill", {}), ss.get("decode", {})
                files = [str(s).split("=", 1)[1] for s in (pre.get("additional-settings") or [])
                         + (dec.get("additional-settings") or []) if "CONFIG_FILE=" in str(s)]
                if not files:
                    continue
                spec = ss.get("spec-decoding", "none")
                mode = "mtp" if spec == "mtp" else "stp"
                got = recipes.get((hardware, precision, seq["isl"], seq["osl"], mode,
                                   files[0].rsplit("/", 1)[-1]))
                if got is None:
                    continue
                for conc in ss.get("conc-list") or []:
                    yield ((hardware, precision, seq["isl"], seq["osl"], spec, int(conc),
                            pre["num-worker"] * max(pre["tp"], pre["ep"]),
                            dec["num-worker"] * max(dec["tp"], dec["ep"]), dec["tp"],
                            bool(dec["dp-attn"])),
                           (*got[1], files[0], got[0]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo", type=Path, help="a clone of SemiAnalysisAI/InferenceX")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    recipes = _recipes(args.repo)
    seen: dict[tuple, dict[tuple, list]] = {}
    log = _git(args.repo, "log", "--format=%H %ad", "--date=short", "--", *CONFIG_PATHS)
    for line in log.splitlines():
        commit, date = line.split()
        text = "".join(_git(args.repo, "show", f"{commit}:{p}") for p in CONFIG_PATHS)
        if "dynamo-sglang" not in text:
            continue
        try:
            cfg = yaml.safe_load(text) or {}
        except yaml.YAMLError:
            continue
        for key, value in _entries(cfg, recipes):
            seen.setdefault(key, {}).setdefault(value, []).append((date, commit))
    rows = []
    for key, values in seen.items():
        for value, hits in values.items():
            first, last = min(hits), max(hits)
            rows.append((*key, *("" if v is None else v for v in value), first[0], last[0],
                         last[1]))
    rows.sort(key=lambda r: tuple((0, x, "") if isinstance(x, int) else (1, 0, str(x))
                                  for x in r))
    with args.out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    print(f"{len(recipes)} recipes, {len(rows)} recipe entries ({len(seen)} layouts) "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
