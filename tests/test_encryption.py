"""Encryption at rest (README "Encrypting your memory", memsif_lite.encryption): nothing stored and
no key ever reaches the disk in clear, a wrong or missing key changes nothing, files convert in
place between plain and encrypted, and the command line takes keys without ever showing them.
(The reliability tests in test_reliability.py also run on an encrypted file.)"""

from __future__ import annotations

import json
import logging
import os
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from fakes import FakeEmbedder, raw
from memsif_lite import (Config, EncryptedFileError, InvalidInputError, Memory, MemoryFileError, MemsifError,
                         NotEncryptedError, decrypt, encrypt, open_memory, prompts, rekey)
from memsif_lite.cli import main
from memsif_lite.keys import as_key

KEY = "correct horse battery staple"
OTHER_KEY = b"\x00laptop key bytes\xff"
WRONG = "Tr0ub4dor&3"
#: words the session stores (in messages, speakers, titles, facts); none may appear on disk
WORDS = ("Fennimore", "Quokkaville", "marzipan", "zeppelin", "Ottoline")


def _disk(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _found(files: dict[str, bytes], *secrets: str | bytes) -> list[tuple[str, str]]:
    """(file, what) for every stored word, key (or its hex) found in ``files`` (case-insensitively)."""
    needles = []
    for s in secrets:
        raw_bytes = s.encode() if isinstance(s, str) else s
        needles += [raw_bytes.lower(), raw_bytes.hex().encode()]
    return [(name, needle.decode(errors="replace")) for name, data in files.items() for needle in needles
            if needle in data.lower()]


def _wait_processed(mem: Memory, seconds: float = 60) -> None:
    end = time.monotonic() + seconds
    while mem.stats()["pending_steps"] and time.monotonic() < end:
        time.sleep(0.05)
    assert mem.stats()["pending_steps"] == 0


def test_a_scripted_session_leaves_no_stored_word_and_no_key_on_disk(tmp_path, llm_server, caplog):
    caplog.set_level(logging.DEBUG, logger="memsif_lite")
    llm_server.route({
        prompts.EXTRACT_SYSTEM: json.dumps({"facts": [{"subject": "Fennimore", "type": "Identity",
                                                       "stmt": "Fennimore lives in Quokkaville", "lines": [1]}]}),
        prompts.OPERATION_SYSTEM: '{"op": "add", "target": null, "stmt": "Fennimore lives in Quokkaville"}',
        prompts.TITLE_SYSTEM: '{"title": "Fennimore and the marzipan zeppelin"}',
    })
    work = tmp_path / "work"
    work.mkdir()
    laptop, mine = work / "laptop.db", work / "me.db"
    with Memory(laptop, embedder=FakeEmbedder(), key=OTHER_KEY) as other:
        other.add("Ottoline", "The zeppelin over Quokkaville was huge", at="2024-02-01T10:00:00", session="9")
    cfg = Config(llm_retries=0, sem_low=0.0, sem_high=1.0)
    with Memory(mine, embedder=FakeEmbedder(), key=KEY, llm="openai/test-model", config=cfg,
                llm_kwargs=llm_server.llm_kwargs(), process="background") as mem:  # a worker thread, its own connection
        mem.add_many([
            {"speaker": "Fennimore", "text": "I live in Quokkaville.", "at": "2024-01-01T09:00:00", "session": "1"},
            {"speaker": "Fennimore", "text": "I bake marzipan on Sundays", "at": "2024-01-01T09:01:00", "session": "1"},
            {"speaker": "Ottoline", "text": "Quokkaville has a zeppelin museum", "at": "2024-01-08T09:00:00",
             "session": "2"},
            {"speaker": "Ottoline", "text": "See you next week", "at": "2024-01-15T09:00:00", "session": "3"}])
        _wait_processed(mem)
        assert any(f.stmt == "Fennimore lives in Quokkaville" for f in mem.facts())
        assert mem.search("marzipan", k=1)[0].text == "I bake marzipan on Sundays"
        mem.forget(message_id=2)
        mem.merge_from(laptop, key=OTHER_KEY)
        _wait_processed(mem)
        assert "The zeppelin over Quokkaville was huge" in {m.text for m in mem.messages()}
        while_open = _disk(tmp_path)
    after = _disk(tmp_path)
    assert "work/me.db-wal" in while_open  # the WAL was there to be read
    assert _found(while_open, *WORDS, KEY, OTHER_KEY) == []
    assert _found(after, *WORDS, KEY, OTHER_KEY) == []
    assert KEY not in caplog.text and OTHER_KEY.hex() not in caplog.text and llm_server.requests
    assert all(KEY not in json.dumps(r) for r in llm_server.requests)
    # the same bytes in clear would have been found: a copy, decrypted
    with Memory(mine, embedder=FakeEmbedder(), key=KEY, read_only=True) as mem:
        titles = {s.label for s in mem.segments()}
        mem.backup(tmp_path / "copy.db")
    assert "Fennimore and the marzipan zeppelin" in titles
    decrypt(tmp_path / "copy.db", KEY)
    assert {w for _, w in _found(_disk(tmp_path), *WORDS)} == {w.lower() for w in WORDS}


def _tries(db: Path) -> list[Exception]:
    """Every way of opening ``db`` without its key; each must fail before writing anything."""
    errors = []
    attempts = [dict(), dict(key=WRONG), dict(key=WRONG.encode()), dict(key=WRONG, read_only=True),
                dict(read_only=True)]
    for kwargs in attempts:
        with pytest.raises(EncryptedFileError) as err:
            Memory(db, embedder=FakeEmbedder(), **kwargs)
        assert err.value.key_given == ("key" in kwargs)
        errors.append(err.value)
    for key in (None, WRONG):
        with Memory(db.parent.parent / "elsewhere.db", embedder=FakeEmbedder()) as other:
            with pytest.raises(EncryptedFileError) as err:
                other.merge_from(db, key=key)
            errors.append(err.value)
    for f in (lambda: decrypt(db, WRONG), lambda: rekey(db, WRONG, "new"), lambda: encrypt(db, "new")):
        with pytest.raises(MemoryFileError) as err:
            f()
        errors.append(err.value)
    return errors


def test_a_wrong_or_missing_key_changes_nothing_on_disk(tmp_path):
    db = tmp_path / "secret" / "me.db"
    db.parent.mkdir()
    with Memory(db, embedder=FakeEmbedder(), key=KEY) as mem:
        mem.add("Fennimore", "I live in Quokkaville.")
    before = _disk(db.parent)
    errors = _tries(db)
    assert _disk(db.parent) == before  # byte-identical, and no file created beside it
    for e in errors:
        assert KEY not in str(e) and WRONG not in str(e) and WRONG.encode().hex() not in str(e), e
    assert "encrypted: give its key" in str(errors[0]) and "does not open it" in str(errors[1])
    # while another connection has it open (its -wal is there), the file and the -wal stay as they are too
    with Memory(db, embedder=FakeEmbedder(), key=KEY) as mem:
        mem.add("Fennimore", "another one")
        sides = {k: v for k, v in _disk(db.parent).items() if not k.endswith("-shm")}
        _tries(db)
        assert {k: v for k, v in _disk(db.parent).items() if not k.endswith("-shm")} == sides


def test_a_plain_file_is_refused_with_a_key_and_keys_are_checked(tmp_path):
    db = tmp_path / "plain.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add("A", "in the clear")
    before = db.read_bytes()
    with pytest.raises(NotEncryptedError, match="not encrypted"):
        Memory(db, embedder=FakeEmbedder(), key=KEY)
    with Memory(tmp_path / "other.db", embedder=FakeEmbedder(), key=KEY) as mem, \
            pytest.raises(NotEncryptedError):
        mem.merge_from(db, key="a key it does not need")
    with pytest.raises(NotEncryptedError):
        decrypt(db, KEY)
    assert db.read_bytes() == before
    for bad in ("", b"", 42, "x" * 5000, "\ud800"):
        with pytest.raises(InvalidInputError):
            Memory(tmp_path / "never.db", embedder=FakeEmbedder(), key=bad)
    assert not (tmp_path / "never.db").exists()
    with pytest.raises(InvalidInputError, match="the key the file has"):
        rekey(db, KEY, KEY)


def _export(path: Path, key, out: Path) -> str:
    with Memory(path, embedder=FakeEmbedder(), key=key, read_only=True) as mem:
        mem.export_to(out, overwrite=True)
    return out.read_text(encoding="utf-8")


def test_plain_encrypted_rekeyed_decrypted_round_trip_exports_the_same(tmp_path, sample_messages):
    db, out = tmp_path / "me.db", tmp_path / "export.jsonl"
    with Memory(db, embedder=FakeEmbedder(), config=Config(sem_low=0.0, sem_high=1.0)) as mem:
        mem.add_many(sample_messages)
        mem.forget(message_id=3)
    os.chmod(db, 0o640)
    original = _export(db, None, out)
    encrypt(db, KEY)
    assert db.stat().st_mode & 0o777 == 0o600 and b"Maya" not in db.read_bytes()
    assert _export(db, KEY, out) == original
    with raw(db, KEY) as con:  # what any SQLite3 Multiple Ciphers program sees with `PRAGMA key`
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == len(sample_messages) - 1
    rekey(db, KEY, OTHER_KEY)
    with pytest.raises(EncryptedFileError):
        Memory(db, embedder=FakeEmbedder(), key=KEY)
    assert _export(db, OTHER_KEY, out) == original
    decrypt(db, OTHER_KEY)
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    assert _export(db, None, out) == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.jsonl", "me.db"]  # no copy left behind
    with Memory(db, embedder=FakeEmbedder()) as mem:
        assert mem.check() == []


def test_converting_a_file_another_program_has_open_is_refused(tmp_path):
    db = tmp_path / "busy.db"
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add("A", "still here")
        before = db.read_bytes()
        with pytest.raises(MemoryFileError, match="open in another program"):
            encrypt(db, KEY)
        assert db.read_bytes() == before
        assert mem.stats()["messages"] == 1
    encrypt(db, KEY)  # closed now
    with pytest.raises(MemoryFileError, match="encrypted already"):
        encrypt(db, "another")


CONVERT = """
import sys
from memsif_lite import encrypt
print("ready", flush=True)
encrypt(sys.argv[1], sys.argv[2])
print("done", flush=True)
"""


@pytest.mark.slow
def test_kill_9_during_encrypt_leaves_the_file_plain_or_encrypted_never_lost(tmp_path):
    db, out = tmp_path / "me.db", tmp_path / "e.jsonl"
    with Memory(db, embedder=FakeEmbedder(), process="manual") as mem:
        mem.add_many([{"speaker": "A", "text": f"message {i} " + "x" * 400} for i in range(2000)])
    original = _export(db, None, out)
    script = tmp_path / "convert.py"
    script.write_text(CONVERT)

    def run(kill_after: float | None) -> float:
        proc = subprocess.Popen([sys.executable, str(script), str(db), KEY], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        start = time.monotonic()
        if kill_after is None:
            assert proc.stdout.readline() == "done\n"
        else:
            time.sleep(kill_after)
            proc.kill()
        proc.wait()
        took = time.monotonic() - start
        encrypted = not db.read_bytes().startswith(b"SQLite format 3\x00")
        assert _export(db, KEY if encrypted else None, out) == original
        if encrypted:
            decrypt(db, KEY)
        return took

    whole = run(None)  # how long one conversion takes here; then killed at points across it
    for part in (0.2, 0.6, 0.9, 1.1):
        run(whole * part)
    run(None)  # removes the copies the killed ones left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["convert.py", "e.jsonl", "me.db"]


_KEY_VARIABLES = [f"MEMSIF_{k}{w}" for k in ("KEY", "NEW_KEY", "OTHER_KEY") for w in ("", "_FILE", "_COMMAND")]


def _run(args, **env):
    return CliRunner().invoke(main, args, env={**dict.fromkeys(_KEY_VARIABLES), **env})


def test_cli_keys_from_the_environment_a_file_or_a_command_never_shown(tmp_path):
    db = str(tmp_path / "me.db")
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(KEY + "\n")
    command = f"{shlex.quote(sys.executable)} -c \"print({KEY!r})\""
    r = _run(["add", "Fennimore", "I live in Quokkaville.", "--db", db], MEMSIF_KEY=KEY)
    assert r.exit_code == 0, r.output
    assert b"Quokkaville" not in Path(db).read_bytes()
    for extra, env in (([], {"MEMSIF_KEY": KEY}), (["--key-file", str(keyfile)], {}), (["--key-command", command], {}),
                       ([], {"MEMSIF_KEY_FILE": str(keyfile)})):
        r = _run(["messages", "--db", db, "--json", *extra], **env)
        assert r.exit_code == 0 and json.loads(r.output)["messages"][0]["text"] == "I live in Quokkaville.", r.output
    for args, env, code, says in [
            (["stats", "--db", db], {}, 1, "this memory file is encrypted: give its key (set MEMSIF_KEY"),
            (["stats", "--db", db], {"MEMSIF_KEY": KEY + "x"}, 1, "does not open it"),
            (["stats", "--db", db, "--key-file", str(keyfile)], {"MEMSIF_KEY": KEY}, 2, "one way"),
            (["stats", "--db", db, "--key-command", "false"], {}, 1, "failed (exit status 1)"),
            (["encrypt", "--db", db], {"MEMSIF_KEY": KEY}, 1, "encrypted already"),
            (["decrypt", "--db", db], {}, 2, "give the key of"),
            (["mcp", "--db", db], {}, 1, "give its key"),
            (["view", "--db", db, "--out", str(tmp_path / "v.html")], {}, 1, "give its key")]:
        r = _run(args, **env)
        assert r.exit_code == code and says in r.output, (args, r.output)
        assert KEY not in r.output and "Traceback" not in r.output
    page = tmp_path / "view.html"  # a view is plain HTML by design, as an export is plain JSON
    r = _run(["view", "--db", db, "--out", str(page), "--json"], MEMSIF_KEY=KEY)
    assert r.exit_code == 0 and "Quokkaville" in page.read_text(encoding="utf-8") and KEY not in r.output, r.output
    r = _run(["rekey", "--db", db, "--json"], MEMSIF_KEY=KEY, MEMSIF_NEW_KEY="new key")
    assert r.exit_code == 0 and json.loads(r.output) == {"db": db, "encrypted": True}, r.output
    plain = str(tmp_path / "plain.db")
    assert _run(["add", "Ottoline", "plain words", "--db", plain]).exit_code == 0
    r = _run(["merge", db, "--db", plain])
    assert r.exit_code == 1 and "give its key (set MEMSIF_OTHER_KEY" in r.output, r.output
    r = _run(["merge", db, "--db", plain, "--json"], MEMSIF_OTHER_KEY="new key")
    assert r.exit_code == 0 and json.loads(r.output)["added"] == 1, r.output
    assert b"Quokkaville" in Path(plain).read_bytes() and b"new key" not in Path(plain).read_bytes()
    dump, copy = str(tmp_path / "dump.jsonl"), str(tmp_path / "copy.db")
    assert _run(["export", "--db", db, "--out", dump], MEMSIF_KEY="new key").exit_code == 0
    r = _run(["import", dump, "--db", copy], MEMSIF_KEY_FILE=str(keyfile))  # into a new file, encrypted
    assert r.exit_code == 0 and b"Quokkaville" not in Path(copy).read_bytes(), r.output
    r = _run(["decrypt", "--db", db], MEMSIF_KEY="new key")
    assert r.exit_code == 0 and b"Quokkaville" in Path(db).read_bytes()
    assert _run(["encrypt", "--db", db, "--key-file", str(keyfile)]).exit_code == 0
    assert b"Quokkaville" not in Path(db).read_bytes()


def test_a_key_is_asked_for_on_a_terminal(tmp_path):
    """Without a key, a command on a terminal asks for it (not echoed); the answer opens the file."""
    pty = pytest.importorskip("pty")
    termios, fcntl = pytest.importorskip("termios"), pytest.importorskip("fcntl")
    db = tmp_path / "me.db"
    with Memory(db, key=KEY) as mem:  # the bundled model: the command opens the file with the model it records
        mem.add("Fennimore", "I live in Quokkaville.")
    parent, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSIF_")}

    def terminal() -> None:  # the pty is the command's terminal (where a hidden prompt reads)
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen([sys.executable, "-m", "memsif_lite.cli", "stats", "--db", str(db), "--json"],
                            stdin=child, stdout=subprocess.PIPE, stderr=child, env=env, preexec_fn=terminal)
    os.close(child)
    seen, deadline = b"", time.monotonic() + 60
    while b"Key of" not in seen and time.monotonic() < deadline:
        if select.select([parent], [], [], 1.0)[0]:
            seen += os.read(parent, 1024)
    assert b"Key of" in seen, seen
    os.write(parent, KEY.encode() + b"\n")
    out, _ = proc.communicate(timeout=60)
    os.close(parent)
    assert proc.returncode == 0 and json.loads(out)["messages"] == 1
    assert KEY.encode() not in seen


def test_per_user_files_and_a_read_only_memory_reuse_the_key(tmp_path):
    with open_memory(user="alice", home=tmp_path, embedder=FakeEmbedder(), key=KEY) as mem:
        mem.add("alice", "I live in Quokkaville.")
    path = tmp_path / "users" / "alice.db"
    assert b"Quokkaville" not in path.read_bytes()
    with Memory(path, embedder=FakeEmbedder(), key=KEY, read_only=True) as reader:
        assert reader.stats()["messages"] == 1
        with Memory(path, embedder=FakeEmbedder(), key=KEY) as writer:  # the reader now shares the file
            writer.add("alice", "and I bake marzipan")
            assert reader.stats()["messages"] == 2
    key = as_key(KEY)
    assert KEY not in repr(key) and KEY not in str(key)


def test_the_installed_apsw_encrypts():
    assert hasattr(apsw, "mc_version"), ("memsif_lite depends on apsw-sqlite3mc, and a plain apsw replaced it: "
                                         "pip install --force-reinstall --no-deps apsw-sqlite3mc")


def test_a_key_through_a_vfs_that_does_not_encrypt_is_refused(tmp_path):
    """A program may make its own VFS the default, straight over the disk: a key is then refused,
    and the file made for it removed, rather than anything written in clear."""

    class Plain(apsw.VFS):
        def __init__(self):
            super().__init__("plain-test-vfs", "unix", makedefault=True)

    vfs = Plain()
    try:
        with pytest.raises(MemoryFileError, match="does not encrypt"):
            Memory(tmp_path / "new.db", embedder=FakeEmbedder(), key=KEY)
    finally:
        vfs.unregister()
    assert list(tmp_path.iterdir()) == []


def test_a_changed_byte_is_refused_not_read_differently(tmp_path):
    """Each page carries its Poly1305 tag: a byte changed by anyone without the key makes the file
    refused or its page unreadable (a MemsifError), never quietly different."""
    db = tmp_path / "me.db"
    with Memory(db, embedder=FakeEmbedder(), key=KEY) as mem:
        mem.add_many([{"speaker": "A", "text": f"message {i} " + "x" * 300} for i in range(60)])
    data = bytearray(db.read_bytes())
    data[len(data) // 2] ^= 0x01
    db.write_bytes(bytes(data))
    try:
        with Memory(db, embedder=FakeEmbedder(), key=KEY) as mem:
            problems = mem.check()
            texts = [m.text for m in mem.messages()]
    except MemsifError:
        return  # refused, or a read of the changed page failed
    assert problems, "a changed byte went unnoticed"
    assert texts == [f"message {i} " + "x" * 300 for i in range(60)]


def test_programs_memsif_starts_do_not_inherit_the_key(tmp_path):
    db = str(tmp_path / "me.db")
    assert _run(["add", "Fennimore", "I live in Quokkaville.", "--db", db], MEMSIF_KEY=KEY).exit_code == 0
    tells = f"{shlex.quote(sys.executable)} -c \"import os; print('new-' + str('MEMSIF_KEY' in os.environ))\""
    r = _run(["rekey", "--db", db, "--new-key-command", tells], MEMSIF_KEY=KEY)
    assert r.exit_code == 0, r.output
    assert _run(["stats", "--db", db], MEMSIF_KEY="new-False").exit_code == 0  # the command did not see it
