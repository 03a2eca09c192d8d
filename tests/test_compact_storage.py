"""Schema 16, a smaller file (issue 31): packed before images, no running sum kept for a linked
segment, one speaker index. Every feature reads the same as before, and a schema 15 file migrates."""

from __future__ import annotations

import json
import zlib
from datetime import datetime, timedelta

import apsw
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes import as_schema_18, raw
from memsif_lite import Config, Memory, store
from memsif_lite.db.rewind import pack, unpack
from memsif_lite.db.structure import NO_SUM
from memsif_lite.int8 import dequantize
from memsif_lite.timeutil import record_clock, to_stored

T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12, 0)
CFG = Config(sem_low=0.0, sem_high=1.0, trajectory_threshold=0.5)
WORDS = ["marathon training long run", "sourdough bread baking oven", "marathon training long run race",
         "sourdough bread baking flour", "tax forms accountant receipts", "I live in Lisbon near the river"]

_scalar = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.text(max_size=30),
                    st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                      st.dictionaries(st.text(max_size=12), inner, max_size=5)),
                     max_leaves=40)


@settings(max_examples=300, deadline=None)
@given(images=_json)
def test_packed_images_read_back_as_they_were(images):
    assert unpack(pack(images)) == images


@settings(max_examples=300, deadline=None)
@given(blob=st.binary(max_size=200))
def test_unpack_never_raises_on_what_a_file_may_hold(blob):
    got = unpack(blob)
    assert got is None or json.dumps(got) is not None


def test_unpack_refuses_what_pack_did_not_write():
    images = {"segments": [[[1], [1, None, 2, None, None, "2024-01-01T09:00:00", "2024-01-01T09:01:00", 0, None]]]}
    packed = pack(images)
    assert unpack(packed[:-3]) is None  # truncated
    assert unpack(b"\x02" + packed[1:]) is None and unpack(b"") is None and unpack(None) is None
    assert unpack(json.dumps(images)) == images  # a schema 13-15 file's `before` text, read as it is
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    assert unpack(b"\x01" + bomb.compress(b"[" + b"0," * (40 << 20) + b"0]") + bomb.flush()) is None
    assert len(packed) < len(json.dumps(images, separators=(",", ":")))


def _fill(mem: Memory) -> list[int]:
    ids = []
    for i, w in enumerate(WORDS):
        ids.append(mem.add("Ana", w, at=T + timedelta(days=i)))
        ids.append(mem.add("Ben", w + " indeed", at=T + timedelta(days=i, minutes=1)))
    return ids


def _structure(mem: Memory, **at) -> tuple:
    return ([(s.id, s.trajectory_id, s.message_ids, s.entities, s.label, s.closed) for s in mem.segments(**at)],
            [(t.id, t.segment_ids, t.message_ids, t.entities, t.label) for t in mem.trajectories(**at)],
            [(f.id, f.stmt, f.valid_from, f.valid_to, f.message_ids) for f in mem.facts(include_superseded=True, **at)])


def test_a_linked_segment_keeps_no_sum_and_reads_back_its_members_sum(memory, db):
    mem = memory(config=CFG)
    ids = _fill(mem)
    con = mem._db.con
    assert {b for (b,) in con.execute("SELECT vec_sum FROM segments")} == {NO_SUM}
    kept = dict(con.execute("SELECT segment_id, vec_sum FROM segment_sums"))
    linked = {s.id for s in mem.segments() if s.trajectory_id is not None}
    assert linked and set(kept) == {s.id for s in mem.segments()} - linked  # the open one keeps its sum there
    assert all(len(b) == 4 * mem._db.vectors.dim for b in kept.values())
    for sid in linked:
        members = mem._db.structure.member_vectors("segment", sid)
        want = np.zeros(mem._db.vectors.dim)
        for m in members.ids:
            code = con.execute("SELECT embedding FROM message_vec WHERE rowid=?", (m,)).fetchone()[0]
            want += dequantize(np.frombuffer(code, dtype=np.int8)).astype(np.float64)  # a running sum, row by row
        assert np.array_equal(mem._db.structure.load("segment", sid).vec_sum, want)
    assert mem.check() == []
    mem.forget(message_id=ids[0])  # its linked segment is recomputed: still no sum kept
    first = mem.segments()[0]
    assert first.trajectory_id is not None and ids[0] not in first.message_ids
    assert con.execute("SELECT count(*) FROM segment_sums WHERE segment_id=?", (first.id,)).fetchone()[0] == 0
    assert mem.check() == []
    mem.close()


