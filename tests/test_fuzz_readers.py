"""Fuzz suite (issue 10, point 6): hypothesis mutations of valid files for every reader.

Each property builds a valid file, mutates it (truncation, byte flips and insertions,
type swaps, boundary integers, other encodings) and ingests it into a store that already
holds data. The rule checked is the project's: the ingest either lands every value exactly
as given or raises one TraceFormatError line naming the file (and the line/row and field
where there is one), and the store stays byte-identical. For the JSON formats an
independent validator written from the format descriptions also decides whether the file
is valid, and the reader must agree with it both ways. Crash windows and concurrent
writers are covered in tests/test_store_safety.py.

Examples are derandomized so CI is repeatable; ``FUZZ_EXAMPLES`` scales them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import toolkit
from tests.budget import examples
from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file

pytestmark = pytest.mark.slow  # every test here draws EXAMPLES
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", str(examples(60))))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
INT64 = (-(1 << 63), (1 << 63) - 1)
BOUNDARY = [0, 1, -1, 2**15 - 2, 2**15 - 1, 2**15, 2**31 - 1, 2**31, 2**32, 2**53 + 1,
            2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**400]
NASTY = st.one_of(
    st.sampled_from(BOUNDARY), st.none(), st.booleans(), st.text(max_size=4),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1.5, 512.0, -0.0]),
    st.lists(st.integers(-2, 5), max_size=3), st.just({}),
)

SCALAR = st.one_of(st.sampled_from([b for b in BOUNDARY if INT64[0] <= b <= INT64[1]]),
                   st.none(), st.booleans(), st.text(max_size=4), st.floats(),
                   st.sampled_from(["score", "position"]))


class Lab:
    """One store for a whole property: snapshot, ingest, compare, clean up."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fuzz-"))
        self.store = toolkit.open_store(self.dir / "store", create=True)
        seed = self.dir / "seed.jsonl"
        seed.write_text(json.dumps({"timestamp": 0, "input_length": 5, "output_length": 1,
                                    "hash_ids": [1]}) + "\n")
        ingest_file(self.store, "mooncake", seed, "kept")
        self.n = 0

    def snapshot(self) -> dict[str, bytes]:
        root = self.store.root
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file()}

    def ingest(self, fmt: str, path: Path, **options: object) -> dict[str, pa.Table] | None:
        """The stored tables, or None when refused (after checking how it was refused)."""
        before = self.snapshot()
        self.n += 1
        name = f"fz{self.n}"
        try:
            res = ingest_file(self.store, fmt, path, name, **options)
        except TraceFormatError as e:
            msg = str(e)
            assert msg.startswith(str(e.path)) and str(path) in e.path, msg
            assert "\n" not in msg and e.message
            assert self.snapshot() == before, f"store changed by a refused ingest: {msg}"
            event(f"refused ({e.field or 'file'})")
            return None
        event("accepted")
        tables = {t: self.store.read(t, name) for t in self.store.tables()
                  if name in self.store.keys(t)}
        assert res.table in tables
        for t in tables:
            self.store.delete(t, name)
        return tables

    def close(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def lab():
    lab = Lab()
    yield lab
    lab.close()


# -- byte-level mutations shared by the text formats ----------------------------------
@st.composite
def mutate_bytes(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["none", "truncate", "flip", "insert", "bom", "utf16",
                                 "latin1", "crlf"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "flip" and data:
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    if kind == "insert":
        i = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\n", b",", b'"', b"\xe2\x82",
                                     b"\xef\xbb\xbf", b"NaN", b"1_0", b"\xd9\xa1"]))
        return data[:i] + junk + data[i:]
    if kind == "bom":
        return b"\xef\xbb\xbf" + data
    if kind == "utf16":
        return data.decode("utf-8", "replace").encode("utf-16")
    if kind == "latin1":
        return data.replace(b"}", ', "note": "caf\xe9"}'.encode("latin-1"), 1) if b"}" in data \
            else data + "\xe9".encode("latin-1")
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n")
    return data


