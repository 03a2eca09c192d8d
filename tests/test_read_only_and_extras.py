"""``Memory(read_only=True)``, and the optional extras: litellm (``llm``) and the MCP SDK (``mcp``)
are imported only when used, and a missing litellm is a clear error naming the extra. Absence
is simulated in a subprocess (``sys.modules[name] = None``), never by uninstalling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fakes import FakeEmbedder, raw
from memsif_lite import Config, FactType, Memory, MemoryFileError, ReadOnlyError, prompts

ROOT = Path(__file__).resolve().parent.parent


def _filled(db: Path) -> None:
    with Memory(db, embedder=FakeEmbedder()) as mem:
        mem.add_many([{"speaker": "Ana", "text": "I live in Lisbon near the castle.", "at": "2024-01-10T09:00:00"},
                      {"speaker": "Leo", "text": "I adopted a dog called Pixel.", "at": "2024-01-11T09:00:00"}])


def test_read_only_reads_and_refuses_every_write(db, tmp_path):
    _filled(db)
    before = db.read_bytes()
    with Memory(db, embedder=FakeEmbedder(), read_only=True) as mem:
        assert mem.read_only and mem.stats()["messages"] == 2
        assert mem.search("Lisbon")[0].speaker == "Ana"
        assert "Lisbon" in mem.context("Where does Ana live?").text
        assert mem.check() == []
        mem.backup(tmp_path / "copy.db")
        assert mem.export_to(tmp_path / "e.jsonl") > 2
        for name, write in [("add", lambda: mem.add("Ana", "I moved to Porto.")),
                            ("add", lambda: mem.add_many([{"speaker": "A", "text": "x"}])),
                            ("forget", lambda: mem.forget(message_id=1)),
                            ("ask", lambda: mem.ask("Where does Ana live?")),
                            ("accumulate", lambda: mem.accumulate("q?", [])),
                            ("import_from", lambda: mem.import_from(tmp_path / "e.jsonl"))]:
            with pytest.raises(ReadOnlyError, match=f"{name}\\(\\) writes to .*read-only"):
                write()
    assert db.read_bytes() == before
    with raw(db) as con:
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == 2


def test_read_only_never_creates_a_file(tmp_path):
    for path in (tmp_path / "missing.db", tmp_path / "empty.db"):
        if path.name == "empty.db":
            path.touch()
        with pytest.raises(MemoryFileError, match="no memory file"):
            Memory(path, embedder=FakeEmbedder(), read_only=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"] and (tmp_path / "empty.db").stat().st_size == 0


def test_read_only_does_not_record_the_fact_schema_or_llm_calls(db, llm_server):
    _filled(db)
    cfg = Config(fact_schema=[FactType("Hobby", "what someone does for fun")])
    llm_server.route({prompts.SUFFICIENCY_SYSTEM: '{"sufficient": false}'})
    with Memory(db, embedder=FakeEmbedder(), read_only=True, config=cfg, llm="openai/test-model",
                llm_kwargs=llm_server.llm_kwargs()) as mem:
        assert "Lisbon" in mem.context("Where does Ana live?").text
    assert llm_server.requests                                         # the LLM was used...
    with raw(db) as con:                                               # ...and nothing was written
        assert con.execute("SELECT count(*) FROM llm_calls").fetchone()[0] == 0
        assert "Hobby" not in dict(con.execute("SELECT key, value FROM meta").fetchall())["fact_schema"]


def test_a_reader_sees_what_a_writer_commits(db):
    _filled(db)
    with Memory(db, embedder=FakeEmbedder()) as writer, \
            Memory(db, embedder=FakeEmbedder(), read_only=True) as reader:
        writer.add("Ana", "I moved to Porto in March.")
        assert reader.stats()["messages"] == 3
        assert reader.search("Porto")[0].text == "I moved to Porto in March."


# -- the optional extras --------------------------------------------------------------------------------
def _python(code: str, *hidden: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter on this checkout, with ``hidden`` modules made unimportable."""
    prelude = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in hidden)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)


