"""The LLM path, over real HTTP through litellm, against a local OpenAI-compatible server."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from fakes import raw
from memsif_lite import Config, Memory, prompts
from memsif_lite.llm import ReplyError, parse_json_object


def _convo(n=12):
    t = datetime(2024, 1, 1, 9)
    topics = ["marathon training long run", "sourdough bread oven", "tax forms accountant"]
    return [{"speaker": "Ana" if i % 2 else "Ben", "text": f"{topics[(i // 4) % 3]} note {i}",
             "at": t + timedelta(minutes=i)} for i in range(n)]


def test_ingestion_with_llm_judges_records_every_call(memory, db, llm_server):
    # a wide band so the boundary judge is consulted for most messages
    cfg = Config(tau_split=0.01, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=5)
    llm_server.route({prompts.BOUNDARY_SYSTEM: '{"continues": true}', prompts.TRAJECTORY_SYSTEM: '{"compatible": [1]}',
                      prompts.EXTRACT_SYSTEM: '{"facts": []}'}, default='{"title": "A title"}')
    llm_server.script("this is not JSON", {"status": 500}, '{"continues": "maybe"}',
                      '```json\n{"continues": false}\n```')
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    ids = mem.add_many(_convo())
    assert len(ids) == 12
    st = mem.stats()
    with raw(db) as con:
        rows = con.execute("SELECT purpose, model, prompt_tokens, completion_tokens, latency_ms, ok "
                           "FROM llm_calls").fetchall()
    closed = [s for s in mem.segments() if s.closed]
    assert closed and all(s.label == "A title" for s in closed)
    assert all(t.label == "A title" for t in mem.trajectories())
    assert st["messages"] == 12
    assert st["llm_calls"] == len(rows) >= 11
    assert st["llm_failures"] == 3  # not JSON, HTTP 500, wrong type; the fenced JSON is accepted
    ok = [r for r in rows if r[5] == 1]
    assert all(r[1] == "openai/test-model" and r[2] == 11 and r[3] == 3 and r[4] >= 0 for r in ok)
    assert {r[0] for r in rows} <= {"boundary", "trajectory", "title", "fact_extract"}
    # memory content went to the model only inside a data block of the user message
    req = llm_server.requests[0]
    fmt = req["response_format"]  # decoding constrained by the reply's JSON schema
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["properties"]["continues"]["type"] == "boolean"
    assert "<data" in req["messages"][1]["content"] and "marathon" not in req["messages"][0]["content"]


def test_llm_unreachable_falls_back_and_loses_nothing(db, fake_embedder):
    cfg = Config(tau_split=0.01, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=1, llm_timeout_s=2)
    with Memory(db, embedder=fake_embedder, config=cfg, llm="openai/test-model", process="inline",
                llm_kwargs={"api_base": "http://127.0.0.1:9/v1", "api_key": "x"}) as mem:
        mem.add_many(_convo(6))
        st = mem.stats()
    with Memory(db, embedder=fake_embedder, config=cfg) as offline:
        assert [m.text for m in offline.messages()] == [c["text"] for c in _convo(6)]
    assert st["messages"] == 6 and st["llm_failures"] == st["llm_calls"] >= 5


def test_llm_timeout_is_bounded(memory, llm_server):
    cfg = Config(tau_split=0.01, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0, llm_timeout_s=0.5)
    llm_server.default = lambda req: {"sleep": 3, "content": '{"continues": true}'}
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    import time

    t0 = time.perf_counter()
    mem.add_many(_convo(3))
    assert time.perf_counter() - t0 < 10
    assert mem.stats()["llm_failures"] >= 2


@pytest.mark.parametrize("bad", ["", "[1, 2]", '{"a": NaN}', '{"a": 1, "a": 2}', "Sure! {\"continues\": true}",
                                 '{"continues": true} trailing'])
def test_strict_json_parsing(bad):
    with pytest.raises(ReplyError):
        parse_json_object(bad)


def test_trajectory_judge_validation_rejects_unknown_candidates():
    from memsif_lite import prompts

    prompt = prompts.trajectory(["Ana: hi"], [["Ben: a"], ["Ben: b"]])
    validate, user = prompt.validate, prompt.user
    assert prompt.purpose == "trajectory"
    assert validate({"compatible": [2, 1]}) == (0, 1)  # the judge takes the first (best-scoring) one
    assert validate({"compatible": []}) == ()
    for bad in ({"compatible": [3]}, {"compatible": "1"}, {"compatible": [True]}, {}):
        with pytest.raises(ReplyError):
            validate(bad)
    assert json.dumps("Ana: hi") in user


def test_bounded_lists_are_cut_not_rejected_and_raw_control_characters_pass():
    """A model that ignores the schema's bounds (plain JSON mode) keeps its first items; a raw
    newline inside a string (llama.cpp's grammar emits one) is read, then collapsed."""
    from memsif_lite import Config, prompts

    prompt = prompts.extract_facts(["Ana: I live in Porto.", "Ana: I love tea."], [], Config().fact_schema)
    many = {"facts": [{"subject": "Ana", "type": "Identity", "stmt": f"Ana fact {i}", "lines": [1, 2, 1, 2, 2]}
                      for i in range(9)]}
    got = prompt.validate(many)
    assert [g[2] for g in got] == [f"Ana fact {i}" for i in range(6)] and got[0][3] == [0, 1]
    assert prompt.schema["properties"]["facts"]["maxItems"] == 6
    raw = '{"facts": [{"subject": "Ana", "type": "Identity", "stmt": "Ana lives\n in Porto", "lines": [1]}]}'
    assert prompt.validate(parse_json_object(raw))[0][2] == "Ana lives in Porto"
    with pytest.raises(ReplyError):  # still strict about what the items say
        prompt.validate({"facts": [{"subject": "Ana", "type": "Mood", "stmt": "x y z", "lines": [1]}]})


# -- CoreFacts through the LLM: extraction and the four operations --------------------------------
def _route_facts(server, script):
    """Boundary → split, trajectory → none, extraction and operation replies from ``script``."""
    server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Moving house"}',
        prompts.EXTRACT_SYSTEM: lambda: script["extract"].pop(0) if script["extract"] else '{"facts": []}',
        prompts.OPERATION_SYSTEM: lambda: script["op"].pop(0) if script["op"] else '{"op": "add", "target": null}',
    })


