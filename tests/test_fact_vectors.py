"""The in-process copy of ``fact_vec`` (the CoreFact neighbours each fact decision reads) gives
vec0's answer — the same facts, distances and order, ties by id — across adds, forgets, undo, a
merge and another process's writes."""

from __future__ import annotations

import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Memory
from memsif_lite.db.messages import cached_search

LINES = ["I love climbing, it's the best part of my week.", "I stopped climbing because of my shoulder.",
         "I work at Globex, it is close to home.", "I quit my job at Globex yesterday.",
         "I live in Leeds, near the market.", "We moved to York last weekend, the flat is bigger.",
         "I'm vegetarian, so no meat for me please.", "I'm no longer vegetarian, to be honest.",
         "I quit smoking two weeks ago.", "Ugh, I'm smoking again since the exams.",
         "I accepted the offer from Acme, starting Monday.", "I started running last month, every morning."]
DAY0 = datetime(2024, 5, 6, 9)

ops_st = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, len(LINES) - 1), st.sampled_from(["Sam", "Ava"])),
    st.tuples(st.just("forget_message"), st.integers(0, 30), st.none()),
    st.tuples(st.just("forget_fact"), st.integers(0, 30), st.none()),
    st.tuples(st.just("undo"), st.integers(0, 30), st.none()),
    st.tuples(st.just("merge"), st.integers(0, len(LINES) - 1), st.none()),
    st.tuples(st.just("other"), st.integers(0, len(LINES) - 1), st.sampled_from(["Sam", "Ava"]))),
    min_size=1, max_size=14)


def _said(mem: Memory, day: int, speaker: str, text: str) -> None:
    """A line and a reply, then a closing remark days later: the segment closes, its facts are written."""
    at = DAY0 + timedelta(days=day)
    mem.add_many([{"speaker": speaker, "text": text, "at": at},
                   {"speaker": "Bo", "text": "Thanks for telling me.", "at": at + timedelta(minutes=1)},
                   {"speaker": "Bo", "text": "Unrelated remark about the weather.", "at": at + timedelta(days=3)}])


def _vec0(db, q: np.ndarray, k: int) -> list[tuple[int, float]]:
    """vec0's ``k`` nearest, ties by id: its KNN over every row, cut at ``k`` (a KNN asked for
    ``k`` keeps any of the rows tied at the cut, not the lowest ids)."""
    return db.facts.knn("fact_vec", q, 4096)[:k]


def _agrees(mem: Memory, rng: np.random.Generator, emb: FakeEmbedder) -> None:
    db = mem._db
    stmts = [f.stmt for f in mem.facts(include_superseded=True)]
    queries = list(emb.embed(stmts[:4], kind="query")) + list(rng.standard_normal((2, emb.dim)).astype(np.float32))
    with db.read():
        for q in queries:
            for k in (1, 5, 50):
                got = cached_search(db.con, db.fact_vectors, q, k)
                assert got is not None  # the cache answered
                assert got == _vec0(db, q, k)
                assert db.facts.nearest(q, k) == got


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_st, seed=st.integers(0, 2**16))
@example(ops=[("add", 6, "Sam"), ("merge", 7, None), ("add", 6, "Sam")], seed=0)  # ties cut by k
def test_cached_fact_neighbours_equal_vec0s(ops, seed):
    rng = np.random.default_rng(seed)
    emb = FakeEmbedder()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.db"
        with Memory(path, embedder=emb) as mem:
            for day, (op, i, who) in enumerate(ops):
                day *= 5
                if op == "add":
                    _said(mem, day, who, LINES[i])
                elif op == "forget_message":
                    ids = [m.id for m in mem.messages()]
                    if ids:
                        mem.forget(message_id=ids[i % len(ids)])
                elif op == "forget_fact":
                    facts = mem.facts(include_superseded=True)
                    if facts:
                        mem.forget(fact_id=facts[i % len(facts)].id)
                elif op == "undo":
                    undoable = [c for c in mem.changes() if c.undoable]
                    if undoable:
                        mem.undo(undoable[i % len(undoable)].id)
                elif op == "merge":
                    other = Path(d) / f"o{day}.db"
                    with Memory(other, embedder=emb) as o:
                        _said(o, day - 2, "Sam", LINES[i])
                    mem.merge_from(other)
                else:  # another process (connection) writes: the cache reloads
                    with Memory(path, embedder=emb) as o:
                        _said(o, day, who, LINES[i])
                _agrees(mem, rng, emb)


