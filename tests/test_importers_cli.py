"""Importers (JSONL, LoCoMo in both shapes) and the CLI, through the same path as the API."""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from memsif_lite import InvalidInputError, Memory
from memsif_lite.cli import main
from memsif_lite.importers import read_any, read_jsonl, read_locomo


def test_locomo_per_conversation_and_list_shapes(tmp_path):
    convs = read_locomo(FIXTURES / "locomo_tiny.json")
    assert len(convs) == 1 and len(convs[0]) == 7
    first, photo = convs[0][0], convs[0][2]
    assert first["at"] == datetime(2023, 5, 8, 13, 56) and first["source_id"] == "D1:1" and first["session"] == "1"
    assert photo["text"].endswith("[shares a photo of a black and white dog on grass]")
    assert convs[0][4]["at"] == datetime(2023, 6, 2, 10, 5)
    sample = json.loads((FIXTURES / "locomo_tiny.json").read_text())
    listed = tmp_path / "locomo10.json"
    listed.write_text(json.dumps([{"sample_id": "conv-1", "conversation": sample, "qa": sample["qa"]}] * 2))
    assert read_locomo(listed) == [convs[0], convs[0]]


def test_jsonl_reader(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"speaker": "A", "text": "one", "at": "2024-01-01T10:00:00", "session": 3}\n\n'
                 '{"speaker": "B", "text": "two"}\n')
    assert read_jsonl(p) == [{"speaker": "A", "text": "one", "at": "2024-01-01T10:00:00", "session": 3},
                             {"speaker": "B", "text": "two"}]
    p.write_text('{"speaker": "A", "text": "one"}\nnot json\n')
    with pytest.raises(InvalidInputError, match=":2"):
        read_jsonl(p)


def test_cli_ingest_search_stats_show(tmp_path, monkeypatch):
    db = tmp_path / "cli.db"
    runner = CliRunner()
    r = runner.invoke(main, ["ingest", str(FIXTURES / "locomo_tiny.json"), "--db", str(db)])
    assert r.exit_code == 0, r.output
    assert "added 7 messages" in r.output and "segments" in r.output
    monkeypatch.setenv("MEMSIF_DB", str(db))
    r = runner.invoke(main, ["search", "violin exam", "-k", "2", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.stdout)["results"]
    assert len(hits) == 2 and "violin" in hits[0]["text"] and hits[0]["source_ids"]
    r = runner.invoke(main, ["stats", "--json"])
    assert json.loads(r.output)["messages"] == 7
    r = runner.invoke(main, ["show"])
    assert r.exit_code == 0 and "Segment" in r.output and "Olive" in r.output
    with Memory(db) as mem:
        assert mem.stats()["messages"] == 7


def test_cli_reports_memsif_errors_cleanly(tmp_path):
    bad = tmp_path / "notes.db"
    bad.write_text("not a database at all")
    r = CliRunner().invoke(main, ["stats", "--db", str(bad)])
    assert r.exit_code == 1 and "Error:" in r.stderr and "not an SQLite database" in r.stderr


def test_cli_demo_runs(tmp_path):
    r = CliRunner().invoke(main, ["demo", "--db", str(tmp_path / "demo.db")])
    assert r.exit_code == 0, r.output
    assert re.search(r"^  messages +41$", r.output, re.MULTILINE) and "Trajectory" in r.output and "search:" in r.output


def test_read_any_dispatches(tmp_path):
    assert len(read_any(FIXTURES / "locomo_tiny.json")) == 7
