"""Side by side: the toolkit's serving model vs NVIDIA's aiconfigurator on InferenceX points.

Every row of the bundled DeepSeek-R1 points (SemiAnalysis InferenceX, Apache-2.0) that
aiconfigurator can express is estimated with ``aiconfigurator.cli.api.cli_estimate``, run in a
separate interpreter (``--aic-python``) so aiconfigurator never becomes a dependency of the
toolkit. Rows it cannot express or that it rejects (OOM, missing per-op data) are kept with the
reason. On the same rows the toolkit's predictions are taken twice: in-sample (the bundled fit,
what ``toolkit serving predict`` returns) and held-out (``toolkit serving validate --scheme
hardware``: each hardware predicted by a fit that never saw it). Errors are the median and p90
of ``|pred / measured - 1|`` for ``tput_per_gpu`` (InferenceX's divisors), TPOT and TTFT.

Mapping of a row to ``cli_estimate`` (each choice is an assumption of this benchmark):

* system: b200 -> b200_sxm, b300 -> b300_sxm, h100 -> h100_sxm, h200 -> h200_sxm, gb200 and
  gb300 as named; AMD parts have no system. Backend: sglang / dynamo-sglang -> ``sglang``,
  trt / dynamo-trt -> ``trtllm``; atom and mori-sglang (AMD only) have none.
* model ``deepseek-ai/DeepSeek-R1`` (bundled config). FP8 rows: quant modes inferred from the
  checkpoint (fp8_block). FP4 rows: ``gemm_quant_mode = moe_quant_mode = "nvfp4"`` (how
  aiconfigurator's own silicon samples label nvidia/DeepSeek-R1-NVFP4).
* the 8 early GB200 rows without ``image`` (total GPU count repeated as both pools and as tp)
  record no worker layout and are left out rather than guessed.
* worker layout from the toolkit's own reading of the row (``toolkit.serving.layout.design``:
  GPUs per instance and instance counts, InferenceX's GPU divisors). A worker of ``g`` GPUs with
  attention data parallelism is ``tp=1, attention_dp=g``, otherwise ``tp=g``; MoE is
  ``moe_ep = ep`` (capped at ``g``) and ``moe_tp = g / moe_ep``.
* batch: aiconfigurator's batch is per attention-DP rank; aggregated ``ceil(conc / dp)``,
  disaggregated decode ``ceil(conc / (decode workers x dp))``, prefill batch 1 per rank.
* where aiconfigurator's disagg path has no fp8 context-MLA table (H100 and GB200 TRT-LLM) the
  row is rerun with bfloat16 context FMHA, the fallback its agg path applies by itself; such
  rows carry a ``note``.
* MTP: the row's recipe (``toolkit.serving.recipes``: 1 draft, 1.85 accepted tokens per step
  from the DeepSeek-V3 report unless the row says otherwise); ``--mtp-accepted`` overrides the
  accepted drafts per step (default ``recipe``: the same input the toolkit uses).
* predicted ``tput_per_gpu`` = aiconfigurator's ``seq/s`` x (isl + osl) / InferenceX's divisor,
  scaled by ``conc / its concurrency`` when whole per-rank batches exceed the row's ``conc``;
  TPOT and TTFT are its ``tpot`` and ``ttft`` (ms -> s).

Run from the repo root (aiconfigurator in its own venv, see benchmarks/RESULTS.md):

    .venv/bin/python benchmarks/serving_peer.py --aic-python /tmp/aic-venv/bin/python

Per-row aiconfigurator results are cached in ``build/serving_peer/aic_rows.csv`` (keyed by the
exact ``cli_estimate`` arguments), the held-out predictions in ``build/serving_peer/validate``;
a rerun only computes what is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl

from toolkit.serving.layout import design
from toolkit.serving.points import bundled_points_path, read_points
from toolkit.serving.predict import predict

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "serving_peer"

AIC_SYSTEM = {"b200": "b200_sxm", "b300": "b300_sxm", "h100": "h100_sxm", "h200": "h200_sxm",
              "gb200": "gb200", "gb300": "gb300"}
AIC_BACKEND = {"sglang": "sglang", "dynamo-sglang": "sglang", "trt": "trtllm",
               "dynamo-trt": "trtllm"}
AIC_MODEL = "deepseek-ai/DeepSeek-R1"
METRICS = {"tput_per_gpu": "tput_per_gpu", "median_tpot": "TPOT", "median_ttft": "TTFT"}
CACHE_FIELDS = ["row_id", "key", "status", "reason", "ttft_ms", "tpot_ms", "seq_per_s",
                "aic_total_gpus", "aic_concurrency", "backend_version", "kv_cache_warning", "note",
                "seconds"]

# Runs inside --aic-python. Reads one JSON request per line, answers one JSON line each.
HELPER = r'''
import json, os, signal, sys, time, logging, warnings
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # anything aiconfigurator prints goes to stderr, not into the answers
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from importlib.metadata import version
from aiconfigurator.cli.api import cli_estimate

class Timeout(Exception):
    pass

def _alarm(*_):
    raise Timeout()

signal.signal(signal.SIGALRM, _alarm)
limit = int(sys.argv[1])
out.write(json.dumps({"versions": {p: version(p) for p in
                                   ("aiconfigurator", "aiconfigurator-core")}}) + "\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    ans = {"row_id": req.pop("row_id")}
    t0 = time.perf_counter()
    signal.alarm(limit)
    try:
        try:
            r = cli_estimate(**req)
        except Exception as e:
            # The disagg path lacks the agg path's own fallback for missing fp8 context-MLA
            # tables (agg logs "falling back to bfloat16 FMHA data"); apply the same one.
            if "context MLA data missing" not in str(e) or "fmha_quant_mode" in req:
                raise
            r = cli_estimate(**req, fmha_quant_mode="bfloat16")
            ans["note"] = "context FMHA fp8 data missing: bfloat16 FMHA (as in agg mode)"
        ans.update(status="ok", ttft_ms=float(r.ttft), tpot_ms=float(r.tpot),
                   seq_per_s=float(r.raw["seq/s"]), aic_total_gpus=int(r.raw["num_total_gpus"]),
                   aic_concurrency=float(r.raw["concurrency"]),
                   backend_version=str(r.backend_version),
                   kv_cache_warning=bool(getattr(r, "kv_cache_warning", None)))
    except Timeout:
        ans.update(status="error", reason=f"timeout after {limit} s")
    except Exception as e:  # recorded per row, never raised
        msg = " ".join(str(e).split())
        ans.update(status="error", reason=f"{type(e).__name__}: {msg}"[:400])
    finally:
        signal.alarm(0)
    ans["seconds"] = round(time.perf_counter() - t0, 2)
    out.write(json.dumps(ans) + "\n")
    out.flush()
'''


def _worker(g: float, tp: int, ep: int, dp_attn: bool) -> dict[str, int]:
    g = int(g)
    moe_ep = max(1, min(int(ep), g))
    if g % moe_ep:
        moe_ep = 1
    return {"tp": 1 if dp_attn else g, "dp": g if dp_attn else 1,
            "moe_tp": g // moe_ep, "moe_ep": moe_ep}


def requests(df: pl.DataFrame, mtp_accepted: str) -> tuple[list[dict], dict[int, str]]:
    """``cli_estimate`` keyword arguments per expressible row, and why the others are not."""
    d = design(df)
    accept = d.mtp_accept - 1.0
    reqs, unsupported = [], {}
    for i, r in enumerate(df.iter_rows(named=True)):
        rid = int(r["row_id"])
        if r["hardware"] not in AIC_SYSTEM:
            unsupported[rid] = f"no aiconfigurator system for {r['hardware']}"
            continue
        if r["framework"] not in AIC_BACKEND:
            unsupported[rid] = f"no aiconfigurator backend for {r['framework']}"
            continue
        if d.disagg[i] and not r.get("image") and r["num_prefill_gpu"] == r["prefill_tp"] \
                == r["num_decode_gpu"] == r["decode_tp"]:
            unsupported[rid] = "worker layout not recorded (early GB200 row: total GPUs as tp)"
            continue
        req = {"model_path": AIC_MODEL, "system_name": AIC_SYSTEM[r["hardware"]],
               "backend_name": AIC_BACKEND[r["framework"]],
               "isl": int(r["isl"]), "osl": int(r["osl"])}
        if r["precision"] == "fp4":
            req.update(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4")
        if r["spec_method"] == "mtp":
            acc = float(accept[i]) if mtp_accepted == "recipe" else float(mtp_accepted)
            req.update(nextn=int(d.mtp_draft[i]), nextn_accepted=round(acc, 3))
        conc = int(r["conc"])
        if not d.disagg[i]:
            w = _worker(d.g_dec[i], r["decode_tp"], r["decode_ep"], r["decode_dp_attention"])
            req.update(mode="agg", batch_size=math.ceil(conc / w["dp"]), tp_size=w["tp"],
                       attention_dp_size=w["dp"], moe_tp_size=w["moe_tp"],
                       moe_ep_size=w["moe_ep"])
        else:
            p = _worker(d.g_pre[i], r["prefill_tp"], r["prefill_ep"], r["prefill_dp_attention"])
            q = _worker(d.g_dec[i], r["decode_tp"], r["decode_ep"], r["decode_dp_attention"])
            n_dec = int(d.n_dec[i])
            req.update(mode="disagg",
                       prefill_tp_size=p["tp"], prefill_attention_dp_size=p["dp"],
                       prefill_moe_tp_size=p["moe_tp"], prefill_moe_ep_size=p["moe_ep"],
                       prefill_batch_size=1, prefill_num_workers=int(d.n_pre[i]),
                       decode_tp_size=q["tp"], decode_attention_dp_size=q["dp"],
                       decode_moe_tp_size=q["moe_tp"], decode_moe_ep_size=q["moe_ep"],
                       decode_batch_size=math.ceil(conc / (n_dec * q["dp"])),
                       decode_num_workers=n_dec)
        req["row_id"] = rid
        req["key"] = json.dumps({k: v for k, v in req.items() if k != "row_id"}, sort_keys=True)
        reqs.append(req)
    return reqs, unsupported


def run_aic(reqs: list[dict], aic_python: str | None, cache: Path, timeout_s: int) -> dict:
    """Fill ``cache`` with one row per request not already there (same key); return versions."""
    done = set()
    if cache.is_file() and cache.open().readline().strip() != ",".join(CACHE_FIELDS):
        cache.rename(cache.with_suffix(".stale.csv"))  # written by an older version of this file
    if cache.is_file():
        done = {(int(r["row_id"]), r["key"]) for r in csv.DictReader(cache.open())}
    todo = [r for r in reqs if (r["row_id"], r["key"]) not in done]
    keys = {r["row_id"]: r["key"] for r in todo}
    meta = cache.with_suffix(".versions.json")
    if not todo:
        print(f"aiconfigurator: all {len(reqs)} rows cached in {cache}", file=sys.stderr)
        return json.loads(meta.read_text()) if meta.is_file() else {}
    if not aic_python:
        sys.exit(f"{len(todo)} rows are not in {cache}: pass --aic-python (a Python with "
                 "aiconfigurator installed)")
    cache.parent.mkdir(parents=True, exist_ok=True)
    new = not cache.is_file()
    with tempfile.NamedTemporaryFile("w", suffix="_aic_helper.py", delete=False) as f:
        f.write(HELPER)
    log = (cache.parent / "aic_stderr.log").open("a")
    proc = subprocess.Popen([aic_python, f.name, str(timeout_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=log, text=True)

    def feed() -> None:  # a thread, so answers are read while requests are still queued
        proc.stdin.write("".join(json.dumps({k: v for k, v in r.items() if k != "key"}) + "\n"
                                 for r in todo))
        proc.stdin.close()

    threading.Thread(target=feed, daemon=True).start()
    first = proc.stdout.readline()
    if not first:
        sys.exit(f"{aic_python} could not start aiconfigurator; see {log.name}")
    versions = json.loads(first)["versions"]
    meta.write_text(json.dumps(versions))
    t0 = time.perf_counter()
    with cache.open("a", newline="") as fh:
        w = csv.DictWriter(fh, CACHE_FIELDS)
        if new:
            w.writeheader()
        for n, line in enumerate(proc.stdout, 1):
            ans = json.loads(line)
            ans["key"] = keys[ans["row_id"]]
            w.writerow({k: ans.get(k, "") for k in CACHE_FIELDS})
            fh.flush()
            print(f"  aiconfigurator {n}/{len(todo)} row {ans['row_id']}: {ans['status']} "
                  f"({ans['seconds']} s, {time.perf_counter() - t0:.0f} s total)",
                  file=sys.stderr)
    if proc.wait() != 0:
        sys.exit(f"aiconfigurator helper exited with {proc.returncode}; see {log.name}")
    return versions


def heldout(points_csv: Path, out_dir: Path, max_nfev: int) -> pl.DataFrame:
    """Leave-one-hardware-out predictions (runs ``toolkit serving validate`` once per version
    of the serving model: the cache is keyed by a hash of ``toolkit/serving`` and the data)."""
    import hashlib

    import toolkit.serving as serving_pkg

    h = hashlib.sha256(Path(points_csv).read_bytes())
    for f in sorted(Path(serving_pkg.__file__).parent.rglob("*.py")):
        h.update(f.read_bytes())
    stamp, path = out_dir / "model.sha256", out_dir / "heldout_hardware.csv"
    if not (path.is_file() and stamp.is_file() and stamp.read_text() == h.hexdigest()):
        exe = Path(sys.executable).with_name("toolkit")
        subprocess.run([str(exe), "serving", "validate", "--points", str(points_csv),
                        "--scheme", "hardware", "--max-nfev", str(max_nfev),
                        "--out-dir", str(out_dir)], check=True)
        stamp.write_text(h.hexdigest())
    return pl.read_csv(path, infer_schema_length=None)


def _err(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    ok = np.isfinite(pred) & np.isfinite(meas) & (meas > 0) & (pred > 0)
    return np.abs(pred[ok] / meas[ok] - 1.0)


def _q(e: np.ndarray, q: float) -> str:
    return f"{100 * np.quantile(e, q):.0f}%" if e.size else "-"


def error_tables(sbs: pl.DataFrame) -> str:
    """One markdown table per metric: rows per hardware and overall."""
    hws = sorted(sbs["hardware"].unique().to_list())
    out = []
    for m, label in METRICS.items():
        out += [f"\n**{label}** (median / p90 of |pred/measured - 1|; 'common' = rows "
                "aiconfigurator covers)\n",
                "| hardware | rows | aic rows | aic (common) | ours in-sample (common) | "
                "ours held-out (common) | ours in-sample (all) | ours held-out (all) |",
                "|---|---|---|---|---|---|---|---|"]
        for hw in [*hws, "all"]:
            g = sbs if hw == "all" else sbs.filter(pl.col("hardware") == hw)
            c = g.filter(pl.col("aic_status") == "ok")
            meas, cmeas = g[m].to_numpy(), c[m].to_numpy()
            cells = []
            for frame, col, mm in [(c, f"aic_{m}", cmeas), (c, f"in_{m}", cmeas),
                                   (c, f"loho_{m}", cmeas), (g, f"in_{m}", meas),
                                   (g, f"loho_{m}", meas)]:
                e = _err(frame[col].to_numpy(), mm)
                cells.append(f"{_q(e, 0.5)} / {_q(e, 0.9)}" if e.size else "-")
            out.append(f"| {hw} | {g.height} | {c.height} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--aic-python", help="Python interpreter with aiconfigurator installed")
    ap.add_argument("--mtp-accepted", default="recipe",
                    help="accepted MTP drafts per step for aiconfigurator: a number, or "
                         "'recipe' (the row's recipe input, as the toolkit uses)")
    ap.add_argument("--row-timeout-s", type=int, default=300)
    ap.add_argument("--max-nfev", type=int, default=100, help="per fold, held-out fits")
    ap.add_argument("--out-dir", type=Path, default=BUILD)
    a = ap.parse_args()

    a.out_dir.mkdir(parents=True, exist_ok=True)
    points_csv = a.out_dir / "points_with_row_id.csv"
    raw = pl.read_csv(bundled_points_path(), infer_schema_length=0)
    raw.with_row_index("row_id").write_csv(points_csv)
    df = read_points(points_csv).with_columns(pl.col("row_id").cast(pl.Int64))

    reqs, unsupported = requests(df, a.mtp_accepted)
    cache = a.out_dir / "aic_rows.csv"
    versions = run_aic(reqs, a.aic_python, cache, a.row_timeout_s)
    keys = {r["row_id"]: r["key"] for r in reqs}
    aic = (pl.read_csv(cache, infer_schema_length=None,
                       schema_overrides={"reason": pl.String, "backend_version": pl.String,
                                         "note": pl.String})
           .filter(pl.struct("row_id", "key").map_elements(
               lambda s: keys.get(s["row_id"]) == s["key"], return_dtype=pl.Boolean))
           .unique("row_id", keep="last"))

    d = design(df)
    div = pl.DataFrame({"row_id": df["row_id"], "divisor_gpus": d.total_gpus})
    io = df.select("row_id", "isl", "osl", "conc")
    aic = aic.join(div, on="row_id").join(io, on="row_id").with_columns(
        # aiconfigurator's batch is whole per rank: below one request per rank it runs more
        # requests than the row's conc, so its rate is scaled back to conc at that TPOT.
        aic_tput_per_gpu=pl.col("seq_per_s") * (pl.col("conc") / pl.col("aic_concurrency")).clip(
            upper_bound=1.0) * (pl.col("isl") + pl.col("osl")) / pl.col("divisor_gpus"),
        aic_median_tpot=pl.col("tpot_ms") / 1e3, aic_median_ttft=pl.col("ttft_ms") / 1e3,
        aic_status=pl.col("status"), aic_reason=pl.col("reason"),
    ).select("row_id", "aic_status", "aic_reason", "aic_tput_per_gpu", "aic_median_tpot",
             "aic_median_ttft", "kv_cache_warning", "note", "backend_version", "divisor_gpus",
             "aic_concurrency")
    uns = pl.DataFrame({"row_id": list(unsupported), "aic_status": ["unsupported"] * len(
        unsupported), "aic_reason": list(unsupported.values())},
        schema_overrides={"row_id": pl.Int64})
    aic = pl.concat([aic.with_columns(pl.col("row_id").cast(pl.Int64)), uns],
                    how="diagonal_relaxed")

    ins = predict(df).select("row_id", *[pl.col(f"pred_{m}").alias(f"in_{m}") for m in METRICS])
    lo = heldout(points_csv, a.out_dir / "validate", a.max_nfev).select(
        pl.col("row_id").cast(pl.Int64), *[pl.col(f"pred_{m}").alias(f"loho_{m}")
                                           for m in METRICS])
    base = df.select("row_id", "hardware", "framework", "precision", "spec_method", "disagg",
                     "isl", "osl", "conc", *METRICS)
    sbs = (base.join(aic, on="row_id", how="left").join(ins, on="row_id", how="left")
           .join(lo, on="row_id", how="left").sort("row_id"))
    sbs.write_csv(a.out_dir / "side_by_side.csv")

    lines = [f"aiconfigurator versions: {versions}; MTP accepted drafts: {a.mtp_accepted}",
             f"rows: {sbs.height}; aiconfigurator ok: "
             f"{sbs.filter(pl.col('aic_status') == 'ok').height}", "",
             "| aiconfigurator outcome | rows |", "|---|---|"]
    reasons = (sbs.filter(pl.col("aic_status") != "ok")
               .with_columns(pl.col("aic_reason").str.replace(r"(OOM).*", "$1")
                             .str.slice(0, 110).alias("why"))
               .group_by("why").len().sort("len", descending=True))
    lines += [f"| {r['why']} | {r['len']} |" for r in reasons.iter_rows(named=True)]
    by_kind = (sbs.group_by("hardware", "disagg").agg(
        rows=pl.len(), ok=(pl.col("aic_status") == "ok").sum()).sort("hardware", "disagg"))
    lines += ["", "| hardware | disagg | rows | aic ok |", "|---|---|---|---|"]
    lines += [f"| {r['hardware']} | {r['disagg']} | {r['rows']} | {r['ok']} |"
              for r in by_kind.iter_rows(named=True)]
    report = "\n".join(lines) + "\n" + error_tables(sbs) + "\n"
    (a.out_dir / "report.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
