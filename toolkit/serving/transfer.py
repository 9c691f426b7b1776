"""Host-to-device transfer time per mechanism: ``BW_eff(s) = s / (t_fixed + s / BW_peak)``.

Why per mechanism: a 656-1152 B KV row is far below the size where a DMA engine is
efficient, so the same bytes cost 100x more time through per-row copy calls than through
an SM gather kernel (per-call and per-descriptor costs: the hardware specs). The three
mechanisms:

* ``ce_call``: one cudaMemcpyAsync per contiguous run; ~2.3 µs fixed each.
* ``batch_descriptor``: one cuMemcpyBatchAsync descriptor per run; ~0.5 µs each.
* ``sm_kernel``: a gather kernel; throughput = CTAs x bytes in flight / round trip,
  capped by the link; one round trip of latency per call, independent of row size.

``concurrent=True`` uses the all-GPUs-loading figure (on GB200/GB300 the GPUs of a tray
share the Grace link: ~170 GB/s per GPU instead of ~200-211).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from toolkit.hardware import HardwareSpec

Mechanism = Literal["ce_call", "batch_descriptor", "sm_kernel"]
MECHANISMS: tuple[str, ...] = ("ce_call", "batch_descriptor", "sm_kernel")


def bw_eff(
    size_bytes: npt.ArrayLike, t_fixed_s: float, bw_peak_bytes_per_s: float
) -> np.ndarray | float:
    """Effective bandwidth of transfers of ``size_bytes`` each, one fixed cost per transfer."""
    s = np.asarray(size_bytes, dtype=np.float64)
    out = s / (t_fixed_s + s / bw_peak_bytes_per_s)
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True)
class TransferPath:
    """One mechanism on one host link.

    Attributes:
        mechanism: ce_call | batch_descriptor | sm_kernel.
        t_fixed_s: cost paid per run (DMA) or once per call (sm_kernel).
        bw_peak_bytes_per_s: asymptotic bandwidth of this mechanism.
        per_run: True if ``t_fixed_s`` is paid per contiguous run, False if per call.
    """

    mechanism: str
    t_fixed_s: float
    bw_peak_bytes_per_s: float
    per_run: bool

    def time_s(self, n_runs: npt.ArrayLike, run_bytes: float) -> np.ndarray | float:
        """Seconds to move ``n_runs`` contiguous runs of ``run_bytes`` each (0 runs: 0 s)."""
        n = np.asarray(n_runs, dtype=np.float64)
        fixed = n * self.t_fixed_s if self.per_run else np.where(n > 0, self.t_fixed_s, 0.0)
        out = fixed + n * run_bytes / self.bw_peak_bytes_per_s
        return float(out) if out.ndim == 0 else out

    def bw_eff(self, run_bytes: npt.ArrayLike, n_runs: int = 1) -> np.ndarray | float:
        """Effective bandwidth moving ``n_runs`` runs of ``run_bytes``."""
        s = np.asarray(run_bytes, dtype=np.float64)
        if self.per_run:
            return bw_eff(s, self.t_fixed_s, self.bw_peak_bytes_per_s)
        return bw_eff(s * n_runs, self.t_fixed_s, self.bw_peak_bytes_per_s)


def link_bandwidth_bytes_per_s(hw: HardwareSpec, concurrent: bool = False) -> float:
    """Large-transfer H2D per GPU: one GPU loading, or all GPUs of a node/tray at once."""
    return hw.h2d_concurrent_bytes_per_s if concurrent else hw.h2d_single_bytes_per_s


def sm_kernel_bandwidth_bytes_per_s(
    hw: HardwareSpec, ctas: int | None = None, concurrent: bool = False
) -> float:
    """Gather-kernel bandwidth: ``min(link, ctas x bytes_in_flight / round_trip)``.

    GB300, sglang PR #40278: 64 KB in flight / ~1.3 µs ≈ 48-50 GB/s per CTA.
    """
    n = hw.sm_kernel_ctas if ctas is None else ctas
    per_cta = hw.sm_kernel_bytes_in_flight_per_cta / hw.sm_kernel_rtt_s
    return min(link_bandwidth_bytes_per_s(hw, concurrent), n * per_cta)


def transfer_path(
    hw: HardwareSpec,
    mechanism: str = "sm_kernel",
    concurrent: bool = False,
    ctas: int | None = None,
) -> TransferPath:
    """The :class:`TransferPath` of ``mechanism`` on ``hw``'s host link."""
    link = link_bandwidth_bytes_per_s(hw, concurrent)
    if mechanism == "ce_call":
        return TransferPath(mechanism, hw.ce_call_fixed_s, link, per_run=True)
    if mechanism == "batch_descriptor":
        return TransferPath(mechanism, hw.batch_descriptor_fixed_s, link, per_run=True)
    if mechanism == "sm_kernel":
        bw = sm_kernel_bandwidth_bytes_per_s(hw, ctas, concurrent)
        return TransferPath(mechanism, hw.sm_kernel_rtt_s, bw, per_run=False)
    raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}; got {mechanism!r}")
