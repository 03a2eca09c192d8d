"""``Memory.compact`` / ``memsif compact``: SQLite's VACUUM in place. Everything stays as it was
(rows, ids, vectors, search results), the message vectors lie in one stretch of the file afterwards,
free pages go back, and a crash, a full disk or too little room leaves the file as it was."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
import pytest
import sqlite_vec
from click.testing import CliRunner

from fakes import FakeEmbedder, keyed, raw
from memsif_lite import CompactReport, InvalidInputError, Memory, ReadOnlyError, StorageFullError
from memsif_lite.cli import main
from memsif_lite.db import maintenance
from test_reliability import DiskFullVFS

TESTS = Path(__file__).parent
KEYS = pytest.mark.parametrize("key", [None, "a passphrase of the test"], ids=["plain", "encrypted"])
VECTORS = ("message_vec", "segment_vec", "trajectory_vec", "fact_vec")


def _grow(mem: Memory, batches: int, per: int = 40) -> None:
    """Messages added batch by batch, as an assistant adds them: the file grows a little of every
    table at a time, so the message vectors' chunks lie between the other tables' pages."""
    for b in range(batches):
        mem.add_many([{"speaker": "Ana" if i % 2 else "Ben",
                       "text": f"batch {b} note {i}: the {['garden', 'trip', 'job', 'band'][i % 4]} plan "
                               f"number {b * per + i} " + "words " * (i % 9)} for i in range(per)])


def _state(path: Path, key: str | None) -> dict[str, list]:
    """Every row of every table that is not virtual (a rowid table's with its rowid, vec0's and
    FTS5's shadow tables among them), read directly, and every stored vector."""
    with raw(path, key) as con:
        tables = con.execute("SELECT name, sql FROM sqlite_schema WHERE type='table' AND sql NOT LIKE 'CREATE VIRTUAL%'"
                             ).fetchall()
        out = {name: (sorted(con.execute(f'SELECT * FROM "{name}"').fetchall(), key=repr) if "WITHOUT ROWID" in sql
                      else con.execute(f'SELECT _rowid_, * FROM "{name}" ORDER BY _rowid_').fetchall())
               for name, sql in tables}
        for v in VECTORS:
            out[v] = con.execute(f"SELECT rowid, embedding FROM {v} ORDER BY rowid").fetchall()
    assert len(tables) > 30
    return out


def test_every_rowid_table_keeps_its_rowids_through_a_vacuum(db):
    """SQLite's VACUUM keeps the rowids of a table with an INTEGER PRIMARY KEY or an index, and may
    renumber the others' (vec0 reads its chunks by rowid): every rowid table of the schema has one."""
    Memory(db, embedder=FakeEmbedder()).close()
    with raw(db) as con:
        for (name,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table' "
                                   "AND sql NOT LIKE 'CREATE VIRTUAL%' AND sql NOT LIKE '%WITHOUT ROWID%'"):
            cols = con.execute(f'PRAGMA table_info("{name}")').fetchall()
            keys = [c for c in cols if c[5]]
            ipk = len(keys) == 1 and keys[0][2].upper() == "INTEGER"
            assert ipk or con.execute(f'PRAGMA index_list("{name}")').fetchall() or name == "sqlite_sequence", name


def _vector_runs(path: Path, key: str | None) -> int:
    """In how many stretches of consecutive pages the message vectors' chunks lie (``dbstat``)."""
    with raw(path, key) as con:
        pages = sorted(r[0] for r in con.execute(
            "SELECT pageno FROM dbstat WHERE name='message_vec_vector_chunks00'"))
    return 1 + sum(1 for a, b in zip(pages, pages[1:], strict=False) if b != a + 1)


@KEYS
def test_compact_keeps_everything_and_lays_the_vectors_in_one_stretch(db, key):
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        _grow(mem, 30)
        gone = [m.id for m in mem.messages()][::5]
        for mid in gone:
            mem.forget(message_id=mid)  # free pages for the compaction to give back
        before, runs = _state(db, key), _vector_runs(db, key)
        hits = [(h.id, round(h.score, 6)) for h in mem.search("the garden plan", k=8)]
        report = mem.compact()
        assert isinstance(report, CompactReport)
        assert report.bytes_after < report.bytes_before and report.seconds >= 0
        assert _state(db, key) == before
        assert [(h.id, round(h.score, 6)) for h in mem.search("the garden plan", k=8)] == hits
        assert runs > 2 and _vector_runs(db, key) <= 2, runs  # the chunks' pages, and the table's own
        assert mem.check() == []
        mem.add("Ana", "after the compaction: the band plan is on")  # the same Memory goes on
        assert mem.search("band plan is on", k=1)[0].text.startswith("after the compaction")
    assert os.stat(db).st_mode & 0o777 == 0o600
    if key is not None:
        assert b"garden" not in db.read_bytes()
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        assert mem.check() == [] and mem.stats()["messages"] == 30 * 40 - len(gone) + 1


def test_compact_cuts_the_wal_back(db):
    """The compaction writes every page through the -wal, which SQLite keeps at its largest unless
    a size limit is set when it starts over: the compaction's last write starts it over, cut back
    to what that write needs (the older page images go with the rest)."""
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 40, per=50)
        wal = Path(f"{db}-wal")
        assert wal.stat().st_size > 1_000_000  # the adds' frames
        report = mem.compact()
        assert report.wal_bytes == wal.stat().st_size <= 32 + 2 * (24 + 4096)  # its header and a frame or two
        with raw(db) as con:
            assert con.execute("PRAGMA journal_size_limit").fetchone()[0] == -1  # (another connection: its own)
        mem.add("Ana", "one more")
        assert mem.search("one more", k=1)[0].text == "one more"


