"""The change log, as_of reads and undo (issue 27, docs/history.md): real files, the real model,
the fake LLM server over HTTP; the state is read from the file directly."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import file_at_schema, raw
from memsif_lite.db.rewind import unpack
from memsif_lite import Config, Memory, prompts, store
from memsif_lite.errors import InvalidInputError, NotFoundError, StorageCorruptError
from memsif_lite.timeutil import now_stored

CITIES = ["Lisbon", "Porto", "Madrid", "Berlin", "Oslo"]


def fact_state(path: Path) -> dict[str, set]:
    """Everything a CoreFact change may write, read from the file."""
    with raw(path) as con:
        return {
            "facts": set(con.execute("SELECT * FROM core_facts").fetchall()),
            "sources": set(con.execute("SELECT * FROM fact_sources").fetchall()),
            "history": set(con.execute("SELECT * FROM fact_history").fetchall()),
            "vectors": {(r, bytes(v)) for r, v in con.execute("SELECT rowid, embedding FROM fact_vec")},
        }


def _ana(mem: Memory) -> None:
    t = datetime(2024, 1, 1, 9)
    mem.add("Ana", "I live in Lisbon.", at=t)
    mem.add("Bob", "The weather is awful today, it keeps raining.", at=t + timedelta(hours=1))
    mem.add("Ana", "I moved to Porto last month.", at=t + timedelta(days=60))
    mem.add("Bob", "Football tonight? The match starts at eight.", at=t + timedelta(days=60, hours=1))
    mem.add("Ana", "My favourite food is pizza.", at=t + timedelta(days=120))
    mem.add("Bob", "Did you see the game?", at=t + timedelta(days=150))


# -- the log ------------------------------------------------------------------------------------------
def test_every_fact_change_placement_and_forget_is_logged(db, embedder):
    with Memory(db, embedder=embedder) as mem:
        _ana(mem)
        facts = {f.stmt: f for f in mem.facts(include_superseded=True)}
        lisbon, porto = facts["Ana lives in Lisbon"], facts["Ana lives in Porto"]
        log = mem.changes()
        assert [c.op for c in mem.changes(op="fact")] == ["fact.add", "fact.supersede", "fact.add"]
        sup = mem.changes(op="fact.supersede")[0]
        assert sup.actor == "rule" and sup.summary == "Ana: Ana lives in Porto" and sup.undoable
        assert set(sup.fact_ids) == {lisbon.id, porto.id} and sup.ids["messages"] == (3,)
        assert [c.id for c in mem.changes(fact_id=lisbon.id)] == [c.id for c in log if lisbon.id in c.fact_ids]
        assert {c.ids["messages"][0] for c in log if c.op == "place"} == set(range(1, 7))  # every message placed
        assert any(c.op == "link" and c.ids.get("trajectories") for c in log)
        assert mem.changes(actor="llm") == [] and len(mem.changes(actor="rule")) == len(log)
        assert mem.changes(since="2999-01-01") == [] and mem.changes(until="2000-01-01") == []
        assert mem.changes(limit=2) == log[:2]
        for bad in ({"fact_id": "1"}, {"actor": ""}, {"since": "yesterday"}, {"limit": -1}):
            with pytest.raises(InvalidInputError):
                mem.changes(**bad)
        # forget: logged as the user's, its content erased from the rows that held it
        mem.forget(message_id=1)
        forget = mem.changes(op="forget")[-1]
        assert forget.actor == "user" and forget.ids["messages"] == (1,) and not forget.undoable
        first = mem.changes(fact_id=lisbon.id)[0]
        assert first.summary is None and not first.undoable
    with raw(db) as con:
        blob = json.dumps([[unpack(v) if isinstance(v, bytes) else v for v in r]
                           for r in con.execute("SELECT * FROM change_log")])
    assert "Lisbon" not in blob  # nothing of what was forgotten is kept in the log


def test_log_is_append_only_and_explains_every_fact(db, embedder):
    """Property (d) on one history: rows are only added (forget erases content, never a row), and
    every CoreFact and every placed message is named by a log row."""
    with Memory(db, embedder=embedder) as mem:
        seen: dict[int, tuple] = {}
        for step in range(3):
            _ana_extra = [("Ana", f"I moved to {CITIES[(step + 2) % 5]}.", datetime(2024, 6 + step, 1))]
            if step == 0:
                _ana(mem)
            for s, t, at in _ana_extra:
                mem.add(s, t, at=at)
            if step == 1:
                mem.undo(mem.changes(op="fact")[-1].id)
            if step == 2:
                mem.forget(message_id=3)
            with raw(db) as con:
                rows = {r[0]: r for r in con.execute("SELECT id, at, actor, op, ids, decision, undoes FROM change_log")}
                facts = {f for (f,) in con.execute("SELECT id FROM core_facts")}
                explained = {f for (f,) in con.execute("SELECT fact_id FROM change_facts")}
                placed = {m for (m,) in con.execute("SELECT message_id FROM message_units")}
                logged = {m for (ids,) in con.execute("SELECT ids FROM change_log WHERE op='place'")
                          for m in json.loads(ids).get("messages", [])}
            assert all(rows[i] == r for i, r in seen.items())  # nothing rewritten, nothing removed
            seen = rows
            assert facts <= explained and placed <= logged


# -- undo ---------------------------------------------------------------------------------------------
def _route_facts(server, script):
    server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Moving house"}',
        prompts.EXTRACT_SYSTEM: lambda: script["extract"].pop(0) if script["extract"] else '{"facts": []}',
        prompts.OPERATION_SYSTEM: lambda: script["op"].pop(0) if script["op"] else '{"op": "add", "target": null}',
    })


def test_undo_rewinds_add_update_merge_supersede_to_the_backups(tmp_path, embedder, llm_server):
    """Property (c) for the four operations an LLM chooses: undoing the newest change, again and
    again, gives exactly the backup taken before the message that made it."""
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    fact = lambda stmt: json.dumps({"facts": [{"subject": "Maya", "type": "Identity", "stmt": stmt,  # noqa: E731
                                               "lines": [1]}]})
    script = {"extract": [fact("Maya lives in Lisbon"), fact("Maya lives in Lisbon, near the river"),
                          fact("Maya lives in Lisbon."), fact("Maya lives in Porto"), fact("Maya has a cat")],
              "op": ['{"op": "update", "target": 1, "stmt": "Maya lives in Lisbon, near the river"}',
                     '{"op": "merge", "target": 1}',
                     '{"op": "supersede", "target": 1, "stmt": "Maya lives in Porto"}']}
    _route_facts(llm_server, script)
    db = tmp_path / "m.db"
    t = datetime(2024, 1, 1, 9)
    backups = []
    with Memory(db, embedder=embedder, config=cfg, llm="openai/test-model", process="inline",
                llm_kwargs=llm_server.llm_kwargs()) as mem:
        for i, text in enumerate(["home sweet home", "the river view", "still here", "new city now: Porto",
                                  "a cat", "bye"]):
            backups.append((mem.changes()[-1].id if mem.changes() else 0, tmp_path / f"b{i}.db"))
            mem.backup(backups[-1][1])
            mem.add("Maya", text, at=t + timedelta(days=30 * i))
        ops = mem.changes(op="fact")
        assert [(c.op, c.actor, c.purpose) for c in ops] == [
            ("fact.add", "llm:openai/test-model", "fact_extract"),
            ("fact.update", "llm:openai/test-model", "fact_operation"),
            ("fact.merge", "llm:openai/test-model", "fact_operation"),
            ("fact.supersede", "llm:openai/test-model", "fact_operation"),
            ("fact.add", "llm:openai/test-model", "fact_operation")]  # chosen among Maya's facts
        for c in reversed(ops):
            report = mem.undo(c.id)
            assert [u.id for u in report.undone] == [c.id]  # the newest: nothing built on it
            before = max(p for last, p in backups if last < c.id)  # the backup just before it
            assert fact_state(db) == fact_state(before), c.op
        assert mem.facts(include_superseded=True) == []
        assert [c.undoes for c in mem.changes(op="undo")] == [c.id for c in reversed(ops)]


def test_undo_takes_back_what_built_on_it_and_nothing_else(tmp_path, embedder):
    db = tmp_path / "m.db"
    with Memory(db, embedder=embedder) as mem:
        _ana(mem)
        add, sup, pizza = mem.changes(op="fact")
        mem.backup(tmp_path / "before.db")
        plan = mem.undo(add.id, dry_run=True)
        assert [c.id for c in plan.undone] == [sup.id, add.id] and plan.dry_run
        assert fact_state(db) == fact_state(tmp_path / "before.db")  # a dry run writes nothing
        mem.undo(add.id)
        left = mem.facts(include_superseded=True)
        assert [f.stmt for f in left] == ["Ana's favourite food is pizza"]  # the unrelated fact stays
        with pytest.raises(InvalidInputError, match="undone already"):
            mem.undo(sup.id)
        with pytest.raises(NotFoundError):
            mem.undo(10_000)
        place = mem.changes(op="place")[0]
        with pytest.raises(InvalidInputError, match="cannot be undone"):
            mem.undo(place.id)
        mem.forget(message_id=5)
        with pytest.raises(InvalidInputError, match="forget: nothing it removed was kept"):
            mem.undo(mem.changes(op="forget")[-1].id)
        with pytest.raises(InvalidInputError, match="cannot be undone"):
            mem.undo(pizza.id)  # its fact was forgotten since


def test_a_fact_stated_again_and_again_keeps_a_small_undo(tmp_path, embedder):
    """A merge's before image names the sources it added, not every source the fact has: a fact
    stated N times once kept N lists of 1..N ids (a million replicated LoCoMo messages: 40 bytes of
    undo a message). Undoing the merges newest first takes each one's source back out, as an image
    in the older form (every source the fact had, which files written before keep) does."""
    db, old = tmp_path / "m.db", tmp_path / "old.db"
    t = datetime(2024, 1, 1, 9)
    with Memory(db, embedder=embedder) as mem:
        for i in range(12):
            mem.add("Ana", "I love jazz.", at=t + timedelta(days=i))
            mem.add("Bob", f"Nice, day {i} of the festival then.", at=t + timedelta(days=i, minutes=1))
        mem.backup(old)
        merges = mem.changes(op="fact.merge")
    assert len(merges) == 11
    with raw(db) as con:
        undos = [json.loads(u) for (u,) in con.execute("SELECT undo FROM change_log WHERE op='fact.merge' ORDER BY id")]
        ana = [m for (m,) in con.execute("SELECT id FROM messages WHERE speaker='Ana' ORDER BY id")]
    assert [u["facts"][0]["before"]["added"] for u in undos] == [[m] for m in ana[1:]]
    assert not any("sources" in u["facts"][0]["before"] for u in undos)
    with apsw.Connection(str(old)) as con:  # the older form of the same images
        for cid, undo in zip([c.id for c in merges], undos, strict=True):
            before = undo["facts"][0]["before"]
            (added,) = before.pop("added")
            before["sources"] = [m for m in ana if m < added]
            con.execute("UPDATE change_log SET undo=? WHERE id=?", (json.dumps(undo), cid))
    with Memory(db, embedder=embedder) as mem, Memory(old, embedder=embedder) as older:
        for k, c in enumerate(reversed(merges)):
            assert [u.id for u in mem.undo(c.id).undone] == [c.id]
            assert [u.id for u in older.undo(c.id).undone] == [c.id]
            state = fact_state(db)
            assert state == fact_state(old)
            assert {m for _, m in state["sources"]} == set(ana[:len(ana) - k - 1])


def test_an_undo_puts_back_exactly_the_sources_a_fact_had(tmp_path, embedder):
    """The image names only the sources a change adds (one the fact holds already is not taken
    back out), and lists all it had once the change removes one; both undo to the sources before."""
    db = tmp_path / "m.db"
    t = datetime(2024, 1, 1, 9)
    with Memory(db, embedder=embedder) as mem:
        for i, text in enumerate(["I love jazz.", "Nice weather.", "See you soon.", "Great match."]):
            mem.add("Ana", text, at=t + timedelta(days=i))
        mem.process()
        (fact,) = mem.facts()
        m1, m2, m3, m4 = (m.id for m in mem.messages())
        base = mem._db  # the data-access layer: a change that adds a held and a new source, and one
        for sources, dropped in (([m1, m2], None), ([m3], m1)):  # that adds one and removes one
            before = fact_state(db)["sources"]
            with base.write():
                with base.changes.record("fact.merge", "rule", undoable=True, facts=[fact.id]):
                    base.facts.add_sources(fact.id, sources)
                    if dropped is not None:
                        base.facts.drop_source(dropped)
            cid = mem.changes()[-1].id
            with raw(db) as con:
                image = json.loads(con.execute("SELECT undo FROM change_log WHERE id=?", (cid,)).fetchone()[0])
            assert image["facts"][0]["before"] == {"row": image["facts"][0]["before"]["row"], "added": [m2]} \
                if dropped is None else image["facts"][0]["before"]["sources"] == [m1]
            assert fact_state(db)["sources"] != before
            mem.undo(cid)
            assert fact_state(db)["sources"] == before == {(fact.id, m1)}
        assert m4


@pytest.mark.parametrize("undo", [
    "not json", "[]", '{"facts": [], "history": "1"}', '{"facts": [{"id": 1}], "history": []}',
    '{"facts": [{"id": 1, "before": {"row": [], "added": []}}], "history": []}',
    '{"facts": [{"id": 1, "before": {"row": [1,2,3,4,5,6,7,8,9,10], "added": "12"}}], "history": []}',
    '{"facts": [{"id": 1, "before": {"row": [1,2,3,4,5,6,7,8,9,10], "sources": [1], "vector": "zz"}}], "history": []}',
    '{"facts": [{"id": true, "before": null}], "history": []}'])
def test_a_damaged_undo_record_is_a_clear_error_and_changes_nothing(tmp_path, embedder, undo):
    db = tmp_path / "m.db"
    with Memory(db, embedder=embedder) as mem:
        _ana(mem)
    cid = [c.id for c in Memory(db, embedder=embedder, read_only=True).changes(op="fact")][-1]
    with apsw.Connection(str(db)) as con:
        con.execute("UPDATE change_log SET undo=? WHERE id=?", (undo, cid))
    state = fact_state(db)
    with Memory(db, embedder=embedder) as mem:
        with pytest.raises(StorageCorruptError, match=f"change {cid} cannot be undone"):
            mem.undo(cid)
    assert fact_state(db) == state


def test_an_undone_decision_is_not_redone_by_a_merge_replay(tmp_path, embedder):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(a, embedder=embedder) as mem:
        _ana(mem)
        mem.backup(b)
        pizza = mem.changes(op="fact")[-1]
        mem.undo(pizza.id)
    with Memory(b, embedder=embedder) as other:  # an earlier message makes the merge replay everything
        other.add("Bob", "Happy new year everyone!", at=datetime(2023, 12, 31, 23))
        assert "Ana's favourite food is pizza" in {f.stmt for f in other.facts()}
    with Memory(a, embedder=embedder) as mem:
        report = mem.merge_from(b)
        assert report.replayed == 7
        stmts = {f.stmt for f in mem.facts(include_superseded=True)}
        assert "Ana's favourite food is pizza" not in stmts and "Ana lives in Porto" in stmts
        merge = mem.changes(op="merge")[-1]
        assert merge.actor.startswith("merge:") and len(merge.actor) == len("merge:") + 32


# -- as_of: valid time --------------------------------------------------------------------------------
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(moves=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 90)), min_size=1, max_size=4),
       probe=st.integers(0, 400))
def test_as_of_shows_what_was_valid_then_and_nothing_said_later(tmp_path_factory, embedder, moves, probe):
    """Property (b): context(q, as_of=T) holds no message said after T and no fact that began after
    T, and facts(as_of=T) are exactly those valid at T, superseded since or not."""
    db = tmp_path_factory.mktemp("asof") / "m.db"
    t = datetime(2024, 1, 1, 9)
    with Memory(db, embedder=embedder) as mem:
        mem.add("Ana", f"I live in {CITIES[moves[0][0]]}.", at=t)
        for city, gap in moves[1:]:
            t += timedelta(days=gap)
            mem.add("Bob", "Any plans for the weekend?", at=t - timedelta(hours=2))
            mem.add("Ana", f"I moved to {CITIES[city]}.", at=t)
        mem.add("Bob", "See you soon.", at=t + timedelta(days=30))
        when = datetime(2024, 1, 1) + timedelta(days=probe)
        every = mem.facts(include_superseded=True)
        valid = {f.id for f in every if f.valid_from <= when and (f.valid_to is None or f.valid_to > when)}
        got = mem.facts(as_of=when)
        assert {f.id for f in got} == valid and all(f.valid_to is None for f in got)
        ctx = mem.context("Where does Ana live?", as_of=when)
        assert all(e.at <= when for e in ctx.evidence)
        assert all(mem.get(m).at <= when for m in ctx.message_ids)
        assert all(f.valid_from <= when and f.valid_to is None for f in ctx.facts)
        assert {f.id for f in ctx.facts if f.kind == "core"} >= valid  # the one place Ana lived then
        assert all(m.at <= when for m in mem.messages(as_of=when))
        assert all(h.at <= when for h in mem.search("Ana", as_of=when))
        for level in ("message", "segment"):  # for messages, as_of is a time window: the one until= gives
            assert mem.search("Where does Ana live?", level=level, as_of=when) == mem.search(
                "Where does Ana live?", level=level, until=when)
        segs = mem.segments(as_of=when)
        assert {m for s in segs for m in s.message_ids} == {m.id for m in mem.messages(as_of=when)}
        assert {m for tr in mem.trajectories(as_of=when) for m in tr.message_ids} <= {
            m for s in segs if s.closed for m in s.message_ids}


# -- an existing file ---------------------------------------------------------------------------------
def test_a_schema_10_file_gets_its_log(tmp_path, embedder):
    from memsif_lite.pipelines import initial_meta

    old = tmp_path / "old.db"
    file_at_schema(old, 10, embedder.dim, initial_meta(embedder)).close()  # the previous release's file
    assert store.inspect(old).user_version == 10
    shutil.copy(old, tmp_path / "old2.db")
    with Memory(old, embedder=embedder) as mem:
        assert mem.changes() == []  # nothing to explain yet
        assert store.inspect(old).user_version == store.latest_version()
        mem.add("Ana", "I live in Lisbon.", at="2024-01-01")
    old2 = tmp_path / "old2.db"
    con = apsw.Connection(str(old2))  # a schema 10 file holding facts already
    con.execute("INSERT INTO core_facts(id, subject, type, stmt, valid_from, created_at, updated_at, origin) "
                "VALUES(7, 'Ana', 'Identity', 'Ana lives in Oslo', '2023-01-01T00:00:00', '2023-01-01T00:00:00', "
                "'2023-01-01T00:00:00', 'rule')")
    con.close()
    with Memory(old2, embedder=embedder) as mem:
        base = mem.changes()
        assert [(c.op, c.actor, c.fact_ids, c.undoable) for c in base] == [("baseline", "memsif", (7,), False)]
        assert mem.changes(fact_id=7) == base
    with raw(old2) as con:
        assert len(con.execute("SELECT value FROM meta WHERE key='file_id'").fetchone()[0]) == 32


# -- the command line ---------------------------------------------------------------------------------
def test_log_and_undo_from_the_command_line(tmp_path, embedder):
    from click.testing import CliRunner

    from memsif_lite.cli import main

    db = tmp_path / "m.db"
    with Memory(db, embedder=embedder) as mem:
        _ana(mem)
        add = mem.changes(op="fact")[0]
    learnt = now_stored()
    run = CliRunner().invoke
    out = run(main, ["log", "--db", str(db), "--op", "fact"])
    assert out.exit_code == 0 and "fact.supersede by rule: Ana: Ana lives in Porto" in out.output
    doc = json.loads(run(main, ["log", "--db", str(db), "--fact", "1", "--json"]).output)
    assert [c["op"] for c in doc["changes"]] == ["fact.add", "fact.supersede"]
    dry = run(main, ["undo", str(add.id), "--dry-run", "--db", str(db)])
    assert dry.exit_code == 0 and dry.output.startswith("would undo 2 changes")
    assert len(Memory(db, embedder=embedder, read_only=True).facts(include_superseded=True)) == 3
    done = json.loads(run(main, ["undo", str(add.id), "--db", str(db), "--json"]).output)
    assert done["dry_run"] is False and [c["op"] for c in done["undone"]] == ["fact.supersede", "fact.add"]
    again = run(main, ["undo", str(add.id), "--db", str(db)])
    assert again.exit_code == 1 and "undone already" in again.output and "Traceback" not in again.output
    then = json.loads(run(main, ["facts", "--db", str(db), "--known-at", learnt, "--all",
                                 "--json"]).output)  # record time: as the file held them before the undo
    assert len(then["facts"]) == 3  # the undo took back two of them since
    assert json.loads(run(main, ["facts", "--db", str(db), "--known-at", learnt, "--active", "--json"]).output) == {
        "active_facts": []}
    assert run(main, ["messages", "--db", str(db), "--known-at", "tomorrow"]).exit_code == 1
    run(main, ["forget", "--db", str(db), "--message", "2"])
    forget_id = json.loads(run(main, ["log", "--db", str(db), "--op", "forget", "--json"]).output)["changes"][0]["id"]
    refused = run(main, ["undo", str(forget_id), "--db", str(db)])
    assert refused.exit_code == 1 and "nothing it removed was kept" in refused.output
    asof = json.loads(run(main, ["facts", "--db", str(db), "--as-of", "2024-02-01", "--json"]).output)
    assert asof["facts"] == []  # the Lisbon fact was undone


def test_forget_leaves_no_image_of_a_wording_its_message_made(tmp_path, embedder, llm_server):
    """A CoreFact that outlives a forget (it has other sources) was worded once by the forgotten
    message; a later update's before image held that wording, and the forget erases it too."""
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    fact = lambda stmt: json.dumps({"facts": [{"subject": "Maya", "type": "Identity", "stmt": stmt,  # noqa: E731
                                               "lines": [1]}]})
    script = {"extract": [fact("Maya lives in Lisbon"), fact("Maya lives in Lisbon near Secretgarden"),
                          fact("Maya lives in Lisbon downtown")],
              "op": ['{"op": "update", "target": 1, "stmt": "Maya lives in Lisbon near Secretgarden"}',
                     '{"op": "update", "target": 1, "stmt": "Maya lives in Lisbon downtown"}']}
    _route_facts(llm_server, script)
    db = tmp_path / "m.db"
    t = datetime(2024, 1, 1, 9)
    with Memory(db, embedder=embedder, config=cfg, llm="openai/test-model", process="inline",
                llm_kwargs=llm_server.llm_kwargs()) as mem:
        ids = [mem.add("Maya", text, at=t + timedelta(days=i)) for i, text in enumerate(
            ["home sweet home in Lisbon", "the garden view near Secretgarden", "Lisbon downtown now", "bye"])]
        assert [f.stmt for f in mem.facts()] == ["Maya lives in Lisbon downtown"]
        mem.forget(message_id=ids[1])
        assert [f.stmt for f in mem.facts()] == ["Maya lives in Lisbon downtown"]  # it outlives the forget
    with raw(db) as con:
        blob = json.dumps([(s, u, unpack(b)) for s, u, b in
                           con.execute("SELECT summary, undo, images FROM change_log")])
    assert "Secretgarden" not in blob
