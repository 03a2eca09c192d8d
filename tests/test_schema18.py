"""Schema 18 (issue 31): a message row keeps the first 8 bytes of its passage's content hash, indexed,
and a segment linked to a trajectory keeps no entity counts (they are its members'). The stored vector
of a passage is found as before, a row sharing the key gives back only its own passage's vector,
segments list and load the same counts, and a schema 17 file migrates and reads as before."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import apsw
import numpy as np
import pytest

from fakes import as_schema_18
from memsif_lite import Config, Memory, store
from memsif_lite.db.structure import NO_COUNTS
from memsif_lite.embed import passage, passage_hash
from memsif_lite.errors import StorageCorruptError
from memsif_lite.timeutil import record_clock, to_stored

T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12, 0)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.5)
WORDS = ["marathon training long run", "sourdough bread baking oven", "marathon training long run race",
         "sourdough bread baking flour", "tax forms accountant receipts", "I live in Lisbon near the river"]
_LOOKUP = "SELECT speaker, text FROM messages WHERE substr(content_hash, 1, 8)=?"  # what vector_by_hash asks


def _indexes(con) -> set[str]:
    return {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='index' AND tbl_name='messages'")}


def test_the_stored_vector_is_found_by_the_whole_hash_through_the_prefix_index(memory):
    mem = memory()
    mid = mem.add("Ana", "I ran a marathon in Porto", at=T)
    mem.add("Ben", "Well done", at=T)
    msgs = mem._db.messages
    h = passage_hash(passage("Ana", "I ran a marathon in Porto"))
    got = msgs.vector_by_hash(h)
    assert got is not None and np.array_equal(got, msgs.vector(mid))
    assert msgs.vector_by_hash(h[:8] + bytes(24)) is None  # the same prefix, another passage
    assert msgs.vector_by_hash(passage_hash("Ana: something never said")) is None
    con = mem._db.con
    assert "messages_content_key" in _indexes(con) and "messages_content_hash" not in _indexes(con)
    plan = " ".join(str(r[-1]) for r in con.execute("EXPLAIN QUERY PLAN " + _LOOKUP, (h[:8],)))
    assert "INDEX messages_content_key" in plan, plan


def test_a_key_shared_by_two_stored_passages_gives_each_its_own_vector(memory, db):
    mem = memory()
    a = mem.add("Ana", "first passage", at=T)
    b = mem.add("Ana", "second passage", at=T)
    hb = passage_hash(passage("Ana", "second passage"))
    mem.close()
    con = apsw.Connection(str(db))  # message a (read first) now carries b's key
    try:
        con.execute("UPDATE messages SET content_hash=? WHERE id=?", (hb[:8], a))
    finally:
        con.close()
    mem = memory()
    msgs = mem._db.messages
    assert not np.array_equal(msgs.vector(a), msgs.vector(b))
    assert np.array_equal(msgs.vector_by_hash(hb), msgs.vector(b))  # not a's, found first
    assert msgs.vector_by_hash(passage_hash(passage("Ana", "first passage"))) is None  # its key is gone


def test_a_row_keeps_8_bytes_of_the_hash_and_an_older_row_all_32_is_found_too(memory, db):
    mem = memory()
    a = mem.add("Ana", "first passage", at=T)
    h = passage_hash(passage("Ana", "first passage"))
    assert mem._db.con.execute("SELECT content_hash FROM messages WHERE id=?", (a,)).fetchone()[0] == h[:8]
    mem.close()
    con = apsw.Connection(str(db))
    try:
        con.execute("UPDATE messages SET content_hash=? WHERE id=?", (h, a))
    finally:
        con.close()
    mem = memory()
    assert np.array_equal(mem._db.messages.vector_by_hash(h), mem._db.messages.vector(a))
    assert mem.check() == []


def _fill(mem: Memory) -> list[int]:
    ids = []
    for i, w in enumerate(WORDS):
        ids.append(mem.add("Ana", w, at=T + timedelta(days=i)))
        ids.append(mem.add("Ben", w + " indeed", at=T + timedelta(days=i, minutes=1)))
    return ids


def _member_counts(mem: Memory) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for sid, ents in mem._db.con.execute("SELECT segment_id, entities FROM message_units"):
        out.setdefault(sid, Counter()).update(json.loads(ents))
    return out


def _segments(mem: Memory, **at) -> list[tuple]:
    return [(s.id, s.trajectory_id, s.message_ids, s.entities, s.label, s.closed) for s in mem.segments(**at)]


def test_a_linked_segment_keeps_no_counts_and_reads_back_its_members(memory):
    mem = memory(config=CFG)
    ids = _fill(mem)
    con = mem._db.con
    stored = dict(con.execute("SELECT id, entities FROM segments WHERE trajectory_id IS NOT NULL"))
    assert stored and set(stored.values()) == {NO_COUNTS}
    assert all(e != NO_COUNTS for (e,) in con.execute("SELECT entities FROM segments WHERE trajectory_id IS NULL"))
    counts = _member_counts(mem)
    for s in mem.segments():
        assert s.entities == tuple(sorted(counts[s.id]))
        assert mem._db.structure.load("segment", s.id).entities == counts[s.id]
    listed = {sid: json.loads(e) for sid, _, e, *_ in mem._db.structure.segment_rows()}
    assert listed == {sid: dict(c) for sid, c in counts.items()}
    linked = next(s for s in mem.segments() if s.trajectory_id is not None and len(s.message_ids) > 1)
    mem.forget(message_id=linked.message_ids[0])  # recomputed from the members left: still none stored
    assert con.execute("SELECT entities FROM segments WHERE id=?", (linked.id,)).fetchone()[0] == NO_COUNTS
    counts = _member_counts(mem)
    assert {s.id: s.entities for s in mem.segments()} == {sid: tuple(sorted(c)) for sid, c in counts.items()}
    assert mem.check() == [] and ids


def test_an_export_without_counts_imports_and_one_with_counts_drops_them(memory, tmp_path):
    mem = memory(config=CFG)
    _fill(mem)
    want = _segments(mem)
    mem.export_to(tmp_path / "x.jsonl")
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    older = []  # as schema 17 exported it: every segment's counts, the whole content hash
    for line in lines:
        obj = json.loads(line)
        if obj.get("table") == "segments" and obj["row"]["entities"] == NO_COUNTS:
            obj["row"]["entities"] = json.dumps(mem._db.structure.load("segment", obj["row"]["id"]).entities)
        older.append(json.dumps(obj))
    (tmp_path / "old.jsonl").write_text("\n".join(older) + "\n")
    for name in ("x", "old"):
        other = memory(config=CFG, path=tmp_path / f"{name}.db")
        other.import_from(tmp_path / f"{name}.jsonl")
        assert _segments(other) == want and other.check() == []
        assert {e for (e,) in other._db.con.execute(
            "SELECT entities FROM segments WHERE trajectory_id IS NOT NULL")} == {NO_COUNTS}
        other.close()


def _as_schema_17(path, embedder) -> None:
    """What schema 17 wrote: every segment's entity counts, the whole content hash, indexed whole."""
    with Memory(path, embedder=embedder, config=CFG) as mem:
        counts = {s.id: json.dumps(dict(mem._db.structure.load("segment", s.id).entities), separators=(",", ":"))
                  for s in mem.segments()}
    as_schema_18(path, embedder.dim)  # schema 19's cuts undone first
    con = apsw.Connection(str(path))
    try:
        con.execute("BEGIN")
        con.execute("DROP INDEX messages_content_key")
        con.execute("CREATE INDEX messages_content_hash ON messages(content_hash)")
        for mid, speaker, text in con.execute("SELECT id, speaker, text FROM messages").fetchall():
            con.execute("UPDATE messages SET content_hash=? WHERE id=?", (passage_hash(passage(speaker, text)), mid))
        for sid, ents in counts.items():
            con.execute("UPDATE segments SET entities=? WHERE id=?", (ents, sid))
        con.execute("PRAGMA user_version=17")
        con.execute("COMMIT")
    finally:
        con.close()