def test_compact_refused_on_a_read_only_memory(db):
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 2)
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    with Memory(db, embedder=FakeEmbedder(), read_only=True) as ro:
        with pytest.raises(ReadOnlyError, match="compact"):
            ro.compact()
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest


def test_too_little_room_is_found_before_anything_is_written(db, monkeypatch):
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 5)
        before = _state(db, None)
        real = maintenance.shutil.disk_usage
        monkeypatch.setattr(maintenance.shutil, "disk_usage",
                            lambda p: real(p)._replace(free=db.stat().st_size // 2))  # half the file
        with pytest.raises(StorageFullError, match="needs about .* MB free in .*nothing was changed"):
            mem.compact()
        assert _state(db, None) == before
        monkeypatch.setattr(maintenance.shutil, "disk_usage",  # room for the copy or the -wal, not both
                            lambda p: real(p)._replace(free=db.stat().st_size * 3 // 2))
        if maintenance.sqlite_temp_dir() is not None and (
                maintenance.sqlite_temp_dir().stat().st_dev == db.parent.stat().st_dev):
            with pytest.raises(StorageFullError):
                mem.compact()
        monkeypatch.undo()
        assert mem.compact().bytes_after > 0 and _state(db, None) == before


def test_the_room_needed_is_the_pages_in_use(db, monkeypatch):
    """After a large forget the file shrinks: the room asked for is its pages in use, not its size."""
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 20, per=50)
        for m in mem.messages(limit=900):
            mem.forget(message_id=m.id)
        with raw(db) as con:
            free = con.execute("PRAGMA freelist_count").fetchone()[0] * 4096
            size = con.execute("PRAGMA page_count").fetchone()[0] * 4096
        assert free > size // 5
        real = maintenance.shutil.disk_usage
        monkeypatch.setattr(maintenance.shutil, "disk_usage",
                            lambda p: real(p)._replace(free=int(2.3 * (size - free))))  # < 2.2 x the whole file
        report = mem.compact()
        assert report.bytes_after <= size - free + 64 * 4096 < report.bytes_before


def test_sqlite_temp_dir_follows_sqlite_order(tmp_path, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    b.mkdir()
    monkeypatch.setenv("SQLITE_TMPDIR", str(a))  # not a folder: skipped, as SQLite skips it
    monkeypatch.setenv("TMPDIR", str(b))
    assert maintenance.sqlite_temp_dir() == b
    a.mkdir()
    assert maintenance.sqlite_temp_dir() == a


def _open(path: Path, key: str | None = None) -> apsw.Connection:
    con = keyed(apsw.Connection(str(path)), key)
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    con.setbusytimeout(200)
    return con


def _settings(con: apsw.Connection) -> tuple:
    return (con.execute("PRAGMA temp_store").fetchone()[0], con.execute("PRAGMA journal_size_limit").fetchone()[0],
            con.limit(apsw.SQLITE_LIMIT_ATTACHED, -1))


def test_the_connection_settings_are_put_back_whatever_happens(db, monkeypatch):
    """temp_store (memsif keeps temporary files in memory, never on disk), the attached-database
    limit and journal_size_limit: as they were after a compaction, a refusal and a full disk."""
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 10)
    con = _open(db)
    try:
        con.execute("PRAGMA temp_store=MEMORY")
        con.execute("PRAGMA journal_size_limit=12345")
        con.limit(apsw.SQLITE_LIMIT_ATTACHED, 0)
        held = _settings(con)
        assert held == (2, 12345, 0)
        maintenance.compact(con, db)
        assert _settings(con) == held
        real = maintenance.shutil.disk_usage
        monkeypatch.setattr(maintenance.shutil, "disk_usage", lambda p: real(p)._replace(free=0))
        with pytest.raises(StorageFullError):
            maintenance.compact(con, db)
        assert _settings(con) == held
        monkeypatch.undo()
        con.execute("BEGIN")
        with pytest.raises(InvalidInputError, match="outside a transaction"):
            maintenance.compact(con, db)
        con.execute("ROLLBACK")
        assert _settings(con) == held
    finally:
        con.close()
    vfs = DiskFullVFS()
    try:
        con = _open(db)
        con.execute("PRAGMA temp_store=MEMORY")
        held = _settings(con)
        vfs.free = 64 * 1024
        with pytest.raises(apsw.FullError):
            maintenance.compact(con, db)
        assert _settings(con) == held
        con.close()
    finally:
        vfs.unregister()


def test_a_writer_after_the_vacuum_leaves_the_compaction_done(db):
    """When another connection takes the write lock between the VACUUM and the write that cuts the
    -wal back, the compaction still stands (no error); the -wal is left as it is."""
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 20, per=50)
    before = _state(db, None)
    con, other = _open(db), _open(db)
    held = []

    def after_commit(_con, _name, _pages) -> int:  # SQLite calls it once a commit has released the lock
        if not held:
            other.execute("BEGIN IMMEDIATE")
            held.append(True)
        return apsw.SQLITE_OK

    try:
        con.set_wal_hook(after_commit)
        size, after, wal = maintenance.compact(con, db)
        assert held and after <= size and wal > 0
        other.execute("ROLLBACK")
    finally:
        other.close()
        con.close()
    assert _state(db, None) == before


def test_a_small_file_gets_its_wal_cut_back_too(db):
    """Under 1,000 pages SQLite runs no automatic checkpoint: the compaction's own PASSIVE one does."""
    with Memory(db, embedder=FakeEmbedder()) as mem:
        _grow(mem, 3)
        assert Path(f"{db}-wal").stat().st_size > 100_000
        report = mem.compact()
        assert report.wal_bytes <= 32 + 2 * (24 + 4096) and report.bytes_after < 4_000_000


def test_a_disk_full_during_the_compaction_leaves_the_file_as_it_was(db):
    vfs = DiskFullVFS()
    try:
        with Memory(db, embedder=FakeEmbedder()) as mem:
            _grow(mem, 10)
            before = _state(db, None)
            vfs.free = 64 * 1024  # far less than the copy SQLite makes
            with pytest.raises(StorageFullError, match="disk is full"):
                mem.compact()
            vfs.free = None
            assert _state(db, None) == before and mem.check() == []
            mem.compact()
            assert _state(db, None) == before
    finally:
        vfs.unregister()


COMPACTOR = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import apsw, sqlite_vec
    sys.path.insert(0, {tests!r})
    from fakes import keyed
    from memsif_lite.db import maintenance
    path, steps = Path(sys.argv[1]), int(sys.argv[2])
    con = keyed(apsw.Connection(str(path)), os.environ.get("MEMSIF_TEST_KEY"))
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    seen = [0]
    def tick():
        seen[0] += 1
        if seen[0] == steps:  # this many times 1,000 virtual-machine steps into the compaction
            print("killing", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return 0
    con.set_progress_handler(tick, 1000)
    maintenance.compact(con, path)
    print("done", flush=True)
""")


@pytest.mark.slow
@KEYS
@pytest.mark.parametrize("at", [0.02, 0.5, 0.98])
def test_kill_9_during_a_compaction_loses_nothing(tmp_path, at, key):
    """The process is killed at a chosen point of the compaction (by its own progress handler, at
    that share of the steps a compaction of a copy took): the file opens, checks and holds what it held."""
    db, copy = tmp_path / "crash.db", tmp_path / "copy.db"
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        _grow(mem, 40, per=50)
        mem.backup(copy)
    before = _state(db, key)
    ticks = [0]
    con = _open(copy, key)
    try:
        con.set_progress_handler(lambda: ticks.__setitem__(0, ticks[0] + 1) or 0, 1000)
        maintenance.compact(con, copy)
    finally:
        con.close()
    steps = max(1, int(ticks[0] * at))
    script = tmp_path / "compactor.py"
    script.write_text(COMPACTOR.format(tests=str(TESTS)))
    env = {**os.environ, **({"MEMSIF_TEST_KEY": key} if key else {})}
    out = subprocess.run([sys.executable, str(script), str(db), str(steps)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == -signal.SIGKILL and out.stdout.strip() == "killing", (ticks, out.stdout, out.stderr)
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        assert mem.check() == []
    assert _state(db, key) == before


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the open files from /proc (Linux)")
@KEYS
def test_the_temporary_copy_is_private_and_as_encrypted_as_the_file(db, key):
    """SQLite builds the compacted file in a temporary one (deleted as soon as it is opened): read
    through this process's open descriptor while the VACUUM runs, it is 0600, and for an encrypted
    memory it holds no text of it in the clear (SQLite3 Multiple Ciphers encrypts it with the file's key)."""
    with Memory(db, embedder=FakeEmbedder(), key=key) as mem:
        _grow(mem, 60, per=50)  # more than SQLite's page cache holds: the copy is written while it runs
    seen: dict[str, tuple[int, bool]] = {}

    def look() -> int:
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.endswith("(deleted)"):
                    with open(f"/proc/self/fd/{fd}", "rb") as f:
                        seen[target] = (os.fstat(int(fd)).st_mode & 0o777, b"garden" in f.read())
            except OSError:
                continue
        return 0

    con = keyed(apsw.Connection(str(db)), key)
    try:
        con.enable_load_extension(True)
        con.load_extension(sqlite_vec.loadable_path())
        con.set_progress_handler(look, 2000)
        maintenance.compact(con, db)
    finally:
        con.close()
    assert seen, "no temporary file was seen"
    assert {mode for mode, _ in seen.values()} == {0o600}
    assert any(clear for _, clear in seen.values()) == (key is None)


def test_cli_compact(db, embedder):
    with Memory(db, embedder=embedder) as mem:  # the model the CLI opens it with
        _grow(mem, 3, per=10)
    runner = CliRunner()
    res = runner.invoke(main, ["compact", "--db", str(db), "--json"], env={"MEMSIF_DB": None})
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["db"] == str(db) and 0 < doc["bytes_after"] <= doc["bytes_before"] and doc["seconds"] >= 0
    res = runner.invoke(main, ["compact", "--db", str(db)])
    assert res.exit_code == 0 and f"compacted {db}" in res.stdout
    res = runner.invoke(main, ["compact", "--db", str(db.parent / "none.db")])
    assert res.exit_code == 1 and "no memory file" in res.output and "Traceback" not in res.output
