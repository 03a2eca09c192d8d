"""The work queue (issue: write now, think later): writes are short and LLM-free, steps run
from the file in order, decide with no transaction open and apply exactly once."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, FakeLLMServer, raw
from memsif_lite import Config, LLMError, Memory, StorageBusyError, prompts

CFG = Config(tau_split=0.2, tau_merge=0.8, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=10)
T0 = datetime(2024, 3, 1, 9)
WORDS = ["marathon", "bread", "tax", "garden", "violin", "Lisbon", "Porto", "dog", "swim", "paint"]


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def deterministic_llm(req: dict) -> str:
    """A fake model whose every reply is a pure function of its prompt: the same prompt gets the
    same reply whichever process asks and whenever."""
    system, user = req["messages"][0]["content"], req["messages"][1]["content"]
    h = _h(user)
    if system == prompts.BOUNDARY_SYSTEM:
        return json.dumps({"continues": h % 3 != 0})
    if system == prompts.TRAJECTORY_SYSTEM:
        return json.dumps({"compatible": [1] if h % 2 else []})
    if system == prompts.TITLE_SYSTEM:
        return json.dumps({"title": f"topic {h % 97}"})
    if system == prompts.EXTRACT_SYSTEM:
        return json.dumps({"facts": [{"subject": "Ana", "type": "Preference", "stmt": f"Ana likes thing {h % 5}",
                                      "lines": [1]}] if h % 2 else []})
    if system == prompts.OPERATION_SYSTEM:
        return json.dumps({"op": "merge", "target": 1, "stmt": None} if h % 2 else {"op": "add", "target": None})
    return "{}"


def _messages(spec: list[tuple[int, int]]) -> list[dict]:
    return [{"speaker": "Ana" if i % 2 else "Ben", "text": f"I love {WORDS[a]} and {WORDS[b]} ({i})",
             "at": T0 + timedelta(minutes=7 * i)} for i, (a, b) in enumerate(spec)]


def _structure(mem: Memory) -> tuple:
    return ([(s.message_ids, s.closed, s.label, s.trajectory_id) for s in mem.segments()],
            [(t.segment_ids, t.label) for t in mem.trajectories()],
            [(f.subject, f.type, f.stmt, f.message_ids, f.valid_to) for f in mem.facts(include_superseded=True)])


@pytest.fixture
def model():
    with FakeLLMServer(default=deterministic_llm) as s:
        yield s


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9)), min_size=2, max_size=12),
       batches=st.integers(1, 3), concurrency=st.sampled_from([1, 4]))
def test_processing_later_equals_processing_inline(tmp_path_factory, model, spec, batches, concurrency):
    """Same replies → same segments, trajectories and facts, whether the steps ran inside each
    add or all at once later, with one LLM request at a time or several."""
    d = tmp_path_factory.mktemp("q")
    items = _messages(spec)
    parts = [items[i::batches] for i in range(batches)]
    parts = [sorted(p, key=lambda m: m["at"]) for p in parts]
    kw = dict(embedder=FakeEmbedder(), config=CFG, llm="openai/m", llm_kwargs=model.llm_kwargs())
    later = dict(kw, config=Config(**{**CFG.__dict__, "llm_concurrency": concurrency}))
    with Memory(d / "inline.db", process="inline", **kw) as a, Memory(d / "later.db", process="manual", **later) as b:
        for p in parts:
            a.add_many(p)
            b.add_many(p)
        assert b.stats()["pending_steps"] >= len(items) and b.segments() == []
        report = b.process()
        assert report.pending == 0 and b.stats()["pending_steps"] == 0
        assert _structure(a) == _structure(b)
        assert b.check() == []


def test_llm_concurrency_asks_independent_prompts_together_and_changes_no_result(tmp_path):
    """Titles and CoreFact extraction of different segments are asked at once (up to
    llm_concurrency in flight), every call is recorded, and the structure is what one request at
    a time gives."""
    def slow(req: dict) -> dict:
        return {"sleep": 0.15, "content": deterministic_llm(req)}  # long enough to overlap on a loaded machine

    items = _messages([(i % 10, (3 * i + 1) % 10) for i in range(24)])
    got = {}
    for n in (1, 4):  # (one at a time needs no slow replies: nothing could overlap anyway)
        with FakeLLMServer(default=slow if n > 1 else deterministic_llm) as server:
            cfg = Config(**{**CFG.__dict__, "llm_concurrency": n})
            with Memory(tmp_path / f"c{n}.db", embedder=FakeEmbedder(), config=cfg, llm="openai/m",
                        llm_kwargs=server.llm_kwargs(), process="manual") as mem:
                mem.add_many(items)
                assert mem.process().pending == 0
                got[n] = (_structure(mem), server.max_in_flight)
                assert mem.stats()["llm_calls"] == len(server.requests)  # every call recorded, once
                assert mem.check() == []
    assert got[1][0] == got[4][0] and len(got[1][0][0]) >= 4
    assert got[1][1] == 1 and 2 <= got[4][1] <= 4


def test_bounded_runs_reuse_replies_asked_ahead(tmp_path, model):
    """process(max_steps=...) in slices asks no more than one drain: a reply asked ahead and not
    used before the slice ended waits for the next slice."""
    items = _messages([(i % 10, (7 * i + 3) % 10) for i in range(24)])
    cfg = Config(**{**CFG.__dict__, "llm_concurrency": 4})
    kw = dict(embedder=FakeEmbedder(), config=cfg, llm="openai/m", llm_kwargs=model.llm_kwargs(), process="manual")
    with Memory(tmp_path / "drain.db", **kw) as mem:
        mem.add_many(items)
        mem.process()
        once, want = mem.stats()["llm_calls"], _structure(mem)
    with Memory(tmp_path / "slices.db", **kw) as mem:
        mem.add_many(items)
        while mem.process(max_steps=3).pending:
            pass
        assert _structure(mem) == want
        assert mem.stats()["llm_calls"] <= once + 4  # at most the cancelled-then-asked-again few


def test_a_configuration_error_met_ahead_is_raised(memory):
    """A prompt asked ahead that meets a configuration error (rejected credentials) raises
    LLMError when its step needs the reply, exactly as a call made in place would."""
    with FakeLLMServer() as server:
        server.route({prompts.TITLE_SYSTEM: {"status": 401}}, default='{"continues": false}')
        cfg = Config(**{**CFG.__dict__, "llm_concurrency": 3})
        mem = memory(config=cfg, llm="openai/m", llm_kwargs=server.llm_kwargs(), process="manual")
        mem.add_many(_messages([(i % 10, (3 * i + 1) % 10) for i in range(12)]))
        with pytest.raises(LLMError):
            mem.process()
        assert mem.stats()["pending_steps"] > 0 and mem.stats()["messages"] == 12


def test_closing_never_waits_for_calls_asked_ahead(tmp_path):
    """Background processing with requests asked ahead: close() and the process's exit do not
    wait for a model that takes a minute (the helper threads are daemons)."""
    hold = threading.Event()

    flag = tmp_path / "asked-ahead"

    def stuck(req: dict) -> str:
        if req["messages"][0]["content"] in (prompts.TITLE_SYSTEM, prompts.EXTRACT_SYSTEM):
            flag.touch()
            hold.wait(60)  # the prompts asked ahead never come back while the test runs
        return deterministic_llm(req)

    script = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, sys.argv[3])
        from fakes import FakeEmbedder
        from memsif_lite import Config, Memory
        cfg = Config(tau_split=0.2, tau_merge=0.8, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=120,
                     llm_concurrency=4)
        mem = Memory(sys.argv[1], embedder=FakeEmbedder(), config=cfg, llm="openai/m",
                     llm_kwargs={"api_base": sys.argv[2], "api_key": "x"}, process="background")
        words = ["marathon", "bread", "tax", "garden", "violin", "Lisbon", "Porto", "dog"]
        mem.add_many([{"speaker": "Ana", "text": f"I love {words[i % 8]} and {words[(3 * i) % 8]}",
                       "at": f"2024-03-01T{9 + i // 6:02d}:{(i * 7) % 60:02d}:00"} for i in range(12)])
        flag = __import__("pathlib").Path(sys.argv[4])
        for _ in range(600):  # until a title or extraction is in flight
            if flag.exists():
                break
            time.sleep(0.1)
        time.sleep(0.5)
        mem.close()
        print("closed", flush=True)
    """)
    with FakeLLMServer(default=stuck) as server:
        t = time.monotonic()
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "bg.db"), server.url,
                              str(Path(__file__).parent), str(flag)], capture_output=True, text=True, timeout=150)
        took = time.monotonic() - t
        hold.set()
    assert out.returncode == 0, out.stderr[-2000:]
    assert "closed" in out.stdout and flag.exists()
    assert took < 45, f"exit waited for the model ({took:.0f} s)"
    with Memory(tmp_path / "bg.db", embedder=FakeEmbedder(), config=CFG, process="manual") as mem:
        assert mem.stats()["messages"] == 12  # nothing lost; unfinished steps wait in the queue
        assert mem.check() == []


