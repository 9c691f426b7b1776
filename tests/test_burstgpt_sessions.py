"""BurstGPT session ids land exactly as written (issue 34, point 5): ``requests.session_id``
(int64) keeps plain integers and numbers other strings, and ``request_sessions`` maps every
id back to its string, written with the timeline in one transaction.

The expected values are read from the files with Python's ``csv`` module, independently of
the reader; ``tests/data/burstgpt_session_strings_sample.csv`` is hand-written (its ids'
real form is not published yet).
"""

from __future__ import annotations

import csv
import io
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import toolkit
from toolkit.ingest import ingest_file

from .budget import examples
from .conftest import AZURE

DATA = Path(__file__).resolve().parent / "data"
STRINGS = DATA / "burstgpt_session_strings_sample.csv"
INTEGERS = DATA / "burstgpt_sessions_sample.csv"
HEAD = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens",
        "Log Type", "Session ID"]


def ids_as_written(path: Path) -> list[str | None]:
    """Each data row's ``Session ID`` cell as the CSV holds it (None when blank)."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f) if r and any(c.strip() for c in r)]
    col = rows[0].index("Session ID")
    return [r[col] if r[col].strip() else None for r in rows[1:]]


def stored_ids(store: toolkit.Store, trace: str) -> list[str | None]:
    """Each request's session id read back as a string through ``request_sessions``."""
    df = store.query(
        "SELECT r.request_id, s.session FROM requests r LEFT JOIN request_sessions s "
        "USING (trace, session_id) WHERE r.trace = ? ORDER BY r.request_id", [trace])
    assert df["request_id"].to_list() == list(range(df.height))
    return df["session"].to_list()


def turns_of(ids: list[str | None]) -> list[int | None]:
    seen: dict[str, int] = {}
    out: list[int | None] = []
    for s in ids:
        out.append(None if s is None else seen.get(s, 0))
        if s is not None:
            seen[s] = seen.get(s, 0) + 1
    return out


def test_string_ids_round_trip_exactly(store):
    """Every id of the hand-written sample comes back as written: "007" and "7" apart, a
    UUID, an id one past int64, a quoted id holding a comma, a non-ASCII id, a blank."""
    want = ids_as_written(STRINGS)
    assert want[1:3] == ["007", "7"] and None in want  # what the sample is for
    res = ingest_file(store, "burstgpt", STRINGS, "strs")
    assert stored_ids(store, "strs") == want
    t = store.read("requests", "strs").to_pydict()
    assert t["turn"] == turns_of(want)
    # one id per distinct string, numbered by first appearance; the map is one-to-one
    distinct = list(dict.fromkeys(s for s in want if s is not None))
    assert t["session_id"] == [None if s is None else distinct.index(s) for s in want]
    m = store.read("request_sessions", "strs").to_pydict()
    assert m["session"] == distinct and m["session_id"] == list(range(len(distinct)))
    assert any("request_sessions" in n for n in res.notes), res.notes


def test_plain_integer_ids_keep_their_value(store):
    """Ids that are all plain integers are the session_id values themselves, and their
    strings are kept too."""
    want = ids_as_written(INTEGERS)
    ingest_file(store, "burstgpt", INTEGERS, "ints")
    assert store.read("requests", "ints")["session_id"].to_pylist() == \
        [None if s is None else int(s) for s in want]
    assert stored_ids(store, "ints") == want


def test_no_session_column_writes_no_map(store):
    ingest_file(store, "burstgpt", DATA / "burstgpt_sample.csv", "plain")
    assert "plain" not in store.keys("request_sessions")


def test_replacing_leaves_no_stale_ids(store):
    """Replacing a trace (by one without session ids, or by another format) empties its
    map, so no string names a session the timeline no longer has."""
    ingest_file(store, "burstgpt", STRINGS, "t")
    ingest_file(store, "burstgpt", DATA / "burstgpt_sample.csv", "t", replace=True)
    assert store.read("request_sessions", "t").num_rows == 0
    ingest_file(store, "burstgpt", STRINGS, "t", replace=True)
    assert stored_ids(store, "t") == ids_as_written(STRINGS)
    ingest_file(store, "azure", AZURE, "t", replace=True)
    assert store.read("request_sessions", "t").num_rows == 0


def test_refused_file_writes_nothing(store, tmp_path):
    """All or nothing: a bad row after the sessions leaves no map (nor timeline)."""
    p = tmp_path / "bad.csv"
    p.write_text(STRINGS.read_text(encoding="utf-8") + "41,x,GPT-4,1,1,3,API log,0.1\n",
                 encoding="utf-8")
    with pytest.raises(toolkit.errors.TraceFormatError) as e:
        ingest_file(store, "burstgpt", p, "bad")
    assert "Total tokens" in str(e.value)
    assert "bad" not in store.keys("request_sessions") and "bad" not in store.keys("requests")


def test_store_from_before_the_map_still_reads(tmp_path):
    """A store written before ``request_sessions`` existed (no such directory) opens and
    answers queries; the map reads as an empty table of the right columns."""
    root = tmp_path / "old"
    with toolkit.open_store(root, create=True) as s:
        ingest_file(s, "burstgpt", INTEGERS, "g")
    shutil.rmtree(root / "request_sessions", ignore_errors=True)
    (root / "catalog.duckdb").unlink(missing_ok=True)
    with toolkit.open_store(root) as s:
        assert s.query("SELECT count(*) AS n FROM requests")["n"].item() == 4
        m = s.query("SELECT * FROM request_sessions")
        assert m.height == 0 and m.columns == ["trace", "session_id", "session"]
        assert s.query("SELECT count(*) AS n FROM requests r LEFT JOIN request_sessions "
                       "USING (trace, session_id)")["n"].item() == 4


_ID = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
              max_size=8) | st.sampled_from(["7", "007", "07", " 7", "7 ", "0", str(2**63),
                                             str(2**63 - 1), "1e3", "-1", "a,b", '"q"'])


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One store for every example of the property (a store a draw cost a second)."""
    d = tmp_path_factory.mktemp("ids")
    with toolkit.open_store(d / "store", create=True) as s:
        yield d, s


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.none() | _ID, min_size=1, max_size=12))
def test_any_ids_round_trip_exactly(shared, ids):
    """Property: whatever non-blank strings a file holds as ids come back unchanged (blank
    cells are rows without a session); equal strings share a session, others never do."""
    d, store = shared
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEAD)
    for i, s in enumerate(ids):
        w.writerow([str(i), "GPT-4", "3", "1", "4", "API log", "" if s is None else s])
    p = d / "g.csv"
    p.write_text(buf.getvalue(), encoding="utf-8")
    want = [None if s is None or not s.strip() else s for s in ids]
    ingest_file(store, "burstgpt", p, "g", replace=True)
    assert stored_ids(store, "g") == want
    sid = store.read("requests", "g")["session_id"].to_pylist()
    for a, x in zip(want, sid, strict=True):
        for b, y in zip(want, sid, strict=True):
            if a is not None and b is not None:
                assert (a == b) == (x == y), (a, b, x, y)