def test_llm_core_facts_four_operations_and_invalid_replies(memory, db, llm_server):
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    fact = lambda stmt, ftype="Identity", lines=(1,): json.dumps(  # noqa: E731
        {"facts": [{"subject": "Maya", "type": ftype, "stmt": stmt, "lines": list(lines)}]})
    script = {
        "extract": [fact("Maya lives in Lisbon"), fact("Maya lives in Lisbon, near the river"),
                    fact("Maya lives in Lisbon."), fact("Maya lives in Porto"),
                    fact("Maya likes tea", ftype="Mood"),                    # type outside the schema
                    fact("Maya has a cat", ftype="Relation", lines=(7,)),    # line that does not exist
                    fact("Maya loves ceramics", ftype="Preference")],
        "op": ['{"op": "update", "target": 1, "stmt": "Maya lives in Lisbon, near the river"}',
               '{"op": "merge", "target": 1}',
               '{"op": "supersede", "target": 1, "stmt": "Maya lives in Porto"}',
               '{"op": "delete", "target": 1}',                              # not an operation
               ],
    }
    _route_facts(llm_server, script)
    t = datetime(2024, 1, 1, 9)
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    texts = ["home sweet home", "the river view", "still here", "new city now: Porto", "tea time", "meow",
             "clay and wheels", "bye"]
    for i, text in enumerate(texts):
        mem.add("Maya", text, at=t + timedelta(days=30 * i))
    facts = mem.facts(include_superseded=True)
    by_stmt = {f.stmt: f for f in facts}
    old = by_stmt["Maya lives in Lisbon, near the river"]
    new = by_stmt["Maya lives in Porto"]
    assert old.superseded_by == new.id and old.valid_to is not None and old.message_ids == (1, 2, 3)
    assert [e.op for e in mem.fact_history(old.id)] == ["add", "update", "merge", "superseded"]
    assert mem.fact_history(old.id)[0].stmt == "Maya lives in Lisbon"  # history keeps the old wording
    assert "Maya likes tea" not in by_stmt and "Maya has a cat" not in by_stmt
    assert by_stmt["Maya loves ceramics"].origin == "llm"
    with raw(db) as con:
        failures = con.execute("SELECT purpose, error FROM llm_calls WHERE ok=0").fetchall()
    purposes = sorted(p for p, _ in failures)
    # the Mood type, the missing line, and the "delete" operation
    assert purposes == ["fact_extract", "fact_extract", "fact_operation"]
    assert any("facts.0.type" in e for _, e in failures)  # the reply named a type outside the schema
    # forgetting the message behind the update undoes it: wording and history as if never said
    mem.forget(message_id=2)
    old = next(f for f in mem.facts(include_superseded=True) if f.id == old.id)
    assert old.stmt == "Maya lives in Lisbon" and old.message_ids == (1, 3)
    assert [e.op for e in mem.fact_history(old.id)] == ["add", "merge", "superseded"]
    assert all("near the river" not in e.stmt for e in mem.fact_history(old.id))


