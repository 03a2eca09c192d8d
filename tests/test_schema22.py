"""Schema 22 (issue 31): an Event Trajectory's entity counts are rows of ``trajectory_entities``, one
an entity. A link adds the segment's rows and scores candidates by a few primary-key lookups, never
reading or writing a trajectory's counts whole; the counts stay exactly its members' through links,
forgets, merges, exports and imports; ``check`` recounts them; a schema 21 file migrates, reads as
it is when opened read-only, and links on as a file built at schema 22 does."""

from __future__ import annotations

import json
from collections import Counter
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterator

import apsw
import pytest

from hypothesis import given
from hypothesis import strategies as st

from fakes import FakeEmbedder, as_schema_21, raw
from memsif_lite import Config, Memory, store
from memsif_lite.entities import jaccard
from memsif_lite.errors import StorageCorruptError
from memsif_lite.matching import overlap, overlap_of, phi
from memsif_lite.trajectories import OfflineTrajectoryJudge, TrajectoryBuilder

T = datetime(2024, 1, 1, 9)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.3)
TOPICS = ["Lisbon marathon training long run with Rita", "sourdough bread baking oven in Porto",
          "Lisbon marathon race day with Rita and Tom", "sourdough starter flour from Braga market",
          "tax forms for the accountant Nuno", "Lisbon marathon recovery week, Rita ran 42 km"]


def _fill(mem: Memory, topics: list[str], start: int = 0) -> None:
    for i, w in enumerate(topics, start=start):
        mem.add_many([{"speaker": "Ana", "text": w, "at": T + timedelta(days=i)},
                      {"speaker": "Ben", "text": w + " indeed", "at": T + timedelta(days=i, minutes=1)}])


TABLES = ("trajectory_entities", "trajectory_entity_totals")


def _member_counts(con) -> dict[int, Counter]:
    """trajectory -> its members' placements' entity counts, counted here in Python."""
    out: dict[int, Counter] = {}
    for tid, ents in con.execute("SELECT s.trajectory_id, u.entities FROM message_units u JOIN segments s "
                                 "ON s.id=u.segment_id WHERE s.trajectory_id IS NOT NULL"):
        out.setdefault(tid, Counter()).update(json.loads(ents))
    return out


def _held(con) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for tid, e, n in con.execute("SELECT trajectory_id, entity, n FROM trajectory_entities"):
        out.setdefault(tid, Counter())[e] = n
    return out


@contextmanager
def _writer(db: Path) -> Iterator[apsw.Connection]:
    """A plain connection to damage the file with, closed on exit."""
    con = apsw.Connection(str(db))
    try:
        yield con
    finally:
        con.close()


def _trajectories(mem: Memory, **at) -> list[tuple]:
    return [(t.id, t.segment_ids, t.message_ids, t.entities, t.label) for t in mem.trajectories(**at)]


def test_the_counts_are_rows_and_exactly_the_members(memory):
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    con = mem._db.con
    assert store.schema_version(con) == store.latest_version() >= 22
    assert {e for (e,) in con.execute("SELECT entities FROM trajectories")} == {""}
    held = _held(con)
    assert held and held == _member_counts(con)
    assert dict(con.execute("SELECT trajectory_id, n FROM trajectory_entity_totals")) == {
        tid: len(c) for tid, c in held.items()}
    assert any(len(segs) > 1 for _, segs, *_ in _trajectories(mem))  # some trajectory was linked to
    for tid, _, _, ents, _ in _trajectories(mem):
        assert ents == tuple(sorted(held[tid]))
        assert mem._db.structure.load("trajectory", tid).entities == held[tid]
        assert mem._db.structure.load("trajectory", tid, counts=False).entities == Counter()
    assert mem.check() == []


