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
# # Where does a sparse-attention indexer look? Locality of real top-k selections
#
# The bundled trace `traces/smollm2/` is **real**: recorded by `toolkit record` from
# SmolLM2-135M-Instruct (30 layers) on permissively licensed prose, code and documentation
# (see its `SOURCE.txt`), with the oracle-indexer score (head-summed softmax attention, the
# target DSA's lightning indexer is trained to imitate). The statistics below decide how a
# HiSparse device buffer behaves: recency and sinks are cheap to keep resident, step-to-step
# overlap is what an LRU buffer exploits, and layer-to-layer overlap is what IndexShare reuses.
# A labelled **SYNTHETIC** trace (k = 2048, 16K context) is shown for contrast.

# %%
import shutil
from pathlib import Path

import altair as alt
import polars as pl

import toolkit
from toolkit import charts
from toolkit.models import indexer_layer_ids
from toolkit.tables import Table

alt.renderers.enable("svg")
pl.Config(tbl_rows=40, tbl_width_chars=120, tbl_hide_column_data_types=True,
          tbl_hide_dataframe_shape=True, float_precision=3)
ROOT = next(p for p in [Path.cwd(), *Path.cwd().parents] if (p / "traces").is_dir())
STORE_DIR = ROOT / "build" / "notebooks" / "02"
shutil.rmtree(STORE_DIR, ignore_errors=True)  # each run starts from an empty store
ws = toolkit.open(STORE_DIR, create=True)
ws.ingest(ROOT / "traces" / "smollm2", "bundle", "smollm2", select="smollm2-softmax-sum")
ws.synth_selections("synthetic_k2048", prompt_tokens=16_384, steps=32, layers=8)
Table(ws.sql("SELECT trace, model, k, score, \"order\", n_layers, synthetic "
             "FROM selection_traces"))

# %%
Table(ws.sql("""
    SELECT r.request_id, r.source_text, r.prompt_tokens, count(DISTINCT s.step) AS steps,
           min(s.seq_len) AS first_seq_len, max(s.seq_len) AS last_seq_len
    FROM selection_requests r JOIN selections s USING (trace, request_id)
    WHERE r.trace = 'smollm2' GROUP BY ALL ORDER BY r.request_id
"""))

# %% [markdown]
# ## 1. Recency, sinks and position 0, per layer
# The named query `selection_locality` (`toolkit sql --query selection_locality --param
# trace=smollm2 --param window=128`): `frac_recent`, the share of selected positions among
# the last W = 2k positions; `frac_sinks`, the share among the first S = 4 positions;
# `pos0_rate`, the share of selections that include position 0 (the classic attention sink);
# and the overlaps of section 2.

# %%
k = ws.sql("SELECT k FROM selection_traces WHERE trace = 'smollm2'").item()
loc = ws.query("selection_locality", trace="smollm2", window=2 * k, sinks=4)
charts.metric_by_layer(loc, ["frac_recent", "frac_sinks", "pos0_rate"],
                f"SmolLM2 (real): where the top-{k} falls, per layer (W = {2 * k}, S = 4)")

# %%
Table(loc.select("layer", "frac_recent", "frac_sinks", "pos0_rate").describe())

# %% [markdown]
# ## 2. Overlap between adjacent layers and adjacent steps
# Jaccard and |A∩B|/k. Step-to-step overlap is what an LRU device buffer turns into hits;
# layer-to-layer overlap is what IndexShare relies on (IndexCache reports 70-100% between
# adjacent DSA layers of trained DSA models).

# %%
charts.metric_by_layer(loc, ["step_overlap_of_k", "layer_overlap_of_k"],
                "SmolLM2 (real): overlap with the next step / the next layer", "|A∩B| / k")

# %%
Table(ws.query("selection_locality").group_by("trace").agg(
    pl.col("step_overlap_of_k").mean().alias("mean_step_overlap_of_k"),
    pl.col("layer_overlap_of_k").mean().alias("mean_layer_overlap_of_k"),
).sort("trace").with_columns(pl.col("trace").replace(
    {"synthetic_k2048": "synthetic_k2048 (SYNTHETIC)"})),
    percent=("mean_step_overlap_of_k", "mean_layer_overlap_of_k"))

# %% [markdown]
# ## 3. IndexShare: what a Shared layer still gets from its Full layer
# GLM-5.2's rule (`index_topk_freq = 4`, `index_skip_topk_offset = 3`: layer i is Full iff
# i < 3 or (i - 2) % 4 == 0) applied to the trace's 30 layers. For each Shared layer: the
# overlap between its own selection and the Full layer's it would reuse.

# %%
n_layers = ws.sql("SELECT n_layers FROM selection_traces WHERE trace='smollm2'").item()
full = indexer_layer_ids(n_layers, 4, 3)
share = ws.query("indexshare_overlap", trace="smollm2", freq=4, offset=3)
print(f"Full layers ({len(full)} of {n_layers}): {list(full)}")
Table(share)

# %%
charts.indexshare_bars(share, "SmolLM2 (real): a Shared layer's overlap with its Full layer")

# %% [markdown]
# ## 4. Step x position heat map of one layer
# Request 0, layer 15, positions binned by 32 tokens: the vertical bands are positions the
# indexer keeps coming back to (sinks, a few salient tokens), the diagonal edge is recency.

# %%
heat = ws.query("selection_heatmap", trace="smollm2", layer=15, request=0, bin=32)
print(f"{heat.height} cells")
charts.selection_heatmap(heat, "SmolLM2 (real), request 0, layer 15: selections per 32-token bin")

# %%
ws.close()
print("store kept at build/notebooks/02; e.g. toolkit sql --store build/notebooks/02 "
      "--query selection_locality --param trace=smollm2")
