"""The command line's defects of issues 23 and 24: reads that wrote, byte-order marks, arguments
that are not UTF-8, unused speaker-map roles, a failing command that deleted another process's
message, destinations that followed symlinks or were world-readable, terminal escapes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsif_lite import InvalidInputError, Memory, MemoryFileError, memory_path
from memsif_lite.cli import main
from memsif_lite.importers import read_jsonl, read_locomo

MEMSIF = str(Path(sys.executable).parent / "memsif")


def run(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


def clean_error(r, code: int = 1) -> None:
    assert r.exit_code == code, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Error: " in r.stderr and "Traceback" not in r.output, r.output
    assert r.stdout == ""


def listing(d: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mode) for p in d.iterdir()} if d.exists() else {}


def lines(*objs) -> str:
    return "".join(json.dumps(o) + "\n" for o in objs)


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    """Three messages, one with a terminal escape in its speaker and several in its text."""
    db = tmp_path_factory.mktemp("defects") / "m.db"
    src = db.parent / "m.jsonl"
    src.write_text(lines(
        {"speaker": "Ana\x1b[31m", "text": "I moved to Lisbon\x1b]0;pwned\x07 last year and I work at Acme\x9b2J "
                                           "as a nurse.", "at": "2024-01-01T10:00:00"},
        {"speaker": "Bo", "text": "My dog is called Rex\x1b[2J\x1bc.", "at": "2024-01-02T10:00:00"},
        {"speaker": "Bo", "text": "Lisbon is sunny\r\x08\x7f\u202e today.", "at": "2024-01-03T10:00:00"}))
    assert run("ingest", src, "--db", db).exit_code == 0
    return db


# -- 23.1: a read never writes ----------------------------------------------------------------------
READS = [["stats"], ["search", "Lisbon"], ["messages"], ["facts"], ["facts", "--active"], ["show"],
         ["context", "Lisbon"], ["export", "--out", "OUT/x.jsonl"], ["backup", "OUT/b.db"], ["check"]]
WRITES_BUT_NEVER_CREATE = [["ask", "Lisbon?"], ["forget", "--message", "1"], ["process"]]


@pytest.mark.parametrize("args", READS + WRITES_BUT_NEVER_CREATE, ids=lambda a: " ".join(a[:2]))
def test_a_command_that_does_not_create_memory_files_leaves_an_empty_file_as_it_is(tmp_path, args):
    (tmp_path / "OUT").mkdir()
    empty = tmp_path / "z.db"
    empty.touch()
    before = listing(tmp_path)
    r = run(*[a.replace("OUT", str(tmp_path / "OUT")) for a in args], "--db", empty)
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output
    assert "empty" in r.output and "not a memory file" in r.output, r.output
    assert listing(tmp_path) == before and listing(tmp_path / "OUT") == {}


def test_every_read_command_works_on_a_file_in_a_read_only_directory_and_writes_nothing(tmp_path, small_db):
    """Issue 23.2: a read-only open made an empty -wal and a 32 KB -shm beside the file. As root the
    directory's mode does not stop a write: the unchanged bytes and listing are what is checked."""
    (tmp_path / "OUT").mkdir()
    home = tmp_path / "ro"
    home.mkdir()
    db = home / "m.db"
    db.write_bytes(small_db.read_bytes())
    before = {p.name: p.read_bytes() for p in home.iterdir()}
    home.chmod(0o555)
    try:
        for args in READS:
            r = run(*[a.replace("OUT", str(tmp_path / "OUT")) for a in args], "--db", db)
            assert r.exit_code == 0, (args, r.output)
            assert {p.name: p.read_bytes() for p in home.iterdir()} == before, args
    finally:
        home.chmod(0o755)


