# ruff: noqa: F811  (the fixtures of test_partition are imported, then named as parameters)
"""The dense partition (and bounded BM25) against what a cold review of issue 31 found: a version
number given twice, lists lost or damaged, a huge id in a hostile file, an inline ``add`` that had
committed, the row-by-row fallback and time windows, the cost of deciding whether training is
due, and BM25's split queries. Each test failed before its fix."""

from __future__ import annotations

import random

import apsw
import pytest
from fakes import FakeEmbedder, raw
from test_partition import conversation, filled, filled_file, query, small_partition, tamper  # noqa: F401 (fixtures)

from memsif_lite import Config, Memory, partition
from memsif_lite.db import bm25
from memsif_lite.partitioning import refresh
from memsif_lite.retrieval import SPEAKER_WEIGHT

def _retrain(mem: Memory) -> None:
    """The partition row gone (as test_partition's damage test does), then trained again."""
    with mem._db.write():
        mem._db.con.execute("DELETE FROM vector_partition")
    assert refresh(mem._db).trained


# -- a version number is never given twice: a live reader's index must not meet another version's lists
def test_a_retrained_partition_never_reuses_a_version_and_a_live_reader_goes_on(small_partition, memory, db):
    with memory(process="manual") as first:
        first.add_many(conversation(2400))
        _retrain(first)  # the file's lists are version 1
    reader = memory(process="manual")
    assert reader._db.partition.current().version == 1
    reader._db.messages.nearest(query(3), 3)  # loaded list by list (contiguous index, 98 lists)
    assert reader._db.vectors._index is not None and reader._db.vectors._index.is_contiguous
    writer = memory(process="manual")
    writer.add_many(conversation(1600, 2400))
    _retrain(writer)  # the row deleted: a version from the stamp, never 1 again; 126 lists now
    assert writer._db.partition.current().version > 1
    # (before: version 1 again, and IndexError in partition.probe: 98 list sizes, 126 centroids)
    hits = reader._db.messages.nearest(query(3), 3)
    truth = dict(reader._db.messages.knn("message_vec", query(3), 4096))
    assert all(truth[m] == pytest.approx(d, abs=1e-6) for m, d in hits)


# -- what lost its list is named by check and listed again by process ----------------------------
def test_process_lists_again_a_damaged_block(filled, db):
    filled.close()
    tamper(db, "UPDATE vector_lists SET lists = x'0102' WHERE block = 0")
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert any("vector_lists" in p for p in mem.check())  # "... until `memsif process` lists them again"
        mem.process()  # lists the block's messages again
        assert mem.check() == []


def test_check_names_lists_that_are_gone_and_process_lists_them_again(filled, db):
    filled.close()
    tamper(db, "DELETE FROM vector_lists")  # every message unlisted: each search scans every row again
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem._db.messages.nearest(query(1), 5)
        cache = mem._db.vectors
        assert (cache._lists[:cache.size] == partition.NONE).all()
        assert any("missing" in p for p in mem.check())
        mem.process()
        assert mem.check() == []
        mem._db.messages.nearest(query(1), 5)
        assert (cache._lists[:cache.size] != partition.NONE).all()
    tamper(db, "DELETE FROM meta WHERE key = 'partition_stamp'")  # the partition off for good: named
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert any("partition_stamp" in p for p in mem.check())


# -- a huge message id in a hostile file allocates nothing for it ----------------------------------
def test_a_huge_message_id_is_harmless(filled, db):
    filled.close()
    with raw(db) as con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(messages)") if r[1] not in ("id", "content_hash")]
    rest = ",".join(cols)
    tamper(db, f"INSERT INTO messages(id, content_hash, {rest}) SELECT {2 ** 62}, randomblob(32), {rest} "
               "FROM messages WHERE id=1")
    with Memory(db, embedder=FakeEmbedder()) as mem:
        hits = mem._db.messages.nearest(query(1), 5)  # (before: an array of max(id)+1 lists: MemoryError)
        assert len(hits) == 5 and mem._db.vectors._list_map.slot.nbytes < 1 << 20