def test_invalid_operation_target_is_ignored_and_counted(memory, llm_server):
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    script = {"extract": [json.dumps({"facts": [{"subject": "Leo", "type": "Preference", "stmt": s, "lines": [1]}]})
                          for s in ("Leo loves running", "Leo loves running marathons", "Leo loves trail running")],
              "op": ['{"op": "merge", "target": 9}', '{"op": "frobnicate", "target": 1}']}
    _route_facts(llm_server, script)
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    for i, text in enumerate(["run", "run more", "run trails", "done"]):
        mem.add("Leo", text, at=datetime(2024, 1, 1) + timedelta(days=i))
    stmts = sorted(f.stmt for f in mem.facts())
    st = mem.stats()
    assert stmts == ["Leo loves running", "Leo loves running marathons", "Leo loves trail running"]
    assert st["llm_failures"] == 2  # both bad operations fell back to the offline rule (add)


def test_ask_with_a_failing_llm_completes_with_fallbacks(db, fake_embedder, llm_server):
    cfg = Config(sem_low=0.0, sem_high=1.0, llm_retries=1, llm_timeout_s=2)
    with Memory(db, embedder=fake_embedder, config=cfg) as offline:
        offline.add_many([{"speaker": "Ana", "text": "I keep bees on my roof."},
                          {"speaker": "Ben", "text": "Do the bees make honey?"}])
    llm_server.default = lambda req: {"status": 500}
    with Memory(db, embedder=fake_embedder, config=cfg, llm="openai/test-model", process="inline",
                llm_kwargs=llm_server.llm_kwargs()) as mem:
        import time

        t0 = time.perf_counter()
        a = mem.ask("What does Ana keep on her roof?", budget_tokens=300)
        assert time.perf_counter() - t0 < 30
        assert a.extractive and "bees" in a.text and a.llm_calls >= 2
        assert mem.stats()["llm_failures"] == a.llm_calls
        assert mem.stats()["messages"] == 2


def test_litellm_embedder_over_http(memory, llm_server):
    from memsif_lite.embed import LiteLLMEmbedder

    emb = LiteLLMEmbedder("openai/test-embedding", **llm_server.llm_kwargs())
    assert emb.dim == 16 and emb.model_id == "litellm:openai/test-embedding"
    mem = memory(embedder=emb, config=Config(sem_low=0.0, sem_high=1.0))
    mem.add("Ana", "bees on the roof")
    mem.add("Ben", "a violin exam")
    assert mem.search("roof bees", k=1)[0].text == "bees on the roof"


