"""Memories kept apart: one file per user / agent under a memory home (API and CLI), and names
that cannot escape the home."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, raw
from memsif_lite import InvalidInputError, Memory, MemoryFileError, memory_path, open_memory
from memsif_lite import homes
from memsif_lite.cli import main

ACCEPTED = ["alice", "Alice", "bob.smith", "user-42", "a", "x" * 64, "alice@example.com", "team+bot", "u_1", "9lives",
            "console", "com10", "nul-x", "a..b"]
REFUSED = ["", ".", "..", "../x", "..\\x", "/etc/passwd", "a/b", "a\\b", "C:x", "c:\\x", "x\x00y", ".hidden", "-rf",
           "_x", "x" * 65, "trailing.", "sp ace", "tab\t", "new\nline", "CON", "con", "nul", "Nul.txt", "com1", "LPT9",
           "aux.db", "prn", "conin$", "é", "\u212a", "ǅ", "ａ", "~", "~root", "a*b", "a?b", "a|b", "a:b", '"q"', "<x>"]


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_names_are_plain_lower_case_file_names(name, tmp_path):
    assert homes.validate_name(name) == name.lower()
    for p in (memory_path(name, home=tmp_path), memory_path(agent=name, home=tmp_path),
              memory_path(name, name, home=tmp_path)):
        assert p.name == name.lower() + ".db" and p.resolve().is_relative_to(tmp_path.resolve())


@pytest.mark.parametrize("name", REFUSED)
def test_refused_names(name, tmp_path):
    for call in (lambda: memory_path(name, home=tmp_path), lambda: memory_path(agent=name, home=tmp_path),
                 lambda: memory_path("ok", name, home=tmp_path), lambda: open_memory(name, home=tmp_path)):
        with pytest.raises(InvalidInputError):
            call()
    assert list(tmp_path.iterdir()) == []                               # nothing created


def test_non_string_names_and_no_name_at_all(tmp_path):
    for bad in (None, 1, b"alice", ["alice"]):
        with pytest.raises(InvalidInputError):
            homes.validate_name(bad)
    with pytest.raises(InvalidInputError):
        memory_path(home=tmp_path)


names = st.one_of(st.text(max_size=80),
                  st.text(alphabet=st.sampled_from(list("aZ09._-@+/\\:\x00 ~$")), max_size=12),
                  st.sampled_from(REFUSED + ACCEPTED))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.one_of(st.none(), names), agent=st.one_of(st.none(), names))
def test_no_accepted_name_resolves_outside_the_home(tmp_path, user, agent):
    home = tmp_path / "home"
    try:
        p = memory_path(user, agent, home=home)
    except InvalidInputError:
        return
    rel = p.resolve().relative_to(home.resolve())        # raises if outside
    if user is None:
        expected: tuple[str, ...] = ("agents", agent.lower() + ".db")
    elif agent is None:
        expected = ("users", user.lower() + ".db")
    else:
        expected = ("users", user.lower(), agent.lower() + ".db")
    assert rel.parts == expected
    for part in rel.parts:
        assert part not in (".", "..") and not part.startswith(".") and "\x00" not in part
        assert part.split(".")[0].upper() not in {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)),
                                                   *(f"LPT{i}" for i in range(10))}


def test_users_and_agents_are_kept_apart(tmp_path):
    home = tmp_path / "h"
    layout = {("alice", None): "users/alice.db", ("bob", None): "users/bob.db",
              ("alice", "coder"): "users/alice/coder.db", (None, "coder"): "agents/coder.db"}
    for (user, agent), rel in layout.items():
        with open_memory(user, agent, home=home, embedder=FakeEmbedder()) as mem:
            assert mem.path == home / rel
            mem.add(user or "agent", f"I am {user} / {agent}: my secret is {rel}")
    for (user, agent), rel in layout.items():
        text = f"I am {user} / {agent}: my secret is {rel}"
        with raw(home / rel) as con:
            assert con.execute("SELECT text FROM messages").fetchall() == [(text,)]
        with open_memory(user, agent, home=home, embedder=FakeEmbedder(), read_only=True) as mem:
            assert [h.text for h in mem.search("secret", k=10)] == [text]
    with open_memory("ALICE", home=home, embedder=FakeEmbedder()) as mem:    # one name, one file
        assert mem.path == home / "users/alice.db" and mem.stats()["messages"] == 1
    if os.name == "posix":
        for d in (home, home / "users", home / "users/alice", home / "agents"):
            assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_read_only_open_memory_creates_nothing(tmp_path):
    with pytest.raises(MemoryFileError, match="no memory file"):
        open_memory("carol", home=tmp_path / "h", read_only=True, embedder=FakeEmbedder())
    assert not (tmp_path / "h").exists()


def test_default_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMSIF_HOME", str(tmp_path / "mh"))
    assert homes.default_home() == tmp_path / "mh"
    assert memory_path("alice") == tmp_path / "mh" / "users" / "alice.db"
    monkeypatch.delenv("MEMSIF_HOME")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert homes.default_home() == tmp_path / "xdg" / "memsif"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")            # the XDG spec: only absolute paths count
    assert homes.default_home() == Path.home() / ".local" / "share" / "memsif"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert homes.default_home() == Path.home() / "Library" / "Application Support" / "memsif"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("APPDATA", str(tmp_path / "roaming"))
    assert homes.default_home() == tmp_path / "roaming" / "memsif"


# -- the command line ---------------------------------------------------------------------------------
def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


@pytest.fixture
def jsonl(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"speaker": "Ana", "text": "I live in Lisbon."}) + "\n")
    return src


def test_cli_user_and_agent_under_a_home(tmp_path, jsonl):
    home = tmp_path / "h"
    r = run("ingest", jsonl, "--user", "alice", "--home", home, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["db"] == str(home / "users" / "alice.db")
    r = run("stats", "--user", "alice", "--json", env={"MEMSIF_HOME": str(home)})
    assert r.exit_code == 0 and json.loads(r.stdout)["messages"] == 1, r.output
    r = run("search", "Lisbon", "--user", "alice", "--agent", "coder", "--home", home)  # another file: none yet
    assert r.exit_code == 1 and "no memory file" in r.stderr
    assert not (home / "users" / "alice").exists()                      # a read command creates nothing
    r = run("ingest", jsonl, "--agent", "coder", "--home", home)
    assert r.exit_code == 0 and (home / "agents" / "coder.db").exists(), r.output
    with Memory(home / "users" / "alice.db", read_only=True) as mem:
        assert mem.stats()["messages"] == 1                            # not mixed with the agent's


def test_cli_db_and_user_are_exclusive_and_names_are_checked(tmp_path, jsonl):
    home, db = tmp_path / "h", tmp_path / "x.db"
    r = run("ingest", jsonl, "--db", db, "--user", "alice", "--home", home)
    assert r.exit_code == 2 and "give one of them" in r.output and not db.exists() and not home.exists()
    r = run("ingest", jsonl, "--user", "../evil", "--home", home)
    assert r.exit_code == 2 and "not allowed" in r.output and not home.exists()
    r = run("stats")
    assert r.exit_code == 2 and "--db FILE" in r.output
    # MEMSIF_DB in the environment yields to an explicit --user
    r = run("ingest", jsonl, "--user", "bob", "--home", home, env={"MEMSIF_DB": str(db)})
    assert r.exit_code == 0 and (home / "users" / "bob.db").exists() and not db.exists(), r.output