@pytest.mark.parametrize("args", READS, ids=lambda a: " ".join(a[:2]))
def test_a_read_refuses_a_directory_and_creates_nothing(tmp_path, args):
    (tmp_path / "OUT").mkdir()
    home = tmp_path / "home"
    (home / "users" / "ana.db").mkdir(parents=True)  # where ana's file would be
    before = listing(home / "users")
    r = run(*[a.replace("OUT", str(tmp_path / "OUT")) for a in args], "--user", "ana", "--home", home)
    assert r.exit_code == 1 and "not a regular file" in r.output and "Traceback" not in r.output, r.output
    assert listing(home / "users") == before and list((home / "users" / "ana.db").iterdir()) == []
    r = run(*[a.replace("OUT", str(tmp_path / "OUT")) for a in args], "--db", home / "users" / "ana.db")
    assert r.exit_code == 2 and "is a directory" in r.stderr  # click's own check of --db
    assert listing(tmp_path / "OUT") == {}


# -- 23.5: a byte-order mark -------------------------------------------------------------------------
def test_a_utf8_byte_order_mark_is_accepted_in_files_stdin_and_locomo(tmp_path):
    bom = "\ufeff"
    jsonl = tmp_path / "bom.jsonl"
    jsonl.write_text(bom + lines({"speaker": "Ana", "text": "hello there"}, {"speaker": "Bo", "text": "hi"}),
                     encoding="utf-8")
    r = run("ingest", jsonl, "--db", tmp_path / "a.db")
    assert r.exit_code == 0 and "added 2 messages" in r.stdout, r.output
    r = run("ingest", "-", "--db", tmp_path / "b.db", input=(bom + lines({"role": "user", "content": "hey"})).encode())
    assert r.exit_code == 0 and "added 1 message" in r.stdout, r.output
    locomo = tmp_path / "conv.json"
    locomo.write_text(bom + json.dumps({"conversation": {
        "speaker_a": "Ana", "speaker_b": "Bo", "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ana", "text": "I paint.", "dia_id": "D1:1"}]}}), encoding="utf-8")
    r = run("ingest", locomo, "--db", tmp_path / "c.db")
    assert r.exit_code == 0 and "added 1 message" in r.stdout, r.output
    assert [m["speaker"] for m in read_jsonl(jsonl)] == ["Ana", "Bo"]
    assert [m["text"] for m in read_locomo(locomo)[0]] == ["I paint."]
    jsonl.write_text(lines({"speaker": "Ana", "text": "one"}) + bom + lines({"speaker": "Bo", "text": "two"}))
    clean_error(run("ingest", jsonl, "--db", tmp_path / "d.db"))  # only the first line may start with one


# -- 23.6: arguments that are not UTF-8 --------------------------------------------------------------
def test_an_argument_that_is_not_utf8_is_named_with_its_byte(tmp_path, small_db):
    r = run("add", "A", "bad \udcff\udcfe bytes", "--db", tmp_path / "new.db")  # how Python decodes argv
    clean_error(r, code=2)
    assert "Invalid value for 'TEXT': not valid UTF-8 (byte 0xff at offset 4)" in r.stderr, r.stderr
    assert not (tmp_path / "new.db").exists()
    r = run("search", "\udcff", "--db", small_db)
    clean_error(r, code=2)
    assert "'QUERY': not valid UTF-8 (byte 0xff at offset 0)" in r.stderr, r.stderr
    r = run("messages", "--speaker", "Bo", "--speaker", "caf\udcc3", "--db", small_db)
    clean_error(r, code=2)
    assert "'--speaker': not valid UTF-8 (byte 0xc3 at offset 3)" in r.stderr, r.stderr


def test_bytes_on_a_real_command_line(tmp_path):
    r = subprocess.run([MEMSIF, "add", "A", b"bad \xff\xfe bytes", "--db", str(tmp_path / "new.db")],
                       capture_output=True, timeout=120)
    assert r.returncode == 2 and b"'TEXT': not valid UTF-8 (byte 0xff at offset 4)" in r.stderr, r.stderr
    assert b"Traceback" not in r.stderr and not (tmp_path / "new.db").exists()


