"""Idempotent ingest: ``add_many(..., skip_existing=True)`` skips a message already in the file (same
source_id and speaker; without a source id, same speaker, time and text), inside the write."""

from __future__ import annotations

from fakes import raw

MSGS = [
    {"speaker": "Ana", "text": "I moved to Porto.", "at": "2024-03-16T20:31:00", "session": "1"},
    {"speaker": "Bo", "text": "Congrats!", "at": "2024-03-16T20:32:00", "session": "1"},
    {"speaker": "Ana", "text": "Thanks!", "at": "2024-03-16T20:33:00", "source_id": "D1:3"},
]


def _count(db) -> int:
    with raw(db) as con:
        return con.execute("SELECT count(*) FROM messages").fetchone()[0]


def test_adding_the_same_messages_twice_skips_them(memory, db):
    mem = memory()
    first = mem.add_many(MSGS, skip_existing=True)
    assert len(first) == 3
    assert mem.add_many(MSGS, skip_existing=True) == []
    assert _count(db) == 3 and mem.stats()["messages"] == 3
    assert len(mem.add_many(MSGS)) == 3 and _count(db) == 6  # without skip_existing: stored again


def test_what_counts_as_already_present(memory, db):
    mem = memory()
    mem.add_many(MSGS)
    new = mem.add_many([
        {"speaker": "Ana", "text": "I moved to Porto.", "at": "2024-03-16T20:31:00+00:00"},  # same instant: present
        {"speaker": "Ana", "text": "I moved to Porto.", "at": "2024-03-17T20:31:00"},        # another time: new
        {"speaker": "Bo", "text": "I moved to Porto.", "at": "2024-03-16T20:31:00"},         # another speaker: new
        {"speaker": "Ana", "text": "edited text", "source_id": "D1:3"},                      # same source id: present
        {"speaker": "Cy", "text": "Thanks!", "source_id": "D1:3"},      # same id, other speaker (another conversation)
    ], skip_existing=True)
    assert len(new) == 3 and _count(db) == 6
    assert [m.speaker for m in mem.messages()][-3:] == ["Ana", "Bo", "Cy"]


def test_duplicates_within_one_batch_are_stored_once(memory, db):
    mem = memory()
    ids = mem.add_many([MSGS[0], MSGS[0], MSGS[2], MSGS[2]], skip_existing=True)
    assert len(ids) == 2 and _count(db) == 2


def test_skipped_messages_still_report_progress(memory):
    mem = memory()
    mem.add_many(MSGS)
    seen: list[int] = []
    assert mem.add_many(MSGS, skip_existing=True, progress=seen.append) == []
    assert sum(seen) == 3
