"""A forget of many messages (a ``source_id``) does its per-file work once (forgetting.Batch): the
change log is searched for rows citing what was shown with them in one pass, and each segment
and trajectory that lost members is recomputed once, at the end. The file it leaves is the one
forgetting the same messages one after another in the same transaction leaves, byte for byte but
for the change log's random ``uid``."""
from __future__ import annotations

import random
import shutil
from datetime import datetime, timedelta

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Config, Memory
from memsif_lite.forgetting import Batch, forget_message
from memsif_lite.timeutil import record_clock

T = datetime(2024, 3, 1, 9)
R0, R1 = datetime(2026, 5, 1, 12), datetime(2026, 5, 2, 12)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.3)
SOURCES = ("mail", "chat", "notes")
LINES = [
    "I live in Lisbon near the river", "My sister Rita works as a nurse in Porto", "I love green tea in the morning",
    "We went hiking in Sintra last weekend", "I started marathon training with a long run",
    "My dog Bruno loves the beach",
    "I love sourdough bread from the corner bakery", "Rita moved to Braga for a new hospital job",
    "The marathon is in October and the long run went well", "I work as an architect at a small studio",
]


EXTRA = ["really", "today", "again", "so much", "you know", "honestly"]
#: "whole": every message of a trajectory of several segments; "open": the open segment's; "seg": a
#: linked segment's whose trajectory keeps others; "mail" and "chat": every other message, alternating
SOURCES = ("whole", "open", "seg", "mail", "chat")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Messages in topical runs of four (a segment each; segments of recurring topics linked into
    trajectories), CoreFacts from them (their change rows cite them), ActiveFact queries, titles
    on every segment and trajectory (an LLM's, as a closing step writes them), and change rows such
    as a merged-in LLM summary leaves: citing one message, worded with another of its segment (a
    forget of that one erases them). Sources as :data:`SOURCES` says. All made at record time R0."""
    path = tmp_path_factory.mktemp("batch") / "m.db"
    rng = random.Random(7)
    with record_clock(lambda: R0), Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        ids = [mem.add("Ana" if i % 3 else "Ben", LINES[(i // 4 * 3) % len(LINES)] + " " + EXTRA[i % 6],
                       at=T + timedelta(days=i // 4, minutes=3 * i)) for i in range(48)]
        mem.process()
        mem.context("Where does Rita work?")
        mem.context("What does Ana love?")
        segments, trajectories = mem.segments(), mem.trajectories()
        whole = next(t for t in trajectories if len(t.segment_ids) > 1)
        seg = next(s for t in trajectories if t is not whole and len(t.segment_ids) > 1
                   for s in segments if s.id == t.segment_ids[0])
        sources = {m: "whole" for m in whole.message_ids}
        sources.update({m: "open" for m in segments[-1].message_ids if not segments[-1].closed})
        sources.update({m: "seg" for m in seg.message_ids})
        db = mem._db
        with db.write():
            for i, m in enumerate(ids):
                db.con.execute("UPDATE messages SET source_id=? WHERE id=?", (sources.get(m, SOURCES[3 + i % 2]), m))
            db.con.execute("UPDATE segments SET title='Talk ' || id")
            db.con.execute("UPDATE trajectories SET title=(SELECT title FROM segments "
                           "WHERE trajectory_id=trajectories.id ORDER BY id LIMIT 1)")
            for i in range(0, 48, 3):
                other = ids[i + 1 if i % 4 < 3 else i - 1]
                said = db.messages.get(ids[i])
                db.changes.write("fact.merge", "llm:test", ids={"messages": [other]},
                                 summary=f"{said.speaker}: {said.text} {rng.choice(['Zephyr', 'Quillon', 'Marlow'])}")
        assert set(sources.values()) == {"whole", "open", "seg"} and mem.check() == []
    return path


def _dump(path) -> dict[str, list]:
    con = apsw.Connection(str(path))
    try:
        tables = [t for (t,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
            "AND sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")]
        out = {}
        for t in tables:
            cols = [r[1] for r in con.execute(f"PRAGMA table_xinfo('{t}')")]
            keep = ", ".join(f'"{c}"' for c in cols if not (t == "change_log" and c == "uid"))
            out[t] = list(con.execute(f'SELECT {keep} FROM "{t}" ORDER BY 1'))
        return out  # (a virtual table's rows are those of its shadow tables)
    finally:
        con.close()


def _forget_one_by_one(path, source: str, speaker: str | None) -> list[int]:
    """What ``forget(source_id=...)`` did before the batch: each message's forget recomputes its
    segment and trajectory and searches the log on its own (the path a merge still takes)."""
    with record_clock(lambda: R1), Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        db = mem._db
        ids = db.messages.with_source(source, speaker)
        with db.write(), db.changes.record("forget", "user") as change:
            for mid in ids:
                forget_message(db, mid, mem._p.active_facts)
            change.touch("messages", ids)
            db.changes.redact(facts=list(change.images), messages=ids)
    return ids


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(source=st.sampled_from(SOURCES), speaker=st.sampled_from([None, "Ana", "Ben"]))
@example(source="whole", speaker=None).via("a trajectory emptied")
@example(source="open", speaker=None).via("the open segment emptied")
@example(source="seg", speaker=None).via("a linked segment emptied, its trajectory kept")
def test_a_batched_forget_leaves_the_file_one_by_one_forgets_leave(base, tmp_path_factory, source, speaker):
    d = tmp_path_factory.mktemp("f")
    batched, single = d / "batched.db", d / "single.db"
    shutil.copy(base, batched)
    shutil.copy(base, single)
    with record_clock(lambda: R1), Memory(batched, embedder=FakeEmbedder(), config=CFG) as mem:
        gone = mem.forget(source_id=source, speaker=speaker)
        assert mem.check() == []
    assert gone == _forget_one_by_one(single, source, speaker) and gone
    after, want = _dump(batched), _dump(single)
    assert after.keys() == want.keys()
    for t in want:
        assert after[t] == want[t], t
    assert _dump(base)["segments"] != after["segments"]  # the forget did change the structure


def test_a_forget_by_source_searches_the_log_and_recomputes_each_unit_once(base, tmp_path):
    path = tmp_path / "m.db"
    shutil.copy(base, path)
    seen: list[str] = []
    with record_clock(lambda: R1), Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        ids = mem._db.messages.with_source("mail", None)
        units = {(mem._db.structure.segment_of_message(m), None) for m in ids}
        trajectories = {mem._db.structure.trajectory_of_segment(s) for s, _ in units} - {None}
        mem._db.con.exec_trace = lambda _cur, sql, _args: seen.append(sql) or True
        mem.forget(source_id="mail")
        mem._db.con.exec_trace = None
    searches = [s for s in seen if "json_each(c.ids, '$.messages')" in s]
    recomputes = [s for s in seen if "JOIN message_vec v ON v.rowid=u.message_id" in s]
    assert len(ids) >= 10 and trajectories
    assert 1 <= len(searches) <= 3, len(searches)  # one pass; a top-up for a message shown later
    assert len(recomputes) == len(units) + len(trajectories), (len(recomputes), len(units), len(trajectories))


_ops = st.lists(st.one_of(st.tuples(st.just("ask"), st.sets(st.integers(0, 47), max_size=6)),
                          st.tuples(st.just("write"), st.sets(st.integers(0, 47), min_size=1, max_size=3)),
                          st.tuples(st.just("erase"), st.integers(0, 10**6))), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.sets(st.integers(0, 47), max_size=12), ops=_ops)
@example(first={1, 2}, ops=[("ask", {1, 2}), ("write", {1}), ("ask", {1, 2})]).via("a row written since the search")
@example(first={1}, ops=[("ask", {1}), ("ask", {1, 30})]).via("a message not searched for yet")
@example(first={1, 2}, ops=[("ask", {1, 2}), ("erase", 0), ("ask", {1, 2})]).via("a row erased since")
def test_the_batch_reads_the_rows_a_fresh_search_of_the_log_reads(base, tmp_path_factory, first, ops):
    """Whatever messages each call asks about (some never asked before), with rows written and
    erased between calls, the batch's answer is what searching the whole log then gives."""
    path = tmp_path_factory.mktemp("n") / "m.db"
    shutil.copy(base, path)
    with Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
        db = mem._db
        ids = [m.id for m in mem.messages()]
        with db.write():
            batch = Batch(db, [ids[i] for i in sorted(first)] or ids[:1])
            asked: list[int] = []
            for op, arg in ops:
                if op == "ask":
                    asked = [ids[i] for i in sorted(arg)]
                    want = [(rid, text, cited) for rid, text, cited, _ in db.changes.naming(asked)]
                    assert batch.naming(asked) == want
                elif op == "write":
                    db.changes.write("fact.merge", "llm:test", ids={"messages": [ids[i] for i in sorted(arg)]},
                                     summary="Zephyr said so")
                else:  # one the last call found, mostly
                    found = [r[0] for r in db.changes.naming(asked or ids)]
                    if found:
                        db.changes.erase([found[arg % len(found)]])
