"""``known_at=``: reads at a point in record time (issue 27, property (a); docs/history.md "Two
clocks"). Real files, the real model, the deterministic fake LLM over real HTTP; record time comes
from a stepped clock (``timeutil.record_clock``), never from sleeping."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakes import file_at_schema, raw
from memsif_lite.db.rewind import unpack
from memsif_lite import Config, Evidence, InvalidInputError, Memory, MemoryFileError, store
from memsif_lite.timeutil import record_clock, to_stored
from test_history_merge import MODEL, SAYS, deterministic_llm

T = datetime(2024, 1, 10, 9, 0)          # valid time: when things were said
R0 = datetime(2026, 3, 1, 12, 0)         # record time: when memsif learnt them
CFG = Config(theta_s=0.3, theta_q=0.3)   # ActiveFacts promote after two questions
QUESTIONS = ["Where does Ana live?", "Which city is Ana's home?", "Where is Bob living now?"]

STEP = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["Ana", "Bob"]), st.integers(0, len(SAYS) - 1), st.integers(0, 90)),
    st.tuples(st.just("add_later"), st.sampled_from(["Ana", "Bob"]), st.integers(0, len(SAYS) - 1),
              st.integers(0, 90)),
    st.tuples(st.just("add_there"), st.sampled_from(["Ana", "Bob"]), st.integers(0, len(SAYS) - 1),
              st.integers(0, 90)),
    st.tuples(st.just("process")),
    st.tuples(st.just("merge")),
    st.tuples(st.just("accumulate"), st.integers(0, len(QUESTIONS) - 1)),
    st.tuples(st.just("undo"), st.integers(0, 10)),
    st.tuples(st.just("forget"), st.integers(0, 10)),
)


def _open(path: Path, embedder, server, *, later: bool = False) -> Memory:
    server.default = deterministic_llm
    return Memory(path, embedder=embedder, llm=MODEL, config=CFG, llm_kwargs=server.llm_kwargs(),
                  process="manual" if later else "inline")


def _state(mem: Memory, known_at: str | None = None) -> dict:
    """What property (a) compares: the messages (by content: a merge that places a message again
    gives it a new id), every CoreFact (all its fields: wording, validity, successor, sources,
    origin), every Topical Segment and Event Trajectory (all fields), and the ActiveFacts (id,
    cluster, subject, statement: their clusters' evidence is not rewound); message ids as what the
    messages say (a merge gives a message placed again a new id, and a rewind names it by that)."""
    at = {} if known_at is None else {"known_at": known_at}
    said = {m.id: (m.speaker, m.text, m.at) for m in mem.messages(**at)}

    def by_content(xs: list) -> list:  # message ids as what they say: a merge renumbers messages
        return [dataclasses.replace(x, message_ids=tuple(said.get(m, m) for m in x.message_ids)) for x in xs]

    return {
        "messages": sorted(said.values()),
        "facts": by_content(mem.facts(include_superseded=True, **at)),
        "segments": by_content(mem.segments(**at)),
        "trajectories": by_content(mem.trajectories(**at)),
        "active": [(a.id, a.cluster_id, a.subject, a.stmt) for a in mem.active_facts(**at)],
    }


def _run(d: Path, embedder, server, steps) -> tuple[Path, list[tuple[str, Path]], int]:
    """Play ``steps`` on a.db (b.db: a copy that receives its own adds), one minute of record time
    each; after each step a backup of a.db. Returns a.db, (record time, backup) per step, and
    the index of the first step after the last forget (earlier checkpoints are not compared)."""
    a, b = d / "a.db", d / "b.db"
    with record_clock(lambda: R0):
        with _open(a, embedder, server) as mem:
            mem.add("Ana", "Hello!", at=T)
            mem.backup(b)
    points: list[tuple[str, Path]] = []
    first = 0
    for i, step in enumerate(steps):
        now = R0 + timedelta(minutes=i + 1)
        kind = step[0]
        with record_clock(lambda now=now: now), _open(b if kind == "add_there" else a, embedder, server,
                                              later=kind == "add_later") as mem:
            if kind in ("add", "add_later", "add_there"):
                mem.add(step[1], SAYS[step[2]], at=T + timedelta(days=step[3], hours=i))
            elif kind == "process":
                mem.process()
            elif kind == "merge":
                mem.merge_from(b)
            elif kind == "accumulate":
                ids = [m.id for m in mem.messages()][-3:]
                mem.accumulate(QUESTIONS[step[1]], [Evidence("Ana lives in Lisbon", "Ana", (m,)) for m in ids])
            elif kind == "undo":
                fact = [c for c in mem.changes(op="fact") if c.undoable]
                if fact:
                    mem.undo(fact[step[1] % len(fact)].id)
            else:
                ids = [m.id for m in mem.messages()]
                if len(ids) > 1:
                    mem.forget(message_id=ids[step[1] % len(ids)])
                    first = i
            copy = d / f"at{i}.db"
            if kind != "add_there":
                mem.backup(copy)
        if kind == "add_there":
            with Memory(a, embedder=embedder, read_only=True) as mem:
                mem.backup(copy)
        points.append((to_stored(now), copy))
    return a, points, first


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(STEP, min_size=3, max_size=9))
@example(steps=[("add", "Ana", 0, 1), ("add_there", "Ana", 1, 40), ("add_later", "Bob", 6, 3),
                ("accumulate", 0), ("accumulate", 1), ("merge",), ("process",), ("undo", 0), ("add", "Ana", 6, 60),
                ("accumulate", 1)])
def test_known_at_equals_a_backup_taken_then(tmp_path_factory, embedder, llm_server, steps):
    """Property (a): for any sequence of adds (here, here processed later, and in a copy merged in),
    processing, merges, ActiveFact evidence, undos and forgets, reading the final file ``known_at``
    the record time of a step gives what a backup taken right after that step holds. Checkpoints
    before the last forget are left out by construction: a forget erases what it removes from the
    log too (docs/history.md), so no read can show it again."""
    d = tmp_path_factory.mktemp("k")
    a, points, first = _run(d, embedder, llm_server, steps)
    with _open(a, embedder, llm_server) as mem:
        for i, (k, copy) in enumerate(points):
            if i < first:
                continue
            with _open(copy, embedder, llm_server) as then:
                assert _state(mem, k) == _state(then), (i, steps[i])


def test_known_at_differs_from_as_of_after_a_merge(tmp_path, embedder, llm_server):
    """The two clocks apart: a message said in January but merged in today is in ``as_of`` reads of
    January and absent from ``known_at`` reads before the merge; the facts and context follow."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with record_clock(lambda: R0), _open(a, embedder, llm_server) as mem:
        mem.add("Ana", "I live in Lisbon.", at=T)
        mem.add("Bob", "Lovely weather for a walk by the river.", at=T + timedelta(days=1))
        mem.backup(b)
    with record_clock(lambda: R0 + timedelta(days=1)), _open(b, embedder, llm_server) as other:
        other.add("Ana", "I moved to Porto.", at=T + timedelta(days=40))
        other.add("Bob", "Did you watch the football match?", at=T + timedelta(days=41))
    with record_clock(lambda: R0 + timedelta(days=2)), _open(a, embedder, llm_server) as mem:
        mem.merge_from(b)
        before_merge = to_stored(R0 + timedelta(days=1, hours=12))
        assert [f.stmt for f in mem.facts()] == ["Ana lives in Porto"]
        assert [f.stmt for f in mem.facts(known_at=before_merge)] == ["Ana lives in Lisbon"]
        assert "I moved to Porto." not in [m.text for m in mem.messages(known_at=before_merge)]
        assert len(mem.messages(as_of=T + timedelta(days=40))) == 3  # said by then, learnt later
        ctx = mem.context("Where does Ana live?", known_at=before_merge)
        assert "Porto" not in ctx.text and "Lisbon" in ctx.text
        assert [f.stmt for f in ctx.facts if f.kind == "core"] == ["Ana lives in Lisbon"]
        assert all(h.text != "I moved to Porto." for h in mem.search("Porto", known_at=before_merge))
        assert mem.facts(known_at=R0 - timedelta(days=1)) == [] and mem.segments(known_at="2026-01-01") == []
        for bad in ("yesterday", 5):
            with pytest.raises(InvalidInputError):
                mem.facts(known_at=bad)


def test_a_schema_12_file_migrates_its_record_times(tmp_path, embedder):
    """Schema 13 on a file made at schema 12: each message's record time is its ``created_at``
    (the documented fallback), the log gets its ``before`` column, empty for the old rows."""
    from memsif_lite.pipelines import initial_meta

    path = tmp_path / "old.db"
    con = file_at_schema(path, 12, embedder.dim, initial_meta(embedder))
    with store.write(con):
        con.execute("INSERT INTO messages(id, speaker, text, at, session, source_id, content_hash, created_at) "
                    "VALUES(1, 'Ana', 'I live in Lisbon.', '2024-01-10T09:00:00', NULL, NULL, x'00', "
                    "'2025-05-05T10:00:00')")
        con.execute("INSERT INTO change_log(at, actor, op, summary, ids, uid) VALUES('2025-05-05T10:00:00', 'rule', "
                    "'place', NULL, '{\"messages\":[1]}', 7)")
    con.close()
    with Memory(path, embedder=embedder, read_only=True) as mem:  # read as it is: no record times yet
        assert len(mem.messages()) == 1
        for read in (lambda: mem.messages(known_at="2025-05-05"), lambda: mem.segments(known_at="2025-05-05")):
            with pytest.raises(MemoryFileError, match="open it once for writing"):
                read()
    with Memory(path, embedder=embedder) as mem:
        assert [m.text for m in mem.messages(known_at="2025-05-05T10:00:00")] == ["I live in Lisbon."]
        assert mem.messages(known_at="2025-05-05T09:59:59") == []
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] >= 13
        assert con.execute("SELECT known_at FROM messages").fetchall() == [("2025-05-05T10:00:00",)]
        assert all(b is None for (b,) in con.execute("SELECT images FROM change_log"))