# -- an offline inline add that committed never raises for the partition ---------------------------
def test_an_inline_add_that_committed_does_not_raise(small_partition, tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    mem = Memory(path, embedder=FakeEmbedder(), config=Config(busy_timeout_ms=200))
    try:
        mem.add_many(conversation(499))
        other = apsw.Connection(str(path))
        real = partition.train

        def train(*a, **k):  # another process takes the write lock while this one trains (seconds at 1M)
            other.execute("BEGIN IMMEDIATE")
            return real(*a, **k)

        monkeypatch.setattr(partition, "train", train)
        try:
            mid = mem.add("Ana", "the five hundredth message")  # (before: StorageBusyError, message stored)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert [m.text for m in mem.messages() if m.id == mid] == ["the five hundredth message"]
    finally:
        mem.close()


# -- bm25's split queries score each row as the plain OR does, up to the rounding of the sum --------
def test_split_expressions_score_as_the_plain_or_up_to_rounding(tmp_path):
    rng = random.Random(1)
    words = [f"w{i}" for i in range(8)]
    path = tmp_path / "bm.db"
    with Memory(path, embedder=FakeEmbedder()) as mem:
        mem.add_many([{"speaker": "Ana", "text": " ".join(rng.choice(words[:rng.randint(3, 8)])
                                                          for _ in range(rng.randint(3, 30)))} for _ in range(300)])
    sql = "SELECT rowid, bm25(message_fts, ?, 1.0) FROM message_fts WHERE message_fts MATCH ?"
    with raw(path) as con:
        terms, common = ["w2", "w5", "w3"], ["w2"]  # a common word asked before the rarer ones
        rare = [t for t in terms if t not in common]
        plain = dict(con.execute(sql, (SPEAKER_WEIGHT, bm25.or_query(terms))))
        both = dict(con.execute(sql, (SPEAKER_WEIGHT, f"({bm25.or_query(rare)}) AND ({bm25.or_query(common)})")))
        assert both and all(s == pytest.approx(plain[r], rel=1e-12, abs=1e-12) for r, s in both.items())



# -- after the row-by-row fallback the cache still serves time windows -----------------------------
def test_a_chunk_vec0_refuses_still_lets_a_time_window_be_searched(filled, db):
    """A chunk that does not look as sqlite-vec writes it: the cache reads rows one by one, and
    still loads every time when a time window comes (vec0's own KNN refuses that chunk)."""
    filled.close()
    tamper(db, "UPDATE message_vec_chunks SET rowids = rowids || x'00' WHERE chunk_id = 1")
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert len(mem.search("t3w0 t3w1")) == 10  # unfiltered: the cache, read row by row
        assert len(mem.search("t3w0 t3w1", since="2000-01-01")) == 10  # (before: StorageError from vec0)


# -- deciding whether training is due does not read every id at every add -------------------------
def test_an_add_does_not_read_every_message_id_when_no_training_is_due(small_partition, memory, monkeypatch):
    """With ids forgotten the highest id runs ahead of the count: one count says how far the
    highest id must grow before training can be due; the adds before that read no ids."""
    from memsif_lite.db.partition import PartitionRows

    mem = memory()
    mem.add_many(conversation(600))  # trained on 600 (the inline refresh after the add)
    assert mem._db.partition.current().trained_rows == 600
    for mid in range(2, 40, 2):
        mem.forget(message_id=mid)
    mem.add_many(conversation(2400 - 600, 600))  # highest id 2400 = GROWTH x 600, 2381 messages
    calls = []
    real = PartitionRows.message_ids
    monkeypatch.setattr(PartitionRows, "message_ids", lambda self: calls.append(1) or real(self))
    for i in range(5):
        mem.add("Ana", f"one more message {i}")
    assert mem._db.partition.current().trained_rows == 600  # nothing was trained...
    assert len(calls) <= 1, f"...yet {len(calls)} adds each read every message id"  # (before: 5)


# -- a segment or trajectory of a long life adds none of its members as candidates -----------------
def test_a_unit_over_the_member_cap_lends_its_score_only_to_members_already_ranked(memory, monkeypatch):
    from memsif_lite import retrieval

    mem = memory()
    mem.add_many(conversation(600))
    r = mem._p.retriever
    q = "t3w0 t3w1 t3w2"
    own = retrieval.rrf(r.dense(r.embed_query(q), 10, None), r.bm25(q, 10, None))
    whole = dict(r.rank_with_structure(q, depth=10))
    monkeypatch.setattr(retrieval, "MEMBER_CAP", 10**9)
    assert dict(r.rank_with_structure(q, depth=10)) == whole  # under the cap: every member a candidate
    monkeypatch.setattr(retrieval, "MEMBER_CAP", 0)  # every unit over it
    capped = dict(r.rank_with_structure(q, depth=10))
    assert set(capped) == set(own)  # no member added, only the ranked ones lent their units' score
    assert all(capped[m] >= own[m] for m in own) and any(capped[m] > own[m] for m in own)
    segs = mem._db.structure.units_by_best_member(list(own))["segment"]
    assert mem._db.structure.members("segment", segs, cap=0) == {}  # their members were never read
    assert set(mem._db.structure.members("segment", segs, cap=10**9)) == set(segs)
