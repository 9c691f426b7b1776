"""SGLang's indexer top-k as a client saves it: ``meta_info.indexer_topk`` per response.

Why a reader of its own: SGLang (``--enable-return-indexer-topk``, per request
``"return_indexer_topk": true``; sgl-project/sglang PRs #24392 and #26684) returns the
indexer's selections of every forwarded token, so a user with a DeepSeek-V3.2 or GLM-5.x
server can capture real DSA selections without instrumenting the engine.

The encoding followed exactly (sgl-project/sglang ``python/sglang/srt/state_capturer/
indexer_topk.py`` @ ``02d3f4b2`` ``extract_indexer_topk_from_meta_info``, previously
``srt/layers/attention/indexer_topk_capturer.py``; ``state_capturer/base.py`` @ ``0564b521``
``BaseTopkCapturer.get_topk``; ``managers/tokenizer_manager.py``, which writes
``meta_info["indexer_topk"] = pybase64.b64encode(tensor.numpy().tobytes())``):

* the value is standard base64 of the raw bytes of a C-contiguous int32 tensor (little
  endian on every platform SGLang serves from) of shape
  ``(seqlen - 1, num_indexer_layers, index_topk)``, where ``seqlen = prompt_tokens +
  completion_tokens``: one row per token that went through a forward pass (the last
  generated token never does). The shape is not sent; it comes from the request's token
  counts and the model (``num_indexer_layers`` is ``num_hidden_layers`` for NSA models,
  every layer having a slot even when IndexShare reuses a top-k; ``index_topk`` from the
  config);
* row ``i`` is the query at position ``i``; its entries are request-local positions in
  ``[0, i]``, ``-1`` padding (fewer candidates than ``index_topk``);
* rows ``0 .. prompt_tokens - 1`` are the prompt (prefill) queries; row ``prompt_tokens +
  s`` is decode step ``s`` (``seq_len = prompt_tokens + s + 1``, as in every other
  selection trace).

Decode steps are stored as ``selections``; prefill queries go to ``selection_prefill``
(same validation, kept apart so replay sees decode only). Accepted layouts: a JSON file
holding one response or a list of them (``/generate`` with a batch returns a list), a JSONL
file of responses, or a directory of such files (``*.json``, ``*.jsonl``, sorted by name).
A response is either ``/generate``'s (``meta_info.indexer_topk``,
``meta_info.prompt_tokens``/``completion_tokens``, ``meta_info.id``) or OpenAI-compatible
(``sglext.indexer_topk`` or ``choices[0].meta_info.indexer_topk``, ``usage`` token counts,
``id``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from toolkit import schema
from toolkit.errors import TraceFormatError
from toolkit.ingest import Reader, found, note
from toolkit.ingest.selections import (
    SelectionColumns,
    SelectionError,
    TraceMeta,
    build_tables,
    validate,
)

#: Where SGLang's wire format is defined (cited by the docs and the ingest summary).
SOURCE = ("sgl-project/sglang state_capturer/indexer_topk.py@02d3f4b2 "
          "(extract_indexer_topk_from_meta_info), PRs #24392/#26684")
SUFFIXES = (".json", ".jsonl")


@dataclass(frozen=True)
class Response:
    """One response's capture, still encoded."""

    path: Path
    where: int  # 1-based line (JSONL) or position in the file's list (JSON)
    unit: str  # "line" or "request"
    request_id: str
    payload: str
    field: str  # where the payload was found, for errors
    prompt_tokens: int
    completion_tokens: int
    synthetic: bool  # the toolkit's own marker ``"synthetic": true`` (SGLang sends none)


@dataclass(frozen=True)
class CaptureSummary:
    """What an ingest found, for the CLI line (``toolkit ingest selections`` prints it)."""

    requests: int
    layers: int
    k: int
    prompt_positions: int
    decode_steps: int

    def text(self) -> str:
        return (f"found {self.requests} request(s), {self.layers} indexer layer(s), "
                f"k = {self.k}: {self.prompt_positions:,} prompt (prefill) position(s) -> "
                f"selection_prefill, {self.decode_steps:,} decode step(s) -> selections")


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not files:
        raise TraceFormatError(path, None, None, "directory holds no .json or .jsonl file of "
                               "SGLang responses")
    return files