# -- Mooncake: independent validator ------------------------------------------------
def _count_ok(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if isinstance(v, float) and not v.is_integer():
        return False
    return 0 <= v <= INT64[1]


def _finite(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def _json_lines(data: bytes) -> list[dict] | None:
    recs = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except ValueError:
            return None
        if not isinstance(rec, dict):
            return None
        recs.append(rec)
    return recs


def mooncake_expected(data: bytes) -> list[tuple] | None:
    """Rows (arrival_s, input, output, hashes) the format description implies, or None."""
    recs = _json_lines(data)
    if not recs:
        return None
    prev = -math.inf
    for r in recs:
        if not all(f in r for f in ("timestamp", "input_length", "output_length", "hash_ids")):
            return None
        if not _finite(r["timestamp"]) or float(r["timestamp"]) < prev:
            return None
        prev = float(r["timestamp"])
        if not (_count_ok(r["input_length"]) and _count_ok(r["output_length"])):
            return None
        h = r["hash_ids"]
        if not isinstance(h, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                          or not INT64[0] <= x <= INT64[1] for x in h):
            return None
        if len(h) != math.ceil(int(r["input_length"]) / 512):  # issue 14: strict geometry
            return None
    t0 = float(recs[0]["timestamp"])
    return [((float(r["timestamp"]) - t0) / 1000.0, int(r["input_length"]),
             int(r["output_length"]), r["hash_ids"]) for r in recs]


@st.composite
def mooncake_record(draw) -> dict:
    """A valid record: ceil(input_length / 512) ids; sometimes one id too many or few."""
    inp = draw(st.integers(0, 4 * 512))
    n = -(-inp // 512) + draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
    return {"timestamp": draw(st.integers(0, 10**6)), "input_length": inp,
            "output_length": draw(st.integers(0, 10**3)),
            "hash_ids": draw(st.lists(st.integers(INT64[0], INT64[1]), min_size=max(n, 0),
                                      max_size=max(n, 0)))}


@st.composite
def mooncake_file(draw) -> bytes:
    recs = draw(st.lists(mooncake_record(), min_size=1, max_size=5))
    recs.sort(key=lambda r: r["timestamp"])
    if draw(st.booleans()):  # a type swap, boundary value or missing field in one record
        r = draw(st.sampled_from(recs))
        field = draw(st.sampled_from(sorted(r)))
        if draw(st.integers(0, 5)) == 0:
            del r[field]
        else:
            r[field] = draw(NASTY)
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return draw(mutate_bytes(data))


@FUZZ
@given(data=mooncake_file())
def test_mooncake_exact_or_refused(lab, data):
    p = lab.dir / "m.jsonl"
    p.write_bytes(data)
    got = lab.ingest("mooncake", p)
    want = mooncake_expected(data)
    assert (got is None) == (want is None), (data[:200], want)
    if got is not None:
        t = got["requests"]
        rows = list(zip(*(t.column(c).to_pylist() for c in
                          ("arrival_s", "input_tokens", "output_tokens", "block_hashes")),
                        strict=True))
        assert rows == want


# -- DSA JSONL: independent validator -----------------------------------------------
def dsa_expected(data: bytes, k: int | None = None) -> list[tuple] | None:
    """Sorted rows (request, step, layer, seq_len, positions) or None if invalid."""
    recs = _json_lines(data)
    if recs is None:
        return None
    ids: dict[object, int] = {}
    rows = []
    for r in recs:
        if r.get("event") != "dsa_topk":
            continue
        f = ("request_id", "layer_id", "step_idx", "seq_len_current", "selected_token_pos")
        if not all(x in r for x in f):
            return None
        rid = r["request_id"]
        if isinstance(rid, bool) or not isinstance(rid, int | str):
            return None
        if not all(_count_ok(r[x]) for x in f[1:4]):
            return None
        pos = r["selected_token_pos"]
        if not isinstance(pos, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                            or not INT64[0] <= x <= INT64[1] for x in pos):
            return None
        rows.append((ids.setdefault(rid, len(ids)), int(r["step_idx"]), int(r["layer_id"]),
                     int(r["seq_len_current"]), pos))
    if not rows:
        return None
    last: dict[tuple[int, int], int] = {}
    out = []
    for rid, step, layer, seq_len, pos in rows:
        if not (1 <= seq_len <= 2**31 - 1 and step <= 2**31 - 1 and layer <= 2**15 - 2):
            return None
        if any(p < -1 or p >= seq_len for p in pos):
            return None
        kept = [p for p in pos if p != -1]
        if len(set(kept)) != len(kept):
            return None
        if (rid, layer) in last and step <= last[(rid, layer)]:
            return None
        last[(rid, layer)] = step
        out.append((rid, step, layer, seq_len, kept))
    k_eff = max(len(r[4]) for r in out) if k is None else k
    if k_eff == 0 or any(len(r[4]) > k_eff for r in out):
        return None
    return sorted(out)


@st.composite
def dsa_file(draw) -> bytes:
    n_req, n_layers, n_steps = draw(st.integers(1, 2)), draw(st.integers(1, 2)), \
        draw(st.integers(1, 3))
    prompt = draw(st.integers(1, 6))
    names = [draw(st.sampled_from([r, f"req-{r}"])) for r in range(n_req)]
    events = []
    for s in range(n_steps):
        for r in range(n_req):
            for la in range(n_layers):
                seq = prompt + s + 1
                pos = draw(st.lists(st.integers(0, seq - 1), min_size=1, max_size=3,
                                    unique=True))
                events.append({"event": "dsa_topk", "request_id": names[r], "layer_id": la,
                               "step_idx": s, "seq_len_current": seq,
                               "selected_token_pos": pos + [-1] * draw(st.integers(0, 1))})
    if draw(st.booleans()):
        e = draw(st.sampled_from(events))
        field = draw(st.sampled_from(sorted(e)))
        if draw(st.integers(0, 6)) == 0:
            del e[field]
        elif field == "selected_token_pos" and draw(st.booleans()):
            e[field] = e[field] + [draw(NASTY)]
        else:
            e[field] = draw(NASTY)
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    return draw(mutate_bytes(data))


@FUZZ
@given(data=dsa_file())
def test_dsa_jsonl_exact_or_refused(lab, data):
    p = lab.dir / "d.jsonl"
    p.write_bytes(data)
    got = lab.ingest("dsa-jsonl", p)
    want = dsa_expected(data)
    assert (got is None) == (want is None), (data[:300], want)
    if got is not None:
        t = got["selections"]
        rows = sorted(zip(*(t.column(c).to_pylist() for c in
                            ("request_id", "step", "layer", "seq_len", "topk")), strict=True))
        assert rows == want


# -- Azure CSV ------------------------------------------------------------------------
@st.composite
def azure_file(draw) -> bytes:
    n = draw(st.integers(1, 5))
    rows = [["TIMESTAMP", "ContextTokens", "GeneratedTokens"]]
    for i in range(n):
        rows.append([f"2023-11-16 18:17:{i:02d}.{draw(st.integers(0, 9999999)):07d}",
                     str(draw(st.integers(0, 10**6))), str(draw(st.integers(0, 10**4)))])
    if draw(st.booleans()):
        r, c = draw(st.integers(1, n)), draw(st.integers(0, 2))
        rows[r][c] = draw(st.one_of(st.sampled_from(
            ["1_000", "+5", "-1", " 7 ", "\u0661\u0662", "\uff15", "1e3", "5.0", "", "0x10",
             str(2**63), str(2**63 - 1), "9" * 400, "2023-11-16 18:17:00Z",
             "2023-02-30 00:00:00", "\uff12023-11-16 18:17:00"]), st.text(max_size=5)))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return draw(mutate_bytes(buf.getvalue().encode("utf-8")))


@FUZZ
@given(data=azure_file())
def test_azure_exact_or_refused(lab, data):
    """Accepted: the token counts are exactly the file's ASCII-digit integers."""
    p = lab.dir / "a.csv"
    p.write_bytes(data)
    got = lab.ingest("azure", p)
    if got is None:
        return
    text = data.decode("utf-8").removeprefix("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    head = [h.strip() for h in rows[0]]
    ci, gi = head.index("ContextTokens"), head.index("GeneratedTokens")
    for r in rows[1:]:
        for i in (ci, gi):
            assert r[i].strip().isascii() and r[i].strip().isdigit(), r
    t = got["requests"]
    assert t.column("input_tokens").to_pylist() == [int(r[ci]) for r in rows[1:]]
    assert t.column("output_tokens").to_pylist() == [int(r[gi]) for r in rows[1:]]
    arrival = t.column("arrival_s").to_pylist()
    assert arrival[0] == 0.0 and arrival == sorted(arrival)


# -- NumPy .npz -------------------------------------------------------------------------
DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64, np.float64,
          np.bool_]


@st.composite
def npz_arrays(draw) -> dict[str, np.ndarray]:
    dims = [draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 3))]
    if draw(st.integers(0, 7)) == 0:  # now and then an empty dimension
        dims[draw(st.integers(0, 2))] = 0
    steps, layers, k = dims
    seq = np.arange(steps, dtype=np.int64) + draw(st.integers(1, 5)) + k
    topk = np.zeros((steps, layers, k), dtype=np.int64)
    for s in range(steps):
        for la in range(layers):
            topk[s, la] = np.random.default_rng(draw(st.integers(0, 99))).permutation(
                int(seq[s]))[:k]
    arrays = {"topk": topk, "seq_len": seq}
    if draw(st.booleans()):
        arrays["request_id"] = np.array(draw(st.integers(0, 3)))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        name = draw(st.sampled_from(["topk", "seq_len", "request_id", "step"]))
        a = arrays.get(name, np.zeros(steps, dtype=np.int64))
        how = draw(st.sampled_from(["dtype", "value", "shape", "strings"]))
        if how == "dtype":
            a = a.astype(draw(st.sampled_from(DTYPES)))
        elif how == "value" and a.size and a.dtype.kind in "iu":
            vals = [int(x) for x in a.reshape(-1)]
            v = draw(st.sampled_from([b for b in BOUNDARY if INT64[0] <= b <= 2**64 - 1]))
            vals[draw(st.integers(0, len(vals) - 1))] = v
            if v > INT64[1] and min(vals) < 0:
                continue
            a = np.array(vals, dtype=np.uint64 if v > INT64[1] else np.int64).reshape(a.shape)
        elif how == "shape":
            a = a.reshape(-1)[: max(a.size - 1, 0)]
        elif how == "strings":
            a = a.astype(str)
        arrays[name] = a
    return arrays


@FUZZ
@given(arrays=npz_arrays(), cut=st.one_of(st.none(), st.floats(0, 1)))
def test_npz_exact_or_refused(lab, arrays, cut):
    p = lab.dir / "x.npz"
    np.savez(p, **arrays)
    if cut is not None:
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * cut)])
    got = lab.ingest("npz", p)
    if got is None:
        return
    assert cut is None or cut > 0.99
    topk, seq = arrays["topk"], arrays["seq_len"]
    steps, layers, _ = topk.shape
    t = got["selections"]
    assert t.num_rows == steps * layers
    rows = sorted(zip(*(t.column(c).to_pylist() for c in ("step", "layer", "seq_len",
                                                          "topk")), strict=True))
    step = arrays.get("step", np.arange(steps))
    want = sorted((int(step[s]), la, int(seq[s]), [int(x) for x in topk[s, la] if x != -1])
                  for s in range(steps) for la in range(layers))
    assert rows == want
    rid = int(arrays["request_id"]) if "request_id" in arrays else 0
    assert set(t.column("request_id").to_pylist()) == {rid}


