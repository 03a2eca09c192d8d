"""Reliability and security promises (docs/reliability.md): crash safety, power loss, atomicity,
concurrent writers, hostile files, bad input, portability (export/import, backup, check).
Crash safety, power loss, concurrent writers and hostile files are checked on a plain and on an
encrypted file (``key``; README "Encrypting your memory")."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, keyed, raw
from memsif_lite import (Config, EmbeddingError, InvalidInputError, Memory, MemoryFileError, MemsifError,
                         StorageFullError)
from memsif_lite.db.messages import CREATED_AT

TESTS = Path(__file__).parent
#: a plain file, and one encrypted with a passphrase
KEYS = pytest.mark.parametrize("key", [None, "a passphrase of the test"], ids=["plain", "encrypted"])


# -- 1. crash safety (kill -9) ------------------------------------------------------------------
WRITER = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from fakes import FakeEmbedder
    from memsif_lite import Memory
    with Memory(sys.argv[1], embedder=FakeEmbedder(), key=os.environ.get("MEMSIF_TEST_KEY")) as mem:
        i = 0
        while True:
            mem.add_many([{{"speaker": "W", "text": f"message {{i}} about topic {{i % 7}}"}},
                          {{"speaker": "V", "text": f"reply {{i}} on topic {{i % 7}}"}}])
            print(i, flush=True)
            i += 1
""")


@pytest.mark.slow
@KEYS
@pytest.mark.parametrize("kill_after", [3, 17, 41, 90])
def test_kill_9_loses_no_acknowledged_message(tmp_path, kill_after, key):
    db = tmp_path / "crash.db"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(TESTS)))
    env = {**os.environ, **({"MEMSIF_TEST_KEY": key} if key else {})}
    proc = subprocess.Popen([sys.executable, str(script), str(db)], stdout=subprocess.PIPE, text=True, env=env)
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= kill_after:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        assert mem.check() == []
    with raw(db, key) as con:
        texts = {t for (t,) in con.execute("SELECT text FROM messages")}
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for i in range(acked + 1):
        assert f"message {i} about topic {i % 7}" in texts and f"reply {i} on topic {i % 7}" in texts
    assert len(texts) % 2 == 0  # a batch is all or nothing


# -- 1b. power loss: a VFS that drops every write not yet synced --------------------------------
class PowerLossVFS(apsw.VFS):
    """Keeps pre-images of every write since the file's last sync; ``power_cut()`` restores
    them, as if the disk had lost everything not yet flushed. It is the disk under SQLite3
    Multiple Ciphers (which encrypts in a VFS of its own, ``multipleciphers-NAME``, made on first
    use), so an encrypted file's pages reach it encrypted, as they reach a real disk."""

    _names = itertools.count()

    def __init__(self):
        self.undo: dict[str, list] = {}
        name = f"powerloss{next(self._names)}"  # SQLite3 Multiple Ciphers keeps its VFS over each name
        super().__init__(name, "unix")
        apsw.Connection(":memory:", vfs=f"multipleciphers-{name}").close()
        self.top = PassThroughVFS(f"multipleciphers-{name}")

    def unregister(self):
        self.top.unregister()
        super().unregister()

    def xOpen(self, name, flags):
        return PowerLossFile(self, name, flags)

    def power_cut(self):
        for fname, log in self.undo.items():
            if not os.path.exists(fname):
                continue
            with open(fname, "r+b") as fh:
                for kind, offset, data in reversed(log):
                    if kind == "size":
                        fh.truncate(offset)
                    else:
                        fh.seek(offset)
                        fh.write(data)
        self.undo.clear()


class PassThroughVFS(apsw.VFS):
    """The default VFS, passing everything to ``base`` (so every connection opened uses it)."""

    def __init__(self, base: str):
        self.base = base
        super().__init__(f"top-{base}", base, makedefault=True)

    def xOpen(self, name, flags):
        return apsw.VFSFile(self.base, name, flags)