def test_a_link_reads_and_writes_only_the_segments_entities(memory):
    """The SQL a link runs (traced): trajectory_entities is read by primary-key searches and a count,
    written row by row; the trajectories row is written without its entities."""
    mem = memory(config=CFG)
    _fill(mem, TOPICS)
    con = mem._db.con
    ran: list[str] = []
    con.exec_trace = lambda _cursor, sql, _args: ran.append(sql) or True
    try:
        _fill(mem, TOPICS, start=10)
    finally:
        con.exec_trace = None
    touching = [s for s in ran if "FROM trajectory_entit" in s or "INTO trajectory_entit" in s]
    assert any(s.startswith("INSERT INTO trajectory_entities") for s in touching)
    assert any(s.startswith("INSERT INTO trajectory_entity_totals") for s in touching)
    assert any("entity IN" in s for s in touching)
    for s in touching:
        assert s.startswith("INSERT INTO trajectory_entit") or s.startswith(
            "SELECT trajectory_id, n FROM trajectory_entity_totals WHERE trajectory_id IN (") or s.startswith(
            "SELECT trajectory_id, count(*) FROM trajectory_entities WHERE trajectory_id IN ("), s
        if s.startswith("SELECT"):
            args = (1, *["x"] * s.count("?"))[:s.count("?")]
            plan = " ".join(str(r[-1]) for r in con.execute("EXPLAIN QUERY PLAN " + s, args))
            assert ("PRIMARY KEY (trajectory_id=? AND entity=?)" in plan if "entity IN" in s else
                    "INTEGER PRIMARY KEY (rowid=?)" in plan), plan
            assert "SCAN" not in plan, plan
    assert not [s for s in ran if s.startswith("UPDATE trajectories") and "entities" in s]
    assert _held(con) == _member_counts(con) and mem.check() == []


def test_candidates_score_as_phi_on_the_whole_counts(memory):
    """Each candidate's score is φ of the segment and the trajectory with its counts read whole
    (the schema 21 computation), to the bit."""
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    db = mem._db
    builder = TrajectoryBuilder(db, alpha=CFG.alpha_trajectory, top_k=CFG.top_k,
                                levels=(CFG.sem_low, CFG.sem_high), judge=OfflineTrajectoryJudge(0.3))
    seen = 0
    for seg in mem.segments():
        unit = db.structure.load("segment", seg.id)
        for score, t in builder.candidates(unit):
            whole = db.structure.load("trajectory", t.id)
            assert score == phi(unit.centroid, unit.entities.keys(), whole.centroid, whole.entities.keys(),
                                alpha=CFG.alpha_trajectory, levels=(CFG.sem_low, CFG.sem_high))
            seen += 1 if set(unit.entities) & set(whole.entities) else 0
    assert seen  # some candidates shared entities with the segment


def test_a_damaged_count_of_distinct_entities_is_a_clear_error(memory, db):
    mem = memory(config=CFG)
    _fill(mem, TOPICS)
    mem.close()
    with _writer(db) as con:
        con.execute("DELETE FROM trajectory_entity_totals")
    mem = memory(config=CFG)
    with pytest.raises(StorageCorruptError, match="run `memsif check`"):
        _fill(mem, TOPICS, start=10)  # φ would divide by zero: refused, nothing written
    assert any("count of distinct entities" in p for p in mem.check())


@given(st.sets(st.sampled_from("abcdefghij")), st.sets(st.sampled_from("abcdefghij")))
def test_the_overlap_from_counts_is_the_jaccard_of_the_sets(a, b):
    common = len(a & b)
    assert overlap_of(common, len(a), len(b)) == overlap(a, b) == jaccard(a, b)


def test_forget_and_merge_recount_them(memory, tmp_path):
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    con = mem._db.con
    big = max(mem.trajectories(), key=lambda t: len(t.message_ids))
    for mid in big.message_ids[:3]:
        mem.forget(message_id=mid)
    assert _held(con) == _member_counts(con) and mem.check() == []
    other = memory(config=CFG, path=tmp_path / "other.db")
    _fill(other, ["Lisbon marathon taper with Rita", "a new oven for the sourdough"], start=3)  # earlier: a reset
    other.close()
    mem.merge_from(tmp_path / "other.db")
    assert _held(con) == _member_counts(con) and mem.check() == []


