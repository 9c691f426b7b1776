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
# holding tokens 0..N-1 when a sequence first outgrows it). Every grid below is a **sweep**
# (`toolkit.sweep`): a TOML grid file, one cell per combination, each cell a normal replay
# keyed by its config, so re-running the notebook's grids skips what already ran. Every
# figure comes from a DuckDB query over the store's `sweeps`, `selection_runs` and
# `selection_replay` tables; the store stays in `build/notebooks/03` for `toolkit sql`.

# %%
import shutil
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit import charts
from toolkit.models import indexer_layer_ids

alt.renderers.enable("svg")
pl.Config(tbl_rows=60, tbl_width_chars=120, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, float_precision=4)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
OUT = ROOT / "build" / "notebooks"
shutil.rmtree(OUT / "03", ignore_errors=True)  # a re-run starts from an empty store
shutil.rmtree(OUT / "03_grids", ignore_errors=True)
(OUT / "03_grids").mkdir(parents=True)
ws = toolkit.open(OUT / "03", create=True)
ws.ingest(ROOT / "traces" / "smollm2", "bundle", "smollm2", select="smollm2-softmax-sum")
rows = ws.load_rows("smollm2")
k = rows.k
print(f"k = {k}, {rows.request_id.size:,} (request, step, layer) rows, "
      f"{rows.values.size:,} selected positions")


def run_grid(name: str, text: str):
    """Write a grid file (rerun it with `toolkit sweep --store build/notebooks/03 --grid
    build/notebooks/03_grids/NAME.toml`) and sweep it in this process; returns the
    `toolkit.sweep.SweepResult`."""
    path = OUT / "03_grids" / f"{name}.toml"
    path.write_text(text)
    res = ws.sweep(path, workers=1)
    print(f"{name}: {res.cells} cells, {res.ran} ran, {res.skipped} skipped, "
          f"{res.failed} failed")
    return res


# %% [markdown]
# ## 1. Buffer size x policy (plain mode)
# 8 policies x 5 buffer sizes = 40 cells.

# %%
POLICIES = ["lru", "fifo", "clock", "lfu", "arc", "s3fifo", "slru", "opt"]
BUFFERS = [k, 3 * k // 2, 2 * k, 3 * k, 4 * k]
policy_grid = f"""
kind = "selections"
trace = "smollm2"
[fixed]
mode = "plain"
[axes]
policy = {POLICIES}
buffer_tokens = {BUFFERS}
""".replace("'", '"')
print(policy_grid)
policies_sweep = run_grid("policies", policy_grid)
plain = ws.query("selection_runs", trace="smollm2").filter(pl.col("mode") == "plain")
charts.misses_vs_buffer(plain, f"SmolLM2 (real), plain mode: miss ratio vs buffer (k = {k})")

# %% [markdown]
# The same sweep as a result surface (the `sweep_miss_surface` query of `toolkit.sweep`):
# miss ratio by policy x buffer, one cell per grid cell, buffers in numeric order.

# %%
surface = ws.sweep_query("sweep_miss_surface", policies_sweep.sweep_id)
charts.sweep_surface(surface, "buffer_tokens", "policy", "miss_ratio",
              f"SmolLM2 (real), plain mode: miss ratio by policy x buffer (k = {k})",
              "miss ratio")

# %% [markdown]
# ## 2. The gap to OPT (Belady)
# Misses of each policy divided by OPT's at the same buffer size: how much better any
# policy could do with perfect knowledge of future selections.

# %%
gap = (ws.query("policy_vs_opt", trace="smollm2")
       .filter((pl.col("mode") == "plain") & ~pl.col("indexshare"))
       .select("policy", "buffer_tokens", "misses",
               pl.col("misses_over_opt").round(3))
       .sort("buffer_tokens", "policy"))
charts.grouped_bars(gap, "buffer_tokens", "misses_over_opt", "policy",
             "Misses relative to OPT (1.0 = optimal)")

# %%
gap.filter(pl.col("buffer_tokens") == 2 * k)

# %% [markdown]
# ## 3. HiSparse mode: misses per decode step at the default buffer (2k)

# %%
run_grid("hisparse", f"""
kind = "selections"
trace = "smollm2"
[fixed]
buffer_tokens = {2 * k}
[axes]
policy = ["lru", "opt"]
""")
per_step = ws.query("selection_misses_per_step", trace="smollm2").filter(
    (pl.col("mode") == "hisparse") & (pl.col("buffer_tokens") == 2 * k)
    & ~pl.col("indexshare")
).with_columns(series=pl.col("policy"))
charts.misses_per_step(per_step, f"SmolLM2 (real), HiSparse mode, buffer 2k = {2 * k}")

# %%
ws.query("selection_runs", trace="smollm2").filter(pl.col("mode") == "hisparse")

# %% [markdown]
# ## 4. IndexShare: transferred bytes with and without shared selections
# GLM-5.2's pattern on the trace's 30 layers: Shared layers reuse their Full layer's
# selection, so their buffers see the Full layer's stream. Row bytes are GLM-5.2's FP8 MLA
# row (656 B). `full_layers = "none"` is the default (every layer its own selection); the
# LRU cell at 2k without IndexShare is the run section 3 made, so the sweep skips it.

# %%
glm = ws.model("glm-5.2")
n_layers = int(rows.layer.max()) + 1
full = indexer_layer_ids(n_layers, glm.index_topk_freq, glm.index_skip_topk_offset)
row_bytes = glm.mla_row_bytes("fp8")
run_grid("indexshare", f"""
kind = "selections"
trace = "smollm2"
[fixed]
policy = "lru"
row_bytes = {row_bytes}
[axes]
buffer_tokens = {BUFFERS}
full_layers = ["none", {list(full)}]
""")
share = ws.sql("""
    SELECT buffer_tokens, CASE WHEN indexshare THEN 'IndexShare' ELSE 'own selection' END
           AS layers, bytes_h2d / 1e6 AS mb_h2d, misses
    FROM selection_runs WHERE trace = 'smollm2' AND mode = 'hisparse' AND policy = 'lru'
    ORDER BY buffer_tokens, layers
""")
charts.grouped_bars(share, "buffer_tokens", "mb_h2d", "layers",
             "HiSparse LRU: host-to-device MB, all layers and steps", "MB host -> device")

# %%
share

# %% [markdown]
# ## 5. The sweeps this notebook ran
# One row per sweep: cells that ran, were skipped (their run already existed) or failed.

# %%
ws.sql("""
    SELECT grid_fingerprint, count(*) AS cells, count(*) FILTER (status = 'done') AS ran,
           count(*) FILTER (status = 'skipped') AS skipped,
           count(*) FILTER (status = 'failed') AS failed
    FROM sweeps GROUP BY grid_fingerprint ORDER BY cells DESC, grid_fingerprint
""")

# %%
ws.close()