def test_until_placed_a_message_is_searchable_and_in_context(memory, model):
    mem = memory(config=CFG, llm="openai/m", llm_kwargs=model.llm_kwargs(), process="manual")
    mid = mem.add("Ana", "I adopted a greyhound called Comet", at=T0)
    assert mem.search("greyhound")[0].id == mid
    assert mid in mem.context("What dog did Ana adopt?", budget_tokens=200).message_ids
    st_ = mem.stats()
    assert st_["pending_steps"] == 1 and st_["segments"] == 0 and st_["oldest_pending_s"] >= 0
    assert mem.check() == []  # an unplaced message is not an inconsistency
    mem.process()
    assert mem.stats()["segments"] == 1 and mem.stats()["pending_steps"] == 0


def test_offline_default_processes_inside_add_with_no_backlog(memory):
    mem = memory(config=CFG)
    mem.add_many(_messages([(0, 1), (2, 3), (4, 5), (6, 7)]))
    assert mem.stats()["pending_steps"] == 0 and mem.segments()


def test_no_llm_call_inside_a_write_transaction(memory, model):
    """The LLM module refuses a call while its connection holds a transaction: a bug fails loudly."""
    from memsif_lite.llm import LLM

    inside = {"v": True}
    llm = LLM("openai/m", kwargs=model.llm_kwargs(), in_transaction=lambda: inside["v"])
    with pytest.raises(RuntimeError, match="inside a write transaction"):
        llm.complete(prompts.title(["Ana: hi"]))
    inside["v"] = False
    assert llm.complete(prompts.title(["Ana: hi"])) is not None