def test_without_litellm_an_llm_is_a_clear_error_naming_the_extra(tmp_path):
    db = tmp_path / "m.db"
    r = _python(f"""
        from fakes import FakeEmbedder
        from memsif_lite import ConfigError, Memory
        try:
            Memory({str(db)!r}, llm="openai/gpt-4o-mini", embedder=FakeEmbedder())
        except ConfigError as e:
            print("ConfigError:", e)
        import os
        print("created:", os.path.exists({str(db)!r}))              # refused before the file was touched
        with Memory({str(db)!r}, embedder=FakeEmbedder()) as mem:     # no LLM: everything works
            mem.add("Ana", "I live in Lisbon.")
            print(mem.search("Lisbon")[0].text, mem.ask("Where does Ana live?").extractive)
        from memsif_lite.embed import LiteLLMEmbedder
        try:
            LiteLLMEmbedder("openai/text-embedding-3-small")
        except ConfigError as e:
            print("embedder ConfigError")
        print("litellm" in sys.modules and sys.modules["litellm"] is not None)
    """, "litellm")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ConfigError:") and "pip install 'memsif_lite[llm]'" in lines[0]
    assert lines[1:] == ["created: False", "I live in Lisbon. True", "embedder ConfigError", "False"]


def test_without_litellm_the_cli_says_which_extra_to_install(tmp_path):
    db = tmp_path / "m.db"
    _filled(db)
    r = _python(f"""
        from memsif_lite.cli import main
        main(["ask", "Where does Ana live?", "--db", {str(db)!r}, "--llm", "openai/gpt-4o-mini"])
    """, "litellm")
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert r.stderr.startswith("Error: ") and "memsif_lite[llm]" in r.stderr and "Traceback" not in r.stderr


def test_without_the_mcp_sdk_the_command_says_which_extra_to_install(tmp_path):
    r = _python(f"""
        from memsif_lite.cli import main
        main(["mcp", "--db", {str(tmp_path / "m.db")!r}])
    """, "mcp", "mcp.server", "mcp.server.mcpserver")
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert "memsif_lite[mcp]" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "m.db").exists()


def test_optional_packages_are_imported_only_when_used(tmp_path):
    r = _python(f"""
        import json
        import memsif_lite, memsif_lite.cli
        from fakes import FakeEmbedder
        with memsif_lite.Memory({str(tmp_path / "m.db")!r}) as mem:   # the real ONNX model
            mem.add("Ana", "I live in Lisbon.")
            mem.search("Lisbon"); mem.context("Where does Ana live?"); mem.ask("Where does Ana live?")
        frameworks = ("agents", "langchain_core", "langgraph", "langsmith", "memsif_lite.integrations")
        print(json.dumps(sorted(m for m in ("litellm", "mcp", "pydantic", "openai", "httpx", *frameworks)
                                if m in sys.modules)))
    """)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []



# -- a read-only open writes nothing beside the file (issue 23.2) -----------------------------------------
def _listing(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _every_read(mem: Memory, tmp: Path) -> None:
    assert mem.stats()["messages"] >= 2
    assert mem.search("Lisbon") and mem.search("Lisbon", level="segment") is not None
    assert mem.get(1).speaker == "Ana" and len(mem.messages(limit=1)) == 1
    mem.segments(), mem.trajectories(), mem.facts(), mem.active_facts(), mem.candidates()
    assert "Lisbon" in mem.context("Where does Ana live?").text
    assert mem.check() == []
    mem.export_to(tmp / "out.jsonl")
    mem.backup(tmp / "copy.db")


def test_read_only_open_of_a_quiet_file_creates_no_side_file(tmp_path):
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir(), out.mkdir()
    db = home / "m.db"
    _filled(db)
    before = _listing(home)
    assert set(before) == {"m.db"}                       # the writer's last close removed its side files
    home.chmod(0o555)                                     # a read-only directory (root ignores it: the
    try:                                                  # listing below is what is checked)
        with Memory(db, embedder=FakeEmbedder(), read_only=True) as mem:
            _every_read(mem, out)
            assert _listing(home) == before
    finally:
        home.chmod(0o755)
    assert _listing(home) == before


def test_an_immutable_reader_sees_a_writer_that_comes_later(tmp_path):
    db = tmp_path / "m.db"
    _filled(db)
    with Memory(db, embedder=FakeEmbedder(), read_only=True) as reader:
        assert reader.stats()["messages"] == 2 and not (tmp_path / "m.db-wal").exists()
        with Memory(db, embedder=FakeEmbedder()) as writer:
            writer.add("Ana", "I moved to Porto in March.")
            assert reader.stats()["messages"] == 3          # the writer's -wal: read the shared way
            assert reader.search("Porto")[0].text == "I moved to Porto in March."
            writer.add("Leo", "Pixel learnt to sit.")
            assert [m.text for m in reader.messages()][-1] == "Pixel learnt to sit."
        assert reader.stats()["messages"] == 4


def test_an_immutable_reader_never_trusts_a_file_changed_between_its_reads(tmp_path):
    """A writer that opened, wrote, checkpointed and closed between two reads leaves no -wal: the
    changed file (size, time) is what tells the reader."""
    db = tmp_path / "m.db"
    _filled(db)
    with Memory(db, embedder=FakeEmbedder(), read_only=True) as reader:
        assert reader.stats()["messages"] == 2
        for i in range(3):
            with Memory(db, embedder=FakeEmbedder()) as writer:
                writer.add("Ana", f"Note number {i} about the garden.")
            # (from the second round on the reader reads the shared way, which keeps the -wal)
            assert (tmp_path / "m.db-wal").exists() == (i > 0)
            assert reader.stats()["messages"] == 3 + i
            assert reader.messages()[-1].text == f"Note number {i} about the garden."


def test_a_reader_opened_in_another_process_sees_commits_while_quiet_reads_stay_side_file_free(tmp_path):
    db = tmp_path / "m.db"
    _filled(db)
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(ROOT / 'tests')!r})
        from fakes import FakeEmbedder
        from memsif_lite import Memory
        with Memory({str(db)!r}, embedder=FakeEmbedder(), read_only=True) as mem:
            print(mem.stats()["messages"], flush=True)
            sys.stdin.readline()
            print(mem.stats()["messages"], mem.messages()[-1].text, flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.db"]
    with Memory(db, embedder=FakeEmbedder()) as writer:
        writer.add("Leo", "Pixel learnt to sit.")
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "3 Pixel learnt to sit."
    assert proc.wait(60) == 0


def test_a_read_only_memory_opened_through_a_symlink_sees_a_writer_of_the_real_file(tmp_path):
    """The cold review of issue 23: the writer's -wal lies beside the real file, not beside the link."""
    real = tmp_path / "real"
    real.mkdir()
    _filled(real / "m.db")
    (tmp_path / "link.db").symlink_to(real / "m.db")
    with Memory(tmp_path / "link.db", embedder=FakeEmbedder(), read_only=True) as reader:
        assert reader.stats()["messages"] == 2
        with Memory(real / "m.db", embedder=FakeEmbedder()) as writer:
            writer.add("Ana", "I moved to Porto in March.")
            assert reader.stats()["messages"] == 3


def test_a_read_only_memory_keeps_its_file_after_a_chdir(tmp_path, monkeypatch):
    for d, who in (("one", "Ana"), ("two", "Bo")):
        (tmp_path / d).mkdir()
        with Memory(tmp_path / d / "m.db", embedder=FakeEmbedder()) as mem:
            mem.add(who, "Hello there.")
    monkeypatch.chdir(tmp_path / "one")
    with Memory("m.db", embedder=FakeEmbedder(), read_only=True) as reader:
        assert [m.speaker for m in reader.messages()] == ["Ana"]
        monkeypatch.chdir(tmp_path / "two")
        with Memory(tmp_path / "one" / "m.db", embedder=FakeEmbedder()) as writer:  # makes the reader share
            writer.add("Ana", "Still me.")
            assert [m.speaker for m in reader.messages()] == ["Ana", "Ana"]


def test_exports_and_backups_of_read_only_memories_succeed_while_a_writer_comes_and_goes(tmp_path):
    """A read judged untrusted (the file changed during it) is read again: its export or backup,
    already in place, is removed first, so the second one is not refused as 'already exists'."""
    import threading

    db = tmp_path / "m.db"
    _filled(db)
    stop = threading.Event()
    failed: list[BaseException] = []

    def writer() -> None:
        i = 0
        try:
            while not stop.is_set():
                with Memory(db, embedder=FakeEmbedder()) as mem:
                    mem.add("Leo", f"Walk number {i} with Pixel in the park.")
                i += 1
        except BaseException as e:  # (a writer opening while others open and close: never "locked")
            failed.append(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for i in range(60):
            with Memory(db, embedder=FakeEmbedder(), read_only=True) as reader:
                n = reader.export_to(tmp_path / f"e{i}.jsonl")
                reader.backup(tmp_path / f"b{i}.db")
            assert n == len((tmp_path / f"e{i}.jsonl").read_text(encoding="utf-8").splitlines())
            with Memory(tmp_path / f"b{i}.db", embedder=FakeEmbedder(), read_only=True) as copy:
                assert copy.stats()["messages"] >= 2 and copy.check() == []
    finally:
        stop.set()
        t.join()
    assert not failed, failed
