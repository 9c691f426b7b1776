"""`make demo`: the main job on the bundled real traces, end to end.

1. Request timelines (Mooncake conversation, Azure code): ingest, LRU prefix-block replay
   over capacities, and GPU/host prefix tiers with GB200 defaults.
2. Top-k selections (SmolLM2 recording): HiSparse device-buffer replay over buffer sizes
   and policies.
3. Cost, all from the fitted serving model: its held-out error, ``cost compare`` for
   GLM-5.2, and the HiSparse replay's misses priced on GB200, GB300 and MI355X.
4. The report (``toolkit report``) to ``build/report/``: ``index.html`` with inlined JS,
   plus SVG and PNG of every chart.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import polars as pl

from toolkit.analysis import run_query
from toolkit.cost.from_replay import cost_of_replay, run_tiers
from toolkit.cost.records import DecodeCostConfig, record_replay_cost, record_serving_fronts
from toolkit.errors import ToolkitError
from toolkit.hardware import get_hardware
from toolkit.ingest import ingest_file
from toolkit.models import get_model
from toolkit.policies import policies
from toolkit.replay.prefix import sweep_prefix
from toolkit.replay.selections import SelectionReplayConfig, load_rows, replay_selections
from toolkit.replay.tiers import TierReplayConfig
from toolkit.report import write_report
from toolkit.store import Store, open_store
from toolkit.tables import render_table

#: Bundled request timelines: (reader, relative path, trace name).
BUNDLED = (
    ("mooncake", "mooncake/conversation_trace.jsonl", "mooncake_conversation"),
    ("azure", "azure_llm_2023/AzureLLMInferenceTrace_code.csv", "azure_code_2023"),
)
#: LRU capacities swept, in 512-token blocks (None = unbounded).
DEMO_CAPACITIES: tuple[int | None, ...] = (300, 1_000, 3_000, 10_000, 30_000, 100_000, None)
SELECTION_TRACE = ("smollm2", "smollm2-softmax-sum")
HARDWARE = ("gb200", "gb300", "mi355x")
#: Target interactivities (tok/s/user) of the demo's GLM-5.2 cost answers.
COMPARE_TARGETS = (30.0, 50.0, 70.0, 90.0, 110.0, 130.0, 170.0, 200.0)

#: Closed-loop users per tier replay, and decode batches per priced selection replay, for
#: the report's reuse-vs-concurrency and cost-vs-interactivity charts.
DEMO_CONCURRENCY = (8, 16, 32)
DEMO_BATCHES = (8, 32, 128)


def _requests_part(store: Store, traces_dir: Path, echo: Callable[[str], None]) -> None:
    for fmt, rel, name in BUNDLED:
        res = ingest_file(store, fmt, traces_dir / rel, name, replace=True)
        echo(f"ingested {res.rows:,} requests from {rel} as {name!r} ({res.elapsed_s:.2f} s)")
    echo("\nRequest timelines (real, public; see traces/*/SOURCE.txt):")
    echo(render_table(run_query(store, "trace_summary")))
    sweep_prefix(store, "mooncake_conversation", list(DEMO_CAPACITIES))
    echo("\nLRU prefix-block replay of the Mooncake conversation trace (512-token blocks):")
    echo(render_table(run_query(store, "prefix_runs", trace="mooncake_conversation")
                            .drop("trace")))
    echo("Mooncake FAST'25 Table 2 reports a 40% cache ratio for this trace; see docs/prefix.md.")
    tiers = run_tiers(store, TierReplayConfig("mooncake_conversation", "gb200", "glm-5.2"))
    s = tiers.summary
    echo(f"\nGPU/host prefix tiers, GB200 + GLM-5.2 default pools, trace arrivals, times from "
         f"the serving model: GPU hit "
         f"{s['gpu_hit_rate']:.4f}, host hit {s['host_hit_rate']:.4f}, overall "
         f"{s['overall_hit_rate']:.4f}, p90 TTFT {s['p90_ttft_s']:.3f} s")
    for hw in HARDWARE:
        for users in DEMO_CONCURRENCY:
            run_tiers(store, TierReplayConfig("mooncake_conversation", hw, "glm-5.2",
                                                 concurrency=users))
    echo(f"tier replays, closed loop at {', '.join(map(str, DEMO_CONCURRENCY))} users on "
         f"{', '.join(HARDWARE)}: see the report's tier section")


def _selections_part(store: Store, traces_dir: Path, echo: Callable[[str], None]
                     ) -> tuple[str, int]:
    name, select = SELECTION_TRACE
    ingest_file(store, "bundle", traces_dir / name, name, replace=True, select=select)
    rows = load_rows(store, name)
    echo(f"\nSelections: real SmolLM2-135M recording ({select}, k = {rows.k}, "
         f"{rows.request_id.size:,} request x step x layer rows)")
    # every registered policy (~4 s in all on this trace), so the report's best online
    # policy is chosen among them rather than being the only one replayed
    for policy in [p for p in policies.names() if p != "opt-bypass"]:
        for mult in (1, 2, 4):
            replay_selections(store, SelectionReplayConfig(name, policy, mult * rows.k),
                              rows=rows)
    runs = run_query(store, "selection_runs", trace=name)
    echo(render_table(runs.drop("trace", "indexshare")))
    run_id = store.query(
        "SELECT run_id FROM selection_runs WHERE trace = 'smollm2' AND policy = 'lru' "
        "AND buffer_tokens = $n", {"n": 2 * rows.k}).item()
    for hw in HARDWARE:
        for batch in DEMO_BATCHES:
            for overlap in (False, True):
                record_replay_cost(store, DecodeCostConfig(
                    run_id, "glm-5.2", hw, batch, overlap, isl_tokens=32_768,
                    osl_tokens=8_192))
    return run_id, rows.k


def _hisparse_costs(store: Store, run_id: str, k: int, echo: Callable[[str], None]) -> None:
    """The serving model's step with the selection replay's misses, against the same step
    without offload: what HiSparse's host fetches cost. The misses reach GLM-5.2's k and
    context through the measured selection-scaling fit (the one ``cost compare --selections``
    and ``plan`` use), so the table carries its band and its label."""
    glm = get_model("glm-5.2")
    miss_ratio = store.query("SELECT miss_ratio FROM selection_runs WHERE run_id = $r",
                             {"r": run_id}).item()
    costs, scaling = [], ""
    for hw in HARDWARE:
        for mode, scale, overlap in (("no offload", 0.0, False), ("sync", None, False),
                                     ("overlapped", None, True)):
            s = cost_of_replay(store, run_id, glm, get_hardware(hw), batch_per_gpu=64,
                               overlap=overlap, miss_scale=scale, isl_tokens=32_768,
                               osl_tokens=8_192).summary
            if scale is None:
                scaling = str(s["miss_scaling"])
            tier = "hyperscaler"
            costs.append({"hardware": hw, "misses": mode,
                          "p50_tpot_s": s["p50_tpot_s"], "p99_tpot_s": s["p99_tpot_s"],
                          "miss_share": s["miss_share_of_step"],
                          "tput_per_gpu": round(s["total_tokens_per_s_per_gpu"]),
                          "usd_per_mtok_total": s[f"usd_per_million_total_tokens_{tier}"],
                          "usd_per_mtok_total_low": s[f"usd_per_million_total_tokens_{tier}_low"],
                          "usd_per_mtok_total_high":
                              s[f"usd_per_million_total_tokens_{tier}_high"]})
    echo(f"\nThe same model with HiSparse offload: GLM-5.2 decode at the SmolLM2 replay's "
         f"misses (LRU, buffer 2k = {2 * k} tokens, miss ratio {miss_ratio:.4f} at k = {k}), "
         "batch 64/GPU, 32K in / 8K out, hyperscaler prices; 'no offload' is the same step "
         "without host fetches; low/high = the scaling fit's band. Misses at k = "
         f"{glm.index_topk}: {scaling}")
    echo(render_table(pl.DataFrame(costs)))


def _serving_part(store: Store, hisparse: tuple[str, int],
                  echo: Callable[[str], None]) -> None:
    from toolkit.cost.compare import CompareConfig
    from toolkit.serving import bundled_points_path, predict, read_points
    from toolkit.serving.crossval import dsa_caveat
    from toolkit.serving.params import bundled_cv_dir, bundled_params
    from toolkit.sweep.kinds import run_compare

    cv = bundled_cv_dir()
    errors = pl.read_csv(cv / "errors_hardware.csv")
    echo("\nCost: every time below (and the tier replays' service times above) comes from one "
         "model, the serving model: model and hardware specs, efficiencies fitted on 300 "
         "measured InferenceX DeepSeek-R1 points (SemiAnalysis InferenceX, Apache-2.0). Its "
         "error on rows it did not see, leave-one-hardware-out:")
    echo(render_table(errors.select(
        "hardware", "rows", "tput_per_gpu_median_err", "tput_per_gpu_spearman",
        "median_tpot_median_err", "median_tpot_spearman", "median_ttft_median_err")))
    pts = read_points(bundled_points_path())
    p = predict(pts, bundled_params())
    err = (p["pred_tput_per_gpu"] / p["tput_per_gpu"] - 1).abs().median()
    echo(f"(in-sample, fitted on the same rows: throughput median error {err:.3f}; not the "
         "measure)")
    # modelled DeepSeek-R1 FP4 8K/1K fronts, shown in the report with the measured points
    record_serving_fronts(store, CompareConfig(model="dsr1", hardware=tuple(HARDWARE),
                                               precision="fp4"))
    # GLM-5.2 cost answers along each accelerator's front (the report's cost-vs-
    # interactivity chart, with bands), stored as one compare run
    targets = tuple(sorted({*COMPARE_TARGETS, 100.0, 150.0}))
    run_compare(store, CompareConfig(model="glm-5.2", hardware=tuple(HARDWARE), isl=65536,
                                     osl=512, cached_prefix_fraction=0.95,
                                     interactivity=targets))
    cmp = run_query(store, "compare_answers").filter(pl.col("interactivity").is_in([100.0,
                                                                                    150.0]))
    echo("\nGLM-5.2 $/M tokens (agentic mix: 64K prompts, 95% cached (assumed), 512 out; p90 "
         "TTFT <= 10 s, the default): source = measured points or the model; band = 10-90% "
         "cross-validated error; reachable = false: beyond the front, no price; edge = true: "
         "within 15% of the front's end:")
    echo(render_table(cmp.select("hardware", "engine", "interactivity", "source", "basis",
                                 "reachable", "edge", pl.col("tput_per_gpu").round(0),
                                 "usd_per_mtok_total", "usd_per_mtok_total_low",
                                 "usd_per_mtok_total_high", "p90_ttft_s", "gpus",
                                 "layout")))
    echo(f"({dsa_caveat()})")
    _hisparse_costs(store, *hisparse, echo)


def run_demo(
    store_dir: Path, report_dir: Path, traces_dir: Path, echo: Callable[[str], None] = print,
    *, report: bool = True,
) -> Path | None:
    """Ingest, replay, price, summarise and chart; returns the HTML report path (None with
    ``report=False``: ``toolkit warm-up`` runs the demo only to compile its kernels, and the
    charts, which compile none, took ~7 of its ~15 s of work)."""
    # every input is checked before the store is opened, so a wrong --traces leaves no
    # half-built store behind
    needed = [traces_dir / rel for _, rel, _ in BUNDLED] + [traces_dir / SELECTION_TRACE[0]]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise ToolkitError(f"no bundled trace at {', '.join(missing)}; --traces must be the "
                           "repository's traces/ directory")
    t0 = time.perf_counter()
    with open_store(store_dir, create=True) as store, pl.Config(
        tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200, tbl_hide_column_data_types=True,
        tbl_hide_dataframe_shape=True,
    ):
        _requests_part(store, traces_dir, echo)
        hisparse = _selections_part(store, traces_dir, echo)
        _serving_part(store, hisparse, echo)
        if not report:
            return None
        html = write_report(store, report_dir, "KV-cache tiering on the bundled real traces")
    elapsed_s = time.perf_counter() - t0
    echo(f"\nstore: {store_dir}/   report: {html} (+ .svg, .png per chart)   [{elapsed_s:.1f} s]")
    return html