# -- 23.8: unused speaker-map roles, one wording for failed adds --------------------------------------
def test_a_speaker_map_role_no_line_has_is_reported(tmp_path):
    src = tmp_path / "chat.jsonl"
    src.write_text(lines({"role": "user", "content": "I adopted a beagle."}, {"role": "assistant", "content": "Nice!"}))
    r = run("ingest", src, "--db", tmp_path / "a.db", "--speaker-map", "user=Ana,system=Sys,sytem=X")
    assert r.exit_code == 0 and "added 2 messages" in r.stdout, r.output
    assert "Warning: --speaker-map names roles no line has: system, sytem" in r.stderr, r.stderr
    r = run("ingest", src, "--db", tmp_path / "a.db", "--speaker-map", "user=Ana,assistant=Bot")
    assert r.exit_code == 0 and "Warning" not in r.stderr, r.output


def test_every_failed_add_or_ingest_says_nothing_was_added(tmp_path):
    db = tmp_path / "m.db"
    assert run("add", "Ana", "first", "--db", db).exit_code == 0
    bad = {"notjson.jsonl": '{"speaker": "A", "text": "x"}\n{oops\n', "notutf8.jsonl": b"\xff\xfe",
           "empty_text.jsonl": lines({"speaker": "A", "text": ""}), "array.json": "[1, 2]",
           "keys.jsonl": lines({"speaker": "A", "text": "x", "colour": "red"})}
    results = []
    for name, content in bad.items():
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        results.append(run("ingest", p, "--db", db))
    results += [run("add", "Ana", "  ", "--db", db), run("add", "Ana", "hi", "--at", "soon", "--db", db),
                run("ingest", "-", "--db", db, input="{nope\n"),
                run("ingest", tmp_path / "keys.jsonl", "--db", db, "--speaker-map", "user")]
    for r in results:
        clean_error(r)
        assert r.stderr.rstrip().endswith("(nothing was added)") and r.stderr.count("nothing was added") == 1, r.stderr
    with Memory(db, read_only=True) as mem:
        assert mem.stats()["messages"] == 1


# -- 24.1: a failing command never removes what another process wrote --------------------------------
def _add(db: Path, text: str) -> subprocess.CompletedProcess:
    return subprocess.run([MEMSIF, "add", "Ana", text, "--db", str(db)], capture_output=True, text=True, timeout=300)


def test_a_failing_add_never_removes_the_message_another_process_added(tmp_path):
    """Before: the failing `add` saw no file, took the file as its own and unlinked it (and its
    -wal) after the other had acknowledged its message: lost in 3 of 10 trials."""
    with ThreadPoolExecutor(2) as pool:
        for trial in range(6):
            db = tmp_path / f"race{trial}.db"
            good, bad = pool.submit(_add, db, "the acknowledged message"), pool.submit(_add, db, " ")
            assert good.result().returncode == 0 and "added message 1" in good.result().stdout, good.result()
            assert bad.result().returncode == 1 and "text is empty" in bad.result().stderr, bad.result()
            with Memory(db, read_only=True) as mem:
                assert [m.text for m in mem.messages()] == ["the acknowledged message"], trial


def test_bad_input_creates_no_file_and_a_failed_import_leaves_none(tmp_path):
    clean_error(run("add", "Ana", "", "--db", tmp_path / "a.db"))
    src = tmp_path / "c.jsonl"
    src.write_text(lines({"speaker": "A", "text": "fine"}, {"speaker": "A", "text": "x", "at": "someday"}))
    clean_error(run("ingest", src, "--db", tmp_path / "b.db"))
    bad_export = tmp_path / "bad.jsonl"
    bad_export.write_text('{"not": "an export"}\n')
    before = listing(tmp_path)
    clean_error(run("import", bad_export, "--db", tmp_path / "c.db"))
    assert listing(tmp_path) == before and not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_import_into_a_new_file_builds_it_aside(tmp_path, small_db):
    out = tmp_path / "e.jsonl"
    assert run("export", "--db", small_db, "--out", out).exit_code == 0
    r = run("import", out, "--db", tmp_path / "new.db")
    assert r.exit_code == 0 and "imported 3 messages" in r.stdout, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.jsonl", "new.db"]  # no temporary file left
    with Memory(tmp_path / "new.db", read_only=True) as mem:
        assert mem.stats()["messages"] == 3