def test_an_import_is_learnt_when_it_runs(tmp_path, embedder, llm_server):
    """Everything an import loads is learnt at the import: nothing before it, all of it after."""
    src, dest, export = tmp_path / "src.db", tmp_path / "dest.db", tmp_path / "x.jsonl"
    with record_clock(lambda: R0), _open(src, embedder, llm_server) as mem:
        mem.add("Ana", "I live in Lisbon.", at=T)
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=3))
        mem.export_to(export)
    with record_clock(lambda: R0 + timedelta(days=1)), _open(dest, embedder, llm_server) as mem:
        mem.import_from(export)
        now = _state(mem)
        assert now["facts"] and now["segments"]
        assert _state(mem, to_stored(R0 + timedelta(days=1))) == now
        assert _state(mem, to_stored(R0 + timedelta(hours=23))) == {
            "messages": [], "facts": [], "segments": [], "trajectories": [], "active": []}


def test_forget_keeps_no_image_of_what_it_forgot(tmp_path, embedder, llm_server):
    """A known_at read before a forget cannot show what it erased: no before image holds it."""
    path = tmp_path / "m.db"
    with record_clock(lambda: R0), _open(path, embedder, llm_server) as mem:
        mid = mem.add("Ana", "I live in Lisbon.", at=T)
        mem.add("Bob", "I moved to Oslo.", at=T + timedelta(days=1))
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=30))
    with record_clock(lambda: R0 + timedelta(hours=1)), _open(path, embedder, llm_server) as mem:
        mem.forget(message_id=mid)
        then = mem.facts(known_at=R0)
        assert [f.stmt for f in then] == ["Bob lives in Oslo"]
        assert all(mid not in s.message_ids for s in mem.segments(known_at=R0))
    with raw(path) as con:
        blob = json.dumps([(unpack(b), s) for b, s in con.execute("SELECT images, summary FROM change_log")])
    assert "Lisbon" not in blob and "lisbon" not in blob