@pytest.mark.parametrize("mode", ["inline", "manual", "background"])
def test_every_mode_reaches_the_same_structure_without_tripping_the_guard(tmp_path, model, mode):
    items = _messages([(0, 1), (0, 2), (3, 4), (3, 5), (6, 7), (6, 8), (9, 1)])
    kw = dict(embedder=FakeEmbedder(), config=CFG, llm="openai/m", llm_kwargs=model.llm_kwargs())
    with Memory(tmp_path / "ref.db", process="inline", **kw) as ref:
        ref.add_many(items)
        want = _structure(ref)
    with Memory(tmp_path / f"{mode}.db", process=mode, **kw) as mem:
        mem.add_many(items)
        if mode == "manual":
            mem.process()
        deadline = time.monotonic() + 30
        while mem.stats()["pending_steps"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mem.stats()["pending_steps"] == 0
        assert _structure(mem) == want
        assert mem.stats()["llm_failures"] == 0


# -- a second process never waits for an LLM call -------------------------------------------------
def _add_one(path: str, text: str, q) -> None:
    try:
        with Memory(path, embedder=FakeEmbedder(), config=Config(busy_timeout_ms=300), process="manual") as mem:
            t = time.perf_counter()
            mem.add("Leo", text)
            q.put(("ok", time.perf_counter() - t))
    except BaseException as e:  # noqa: BLE001
        q.put(("error", repr(e)))


def test_a_second_process_adds_while_an_llm_call_is_in_flight(tmp_path):
    gate, asked = threading.Event(), threading.Event()

    def slow_model(req: dict) -> str:
        asked.set()
        gate.wait(60)  # the model "thinks" until the test lets it answer
        return deterministic_llm(req)

    db = tmp_path / "busy.db"
    with FakeLLMServer(default=slow_model) as server:
        mem = Memory(db, embedder=FakeEmbedder(), config=CFG, llm="openai/m", llm_kwargs=server.llm_kwargs(),
                     process="manual")
        mem.add_many(_messages([(0, 1), (0, 2), (3, 4)]))  # returns at once: nothing asked yet
        assert not asked.is_set()
        worker = threading.Thread(target=mem.process)
        worker.start()
        assert asked.wait(30)  # an LLM call is now in flight
        ctx = multiprocessing.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_add_one, args=(str(db), "added while the model thinks", q))
        p.start()
        status, value = q.get(timeout=60)
        p.join(30)
        gate.set()
        worker.join(60)
        assert status == "ok", value  # with the write lock held during the call it would be StorageBusyError
        assert mem.stats()["messages"] == 4
        mem.close()


