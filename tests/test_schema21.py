"""Schema 21 (stop 37): a fact decision's two lookups among its subject's current facts of one
type — the fact stating it again, the values of its slot — are index searches, whatever the
subject holds; a schema 20 file migrates and decides as before."""

from __future__ import annotations

from datetime import datetime, timedelta

from fakes import FakeEmbedder, as_schema_20, raw
from memsif_lite import Config, Memory, store

T0 = datetime(2024, 3, 1, 9)
CFG = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.99, tau_split=0.98)
SAID = ["I live in Lisbon.", "I love jazz.", "I love ceramics.", "ok", "I love Jazz!", "Big news: I moved to Porto!",
        "ok", "Leo here."]


def _add(mem: Memory, start: int, said: list[str]) -> None:
    mem.add_many([{"speaker": "Leo" if t.startswith("Leo") else "Maya", "text": t,
                   "at": T0 + timedelta(days=start + i)} for i, t in enumerate(said)])


def _facts(mem: Memory) -> list[tuple[str, bool, tuple[int, ...]]]:
    return sorted((f.stmt, f.valid_to is None, f.message_ids) for f in mem.facts(include_superseded=True))


def test_the_lookups_are_index_searches(db):
    """The SQL the two lookups run (traced) is answered from their indexes, in id order, no sort."""
    with Memory(db, embedder=FakeEmbedder(), config=CFG) as mem:
        _add(mem, 0, SAID)
        assert store.schema_version(mem._db.con) == store.latest_version() >= 21
        assert mem.check() == []
        con, facts = mem._db.con, mem._db.facts
        for look, index in [(lambda: facts.current_stated("Maya", "Preference", "Maya loves jazz"),
                             "core_facts_current_stated"),
                            (lambda: facts.current_in_slot("Maya", "Identity", "lives in"), "core_facts_current_slot")]:
            ran: list[tuple[str, tuple]] = []
            con.exec_trace = lambda _cursor, sql, args, ran=ran: ran.append((sql, tuple(args or ()))) or True
            try:
                assert look()
            finally:
                con.exec_trace = None
            [(sql, args)] = [r for r in ran if "core_facts" in r[0]]
            plan = " ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql, args))
            assert f"USING INDEX {index}" in plan and "SCAN" not in plan and "TEMP B-TREE" not in plan, plan
    with raw(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_schema_20_file_migrates_and_decides_as_before(tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        with Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
            _add(mem, 0, SAID[:4])
    as_schema_20(b)
    with Memory(b, embedder=FakeEmbedder(), config=CFG, read_only=True) as mem:  # read as it is
        assert store.schema_version(mem._db.con) == 20
    for path in (a, b):
        with Memory(path, embedder=FakeEmbedder(), config=CFG) as mem:
            assert store.schema_version(mem._db.con) == store.latest_version()
            _add(mem, 10, SAID[4:])
    with Memory(a, embedder=FakeEmbedder(), config=CFG) as ma, Memory(b, embedder=FakeEmbedder(), config=CFG) as mb:
        assert _facts(ma) == _facts(mb)
        assert ("Maya loves jazz", True, (2, 5)) in _facts(mb)  # "I love Jazz!" merged
        assert ("Maya lives in Lisbon", False, (1,)) in _facts(mb) and mb.check() == []
    with raw(b) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
