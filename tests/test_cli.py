"""The ``memsif`` command line: one JSON object per ``--json`` invocation, human output otherwise,
clean errors (exit 1, no traceback), usage errors (exit 2), shared options and one way to open files."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from memsif_lite import Config, Memory, MemsifError
from memsif_lite.cli import main, options, to_jsonable


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def clean_error(r) -> None:
    """Exit 1 through click (not an escaped exception: CliRunner would swallow its traceback)."""
    assert r.exit_code == 1, r.output
    assert isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.stderr.startswith("Error: ") and "Traceback" not in r.output, r.output
    assert r.stdout == ""


@pytest.fixture(scope="module")
def mem_db(tmp_path_factory, sample_messages):
    db = tmp_path_factory.mktemp("cli") / "m.db"
    src = db.parent / "sample.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in sample_messages))
    r = run("ingest", src, "--db", db)
    assert r.exit_code == 0, r.output
    return db


@pytest.fixture
def db_copy(mem_db, tmp_path):
    dest = tmp_path / "copy.db"
    shutil.copy(mem_db, dest)
    return dest


JSON_COMMANDS = {
    "search": (["search", "Where does Maya live?", "-k", "3"], {"query", "level", "k", "results"}),
    "search-segment": (["search", "running shoes", "--level", "segment", "-k", "1"], {"results"}),
    "stats": (["stats"], {"messages", "segments", "trajectories", "core_facts", "llm_calls"}),
    "show": (["show"], {"trajectories", "segments", "messages"}),
    "ask": (["ask", "Who is Maya's manager?"], {"question", "text", "extractive", "evidence", "facts", "context",
                                                 "sufficient", "tokens_in", "tokens_out", "llm_calls"}),
    "context": (["context", "Where does Maya live?", "--budget", "300"],
                {"question", "text", "facts", "evidence", "sufficient", "tokens", "budget_tokens", "message_ids"}),
    "facts": (["facts", "--all"], {"facts"}),
    "facts-active": (["facts", "--active"], {"active_facts"}),
    "check": (["check"], {"ok", "problems", "stats"}),
}


@pytest.mark.parametrize("name", list(JSON_COMMANDS))
def test_json_is_one_object_per_invocation(name, mem_db):
    args, keys = JSON_COMMANDS[name]
    r = run(*args, "--db", mem_db, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # the whole of stdout is one document
    assert isinstance(doc, dict) and keys <= set(doc), doc
    if name == "search":
        hit = doc["results"][0]
        assert len(doc["results"]) == 3 and {"id", "speaker", "text", "at", "score", "message_ids"} <= set(hit)
        assert datetime.fromisoformat(hit["at"]) and isinstance(hit["message_ids"], list)
    if name == "search-segment":
        assert len(doc["results"][0]["message_ids"]) >= 1 and doc["results"][0]["level"] == "segment"
    if name == "stats":
        assert doc["messages"] == 41
    if name == "facts":
        assert doc["facts"] and {"id", "subject", "type", "stmt", "valid_from", "valid_to"} <= set(doc["facts"][0])
    if name == "check":
        assert doc["ok"] is True and doc["problems"] == [] and doc["stats"]["messages"] == 41


def test_json_of_writing_commands(tmp_path, db_copy):
    r = run("ingest", FIXTURES / "locomo_tiny.json", "--db", tmp_path / "new.db", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["added"] == 7 and doc["message_ids"] == list(range(1, 8)) and doc["stats"]["messages"] == 7

    r = run("export", "--db", db_copy, "--out", tmp_path / "e.jsonl", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["lines"] > 41 and doc["out"] == str(tmp_path / "e.jsonl")

    r = run("import", tmp_path / "e.jsonl", "--db", tmp_path / "imported.db", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["imported"]["messages"] == 41 and doc["stats"]["messages"] == 41

    r = run("backup", tmp_path / "b.db", "--db", db_copy, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["bytes"] == (tmp_path / "b.db").stat().st_size > 0

    r = run("forget", "--message", "3", "--db", db_copy, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"forgot": "message", "id": 3}


def test_human_output(mem_db, db_copy, tmp_path):
    r = run("facts", "--db", mem_db, "--all")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["id", "type", "subject", "since", "until", "statement"]
    assert not any(line.lstrip().startswith(("{", "[")) for line in lines)

    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"speaker": "A", "text": "I moved to Lisbon."}) + "\n")
    r = run("ingest", one, "--db", tmp_path / "one.db")
    assert r.exit_code == 0 and "added 1 message " in r.stdout, r.output
    r = run("facts", "--active", "--db", tmp_path / "one.db")
    assert r.exit_code == 0 and r.stdout.startswith("no ActiveFacts yet"), r.output
    r = run("check", "--db", tmp_path / "one.db")
    assert r.exit_code == 0 and "1 message, 1 segment," in r.stdout, r.output

    r = run("forget", "--message", "12", "--db", db_copy)
    assert r.exit_code == 0 and r.stdout.strip() == "forgot message 12", r.output
    r = run("search", "Maya", "-k", "2", "--db", db_copy)
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 2 and r.stdout.startswith("["), r.output
    r = run("stats", "--db", db_copy)
    assert r.exit_code == 0 and r.stdout.splitlines()[0].split() == ["messages", "40"], r.output


def test_library_errors_exit_1_without_traceback(tmp_path, db_copy):
    bad = tmp_path / "notes.db"
    bad.write_text("not a database at all")
    r = run("stats", "--db", bad)
    clean_error(r)
    assert "not an SQLite database" in r.stderr
    r = run("forget", "--fact", "9999", "--db", db_copy)
    clean_error(r)
    assert "no fact with id 9999" in r.stderr
    r = run("stats", "--db", tmp_path / "nothing-here.db")  # a mistyped --db creates nothing
    clean_error(r)
    assert not (tmp_path / "nothing-here.db").exists()
    r = run("check", "--db", tmp_path / "nothing-here.db", "--json")
    assert r.exit_code == 1 and json.loads(r.stdout)["ok"] is False
    assert not (tmp_path / "nothing-here.db").exists()


def test_bad_files_exit_1_without_traceback(tmp_path, db_copy):
    r = run("export", "--db", db_copy, "--out", "/nonexistent/dir/x.jsonl")
    clean_error(r)
    binary = tmp_path / "some.db"
    binary.write_bytes(os.urandom(4000) + b"\xff\xfe")
    r = run("import", binary, "--db", tmp_path / "fresh.db")
    clean_error(r)
    assert "not UTF-8" in r.stderr and not (tmp_path / "fresh.db").exists()
    r = run("ingest", binary, "--db", tmp_path / "fresh.db")
    clean_error(r)
    notes = tmp_path / "notes.json"
    notes.write_text('[1, 2, 3]')
    r = run("ingest", notes, "--db", tmp_path / "fresh.db")
    clean_error(r)
    lines = tmp_path / "bad.jsonl"
    lines.write_text('{"speaker": "A", "text": "ok"}\nnot json\n')
    r = run("ingest", lines, "--db", tmp_path / "fresh.db")
    clean_error(r)
    assert ":2" in r.stderr


def test_unexpected_and_os_errors_are_reported_cleanly(monkeypatch, db_copy, caplog):
    def boom(self, *a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(Memory, "search", boom)
    with caplog.at_level("DEBUG", logger="memsif_lite"):
        r = run("search", "x", "--db", db_copy)
    clean_error(r)
    assert "Error: unexpected RuntimeError: boom (please report)" in r.stderr
    assert any(rec.exc_info for rec in caplog.records)
    r = run("-v", "search", "x", "--db", db_copy)  # -v: the traceback, for the report
    assert r.exit_code == 1 and "Traceback" in r.stderr and "RuntimeError: boom" in r.stderr
    assert not logging.getLogger("memsif_lite").handlers

    def denied(self, *a, **k):
        raise PermissionError(13, "Permission denied", "/somewhere/x.jsonl")

    monkeypatch.setattr(Memory, "export_to", denied)
    r = run("export", "--db", db_copy, "--out", db_copy.parent / "x.jsonl")
    clean_error(r)
    assert "/somewhere/x.jsonl: Permission denied" in r.stderr


def test_help_and_usage_errors(mem_db):
    for args in (["-h"], ["--help"], ["search", "-h"], ["facts", "--help"]):
        r = run(*args)
        assert r.exit_code == 0 and "Usage:" in r.stdout, (args, r.output)
    for args in (["search", "--db", mem_db],                      # missing QUERY
                 ["stats", "--db", mem_db, "--bogus"],            # unknown option
                 ["search", "x", "-k", "0", "--db", mem_db],      # out of range
                 ["forget", "--db", mem_db],                      # neither --message nor --fact
                 ["nosuchcommand"]):
        r = run(*args)
        assert r.exit_code == 2 and "Traceback" not in r.output, (args, r.output)


def test_one_open_helper_passes_shared_options(monkeypatch, mem_db, tmp_path):
    seen: list[dict] = []

    class Recorder:
        def __init__(self, path, **kwargs):
            seen.append({"path": str(path), **kwargs})
            raise MemsifError("stop here")

    monkeypatch.setattr(options, "Memory", Recorder)
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"llm_retries": 1}))
    r = run("ask", "q", "--db", mem_db, "--config", cfg, "--llm", "openai/gpt-4o-mini",
            env={"MEMSIF_API_BASE": "http://localhost:8000/v1", "MEMSIF_API_KEY": "sk-test"})
    clean_error(r)
    assert seen[-1]["llm"] == "openai/gpt-4o-mini" and isinstance(seen[-1]["config"], Config)
    assert seen[-1]["config"].llm_retries == 1
    assert seen[-1]["llm_kwargs"] == {"api_base": "http://localhost:8000/v1", "api_key": "sk-test"}
    assert "embedder" not in seen[-1]
    r = run("search", "q", "--db", mem_db, env={"MEMSIF_API_BASE": "", "MEMSIF_API_KEY": ""})
    clean_error(r)
    assert seen[-1]["llm"] is None and seen[-1]["llm_kwargs"] is None and seen[-1]["config"] is None
    r = run("stats", env={"MEMSIF_DB": str(mem_db)})
    clean_error(r)
    assert seen[-1]["path"] == str(mem_db)


def test_demo_in_a_temporary_file_prints_no_dead_path():
    r = run("demo")
    assert r.exit_code == 0, r.output
    assert "A temporary memory file: built in" in r.stdout and "memsif-demo-" not in r.output


@dataclass(frozen=True)
class _Thing:
    at: datetime
    ids: tuple[int, ...]
    where: Path
    score: float
    tags: frozenset


def test_the_encoder():
    doc = to_jsonable({"x": _Thing(datetime(2024, 3, 2, 18, 5), (1, 2), Path("/a/b"), math.nan, frozenset({"b", "a"}))})
    assert doc == {"x": {"at": "2024-03-02T18:05:00", "ids": [1, 2], "where": "/a/b", "score": None,
                         "tags": ["a", "b"]}}
    assert json.loads(json.dumps(doc)) == doc
    with pytest.raises(TypeError):
        to_jsonable(object())
