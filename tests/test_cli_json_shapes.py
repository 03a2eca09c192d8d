"""Every command's ``--json`` document, on a small memory: exactly one JSON object on stdout, with
exactly the documented top-level keys. Built from ``main.commands``, so a new command without a
case here (or a stated reason to print no document) fails."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from click.testing import CliRunner

from memsif_lite import CompactReport, Memory
from memsif_lite.cli import main
from memsif_lite.merging import MergeReport
from memsif_lite.query import Answer, Context

MESSAGES = [
    {"speaker": "Maya", "text": "I just moved to Lisbon for the new job.", "at": "2024-03-01T09:00:00",
     "session": "s1", "source_id": "m1"},
    {"speaker": "Leo", "text": "Nice! Which company did you join?", "at": "2024-03-01T09:01:00",
     "session": "s1", "source_id": "m2"},
    {"speaker": "Maya", "text": "Finch Robotics; my manager is Ana Duarte.", "at": "2024-03-01T09:02:00",
     "session": "s1", "source_id": "m3"},
    {"speaker": "Leo", "text": "My dog Biscuit chewed my running shoes again.", "at": "2024-03-08T18:00:00",
     "session": "s2", "source_id": "m4"},
]
EXTRA = {"speaker": "Maya", "text": "I started learning Portuguese at night school.", "at": "2024-03-09T20:00:00",
         "session": "s3", "source_id": "m5"}


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


#: (command, its arguments, the top-level keys of its --json document). {db}: a fresh copy of the
#: small memory; {other}: a copy with one message more; {export}: an export of it; {extra}: a JSONL file of
#: one new message; {tmp}: a directory.
CASES: list[tuple[str, list[str], set[str]]] = [
    ("ingest", ["ingest", "{extra}", "--db", "{db}"],
     {"file", "db", "added", "skipped", "message_ids", "seconds", "stats"}),
    ("add", ["add", "Maya", "I moved to Porto.", "--at", "2024-06-01T10:00:00+01:00", "--db", "{db}"],
     {"id", "new", "message"}),
    ("messages", ["messages", "--speaker", "Maya", "--limit", "1", "--db", "{db}"],
     {"messages", "offset", "limit", "more"}),
    ("search", ["search", "Where does Maya live?", "-k", "2", "--db", "{db}"], {"query", "level", "k", "results"}),
    ("process", ["process", "--db", "{db}"], {"steps", "pending", "seconds", "stale", "stats"}),
    ("stats", ["stats", "--db", "{db}"], set()),  # the stats themselves: checked against Memory.stats()
    ("show", ["show", "--db", "{db}"], {"trajectories", "segments", "messages", "omitted_segments"}),
    ("ask", ["ask", "Who is Maya's manager?", "--db", "{db}"], {"question"} | _fields(Answer)),
    ("context", ["context", "Where does Maya live?", "--db", "{db}"], _fields(Context) | {"message_ids"}),
    ("facts", ["facts", "--all", "--db", "{db}"], {"facts"}),
    ("facts", ["facts", "--active", "--db", "{db}"], {"active_facts"}),
    ("forget", ["forget", "--message", "2", "--db", "{db}"], {"forgot", "id"}),
    ("forget", ["forget", "--source-id", "m4", "--db", "{db}"], {"forgot", "ids"}),
    ("log", ["log", "--db", "{db}"], {"changes"}),
    ("log", ["log", "--fact", "1", "--actor", "rule", "--since", "2024-01-01", "--db", "{db}"], {"changes"}),
    ("undo", ["undo", "4", "--dry-run", "--db", "{db}"], {"change_id", "dry_run", "fact_ids", "undone"}),
    ("undo", ["undo", "4", "--db", "{db}"], {"change_id", "dry_run", "fact_ids", "undone"}),  # Maya's first fact
    ("merge", ["merge", "{other}", "--db", "{db}"], _fields(MergeReport) | {"db", "stats"}),
    ("merge", ["merge", "{other}", "--dry-run", "--db", "{db}"], _fields(MergeReport) | {"db", "stats"}),
    ("export", ["export", "--out", "{tmp}/out.jsonl", "--db", "{db}"], {"db", "out", "lines"}),
    ("import", ["import", "{export}", "--db", "{tmp}/imported.db"], {"file", "db", "imported", "stats"}),
    ("import-mem0", ["import-mem0", "{mem0}", "--home", "{tmp}/home"],
     {"file", "memories", "new", "already_present", "files"}),
    ("backup", ["backup", "{tmp}/copy.db", "--db", "{db}"], {"db", "dest", "bytes"}),
    ("check", ["check", "--db", "{db}"], {"ok", "problems", "stats"}),
    ("compact", ["compact", "--db", "{db}"], _fields(CompactReport) | {"db"}),
    # {key}, {new_key}: key files; {enc}: a copy of the small memory encrypted with {key}
    ("encrypt", ["encrypt", "--key-file", "{key}", "--db", "{db}"], {"db", "encrypted"}),
    ("decrypt", ["decrypt", "--key-file", "{key}", "--db", "{enc}"], {"db", "encrypted"}),
    ("rekey", ["rekey", "--key-file", "{key}", "--new-key-file", "{new_key}", "--db", "{enc}"], {"db", "encrypted"}),
    ("demo", ["demo"], {"db", "added", "seconds", "stats", "timeline", "searches", "facts", "answers"}),
    ("view", ["view", "--out", "{tmp}/memory.html", "--db", "{db}"], {"db", "out", "bytes", "stats"}),
]

#: Commands that print no document meant for machines, and why.
NO_JSON = {
    "mcp": "serves the MCP protocol over stdio until the client hangs up: its stdout is JSON-RPC frames",
    "fleet": "a group; its command `fleet process --json` needs a Dask cluster: its document is checked in "
             "tests/test_fleet.py",
}

#: Keys holding ``Memory.stats()`` (compared with the file's own stats, so a new count needs no change here).
STATS_KEYS = {"stats"}


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("shapes")
    src, extra = d / "small.jsonl", d / "extra.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES))
    extra.write_text(json.dumps(EXTRA) + "\n")
    r = run("ingest", src, "--db", d / "small.db")
    assert r.exit_code == 0, r.output
    shutil.copy(d / "small.db", d / "other.db")
    assert run("ingest", extra, "--db", d / "other.db").exit_code == 0
    assert run("export", "--db", d / "small.db", "--out", d / "small.jsonl.export").exit_code == 0
    (d / "mem0.json").write_text(json.dumps({"results": [{"memory": "Likes tea", "user_id": "maya"}]}))
    (d / "key").write_text("shapes key\n")
    (d / "new_key").write_text("another key\n")
    shutil.copy(d / "small.db", d / "encrypted.db")
    assert run("encrypt", "--key-file", d / "key", "--db", d / "encrypted.db").exit_code == 0
    return d


def test_every_command_has_a_json_case_or_a_reason_not_to():
    assert {c for c, _, _ in CASES} | set(NO_JSON) == set(main.commands)
    assert not {c for c, _, _ in CASES} & set(NO_JSON)
    for name, cmd in main.commands.items():
        has_json = any(p.name == "as_json" for p in cmd.params)
        assert has_json is (name not in NO_JSON), name


@pytest.mark.parametrize("case", range(len(CASES)), ids=[" ".join(a[:2]) for _, a, _ in CASES])
def test_json_document_of(case, small, tmp_path):
    name, args, keys = CASES[case]
    db = tmp_path / "m.db"
    shutil.copy(small / "small.db", db)
    shutil.copy(small / "encrypted.db", tmp_path / "e.db")
    where = {"db": db, "other": small / "other.db", "export": small / "small.jsonl.export", "tmp": tmp_path,
             "extra": small / "extra.jsonl", "key": small / "key", "new_key": small / "new_key",
             "enc": tmp_path / "e.db", "mem0": small / "mem0.json"}
    r = run(*[a.format(**where) for a in args], "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # the whole of stdout is one document
    assert isinstance(doc, dict), doc
    if name in ("encrypt", "decrypt", "rekey"):  # the file converted: it opens with its new key (or none)
        path, key = {"encrypt": (db, "shapes key"), "decrypt": (where["enc"], None),
                     "rekey": (where["enc"], "another key")}[name]
        assert doc == {"db": str(path), "encrypted": key is not None}
        with Memory(path, read_only=True, key=key) as mem:
            assert mem.stats()["messages"] == len(MESSAGES)
        return
    with Memory(tmp_path / "imported.db" if name == "import" else db, read_only=True) as mem:
        stats = json.loads(json.dumps(mem.stats()))
    if name == "stats":
        assert doc == stats
        return
    assert set(doc) == keys, sorted(set(doc) ^ keys)
    if name == "demo":  # its own temporary file, gone now
        assert doc["db"] is None and doc["stats"]["messages"] == doc["added"] > 0 and set(doc["stats"]) == set(stats)
        return
    for k in STATS_KEYS & keys:
        assert doc[k] == stats, k
