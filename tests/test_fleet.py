"""The fleet (issue 32, item 2): every memory file of a home drained on a Dask ``LocalCluster`` of
3 worker processes against the fake LLM server (real HTTP on 127.0.0.1), each file ending exactly
as a local ``memsif process`` leaves it; a worker killed while it holds a file loses nothing; a
file that cannot be processed is reported and the others finish. Skipped without ``distributed``
(the fleet extra; the test extra installs it).

Exports are compared whole but for the wall-clock fields written while the queue is processed:
``llm_calls.at`` / ``latency_ms`` (when a call was made and how long it took) and
``core_facts.created_at`` / ``updated_at`` and ``fact_history.at`` (when a fact was written).
They record when the processing ran, not what the memory holds; everything else (messages,
vectors, segments, trajectories, facts with their validity and sources, each call's prompt kind
and outcome, the file's meta) must be equal."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from fakes import FakeLLMServer, lives_in_reply
from memsif_lite import InvalidInputError, Memory
from memsif_lite.cli import main
from memsif_lite.homes import open_memory

distributed = pytest.importorskip("distributed")
from memsif_lite.fleet import home_files, process_fleet  # noqa: E402 - only with distributed installed

MODEL = "openai/test-model"
PEOPLE = ("Ana", "Bruno", "Chidi", "Dana", "Emeka")
CITIES = ("Lisbon", "Porto", "Braga", "Faro", "Evora", "Coimbra", "Aveiro")
#: fields that record when processing ran (see the module docstring)
CLOCK = {"llm_calls": {"at", "latency_ms"}, "core_facts": {"created_at", "updated_at"}, "fact_history": {"at"}}


def answer(req: dict) -> str:
    """A fake LLM whose replies follow from the prompt alone (:func:`fakes.lives_in_reply`)."""
    return lives_in_reply(req, title="Where they live")


@pytest.fixture(scope="module")
def server():
    with FakeLLMServer(answer) as s:
        yield s


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            distributed.Client(c) as cl:
        yield cl


def make_home(home: Path, n: int, embedder) -> list[Path]:
    """``n`` per-user files written with their processing left for later (``--later``)."""
    paths = []
    for i in range(n):
        who, a, b = PEOPLE[i % len(PEOPLE)], CITIES[i % len(CITIES)], CITIES[(i + 3) % len(CITIES)]
        with open_memory(user=f"u{i:02d}", home=home, process="manual", embedder=embedder) as mem:
            mem.remember([{"speaker": who, "text": f"I live in {a}.", "at": "2024-01-10T09:00:00", "session": "1"},
                          {"speaker": who, "text": f"I like tea number {i}.", "at": "2024-01-10T09:01:00",
                           "session": "1"},
                          {"speaker": who, "text": f"I moved to {b}.", "at": "2024-03-16T20:31:00", "session": "2"}])
            paths.append(mem.path)
            assert mem.stats()["segments"] == 0  # nothing processed yet
    return paths


def process_locally(path: Path, server: FakeLLMServer, embedder=None) -> None:
    """``memsif process --db PATH --llm ...``; given the (already loaded) ``embedder``, the
    ``Memory.process()`` it runs, without loading the model again."""
    if embedder is not None:
        with Memory(path, embedder=embedder, llm=MODEL, llm_kwargs=server.llm_kwargs(), process="manual") as mem:
            assert mem.process().pending == 0
        return
    result = CliRunner().invoke(main, ["process", "--db", str(path), "--llm", MODEL, "--api-base", server.url,
                                       "--api-key", "sk-test", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pending"] == 0


def export(path: Path, out: Path) -> list[dict]:
    with Memory(path, read_only=True) as mem:
        mem.export_to(out, overwrite=True)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        for field in CLOCK.get(r.get("table", ""), ()):
            r["row"].pop(field)
    return rows


def assert_same_as_local(fleet_file: Path, local_file: Path, tmp: Path) -> None:
    mine, theirs = export(fleet_file, tmp / "fleet.jsonl"), export(local_file, tmp / "local.jsonl")
    assert mine == theirs, fleet_file
    tables = {r.get("table") for r in mine}  # not vacuous: the LLM's structure and facts are there
    assert {"segments", "trajectories", "core_facts", "llm_calls"} <= tables, tables
    assert any(" lives in " in r["row"]["stmt"] for r in mine if r.get("table") == "core_facts")


def queue_length(path: Path) -> int:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        con.setbusytimeout(2000)
        return int(con.execute("SELECT count(*) FROM work_queue").fetchone()[0])
    finally:
        con.close()


def test_import_memsif_lite_never_imports_dask():
    code = ("import sys, memsif_lite, memsif_lite.cli; "
            "assert not {'dask', 'distributed', 'memsif_lite.fleet'} & set(sys.modules), 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_home_files_lists_the_layout_of_homes_and_refuses_links(tmp_path):
    for rel in ("users/ana.db", "users/ana/coder.db", "agents/bot.db", "users/ana.db-wal", "users/notes.txt",
                "users/Bad Name.db", "users/ana/deeper/x.db"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / "agents" / "link.db").symlink_to(tmp_path / "users" / "ana.db")
    found, refused = home_files(tmp_path)
    assert found == sorted(tmp_path / p for p in ("agents/bot.db", "users/ana.db", "users/ana/coder.db"))
    assert {Path(r.path).name: r.ok for r in refused} == {"link.db": False, "Bad Name.db": False}
    with pytest.raises(InvalidInputError, match="no memory home"):
        home_files(tmp_path / "nowhere")
    for bad in (True, 0, "", 2.0):
        with pytest.raises(InvalidInputError, match="cluster must be"):
            process_fleet(tmp_path, bad)


def test_fleet_drains_every_file_as_a_local_process_would(tmp_path, server, client, embedder):
    home = tmp_path / "home"
    paths = make_home(home, 30, embedder)
    shutil.copytree(home, tmp_path / "local")
    broken = home / "users" / "zz-broken.db"
    broken.write_bytes(b"this is not a memory file\n" * 200)
    (home / "agents").mkdir()
    (home / "agents" / "link.db").symlink_to(paths[0])
    seen: list[tuple[int, int]] = []

    report = process_fleet(home, client, llm=MODEL, llm_kwargs=server.llm_kwargs(), retries=1,
                           progress=lambda r, done, total: seen.append((done, total)))

    assert [d for d, _ in seen] == list(range(1, 33)) and {t for _, t in seen} == {32}
    failed = {Path(r.path).name: r.error for r in report.failed}
    assert set(failed) == {"zz-broken.db", "link.db"}, failed
    assert "NotAMemoryFileError" in failed["zz-broken.db"] and "symbolic link" in failed["link.db"]
    assert broken.read_bytes() == b"this is not a memory file\n" * 200  # reported, left as it was
    done = [r for r in report.files if r.ok]
    assert len(done) == 30 and all(r.steps > 0 and r.pending == 0 for r in done)
    assert len({r.worker for r in done}) >= 2 and report.workers == 3
    for i, p in enumerate(paths):
        local = tmp_path / "local" / p.relative_to(home)
        process_locally(local, server, embedder if i else None)  # the first with the command itself
        assert_same_as_local(p, local, tmp_path)


def test_cli_fleet_process_reports_every_file_and_exits_1_on_a_failure(tmp_path, server, client, embedder):
    home = tmp_path / "home"
    make_home(home, 2, embedder)
    (home / "users" / "broken.db").write_bytes(b"\0" * 4096)
    args = ["fleet", "process", "--home", str(home), "--scheduler", client.scheduler.address, "--llm", MODEL,
            "--api-base", server.url, "--api-key", "sk-test", "--retries", "0", "--json"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"files", "done", "failed", "steps", "seconds", "workers"}
    assert (doc["done"], doc["failed"], doc["workers"]) == (2, 1, 3)
    assert [Path(f["path"]).name for f in doc["files"] if not f["ok"]] == ["broken.db"]
    (home / "users" / "broken.db").unlink()
    again = CliRunner().invoke(main, args)  # a drained file has nothing left to do
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["steps"] == 0
    usage = CliRunner().invoke(main, ["fleet", "process", "--home", str(home)])
    assert usage.exit_code == 2 and "--scheduler ADDR or --local N" in usage.output


def test_a_worker_killed_mid_task_loses_nothing(tmp_path, server, client, embedder):
    home = tmp_path / "home"
    paths = make_home(home, 4, embedder)
    shutil.copytree(home, tmp_path / "local")
    initial = {p: queue_length(p) for p in paths}
    server.default = lambda req: {"sleep": 0.15, "content": answer(req)}  # slow enough to be caught mid-file
    pids = client.run(os.getpid)
    out: dict = {}
    runner = threading.Thread(target=lambda: out.update(report=process_fleet(
        home, client, llm=MODEL, llm_kwargs=server.llm_kwargs(), retries=0)))
    killed = None
    try:
        runner.start()
        deadline = time.monotonic() + 60
        while killed is None and time.monotonic() < deadline and runner.is_alive():
            for worker, keys in client.processing().items():
                for key in keys:
                    path = paths[int(str(key).rsplit("-", 1)[1])]
                    if 0 < queue_length(path) < initial[path]:  # this worker is part-way through this file
                        os.kill(pids[worker], signal.SIGKILL)
                        killed = (worker, path)
                        break
                if killed:
                    break
            time.sleep(0.05)
        runner.join(120)
    finally:
        server.default = answer
    assert killed is not None, "no worker was caught holding a file"
    report = out["report"]
    assert not report.failed, report.failed
    result = next(r for r in report.files if Path(r.path) == killed[1])
    assert result.worker != killed[0] and result.pending == 0
    for p in paths:
        local = tmp_path / "local" / p.relative_to(home)
        process_locally(local, server, embedder)
        assert_same_as_local(p, local, tmp_path)


def test_a_worker_keeps_a_bounded_number_of_models(tmp_path):
    """An embedder is cached under the levels each file records (for a registered model prefix):
    a home of files whose levels all differ must not grow a worker by one model per file."""
    from fakes import FakeEmbedder
    from memsif_lite import fleet, register_embedder

    register_embedder("fleetfake", lambda name, levels: FakeEmbedder(model_id=f"fleetfake:{name}",
                                                                     sem_levels=levels or (0.0, 1.0)))
    fleet._EMBEDDERS.clear()
    paths = []
    for i in range(fleet.EMBEDDERS_KEPT + 3):
        path = tmp_path / f"u{i}.db"
        with Memory(path, embedder=FakeEmbedder(model_id="fleetfake:bow", sem_levels=(i / 100, 0.9)),
                    process="manual") as mem:
            mem.add("Ana", "I swim at the city pool")
        paths.append(str(path))
    for path in paths:
        assert fleet.process_file(path).ok
    assert len(fleet._EMBEDDERS) == fleet.EMBEDDERS_KEPT