# -- kill -9 while processing, at each step kind ---------------------------------------------------
CHILD = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from fakes import FakeEmbedder
    from memsif_lite import Config, Memory
    cfg = Config(tau_split=0.2, tau_merge=0.8, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=60)
    with Memory({db!r}, embedder=FakeEmbedder(), config=cfg, llm="openai/m",
                llm_kwargs={{"api_base": {url!r}, "api_key": "x"}}, process="manual") as mem:
        mem.process()
""")


@pytest.mark.parametrize("purpose", [prompts.BOUNDARY_SYSTEM, prompts.TITLE_SYSTEM, prompts.EXTRACT_SYSTEM,
                                     prompts.OPERATION_SYSTEM])
def test_kill_9_while_processing_loses_nothing_and_the_queue_resumes(tmp_path, purpose):
    db = tmp_path / "k.db"
    items = _messages([(0, 1), (0, 1), (2, 3), (2, 3), (4, 5), (4, 5), (0, 1), (2, 3)])
    hit = threading.Event()

    def model(req: dict) -> str:
        system = req["messages"][0]["content"]
        if system == purpose and not hit.is_set():
            hit.set()
            time.sleep(120)  # the child is killed while waiting for this reply
        if system == prompts.EXTRACT_SYSTEM:  # a fact from every segment, so that operations are asked
            return json.dumps({"facts": [{"subject": "Ana", "type": "Preference", "lines": [1],
                                          "stmt": f"Ana likes thing {_h(req['messages'][1]['content']) % 1000}"}]})
        return deterministic_llm(req)

    with FakeLLMServer(default=model) as server:
        kw = dict(embedder=FakeEmbedder(), config=CFG, llm="openai/m", llm_kwargs=server.llm_kwargs())
        hit.set()  # the reference run is answered at once
        with Memory(tmp_path / "ref.db", process="inline", **kw) as ref:
            ref.add_many(items)
            want = _structure(ref)
        hit.clear()
        with Memory(db, process="manual", **kw) as mem:
            mem.add_many(items)
        code = CHILD.format(tests=str(Path(__file__).parent), db=str(db), url=server.url)
        child = subprocess.Popen([sys.executable, "-c", code])
        try:
            assert hit.wait(60), "the child never reached the step"
            os.kill(child.pid, signal.SIGKILL)
            child.wait(30)
        finally:
            if child.poll() is None:
                child.kill()
        hit.set()  # from now on the model answers at once
        with Memory(db, process="manual", **kw) as mem:
            assert [m.text for m in mem.messages()] == [m["text"] for m in items]
            assert mem.check() == []
            assert mem.stats()["pending_steps"] > 0
            mem.process()
            assert mem.stats()["pending_steps"] == 0
            assert _structure(mem) == want


# -- two processes draining one file --------------------------------------------------------------
def _drain(path: str, q) -> None:
    try:
        with Memory(path, embedder=FakeEmbedder(), config=CFG, process="manual") as mem:
            q.put(("ok", mem.process().steps))
    except BaseException as e:  # noqa: BLE001
        q.put(("error", repr(e)))


def test_two_processes_draining_one_file_apply_every_step_once(tmp_path):
    items = _messages([(i % 10, (i * 3) % 10) for i in range(60)])
    with Memory(tmp_path / "ref.db", embedder=FakeEmbedder(), config=CFG) as ref:
        ref.add_many(items)
        want = _structure(ref)
    db = tmp_path / "two.db"
    with Memory(db, embedder=FakeEmbedder(), config=CFG, process="manual") as mem:
        mem.add_many(items)
        total = mem.stats()["pending_steps"]
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_drain, args=(str(db), q)) for _ in range(2)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(r[0] == "ok" for r in results), results
    with Memory(db, embedder=FakeEmbedder(), config=CFG, process="manual") as mem:
        assert mem.stats()["pending_steps"] == 0
        assert _structure(mem) == want
        with raw(db) as con:  # no step applied twice: no duplicated history
            dup = con.execute("SELECT count(*) FROM (SELECT fact_id, op, stmt, detail FROM fact_history "
                              "GROUP BY 1, 2, 3, 4 HAVING count(*) > 1)").fetchone()[0]
        assert dup == 0
    assert sum(r[1] for r in results) >= total  # every step ran once (follow-up steps add to the count)


# -- LLM options that work, and configuration errors that are not swallowed -----------------------
def test_llm_kwargs_timeout_and_api_key_work_over_http(memory, model):
    mem = memory(config=CFG, llm="openai/m", llm_kwargs={**model.llm_kwargs(), "timeout": 2, "api_key": "x"},
                 process="inline")
    mem.add_many(_messages([(0, 1), (2, 3), (4, 5)]))
    st_ = mem.stats()
    assert st_["llm_calls"] > 0 and st_["llm_failures"] == 0
    assert model.requests and all(r.get("max_tokens") for r in model.requests)


def test_a_wrong_argument_is_an_llm_error_not_a_silent_fallback(memory, model):
    mem = memory(config=CFG, llm="openai/m", llm_kwargs={**model.llm_kwargs(), "messages": []}, process="inline")
    with pytest.raises(LLMError, match="cannot be used as configured"):
        mem.add_many(_messages([(0, 1), (2, 3)]))
    assert mem.stats()["messages"] == 2  # the messages are stored; their steps wait in the queue
    assert mem.stats()["pending_steps"] > 0


def test_rejected_credentials_are_an_llm_error(memory):
    with FakeLLMServer() as server:
        server.default = lambda req: {"status": 401}
        mem = memory(config=CFG, llm="openai/m", llm_kwargs=server.llm_kwargs(), process="inline")
        with pytest.raises(LLMError):
            mem.add_many(_messages([(0, 1), (2, 3)]))


def test_a_dead_model_costs_bounded_time_then_is_tried_again(memory):
    """After ``llm_down_after`` connection failures the model counts as down: later calls use the
    offline rule at once; after the back-off it is asked again."""
    cfg = Config(tau_split=0.01, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=2,
                 llm_down_after=2, llm_backoff_s=3.0)
    mem = memory(config=cfg, llm="openai/m", llm_kwargs={"api_base": "http://127.0.0.1:9/v1", "api_key": "x"},
                 process="inline")
    mem.add_many(_messages([(i % 10, i % 7) for i in range(12)]))
    with raw(mem.path) as con:
        errors = [e for (e,) in con.execute("SELECT error FROM llm_calls ORDER BY id")]
    down = [e.startswith("skipped: model down") for e in errors]
    # two real attempts, then no more waiting (the back-off is long enough that a slow machine's ingest
    # does not outlast it; were it to, a third real attempt after the skips would be right, not a fault)
    assert down[:3] == [False, False, True]
    assert mem.stats()["pending_steps"] == 0  # the offline rule did the work
    time.sleep(3.1)
    mem.add("Ana", "after the back-off")
    with raw(mem.path) as con:
        later = [e for (e,) in con.execute("SELECT error FROM llm_calls WHERE id > ? ORDER BY id", (len(errors),))]
    assert later and not later[0].startswith("skipped")  # asked again after the back-off


def test_storage_busy_while_processing_leaves_the_step_for_later(tmp_path):
    import apsw

    db = tmp_path / "b.db"
    with Memory(db, embedder=FakeEmbedder(), config=Config(busy_timeout_ms=20, sem_low=0.0, sem_high=1.0),
                process="manual") as mem:
        mem.add_many(_messages([(0, 1), (2, 3)]))
        other = apsw.Connection(str(db))
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageBusyError):
            mem.process()
        other.execute("ROLLBACK")
        other.close()
        assert mem.process().pending == 0


def test_cli_later_then_process_and_the_backlog_in_stats(tmp_path):
    from click.testing import CliRunner

    from memsif_lite.cli import main

    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps({"speaker": m["speaker"], "text": m["text"], "at": m["at"].isoformat()})
                             for m in _messages([(0, 1), (2, 3), (4, 5), (6, 7)])) + "\n")
    db = str(tmp_path / "cli.db")
    run = CliRunner().invoke
    res = run(main, ["ingest", str(src), "--db", db, "--later", "--json"])
    assert res.exit_code == 0, res.output
    st = json.loads(run(main, ["stats", "--db", db, "--json"]).output)
    assert st["pending_steps"] == 4 and st["segments"] == 0
    res = run(main, ["process", "--db", db, "--once", "--json"])
    assert json.loads(res.output)["steps"] == 1
    res = run(main, ["process", "--db", db])
    assert res.exit_code == 0 and "0 steps pending" in res.output
    assert json.loads(run(main, ["stats", "--db", db, "--json"]).output)["pending_steps"] == 0


@pytest.mark.local_llm
@pytest.mark.skipif(not os.environ.get("MEMSIF_TEST_LLM_BASE"), reason="set MEMSIF_TEST_LLM_BASE to a local server")
def test_against_a_real_local_model(tmp_path):
    """Opt-in (``MEMSIF_TEST_LLM_BASE=http://127.0.0.1:8089/v1 pytest -m local_llm``): ingest, drain
    the queue and ask through a real OpenAI-compatible server (e.g. llama.cpp with Gemma 3 270M).
    It checks the path (constrained replies validate, nothing is lost), not the answers' quality."""
    base = os.environ["MEMSIF_TEST_LLM_BASE"]
    cfg = Config(llm_timeout_s=60, llm_retries=1)
    with Memory(tmp_path / "real.db", config=cfg, llm="openai/local", llm_kwargs={"api_base": base, "api_key": "x"},
                process="manual") as mem:
        items = _messages([(0, 1), (0, 2), (3, 4), (3, 5), (6, 7), (8, 9)])
        mem.add_many(items)
        assert mem.stats()["segments"] == 0  # nothing waited on the model
        mem.process()
        st = mem.stats()
        assert st["pending_steps"] == 0 and st["messages"] == len(items) and st["segments"] >= 1
        with raw(mem.path) as con:
            bad = con.execute("SELECT count(*) FROM llm_calls WHERE error LIKE 'bad reply%'").fetchone()[0]
        assert st["llm_calls"] > 0 and bad <= 0.05 * st["llm_calls"]
        answer = mem.ask("What does Ana love?", budget_tokens=500)
        assert answer.text and mem.check() == []
