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
                assert db.facts.nearest(qv, k) == db.facts.knn("fact_vec", qv, k), (q, k)
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