# -- Parquet (and the bundle built from it) -------------------------------------------
INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(),
             pa.uint64(), pa.float64(), pa.string()]


@st.composite
def selection_table(draw) -> pa.Table:
    n = draw(st.integers(0, 4))
    seq = [draw(st.integers(3, 8)) for _ in range(n)]
    cols = {"request_id": list(range(n)), "step": [0] * n, "layer": [0] * n, "seq_len": seq,
            "topk": [sorted(draw(st.sets(st.integers(0, s - 1), min_size=1, max_size=3)))
                     for s in seq]}
    types = {c: pa.int64() for c in ("request_id", "step", "layer", "seq_len")}
    topk_type = pa.list_(pa.int32())
    if n and draw(st.booleans()):
        c = draw(st.sampled_from(sorted(cols)))
        i = draw(st.integers(0, n - 1))
        how = draw(st.sampled_from(["value", "null", "type"]))
        if c == "topk":
            if how == "value":
                cols[c][i] = cols[c][i] + [draw(st.sampled_from([-1, -2, 2**31 - 1, 2**63 - 1,
                                                                 cols[c][i][0]]))]
                topk_type = pa.list_(pa.int64())
            elif how == "null":
                cols[c][i] = draw(st.sampled_from([None, [None], cols[c][i] + [None]]))
            else:
                topk_type = pa.list_(draw(st.sampled_from([pa.uint64(), pa.float64(),
                                                           pa.int8()])))
        elif how == "value":
            cols[c][i] = draw(st.sampled_from([b for b in BOUNDARY if 0 <= b <= INT64[1]]))
        elif how == "null":
            cols[c][i] = None
        else:
            types[c] = draw(st.sampled_from(INT_TYPES))
    arrays = {}
    for c, v in cols.items():
        t = topk_type if c == "topk" else types[c]
        try:
            arrays[c] = pa.array(v, pa.int64() if c != "topk" else pa.list_(pa.int64())).cast(
                t, safe=False) if c != "topk" or t != topk_type else pa.array(v, t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OverflowError):
            arrays[c] = pa.array(v)
    return pa.table(arrays)


