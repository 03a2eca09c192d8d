"""Merges carry the change log; imports are logged (issue 27, docs/history.md "Merges"): real files,
the real model, a deterministic fake LLM over real HTTP; the log is read from the file directly."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakes import file_at_schema, lives_in_reply, raw
from memsif_lite.db.rewind import unpack
from memsif_lite import Memory, MemoryFileError

MODEL = "openai/test-model"


def deterministic_llm(req: dict) -> str:
    """A fake LLM that answers from what the prompt says (:func:`fakes.lives_in_reply`)."""
    return lives_in_reply(req)


def with_llm(path: Path, embedder, server) -> Memory:
    server.default = deterministic_llm
    return Memory(path, embedder=embedder, llm=MODEL, process="inline", llm_kwargs=server.llm_kwargs())


def file_id(path: Path) -> str:
    with raw(path) as con:
        return con.execute("SELECT value FROM meta WHERE key='file_id'").fetchone()[0]


def log_rows(path: Path) -> list[tuple]:
    with raw(path) as con:
        return con.execute("SELECT id, at, actor, op, purpose, summary, ids, undo, decision, undoes, origin, uid "
                           "FROM change_log ORDER BY id").fetchall()


def texts(path: Path, ids) -> list[str]:
    with raw(path) as con:
        return [con.execute("SELECT text FROM messages WHERE id=?", (i,)).fetchone()[0] for i in ids]


T = datetime(2024, 1, 1, 9)


def test_a_merge_carries_the_other_files_log_once(tmp_path, embedder, llm_server):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with with_llm(b, embedder, llm_server) as mem:
        mem.add("Maya", "I live in Lisbon.", at=T)
        mem.add("Bob", "Lovely weather for a walk by the river.", at=T + timedelta(days=1))
        mem.add("Maya", "I moved to Porto.", at=T + timedelta(days=40))
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=41))
        theirs = mem.changes()
    assert {"fact.add", "fact.supersede"} <= {c.op for c in theirs}
    assert {c.actor for c in theirs if c.op.startswith("fact.")} == {f"llm:{MODEL}"}
    with with_llm(a, embedder, llm_server) as mem:
        mem.add("Ana", "I live in Oslo.", at=T + timedelta(days=10))
        mine = mem.changes()
        report = mem.merge_from(b)
        assert report.changes_copied == len(theirs)
        log = mem.changes()
        copied = [c for c in log if c.origin is not None]
        # B's changes, in B's order, with B's record times, actors and summaries, from B's file
        assert [(c.op, c.actor, c.at, c.summary) for c in copied] == [(c.op, c.actor, c.at, c.summary)
                                                                       for c in theirs]
        assert {c.origin for c in copied} == {file_id(b)}
        assert log[:len(mine)] == mine  # what was here stays as it was
        for c, t in zip(copied, theirs, strict=True):  # message ids are this file's, naming the same messages
            assert texts(a, c.ids.get("messages", ())) == texts(b, t.ids.get("messages", ()))
            assert set(c.ids) <= {"messages"}
        merge = next(c for c in log if c.op == "merge")
        assert merge.actor == f"merge:{file_id(b)}" and merge.origin is None
        facts = {f.stmt: f for f in mem.facts(include_superseded=True)}
        porto = facts["Maya lives in Porto"]
        # the fact's history shows B's decisions next to the replay's here
        about = mem.changes(fact_id=porto.id)
        assert {(c.op, c.origin) for c in about} >= {("fact.supersede", file_id(b)), ("fact.supersede", None)}
        # merging again copies nothing and logs nothing
        again = mem.merge_from(b)
        assert again.changes_copied == 0 and again.added == 0 and mem.changes() == log
    rows = log_rows(a)
    assert len({r[-1] for r in rows}) == len(rows)  # uids are unique


def test_a_change_from_the_other_file_is_undone_like_one_made_here(tmp_path, embedder, llm_server):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with with_llm(b, embedder, llm_server) as mem:
        mem.add("Maya", "I live in Lisbon.", at=T)
        mem.add("Maya", "I moved to Porto.", at=T + timedelta(days=40))
        mem.add("Bob", "Did you watch the football match?", at=T + timedelta(days=41))
    with with_llm(a, embedder, llm_server) as mem:
        mem.add("Ana", "I live in Oslo.", at=T + timedelta(days=10))
        mem.merge_from(b)
        mem.backup(tmp_path / "before.db")
        sup = next(c for c in mem.changes(op="fact.supersede") if c.origin is not None)
        assert sup.actor == f"llm:{MODEL}" and sup.undoable
        plan = mem.undo(sup.id, dry_run=True)
        local = [c for c in plan.undone if c.origin is None]
        assert [c.op for c in local] == ["fact.supersede"] and sup in plan.undone
        report = mem.undo(sup.id)
        assert [c.id for c in report.undone] == [c.id for c in plan.undone]
        current = {f.stmt for f in mem.facts()}
        assert "Maya lives in Lisbon" in current and "Maya lives in Porto" not in current
        assert mem.changes(op="fact.supersede")[-1].undone_by is not None
        with pytest.raises(Exception, match="undone already"):
            mem.undo(sup.id)
    # the undone decision is remembered: a merge that replays Maya's messages does not redo it
    with with_llm(b, embedder, llm_server) as mem:
        mem.add("Bob", "Happy new year!", at=T - timedelta(days=1))
    with with_llm(a, embedder, llm_server) as mem:
        assert mem.merge_from(b).replayed >= 3
        assert "Maya lives in Porto" not in {f.stmt for f in mem.facts(include_superseded=True)}
        assert "Maya lives in Lisbon" in {f.stmt for f in mem.facts()}


def _ana(mem: Memory) -> None:
    mem.add("Ana", "I live in Lisbon.", at=T)
    mem.add("Bob", "The weather is awful today, it keeps raining.", at=T + timedelta(hours=1))
    mem.add("Ana", "My favourite food is pizza.", at=T + timedelta(days=120))
    mem.add("Bob", "Did you see the game?", at=T + timedelta(days=150))


def test_an_undo_made_in_a_copy_is_made_here_by_the_merge(tmp_path, embedder):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(a, embedder=embedder) as mem:
        _ana(mem)
        mem.backup(b)
        pizza = mem.changes(op="fact")[-1]
        assert pizza.summary.endswith("pizza")
    with Memory(b, embedder=embedder) as mem:
        mem.undo(pizza.id)
        mem.add("Bob", "See you on Monday.", at=T + timedelta(days=200))
    with Memory(a, embedder=embedder) as mem:
        report = mem.merge_from(b)
        assert report.changes_copied >= 2  # the undo, the placement, ...
        assert "Ana's favourite food is pizza" not in {f.stmt for f in mem.facts(include_superseded=True)}
        undo = mem.changes(op="undo")
        assert [c.undoes for c in undo] == [pizza.id] and undo[0].actor == "user" and undo[0].origin is not None
        assert mem.changes(fact_id=pizza.fact_ids[0])[0].undone_by == undo[0].id


def test_what_was_forgotten_is_not_brought_back_by_the_log(tmp_path, embedder):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):  # two files that learnt the same thing on their own
        with Memory(path, embedder=embedder) as mem:
            _ana(mem)
    with Memory(a, embedder=embedder) as mem:
        mem.forget(message_id=1)
        report = mem.merge_from(b)
        assert report.changes_copied > 0 and report.added == 0
        assert "Ana lives in Lisbon" not in {f.stmt for f in mem.facts(include_superseded=True)}
        pizza = next(f for f in mem.facts() if "pizza" in f.stmt)
        assert any(c.origin is not None for c in mem.changes(fact_id=pizza.id))
        mem.forget(fact_id=pizza.id)  # a copied change about a fact forgotten here keeps nothing either
    blob = json.dumps(log_rows(a))
    assert "Lisbon" not in blob and "pizza" not in blob


def test_import_is_logged(tmp_path, embedder):
    with Memory(tmp_path / "a.db", embedder=embedder) as mem:
        _ana(mem)
        mem.export_to(tmp_path / "a.jsonl")
    with Memory(tmp_path / "c.db", embedder=embedder) as mem:
        mem.import_from(tmp_path / "a.jsonl")
        [row] = mem.changes()
        assert row.op == "import" and row.actor == "user" and not row.undoable
        assert set(row.fact_ids) == {f.id for f in mem.facts(include_superseded=True)} != set()
        assert set(row.ids["messages"]) == {m for s in mem.segments() for m in s.message_ids}
        assert set(row.ids["segments"]) == {s.id for s in mem.segments()}


@pytest.mark.parametrize("column, value", [("actor", "llm:\x00evil"), ("op", "drop table"),
                                           ("decision", "zz"), ("at", "yesterday"), ("undoes", 10_000)])
def test_a_hostile_log_is_refused_and_nothing_changes(tmp_path, embedder, column, value):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(b, embedder=embedder) as mem:
        _ana(mem)
    con = apsw.Connection(str(b))
    con.execute(f"UPDATE change_log SET {column}=? WHERE id=2", (value,))
    con.close()
    with Memory(a, embedder=embedder) as mem:
        mem.add("Bob", "Hello there.", at=T)
        before = log_rows(a)
        with pytest.raises(MemoryFileError, match="change 2 is not one memsif_lite logs"):
            mem.merge_from(b)
        assert log_rows(a) == before and len(mem.messages()) == 1


def _schema_11_file(path: Path, dim: int, meta: dict[str, str]) -> None:
    con = file_at_schema(path, 11, dim, meta)
    con.execute("INSERT INTO change_log(at, actor, op, summary, ids) VALUES('2024-01-01T00:00:00', 'rule', 'place', "
                "NULL, '{\"messages\":[1]}')")
    con.close()


def test_copies_upgraded_apart_name_their_changes_alike(tmp_path, embedder):
    """A schema 11 file and its copy, each upgraded on its own: their old changes get the same uid,
    so merging one into the other copies nothing twice (and a schema 11 file is read as it is)."""
    from memsif_lite.pipelines import initial_meta

    a, b, c = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "c.db"
    _schema_11_file(a, embedder.dim, initial_meta(embedder))
    b.write_bytes(a.read_bytes())
    c.write_bytes(a.read_bytes())
    for path in (a, b):
        Memory(path, embedder=embedder).close()
    assert log_rows(a)[0][-1] == log_rows(b)[0][-1] is not None
    with Memory(a, embedder=embedder) as mem:
        assert mem.merge_from(b).changes_copied == 0
        assert mem.merge_from(c).changes_copied == 0  # read as schema 11, uids computed alike
        assert len(mem.changes()) == 1


# -- property (d), for any history --------------------------------------------------------------------
SAYS = ["I live in Lisbon.", "I moved to Porto.", "My favourite food is pizza.", "I work at Acme as an engineer.",
        "The weather is awful today.", "Did you see the game?", "I moved to Oslo."]
STEP = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(["Ana", "Bob"]), st.integers(0, len(SAYS) - 1), st.integers(0, 90)),
    st.tuples(st.just("add_there"), st.sampled_from(["Ana", "Bob"]), st.integers(0, len(SAYS) - 1),
              st.integers(0, 90)),
    st.tuples(st.just("forget"), st.integers(0, 10)),
    st.tuples(st.just("undo"), st.integers(0, 10)),
    st.tuples(st.just("merge")),
)


def _snapshot(path: Path) -> tuple[dict[int, tuple], bool]:
    """The log's rows, and whether every CoreFact and every placed message is explained by one."""
    with raw(path) as con:
        rows = {r[0]: r for r in con.execute("SELECT * FROM change_log")}
        facts = {f for (f,) in con.execute("SELECT id FROM core_facts")}
        explained = {f for (f,) in con.execute("SELECT fact_id FROM change_facts")}
        placed = {m for (m,) in con.execute("SELECT message_id FROM message_units")}
        named = {m for (ids,) in con.execute("SELECT ids FROM change_log WHERE origin IS NULL AND op IN "
                                             "('place', 'merge', 'import')")
                 for m in json.loads(ids).get("messages", [])}
    return rows, facts <= explained and placed <= named


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(STEP, min_size=2, max_size=8))
@example(steps=[("add", "Ana", 0, 1), ("add", "Bob", 4, 2), ("add_there", "Ana", 1, 50), ("add_there", "Bob", 5, 51),
                ("undo", 0), ("merge",), ("forget", 1), ("add", "Ana", 6, 60), ("add", "Bob", 5, 61), ("merge",)])