class PowerLossFile(apsw.VFSFile):
    def __init__(self, vfs, name, flags):
        self.vfs = vfs
        self.fname = name.filename() if hasattr(name, "filename") else name
        super().__init__("unix", name, flags)

    def _log(self):
        return self.vfs.undo.setdefault(self.fname, []) if self.fname else []

    def xWrite(self, data, offset):
        if self.fname:
            size = self.xFileSize()
            log = self._log()
            if not any(k == "size" for k, _, _ in log):
                log.append(("size", size, None))
            if offset < size:
                log.append(("data", offset, self.xRead(min(len(data), size - offset), offset)))
        return super().xWrite(data, offset)

    def xTruncate(self, newsize):
        if self.fname:
            size = self.xFileSize()
            if newsize < size:
                self._log().append(("data", newsize, self.xRead(size - newsize, newsize)))
        return super().xTruncate(newsize)

    def xSync(self, flags):
        if self.fname:
            self.vfs.undo.pop(self.fname, None)
        return super().xSync(flags)


@KEYS
@pytest.mark.parametrize("sync", ["FULL", "OFF"])
def test_power_loss_keeps_every_committed_add_with_synchronous_full(tmp_path, sync, key):
    db = tmp_path / "power.db"
    vfs = PowerLossVFS()
    try:
        mem = Memory(db, embedder=FakeEmbedder(), config=Config(synchronous=sync), key=key)
        for i in range(25):
            mem.add("A", f"committed message {i}")
        vfs.power_cut()  # the machine dies: nothing unsynced reaches the disk
        mem.close()  # after the cut nothing more reaches the disk, however the file is closed
    finally:
        vfs.unregister()
    if key is not None:
        assert b"committed message" not in db.read_bytes()  # the "disk" got encrypted pages
    try:
        with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
            n = mem.stats()["messages"]
            ok = mem.check() == []
    except MemsifError:
        n, ok = -1, False
    if sync == "FULL":
        assert n == 25 and ok
    else:  # the VFS really drops data: without syncs, committed messages are lost
        assert n < 25


# -- 2. atomicity -------------------------------------------------------------------------------
class BrokenEmbedder(FakeEmbedder):
    def embed(self, texts, *, kind):
        if any("boom" in t for t in texts):
            raise EmbeddingError("the model crashed")
        return super().embed(texts, kind=kind)


class NaNEmbedder(FakeEmbedder):
    def embed(self, texts, *, kind):
        out = super().embed(texts, kind=kind)
        if any("nan" in t for t in texts):
            out[:] = float("nan")
        return out


def test_embedder_failure_leaves_the_file_unchanged(db):
    with Memory(db, embedder=BrokenEmbedder()) as mem:
        mem.add_many([{"speaker": "A", "text": f"fine {i}"} for i in range(5)])
        before = _state(db, mem)
        with pytest.raises(EmbeddingError):
            mem.add_many([{"speaker": "A", "text": "ok"}, {"speaker": "A", "text": "boom"}])
        assert _state(db, mem) == before
    with Memory(db, embedder=NaNEmbedder(model_id="fake-bow-32")) as mem:
        with pytest.raises(EmbeddingError, match="NaN"):
            mem.add("A", "nan please")
        assert mem.stats()["messages"] == 5 and mem.check() == []


def test_failure_inside_the_structure_step_rolls_back_everything(db):
    with Memory(db, embedder=FakeEmbedder(), config=Config(sem_low=0.0, sem_high=1.0)) as mem:
        mem.add_many([{"speaker": "A", "text": f"alpha {i}"} for i in range(4)])

    class BrokenJudge:
        def continues(self, *a, **k):
            raise RuntimeError("judge bug")

    # every message goes to the judge (the whole band), and the judge has a bug
    cfg = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.999, tau_split=0.0)
    with Memory(db, embedder=FakeEmbedder(), config=cfg, boundary_judge=BrokenJudge()) as mem:
        snapshot = _state(db, mem)
        with pytest.raises(RuntimeError):
            mem.add_many([{"speaker": "B", "text": "beta one"}, {"speaker": "B", "text": "beta two"}])
        assert _state(db, mem) == snapshot