def _landed_exactly(table: pa.Table, got: dict[str, pa.Table]) -> None:
    t = got["selections"]
    want = sorted(zip(*(table.column(c).to_pylist() for c in ("request_id", "step", "layer",
                                                              "seq_len")),
                      ([x for x in lst if x != -1] for lst in table.column("topk").to_pylist()),
                      strict=True))
    rows = sorted(zip(*(t.column(c).to_pylist() for c in ("request_id", "step", "layer",
                                                          "seq_len", "topk")), strict=True))
    assert rows == [tuple(r) for r in want]


@FUZZ
@given(table=selection_table(), cut=st.one_of(st.none(), st.floats(0, 1)))
def test_parquet_exact_or_refused(lab, table, cut):
    p = lab.dir / "s.parquet"
    pq.write_table(table, p)
    if cut is not None:
        p.write_bytes(p.read_bytes()[: int(p.stat().st_size * cut)])
    got = lab.ingest("parquet", p)
    if got is not None:
        _landed_exactly(table, got)


@FUZZ
@given(table=selection_table(), meta=st.fixed_dictionaries({c: SCALAR for c in
                                                            ("k", "order", "model",
                                                             "synthetic")}),
    swap=st.sets(st.sampled_from(["k", "order", "model", "synthetic"])),
    prompt=st.sampled_from([0, 3, 2**31 - 1, 2**31, -1, None]))
