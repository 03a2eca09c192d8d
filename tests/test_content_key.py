"""Schema 18 (issue 31): the content-hash index holds the hash's first 8 bytes. The stored vector of a
passage is found as before, a hash that only shares the prefix finds nothing, and a schema 17 file
migrates."""

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


def test_a_prefix_shared_by_two_stored_passages_gives_each_its_own_vector(memory, db):
    mem = memory()
    a = mem.add("Ana", "first passage", at=T)
    b = mem.add("Ana", "second passage", at=T)
    ha, hb = (passage_hash(passage("Ana", t)) for t in ("first passage", "second passage"))
    forged = ha[:8] + hb[8:]
    mem.close()
    con = apsw.Connection(str(db))  # a file where two hashes share their first 8 bytes
    try:
        con.execute("UPDATE messages SET content_hash=? WHERE id=?", (forged, b))
    finally:
        con.close()
    mem = memory()
    msgs = mem._db.messages
    assert np.array_equal(msgs.vector_by_hash(ha), msgs.vector(a))
    assert np.array_equal(msgs.vector_by_hash(forged), msgs.vector(b))
    assert msgs.vector_by_hash(hb) is None


def _as_schema_17(path) -> None:
    con = apsw.Connection(str(path))
    try:
        con.execute("BEGIN")
        con.execute("DROP INDEX messages_content_key")
        con.execute("CREATE INDEX messages_content_hash ON messages(content_hash)")
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
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
    with Memory(db, embedder=fake_embedder) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version() >= 18
        assert "messages_content_key" in _indexes(mem._db.con)
        assert "messages_content_hash" not in _indexes(mem._db.con)
        assert np.array_equal(mem._db.messages.vector_by_hash(h), want)
        assert mem.check() == []
        assert mem.add("Ana", "I ran a marathon in Porto", at=T, skip_existing=True) == mid