def _state(path, mem):
    """What the file holds (read directly), and what ``mem`` reports about it."""
    with raw(path) as con:
        return [con.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                for t in ("messages", "segments", "message_units", "trajectories", "core_facts")] + [
            con.execute("SELECT count(*) FROM message_vec").fetchone(), mem.stats()]


class DiskFullVFS(apsw.VFS):
    """A disk with ``free`` bytes left: a write that would grow any file past its size plus
    what is left fails with SQLITE_FULL, as a full disk does."""

    def __init__(self):
        self.free: int | None = None  # None: unlimited
        super().__init__("diskfull", "unix", makedefault=True)

    def xOpen(self, name, flags):
        return DiskFullFile(self, name, flags)


class DiskFullFile(apsw.VFSFile):
    def __init__(self, vfs, name, flags):
        self.vfs = vfs
        super().__init__("unix", name, flags)

    def xWrite(self, data, offset):
        size = self.xFileSize()
        grow = max(0, offset + len(data) - size)
        if grow and self.vfs.free is not None:
            if grow > self.vfs.free:
                raise apsw.FullError("database or disk is full")
            self.vfs.free -= grow
        return super().xWrite(data, offset)


def test_disk_full_leaves_the_file_as_it_was(db):
    vfs = DiskFullVFS()
    try:
        with Memory(db, embedder=FakeEmbedder()) as mem:
            mem.add_many([{"speaker": "A", "text": f"seed {i}"} for i in range(5)])
            snapshot = _state(db, mem)
            vfs.free = 8192  # two pages left on the disk
            with pytest.raises(StorageFullError, match="disk is full") as err:
                mem.add_many([{"speaker": "A", "text": "x" * 20000 + f" {i}"} for i in range(30)])
            assert isinstance(err.value.__cause__, apsw.FullError)  # mapped at the choke point, cause kept
            vfs.free = None
            assert _state(db, mem) == snapshot
            mem.add("A", "room again")
            assert mem.stats()["messages"] == 6 and mem.check() == []
    finally:
        vfs.unregister()


# -- 3. concurrent use ----------------------------------------------------------------------------
def _writer(path, tag, n, q, key):
    try:
        with Memory(path, embedder=FakeEmbedder(), key=key) as mem:
            for i in range(n):
                mem.add("W", f"{tag} message {i}")
        q.put(("ok", tag))
    except Exception as e:  # noqa: BLE001
        q.put(("error", f"{tag}: {type(e).__name__}: {e}"))


def _reader(path, seconds, q, key):
    try:
        with Memory(path, embedder=FakeEmbedder(), key=key) as mem:
            end, n = time.time() + seconds, 0
            while time.time() < end:
                mem.search("message", k=5)
                n += 1
        q.put(("ok", f"reader {n}"))
    except Exception as e:  # noqa: BLE001
        q.put(("error", f"reader: {type(e).__name__}: {e}"))


@pytest.mark.slow
@KEYS
def test_two_writers_and_a_reader_lose_nothing(db, key):
    Memory(db, embedder=FakeEmbedder(), key=key).close()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(db), t, 60, q, key)) for t in ("a", "b")]
    procs.append(ctx.Process(target=_reader, args=(str(db), 4, q, key)))
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert all(r[0] == "ok" for r in results), results
    with raw(db, key) as con:
        texts = {t for (t,) in con.execute("SELECT text FROM messages")}
    assert texts == {f"{t} message {i}" for t in "ab" for i in range(60)}
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        assert mem.check() == []
        segs = mem.segments()
        assert sum(len(s.message_ids) for s in segs) == 120 and sum(not s.closed for s in segs) == 1


