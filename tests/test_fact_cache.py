"""The in-process copy of ``fact_vec`` (``Database.fact_vectors``, ranked by
``CoreFacts.nearest``): the same ranking as vec0's KNN after every kind of write (adds,
supersedes, forgets, undo, a merge, another process's commit) and never a fact of a rolled-back
transaction."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pytest

from fakes import FakeEmbedder
from memsif_lite import Config, Memory

CFG = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.99, tau_split=0.98)
T0 = datetime(2024, 1, 1, 9)
QUESTIONS = ["Where does Maya live?", "What does Leo love?", "sister", "ceramics and tiles", "Porto"]


def _lines(name: str, start: int) -> list[dict]:
    said = [f"I live in {city}." for city in ("Lisbon", "Porto", "Braga")] + \
           [f"I love {thing}." for thing in ("ceramics", "tiled facades", "jazz")] + \
           ["My sister Clara lives there too.", "ok"]
    return [{"speaker": name, "text": t, "at": T0 + timedelta(days=start + i)} for i, t in enumerate(said)]


def _agrees(mem: Memory) -> int:
    """Every question ranks the same facts from the cache as from vec0; the cache answered."""
    db, emb = mem._db, FakeEmbedder()
    with db.read():
        for q in QUESTIONS:
            qv = emb.embed([q], kind="query")[0]
            for k in (1, 3, 40):
                # vec0's KNN over every row, cut at k: a KNN asked for k keeps any of the rows tied at the cut
                assert db.facts.nearest(qv, k) == db.facts.knn("fact_vec", qv, 4096)[:k], (q, k)
        held = int(db.con.execute("SELECT count(*) FROM fact_vec").fetchone()[0])
    assert db.fact_vectors.size == held
    return held


def test_fact_cache_follows_every_write(tmp_path):
    path, other = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(other, embedder=FakeEmbedder(), config=CFG) as b:
        b.add_many(_lines("Leo", 0))
    with Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        assert _agrees(mem) == 0
        mem.add_many(_lines("Maya", 0))
        first = _agrees(mem)
        assert first > 0
        mem.add_many(_lines("Maya", 30))  # the same statements again: merges and supersedes
        _agrees(mem)
        mem.forget(message_id=1)
        _agrees(mem)
        fact = mem.facts()[0].id
        mem.forget(fact_id=fact)
        _agrees(mem)
        change = [c for c in mem.changes() if c.op == "fact.add" and c.undoable][-1]
        mem.undo(change.id)
        _agrees(mem)
        mem.merge_from(other)
        mem.process()
        merged = _agrees(mem)
        with Memory(path, embedder=FakeEmbedder(), config=CFG) as writer:  # another connection commits
            writer.add_many(_lines("Ines", 60))
        assert _agrees(mem) > merged


def test_fact_cache_never_holds_a_rolled_back_fact(tmp_path):
    with Memory(tmp_path / "m.db", embedder=FakeEmbedder(), config=CFG) as mem:
        mem.add_many(_lines("Maya", 0))
        _agrees(mem)
        db, qv = mem._db, FakeEmbedder().embed(["Maya lives on the moon"], kind="query")[0]
        with pytest.raises(RuntimeError), db.write():
            fid = db.facts.insert(subject="maya", ftype="identity", stmt="Maya lives on the moon", slot=None,
                                  valid_from="2024-01-01T09:00:00", now="2024-01-01T09:00:00", origin="test",
                                  vector=qv, message_ids=[1])
            assert db.facts.nearest(qv, 1)[0][0] == fid  # inside the transaction: staged in the cache
            raise RuntimeError("rolled back")
        assert fid not in [f for f, _ in db.facts.nearest(qv, 50)]
        _agrees(mem)
        assert np.isfinite(db.facts.nearest(qv, 1)[0][1])


def test_an_older_file_read_as_it_is_fails_as_a_memsif_error(tmp_path):
    """A schema-5 file (float32 vectors, read as it is by a read-only open): the caches cannot hold
    its vectors; the search and the CoreFact neighbours fail as a MemsifError (vec0's), never as
    numpy's ValueError (the fact cache turned the StorageError the neighbours gave into one)."""
    import apsw
    import sqlite_vec

    from memsif_lite import store
    from memsif_lite.errors import MemsifError

    path, emb = tmp_path / "old.db", FakeEmbedder()
    con = apsw.Connection(str(path))
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    con.execute("PRAGMA journal_mode=WAL")
    for _, sql in store.migrations()[:5]:
        con.execute(sql.replace("{dim}", str(emb.dim)))
    con.execute(f"PRAGMA application_id={store.APPLICATION_ID}; PRAGMA user_version=5")
    con.execute("INSERT INTO meta VALUES('embedding_model',?),('embedding_dim',?),('embedding_metric','cosine')",
                (emb.model_id, str(emb.dim)))
    for i, text in enumerate(["Maya lives in Lisbon", "Maya loves ceramics"], 1):
        vec = emb.embed([text], kind="passage")[0].astype(np.float32).tobytes()
        con.execute("INSERT INTO messages(id, speaker, text, at, content_hash, created_at) VALUES(?,?,?,?,?,?)",
                    (i, "Maya", text, f"2024-01-0{i}T09:00:00", bytes(32), "2024-01-01T09:00:00"))
        con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?,?)", (i, vec))
        con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)", (i, "Maya", text))
        con.execute("INSERT INTO core_facts(id, subject, type, stmt, valid_from, created_at, updated_at, origin) "
                    "VALUES(?,?,?,?,?,?,?,?)", (i, "Maya", "Identity", text, *["2024-01-01T09:00:00"] * 3, "rule"))
        con.execute("INSERT INTO fact_vec(rowid, embedding) VALUES(?,?)", (i, vec))
    con.close()
    with Memory(path, embedder=emb, read_only=True) as mem:
        with pytest.raises(MemsifError):
            mem.search("Lisbon", k=2)
        q = emb.embed(["Where does Maya live?"], kind="query")[0]
        with pytest.raises(MemsifError), mem._session() as db, db.read():
            db.facts.nearest(q, 2)