def test_a_schema_17_file_migrates_and_reads_as_before(db, fake_embedder):
    with record_clock(lambda: R0), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        ids = _fill(mem)
        want = mem._db.messages.vector(ids[0])
    with record_clock(lambda: R0 + timedelta(days=1)), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        mem.add("Ana", "I moved to Porto last week", at=T + timedelta(days=30))
        mem.forget(message_id=ids[1])
    _as_schema_17(db, fake_embedder)
    k = to_stored(R0 + timedelta(hours=1))
    h = passage_hash(passage("Ana", WORDS[0]))
    with Memory(db, embedder=fake_embedder, config=CFG, read_only=True) as mem:  # as it is, not migrated
        assert store.schema_version(mem._db.con) == 17
        assert {len(k) for (k,) in mem._db.con.execute("SELECT content_hash FROM messages")} == {32}
        assert NO_COUNTS not in {e for (e,) in mem._db.con.execute("SELECT entities FROM segments")}
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
        then, now = _segments(mem, known_at=k), _segments(mem)
        loaded = {s.id: mem._db.structure.load("segment", s.id).entities for s in mem.segments()}
    with Memory(db, embedder=fake_embedder, config=CFG) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version() >= 18
        con = mem._db.con
        assert "messages_content_key" in _indexes(con) and "messages_content_hash" not in _indexes(con)
        assert {len(k) for (k,) in con.execute("SELECT content_hash FROM messages")} == {8}
        assert {e for (e,) in con.execute("SELECT entities FROM segments WHERE trajectory_id IS NOT NULL")} == {
            NO_COUNTS}
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
        assert _segments(mem, known_at=k) == then and _segments(mem) == now
        assert {s.id: mem._db.structure.load("segment", s.id).entities for s in mem.segments()} == loaded
        assert mem.check() == []
        assert mem.add("Ana", WORDS[0], at=T, skip_existing=True) == ids[0]
        mem.add("Ben", "marathon training long run again", at=T + timedelta(days=40))  # and writes on
        assert mem.check() == []


def test_a_linked_segment_with_a_damaged_member_lists_and_loads_as_a_clear_error(memory, db):
    mem = memory(config=CFG)
    _fill(mem)
    linked = next(s for s in mem.segments() if s.trajectory_id is not None and len(s.message_ids) > 1)
    mem.close()
    con = apsw.Connection(str(db))
    try:
        con.execute("UPDATE message_units SET entities='not json' WHERE message_id=?", (linked.message_ids[0],))
    finally:
        con.close()
    mem = memory(config=CFG)
    listed = {s.id: s for s in mem.segments()}[linked.id]  # the damaged member adds no names
    assert set(listed.entities) <= set(linked.entities)
    with pytest.raises(StorageCorruptError, match=f"entities of message {linked.message_ids[0]}"):
        mem._db.structure.load("segment", linked.id)
