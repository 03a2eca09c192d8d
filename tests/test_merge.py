"""Merging two diverged copies of one memory (``Memory.merge_from``, ``memsif merge``): nothing lost,
duplicated or resurrected; the structure equals an ingest of the union in time order."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, raw
from memsif_lite import Memory, MemoryFileError, NotAMemoryFileError, SchemaVersionError, store
from memsif_lite.cli import main
from memsif_lite.db.merge import tombstone_hash
from memsif_lite.errors import InvalidInputError

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
from make_hostile import POISONED_STEPS, poison_queue  # noqa: E402

T0 = datetime(2024, 3, 1, 9, 0, 0)
SENTENCES = [
    "I live in Lisbon with my cat.", "I moved to Porto last month.", "I live in Porto now.",
    "I like hiking in the mountains.", "We hiked the mountain trail on Sunday.", "The trail was steep and muddy.",
    "I work at Acme as an engineer.", "The new Acme project starts soon.", "Our engineer team ships on Friday.",
    "I love cooking pasta at home.", "The pasta sauce needs more garlic.", "Dinner with friends was lovely.",
]
SPEAKERS = ["Ana", "Bo"]


def _at(minutes: int) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat()


def _msg(i: int, minutes: int) -> dict:
    return {"speaker": SPEAKERS[i % 2], "text": SENTENCES[i % len(SENTENCES)], "at": _at(minutes)}


def _open(path: Path, emb: FakeEmbedder | None = None, **kw) -> Memory:
    return Memory(path, embedder=emb or FakeEmbedder(), **kw)


def _content(con: apsw.Connection, mid: int) -> tuple[str, str, str]:
    return tuple(con.execute("SELECT speaker, text, at FROM messages WHERE id=?", (mid,)).fetchone())  # type: ignore


def messages(path: Path) -> list[tuple[str, str, str]]:
    with raw(path) as con:
        return [tuple(r) for r in con.execute("SELECT speaker, text, at FROM messages ORDER BY id")]  # type: ignore


def tombstones(path: Path) -> set[bytes]:
    with raw(path) as con:
        return {bytes(h) for (h,) in con.execute("SELECT hash FROM tombstones")}


def structure(path: Path) -> dict:
    """Segments, trajectories and CoreFacts by content (ids differ between files)."""
    with raw(path) as con:
        c = lambda mid: _content(con, mid)  # noqa: E731
        segs = {}
        for sid, closed, tid in con.execute("SELECT id, closed, trajectory_id FROM segments").fetchall():
            members = tuple(c(m) for (m,) in con.execute(
                "SELECT message_id FROM message_units WHERE segment_id=? ORDER BY message_id", (sid,)).fetchall())
            segs[sid] = (members, closed, tid)
        trajs = {}
        for members, _, tid in segs.values():
            if tid is not None:
                trajs.setdefault(tid, set()).add(members)
        facts = set()
        for fid, subj, typ, stmt, vf, vt, sup in con.execute(
                "SELECT id, subject, type, stmt, valid_from, valid_to, superseded_by FROM core_facts").fetchall():
            srcs = tuple(sorted(c(m) for (m,) in con.execute(
                "SELECT message_id FROM fact_sources WHERE fact_id=?", (fid,)).fetchall()))
            by = con.execute("SELECT stmt FROM core_facts WHERE id=?", (sup,)).fetchone() if sup else None
            hist = tuple(op for (op,) in con.execute("SELECT op FROM fact_history WHERE fact_id=? ORDER BY id", (fid,)))
            facts.add((subj, typ, stmt, vf, vt, srcs, by[0] if by else None, hist))
        queue = con.execute("SELECT count(*) FROM work_queue").fetchone()[0]
    return {"segments": sorted((m, cl) for m, cl, _ in segs.values()),
            "trajectories": sorted(sorted(t) for t in trajs.values()), "facts": facts, "queue": queue}


def fresh_ingest(path: Path, msgs: list[tuple[str, str, str]]) -> None:
    with _open(path) as mem:
        mem.add_many([{"speaker": s, "text": t, "at": a} for s, t, a in sorted(msgs, key=lambda m: (m[2], m[0], m[1]))])


# -- the properties on random diverged pairs ---------------------------------------------------------------
ops = st.lists(st.tuples(st.sampled_from(["add", "add", "forget"]), st.integers(0, 10_000)), max_size=10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_ancestor=st.integers(0, 6), ops_a=ops, ops_b=ops, seed=st.integers(0, 1000))
# found by CI: a message forgotten on one side had merged into a fact that other messages keep
@example(n_ancestor=0, ops_a=[], ops_b=[("add", 0), ("add", 0), ("add", 1), ("add", 0), ("add", 1), ("forget", 193)],
         seed=0)
def test_merge_properties_on_random_diverged_pairs(n_ancestor, ops_a, ops_b, seed):
    with tempfile.TemporaryDirectory() as d:
        d_ = Path(d)
        anc, a, b, ref = d_ / "anc.db", d_ / "a.db", d_ / "b.db", d_ / "ref.db"
        with _open(anc) as mem:
            mem.add_many([_msg(seed + i, i * 10) for i in range(n_ancestor)])
        shutil.copy(anc, a)
        shutil.copy(anc, b)
        forgotten: set[tuple[str, str, str]] = set()
        # both sides add after the common part, at times that interleave between the sides
        minute = {"a": n_ancestor * 10, "b": n_ancestor * 10 + 3}
        for side, path, side_ops in (("a", a, ops_a), ("b", b, ops_b)):
            with _open(path) as mem:
                for op, k in side_ops:
                    if op == "add":
                        minute[side] += 5 + k % 7 * 2  # distinct times: a on even, b on odd offsets
                        mem.add(**_msg(seed + k, minute[side]))
                    else:
                        have = mem.messages()
                        if have:
                            m = have[k % len(have)]
                            forgotten.add((m.speaker, m.text, m.at.isoformat()))
                            mem.forget(message_id=m.id)
        expected = (set(messages(a)) | set(messages(b))) - forgotten

        with _open(a) as mem:
            planned = mem.merge_from(b, dry_run=True)
            first = mem.merge_from(b)
        # a dry run is the merge without the writes (issue 23.4: it once named a later rebuild point)
        assert dataclasses.replace(planned, dry_run=False) == dataclasses.replace(
            first, pending_steps=0, facts_added=(), facts_superseded=(), facts_removed=(), queries_added=0)
        got = messages(a)
        assert len(got) == len(set(got)), "a message was duplicated"
        assert set(got) == expected
        assert not forgotten & set(got), "a forgotten message came back"
        assert first.removed_by_tombstones + first.added >= 0
        snap = (got, tombstones(a), structure(a))
        with _open(a) as mem:  # idempotent: twice = once
            again = mem.merge_from(b)
            assert mem.check() == []
        assert (again.added, again.removed_by_tombstones, again.rebuilt_from) == (0, 0, None)
        assert (messages(a), tombstones(a), structure(a)) == snap

        with _open(b) as mem:  # the other way round: both end with the same messages and tombstones
            mem.merge_from(a)
            assert mem.check() == []
        assert set(messages(b)) == expected and len(messages(b)) == len(expected)
        assert tombstones(b) == tombstones(a)
        assert {tombstone_hash(*f) for f in forgotten} <= tombstones(a)

        fresh_ingest(ref, sorted(expected))  # structure = an ingest of the union in time order
        want = structure(ref)
        assert structure(a) == want
        assert structure(b) == want


# -- single behaviours ------------------------------------------------------------------------------------
COMMON = [{"speaker": "Bo", "text": SENTENCES[j], "at": _at(i * 10)} for i, j in enumerate([9, 10, 11, 5])]


def _diverged(tmp_path: Path, emb_a: FakeEmbedder | None = None, emb_b: FakeEmbedder | None = None):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    common = COMMON
    with _open(a, emb_a) as mem:
        mem.add_many(common)
        mem.add("Ana", "I live in Lisbon with my cat.", at=_at(100))
        mem.add("Ana", "The pasta sauce needs more garlic.", at=_at(130))
    with _open(b, emb_b) as mem:
        mem.add_many(common)
        mem.add("Ana", "I moved to Porto last month.", at=_at(120))
        mem.add("Bo", "We hiked the mountain trail on Sunday.", at=_at(140))
        mem.add("Bo", "The trail was steep and muddy.", at=_at(150))
    return a, b


def test_forget_leaves_a_tombstone_without_the_content(memory, db):
    mem = memory()
    mid = mem.add("Ana", "my secret diary entry about Zanzibar", at="2024-01-01T10:00:00")
    mem.forget(message_id=mid)
    with raw(db) as con:
        rows = con.execute("SELECT hash, created_at, local_at FROM tombstones").fetchall()
    assert len(rows) == 1 and rows[0][0] == tombstone_hash("Ana", "my secret diary entry about Zanzibar",
                                                           "2024-01-01T10:00:00")
    assert b"Zanzibar" not in b"".join(str(v).encode() for r in rows for v in r)
    mem.add("Ana", "my secret diary entry about Zanzibar", at="2024-01-01T10:00:00")  # added again on purpose
    with raw(db) as con:
        assert con.execute("SELECT count(*) FROM tombstones").fetchone()[0] == 0


def test_merge_interleaves_and_a_later_move_supersedes_across_machines(tmp_path):
    a, b = _diverged(tmp_path)
    with _open(a) as mem:
        report = mem.merge_from(b)
        assert report.added == 3 and report.skipped_present == 4 and report.re_embedded == 0
        assert [m.at for m in mem.messages()] == sorted(m.at for m in mem.messages())
        mem.add("Bo", "Dinner with friends was lovely.", at=_at(400))  # closes the last segment
        facts = mem.facts(subject="Ana", include_superseded=True)
        (lisbon,) = [f for f in facts if "Lisbon" in f.stmt]
        (porto,) = [f for f in facts if "Porto" in f.stmt]
        assert lisbon.valid_to is not None and lisbon.superseded_by == porto.id and porto.valid_to is None
        assert [e.op for e in mem.fact_history(lisbon.id)] == ["add", "superseded"]
        assert [e.op for e in mem.fact_history(porto.id)] == ["supersede"]


def test_dry_run_writes_nothing(tmp_path):
    a, b = _diverged(tmp_path)
    before = (messages(a), structure(a), tombstones(a))
    with _open(a) as mem:
        r = mem.merge_from(b, dry_run=True)
    assert r.dry_run and r.added == 3 and r.rebuilt_from is not None
    assert (messages(a), structure(a), tombstones(a)) == before
    for side in ("a.db-wal", "a.db-shm", "b.db-wal", "b.db-shm"):  # (left by the raw reads above)
        (tmp_path / side).unlink(missing_ok=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    with _open(a, read_only=True) as mem:  # a read-only memory may dry-run, not merge
        assert mem.merge_from(b, dry_run=True).added == 3
        with pytest.raises(Exception, match="read-only"):
            mem.merge_from(b)
    # and neither file got a -wal or -shm beside it (issue 23.2): no one else had them open
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_cli_dry_run_names_the_rebuild_point_the_merge_uses(tmp_path):
    """Issue 23.4: a local forget moved the real rebuild point back to its segment's start, the dry
    run reported the forgotten message's time."""
    sample = resources.files("memsif_lite.data") / "sample_conversation.jsonl"
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    run = CliRunner().invoke
    assert run(main, ["ingest", str(sample), "--db", str(a)]).exit_code == 0
    shutil.copy(a, b)
    assert run(main, ["forget", "--db", str(a), "--message", "12"]).exit_code == 0
    added = run(main, ["add", "Leo", "See you at the new place!", "--at", "2024-03-16T21:00:00", "--db", str(b)])
    assert added.exit_code == 0
    dry = run(main, ["merge", str(b), "--db", str(a), "--dry-run", "--json"])
    real = run(main, ["merge", str(b), "--db", str(a), "--json"])
    assert dry.exit_code == 0 and real.exit_code == 0, dry.output + real.output
    planned, done = json.loads(dry.output), json.loads(real.output)
    assert planned["dry_run"] and not done["dry_run"]
    for key in ("added", "removed_by_tombstones", "skipped_forgotten", "rebuilt_from", "replayed"):
        assert planned[key] == done[key], key
    assert done["replayed"] > 1