# -- 4. hostile files -------------------------------------------------------------------------------
@KEYS
def test_view_and_oversized_vec_declaration_refused_untouched(db, key):
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        mem.add("A", "hello")
    con = keyed(apsw.Connection(str(db)), key)  # whoever has the key can plant anything
    con.execute("CREATE VIEW leak AS SELECT text FROM messages")
    con.close()
    before = db.read_bytes()
    with pytest.raises(MemoryFileError, match="view leak"):
        Memory(db, embedder=FakeEmbedder(), key=key)
    assert db.read_bytes() == before
    con = keyed(apsw.Connection(str(db)), key)
    con.execute("DROP VIEW leak")
    con.execute("PRAGMA writable_schema=ON")
    con.execute("UPDATE sqlite_schema SET sql=replace(sql, 'int8[32]', 'int8[4000000]') WHERE name='message_vec'")
    con.close()
    with pytest.raises(MemoryFileError, match="message_vec"):
        Memory(db, embedder=FakeEmbedder(), key=key)


@KEYS
def test_check_finds_damaged_vector_chunks(db, key):
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        mem.add_many([{"speaker": "A", "text": f"m {i}"} for i in range(3)])
    con = keyed(apsw.Connection(str(db)), key)
    con.execute("UPDATE message_vec_vector_chunks00 SET vectors=zeroblob(10)")
    con.close()
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        problems = mem.check()
    assert any("message_vec" in p and "wrong size" in p for p in problems)


# -- 5. bad input -------------------------------------------------------------------------------------
text_st = st.one_of(st.text(min_size=1, max_size=300), st.sampled_from([
    "'; DROP TABLE messages; --", 'x" OR 1=1 --', "NEAR(a b)", "\x00nul\x00 inside", "🙂 emoji and 中文",
    "a" * 1_000_000]))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(texts=st.lists(text_st, min_size=1, max_size=4),
       session=st.one_of(st.none(), st.text(max_size=20), st.integers()))
def test_any_text_is_stored_verbatim_or_refused_cleanly(tmp_path_factory, texts, session):
    db = tmp_path_factory.mktemp("bad") / "m.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        items = [{"speaker": "A", "text": t, "session": session} for t in texts]
        try:
            ids = mem.add_many(items)
        except InvalidInputError:
            assert mem.stats()["messages"] == 0
            return
        assert [mem.get(i).text for i in ids] == texts
        mem.search(texts[0][:200] if texts[0].strip() else "x", k=3)
        assert mem.check() == []


# -- 7. portability -------------------------------------------------------------------------------------
def _full_state(path):
    tables = ["messages", "segments", "trajectories", "message_units", "core_facts", "fact_sources", "fact_history",
              "candidate_clusters", "cluster_statements", "cluster_evidence", "cluster_queries", "active_facts",
              "llm_calls"]
    with raw(path) as con:  # a message's record time is when this file learnt it (an import: when it ran)
        cols = {t: ", ".join(CREATED_AT if (t, r[1]) == ("messages", "created_at") else r[1]  # read whole
                             for r in con.execute(f"PRAGMA table_info({t})") if r[1] != "known_at")
                for t in tables}
        out = {t: con.execute(f"SELECT {cols[t]} FROM {t} ORDER BY rowid").fetchall() for t in tables}
        for v in ("message_vec", "segment_vec", "trajectory_vec", "fact_vec", "active_fact_vec"):
            out[v] = con.execute(f"SELECT rowid, embedding FROM {v} ORDER BY rowid").fetchall()
    return out