def test_bundle_exact_or_refused(lab, table, meta, swap, prompt):
    d = lab.dir / "bundle"
    d.mkdir(exist_ok=True)
    n = table.num_rows
    pq.write_table(table.append_column("trace", pa.array(["t"] * n, pa.string())),
                   d / "selections.parquet")
    good = {"trace": "t", "model": "m", "k": 3, "score": "s", "order": "position",
            "synthetic": False, "source": "x"}
    row = good | {c: meta[c] for c in swap}
    try:
        traces = pa.Table.from_pylist([row])
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        traces = pa.Table.from_pylist([good])
    pq.write_table(traces, d / "selection_traces.parquet")
    ids = table.column("request_id").to_pylist()
    try:
        req = pa.table({"trace": ["t"] * n, "request_id": ids, "prompt_tokens": [prompt] * n})
    except (pa.ArrowInvalid, OverflowError):
        req = pa.table({"trace": ["t"] * n, "request_id": ids, "prompt_tokens": [3] * n})
    pq.write_table(req, d / "selection_requests.parquet")
    got = lab.ingest("bundle", d)
    if got is not None:
        _landed_exactly(table, got)
        m = got["selection_traces"].to_pylist()[0]
        written = traces.to_pylist()[0]
        assert (m["k"], m["order"], m["model"], m["synthetic"]) == (
            written["k"], written["order"], written["model"], written["synthetic"])
        assert got["selection_requests"].column("prompt_tokens").to_pylist() == \
            req.column("prompt_tokens").to_pylist()


# -- Qwen-Bailian (issue 14): independent validator ------------------------------------
BAILIAN_FIELDS = ("chat_id", "parent_chat_id", "timestamp", "input_length", "output_length",
                  "type", "turn", "hash_ids")