@pytest.mark.parametrize("label, kind, seg, payload", POISONED_STEPS, ids=lambda v: str(v)[:24])
def test_a_poisoned_queued_step_of_a_replayed_message_is_dropped_by_a_merge(tmp_path, label, kind, seg, payload):
    a, b = _diverged(tmp_path)
    with raw(a) as con:
        last = con.execute("SELECT max(id) FROM messages").fetchone()[0]
    poison_queue(a, kind, seg, payload, message_id=last, sub=500)
    with _open(a) as mem:
        assert mem.merge_from(b).added == 3
        assert mem.check() == []
    with raw(a) as con:
        assert con.execute("SELECT count(*) FROM work_queue WHERE sub >= 500").fetchone()[0] == 0


def test_forgetting_wins_and_travels(tmp_path):
    a, b = _diverged(tmp_path)
    with _open(b) as mem:
        gone = next(m for m in mem.messages() if m.at == T0)  # a common message
        mem.forget(message_id=gone.id)
    with _open(a) as mem:
        r = mem.merge_from(b)
        assert r.removed_by_tombstones == 1 and r.tombstones_added == 1
        assert all((m.speaker, m.text, m.at) != (gone.speaker, gone.text, gone.at) for m in mem.messages())
        assert all(gone.id not in f.message_ids for f in mem.facts(include_superseded=True))
    c = tmp_path / "c.db"  # a third copy that still has it: merging it does not bring it back
    with _open(c) as mem:
        mem.add_many(COMMON)
    with _open(a) as mem:
        r = mem.merge_from(c)
        assert r.added == 0 and r.skipped_forgotten == 1
    assert len(messages(a)) == 8