def test_the_log_is_append_only_and_explains_every_derived_row(tmp_path_factory, embedder, steps):
    """Property (d) for any sequence of adds (here and in a copy), forgets, undos and merges: a row is
    never removed nor changed, but for its content erased by a forget (summary, images); every
    CoreFact and every placed message is named by a change of this file."""
    d = tmp_path_factory.mktemp("d")
    a, b = d / "a.db", d / "b.db"
    with Memory(a, embedder=embedder) as mem:
        mem.add("Ana", "Hello!", at=T)
        mem.backup(b)
    seen: dict[int, tuple] = {}
    for step in steps:
        kind = step[0]
        with Memory(b if kind == "add_there" else a, embedder=embedder) as mem:
            if kind in ("add", "add_there"):
                mem.add(step[1], SAYS[step[2]], at=T + timedelta(days=step[3], hours=len(seen)))
            elif kind == "forget":
                ids = [m.id for m in mem.messages()]
                if len(ids) > 1:
                    mem.forget(message_id=ids[step[1] % len(ids)])
            elif kind == "undo":
                fact = [c for c in mem.changes(op="fact") if c.undoable]
                if fact:
                    mem.undo(fact[step[1] % len(fact)].id)
            else:
                mem.merge_from(b)
        rows, explained = _snapshot(a)
        for i, before in seen.items():
            now = rows[i]
            # forget erases content only: the summary and undo images (5, 7), some before images (12)
            kept = [c for c in range(len(before)) if c not in (5, 7, 12)]
            assert [now[c] for c in kept] == [before[c] for c in kept], (step, before, now)
            assert all(now[c] in (before[c], None) for c in (5, 7)), (step, before, now)
            was, left = unpack(before[12]) or {}, unpack(now[12]) or {}
            if step[0] == "forget":  # a merge may rename messages in them (renumbered), a forget only erases
                assert all(e in was.get(t, []) for t, es in left.items() for e in es), (step, before, now)
            assert (now[5], now[7]) in ((before[5], before[7]), (None, None)), (step, before, now)
        assert explained, step
        seen = rows
