"""The prefix pool of the layout a plan runs: how many separate prefix caches a deployment
has and how many tokens each holds, from that layout's HBM (not one 8-GPU instance's).

Why per layout: GLM-5.2's 744 GB of FP8 weights over a TP4 MI355X instance leave each GPU
1,524,121 tokens of KV, over TP8 3,248,258; a plan that prices TP4 but replays a TP8 pool
overstates its hits. And with data-parallel attention every rank keeps its own requests' KV
and its own radix cache (SGLang: one scheduler and tree per DP rank; Dynamo's KV router and
SGLang's router address ``(worker, dp_rank)``), so a DPA deployment is ``ranks`` caches of
one GPU's pool each, not one pool.

The rule, per GPU of the instance that holds the prefix cache (``g`` GPUs):

    tokens = (HBM usable x mem_fraction - weights per GPU - Engram HBM per GPU)
             // KV bytes per token
    weights per GPU = dense / (1 with DPA, else g) + routed experts / g

(the serving model's per-GPU weights, :func:`toolkit.serving.model.max_batch`: attention and
dense layers are replicated on DPA ranks and tensor-sharded otherwise; experts are sharded;
``mem_fraction`` is the tier replay's, SGLang's ``mem_fraction_static``-like 0.9). The
instance that holds the prefix cache is the aggregated instance (``TP t``: ``g = t``), or
for a disaggregated layout its prefill instance (``g`` = prefill GPUs, DPA as
``cost compare``'s recipes build it): SGLang's PD decode side runs without a radix cache.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from toolkit.hardware import get_hardware
from toolkit.models import get_model
from toolkit.replay.tiers.config import DecodePool, ServiceAssumptions
from toolkit.serving.tier_service import kv_bytes_per_token
from toolkit.serving.tier_service import weights_per_gpu_bytes as _weights

_AGG = re.compile(r"^TP(\d+) EP(\d+)( DPA)?(\+MTP)?(?: conc (\d+))?$")
_DISAGG = re.compile(r"^disagg P(\d+)/D(\d+) decode TP(\d+) EP(\d+)( DPA)?(\+MTP)?"
                     r"(?: conc (\d+))?$")


class LayoutError(ValueError):
    """A layout text that :func:`parse_layout` does not know."""


@dataclass(frozen=True)
class Layout:
    """The parts of a serving layout that size its prefix pool (``cost compare``'s layout
    text, parsed)."""

    disagg: bool
    gpus: int  # GPUs of one deployment (prefill + decode when disaggregated)
    cache_gpus: int  # GPUs of the instance holding the prefix cache
    cache_dp_attention: bool  # its attention is data-parallel: one cache per GPU
    text: str


def parse_layout(text: str) -> Layout:
    """``cost compare``'s layout text (``TP4 EP1+MTP conc 2``, ``disagg P24/D16 decode TP16
    EP16 DPA+MTP conc 128``) as a :class:`Layout`.

    A disaggregated layout's prefill instance is its ``P`` GPUs with DPA (the recipes
    ``cost compare`` sweeps: ``prefill_tp = prefill_ep = P``, DPA on).

    Raises:
        LayoutError: a text of another shape.
    """
    t = text.strip()
    m = _AGG.match(t)
    if m:
        tp, ep = int(m[1]), int(m[2])
        g = max(tp, ep)
        return Layout(False, g, g, bool(m[3]), t)
    m = _DISAGG.match(t)
    if m:
        n_pre, n_dec = int(m[1]), int(m[2])
        return Layout(True, n_pre + n_dec, n_pre, True, t)
    raise LayoutError(f"layout {text!r}: not a cost compare layout (TPt EPe [DPA] or "
                      "disagg Pp/Dd decode TPt EPe [DPA])")


def decode_side(lay: Layout) -> tuple[int, bool, bool, bool]:
    """A disaggregated layout's decode pool: ``(GPUs, DP attention, expert-parallel, MTP)``
    (``disagg P8/D16 decode TP16 EP16 DPA+MTP`` -> ``(16, True, True, True)``).

    Raises:
        LayoutError: ``lay`` is aggregated.
    """
    m = _DISAGG.match(lay.text)
    if not m:
        raise LayoutError(f"layout {lay.text!r} is not disaggregated")
    return int(m[2]), bool(m[5]), int(m[4]) > 1, bool(m[6])


_SIDE = r"(tp|dp)([1-9][0-9]*)"
LAYOUT_RE = re.compile(rf"{_SIDE}(\+mtp)?")
DISAGG_RE = re.compile(rf"disagg:{_SIDE}/{_SIDE}(\+mtp)?")


@dataclass(frozen=True)
class ClusterLayout:
    """``--layout`` parsed: the instance (the prefill side when disaggregated) and the
    decode pool (None: aggregated)."""

    gpus: int
    dp_attention: bool
    mtp: bool
    decode: DecodePool | None = None
    expert_parallel: bool | None = None  # None: with DP attention

    @property
    def ranks(self) -> int:
        """Prefix caches per instance: one per DP-attention rank, else one."""
        return self.gpus if self.dp_attention else 1

    def assumptions(self, base: ServiceAssumptions) -> ServiceAssumptions:
        """``base`` timed as this instance (its GPUs, DP attention, expert parallelism, MTP)."""
        ep = self.dp_attention if self.expert_parallel is None else self.expert_parallel
        return replace(base, gpus_per_replica=self.gpus, dp_attention=self.dp_attention,
                       expert_parallel=ep, mtp=self.mtp)


def cluster_layout(layout: str) -> ClusterLayout:
    """``--layout``: ``tpN`` (N GPUs, tensor-parallel attention and MoE: one prefix cache, one
    GPU's free HBM, since every GPU holds every token's MLA row), ``dpN`` (N GPUs, DP
    attention and expert-parallel MoE: N prefix caches, one per rank), ``disagg:P/D`` with
    ``P`` and ``D`` each ``tpN`` or ``dpN`` (a prefill side holding the prefix caches and a
    decode pool), ``+mtp`` for multi-token prediction; or a ``cost compare`` layout text
    (``TP8 EP8 DPA+MTP``, ``disagg P8/D16 decode TP16 EP16 DPA``)."""
    text = layout.strip()
    low = text.lower().replace(" ", "")
    m = LAYOUT_RE.fullmatch(low)
    if m:
        return ClusterLayout(int(m[2]), m[1] == "dp", bool(m[3]))
    m = DISAGG_RE.fullmatch(low)
    if m:
        dec = DecodePool(gpus=int(m[4]), dp_attention=m[3] == "dp",
                         expert_parallel=m[3] == "dp", mtp=bool(m[5]))
        return ClusterLayout(int(m[2]), m[1] == "dp", False, dec)
    try:
        lay = parse_layout(text)
    except LayoutError:
        raise ValueError(f"--layout {layout!r}: expected tpN, dpN, disagg:P/D (P and D each "
                         "tpN or dpN, e.g. disagg:dp8/dp16), optionally +mtp, or a cost "
                         "compare layout text (e.g. 'TP8 EP8 DPA', 'disagg P8/D16 decode "
                         "TP16 EP16 DPA')") from None
    if not lay.disagg:
        ep = re.search(r"EP(\d+)", lay.text)
        return ClusterLayout(lay.cache_gpus, lay.cache_dp_attention, "+MTP" in lay.text,
                             expert_parallel=bool(ep) and int(ep[1]) > 1)
    g, dpa, ep_d, mtp = decode_side(lay)
    return ClusterLayout(lay.cache_gpus, lay.cache_dp_attention, False,
                         DecodePool(gpus=g, dp_attention=dpa, expert_parallel=ep_d, mtp=mtp),
                         expert_parallel=lay.cache_gpus > 1)


@dataclass(frozen=True)
class PrefixPool:
    """A deployment's prefix caches: ``ranks`` separate caches of ``tokens_per_rank`` each
    (one per DPA rank, or one per instance with tensor-parallel attention)."""

    layout: Layout
    ranks: int
    tokens_per_rank: int
    weights_per_gpu_bytes: float

    @property
    def total_tokens(self) -> int:
        return self.ranks * self.tokens_per_rank

    def users_per_rank(self, concurrency: float) -> int:
        """A deployment's users spread evenly over its caches (sessions stay on one rank, as
        a cache-aware router keeps them), at least one."""
        return max(1, round(concurrency / self.ranks))


def weights_per_gpu_bytes(model: str, precision: str, hardware: str, gpus: int,
                          dp_attention: bool) -> float:
    """One GPU's weights in a ``gpus``-GPU instance (the serving model's split,
    :func:`toolkit.serving.tier_service.weights_per_gpu_bytes`), by spec names."""
    return _weights(get_hardware(hardware), get_model(model), precision, gpus, dp_attention)


def prefix_pool(layout: str | Layout, hardware: str, model: str, *, precision: str = "fp8",
                kv_dtype: str = "fp8", mem_fraction: float = 0.9,
                engram_hbm_bytes: float = 0.0) -> PrefixPool:
    """The prefix pool of ``layout`` on ``hardware`` (module docstring: the rule).

    ``tokens_per_rank`` is 0 when the weights (and Engram rows) leave no KV room; the caller
    refuses such a plan.
    """
    lay = parse_layout(layout) if isinstance(layout, str) else layout
    spec = get_hardware(hardware)
    w = weights_per_gpu_bytes(model, precision, hardware, lay.cache_gpus,
                              lay.cache_dp_attention)
    free = spec.hbm_usable_bytes * mem_fraction - w - engram_hbm_bytes
    kvb = kv_bytes_per_token(get_model(model), kv_dtype)
    tokens = max(0, int(free // kvb))
    ranks = lay.cache_gpus if lay.cache_dp_attention else 1
    return PrefixPool(lay, ranks, tokens, w)


__all__ = ["ClusterLayout", "Layout", "LayoutError", "PrefixPool", "cluster_layout", "decode_side",
           "parse_layout", "prefix_pool",
           "weights_per_gpu_bytes"]