def _int_ok(v: object, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and lo <= v <= INT64[1]


def bailian_expected(data: bytes) -> list[tuple] | None:
    """Rows (arrival_s, input, output, hashes, session, turn) the format implies, or None."""
    recs = _json_lines(data)
    if not recs:
        return None
    prev = -math.inf
    root: dict[int, int] = {}
    rows = []
    for r in recs:
        if not all(f in r for f in BAILIAN_FIELDS):
            return None
        chat, parent = r["chat_id"], r["parent_chat_id"]
        if not _int_ok(chat, 0) or chat in root or not _int_ok(parent, -1) or parent == chat:
            return None
        if not _finite(r["timestamp"]) or float(r["timestamp"]) < prev:
            return None
        prev = float(r["timestamp"])
        if not all(_count_ok(r[f]) for f in ("input_length", "output_length", "turn")):
            return None
        if not isinstance(r["type"], str) or int(r["turn"]) > 2**31 - 1:
            return None
        h = r["hash_ids"]
        if not isinstance(h, list) or any(isinstance(x, bool) or not isinstance(x, int)
                                          or not INT64[0] <= x <= INT64[1] for x in h):
            return None
        n = int(r["input_length"])
        if not n // 16 <= len(h) <= math.ceil(n / 16):
            return None
        root[chat] = chat if parent == -1 else root.get(parent, parent)
        rows.append((float(r["timestamp"]), n, int(r["output_length"]), h, root[chat],
                     int(r["turn"])))
    t0 = rows[0][0]
    return [(t - t0, *rest) for t, *rest in rows]


@st.composite
def bailian_file(draw) -> bytes:
    n = draw(st.integers(1, 5))
    recs, t = [], 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.001, 1.386, 7.5]))
        inp = draw(st.integers(0, 80))
        k = draw(st.sampled_from([inp // 16, -(-inp // 16), -(-inp // 16), -(-inp // 16) + 1]))
        recs.append({"chat_id": 10 + i,
                     "parent_chat_id": draw(st.sampled_from([-1, 9 + i, 3, -1])) if i else -1,
                     "timestamp": round(t, 3), "input_length": inp,
                     "output_length": draw(st.integers(0, 50)),
                     "type": draw(st.sampled_from(["text", "search", "image", "file"])),
                     "turn": draw(st.integers(1, 4)),
                     "hash_ids": draw(st.lists(st.integers(0, 20), min_size=k, max_size=k))})
    if draw(st.booleans()):
        r = draw(st.sampled_from(recs))
        field = draw(st.sampled_from(sorted(r)))
        if draw(st.integers(0, 5)) == 0:
            del r[field]
        else:
            r[field] = draw(NASTY)
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    return draw(mutate_bytes(data))


@FUZZ
@given(data=bailian_file())
def test_bailian_exact_or_refused(lab, data):
    p = lab.dir / "b.jsonl"
    p.write_bytes(data)
    got = lab.ingest("bailian", p)
    want = bailian_expected(data)
    assert (got is None) == (want is None), (data[:300], want)
    if got is not None:
        t = got["requests"]
        rows = list(zip(*(t.column(c).to_pylist() for c in
                          ("arrival_s", "input_tokens", "output_tokens", "block_hashes",
                           "session_id", "turn")), strict=True))
        assert rows == want
        assert got["request_labels"].num_rows == t.num_rows


# -- BurstGPT (issue 14) ----------------------------------------------------------------
@st.composite
def burstgpt_file(draw) -> bytes:
    n = draw(st.integers(1, 5))
    rows = [["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
             "Log Type"]]
    t = 0
    for _ in range(n):
        t += draw(st.integers(0, 90))
        req, resp = draw(st.integers(0, 5000)), draw(st.integers(0, 500))
        rows.append([str(t), draw(st.sampled_from(["ChatGPT", "GPT-4"])), str(req), str(resp),
                     str(req + resp), draw(st.sampled_from(["Conversation log", "API log"]))])
    if draw(st.booleans()):
        r, c = draw(st.integers(1, n)), draw(st.integers(0, 5))
        rows[r][c] = draw(st.one_of(st.sampled_from(
            ["1_000", "+5", "-1", " 7 ", "\u0661\u0662", "1e3", "5.0", "", "0x10", "nan",
             str(2**63), str(2**63 - 1), "9" * 400]), st.text(max_size=5)))
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return draw(mutate_bytes(buf.getvalue().encode("utf-8")))


@FUZZ
@given(data=burstgpt_file(), model=st.sampled_from([None, "GPT-4"]))
def test_burstgpt_exact_or_refused(lab, data, model):
    """Accepted: counts are the file's ASCII digits, Total = Request + Response, labels and
    request ids line up with the kept rows."""
    p = lab.dir / "g.csv"
    p.write_bytes(data)
    got = lab.ingest("burstgpt", p, model=model)
    if got is None:
        return
    text = data.decode("utf-8").removeprefix("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    head = [h.strip() for h in rows[0]]
    ix = {c: head.index(c) for c in ("Timestamp", "Model", "Request tokens",
                                     "Response tokens", "Total tokens")}
    kept = [(i, r) for i, r in enumerate(rows[1:]) if model is None
            or r[ix["Model"]].strip() == model]
    for _, r in kept:
        for c in ("Request tokens", "Response tokens", "Total tokens"):
            assert r[ix[c]].strip().isascii() and r[ix[c]].strip().isdigit(), r
        assert int(r[ix["Total tokens"]]) == int(r[ix["Request tokens"]]) + \
            int(r[ix["Response tokens"]])
    t = got["requests"]
    assert t.column("request_id").to_pylist() == [i for i, _ in kept]
    assert t.column("input_tokens").to_pylist() == [int(r[ix["Request tokens"]])
                                                    for _, r in kept]
    assert t.column("output_tokens").to_pylist() == [int(r[ix["Response tokens"]])
                                                     for _, r in kept]
    ts = [float(r[ix["Timestamp"]]) for _, r in kept]
    assert t.column("arrival_s").to_pylist() == [x - ts[0] for x in ts]
    assert got["request_labels"].column("model").to_pylist() == \
        [r[ix["Model"]].strip() for _, r in kept]


# -- Agentic sessions (issue 14) --------------------------------------------------------
@st.composite
def agentic_file(draw) -> bytes:
    sessions = []
    for s in range(draw(st.integers(1, 3))):
        reqs = []
        for i in range(draw(st.integers(1, 3))):
            call = {"t": float(i), "type": draw(st.sampled_from(["n", "s"])), "model": "m",
                    "in": draw(st.integers(0, 300)), "out": draw(st.integers(0, 30)),
                    "hash_ids": draw(st.lists(st.integers(0, 6), max_size=5))}
            if draw(st.integers(0, 3)) == 0:
                call = {"t": float(i), "type": "subagent", "agent_id": f"a{i}",
                        "subagent_type": "Explore", "status": "completed", "models": ["m"],
                        "requests": [call | {"type": "n"}]}
            reqs.append(call)
        sessions.append({"id": f"s{s}", "models": ["m"], "block_size": 64,
                         "hash_id_scope": "local", "requests": reqs})
    if draw(st.booleans()):
        sess = draw(st.sampled_from(sessions))
        target = draw(st.sampled_from([sess, *sess["requests"]]))
        field = draw(st.sampled_from(sorted(target)))
        if draw(st.integers(0, 5)) == 0:
            del target[field]
        else:
            target[field] = draw(NASTY)
    data = "".join(json.dumps(s) + "\n" for s in sessions).encode()
    return draw(mutate_bytes(data))


@FUZZ
@given(data=agentic_file())
def test_agentic_exact_or_refused(lab, data):
    """Accepted: one row per API call in file order; sessions never share a block id."""
    p = lab.dir / "a.jsonl"
    p.write_bytes(data)
    got = lab.ingest("agentic", p)
    if got is None:
        return
    recs = _json_lines(data) or [json.loads(data.decode("utf-8"))]
    calls = []
    for si, s in enumerate(recs):
        assert isinstance(s["models"], list) and all(isinstance(m, str) for m in s["models"])
        for r in s["requests"]:
            for c in r["requests"] if r["type"] == "subagent" else [r]:
                calls.append((si, int(c["in"]), int(c["out"]), len(c.get("hash_ids", []))))
    t = got["requests"]
    sess = t.column("session_id").to_pylist()
    hashes = t.column("block_hashes").to_pylist()
    assert list(zip(sess, t.column("input_tokens").to_pylist(),
                    t.column("output_tokens").to_pylist(), map(len, hashes),
                    strict=True)) == calls
    owner: dict[int, int] = {}
    for si, hs in zip(sess, hashes, strict=True):
        for h in hs:
            assert owner.setdefault(h, si) == si


# -- hand-picked cases of issue 34 (point 5): refused with file, line/row and field -----
def _deep(depth: int) -> bytes:
    return b'{"timestamp": 0, "x": ' + b"[" * depth + b"]" * depth + b"}\n"


BURST_HEAD = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BAILIAN_OK = {"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.0, "input_length": 16,
              "output_length": 1, "type": "text", "turn": 1, "hash_ids": [1]}


def _agentic(t0: float, t1: float) -> bytes:
    call = {"type": "n", "model": "m", "in": 1, "out": 1}
    return (json.dumps({"id": "s", "models": ["m"], "block_size": 64, "hash_id_scope": "local",
                        "requests": [call | {"t": t0}, call | {"t": t1}]}) + "\n").encode()


#: (reader, file name, content, line or None, field or None, words in the message)
READER_CASES = [
    ("mooncake", "deep.jsonl", _deep(100_000), 1, None, ["nested too deep"]),
    ("bailian", "deep.jsonl", _deep(5_000), 1, None, ["nested too deep"]),
    ("agentic", "deep.jsonl", _deep(100_000), 1, None, ["nested too deep"]),
    ("dsa-jsonl", "deep.jsonl", _deep(100_000), 1, None, ["nested too deep"]),
    ("burstgpt", "inf.csv", (BURST_HEAD + "9" * 400 + ",GPT-4,1,1,2,API log\n").encode(), 2,
     "Timestamp", ["beyond float64"]),
    ("burstgpt", "nan.csv", (BURST_HEAD + "nan,GPT-4,1,1,2,API log\n").encode(), 2,
     "Timestamp", ["non-negative decimal"]),
    ("burstgpt", "dup.csv", (BURST_HEAD.replace("\n", ",Model\n")
                             + "0,GPT-4,1,1,2,API log,GPT-3\n").encode(), 1, "Model", ["twice"]),
    ("burstgpt", "extra.csv", (BURST_HEAD + "0,GPT-4,1,1,2,API log,surplus\n").encode(), 2,
     None, ["expected 6 columns, got 7"]),
    ("bailian", "big.jsonl", (json.dumps(BAILIAN_OK | {"output_length": 9007199254740993.0})
                              + "\n").encode(), 1, "output_length", ["beyond 2^53"]),
    ("bailian", "big_chat.jsonl", (json.dumps(BAILIAN_OK).replace('"chat_id": 1',
                                   '"chat_id": 9007199254740993.0') + "\n").encode(),
     1, "chat_id", []),
    ("agentic", "overflow.jsonl", _agentic(-1.7e308, 1.7e308), 1, "t", ["inf"]),
]


@pytest.mark.parametrize("fmt, name, content, line, field, words", READER_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in READER_CASES])
def test_hand_picked_refusals(lab, fmt, name, content, line, field, words):
    """Each case is refused in one line naming the file, its line and field, and the store
    is unchanged (``Lab.ingest`` checks both)."""
    p = lab.dir / name
    p.write_bytes(content)
    before = lab.snapshot()
    with pytest.raises(TraceFormatError) as e:
        ingest_file(lab.store, fmt, p, "hand")
    assert str(e.value).startswith(str(p)) and "\n" not in str(e.value), str(e.value)
    assert (e.value.line, e.value.field) == (line, field), str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert lab.snapshot() == before


def test_burstgpt_sessions_as_written(lab):
    """Session ids "007" and "7" stay two sessions; "7" twice is one."""
    p = lab.dir / "sess.csv"
    p.write_text(BURST_HEAD.replace("Log Type", "Log Type,Session ID")
                 + "".join(f"{i},GPT-4,1,1,2,API log,{s}\n"
                           for i, s in enumerate(["007", "7", "7"])))
    ingest_file(lab.store, "burstgpt", p, "sess")
    t = lab.store.read("requests", "sess")
    lab.store.delete("requests", "sess")
    lab.store.delete("request_labels", "sess")
    lab.store.delete("request_sessions", "sess")
    sess = t.column("session_id").to_pylist()
    assert sess[0] != sess[1] and sess[1] == sess[2]
    assert t.column("turn").to_pylist() == [0, 0, 1]
