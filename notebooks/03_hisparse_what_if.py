# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # HiSparse what-if: buffer size x policy on a real selection trace
#
# The real SmolLM2 selection trace (`traces/smollm2/`, top-k by the oracle-indexer score) is
# replayed through per-(request, layer) device buffers. `plain` mode (cold buffer, every
# access goes through the policy) compares policies exactly; `hisparse` mode adds SGLang
# HiSparse's rules (short-sequence fast path, the reserved newest-token slot, the buffer
# holding tokens 0..N-1 when a sequence first outgrows it). Every figure comes from a DuckDB
# query over the store's `selection_runs` / `selection_replay` tables.

# %%
import tempfile
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit.analysis import run_query
from toolkit.charts import grouped_bars, misses_per_step, misses_vs_buffer
from toolkit.models.spec import get_model, indexer_layer_ids
from toolkit.replay.selections import SelectionReplayConfig, load_rows, replay_selections

alt.renderers.enable("svg")
pl.Config(tbl_rows=60, tbl_width_chars=120, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, float_precision=4)
TRACES = next(p / "traces" for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
workdir = tempfile.TemporaryDirectory()
store = toolkit.open_store(Path(workdir.name) / "store")
store.ingest("bundle", TRACES / "smollm2", "smollm2", select="smollm2-softmax-sum")
rows = load_rows(store, "smollm2")
k = rows.k
print(f"k = {k}, {rows.request_id.size:,} (request, step, layer) rows, "
      f"{rows.values.size:,} selected positions")

# %% [markdown]
# ## 1. Buffer size x policy (plain mode)

# %%
POLICIES = ["lru", "fifo", "clock", "lfu", "arc", "s3fifo", "slru", "opt"]
BUFFERS = [k, 3 * k // 2, 2 * k, 3 * k, 4 * k]
for policy in POLICIES:
    for n in BUFFERS:
        replay_selections(store, SelectionReplayConfig("smollm2", policy, n, mode="plain"),
                          rows=rows)
plain = run_query(store, "selection_runs", trace="smollm2").filter(pl.col("mode") == "plain")
misses_vs_buffer(plain, f"SmolLM2 (real), plain mode: miss ratio vs buffer (k = {k})")

# %% [markdown]
# ## 2. The gap to OPT (Belady)
# Misses of each policy divided by OPT's at the same buffer size: how much better any
# policy could do with perfect knowledge of future selections.

# %%
gap = store.query("""
    SELECT r.policy, r.buffer_tokens, r.misses,
           round(r.misses / o.misses::DOUBLE, 3) AS misses_over_opt
    FROM selection_runs r JOIN selection_runs o
      ON o.trace = r.trace AND o.mode = r.mode AND o.buffer_tokens = r.buffer_tokens
     AND o.policy = 'opt'
    WHERE r.trace = 'smollm2' AND r.mode = 'plain' AND r.policy <> 'opt'
    ORDER BY r.buffer_tokens, r.policy
""")
grouped_bars(gap.with_columns(pl.col("buffer_tokens").cast(pl.String)), "buffer_tokens",
             "misses_over_opt", "policy", "Misses relative to OPT (1.0 = optimal)")

# %%
gap.filter(pl.col("buffer_tokens") == 2 * k)

# %% [markdown]
# ## 3. HiSparse mode: misses per decode step at the default buffer (2k)

# %%
for policy in ["lru", "opt"]:
    replay_selections(store, SelectionReplayConfig("smollm2", policy, 2 * k), rows=rows)
per_step = run_query(store, "selection_misses_per_step", trace="smollm2").filter(
    (pl.col("mode") == "hisparse") & (pl.col("buffer_tokens") == 2 * k)
    & ~pl.col("indexshare")
).with_columns(series=pl.col("policy"))
misses_per_step(per_step, f"SmolLM2 (real), HiSparse mode, buffer 2k = {2 * k}")

# %%
run_query(store, "selection_runs", trace="smollm2").filter(pl.col("mode") == "hisparse")

# %% [markdown]
# ## 4. IndexShare: transferred bytes with and without shared selections
# GLM-5.2's pattern on the trace's 30 layers: Shared layers reuse their Full layer's
# selection, so their buffers see the Full layer's stream. Row bytes are GLM-5.2's FP8 MLA
# row (656 B).

# %%
glm = get_model("glm-5.2")
n_layers = int(rows.layer.max()) + 1
full = indexer_layer_ids(n_layers, glm.index_topk_freq, glm.index_skip_topk_offset)
row_bytes = glm.mla_row_bytes("fp8")
for n in BUFFERS:
    for shared in (None, full):
        replay_selections(store, SelectionReplayConfig(
            "smollm2", "lru", n, full_layers=shared, row_bytes=row_bytes), rows=rows)
share = store.query("""
    SELECT buffer_tokens, CASE WHEN indexshare THEN 'IndexShare' ELSE 'own selection' END
           AS layers, bytes_h2d / 1e6 AS mb_h2d, misses
    FROM selection_runs WHERE trace = 'smollm2' AND mode = 'hisparse' AND policy = 'lru'
    ORDER BY buffer_tokens, layers
""")
grouped_bars(share.with_columns(pl.col("buffer_tokens").cast(pl.String)), "buffer_tokens",
             "mb_h2d", "layers", "HiSparse LRU: host-to-device MB, all layers and steps",
             "MB host -> device")

# %%
share

# %%
store.close()
workdir.cleanup()