def test_a_merge_keeps_no_image_of_what_the_other_file_forgot(tmp_path, embedder, llm_server):
    """The other file forgot a message this one holds: the merge removes it, and no before image
    of the merge (nor of earlier changes) keeps its text or what was derived from it."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with _open(a, embedder, llm_server) as mem:
        mid = mem.add("Ana", "I live in Lisbon.", at=T)
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=3))
        mem.backup(b)
    with _open(b, embedder, llm_server) as other:
        other.forget(message_id=mid)
    with _open(a, embedder, llm_server) as mem:
        assert mem.merge_from(b).removed_by_tombstones == 1
        assert mem.facts() == []
    with raw(a) as con:
        blob = json.dumps([(unpack(b), s, u) for b, s, u in
                           con.execute("SELECT images, summary, undo FROM change_log")])
    assert "isbon" not in blob


def test_record_clock_is_restored(tmp_path):
    from memsif_lite.timeutil import now_stored

    with record_clock(lambda: R0):
        assert now_stored() == to_stored(R0)
    assert now_stored() > to_stored(R0)


def test_a_forget_keeps_the_images_of_other_rows(tmp_path, embedder, llm_server):
    """A forget erases the images of the rows it touched, not whole changes: structure read at a
    record time before later messages never shows them, nor does one before anything."""
    path = tmp_path / "m.db"
    with record_clock(lambda: R0), _open(path, embedder, llm_server) as mem:
        for i in range(6):
            mem.add("Ana", f"I baked rye bread again today, loaf number {i}.", at=T + timedelta(minutes=i))
        then = mem.segments()
        assert [s.message_ids for s in then] == [(1, 2, 3, 4, 5, 6)]
        linked = [tuple(m for m in t.message_ids if m != 1) for t in mem.trajectories()]
    with record_clock(lambda: R0 + timedelta(hours=1)), _open(path, embedder, llm_server) as mem:
        for i in range(3):
            mem.add("Bob", f"The football match went to extra time, part {i}.", at=T + timedelta(days=20, minutes=i),
                    session="2")
    with record_clock(lambda: R0 + timedelta(hours=2)), _open(path, embedder, llm_server) as mem:
        mem.forget(message_id=1)
        assert [m.id for m in mem.messages(known_at=R0)] == [2, 3, 4, 5, 6]
        assert [s.message_ids for s in mem.segments(known_at=R0)] == [(2, 3, 4, 5, 6)]
        assert mem.segments(known_at=R0 - timedelta(days=1)) == []
        assert [t.message_ids for t in mem.trajectories(known_at=R0)] == linked


def test_context_at_a_record_time_shows_the_sources_then(tmp_path, embedder, llm_server):
    """``context(known_at=K)``: a CoreFact's sources are those it had at K, not a merge's later ones."""
    path = tmp_path / "m.db"
    with record_clock(lambda: R0), _open(path, embedder, llm_server) as mem:
        first = mem.add("Ana", "I live in Lisbon.", at=T)
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=30))
        [fact] = mem.facts()
        assert fact.message_ids == (first,)
    with record_clock(lambda: R0 + timedelta(hours=1)), _open(path, embedder, llm_server) as mem:
        again = mem.add("Ana", "I live in Lisbon.", at=T + timedelta(days=60))
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=90))
        assert [f.message_ids for f in mem.facts()] == [(first, again)]
        core = [f for f in mem.context("Where does Ana live?", known_at=R0).facts if f.kind == "core"]
        assert [(f.id, f.message_ids) for f in core] == [(fact.id, (first,))]


def test_a_merge_renumbering_keeps_the_ids_of_then(tmp_path, embedder, llm_server):
    """A merge's rebuild stores messages again under new ids: rewound placements and sources name
    them by those ids, as ``messages(known_at=K)`` does."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with record_clock(lambda: R0), _open(a, embedder, llm_server) as mem:
        mem.backup(b)
        mem.add("Ana", "I live in Lisbon.", at=datetime(2024, 1, 1, 9))
        mem.add("Bob", "Did you watch the football match?", at=datetime(2024, 1, 3, 9))
        mem.process()
    with record_clock(lambda: R0), _open(b, embedder, llm_server) as other:
        other.add("Cleo", "Lovely weather for a walk by the river.", at=datetime(2024, 1, 2, 9))
    k = R0 + timedelta(hours=1)
    with record_clock(lambda: R0 + timedelta(hours=2)), _open(a, embedder, llm_server) as mem:
        mem.merge_from(b)
        ids = [m.id for m in mem.messages(known_at=k)]
        assert len(ids) == 2 and ids != [1, 2]
        assert sorted(m for s in mem.segments(known_at=k) for m in s.message_ids) == ids
        assert {m for f in mem.facts(known_at=k) for m in f.message_ids} <= set(ids)
        assert [f.message_ids for f in mem.facts(known_at=k)] == [(ids[0],)]