def test_an_export_holds_the_open_segments_sum_and_imports_it_back(memory, db, tmp_path):
    mem = memory(config=CFG)
    _fill(mem)
    mem.export_to(tmp_path / "x.jsonl")
    rows = [json.loads(line) for line in (tmp_path / "x.jsonl").read_text().splitlines()]
    segs = [r["row"] for r in rows if r.get("table") == "segments"]
    assert [bool(s["vec_sum"]["b64"]) for s in segs] == [s["trajectory_id"] is None for s in segs]
    want = {s.id: mem._db.structure.load("segment", s.id).vec_sum for s in mem.segments()}
    other = memory(config=CFG, path=tmp_path / "copy.db")
    other.import_from(tmp_path / "x.jsonl")
    assert {s.id: other._db.structure.load("segment", s.id).vec_sum.tolist() for s in other.segments()} == {
        k: v.tolist() for k, v in want.items()}
    assert other.check() == [] and len(other._db.con.execute("SELECT * FROM segment_sums").fetchall()) == 1
    mem.close()
    other.close()


def _as_schema_15(path, embedder) -> None:
    """Turn a schema 18 file back into what schema 15 wrote: every segment's entity counts, the whole
    content hash indexed (schema 18), no current-fact subject indexes (schema 17), images as JSON text in ``before``, a
    linked segment's running sum (float32) kept, messages_speaker_at there."""
    with Memory(path, embedder=embedder, config=CFG) as mem:
        sums = {s.id: mem._db.structure.load("segment", s.id).vec_sum.astype(np.float32).tobytes()
                for s in mem.segments()}
        counts = {s.id: json.dumps(dict(mem._db.structure.load("segment", s.id).entities))
                  for s in mem.segments()}
    as_schema_18(path, embedder.dim)  # schema 19's cuts undone first
    con = apsw.Connection(str(path))
    try:
        con.execute("BEGIN")
        con.execute("ALTER TABLE change_log ADD COLUMN before TEXT")
        for cid, blob in con.execute("SELECT id, images FROM change_log WHERE images IS NOT NULL").fetchall():
            con.execute("UPDATE change_log SET before=? WHERE id=?",
                        (json.dumps(unpack(blob), separators=(",", ":")), cid))
        con.execute("ALTER TABLE change_log DROP COLUMN images")
        for sid, total in sums.items():
            con.execute("UPDATE segments SET vec_sum=? WHERE id=?", (total, sid))
        con.execute("DROP TABLE segment_sums")
        for sid, ents in counts.items():  # every segment kept its counts before schema 18
            con.execute("UPDATE segments SET entities=? WHERE id=?", (ents, sid))
        # entities as json.dumps spaced them before schema 16
        for table, key in (("message_units", "message_id"), ("segments", "id"), ("trajectories", "id")):
            for rid, ents in con.execute(f"SELECT {key}, entities FROM {table}").fetchall():
                con.execute(f"UPDATE {table} SET entities=? WHERE {key}=?", (json.dumps(json.loads(ents)), rid))
        con.execute("CREATE INDEX messages_speaker_at ON messages(speaker, at)")
        con.execute("DROP INDEX core_facts_current_subject")
        con.execute("DROP INDEX core_facts_current_subject_type")
        con.execute("DROP INDEX messages_content_key")  # schema 18
        con.execute("CREATE INDEX messages_content_hash ON messages(content_hash)")
        con.execute("PRAGMA user_version=15")
        con.execute("COMMIT")
    finally:
        con.close()