# -- 24.6: destinations ------------------------------------------------------------------------------
def test_export_refuses_an_existing_file_unless_forced_and_follows_no_planted_link(tmp_path, small_db):
    out = tmp_path / "out.jsonl"
    out.write_text("precious\n")
    clean_error(run("export", "--db", small_db, "--out", out))
    assert out.read_text() == "precious\n"
    r = run("export", "--db", small_db, "--out", out, "--force")
    assert r.exit_code == 0 and out.read_text().count("\n") > 3, r.output
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "new.jsonl.partial").symlink_to(victim)  # the old fixed temporary name
    r = run("export", "--db", small_db, "--out", tmp_path / "new.jsonl")
    assert r.exit_code == 0 and victim.read_text() == "keep me\n", r.output
    link = tmp_path / "link.jsonl"
    link.symlink_to(victim)
    clean_error(run("export", "--db", small_db, "--out", link))
    assert run("export", "--db", small_db, "--out", link, "--force").exit_code == 0
    assert not link.is_symlink() and victim.read_text() == "keep me\n"  # the link was replaced, not followed
    with Memory(small_db, read_only=True) as mem:
        with pytest.raises(InvalidInputError, match="already exists"):
            mem.export_to(out)
        assert mem.export_to(out, overwrite=True) > 3


def test_backup_refuses_any_symlink_even_a_dangling_one(tmp_path, small_db):
    dangling = tmp_path / "b.db"
    dangling.symlink_to(tmp_path / "target.db")
    clean_error(run("backup", dangling, "--db", small_db))
    assert not (tmp_path / "target.db").exists() and dangling.is_symlink()
    existing = tmp_path / "existing.db"
    existing.write_text("x")
    clean_error(run("backup", existing, "--db", small_db))
    assert existing.read_text() == "x"
    assert run("backup", tmp_path / "ok.db", "--db", small_db).exit_code == 0
    with Memory(tmp_path / "ok.db", read_only=True) as mem:
        assert mem.stats()["messages"] == 3


def test_a_memory_home_file_that_is_a_symlink_is_refused(tmp_path, small_db):
    home = tmp_path / "home"
    (home / "users").mkdir(parents=True)
    bob = home / "users" / "bob.db"
    bob.write_bytes(small_db.read_bytes())
    (home / "users" / "eve.db").symlink_to(bob)
    with pytest.raises(MemoryFileError, match="symbolic link"):
        memory_path("eve", home=home)
    (home / "agents").symlink_to(home / "users")  # a directory on the way counts too
    with pytest.raises(MemoryFileError, match="symbolic link"):
        memory_path(agent="bob", home=home)
    for args in (["stats"], ["add", "Eve", "hello"]):
        r = run(*args, "--user", "eve", "--home", home)
        clean_error(r)
        assert "symbolic link" in r.stderr
    with Memory(bob, read_only=True) as mem:
        assert mem.stats()["messages"] == 3