def test_schema_constrained_replies_step_down_to_what_the_server_takes(memory, db):
    """llama-cpp-python's server answers HTTP 500 to ``json_schema`` but takes ``json_object`` with a
    ``schema``: ``auto`` steps down once and keeps the valid choices as enums in the schema."""
    from fakes import FakeLLMServer

    def llama_like(req: dict):
        fmt = req.get("response_format") or {}
        if fmt.get("type") != "json_object":
            return {"status": 500, "message": "response_format.type: Input should be 'text' or 'json_object'"}
        system = req["messages"][0]["content"]
        if system == prompts.TRAJECTORY_SYSTEM:
            items = fmt["schema"]["properties"]["compatible"]["items"]  # the candidates, as an enum
            return '{"compatible": []}' if items.get("enum") or "const" in items else "no enum"
        return {prompts.BOUNDARY_SYSTEM: '{"continues": false}', prompts.TITLE_SYSTEM: '{"title": "T"}'}.get(
            system, '{"facts": []}')

    with FakeLLMServer(default=llama_like) as server:
        cfg = Config(tau_split=0.01, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
        mem = memory(config=cfg, llm="openai/m", process="inline", llm_kwargs=server.llm_kwargs())
        mem.add_many(_convo(8))
        formats = [r["response_format"]["type"] for r in server.requests]
        assert formats[0] == "json_schema" and set(formats[1:]) == {"json_object"}
        assert all("schema" in r["response_format"] for r in server.requests[1:])
        st = mem.stats()
        assert st["llm_failures"] == 0 and st["llm_calls"] >= 7 and len(mem.segments()) > 1


def test_a_fact_stated_again_is_merged_without_asking_the_model(memory, db, llm_server):
    """A current fact stated again is merged into it whatever a model would answer (this one
    would add a copy): the operation prompt is never sent for it; a new statement still is."""
    said = ["Maya loves ceramics", "Maya loves ceramics.", "Maya loves jazz"]
    llm_server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Hobbies"}',
        prompts.EXTRACT_SYSTEM: lambda: json.dumps({"facts": [{"subject": "Maya", "type": "Preference",
                                                               "stmt": said.pop(0) if said else "x", "lines": [1]}]}
                                                   if said else {"facts": []}),
        prompts.OPERATION_SYSTEM: '{"op": "add", "target": null}',
    })
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    t = datetime(2024, 1, 1, 9)
    for i, text in enumerate(["clay and wheels", "still the wheel", "a saxophone night", "bye"]):
        mem.add("Maya", text, at=t + timedelta(days=30 * i))
    assert not said
    facts = {f.stmt: f for f in mem.facts()}
    assert set(facts) == {"Maya loves ceramics", "Maya loves jazz"}
    assert facts["Maya loves ceramics"].message_ids == (1, 2)
    assert [e.op for e in mem.fact_history(facts["Maya loves ceramics"].id)] == ["add", "merge"]
    [merge] = [c for c in mem.changes(op="fact") if c.op == "fact.merge"]
    assert merge.purpose == "fact_extract"  # the model extracted it; the rule merged it
    asked = [r for r in llm_server.requests
             if "messages" in r and r["messages"][0]["content"] == prompts.OPERATION_SYSTEM]
    assert len(asked) == 1  # for "Maya loves jazz" only (the first fact had nothing to be compared with)


def _moves(llm_server, operation: str) -> None:
    llm_server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Home"}',
        prompts.EXTRACT_SYSTEM: {"status": 500},  # the model fails: the offline extractor's candidates
        prompts.OPERATION_SYSTEM: operation,
    })