def test_different_embedding_models_are_re_embedded(tmp_path):
    ea, eb = FakeEmbedder(dim=32, model_id="fake-a"), FakeEmbedder(dim=48, model_id="fake-b")
    a, b = _diverged(tmp_path, ea, eb)
    with _open(a, FakeEmbedder(dim=32, model_id="fake-a")) as mem:
        r = mem.merge_from(b)
        assert r.added == 3 and r.re_embedded == 3
        assert mem.check() == []
        hits = mem.search("steep muddy trail", k=1)
        assert hits[0].text == "The trail was steep and muddy."
    with raw(a) as con:
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
        assert (meta["embedding_model"], meta["embedding_dim"]) == ("fake-a", "32")
        blob = con.execute("SELECT v.embedding FROM messages m JOIN message_vec v ON v.rowid=m.id "
                           "WHERE m.text='The trail was steep and muddy.'").fetchone()[0]
    import numpy as np

    from memsif_lite.int8 import quantize
    want = ea.embed(["Bo: The trail was steep and muddy."], kind="passage")[0]
    assert np.array_equal(np.frombuffer(blob, dtype=np.int8), quantize(want))  # this file's model, stored int8


def test_queued_rebuild_equals_inline(tmp_path):
    a, b = _diverged(tmp_path)
    a2 = tmp_path / "a2.db"
    shutil.copy(a, a2)
    with _open(a) as mem:
        mem.merge_from(b)
    with _open(a2, process="manual") as mem:
        r = mem.merge_from(b)
        assert r.pending_steps > 0 and structure(a2)["queue"] == r.pending_steps
        mem.process()
    assert structure(a2) == structure(a)


