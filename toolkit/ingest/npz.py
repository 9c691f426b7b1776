"""Top-k selections as NumPy arrays (``.npz``).

Arrays: ``topk[steps, layers, k]`` (int, ``-1`` padding allowed), ``seq_len[steps]``;
optional ``request_id`` (a scalar for one request per file, or ``[steps]`` to hold
several) and ``step[steps]`` (default: 0, 1, ... within each request).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader
from toolkit.ingest.selections import SelectionColumns, SelectionError, TraceMeta, build_tables


def _load(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise TraceFormatError(path, None, None, f"not a readable .npz file: {e}") from None


def read(path: Path, trace: str, **options: object) -> dict[str, pa.Table]:
    arrays = _load(path)
    for name in ("topk", "seq_len"):
        if name not in arrays:
            raise TraceFormatError(path, None, name, f"missing array; file has {sorted(arrays)}")
    topk, seq_len = arrays["topk"], arrays["seq_len"]
    if topk.ndim != 3 or topk.dtype.kind not in "iu":
        raise TraceFormatError(path, None, "topk", f"expected int[steps, layers, k], got "
                               f"{topk.dtype}{list(topk.shape)}")
    steps, layers, k = topk.shape
    if seq_len.shape != (steps,) or seq_len.dtype.kind not in "iu":
        raise TraceFormatError(path, None, "seq_len", f"expected int[{steps}], got "
                               f"{seq_len.dtype}{list(seq_len.shape)}")
    rid = np.broadcast_to(np.asarray(arrays.get("request_id", 0)), (steps,)).astype(np.int64)
    if "step" in arrays:
        step = np.asarray(arrays["step"]).astype(np.int64)
        if step.shape != (steps,):
            raise TraceFormatError(
                path, None, "step", f"expected [{steps}], got {list(step.shape)}"
            )
    else:  # running index within each request, in file order
        step = np.zeros(steps, dtype=np.int64)
        for r in np.unique(rid):
            m = rid == r
            step[m] = np.arange(int(m.sum()))
    rows = steps * layers
    data = SelectionColumns(
        request_id=np.repeat(rid, layers),
        step=np.repeat(step, layers),
        layer=np.tile(np.arange(layers, dtype=np.int64), steps),
        seq_len=np.repeat(seq_len.astype(np.int64), layers),
        offsets=np.arange(rows + 1, dtype=np.int64) * k,
        values=topk.reshape(-1).astype(np.int64),
    )

    def locate(e: SelectionError) -> TraceFormatError:
        s, layer = divmod(e.row, layers)
        field = "topk" if e.field == "topk" else e.field
        return TraceFormatError(path, None, field, f"at step index {s}, layer {layer}: {e.message}")

    meta = TraceMeta(source=f"ingested from {path.name} (npz)", **options)  # type: ignore[arg-type]
    return build_tables(trace, data, meta, locate)


READER = Reader("npz", "selections", read, "NumPy topk[steps, layers, k] + seq_len[steps]")
