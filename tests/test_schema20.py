"""Schema 20 (issue 31): ``messages_known_at`` indexes the second of a message's record time
(``unixepoch(known_at)``), not its 26 bytes of text. Reads by record time find the same messages
(within one second too) and are answered by that index, ``memsif check`` names a message whose
record time the index cannot hold, and a schema 19 file migrates and reads as before."""

from __future__ import annotations

from datetime import datetime, timedelta

import apsw
import pytest

from fakes import as_schema_19, raw
from memsif_lite import Config, Memory, store
from memsif_lite.db.messages import learnt
from memsif_lite.timeutil import record_clock, to_stored

T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12, 0)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.5)
WORDS = ["marathon training long run", "sourdough bread baking oven", "tax forms accountant receipts",
         "I live in Lisbon near the river", "the cat likes the garden", "a new bike for the commute"]
#: record times: four in one second (two a microsecond apart), two in the next
TIMES = [R0 + timedelta(microseconds=u) for u in (0, 100_000, 400_000, 400_001, 1_000_000, 1_000_005)]


def _learn(mem: Memory) -> dict[int, datetime]:
    learnt_at = {}
    for i, (w, t) in enumerate(zip(WORDS, TIMES, strict=True)):
        with record_clock(lambda t=t: t):
            learnt_at[mem.add("Ana", w, at=T + timedelta(days=i))] = t
    return learnt_at


def _bounds() -> list[datetime]:
    out = []
    for t in TIMES:
        out += [t - timedelta(microseconds=1), t, t + timedelta(microseconds=1)]
    return out + [R0 - timedelta(days=1), R0 + timedelta(days=1)]


def _reads(mem: Memory, bound: datetime) -> tuple[set[int], set[int]]:
    return ({m.id for m in mem.messages(known_at=bound)},
            {m for s in mem.segments(known_at=bound) for m in s.message_ids})


def test_reads_by_record_time_find_the_messages_of_the_same_second_exactly(memory):
    mem = memory(config=CFG)
    learnt_at = _learn(mem)
    for bound in _bounds():
        by_then = {m for m, t in learnt_at.items() if t <= bound}
        assert _reads(mem, bound) == (by_then, by_then), bound


def test_the_seconds_index_answers_both_reads(memory, db):
    _learn(memory(config=CFG))
    with raw(db) as con:
        assert "unixepoch(known_at)" in con.execute(
            "SELECT sql FROM sqlite_schema WHERE name='messages_known_at'").fetchone()[0]
        for op in ("<=", ">"):
            for valid_time in ("", " AND m.at >= '2000-01-01'"):  # with a valid-time filter too (its own index)
                plan = " ".join(r[3] for r in con.execute(f"EXPLAIN QUERY PLAN SELECT id FROM messages m WHERE "
                                                          f"{learnt(op, 'm.')}{valid_time}", (to_stored(R0),) * 3))
                assert "INDEX messages_known_at" in plan, plan
            got = {i for (i,) in con.execute(f"SELECT id FROM messages WHERE {learnt(op)}", (to_stored(R0),) * 3)}
            assert got == {i for (i,) in con.execute(f"SELECT id FROM messages WHERE known_at {op} ?",
                                                     (to_stored(R0),))}
    with pytest.raises(ValueError):
        learnt("<")


@pytest.mark.parametrize("known", ["last tuesday", "2460000.5", "2026-03-01 12:00:00", None])
def test_check_names_a_message_whose_record_time_is_not_a_stored_time(memory, db, known):
    """Also one SQLite's unixepoch reads (a Julian day, a space for the T): a read by record time
    would misplace it; a NULL one (no read by record time finds it), also where created_at is
    kept whole."""
    mem = memory(config=CFG)
    _learn(mem)
    assert mem.check() == []
    mem.close()
    con = apsw.Connection(str(db))
    try:
        con.execute("UPDATE messages SET known_at=? WHERE id=2", (known,))
        con.execute("UPDATE messages SET created_at=known_at WHERE id=3")  # kept whole (merged, imported)
        con.execute("UPDATE messages SET known_at=NULL WHERE id=3")
    finally:
        con.close()
    found = memory(config=CFG).check()
    assert any("2 messages have no record time" in p and "message 2" in p for p in found), found


def test_a_schema_19_file_migrates_and_reads_as_before(db, fake_embedder):
    with Memory(db, embedder=fake_embedder, config=CFG) as mem:
        learnt_at = _learn(mem)
        want = {b: _reads(mem, b) for b in _bounds()}
    as_schema_19(db)
    with raw(db) as con:
        assert con.execute("SELECT sql FROM sqlite_schema WHERE name='messages_known_at'").fetchone()[0] \
            == "CREATE INDEX messages_known_at ON messages(known_at)"
    with Memory(db, embedder=fake_embedder, config=CFG, read_only=True) as mem:  # as it is, not migrated
        assert store.schema_version(mem._db.con) == 19
        assert {b: _reads(mem, b) for b in _bounds()} == want
    with Memory(db, embedder=fake_embedder, config=CFG) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version() >= 20
        assert {b: _reads(mem, b) for b in _bounds()} == want
        assert want[TIMES[-1]][0] == set(learnt_at) and mem.check() == []
    with raw(db) as con:
        assert "unixepoch(known_at)" in con.execute(
            "SELECT sql FROM sqlite_schema WHERE name='messages_known_at'").fetchone()[0]
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