def test_an_update_and_its_undo_move_the_cached_vector_with_vec0s(tmp_path):
    """An Update rewrites a fact's vector (only an LLM chooses it: written here as its step does),
    its undo puts the old one back: the cache follows both, inside and after each transaction."""
    emb = FakeEmbedder()
    rng = np.random.default_rng(3)
    with Memory(tmp_path / "m.db", embedder=emb) as mem:
        for day, line in enumerate(LINES[:6]):
            _said(mem, 5 * day, "Sam", line)
        fact = mem.facts()[0]
        _agrees(mem, rng, emb)
        db = mem._db
        new = "Sam adores bouldering in the hills"
        with db.write(), db.changes.record("fact.update", "llm", summary=f"Sam: {new}", undoable=True):
            db.facts.rewrite(fact.id, new, emb.embed([new], kind="passage")[0], "2024-09-01T00:00:00")
            q = emb.embed([new], kind="query")[0]
            assert db.facts.nearest(q, 3) == _vec0(db, q, 3)  # staged, not committed yet
            assert db.facts.nearest(q, 1)[0][0] == fact.id
        _agrees(mem, rng, emb)
        assert db.facts.nearest(q, 1)[0][0] == fact.id
        mem.undo(mem.changes(op="fact.update")[-1].id)
        _agrees(mem, rng, emb)
        assert db.facts.nearest(q, 1) == _vec0(db, q, 1)
        assert mem.facts()[0].stmt == fact.stmt


def test_a_schema_15_file_migrates_and_reads_its_facts_by_subject_in_any_case(tmp_path):
    """Schema 16 indexes the current CoreFacts by subject in any case (what every fact decision
    reads): a file from before gets the index and its facts are read as before."""
    from fakes import file_at_schema, raw
    from memsif_lite import store
    from memsif_lite.pipelines import initial_meta

    emb = FakeEmbedder()
    path = tmp_path / "old.db"
    con = file_at_schema(path, 15, emb.dim, initial_meta(emb))
    with store.write(con):
        for fid, subject, ftype, stmt, valid_to in [(1, "Sam", "Preference", "Sam loves tea", None),
                                                    (2, "sam", "Preference", "Sam loves coffee", None),
                                                    (3, "SAM", "Event", "Sam ran a race", None),
                                                    (4, "Sam", "Preference", "Sam loved milk", "2024-02-01T00:00:00"),
                                                    (5, "Ava", "Preference", "Ava loves tea", None)]:
            con.execute("INSERT INTO core_facts(id, subject, type, stmt, valid_from, valid_to, created_at, updated_at, "
                        "origin) VALUES(?,?,?,?,'2024-01-01T00:00:00',?,'2024-01-01T00:00:00',"
                        "'2024-01-01T00:00:00','rule')", (fid, subject, ftype, stmt, valid_to))
    con.close()
    with Memory(path, embedder=emb) as mem:
        facts = mem._db.facts
        assert [r.id for r in facts.current_of("sAm")] == [3, 2, 1]
        assert [r.id for r in facts.current_like("Sam", "Preference")] == [2, 1]
        assert [r.id for r in facts.current_like("Sam", "Preference", limit=1)] == [2]
        plan = " ".join(str(r) for r in mem._db.con.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM core_facts WHERE valid_to IS NULL AND lower(subject)=lower(?) "
            "AND type=? ORDER BY id DESC LIMIT 20", ("sam", "Event")))
        assert "core_facts_current_subject_type" in plan and "TEMP B-TREE" not in plan
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version() >= 16
