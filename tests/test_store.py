"""The file: round trips, refusals of foreign/newer/hostile files (left untouched), migrations."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import apsw
import sqlite_vec
import pytest

from memsif_lite import (
    EmbeddingMismatchError,
    Memory,
    MemoryFileError,
    NotAMemoryFileError,
    SchemaVersionError,
    StorageCorruptError,
)
from fakes import FakeEmbedder, raw
from memsif_lite import store
from memsif_lite.keys import as_key


def _snapshot(path):
    return {p: open(p, "rb").read() for p in (str(path), f"{path}-wal") if os.path.exists(p)}


def test_create_reopen_round_trip(db, embedder):
    with Memory(db, embedder=embedder) as mem:
        a = mem.add("Ana", "I moved to Lisbon in May.", at="2024-05-02T10:00:00+02:00", session="s1")
        b = mem.add("Ben", "Welcome to Portugal!", at="2024-05-02T08:01:00Z")
        assert (a, b) == (1, 2)
    with Memory(db, embedder=embedder) as mem:
        msgs = mem.messages()
        assert [m.text for m in msgs] == ["I moved to Lisbon in May.", "Welcome to Portugal!"]
        assert msgs[0].at.isoformat() == "2024-05-02T08:00:00"  # stored as UTC
        assert msgs[0].session == "s1" and msgs[1].session is None
        assert mem.stats()["messages"] == 2
        assert mem.search("Lisbon", k=1)[0].id == a
    with raw(db) as con:
        assert con.execute("PRAGMA application_id").fetchone()[0] == store.APPLICATION_ID
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta["embedding_model"] == embedder.model_id and meta["embedding_dim"] == "384"


def test_foreign_sqlite_file_refused_and_unchanged(db, fake_embedder):
    con = apsw.Connection(str(db))
    con.execute("CREATE TABLE notes(x); INSERT INTO notes VALUES('mine')")
    con.close()
    before = _snapshot(db)
    with pytest.raises(NotAMemoryFileError, match="not a memsif memory file"):
        Memory(db, embedder=fake_embedder)
    assert _snapshot(db) == before


@pytest.mark.parametrize("content", [os.urandom(4096), b"hello, this is a text file\n" * 50,
                                     b"SQLite format 3\x00" + os.urandom(200)])
def test_non_sqlite_and_truncated_files_refused(db, fake_embedder, content):
    db.write_bytes(content)
    with pytest.raises(NotAMemoryFileError):
        Memory(db, embedder=fake_embedder)
    assert db.read_bytes() == content


def test_truncated_memory_file_refused(db, fake_embedder):
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add_many([{"speaker": "A", "text": f"message number {i} " * 30} for i in range(60)])
    con = apsw.Connection(str(db))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    with pytest.raises(MemoryFileError):
        Memory(db, embedder=fake_embedder)
    assert len(db.read_bytes()) == len(data) // 2


def _scribble_over_message_pages(db):
    con = apsw.Connection(str(db))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    pages = [r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name='messages' AND pagetype='leaf'")]
    con.close()
    data = bytearray(db.read_bytes())
    for pg in pages:
        off = (pg - 1) * 4096
        data[off + 100: off + 400] = b"\xff" * 300
    db.write_bytes(bytes(data))
    return bytes(data)


def test_a_large_file_is_checked_whole_by_check_not_at_every_open(db, fake_embedder, monkeypatch):
    """Past FULL_CHECK_MAX_BYTES an open reads the schema, not every page (seconds at 1M
    messages): a damaged message page is then found when read, as a StorageCorruptError, and by
    ``check``; under it, the open itself refuses the file. Nothing is written either way."""
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add_many([{"speaker": "A", "text": f"message number {i} " * 30} for i in range(60)])
    damaged = _scribble_over_message_pages(db)
    with pytest.raises(MemoryFileError, match="quick_check"):
        Memory(db, embedder=fake_embedder)
    monkeypatch.setattr(store, "FULL_CHECK_MAX_BYTES", len(damaged) - 1)
    with Memory(db, embedder=fake_embedder) as mem:
        with pytest.raises(StorageCorruptError):
            mem.messages()
        assert any("integrity" in p or "corrupt" in p.lower() or "malformed" in p for p in mem.check())
    assert db.read_bytes() == damaged


def test_every_connection_gets_the_larger_page_cache(db, fake_embedder):
    """Read-write, read-only, immutable and encrypted connections alike: PAGE_CACHE_KIB of page cache (BM25 at a million
    messages looks up every scored row's length; SQLite's 2 MB default sent those to the OS)."""
    locked = db.with_name("locked.db")
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add("A", "hello there")
    with Memory(locked, embedder=fake_embedder, key="correct horse battery staple") as mem:
        mem.add("A", "hello there")
    key = as_key("correct horse battery staple")
    opens = [(db, dict()), (db, dict(readonly=True)), (db, dict(readonly=True, immutable=True)),
             (locked, dict(key=key)), (locked, dict(key=key, readonly=True))]
    for path, how in opens:
        con = store.connect(path, dim=fake_embedder.dim, **how)
        try:
            assert con.execute("PRAGMA cache_size").fetchone()[0] == -store.PAGE_CACHE_KIB, how
        finally:
            con.close()
    assert store.PAGE_CACHE_KIB >= 16 * 1024


def test_newer_schema_version_refused_and_unchanged(db, fake_embedder):
    Memory(db, embedder=fake_embedder).close()
    con = apsw.Connection(str(db))
    con.execute("PRAGMA user_version=99")
    con.close()
    before = _snapshot(db)
    with pytest.raises(SchemaVersionError, match="newer"):
        Memory(db, embedder=fake_embedder)
    assert _snapshot(db) == before


def test_other_embedding_model_refused(db, fake_embedder):
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add("A", "hello there")
    before = _snapshot(db)
    with pytest.raises(EmbeddingMismatchError, match="fake-bow-32"):
        Memory(db, embedder=FakeEmbedder(dim=32, model_id="another-model"))
    with pytest.raises(EmbeddingMismatchError):
        Memory(db, embedder=FakeEmbedder(dim=16, model_id="fake-bow-32"))
    assert _snapshot(db) == before


def test_foreign_trigger_refused(db, fake_embedder):
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add("A", "hello there")
    con = apsw.Connection(str(db))
    con.execute("CREATE TABLE stolen(x); "
                "CREATE TRIGGER t AFTER INSERT ON messages BEGIN INSERT INTO stolen VALUES(new.text); END;")
    con.close()
    with pytest.raises(MemoryFileError, match="trigger t"):
        Memory(db, embedder=fake_embedder)


def test_migrations_are_stepwise(db, fake_embedder):
    """A file at schema version 1 is upgraded in place, keeping its messages."""
    con = store.connect(db, dim=32)  # all migrations
    con.close()
    db.unlink()
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{db}{suffix}"):
            os.remove(f"{db}{suffix}")
    con = apsw.Connection(str(db))
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(store.migrations()[0][1].replace("{dim}", "32"))
    con.execute(f"PRAGMA application_id={store.APPLICATION_ID}; PRAGMA user_version=1")
    con.execute("INSERT INTO meta VALUES('embedding_model','fake-bow-32'),('embedding_dim','32'),"
                "('embedding_metric','cosine')")
    con.close()
    with Memory(db, embedder=fake_embedder) as mem:
        mem.add("A", "after the upgrade")
        assert mem.stats()["messages"] == 1
    with raw(db) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version()


def test_import_is_light():
    code = ("import sys, memsif_lite; "
            "heavy = [m for m in ('onnxruntime', 'litellm', 'tokenizers') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_closed_memory_refuses_calls(db, fake_embedder):
    mem = Memory(db, embedder=fake_embedder)
    mem.close()
    with pytest.raises(MemoryFileError, match="closed"):
        mem.add("A", "x")


def test_a_new_memory_file_and_its_side_files_are_private_whatever_the_umask(tmp_path):
    """Issue 24.7: under umask 022 the file, its -wal and its -shm were 0644."""
    old = os.umask(0o022)
    try:
        db = tmp_path / "m.db"
        with Memory(db, embedder=FakeEmbedder()) as mem:
            mem.add("Ana", "I live in Lisbon.")
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert set(modes) == {"m.db", "m.db-wal", "m.db-shm"}
    assert set(modes.values()) == {0o600}, modes


def test_a_new_memory_file_is_never_created_through_a_dangling_link(tmp_path):
    (tmp_path / "m.db").symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(MemoryFileError, match="symbolic link"):
        Memory(tmp_path / "m.db", embedder=FakeEmbedder())
    assert not (tmp_path / "elsewhere.db").exists()


def test_the_bundled_model_writes_nothing_outside_the_memory_file(tmp_path):
    """onnxruntime 1.32 writes a device id and a telemetry store under ~/.cache/Microsoft when it is
    imported; memsif turns that off (ORT_DISABLE_TELEMETRY, unless the caller set it), so opening a
    file and embedding with the bundled model writes the memory file and nothing else (a fresh
    process: this one may have imported onnxruntime already)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env["HOME"] = str(home)
    env.pop("XDG_CACHE_HOME", None)
    code = ("import sys; from memsif_lite import Memory\n"
            "with Memory(sys.argv[1]) as m:\n"
            "    m.add('Ana', 'I live in Lisbon'); assert m.search('where does Ana live?')\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.db")], env=env, check=True, cwd=tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == ["m.db"]


def test_a_file_this_user_cannot_write_is_refused_at_open_and_reads_read_only(tmp_path):
    """Found by a new user (stop 40): a memory file read-only on disk opened for writing without a
    word, then failed at the first write. SQLite opens such a file read-only: memsif refuses it at
    open, naming why, and reads it with ``read_only=True``. (Made unwritable with ``chattr +i``:
    root, which runs these tests, ignores permission bits.)"""
    import shutil

    from memsif_lite import Memory, MemoryFileError

    db = tmp_path / "m.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add("Ana", "I live in Lisbon")
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("no chattr +i here (a filesystem without it, or no privilege)")
    try:
        with pytest.raises(MemoryFileError, match="read-only for this user.*read_only=True"):
            Memory(db, embedder=FakeEmbedder())
        with Memory(db, embedder=FakeEmbedder(), read_only=True) as mem:
            assert [m.text for m in mem.messages()] == ["I live in Lisbon"]
    finally:
        subprocess.run([chattr, "-i", str(db)], check=True)
