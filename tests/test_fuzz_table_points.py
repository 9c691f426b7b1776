"""Fuzzing the issue-38 readers: ``ingest table`` (CSV, JSONL, Parquet) and ``ingest points``
(InferenceX, sglang.bench_serving, vllm bench serve).

Two properties per reader: a valid table built by the test round-trips exactly (the stored
rows are the ones written, relative times, renumbered hex ids and all); and any mutation of
a hand-written sample is either read or refused with a one-line TraceFormatError that names
the file, with the store left byte-identical. Nothing else may escape.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import toolkit
from tests.budget import examples
from toolkit.errors import TraceFormatError
from toolkit.ingest import ingest_file

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", str(examples(60))))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DATA = Path(__file__).resolve().parent / "data"
NASTY = st.one_of(
    st.sampled_from([0, -1, 2**63, 10**400, 1.5, -0.0, float("nan"), float("inf")]),
    st.none(), st.booleans(), st.text(max_size=5), st.lists(st.integers(-2, 5), max_size=3),
    st.just({}), st.floats(),
)


class Lab:
    """One store per property: ingest, compare with the snapshot on refusal, clean up."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fuzz38-"))
        self.store = toolkit.open_store(self.dir / "store", create=True)
        seed = self.dir / "seed.csv"
        seed.write_text("t,i,o\n0,5,1\n")
        ingest_file(self.store, "table", seed, "kept", time_col="t", input_tokens_col="i",
                    output_tokens_col="o")
        self.n = 0

    def snapshot(self) -> dict[str, bytes]:
        root = self.store.root
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file()}

    def ingest(self, fmt: str, path: Path, **options: object) -> dict[str, pa.Table] | None:
        before = self.snapshot()
        self.n += 1
        name = f"fz{self.n}"
        try:
            res = ingest_file(self.store, fmt, path, name, **options)
        except TraceFormatError as e:
            msg = str(e)
            assert msg.startswith(str(path)) and "\n" not in msg and e.message, msg
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


@st.composite
def request_rows(draw):
    """Sorted times (ms), counts, 16-token hash lists (hashed or full blocks), sessions."""
    n = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n))
    rows, t = [], draw(st.integers(0, 10**6))
    for g in gaps:
        t += g
        tokens = draw(st.integers(0, 100))
        full = draw(st.booleans())
        n_ids = tokens // 16 if full else -(-tokens // 16)
        ids = draw(st.lists(st.integers(0, 2**40), min_size=n_ids, max_size=n_ids))
        rows.append({"t": t, "isl": tokens, "osl": draw(st.integers(0, 50)), "ids": ids,
                     "user": draw(st.sampled_from(["a", "b", "c"]))})
    return rows


def _expected(rows: list[dict]) -> list[tuple]:
    seen: dict[str, int] = {}
    turns: dict[int, int] = {}
    out = []
    for i, r in enumerate(rows):
        sid = seen.setdefault(r["user"], len(seen))
        out.append((i, (r["t"] - rows[0]["t"]) / 1000, r["isl"], r["osl"], r["ids"], sid,
                    turns.get(sid, 0)))
        turns[sid] = turns.get(sid, 0) + 1
    return out


def _stored(t: pa.Table) -> list[tuple]:
    return list(zip(*(t.column(c).to_pylist() for c in (
        "request_id", "arrival_s", "input_tokens", "output_tokens", "block_hashes",
        "session_id", "turn")), strict=True))


OPTS = dict(time_col="t", time_unit="ms", input_tokens_col="isl", output_tokens_col="osl",
            hash_col="ids", block_tokens=16, session_col="user", partial_block="either")


@FUZZ
@given(rows=request_rows(), fmt=st.sampled_from(["csv", "jsonl", "parquet"]))
def test_table_roundtrip(lab, rows, fmt):
    """A valid table in any of the three formats stores exactly its rows."""
    path = lab.dir / f"t.{fmt}"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["t", "isl", "osl", "ids", "user"])
        for r in rows:
            w.writerow([r["t"], r["isl"], r["osl"], " ".join(map(str, r["ids"])), r["user"]])
        path.write_text(buf.getvalue())
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.table({
            "t": [r["t"] for r in rows], "isl": [r["isl"] for r in rows],
            "osl": [r["osl"] for r in rows], "user": [r["user"] for r in rows],
            "ids": pa.array([r["ids"] for r in rows], pa.list_(pa.int64()))}), path)
    tables = lab.ingest("table", path, format=fmt, **OPTS)
    assert tables is not None
    assert _stored(tables["requests"]) == _expected(rows)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["none", "truncate", "flip", "insert", "delete-line",
                                 "swap-lines"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data)))]
    if kind == "flip":
        i = draw(st.integers(0, len(data) - 1))
        return data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    if kind == "insert":
        i = draw(st.integers(0, len(data)))
        return data[:i] + draw(st.sampled_from([b",", b"\"", b"\n", b"-", b"e9", b"[", b"\xff",
                                                b"0x", b" ", b"\x00"])) + data[i:]
    lines = data.split(b"\n")
    if kind == "delete-line" and len(lines) > 1:
        del lines[draw(st.integers(0, len(lines) - 1))]
    if kind == "swap-lines" and len(lines) > 2:
        i = draw(st.integers(1, len(lines) - 2))
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return b"\n".join(lines)


