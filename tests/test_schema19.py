"""Schema 19 (issue 31): a message keeps its created_at only where it is not its record time
(``known_at``: '' otherwise), ``change_log_at`` indexes the second of a change's record time, and
segment and CoreFact vectors are in chunks of 32. What a file gives back is unchanged: created_at
is exported and merged whole, reads by record time find the same changes (within one second too),
``memsif check`` checks what the reads rely on, and a schema 18 file migrates and reads as before."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import apsw

from fakes import as_schema_18, raw
from memsif_lite import Config, Memory, store
from memsif_lite.timeutil import record_clock, to_stored

T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12, 0)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.5)
WORDS = ["marathon training long run", "sourdough bread baking oven", "marathon training long run race",
         "sourdough bread baking flour", "tax forms accountant receipts", "I live in Lisbon near the river"]


def _fill(mem: Memory, words=WORDS, day: int = 0) -> list[int]:
    ids = []
    for i, w in enumerate(words):
        ids.append(mem.add("Ana", w, at=T + timedelta(days=day + i)))
        ids.append(mem.add("Ben", w + " indeed", at=T + timedelta(days=day + i, minutes=1)))
    return ids


def _export(mem: Memory, path) -> list[dict]:
    mem.export_to(path, overwrite=True)
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def _created(path) -> dict[int, tuple[str, str]]:
    with raw(path) as con:
        return {m: (c, k) for m, c, k in con.execute("SELECT id, created_at, known_at FROM messages")}


def test_a_message_added_here_keeps_no_created_at_and_is_exported_and_imported_whole(memory, db, tmp_path):
    with record_clock(lambda: R0):
        mem = memory(config=CFG)
        ids = _fill(mem)[:4]
    assert set(_created(db).values()) == {("", to_stored(R0))}
    rows = [r["row"] for r in _export(mem, tmp_path / "x.jsonl") if r.get("table") == "messages"]
    assert [r["created_at"] for r in rows] == [to_stored(R0)] * len(rows) and len(rows) >= len(ids)
    with record_clock(lambda: R0 + timedelta(days=2)):
        other = memory(config=CFG, path=tmp_path / "copy.db")
        other.import_from(tmp_path / "x.jsonl")  # learnt now, created when the first file stored them
    assert set(_created(tmp_path / "copy.db").values()) == {(to_stored(R0), to_stored(R0 + timedelta(days=2)))}
    again = [r["row"] for r in _export(other, tmp_path / "y.jsonl") if r.get("table") == "messages"]
    assert again == rows
    assert mem.check() == [] and other.check() == []


def test_a_merge_keeps_the_created_at_of_the_file_that_first_stored_a_message(memory, tmp_path):
    a, b, c = (tmp_path / f"{n}.db" for n in "abc")
    with record_clock(lambda: R0):
        memory(config=CFG, path=a).add("Ana", WORDS[0], at=T)
    with record_clock(lambda: R0 + timedelta(days=1)):
        mb = memory(config=CFG, path=b)
        mb.add("Ben", WORDS[1], at=T + timedelta(days=1))
        mb.merge_from(a)
    assert sorted(_created(b).values()) == [("", to_stored(R0 + timedelta(days=1))),
                                             (to_stored(R0), to_stored(R0 + timedelta(days=1)))]
    with record_clock(lambda: R0 + timedelta(days=2)):
        mc = memory(config=CFG, path=c)
        mc.merge_from(b)
    assert sorted(c for c, _ in _created(c).values()) == [to_stored(R0), to_stored(R0 + timedelta(days=1))]
    assert mb.check() == [] and mc.check() == []


def test_reads_by_record_time_find_the_changes_of_the_same_second_exactly(memory):
    times = [R0 + timedelta(microseconds=u) for u in (100_000, 400_000, 400_001, 900_000)]
    mem = memory(config=CFG)
    for i, t in enumerate(times):
        with record_clock(lambda t=t: t):
            mem.add("Ana", WORDS[i], at=T + timedelta(days=i))
    logged = mem.changes()
    assert len({c.at.replace(microsecond=0) for c in logged}) == 1 and len(logged) >= 4
    for t in times + [R0, R0 + timedelta(seconds=1)]:
        assert [c.id for c in mem.changes(since=t)] == [c.id for c in logged if c.at >= t]
        assert [c.id for c in mem.changes(until=t)] == [c.id for c in logged if c.at <= t]
        held = {m for s in mem.segments(known_at=t) for m in s.message_ids}
        assert held == {i + 1 for i, w in enumerate(times) if w <= t}


def test_check_names_a_change_whose_record_time_the_index_cannot_find(memory, db):
    mem = memory(config=CFG)
    _fill(mem)
    assert mem.check() == []
    mem.close()
    con = apsw.Connection(str(db))
    try:
        con.execute("UPDATE change_log SET at='yesterday' WHERE id=2")
        con.execute("UPDATE messages SET known_at=NULL WHERE id=3")
    finally:
        con.close()
    found = memory(config=CFG).check()
    assert any("1 changes have a record time" in p and "change 2" in p for p in found), found
    assert any("no record time" in p and "message 3" in p for p in found), found


def _vec0(path) -> dict[str, tuple[str, list[tuple[int, bytes]]]]:
    with raw(path) as con:
        return {t: (con.execute("SELECT sql FROM sqlite_schema WHERE name=?", (t,)).fetchone()[0],
                    [(r, bytes(v)) for r, v in con.execute(f"SELECT rowid, embedding FROM {t} ORDER BY rowid")])
                for t in ("segment_vec", "fact_vec")}


def test_a_schema_18_file_migrates_and_reads_as_before(db, fake_embedder, tmp_path):
    other = tmp_path / "other.db"
    with record_clock(lambda: R0 - timedelta(days=3)), Memory(other, embedder=fake_embedder, config=CFG) as mem:
        _fill(mem, WORDS[:3], day=20)
    with record_clock(lambda: R0), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        ids = _fill(mem)
    with record_clock(lambda: R0 + timedelta(days=1)), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        mem.add("Ana", "I moved to Porto last week", at=T + timedelta(days=30))
        mem.forget(message_id=ids[1])
        mem.merge_from(other)
        k = to_stored(R0 + timedelta(hours=1))
        want = (_export(mem, tmp_path / "x.jsonl"), mem.changes(), mem.changes(since=k),
                mem.segments(known_at=k), mem.segments(), mem.facts())
    created = {m: c or k for m, (c, k) in _created(db).items()}
    assert "" in {c for c, _ in _created(db).values()} and len(set(created.values())) > 1
    as_schema_18(db, fake_embedder.dim)
    vectors = _vec0(db)
    assert {m: c for m, (c, _) in _created(db).items()} == created
    with Memory(db, embedder=fake_embedder, config=CFG, read_only=True) as mem:  # as it is, not migrated
        assert store.schema_version(mem._db.con) == 18
        assert (mem.changes(since=k), mem.segments(known_at=k)) == want[2:4]
    with Memory(db, embedder=fake_embedder, config=CFG) as mem:
        assert store.schema_version(mem._db.con) == store.latest_version() >= 19
        got = (_export(mem, tmp_path / "y.jsonl"), mem.changes(), mem.changes(since=k), mem.segments(known_at=k),
               mem.segments(), mem.facts())
        assert got == want
        assert mem.check() == []
        after = _vec0(db)
        mem.add("Ben", "marathon training long run again", at=T + timedelta(days=40))  # and writes on
        assert mem.check() == []
    assert {m: c for m, (c, _) in _created(db).items() if m in created} == {
        m: ("" if c == _created(db)[m][1] else c) for m, c in created.items()}
    for t, (sql, rows) in vectors.items():
        assert "chunk_size=16" in sql and "chunk_size=32" in after[t][0] and after[t][1] == rows
    with raw(db) as con:
        sizes = {n for (n,) in con.execute("SELECT length(vectors) FROM segment_vec_vector_chunks00")}
        assert sizes == {32 * fake_embedder.dim}
        plan = " ".join(str(r[-1]) for r in con.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM change_log c WHERE unixepoch(c.at) >= unixepoch(?) AND c.at >= ?",
            (k, k)))
        assert "change_log_at" in plan, plan