def test_active_facts_and_queries_combined_without_double_counting(tmp_path):
    from memsif_lite import Evidence
    a, b = _diverged(tmp_path)
    for path in (a, b):
        with _open(path) as mem:
            src = [m.id for m in mem.messages() if m.at == T0]
            mem.accumulate("where does Ana live?", [Evidence("Ana lives in Lisbon", "Ana", tuple(src))])
    with _open(b) as mem:
        src = [m.id for m in mem.messages() if m.text.startswith("I moved")]
        mem.accumulate("where is Ana now?", [Evidence("Ana lives in Lisbon", "Ana", tuple(src))])
    with _open(a) as mem:
        r = mem.merge_from(b)
        assert r.queries_added == 1  # "where does Ana live?" was asked on both machines: counted once
        (cand,) = mem.candidates()
        assert sorted(cand.queries) == ["where does Ana live?", "where is Ana now?"]
        texts = {mem.get(m).text for m in cand.message_ids}
        assert "I moved to Porto last month." in texts
        assert mem.merge_from(b).queries_added == 0


def _hostile(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"hostile-{kind}.db"
    if kind == "random":
        p.write_bytes(os.urandom(4096))
    elif kind == "foreign":
        con = apsw.Connection(str(p))
        con.execute("CREATE TABLE messages(x); INSERT INTO messages VALUES(1)")
        con.close()
    else:
        with _open(p) as mem:
            mem.add("Ana", "hello")
        con = apsw.Connection(str(p))
        if kind == "newer":
            con.execute(f"PRAGMA user_version={store.latest_version() + 1}")
        else:
            con.execute("CREATE TABLE stolen(x); "
                        "CREATE TRIGGER t AFTER INSERT ON messages BEGIN INSERT INTO stolen VALUES(new.text); END;")
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.close()
    return p


@pytest.mark.parametrize("kind,error", [("random", NotAMemoryFileError), ("foreign", NotAMemoryFileError),
                                        ("newer", SchemaVersionError), ("trigger", MemoryFileError)])
def test_hostile_other_file_refused_like_memory_and_nothing_changes(tmp_path, kind, error):
    a, _ = _diverged(tmp_path)
    other = _hostile(tmp_path, kind)
    before_other, before_mine = other.read_bytes(), (messages(a), structure(a), tombstones(a))
    with pytest.raises(error) as opened:
        Memory(other, embedder=FakeEmbedder(), read_only=True)
    with _open(a) as mem, pytest.raises(error) as merged:
        mem.merge_from(other)
    assert type(merged.value) is type(opened.value)
    assert other.read_bytes() == before_other
    assert (messages(a), structure(a), tombstones(a)) == before_mine
    assert not Path(f"{other}-wal").exists()


def test_merging_a_file_into_itself_or_a_missing_file_is_refused(tmp_path):
    a, _ = _diverged(tmp_path)
    with _open(a) as mem:
        with pytest.raises(InvalidInputError):
            mem.merge_from(a)
        with pytest.raises(MemoryFileError, match="no memory file"):
            mem.merge_from(tmp_path / "absent.db")


def test_invalid_message_in_other_file_refused(tmp_path):
    a, b = _diverged(tmp_path)
    con = apsw.Connection(str(b))
    con.execute("UPDATE messages SET at='not a time' WHERE id=1")
    con.close()
    before = messages(a)
    with _open(a) as mem, pytest.raises(MemoryFileError, match="message 1"):
        mem.merge_from(b)
    assert messages(a) == before


def test_cli_merge(tmp_path, embedder):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(a, embedder=embedder) as mem:
        mem.add_many([_msg(i, i * 10) for i in range(3)])
    shutil.copy(a, b)
    with Memory(b, embedder=embedder) as mem:
        mem.add("Ana", "I moved to Porto last month.", at=_at(100))
    runner = CliRunner()
    dry = runner.invoke(main, ["merge", str(b), "--db", str(a), "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.output)
    assert doc["dry_run"] and doc["added"] == 1 and doc["stats"]["messages"] == 3
    res = runner.invoke(main, ["merge", str(b), "--db", str(a)])
    assert res.exit_code == 0, res.output
    assert "added 1 message" in res.output
    assert len(messages(a)) == 4
    bad = tmp_path / "junk.db"
    bad.write_bytes(b"junk" * 100)
    res = runner.invoke(main, ["merge", str(bad), "--db", str(a), "--json"])
    assert res.exit_code == 1 and "Traceback" not in res.output


def test_a_fact_drawing_on_both_sides_of_the_rebuild_point_is_rebuilt_whole(tmp_path):
    """Ana says the same thing twice, far apart (one CoreFact, two sources); the other machine
    adds messages between the two: the fact is rebuilt from its first source, as a fresh ingest would."""
    a, b, ref = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "ref.db"
    lisbon = {"speaker": "Ana", "text": "I live in Lisbon with my cat."}
    topics = [SENTENCES[j] for j in (9, 10, 11, 4, 5)]
    common = [{**lisbon, "at": _at(0)}] + [{"speaker": "Bo", "text": t, "at": _at(10 + i)} for i, t in
                                           enumerate(topics[:3])]
    with _open(a) as mem:
        mem.add_many(common + [{"speaker": "Bo", "text": topics[3], "at": _at(60)}, {**lisbon, "at": _at(90)},
                               {"speaker": "Bo", "text": topics[4], "at": _at(120)}])
        (fact,) = [f for f in mem.facts() if "Lisbon" in f.stmt]
        assert len(fact.message_ids) == 2
    with _open(b) as mem:
        mem.add_many(common + [{"speaker": "Bo", "text": "Dinner with friends was lovely.", "at": _at(75)}])
    with _open(a) as mem:
        r = mem.merge_from(b)
    assert r.rebuilt_from == _at(0)
    fresh_ingest(ref, messages(a))
    assert structure(a) == structure(ref)


_KILL_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from fakes import FakeEmbedder
from memsif_lite import Memory
with Memory({a!r}, embedder=FakeEmbedder(), process={mode!r}) as mem:
    print("merging", flush=True)
    mem.merge_from({b!r})
print("done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inline", "manual"])
def test_kill_9_during_a_merge_leaves_the_old_file_or_the_merged_one(tmp_path, mode):
    import random
    import signal
    import subprocess
    import sys
    a, b, ref = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "ref.db"
    common = [_msg(i, i * 10) for i in range(100)]
    with _open(a) as mem:
        mem.add_many(common + [_msg(i + 5, 1000 + i * 10 + 1) for i in range(150)])
    with _open(b) as mem:
        mem.add_many(common + [_msg(i + 7, 1000 + i * 10 + 2) for i in range(150)])
    old = set(messages(a))
    merged = old | set(messages(b))
    fresh_ingest(ref, sorted(merged))
    pristine = tmp_path / "pristine.db"
    shutil.copy(a, pristine)
    script = _KILL_SCRIPT.format(tests=str(Path(__file__).parent), a=str(a), b=str(b), mode=mode)
    seen = set()
    for delay in (0.05, 0.4, 1.2, 30.0):
        shutil.copy(pristine, a)
        for suffix in ("-wal", "-shm"):
            Path(f"{a}{suffix}").unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
        assert proc.stdout is not None and proc.stdout.readline().strip() == "merging"
        try:  # killed after the delay, unless it finished first (then there is nothing to wait for)
            proc.wait(timeout=delay * random.uniform(0.8, 1.2))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
        with _open(a, process="manual") as mem:
            assert mem.check() == []
            got = set(messages(a))
            assert got in (old, merged), "a half-merged file"
            seen.add(got == merged)
            mem.process()
        if got == merged:
            assert structure(a) == structure(ref)
    assert True in seen  # the slowest run finished the merge


def test_forgetting_the_superseding_message_restores_the_old_fact_and_its_history(memory):
    mem = memory()
    mem.add_many([{"speaker": "Ana", "text": "I live in Lisbon with my cat.", "at": _at(0)},
                  {"speaker": "Ana", "text": "I moved to Porto last month.", "at": _at(60)},
                  {"speaker": "Bo", "text": "The pasta sauce needs more garlic.", "at": _at(120)},
                  {"speaker": "Bo", "text": "Dinner with friends was lovely.", "at": _at(180)}])
    (lisbon,) = [f for f in mem.facts(include_superseded=True) if "Lisbon" in f.stmt]
    assert [e.op for e in mem.fact_history(lisbon.id)] == ["add", "superseded"]
    porto = next(m for m in mem.messages() if "Porto" in m.text)
    mem.forget(message_id=porto.id)
    (lisbon,) = [f for f in mem.facts() if "Lisbon" in f.stmt]
    assert lisbon.valid_to is None and [e.op for e in mem.fact_history(lisbon.id)] == ["add"]
