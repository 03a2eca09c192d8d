"""Hostile data (issue 24): poisoned but schema-valid files and exports, ids that must never be
reused, and extreme or malformed arguments. Only memsif's own errors may come out."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, as_schema_18, raw
from memsif_lite import InvalidInputError, Memory, MemsifError, NotFoundError, StorageCorruptError
from memsif_lite.db.rewind import pack
from memsif_lite.errors import InvalidMessageError

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from make_hostile import CRAFTED_ROWS, POISONED_STEPS, crafted_export, poison_queue, set_value  # noqa: E402

T0 = datetime(2024, 1, 1, 10)


def _two(mem: Memory) -> list[int]:
    return [mem.add("Ana", "I moved to Porto last spring.", at=T0),
            mem.add("Ben", "Porto is lovely in the spring.", at=T0 + timedelta(minutes=5))]


# -- 24.4: a poisoned row is set aside, later writes go on -------------------------------------------
@pytest.mark.parametrize("label,kind,seg,payload", POISONED_STEPS, ids=[p[0] for p in POISONED_STEPS])
def test_a_poisoned_queue_row_is_reported_and_set_aside_and_adds_go_on(memory, db, label, kind, seg, payload):
    with memory() as mem:
        _two(mem)
    poison_queue(db, kind, seg, payload)
    mem = memory()
    assert any("queued step (message 1, sub 7) cannot run" in p for p in mem.check())
    new = mem.add("Ana", "My sister lives in Lisbon.", at=T0 + timedelta(minutes=9))  # raised before: every add
    assert mem.get(new).text == "My sister lives in Lisbon."
    assert new in [m for s in mem.segments() for m in s.message_ids]
    with raw(db) as con:
        assert con.execute("SELECT count(*) FROM work_queue").fetchone()[0] == 0
    assert mem.check() == []


def test_a_poisoned_row_is_set_aside_by_process_too(memory, db):
    with memory() as mem:
        _two(mem)
    poison_queue(db, "bogus", None, None)
    with memory(process="manual") as mem:
        mem.add("Ana", "My sister lives in Lisbon.", at=T0 + timedelta(minutes=9))
        report = mem.process()
        assert report.set_aside == 1 and report.pending == 0 and report.steps >= 1


def test_a_garbage_message_time_is_a_corrupt_file_error_and_check_reports_it(memory, db):
    with memory() as mem:
        a, _ = _two(mem)
    set_value(db, "messages", "at", "not a time", a)
    with memory() as mem:
        with pytest.raises(StorageCorruptError, match="not a memsif timestamp"):
            mem.messages()  # a raw ValueError before
        with pytest.raises(StorageCorruptError):
            mem.get(a)
        assert any("not a memsif timestamp (first: message 1)" in p for p in mem.check())


def test_a_short_running_sum_is_a_corrupt_file_error_and_check_reports_it(memory, db):
    with memory() as mem:
        _two(mem)
        (sid,) = {s.id for s in mem.segments() if not s.closed} or {mem.segments()[-1].id}
    con = apsw.Connection(str(db))  # the open segment's sum (schema 16: segment_sums)
    con.execute("UPDATE segment_sums SET vec_sum=? WHERE segment_id=?", (b"\x00" * 7, sid))
    con.close()
    with memory() as mem:
        assert any(f"segment {sid}: its running sum holds 7 bytes" in p for p in mem.check())
        with pytest.raises(StorageCorruptError, match=f"segment {sid} cannot be read"):
            mem.add("Ana", "And the river is calm.", at=T0 + timedelta(minutes=7))  # placement reads the sum
        assert mem.stats()["messages"] == 2


@pytest.fixture
def export_lines(memory, tmp_path):
    with memory() as mem:
        _two(mem)
        mem.add("Ana", "I started a new job as a nurse.", at=T0 + timedelta(days=2))  # closes a segment
        mem.forget(message_id=mem.add("Ben", "Scratch that.", at=T0 + timedelta(days=3)))  # a tombstone
        mem.export_to(tmp_path / "good.jsonl")
    return (tmp_path / "good.jsonl").read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("label,table,column,value", CRAFTED_ROWS, ids=[c[0] for c in CRAFTED_ROWS])
def test_import_refuses_a_crafted_export_naming_its_line_and_loads_nothing(memory, tmp_path, export_lines, label,
                                                                           table, column, value):
    lines, line = crafted_export(export_lines, table, column, value)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with memory(path=tmp_path / "fresh.db") as mem:
        with pytest.raises(InvalidInputError, match=f"^export line {line}: "):
            mem.import_from(bad)
        assert mem.stats()["messages"] == 0 and mem.stats()["pending_steps"] == 0
        good = tmp_path / "good.jsonl"
        mem.import_from(good)  # the same file still takes a good export
        assert mem.check() == []


# -- 24.8: ids are never reused ------------------------------------------------------------------------
def test_a_stale_forget_never_deletes_another_writers_newer_message(memory, db):
    a, b = memory(), memory()
    _, last = _two(a)
    seen = last  # a reader learns the id...
    a.forget(message_id=last)
    newer = b.add("Cleo", "I just joined the book club.", at=T0 + timedelta(minutes=8))  # ...another writer adds
    assert newer > seen  # took the freed id before
    with pytest.raises(NotFoundError):
        a.forget(message_id=seen)  # the stale forget misses instead of deleting Cleo's message
    assert a.get(newer).speaker == "Cleo"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["add", "add", "forget_last", "forget_first", "reopen"]), min_size=1,
                    max_size=14))
def test_ids_strictly_increase_over_the_files_life(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("ids") / "m.db"
    mem = Memory(path, embedder=FakeEmbedder())
    used: list[int] = []
    try:
        for i, op in enumerate(ops):
            live = [m.id for m in mem.messages()]
            if op == "add":
                mid = mem.add("Ana", f"note number {i} about the garden", at=T0 + timedelta(minutes=i))
                assert not used or mid > max(used)
                used.append(mid)
            elif op.startswith("forget") and live:
                mem.forget(message_id=live[-1] if op == "forget_last" else live[0])
            elif op == "reopen":
                mem.close()
                mem = Memory(path, embedder=FakeEmbedder())
    finally:
        mem.close()


def test_fact_ids_are_never_reused(memory):
    mem = memory()
    mem.add("Ana", "I live in Porto.", at=T0)
    mem.add("Ana", "Completely different topic: my cat is called Miso.", at=T0 + timedelta(days=3))
    facts = mem.facts(include_superseded=True)
    assert facts
    top = max(f.id for f in facts)
    mem.forget(fact_id=top)
    kept = {f.id for f in mem.facts(include_superseded=True)}
    mem.add("Ana", "I work as a nurse at the hospital.", at=T0 + timedelta(days=6))
    mem.add("Ana", "Another topic again: we painted the kitchen.", at=T0 + timedelta(days=9))
    later = [f.id for f in mem.facts(include_superseded=True) if f.id not in kept]
    assert later and min(later) > top  # SQLite alone gives the forgotten top id to the next fact


def test_a_merge_numbers_new_messages_above_every_forgotten_id(memory, tmp_path):
    mine, other = tmp_path / "mine.db", tmp_path / "other.db"
    with memory(path=other) as o:
        o.add("Dee", "I adopted a dog named Rex.", at=T0 + timedelta(days=5))
    with memory(path=mine) as m:
        _, last = _two(m)
        m.forget(message_id=last)
        before = {x.id for x in m.messages()}
        m.merge_from(other)
        new = [x.id for x in m.messages() if x.id not in before]  # brought in, or placed again
        assert new and min(new) > last  # the replayed message took the forgotten id before


def test_an_older_file_gets_its_high_water_marks(memory, db):
    with memory() as mem:
        _two(mem)
    as_schema_18(db, FakeEmbedder().dim)
    con = apsw.Connection(str(db))
    con.execute("DELETE FROM meta WHERE key IN ('message_id_high', 'fact_id_high', 'file_id', 'partition_stamp'); "
                "DROP TABLE vector_lists; DROP TABLE vector_partition; DROP TABLE session_items; "
                "DROP TABLE change_facts; DROP TABLE change_log; "
                "UPDATE segments SET vec_sum=coalesce((SELECT vec_sum FROM segment_sums WHERE segment_id=id), "
                "vec_sum); "
                "DROP TABLE segment_sums; "
                "DROP INDEX messages_known_at; DROP INDEX core_facts_current_subject; "
                "DROP INDEX core_facts_current_subject_type; "
                "CREATE INDEX messages_speaker_at ON messages(speaker, at); "
                "DROP INDEX messages_content_key; CREATE INDEX messages_content_hash ON messages(content_hash); "
                "ALTER TABLE messages DROP COLUMN known_at; PRAGMA user_version=9")  # as schema 9 was
    con.close()
    with memory() as mem:
        assert mem.add("Ana", "Back again.", at=T0 + timedelta(hours=1)) == 3
    with raw(db) as con:
        assert con.execute("SELECT value FROM meta WHERE key='message_id_high'").fetchone() == ("2",)


def test_forget_by_source_id_and_speaker(memory, db, embedder):
    mem = memory(embedder=embedder)  # the bundled model: the CLI below opens the file with it
    a = mem.add("Ana", "I moved to Porto.", at=T0, source_id="D1:1")
    b = mem.add("Ben", "Porto is lovely.", at=T0 + timedelta(minutes=1), source_id="D1:1")
    c = mem.add("Ana", "I like tea.", at=T0 + timedelta(minutes=2), source_id="D1:2")
    assert mem.forget(source_id="D1:1", speaker="  Ana ") == [a]
    assert [m.id for m in mem.messages()] == [b, c]
    assert mem.forget(source_id="D1:1") == [b]
    with pytest.raises(NotFoundError, match="D1:1"):
        mem.forget(source_id="D1:1")
    with pytest.raises(InvalidInputError, match="exactly one"):
        mem.forget(source_id="D1:2", message_id=c)
    with pytest.raises(InvalidInputError, match="source_id"):
        mem.forget(message_id=c, speaker="Ana")
    mem.close()
    from memsif_lite.cli import main

    res = CliRunner().invoke(main, ["forget", "--db", str(db), "--source-id", "D1:2", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"forgot": "message", "ids": [c]}
    res = CliRunner().invoke(main, ["forget", "--db", str(db), "--source-id", "D1:2"])
    assert res.exit_code == 1 and "Traceback" not in res.output


# -- 24.9: extreme and malformed arguments --------------------------------------------------------------
@pytest.mark.parametrize("bad", [10**30, -(10**30), "1", True, 1.0])
def test_ids_must_be_64_bit_integers(memory, bad):
    mem = memory()
    first, _ = _two(mem)
    with pytest.raises(InvalidInputError):
        mem.forget(message_id=bad)
    with pytest.raises(InvalidInputError):
        mem.forget(fact_id=bad)
    with pytest.raises(InvalidInputError):
        mem.get(bad)
    with pytest.raises(InvalidInputError):
        mem.fact_history(bad)
    assert mem.get(first).id == first  # "1" used to forget message 1


def test_lone_surrogates_are_invalid_input(memory):
    mem = memory()
    _two(mem)
    with pytest.raises(InvalidMessageError) as e:
        mem.add_many([{"speaker": "Ana", "text": "fine"}, {"speaker": "Ana", "text": "fine", "source_id": "\ud800"}])
    assert e.value.index == 1
    for call in (lambda: mem.facts(subject="\ud800"), lambda: mem.facts(type="\udcff"),
                 lambda: mem.forget(source_id="\ud800"), lambda: mem.forget(source_id="x", speaker="\ud800"),
                 lambda: mem.search("Porto \ud800"), lambda: mem.context("where \ud800"),
                 lambda: mem.messages(speakers=["\ud800"])):
        with pytest.raises(InvalidInputError):
            call()


OFFSETS = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
EXTREME = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(1, 1, 3), timezones=st.none() | OFFSETS),
    st.datetimes(min_value=datetime(9999, 12, 29), max_value=datetime(9999, 12, 31, 23, 59, 59),
                 timezones=st.none() | OFFSETS),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(at=EXTREME, text=st.sampled_from(["I ran yesterday", "see you next month", "3 weeks ago we met",
                                         "tomorrow and next year", "99999999999 days ago"]),
       as_text=st.booleans())
def test_extreme_times_raise_only_memsif_errors(memory, at, text, as_text):
    mem = memory()
    value = at.isoformat() if as_text else at
    for call in (lambda: mem.add("Ana", text, at=value), lambda: mem.search("ran", since=value),
                 lambda: mem.messages(until=value), lambda: mem.facts(since=value),
                 lambda: mem.context("when did Ana run?", until=value), lambda: mem.ask("when?", now=value),
                 lambda: [m.at for m in mem.messages()], lambda: mem.segments()):
        try:
            call()
        except MemsifError:
            pass


def test_cli_ingest_names_the_line_of_a_far_offset_date(tmp_path):
    from memsif_lite.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"speaker": "Ana", "text": "fine", "at": "2024-01-01T10:00:00"}) + "\n"
                   + json.dumps({"speaker": "Ana", "text": "far", "at": "0001-01-01T00:00:00+14:00"}) + "\n")
    res = CliRunner().invoke(main, ["ingest", str(src), "--db", str(tmp_path / "m.db")])
    assert res.exit_code == 1
    assert "in.jsonl:2:" in res.output and "out of range" in res.output and "please report" not in res.output


@pytest.mark.parametrize("where", ["meta", "queue"])
def test_a_planted_high_water_mark_at_the_int64_limit_is_a_corrupt_file_not_an_overflow(memory, db, where):
    """The cold review of issue 24: next_id computed 2**63 - 1 + 1, a raw OverflowError on every add."""
    memory().add("Ana", "I live in Lisbon.")
    if where == "meta":
        con = apsw.Connection(str(db))
        con.execute("UPDATE meta SET value=? WHERE key='message_id_high'", (str(2**63 - 1),))
        con.close()
    else:
        poison_queue(db, "place", None, None, message_id=2**63 - 1)
    mem = memory()
    with pytest.raises(StorageCorruptError, match="beyond any id memsif gives"):
        mem.add("Ana", "I moved to Porto.")
    assert any("high-water mark" in p for p in mem.check())
    assert [m.text for m in mem.messages()] == ["I live in Lisbon."]


def test_export_refuses_its_own_memory_file_even_with_overwrite(memory, db, tmp_path):
    mem = memory()
    mem.add("Ana", "I live in Lisbon.")
    for dest in (db, tmp_path / "memory.db-wal"):
        with pytest.raises(InvalidInputError, match="this memory file"):
            mem.export_to(dest, overwrite=True)
    assert mem.check() == [] and len(mem.messages()) == 1


@pytest.mark.parametrize("entities", ["[1, 2]", "not json", '"a string"', "[" * 100_000 + "]" * 100_000])
def test_listing_units_with_damaged_entities_is_a_clear_error(tmp_path, entities):
    from memsif_lite.cli import main
    db = tmp_path / "m.db"
    with Memory(db) as mem:
        mem.add_many([{"speaker": "Ana", "text": "Ana bakes rye bread", "session": "1"},
                      {"speaker": "Ana", "text": "Ben fixed his bike", "session": "2"},
                      {"speaker": "Ana", "text": "Cleo painted a fence", "session": "3"}])
        mem.process()
    _tamper(db, "UPDATE segments SET entities=? WHERE id=1", entities)
    with Memory(db, read_only=True) as mem:
        with pytest.raises(StorageCorruptError, match="entities of segment 1"):
            mem.segments()
    _tamper(db, "UPDATE segments SET entities='{}' WHERE id=1")
    # a trajectory's counts are rows of trajectory_entities (schema 22, STRICT): its row's column is
    # not read for them; `check` names a row that holds anything there
    with Memory(db, read_only=True) as mem:
        want = mem.trajectories()
    _tamper(db, "UPDATE trajectories SET entities=? WHERE id=1", entities)
    with Memory(db, read_only=True) as mem:
        assert mem.trajectories() == want and want[0].entities
        assert any("trajectory 1: its entities are not kept in trajectory_entities" in p for p in mem.check())
    _tamper(db, "UPDATE trajectories SET entities='' WHERE id=1")
    _tamper(db, "UPDATE segments SET entities=? WHERE id=1", entities)
    r = CliRunner().invoke(main, ["show", "--db", str(db)])
    assert r.exit_code == 1 and "damaged" in r.output and "Traceback" not in r.output


def _tamper(db: Path, sql: str, *args: str | bytes) -> None:
    con = apsw.Connection(str(db))
    try:
        con.execute(sql, args)
    finally:
        con.close()


@pytest.mark.parametrize("entry", ['[[[2]],null]', '[[1],[1]]', '[[1,2],null]', '[[true],null]', '7',
                                   '[[1],[1,null,[3],null,null,null,null,0,0,0,0,0,0]]'])
def test_a_malformed_before_image_is_a_clear_error(tmp_path, llm_server, entry):
    """A hostile ``change_log.before``: reading at a record time before it says the file is damaged,
    naming the change, through the API and the CLI (exit 1, no traceback)."""
    from memsif_lite.cli import main
    from test_history_merge import MODEL, deterministic_llm
    db = tmp_path / "m.db"
    llm_server.default = deterministic_llm
    with Memory(db, llm=MODEL, llm_kwargs=llm_server.llm_kwargs()) as mem:
        mem.add("Ana", "I live in Lisbon.", at=T0)
        mem.add("Bob", "Did you watch the football match?", at=T0 + timedelta(days=30))  # closes the segment
        mem.process()
        assert mem.facts()
    images = pack(json.loads(f'{{"core_facts":[{entry}],"message_units":[{entry}]}}'))
    _tamper(db, "INSERT INTO change_log(id, at, actor, op, ids, uid, images) VALUES(999, '2099-01-01T00:00:00', "
                "'rule', 'place', '{}', 999, ?)", images)
    k = "2098-01-01"
    with Memory(db, read_only=True) as mem:
        for read in (lambda: mem.facts(known_at=k), lambda: mem.segments(known_at=k),
                     lambda: mem.context("Where does Ana live?", known_at=k)):
            with pytest.raises(StorageCorruptError, match="change 999"):
                read()
    for cmd in (["facts"], ["context", "Where does Ana live?"]):
        r = CliRunner().invoke(main, [*cmd, "--db", str(db), "--known-at", k])
        assert r.exit_code == 1 and "change 999" in r.output and "Traceback" not in r.output, (cmd, r.output)