def _documents(path: Path) -> Iterator[tuple[int, str, object]]:
    """``(where, unit, record)`` per response in one file: a JSON document (an object or a
    list of them) or JSON lines."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(path, None, None, f"not UTF-8 text: {e.reason}") from None
    if not text.strip():
        raise TraceFormatError(path, None, None, "empty file; expected SGLang responses")
    if path.suffix != ".jsonl":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            if e.msg != "Extra data":  # one object per line is JSONL whatever the suffix
                raise TraceFormatError(path, e.lineno, None, f"invalid JSON: {e.msg}") from None
        else:
            items = doc if isinstance(doc, list) else [doc]
            for i, rec in enumerate(items, start=1):
                yield i, "request", rec
            return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield lineno, "line", json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceFormatError(path, lineno, None, f"invalid JSON: {e.msg}") from None


def _count(value: object, path: Path, where: int, unit: str, field: str, rid: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceFormatError(path, where, field, f"request {rid}: expected a token count "
                               f"(integer >= 0), got {value!r}", unit=unit)
    return value


def _response(path: Path, where: int, unit: str, rec: object) -> Response:
    """Find the payload and token counts of a ``/generate`` or OpenAI-compatible response."""
    if not isinstance(rec, dict):
        raise TraceFormatError(path, where, None, "expected a JSON object (an SGLang "
                               f"response), got {type(rec).__name__}", unit=unit)
    meta = rec.get("meta_info")
    if isinstance(meta, dict):  # /generate
        rid = str(meta.get("id", rec.get("id", f"#{where}")))
        payload, field = meta.get("indexer_topk"), "meta_info.indexer_topk"
        counts = meta, "meta_info"
    else:  # OpenAI-compatible: response-level sglext, or the choice's meta_info
        rid = str(rec.get("id", f"#{where}"))
        choices = rec.get("choices") if isinstance(rec.get("choices"), list) else []
        if len(choices) > 1:
            raise TraceFormatError(path, where, "choices", f"request {rid}: {len(choices)} "
                                   "choices; send n = 1 (one capture per response)", unit=unit)
        ext = rec.get("sglext") if isinstance(rec.get("sglext"), dict) else {}
        cmeta = choices[0].get("meta_info") if choices and isinstance(choices[0], dict) \
            else None
        if "indexer_topk" in ext:
            payload, field = ext["indexer_topk"], "sglext.indexer_topk"
        elif isinstance(cmeta, dict):
            payload, field = cmeta.get("indexer_topk"), "choices[0].meta_info.indexer_topk"
        else:
            payload, field = None, "meta_info.indexer_topk"
        counts = (rec.get("usage"), "usage") if isinstance(rec.get("usage"), dict) else \
            (cmeta or {}, "choices[0].meta_info")
    if payload is None:
        raise TraceFormatError(
            path, where, field, f"request {rid}: no indexer top-k; start the server with "
            "--enable-return-indexer-topk and send \"return_indexer_topk\": true", unit=unit)
    if not isinstance(payload, str):
        raise TraceFormatError(path, where, field, f"request {rid}: expected a base64 string, "
                               f"got {type(payload).__name__}", unit=unit)
    holder, prefix = counts
    tokens = []
    for name in ("prompt_tokens", "completion_tokens"):
        if name not in holder:
            raise TraceFormatError(path, where, f"{prefix}.{name}", f"request {rid}: missing; "
                                   "the shape of the capture comes from the token counts",
                                   unit=unit)
        tokens.append(_count(holder[name], path, where, unit, f"{prefix}.{name}", rid))
    return Response(path, where, unit, rid, payload, field, tokens[0], tokens[1],
                    rec.get("synthetic") is True)


def decode(resp: Response, layers: int | None, k: int | None) -> np.ndarray:
    """The capture as int32 ``(prompt + completion - 1, layers, k)``; a missing ``layers``
    or ``k`` is derived from the other and the payload's size.

    Raises:
        TraceFormatError: not base64, not whole int32 values, or a size the shape cannot hold.
    """
    def bad(message: str) -> TraceFormatError:
        return TraceFormatError(resp.path, resp.where, resp.field,
                                f"request {resp.request_id}: {message}", unit=resp.unit)

    try:
        raw = base64.b64decode(resp.payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise bad(f"not base64: {e}") from None
    if len(raw) % 4:
        raise bad(f"{len(raw)} bytes is not a whole number of int32 values")
    flat = np.frombuffer(raw, dtype="<i4")
    rows = resp.prompt_tokens + resp.completion_tokens - 1
    if rows < 1:
        raise bad(f"prompt_tokens + completion_tokens = {rows + 1}: no token went through a "
                  "forward pass")
    if layers is None and k is None:
        raise bad("the capture's shape needs the model's indexer layers and top-k: pass "
                  "--model (a known spec), --indexer-layers or --k")
    per_row, rest = divmod(flat.size, rows)
    if rest == 0 and layers is None and per_row % k == 0:  # type: ignore[operator]
        layers = per_row // k  # type: ignore[operator]
    elif rest == 0 and k is None and per_row % layers == 0:  # type: ignore[operator]
        k = per_row // layers  # type: ignore[operator]
    if layers is None or k is None or flat.size != rows * layers * k:
        want = (f"({rows} rows = prompt_tokens + completion_tokens - 1) x {layers} layers x "
                f"{k} = {rows * layers * k:,}" if layers and k else f"a multiple of {rows} rows "
                f"(prompt_tokens + completion_tokens - 1) x {layers or k}")
        raise bad(f"{flat.size:,} int32 values, expected {want}; check --model, "
                  "--indexer-layers and --k against the server's config")
    if layers < 1 or k < 1:
        raise bad(f"empty capture: {layers} layers x k = {k}")
    return flat.reshape(rows, layers, k)


def _columns(arrays: list[np.ndarray], prompts: list[int], decode_part: bool
             ) -> tuple[SelectionColumns, list[tuple[int, int]]]:
    """Rows of one part (decode or prefill) of every request, layer-minor; also each row
    block's (request index, first query position) for error messages."""
    rid, step, seq, vals, blocks = [], [], [], [], []
    layers, k = arrays[0].shape[1:]
    for r, (a, p) in enumerate(zip(arrays, prompts, strict=True)):
        part = a[p:] if decode_part else a[:p]
        if not part.shape[0]:
            continue
        pos = np.arange(p if decode_part else 0, (p if decode_part else 0) + part.shape[0])
        rid.append(np.full(pos.size * layers, r, dtype=np.int64))
        step.append(np.repeat(pos - p if decode_part else pos, layers))
        seq.append(np.repeat(pos + 1, layers))
        vals.append(part.reshape(-1))
        blocks.append((r, pos.size * layers))
    n = sum(b for _, b in blocks)
    cat = (lambda xs: np.concatenate(xs).astype(np.int64)) if blocks else \
        (lambda xs: np.zeros(0, dtype=np.int64))
    cols = SelectionColumns(
        request_id=cat(rid), step=cat(step), layer=np.tile(np.arange(layers), n // layers)
        if n else np.zeros(0, dtype=np.int64), seq_len=cat(seq),
        offsets=np.arange(n + 1, dtype=np.int64) * k, values=cat(vals))
    return cols, blocks


def read(path: Path, trace: str, model: str = "unknown", k: int | None = None,
         score: str = "indexer", order: str | None = None, indexer_layers: int | None = None,
         prefill: bool = True, **_: object) -> dict[str, pa.Table]:
    """Decode every response, check every selection, then assemble the tables."""
    spec_name, layers = model, indexer_layers
    from toolkit.models import get_model

    try:
        spec = get_model(model)
    except LookupError:  # not a known spec: the flags (or the payload) give the shape
        spec = None
    if spec is not None:
        spec_name = spec.name
        layers = layers or spec.num_layers  # NSA: one indexer slot per transformer layer
        k = k or spec.index_topk
    responses = [_response(f, where, unit, rec) for f in _files(path)
                 for where, unit, rec in _documents(f)]
    if not responses:
        raise TraceFormatError(path, None, None, "no SGLang responses")
    ids: dict[str, int] = {}
    for resp in responses:
        if resp.request_id in ids:
            raise TraceFormatError(resp.path, resp.where, "id", f"request {resp.request_id} "
                                   "appears twice", unit=resp.unit)
        ids[resp.request_id] = len(ids)
    arrays = [decode(responses[0], layers, k)]
    layers, k = arrays[0].shape[1:]
    arrays += [decode(resp, layers, k) for resp in responses[1:]]
    prompts = [min(r.prompt_tokens, a.shape[0]) for r, a in zip(responses, arrays, strict=True)]

    def locator(blocks: list[tuple[int, int]], what: str):
        starts = np.cumsum([0] + [b for _, b in blocks])

        def locate(e: SelectionError) -> TraceFormatError:
            if e.row < 0:
                return TraceFormatError(path, None, e.field, e.message)
            b = int(np.searchsorted(starts, e.row, side="right")) - 1
            resp = responses[blocks[b][0]]
            row, layer = divmod(e.row - int(starts[b]), int(layers))
            query = row + (resp.prompt_tokens if what == "decode step" else 0)
            return TraceFormatError(
                resp.path, resp.where, resp.field,
                f"request {resp.request_id}, {what} {row} (query position {query}), "
                f"layer {layer}: {e.message}", unit=resp.unit)
        return locate

    dec, dec_blocks = _columns(arrays, prompts, decode_part=True)
    if dec.request_id.size == 0:
        raise TraceFormatError(path, None, "completion_tokens", "no decode steps: every request "
                               "generated at most one token (decode step s is row "
                               "prompt_tokens + s of the capture)")
    meta = TraceMeta(model=spec_name, k=int(k), score=score, order=order,
                     synthetic=all(r.synthetic for r in responses),
                     source=f"ingested from {path.name} (sglang-indexer-topk; {SOURCE})")
    tables = build_tables(trace, dec, meta, locator(dec_blocks, "decode step"),
                          external_ids=list(ids))
    # prompt_tokens is the response's own count, not inferred from the first step
    req = tables["selection_requests"]
    have = req.column("request_id").to_numpy()
    tables["selection_requests"] = req.set_column(
        2, "prompt_tokens", pa.array([responses[i].prompt_tokens for i in have], pa.int32()))
    pre, pre_blocks = _columns(arrays, prompts, decode_part=False)
    n_pre = 0
    if prefill and pre.request_id.size:
        try:
            offsets, values, _k = validate(pre, int(k))
        except SelectionError as e:
            raise locator(pre_blocks, "prompt position")(e) from None
        n_pre = pre.request_id.size // int(layers)
        tables["selection_prefill"] = pa.table({
            "trace": pa.array([trace] * pre.request_id.size, pa.string()),
            "request_id": pa.array(pre.request_id, pa.int64()),
            "position": pa.array(pre.step).cast(pa.int32()),
            "layer": pa.array(pre.layer).cast(pa.int16()),
            "topk": pa.ListArray.from_arrays(pa.array(offsets).cast(pa.int32()),
                                             pa.array(values).cast(pa.int32())),
        }, schema=schema.SELECTION_PREFILL)
    else:
        tables["selection_prefill"] = schema.SELECTION_PREFILL.empty_table()
        if pre.request_id.size:
            note(f"{path}: prompt (prefill) positions not kept (--no-prefill)")
    found(CaptureSummary(len(responses), int(layers), int(k), n_pre if prefill else 0,
                        dec.request_id.size // int(layers)).text())
    return tables


READER = Reader("sglang-indexer-topk", "selections", read,
                "SGLang responses with meta_info.indexer_topk (JSON, JSONL or a directory)",
                directory=None)