@pytest.mark.parametrize("said_by", ["Maya", "Leo"])
def test_moving_back_is_decided_by_the_rule_whatever_the_model_would_answer(memory, llm_server, said_by):
    """Lisbon and Porto current, then "I moved back to Lisbon": a restated fact that states a change
    of its slot Supersedes it and the slot's other value without asking the model (this one would
    add a copy). Said by Leo, it is a fact about Leo: Maya's homes stay as they were."""
    _moves(llm_server, '{"op": "add", "target": null}')
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    t = datetime(2024, 1, 1, 9)
    for d, who, text in [(0, "Maya", "I live in Lisbon."), (30, "Maya", "I live in Porto."),
                         (150, said_by, "Big news: I moved back to Lisbon!"), (151, "Maya", "ok"),
                         (152, "Zed", "Welcome back.")]:
        mem.add(who, text, at=t + timedelta(days=d))
    homes = {(f.subject, f.stmt, f.valid_to is None) for f in mem.facts(include_superseded=True)
             if " lives in " in f.stmt}
    if said_by == "Maya":
        assert homes == {("Maya", "Maya lives in Lisbon", False), ("Maya", "Maya lives in Porto", False),
                         ("Maya", "Maya lives in Lisbon", True)}
        [now] = [f for f in mem.facts() if " lives in " in f.stmt]
        assert now.message_ids == (3,)
    else:  # Leo's words are a fact about Leo: Maya's homes are untouched
        assert ("Maya", "Maya lives in Lisbon", True) in homes and ("Maya", "Maya lives in Porto", True) in homes
        assert all(current for subject, _, current in homes if subject == "Maya")


def test_a_models_add_in_words_a_current_fact_holds_is_a_merge(memory, llm_server):
    """The model answers Add but words the fact as one the subject already holds: merged into it."""
    _moves(llm_server, '{"op": "add", "target": null, "stmt": "Maya loves jazz"}')
    cfg = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
    mem = memory(config=cfg, llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    t = datetime(2024, 1, 1, 9)
    for d, text in [(0, "I love jazz."), (30, "I love jazz nights."), (31, "ok")]:
        mem.add("Maya", text, at=t + timedelta(days=d))
    mem.add("Zed", "bye", at=t + timedelta(days=32))
    [f] = [f for f in mem.facts() if " loves " in f.stmt]
    assert f.stmt == "Maya loves jazz" and f.message_ids == (1, 2)
    assert [e.op for e in mem.fact_history(f.id)] == ["add", "merge"]


@pytest.mark.parametrize("held, candidate, worded, left", [
    ([("Maya works at Acme", "works at", "2024-01-01"), ("Maya works at Beta", "works at", "2024-02-01")],
     ("Maya works at Beta now", "works at", ("works at Acme",)), "Maya works at Beta", ["Maya works at Beta"]),
    ([("Maya lives in Lisbon", "lives in", "2024-01-01"), ("Maya lives in Porto", "lives in", "2024-02-01")],
     ("Maya lives in Lisbon again", "lives in", ()), "Maya lives in Lisbon", ["Maya lives in Lisbon"])])
def test_a_models_add_in_held_words_still_ends_what_the_change_ends(memory, held, candidate, worded, left):
    """A change whose model-worded Add is a fact already held supersedes that fact (no copy), and
    what the change ends still ends: another job, the other home."""
    from fakes import FakeEmbedder
    from memsif_lite.core_facts import Candidate, CoreFactWriter, OfflineFactExtractor, Operation

    class AddAs:
        def choose(self, c, related):
            return Operation("add", None, worded, by="llm:test")

    cfg = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.99, tau_split=0.98)
    mem = memory(config=cfg)
    mem.add("Maya", "hello", at=datetime(2024, 1, 1, 9))
    db, emb = mem._db, FakeEmbedder()
    with db.write():
        for stmt, slot, when in held:
            db.facts.insert(subject="Maya", ftype="Identity", stmt=stmt, slot=slot, now="2024-12-01T00:00:00",
                            valid_from=f"{when}T00:00:00", origin="llm", vector=emb.embed([stmt], kind="passage")[0],
                            message_ids=[1])
    writer = CoreFactWriter(db, extractor=OfflineFactExtractor(cfg.fact_schema), chooser=AddAs(),
                            embed_passages=lambda texts: emb.embed(list(texts), kind="passage"))
    stmt, slot, ends = candidate
    c = Candidate("Maya", "Identity", stmt, (1,), "2024-05-30T00:00:00", slot, origin="llm", change=True, ends=ends)
    with db.read():
        decision = writer.decide(c)
    with db.write():
        writer.apply(c, decision)
    assert decision.op.name == "supersede" and decision.op.by == "llm:test"
    assert sorted(f.stmt for f in mem.facts()) == left