# -- 24.7: export and backup are private -------------------------------------------------------------
def test_export_and_backup_are_0600_under_umask_022(tmp_path, small_db):
    previous = os.umask(0o022)
    try:
        assert run("export", "--db", small_db, "--out", tmp_path / "e.jsonl").exit_code == 0
        assert run("backup", tmp_path / "b.db", "--db", small_db).exit_code == 0
        for name in ("e.jsonl", "b.db"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name
        (tmp_path / "e.jsonl").chmod(0o644)
        assert run("export", "--db", small_db, "--out", tmp_path / "e.jsonl", "--force").exit_code == 0
        assert stat.S_IMODE((tmp_path / "e.jsonl").stat().st_mode) == 0o600
    finally:
        os.umask(previous)


# -- 24.10: terminal escapes -------------------------------------------------------------------------
TERMINAL_ACTIVE = ("\x1b", "\x07", "\x9b", "\r", "\x08", "\x7f", "\u202e")
SHOWING = [["messages"], ["show"], ["search", "Lisbon"], ["search", "Lisbon", "--level", "segment"], ["facts"],
           ["context", "Where does Ana live?"], ["ask", "Where does Ana live?"]]


@pytest.mark.parametrize("args", SHOWING, ids=lambda a: " ".join(a))
def test_stored_terminal_escapes_are_shown_not_sent(tmp_path, small_db, args):
    db = tmp_path / "m.db"
    db.write_bytes(small_db.read_bytes())
    r = run(*args, "--db", db)
    assert r.exit_code == 0, r.output
    assert not [c for c in TERMINAL_ACTIVE if c in r.stdout], repr(r.stdout)
    assert "\\x1b" in r.stdout, r.stdout  # shown, visibly
    r = run(*args, "--db", db, "--json")
    assert r.exit_code == 0 and not [c for c in TERMINAL_ACTIVE if c in r.stdout], repr(r.stdout)
    assert any("\x1b" in text for text in strings(json.loads(r.stdout)))  # --json stays exact


def strings(doc):
    if isinstance(doc, str):
        yield doc
    elif isinstance(doc, (list, dict)):
        for v in doc.values() if isinstance(doc, dict) else doc:
            yield from strings(v)



def test_an_error_naming_what_a_hostile_file_holds_is_shown_not_sent(tmp_path, small_db):
    """The cold review of issue 24: a planted table named with an OSC sequence reached the terminal
    through the schema refusal's message."""
    import apsw

    db = tmp_path / "esc.db"
    db.write_bytes(small_db.read_bytes())
    con = apsw.Connection(str(db))
    con.execute('CREATE TABLE "\x1b]0;PWNED\x07"(x)')
    con.close()
    for args in (["stats", "--db", db], ["merge", db, "--db", small_db, "--dry-run"]):
        r = run(*args)
        assert r.exit_code == 1 and "schema" in r.stderr, r.output
        assert not [c for c in TERMINAL_ACTIVE if c in r.stderr], repr(r.stderr)
        assert "\\x1b]0;PWNED\\x07" in r.stderr


@pytest.mark.parametrize("args", [["search", "x", "-k", "0"], ["search", "x", "-k", "100000000"],
                                  ["context", "x", "--budget", "10"], ["ask", "x", "--budget", "300000"]])
def test_a_number_out_of_its_range_is_a_usage_error_naming_the_range(small_db, args):
    """Found by a new user (stop 40): -k 0 exited 2 but -k 100000000 and --budget 10 exited 1."""
    r = CliRunner().invoke(main, [*args, "--db", str(small_db)])
    assert r.exit_code == 2 and "is not in the range" in r.output and "Traceback" not in r.output, r.output


def test_a_file_this_user_cannot_write_is_named_as_such():
    """SQLite's "attempt to write a readonly database" (the file, its folder or its -wal/-shm not
    writable by this user) says what to do about it."""
    import apsw

    from memsif_lite import StorageError, store

    with pytest.raises(StorageError, match=r"read-only for this user; fix their permissions \(to read the file "
                                           r"only: Memory\(\.\.\., read_only=True\)\)"):
        with store.map_errors():
            raise apsw.ReadOnlyError("attempt to write a readonly database")


def test_a_speaker_map_storing_the_user_under_a_machine_name_is_refused(tmp_path):
    """Found by a new user (stop 40): ``--speaker-map user=assistant`` was taken, and no CoreFact
    about the user could ever be kept (they are dropped for the assistant's names, as
    ``integrations.Speakers`` refuses such a user)."""
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"role": "user", "content": "I live in Porto", "at": "2024-01-01T10:00:00"}\n')
    for spec in ("user=assistant", "user= System ", "assistant=Bot,user=Tool"):
        r = CliRunner().invoke(main, ["ingest", str(chat), "--db", str(tmp_path / "m.db"), "--speaker-map", spec])
        assert r.exit_code == 1 and "the user cannot be stored as" in r.output and "Traceback" not in r.output
        assert not (tmp_path / "m.db").exists()
    r = CliRunner().invoke(main, ["ingest", str(chat), "--db", str(tmp_path / "m.db"), "--speaker-map", "user=Sam"])
    assert r.exit_code == 0, r.output