def test_export_import_round_trips_everything(tmp_path, sample_messages):
    from memsif_lite.active_facts import Evidence

    emb = FakeEmbedder()
    src = tmp_path / "src.db"
    with Memory(src, embedder=emb, config=Config(sem_low=0.0, sem_high=1.0)) as mem:
        mem.add_many(sample_messages)
        moved = mem.add("Maya", "I moved to Braga!")
        mem.add("Leo", "Braga is lovely.")
        for q in ("where does maya live", "maya home city"):
            mem.accumulate(q, [Evidence("Maya lives in Braga", "Maya", (moved,)),
                               Evidence("Maya lives in Braga", "Maya", (12,))])
        assert mem.facts(include_superseded=True) and mem.candidates()
        n = mem.export_to(tmp_path / "dump.jsonl")
        state = _full_state(src)
    assert n > 100
    with Memory(tmp_path / "dst.db", embedder=emb, config=Config(sem_low=0.0, sem_high=1.0)) as new:
        new.import_from(tmp_path / "dump.jsonl")
        assert _full_state(tmp_path / "dst.db") == state
        assert {h.text for h in new.search("Braga", k=2)} == {"I moved to Braga!", "Braga is lovely."}
        assert new.check() == []
        with pytest.raises(InvalidInputError, match="fresh"):
            new.import_from(tmp_path / "dump.jsonl")
    lines = (tmp_path / "dump.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:5] + ['{"table": "sqlite_schema", "row": {}}']))
    with Memory(tmp_path / "dst2.db", embedder=emb) as new:
        with pytest.raises(InvalidInputError, match="unknown table"):
            new.import_from(bad)
        assert new.stats()["messages"] == 0
    with Memory(tmp_path / "dst3.db", embedder=FakeEmbedder(model_id="other")) as new:
        with pytest.raises(InvalidInputError, match="embedding model"):
            new.import_from(tmp_path / "dump.jsonl")


def _slow_writer(path, q):
    with Memory(path, embedder=FakeEmbedder()) as mem:
        q.put("started")
        for i in range(150):
            mem.add("W", f"background message {i}")
    q.put("done")


@pytest.mark.slow
def test_backup_is_consistent_while_a_writer_is_active(tmp_path):
    db = tmp_path / "live.db"
    Memory(db, embedder=FakeEmbedder()).close()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_slow_writer, args=(str(db), q))
    p.start()
    assert q.get(timeout=60) == "started"
    time.sleep(0.3)
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.backup(tmp_path / "copy.db")
        with pytest.raises(InvalidInputError):
            mem.backup(tmp_path / "copy.db")
    assert q.get(timeout=120) == "done"
    p.join()
    assert not (tmp_path / "copy.db-wal").exists() or (tmp_path / "copy.db-wal").stat().st_size == 0
    with Memory(tmp_path / "copy.db", embedder=FakeEmbedder()) as copy:
        assert copy.check() == []
        n = copy.stats()["messages"]
        assert [m.text for m in copy.messages()] == [f"background message {i}" for i in range(n)]
        assert sum(len(s.message_ids) for s in copy.segments()) == n


def test_cli_check_export_import_backup(tmp_path):
    from click.testing import CliRunner

    from memsif_lite.cli import main

    db = tmp_path / "c.db"
    with Memory(db) as mem:
        mem.add_many([{"speaker": "A", "text": "I live in Lisbon."}, {"speaker": "B", "text": "Nice city."}])
    r = CliRunner()
    out = r.invoke(main, ["check", "--db", str(db)])
    assert out.exit_code == 0 and out.output.startswith("OK"), out.output
    assert r.invoke(main, ["export", "--db", str(db), "--out", str(tmp_path / "e.jsonl")]).exit_code == 0
    out = r.invoke(main, ["import", str(tmp_path / "e.jsonl"), "--db", str(tmp_path / "n.db")])
    assert out.exit_code == 0 and "imported 2 messages" in out.output, out.output
    assert r.invoke(main, ["backup", "--db", str(db), str(tmp_path / "b.db")]).exit_code == 0
    (tmp_path / "junk.db").write_bytes(os.urandom(5000))
    out = r.invoke(main, ["check", "--db", str(tmp_path / "junk.db")])
    assert out.exit_code == 1 and "NOT OK" in out.output and "not an SQLite database" in out.output
