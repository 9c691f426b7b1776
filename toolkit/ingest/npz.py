"""Top-k selections as NumPy arrays (``.npz``).

Arrays: ``topk[steps, layers, k]`` (int, ``-1`` padding allowed), ``seq_len[steps]``;
optional ``request_id`` (an integer scalar for one request per file, or ``[steps]`` to hold
several) and ``step[steps]`` (default: 0, 1, ... within each request).
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, note
from toolkit.ingest.selections import (
    SelectionColumns,
    SelectionError,
    TraceMeta,
    as_int64,
    build_tables,
)

_NOT_NPZ = {b"\x93NUMPY": "a single .npy array, not an .npz archive (save with np.savez)",
            b"\x1f\x8b": "gzip-compressed, not an .npz archive (gunzip it first)"}


def _load(path: Path) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        head = f.read(6)
    if not head:
        raise TraceFormatError(path, None, None, "empty file; expected an .npz archive")
    for magic, what in _NOT_NPZ.items():
        if head.startswith(magic):
            raise TraceFormatError(path, None, None, what)
    if not head.startswith(b"PK"):
        raise TraceFormatError(path, None, None, "not an .npz archive (no zip header)")
    try:
        # our own handle: np.load leaks its file when the archive is truncated
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
        raise TraceFormatError(path, None, None,
                               f"not a readable .npz archive (truncated?): {e}") from None


def _int_array(arrays: dict[str, np.ndarray], name: str, path: Path,
               shape: tuple[int, ...]) -> np.ndarray:
    """``arrays[name]`` as int64 of ``shape``; floats, strings and wrong shapes refused."""
    a = arrays[name]
    if a.dtype.kind not in "iu" or a.shape != shape:
        want = f"int[{', '.join(map(str, shape))}]" if shape else "an integer scalar"
        raise TraceFormatError(path, None, name, f"expected {want}, got {a.dtype}{list(a.shape)}")
    try:
        return as_int64(a.reshape(-1), name).reshape(shape)
    except SelectionError as e:
        raise TraceFormatError(path, None, name, f"at index {e.row}: {e.message}") from None


def read(path: Path, trace: str, **options: object) -> dict[str, pa.Table]:
    arrays = _load(path)
    extra = sorted(set(arrays) - {"topk", "seq_len", "request_id", "step"})
    if extra:
        note(f"{path}: ignoring array(s) {', '.join(map(repr, extra))} (read: topk, seq_len, "
             "request_id, step)")
    for name in ("topk", "seq_len"):
        if name not in arrays:
            raise TraceFormatError(path, None, name, f"missing array; file has {sorted(arrays)}")
    topk = arrays["topk"]
    if topk.ndim != 3:
        raise TraceFormatError(path, None, "topk", f"expected int[steps, layers, k], got "
                               f"{topk.dtype}{list(topk.shape)}")
    steps, layers, k = topk.shape
    if 0 in topk.shape:
        raise TraceFormatError(path, None, "topk", f"no selections: shape {list(topk.shape)} "
                               "(steps, layers and k must all be >= 1)")
    topk = _int_array(arrays, "topk", path, (steps, layers, k))
    seq_len = _int_array(arrays, "seq_len", path, (steps,))
    if "request_id" in arrays:
        shape = () if arrays["request_id"].ndim == 0 else (steps,)
        rid = np.broadcast_to(_int_array(arrays, "request_id", path, shape), (steps,))
    else:
        rid = np.zeros(steps, dtype=np.int64)
    if "step" in arrays:
        step = _int_array(arrays, "step", path, (steps,))
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
        seq_len=np.repeat(seq_len, layers),
        offsets=np.arange(rows + 1, dtype=np.int64) * k,
        values=topk.reshape(-1),
    )

    def locate(e: SelectionError) -> TraceFormatError:
        if e.row < 0:
            return TraceFormatError(path, None, e.field, e.message)
        s, layer = divmod(e.row, layers)
        field = "topk" if e.field == "topk" else e.field
        return TraceFormatError(path, None, field, f"at step index {s}, layer {layer}: {e.message}")

    meta = TraceMeta(source=f"ingested from {path.name} (npz)", **options)  # type: ignore[arg-type]
    return build_tables(trace, data, meta, locate)


READER = Reader("npz", "selections", read, "NumPy topk[steps, layers, k] + seq_len[steps]")