def test_check_names_a_trajectory_whose_counts_are_not_its_members(memory, db):
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    tid = max(mem.trajectories(), key=lambda t: len(t.message_ids)).id
    mem.close()
    for damage in ("UPDATE trajectory_entities SET n = n + 1 WHERE trajectory_id=? AND entity = (SELECT max(entity) "
                   "FROM trajectory_entities WHERE trajectory_id=?)",
                   "DELETE FROM trajectory_entities WHERE trajectory_id=? AND entity = (SELECT min(entity) "
                   "FROM trajectory_entities WHERE trajectory_id=?)",
                   "INSERT INTO trajectory_entities VALUES(?, 'never said', 1 + 0 * ?)",
                   "UPDATE trajectory_entity_totals SET n = n + 1 WHERE trajectory_id=? AND ?"):
        with _writer(db) as con:
            before = [con.execute(f"SELECT * FROM {t}").fetchall() for t in TABLES]
            con.execute(damage, (tid, tid))
            assert [con.execute(f"SELECT * FROM {t}").fetchall() for t in TABLES] != before
        with Memory(db, embedder=FakeEmbedder(), read_only=True) as ro:
            problems = ro.check()
        assert any(f"(first: {tid})" in p and "trajectories have" in p for p in problems), problems
        with _writer(db) as con:
            for t, rows in zip(TABLES, before, strict=True):
                con.execute(f"DELETE FROM {t}")
                con.executemany(f"INSERT INTO {t} VALUES({','.join('?' * len(rows[0]))})", rows)
        with Memory(db, embedder=FakeEmbedder(), read_only=True) as ro:
            assert ro.check() == []


def test_export_holds_the_counts_and_import_counts_them_again(memory, tmp_path):
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    want = _trajectories(mem)
    held = _held(mem._db.con)
    mem.export_to(tmp_path / "x.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    rows = {r["row"]["id"]: r["row"]["entities"] for r in lines if r.get("table") == "trajectories"}
    assert {tid: Counter(json.loads(e)) for tid, e in rows.items()} == held  # as schema 21 exported them
    wrong = [dict(r, row=dict(r["row"], entities='{"nobody": 7}')) if r.get("table") == "trajectories" else r
             for r in lines]  # counts an export got wrong (or hand-edited) are counted again from the members
    (tmp_path / "wrong.jsonl").write_text("\n".join(json.dumps(r) for r in wrong) + "\n")
    for name in ("x", "wrong"):
        other = memory(config=CFG, path=tmp_path / f"{name}.db")
        other.import_from(tmp_path / f"{name}.jsonl")
        assert _trajectories(other) == want and _held(other._db.con) == held and other.check() == []
        assert {e for (e,) in other._db.con.execute("SELECT entities FROM trajectories")} == {""}


def test_a_schema_21_file_reads_as_it_is_migrates_and_links_on_as_one_built_now(memory, db, tmp_path):
    fresh = memory(config=CFG, path=tmp_path / "fresh.db")
    _fill(fresh, TOPICS * 2)
    _fill(fresh, TOPICS, start=20)
    mem = memory(config=CFG)
    _fill(mem, TOPICS * 2)
    want = _trajectories(mem)
    mem.close()
    as_schema_21(db)
    with raw(db) as con:
        assert store.schema_version(con) == 21
        stored = {tid: json.loads(e) for tid, e in con.execute("SELECT id, entities FROM trajectories")}
        assert stored and all(stored.values())
    with Memory(db, embedder=FakeEmbedder(), config=CFG, read_only=True) as ro:  # read as it is, not migrated
        assert store.schema_version(ro._db.con) == 21
        assert _trajectories(ro) == want and ro.check() == []
    mem = memory(config=CFG)  # migrated
    assert store.schema_version(mem._db.con) == store.latest_version()
    assert _trajectories(mem) == want and mem.check() == []
    assert _held(mem._db.con) == {tid: Counter(c) for tid, c in stored.items()}
    _fill(mem, TOPICS, start=20)
    assert _trajectories(mem) == _trajectories(fresh)
    assert _held(mem._db.con) == _held(fresh._db.con) and mem.check() == []