def test_a_schema_15_file_migrates_and_reads_as_before(db, fake_embedder):
    with record_clock(lambda: R0), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        ids = _fill(mem)[:4]
    with record_clock(lambda: R0 + timedelta(days=1)), Memory(db, embedder=fake_embedder, config=CFG) as mem:
        mem.add("Ana", "I moved to Porto last week", at=T + timedelta(days=30))
        mem.forget(message_id=ids[1])
    _as_schema_15(db, fake_embedder)
    k = to_stored(R0 + timedelta(hours=1))
    with Memory(db, embedder=fake_embedder, config=CFG, read_only=True) as mem:  # as it is, not migrated
        assert store.schema_version(mem._db.con) == 15
        then, now = _structure(mem, known_at=k), _structure(mem)
        texts = [m.text for m in mem.messages(known_at=k)]
    with raw(db) as con:
        images = {cid: json.loads(b) for cid, b in con.execute("SELECT id, before FROM change_log "
                                                                 "WHERE before IS NOT NULL")}
        entities = {t: con.execute(f"SELECT entities FROM {t} ORDER BY rowid").fetchall()
                    for t in ("message_units", "segments", "trajectories")}
        assert all(", " in e for rows in entities.values() for (e,) in rows if len(json.loads(e)) > 1)
        assert images and con.execute("SELECT count(*) FROM segments WHERE length(vec_sum)=0").fetchone()[0] == 0
    with Memory(db, embedder=fake_embedder, config=CFG) as mem:  # migrated
        assert store.schema_version(mem._db.con) == store.latest_version() >= 16
        assert _structure(mem, known_at=k) == then and _structure(mem) == now
        assert [m.text for m in mem.messages(known_at=k)] == texts
        assert mem.check() == []
        linked = [tid is not None for (tid,) in mem._db.con.execute("SELECT trajectory_id FROM segments ORDER BY id")]
        for t, rows in entities.items():  # minified, the same values in the same order (none kept: schema 18)
            now = mem._db.con.execute(f"SELECT entities FROM {t} ORDER BY rowid").fetchall()
            if t == "trajectories":  # a row an entity (schema 22), the same counts
                assert now == [("",)] * len(rows)
                held = [dict(mem._db.con.execute("SELECT entity, n FROM trajectory_entities WHERE trajectory_id=?",
                                                 (tid,))) for (tid,) in mem._db.con.execute(
                    "SELECT id FROM trajectories ORDER BY rowid")]
                assert held == [json.loads(e) for (e,) in rows]
                continue
            assert now == [("" if t == "segments" and linked[i] else json.dumps(json.loads(e), separators=(",", ":")),)
                           for i, (e,) in enumerate(rows)]
        mem.add("Ben", "marathon training long run again", at=T + timedelta(days=40))  # and writes on
    with raw(db) as con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(change_log)")]
        assert "before" not in cols and "images" in cols
        assert {cid: unpack(b) for cid, b in con.execute("SELECT id, images FROM change_log WHERE id <= ?",
                                                         (max(images),)) if b is not None} == images
        assert con.execute("SELECT count(*) FROM sqlite_schema WHERE name='messages_speaker_at'").fetchone()[0] == 0
        assert {b for (b,) in con.execute("SELECT vec_sum FROM segments")} == {NO_SUM}
        unlinked = {i for (i,) in con.execute("SELECT id FROM segments WHERE trajectory_id IS NULL")}
        assert unlinked and {i for (i,) in con.execute("SELECT segment_id FROM segment_sums")} == unlinked


def test_an_idempotent_add_still_finds_the_exact_speaker(memory):
    """messages_speaker_at went: the same speaker, time and text is found through the case-blind
    index, and a speaker differing only in case is another message."""
    mem = memory()
    a = mem.add("Ana", "Hello there", at=T)
    assert mem.add("Ana", "Hello there", at=T, skip_existing=True) == a
    assert mem.add("ANA", "Hello there", at=T, skip_existing=True) != a
    assert len(mem.messages()) == 2
    plan = " ".join(str(r[-1]) for r in mem._db.con.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM messages WHERE speaker=? COLLATE NOCASE AND speaker=? AND at=? AND text=?",
        ("Ana", "Ana", "x", "y")))
    assert "USING INDEX messages_speaker" in plan, plan
