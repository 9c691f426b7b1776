"""Serving-model queries: held-out error against the bundled InferenceX points, modelled
fronts, and the measured points to overlay on them."""

from __future__ import annotations

from typing import Any

from toolkit.analysis.queries.named import HW_FILTER, NamedQuery, Param, choice
from toolkit.store import Store

_MVM_METRICS = {"tput_per_gpu": "tok/s/GPU (input + output)", "median_tpot": "s",
                "median_ttft": "s", "median_intvty": "tok/s/user"}


def _resolve_metric(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    choice(args, "metric", tuple(_MVM_METRICS))
    args["unit"] = _MVM_METRICS[str(args["metric"])]
    return args


def _resolve_group(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    choice(args, "group", ("hardware", "framework"))
    return args


#: The serving queries, in listing order.
NAMED: tuple[NamedQuery, ...] = (
    NamedQuery(
        "model_vs_measured", "The serving model's held-out predictions (leave-one-hardware-"
        "out) against measured InferenceX DeepSeek-R1 points (bundled), for one metric.",
        """
        SELECT hardware, framework, precision, spec_method, isl, osl, conc,
               CASE WHEN disagg THEN 'disagg P' || num_prefill_gpu || '/D' || num_decode_gpu
                                 || ' TP' || decode_tp || ' EP' || decode_ep
                    ELSE 'TP' || decode_tp || ' EP' || decode_ep END
               || CASE WHEN decode_dp_attention THEN ' DPA' ELSE '' END AS layout,
               $metric AS metric, $unit AS unit, measured, predicted,
               predicted / measured - 1 AS rel_err
        FROM (SELECT *,
                     CASE $metric WHEN 'tput_per_gpu' THEN tput_per_gpu
                                  WHEN 'median_tpot' THEN median_tpot
                                  WHEN 'median_ttft' THEN median_ttft
                                  ELSE median_intvty END AS measured,
                     CASE $metric WHEN 'tput_per_gpu' THEN pred_tput_per_gpu
                                  WHEN 'median_tpot' THEN pred_median_tpot
                                  WHEN 'median_ttft' THEN pred_median_ttft
                                  ELSE pred_median_intvty END AS predicted
              FROM serving_heldout)
        WHERE measured > 0 AND ($hardware IS NULL OR hardware = $hardware)
        ORDER BY hardware, framework, isl, osl, conc
        """,
        (Param("metric", "tput_per_gpu", "tput_per_gpu | median_tpot | median_ttft | "
                                          "median_intvty"), HW_FILTER),
        (("hardware", "name"), ("framework", "engine"), ("precision", "fp4 | fp8"),
         ("spec_method", "none | mtp"), ("isl", "tokens"), ("osl", "tokens"),
         ("conc", "concurrent requests"), ("layout", "parallelism"), ("metric", "name"),
         ("unit", "of measured/predicted"), ("measured", "value in unit"),
         ("predicted", "value in unit (held out)"), ("rel_err", "predicted / measured - 1")),
        resolve=_resolve_metric, bundled=("serving_heldout",)),
    NamedQuery(
        "model_error", "Held-out error of the serving model per hardware or per engine, one "
        "row per (group, metric): median and p90 of |predicted / measured - 1|.",
        """
        WITH h AS (SELECT CASE $group WHEN 'hardware' THEN hardware ELSE framework END AS key,
                          * FROM serving_heldout),
        e AS (SELECT key, m.metric, m.metric_rank, abs(m.predicted / m.measured - 1) AS err
              FROM h, (VALUES ('throughput per GPU', 1, h.tput_per_gpu, h.pred_tput_per_gpu),
                              ('TPOT', 2, h.median_tpot, h.pred_median_tpot),
                              ('TTFT', 3, h.median_ttft, h.pred_median_ttft))
                      m(metric, metric_rank, measured, predicted)
              WHERE m.measured > 0)
        SELECT key, metric, metric_rank, count(*) AS rows, median(err) AS median_abs_err,
               quantile_cont(err, 0.9) AS p90_abs_err
        FROM e GROUP BY ALL ORDER BY key, metric_rank
        """,
        (Param("group", "hardware", "hardware | framework"),),
        (("key", "the hardware or engine"), ("metric", "throughput per GPU | TPOT | TTFT"),
         ("metric_rank", "display order"), ("rows", "held-out points"),
         ("median_abs_err", "fraction"), ("p90_abs_err", "fraction")),
        resolve=_resolve_group, bundled=("serving_heldout",)),
    NamedQuery(
        "serving_fronts", "Modelled Pareto fronts (serving model) of throughput per GPU vs "
        "interactivity per hardware, as recorded by toolkit.cost.records.record_serving_fronts.",
        """
        SELECT run_id, model, precision, isl, osl, hardware, framework, layout,
               interactivity_tok_s_user AS interactivity, tput_per_gpu
        FROM serving_fronts
        WHERE ($run IS NULL OR run_id = $run) AND ($hardware IS NULL OR hardware = $hardware)
        ORDER BY run_id, hardware, interactivity
        """,
        (Param("run", None, "fronts run_id filter"), HW_FILTER),
        (("run_id", "fronts run"), ("model", "name"), ("precision", "fp4 | fp8"),
         ("isl", "tokens"), ("osl", "tokens"), ("hardware", "name"), ("framework", "engine"),
         ("layout", "parallelism"), ("interactivity", "tok/s/user (predicted median)"),
         ("tput_per_gpu", "tok/s/GPU, input + output (predicted)"))),
    NamedQuery(
        "measured_points", "Measured InferenceX DeepSeek-R1 points (bundled) at one shape: "
        "interactivity and throughput per GPU, for overlaying on modelled fronts.",
        """
        SELECT hardware, framework, precision, isl, osl, conc,
               'TP' || decode_tp || ' EP' || decode_ep AS layout,
               median_intvty AS interactivity, tput_per_gpu
        FROM serving_heldout
        WHERE ($hardware IS NULL OR hardware = $hardware) AND isl = $isl AND osl = $osl
          AND precision = $precision
        ORDER BY hardware, framework, conc
        """,
        (HW_FILTER, Param("isl", 8192, "input tokens"), Param("osl", 1024, "output tokens"),
         Param("precision", "fp4", "fp4 | fp8")),
        (("hardware", "name"), ("framework", "engine"), ("precision", "fp4 | fp8"),
         ("isl", "tokens"), ("osl", "tokens"), ("conc", "concurrent requests"),
         ("layout", "decode TP/EP"), ("interactivity", "tok/s/user (median)"),
         ("tput_per_gpu", "tok/s/GPU, input + output")),
        bundled=("serving_heldout",)),
)
