"""Schema 18 (issue 31): a message row keeps the first 8 bytes of its passage's content hash, indexed.
The stored vector of a passage is found as before, a row sharing the key gives back only its own
passage's vector, and a schema 17 file migrates."""

from __future__ import annotations

from datetime import datetime

import apsw
import numpy as np

from memsif_lite import Memory, store
from memsif_lite.embed import passage, passage_hash

T = datetime(2024, 1, 1, 9)
_LOOKUP = "SELECT id FROM messages WHERE substr(content_hash, 1, 8)=? AND content_hash=?"


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
    plan = " ".join(str(r[-1]) for r in con.execute("EXPLAIN QUERY PLAN " + _LOOKUP, (h[:8], h)))
    assert "USING INDEX messages_content_key" in plan, plan


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


def _as_schema_17(path) -> None:
    con = apsw.Connection(str(path))
    try:
        con.execute("BEGIN")
        con.execute("DROP INDEX messages_content_key")
        con.execute("CREATE INDEX messages_content_hash ON messages(content_hash)")
        for mid, speaker, text in con.execute("SELECT id, speaker, text FROM messages").fetchall():
            con.execute("UPDATE messages SET content_hash=? WHERE id=?", (passage_hash(passage(speaker, text)), mid))
        con.execute("PRAGMA user_version=17")
        con.execute("COMMIT")
    finally:
        con.close()


def test_a_schema_17_file_migrates(db, fake_embedder):
    with Memory(db, embedder=fake_embedder) as mem:
        mid = mem.add("Ana", "I ran a marathon in Porto", at=T)
        want = mem._db.messages.vector(mid)
    _as_schema_17(db)
    h = passage_hash(passage("Ana", "I ran a marathon in Porto"))
    with Memory(db, embedder=fake_embedder, read_only=True) as mem:  # as it is, not migrated
        assert store.schema_version(mem._db.con) == 17
        assert [len(k) for (k,) in mem._db.con.execute("SELECT content_hash FROM messages")] == [32]
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
    with Memory(db, embedder=fake_embedder) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version() >= 18
        assert "messages_content_key" in _indexes(mem._db.con)
        assert "messages_content_hash" not in _indexes(mem._db.con)
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
        assert [len(k) for (k,) in mem._db.con.execute("SELECT content_hash FROM messages")] == [8]
        assert mem.check() == []
        assert mem.add("Ana", "I ran a marathon in Porto", at=T, skip_existing=True) == mid
