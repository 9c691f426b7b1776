"""Price an Engram table placement: in HBM, in host DRAM or on NVMe, behind an HBM row cache.

The backbone step comes from the serving model (:func:`toolkit.serving.scenario.decode`: the
backbone's specs, efficiencies fitted on the bundled InferenceX DeepSeek-R1 points, one
instance of ``gpus_per_replica`` GPUs with DP attention and expert-parallel MoE; its layers
are taken as equal, the step model being step-level). Engram adds, per decode step:

* **Capacity.** Table in HBM: each GPU holds ``table_bytes / gpus_per_replica`` (sharded
  over the replica; assumed), which comes out of the KV budget and lowers the batch.
  Offloaded: only the HBM row cache (``hbm_cache_bytes``) does; the table must fit in host
  DRAM (one copy per host-memory domain) or on the node's NVMe.
* **Fetches.** Misses of the row cache are gathered per Engram layer: from DRAM over the host
  link with the SM gather kernel (:func:`toolkit.serving.transfer.transfer_path`, all GPUs
  loading at once); from NVMe as one ``ssd_io_bytes`` random read per row, bounded by the
  drive's IOPS and bandwidth plus one access latency, then over the host link.
* **Prefetch.** Rows depend only on token ids, so a step's fetches can be issued when the
  step starts and overlap the layers before each Engram layer (``overlapped``); or each
  Engram layer waits for its own fetch (``sync``).
* Engram's own FLOPs (projections, gating, short conv) are not modelled; they are equal in
  every placement, so they do not change the ranking.

SSD tier assumptions (per GPU, one drive per GPU as in the MLCommons node layouts):
bandwidth = the spec's ``nvme_read_bytes_per_s_per_gpu`` (sourced there); 4 KiB random
read IOPS 2.5 M (Samsung PM1743 datasheet, as reported); access latency 80 µs
(**assumed**: typical enterprise NVMe 4K random-read latency, no public figure used); read
granularity 4 KiB (**assumed**: one row per I/O, no coalescing of neighbouring rows).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.cost.capacity import hbm_budget
from toolkit.hardware import HardwareSpec, get_hardware
from toolkit.models import ModelSpec, get_model
from toolkit.replay.engram import EngramReplayConfig, replay_engram
from toolkit.serving.scenario import Deployment, decode
from toolkit.serving.transfer import transfer_path
from toolkit.store import Store

SSD_IOPS_PER_GPU = 2.5e6  # PM1743 4K random read (datasheet, as reported); 1 drive per GPU
SSD_LATENCY_S = 80e-6  # assumed
SSD_IO_BYTES = 4096  # assumed read granularity
# pulse.bot summary of arXiv 2601.07372: "a 100-billion-parameter table offloaded to host
# memory added under 3% overhead"; bf16 rows (assumed) -> 200 GB
DEFAULT_TABLE_BYTES = 100e9 * 2


@dataclass(frozen=True)
class EngramPlacement:
    """One deployment with an Engram table (per GPU unless named otherwise).

    Attributes:
        lookups_per_token_layer: rows a token reads per Engram layer (orders x heads).
        engram_layers: backbone layer indices with an Engram module.
        hit_ratio: HBM row-cache hit ratio (measured by an Engram replay).
        table_bytes: all Engram tables of the model (assumed size; see module docstring).
        max_batch_per_gpu: batch cap (latency target; assumed 256).
        engine: engine whose fitted serving-model terms time the backbone step.
    """

    model: ModelSpec
    hardware: HardwareSpec
    row_bytes: int
    lookups_per_token_layer: int
    engram_layers: tuple[int, ...]
    hit_ratio: float
    hbm_cache_bytes: float
    table_bytes: float = DEFAULT_TABLE_BYTES
    context_tokens: int = 8192
    gpus_per_replica: int = 8
    max_batch_per_gpu: int = 256
    engine: str = "sglang"
    price_tier: str = "hyperscaler"
    ssd_iops_per_gpu: float = SSD_IOPS_PER_GPU
    ssd_latency_s: float = SSD_LATENCY_S
    ssd_io_bytes: int = SSD_IO_BYTES

    def __post_init__(self) -> None:
        if not 0.0 <= self.hit_ratio <= 1.0:
            raise ValueError(f"hit ratio must be in [0, 1]; got {self.hit_ratio}")
        bad = [i for i in self.engram_layers if not 0 <= i < self.model.num_layers]
        if bad:
            raise ValueError(f"Engram layers {bad} outside {self.model.name}'s "
                             f"{self.model.num_layers} layers")


def _batch(p: EngramPlacement, hbm_engram_bytes: float) -> int:
    b = hbm_budget(p.model, p.hardware, p.context_tokens, gpus_per_replica=p.gpus_per_replica)
    free = b.kv_budget_bytes - hbm_engram_bytes
    return max(0, min(p.max_batch_per_gpu, int(free // b.bytes_per_request_full)))


def _fetch_s(p: EngramPlacement, backing: str, rows: float) -> float:
    """Seconds to bring ``rows`` missed rows of one Engram layer into HBM."""
    if rows <= 0:
        return 0.0
    link = float(transfer_path(p.hardware, "sm_kernel", concurrent=True).time_s(rows, p.row_bytes))
    if backing == "dram":
        return link
    ssd = p.ssd_latency_s + max(rows / p.ssd_iops_per_gpu,
                                rows * p.ssd_io_bytes / p.hardware.nvme_read_bytes_per_s_per_gpu)
    return ssd + link


def _step(p: EngramPlacement, batch: int, backing: str | None) -> dict[str, float]:
    dep = Deployment(p.model.name, p.hardware.name, engine=p.engine,
                     gpus_per_instance=p.gpus_per_replica)
    base = decode(dep, batch_per_gpu=batch, context_tokens=p.context_tokens)
    t_step, tpot = float(base.t_step_s[0]), float(base.tpot_s[0])
    tokens_per_step = t_step / tpot  # accepted tokens per step (1 without MTP)
    layer_s = float(base.t_layer_s[0])
    rows = batch * p.lookups_per_token_layer * (1.0 - p.hit_ratio)
    f = _fetch_s(p, backing, rows) if backing else 0.0
    sync = (t_step + f * len(p.engram_layers)) / tokens_per_step
    # overlapped: every fetch issued at step start on one queue; layer e waits for fetch e;
    # the step's fixed overhead (sampling, scheduling) follows the last layer
    clock = queue = 0.0
    engram = set(p.engram_layers)
    for i in range(p.model.num_layers):
        if i in engram:
            queue += f
            clock = max(clock, queue)
        clock += layer_s
    clock = (clock + t_step - layer_s * p.model.num_layers) / tokens_per_step
    price = p.hardware.price_usd_per_gpu_hour(p.price_tier)
    out = {"batch_per_gpu": float(batch), "base_tpot_s": tpot,
           "fetch_s_per_layer": f, "usd_per_gpu_hour": price}
    for name, tpot in (("sync", sync), ("overlapped", clock)):
        tps = batch / tpot if batch else 0.0
        out[f"tpot_s_{name}"] = tpot
        out[f"tokens_per_s_per_gpu_{name}"] = tps
        out[f"tokens_per_usd_{name}"] = tps * 3600.0 / price
    return out


def price_placements(p: EngramPlacement) -> dict[str, dict[str, float]]:
    """tokens/s/GPU and tokens per dollar for the table in HBM, in DRAM and on SSD."""
    hbm_share = p.table_bytes / p.gpus_per_replica
    res: dict[str, dict[str, float]] = {}
    batch = _batch(p, hbm_share)
    res["hbm"] = _step(p, max(batch, 1), None)
    if batch == 0:
        res["hbm"].update({k: 0.0 for k in res["hbm"]
                           if k.startswith(("tokens_per_s", "tokens_per_usd"))})
    res["hbm"].update(hbm_engram_bytes=hbm_share, fits=float(batch > 0))
    host_need = p.table_bytes / p.hardware.host_mem_gpus_sharing
    for backing in ("dram", "ssd"):
        stored = backing == "ssd" or host_need <= p.hardware.host_mem_bytes_per_gpu
        batch = _batch(p, p.hbm_cache_bytes)
        fits = stored and batch > 0
        row = _step(p, max(batch, 1), backing)
        if not fits:
            row.update({k: 0.0 for k in row if k.startswith(("tokens_per_s", "tokens_per_usd"))})
        row.update(hbm_engram_bytes=p.hbm_cache_bytes, fits=float(fits))
        res[backing] = row
    return res


def ssd_read_s_per_row(hw: HardwareSpec, iops: float = SSD_IOPS_PER_GPU,
                       io_bytes: int = SSD_IO_BYTES) -> float:
    """Steady-state NVMe time per missed row: IOPS- or bandwidth-bound, whichever is slower."""
    return max(1.0 / iops, io_bytes / hw.nvme_read_bytes_per_s_per_gpu)


def missed_rows_per_token_for(hw: HardwareSpec, dram_tokens_per_usd: float,
                              ssd_tokens_per_usd: float, tier: str = "hyperscaler",
                              overlapped: bool = False) -> float:
    """Missed rows per token that make an SSD placement reach ``ssd_tokens_per_usd`` when the
    DRAM placement reaches ``dram_tokens_per_usd`` on ``hw`` (throughput-level inversion).

    Sync: every token pays its SSD reads on top of the DRAM-placement time per token.
    Overlapped: the SSD is the bottleneck, ``tokens/s = 1 / (rows x time per row)``.
    """
    price = hw.price_usd_per_gpu_hour(tier)
    t_dram = dram_tokens_per_usd * price / 3600.0
    t_ssd = ssd_tokens_per_usd * price / 3600.0
    per_row = ssd_read_s_per_row(hw)
    if overlapped:
        return 1.0 / (t_ssd * per_row)
    return (1.0 / t_ssd - 1.0 / t_dram) / per_row


def run_engram(store: Store, cfg: EngramReplayConfig, *, save: bool = True) -> dict[str, Any]:
    """Replay ``cfg``, price the placement, and (``save``) write one ``engram_runs`` row.

    The one place an Engram run's spec names are looked up; the replay only counts.
    """
    hw = get_hardware(cfg.hardware)
    model = get_model(cfg.model)
    c = replay_engram(store, cfg)
    stream = c.stream
    n, hits, misses, hit_ratio = c.lookups, c.hits, c.misses, c.hit_ratio
    tokens = max(stream.tokens, 1)
    read_bytes = stream.row_bytes if cfg.backing == "dram" else max(stream.row_bytes, SSD_IO_BYTES)
    placement = EngramPlacement(
        model, hw, stream.row_bytes, stream.lookups_per_token_layer,
        tuple(i for i in stream.layer_ids), hit_ratio, cfg.hbm_cache_bytes,
        table_bytes=cfg.table_bytes, context_tokens=cfg.context_tokens,
        max_batch_per_gpu=cfg.max_batch_per_gpu, price_tier=cfg.price_tier)
    priced = price_placements(placement)
    own = priced[cfg.backing]
    row = {
        "run_id": cfg.run_id, "trace": cfg.trace, "policy": cfg.policy,
        "backing": cfg.backing, "hardware": hw.name, "model": model.name,
        "hbm_cache_bytes": float(cfg.hbm_cache_bytes), "capacity_rows": c.capacity_rows,
        "row_bytes": stream.row_bytes, "tokens": stream.tokens, "lookups": n,
        "hits": hits, "misses": misses, "hit_ratio": hit_ratio,
        "distinct_rows": int(stream.n_distinct),
        "hottest_1pct_share": c.hottest_1pct_share,
        "hottest_10pct_share": c.hottest_10pct_share,
        "hbm_bytes_per_token": hits * stream.row_bytes / tokens,
        "backing_bytes_per_token": misses * stream.row_bytes / tokens,
        "backing_read_bytes_per_token": misses * read_bytes / tokens,
        "tokens_per_s_per_gpu_overlapped": own["tokens_per_s_per_gpu_overlapped"],
        "tokens_per_s_per_gpu_sync": own["tokens_per_s_per_gpu_sync"],
        "tokens_per_usd_overlapped": own["tokens_per_usd_overlapped"],
        "tokens_per_usd_sync": own["tokens_per_usd_sync"],
        "tokens_per_usd_hbm": priced["hbm"]["tokens_per_usd_overlapped"],
        "config_json": json.dumps(asdict(cfg), sort_keys=True),
        "elapsed_s": c.load_s + c.replay_s,
    }
    if save:
        store.write_row("engram_runs", cfg.run_id, row, replace=True)
    out = dict(row)
    out["tokens_per_usd"] = own["tokens_per_usd_overlapped"]
    out["batch_per_gpu"] = own["batch_per_gpu"]
    out["batch_per_gpu_hbm"] = priced["hbm"]["batch_per_gpu"]
    out["load_s"] = c.load_s
    return out