SAMPLES = {
    "table_sample.csv": dict(time_col="send_ms", time_unit="ms",
                             input_tokens_col="prompt_tokens",
                             output_tokens_col="completion_tokens", hash_col="block_ids",
                             block_tokens=16, session_col="user", partial_block="either"),
    "table_sample.jsonl": dict(time_col="t", input_tokens_col="isl", output_tokens_col="osl",
                               hash_col="blocks", block_tokens=16, hash_encoding="hex",
                               session_col="session", partial_block="unhashed"),
}


@FUZZ
@given(data=st.data(), sample=st.sampled_from(sorted(SAMPLES)))
def test_table_mutations(lab, data, sample):
    """Any byte mutation of a sample is read or refused cleanly."""
    raw = (DATA / sample).read_bytes()
    path = lab.dir / sample
    path.write_bytes(data.draw(mutated(raw)))
    tables = lab.ingest("table", path, **SAMPLES[sample])
    if tables is not None:
        req = tables["requests"]
        assert req.num_rows >= 1 and min(req.column("arrival_s").to_pylist()) == 0.0


POINT_SAMPLES = {"inferencex_points_sample.json": {}, "sglang_bench_sample.jsonl": {"gpus": 2},
                 "vllm_bench_sample.json": {"gpus": 1}}


def _field_mutated(lab, data, sample: str) -> Path | None:
    """The sample with one field of its first record set to a nasty value (None when json
    cannot write the value)."""
    text = (DATA / sample).read_text()
    try:
        recs = [json.loads(text)]
        one = True
    except ValueError:
        recs = [json.loads(line) for line in text.splitlines() if line.strip()]
        one = False
    target = recs[0][0] if isinstance(recs[0], list) else recs[0]
    keys = sorted(target) + (sorted(target["metrics"]) if "metrics" in target else [])
    key = data.draw(st.sampled_from(keys))
    holder = target if key in target else target["metrics"]
    holder[key] = data.draw(NASTY)
    path = lab.dir / sample
    try:
        body = json.dumps(recs[0]) if one else "".join(json.dumps(r) + "\n" for r in recs)
    except ValueError:  # a value json cannot write (nan is allowed; none here fails)
        return None
    path.write_text(body)
    return path


@FUZZ
@given(data=st.data(), sample=st.sampled_from(sorted(POINT_SAMPLES)))
def test_points_field_values(lab, data, sample):
    """Any value in any field of a points file is read or refused cleanly; what is read has
    positive throughput and interactivity."""
    path = _field_mutated(lab, data, sample)
    if path is None:
        return
    tables = lab.ingest("points", path, **POINT_SAMPLES[sample])
    if tables is not None:
        pts = tables["measured_points"]
        assert all(v > 0 for v in pts.column("tput_per_gpu").to_pylist())
        assert all(v > 0 for v in pts.column("median_intvty").to_pylist())


@FUZZ
@given(data=st.data(), sample=st.sampled_from(sorted(POINT_SAMPLES)))
def test_points_mutations(lab, data, sample):
    raw = (DATA / sample).read_bytes()
    path = lab.dir / sample
    path.write_bytes(data.draw(mutated(raw)))
    lab.ingest("points", path, **POINT_SAMPLES[sample])


@FUZZ
@given(data=st.data(), sample=st.sampled_from(sorted(POINT_SAMPLES)))
def test_points_as_model_input(lab, data, sample):
    """Any value in any field, loaded for the serving model with the layout flags given:
    validated rows with every configuration column set, or one line naming the file."""
    from toolkit.ingest.bench_layout import BenchLayout
    from toolkit.serving.measurements import MeasurementSource, load_measurements
    from toolkit.serving.points import CONFIG_COLUMNS, PointsError

    path = _field_mutated(lab, data, sample)
    if path is None:
        return
    gpus = POINT_SAMPLES[sample].get("gpus")
    layout = BenchLayout(hardware="h200", model="dsr1", precision="fp8", gpus=gpus,
                         tp=gpus) if gpus else BenchLayout()
    try:
        df = load_measurements(MeasurementSource(str(path), layout=layout))
    except PointsError as e:
        text = str(e)
        assert str(path) in text and "\n" not in text, text
        event("refused")
        return
    event("loaded")
    assert df.height >= 1 and all(df[c].null_count() == 0 for c in CONFIG_COLUMNS)
