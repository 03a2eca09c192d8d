"""A forgotten message's words survive nowhere (docs/history.md, "A forget is final"): not in the
wording or history of a CoreFact that outlives it through other sources, not in an ActiveFact's
evidence, not in a segment's or trajectory's title, not in the change log, the full-text index
or an export. Real files, the real model, the fake LLM server over HTTP; the file is read directly."""

from __future__ import annotations

import json
import re
import tempfile
import threading
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import apsw
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import raw
from memsif_lite import Config, Evidence, Memory, prompts
from memsif_lite.db.rewind import unpack
from memsif_lite.timeutil import record_clock

CFG = Config(tau_split=0.98, tau_merge=0.99, sem_low=0.0, sem_high=1.0, llm_retries=0)
T = datetime(2024, 1, 1, 9)
R0 = datetime(2026, 3, 1, 12, 0)  # record time


def everything(path: Path, export: Path | None = None) -> str:
    """Every text the file holds, lower-cased: every column of every table (the change log's packed
    images unpacked, blobs read as text where they are), the full-text index's terms (as its
    vocabulary lists them: its segments keep a deleted row's terms until they are merged, see
    docs/history.md), and the export of the file when given."""
    out: list[str] = []
    with raw(path) as con:
        tables = [n for (n,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' "
            "AND name NOT LIKE 'message_fts_%'")]
        for name in tables:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info('{name}')")]
            for row in con.execute(f"SELECT * FROM '{name}'"):
                for col, v in zip(cols, row, strict=True):
                    if isinstance(v, bytes):
                        if name == "change_log" and col == "images":
                            out.append(json.dumps(unpack(v)))
                        out.append(v.decode("utf-8", "replace"))
                    elif v is not None:
                        out.append(str(v))
        con.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, message_fts, row)")
        out += [t for (t,) in con.execute("SELECT term FROM temp.vocab")]
    if export is not None:
        out.append(export.read_text())
    return "\n".join(out).lower()


def _route(server: Any, script: dict[str, list[str]]) -> None:
    def pop(key: str, default: str) -> Any:  # the next scripted reply, then the default
        return lambda: script[key].pop(0) if script.get(key) else default

    server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: pop("title", '{"title": "Small talk"}'),
        prompts.EXTRACT_SYSTEM: pop("extract", '{"facts": []}'),
        prompts.OPERATION_SYSTEM: pop("op", '{"op": "add", "target": null}'),
    })


def _fact(ftype: str, stmt: str, lines: tuple[int, ...] = (1,)) -> str:
    return json.dumps({"facts": [{"subject": "Maya", "type": ftype, "stmt": stmt, "lines": list(lines)}]})


#: default thresholds, no retry of a failed LLM call
PLAIN = Config(llm_retries=0)


def _other_steps(system: str, operation: str, title: str | None = None) -> str:
    """The scripted reply to a prompt other than extraction: the CoreFact ``operation``, no segment
    boundary, no compatible trajectory, the segment ``title`` (none: ``{}``)."""
    replies = {prompts.OPERATION_SYSTEM: operation, prompts.BOUNDARY_SYSTEM: '{"continues": false}',
               prompts.TRAJECTORY_SYSTEM: '{"compatible": []}'}
    if title is not None:
        replies[prompts.TITLE_SYSTEM] = json.dumps({"title": title})
    return replies.get(system, "{}")


def _open(path: Path, embedder: Any, server: Any, config: Config = CFG, process: str = "inline") -> Memory:
    return Memory(path, embedder=embedder, config=config, llm="openai/test-model", process=process,
                  llm_kwargs=server.llm_kwargs())


def test_a_fact_merged_from_another_message_is_worded_from_it_after_a_forget(tmp_path, embedder, llm_server):
    """Added from A, merged from B (the LLM's choice: B's words are not A's): forgetting A leaves
    the fact worded from B, with no trace of A's words in its history, vector or anywhere else."""
    _route(llm_server, {"extract": [_fact("Preference", "Maya loves kombucha from Quillfeather bakery"),
                                    _fact("Preference", "Maya loves kombucha")],
                        "op": ['{"op": "merge", "target": 1}']})
    path, export = tmp_path / "m.db", tmp_path / "m.jsonl"
    with record_clock(lambda: R0), _open(path, embedder, llm_server) as mem:
        a = mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(days=2))
        mem.add("Leo", "ok", at=T + timedelta(days=3))
        [f] = mem.facts()
        assert f.stmt == "Maya loves kombucha from Quillfeather bakery" and f.message_ids == (a, b)
    with record_clock(lambda: R0 + timedelta(hours=1)), _open(path, embedder, llm_server) as mem:
        mem.forget(message_id=a)
        [f] = mem.facts()
        assert f.stmt == "Maya loves kombucha" and f.message_ids == (b,) and f.valid_from == T + timedelta(days=2)
        assert {e.stmt for e in mem.fact_history(f.id)} == {"Maya loves kombucha"}
        # before the forget, as the file held it: what is left, as it is now worded (docs/history.md)
        assert [(g.id, g.stmt) for g in mem.facts(known_at=R0)] == [(f.id, "Maya loves kombucha")]
        assert [c.id for c in mem.context("What does Maya love?", known_at=R0).facts if c.kind == "core"] == [f.id]
        mem.export_to(export)
    text = everything(path, export)
    assert "kombucha" in text and "quillfeather" not in text


def test_a_fact_updated_from_another_message_is_worded_from_it_after_a_forget(tmp_path, embedder, llm_server):
    """Added from A, updated from B (the LLM kept A's words in the update): forgetting A re-words
    the fact from B."""
    _route(llm_server, {"extract": [_fact("Identity", "Maya lives in Lisbon near Quillfeather park"),
                                    _fact("Identity", "Maya lives in Lisbon downtown")],
                        "op": ['{"op": "update", "target": 1, '
                               '"stmt": "Maya lives in Lisbon downtown near Quillfeather park"}']})
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server) as mem:
        a = mem.add("Maya", "Home sweet home in Lisbon, right by Quillfeather park.", at=T)
        b = mem.add("Maya", "I live in Lisbon downtown.", at=T + timedelta(days=2))
        mem.add("Leo", "ok", at=T + timedelta(days=3))
        [f] = mem.facts()
        assert f.stmt == "Maya lives in Lisbon downtown near Quillfeather park"
        mem.forget(message_id=a)
        [f] = mem.facts()
        assert f.message_ids == (b,) and "Lisbon" in f.stmt and "Quillfeather" not in f.stmt
        assert all("Quillfeather" not in e.stmt for e in mem.fact_history(f.id))
        assert [c.message_ids for c in mem.context("Where does Maya live?").facts if c.kind == "core"] == [(b,)]
    assert "quillfeather" not in everything(path)


def test_a_fact_only_the_forgotten_message_could_word_goes_with_it(tmp_path, embedder, llm_server):
    """Merged from B, but B says nothing a wording can be made of without A: the fact goes (B stays)."""
    _route(llm_server, {"extract": [_fact("Preference", "Maya loves kombucha from Quillfeather bakery"),
                                    _fact("Preference", "Maya loves that drink")],
                        "op": ['{"op": "merge", "target": 1}']})
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server) as mem:
        a = mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "Same drink for me again today, yes.", at=T + timedelta(days=2))
        mem.add("Leo", "ok", at=T + timedelta(days=3))
        assert [f.message_ids for f in mem.facts()] == [(a, b)]
        mem.forget(message_id=a)
        assert mem.facts(include_superseded=True) == []
        assert [m.id for m in mem.messages()][:1] == [b]
    text = everything(path)
    assert "quillfeather" not in text and "kombucha" not in text


def test_a_title_evidence_and_facts_worded_beside_the_forgotten_message_lose_its_words(tmp_path, embedder,
                                                                                        llm_server):
    """A segment's LLM title was written from its lines, the forgotten one among them; a CoreFact
    citing only B was worded by the LLM that read A beside it; an ActiveFact statement cited A
    beside B: none keeps A's words."""
    _route(llm_server, {"title": ['{"title": "Quillfeather bakery visit"}'],
                        "extract": [_fact("Preference", "Maya loves the kombucha of Quillfeather bakery", (2,))]})
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server, PLAIN, "inline") as mem:  # the default thresholds: A and B share a segment
        a = mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(minutes=5))
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        [seg] = [s for s in mem.segments() if a in s.message_ids]
        assert seg.message_ids == (a, b) and seg.label == "Quillfeather bakery visit"
        [f] = mem.facts()
        assert f.message_ids == (b,) and "Quillfeather" in f.stmt
        mem.accumulate("what does maya like", [Evidence("Maya adores Quillfeather kombucha", "Maya", (a, b)),
                                               Evidence("Maya loves kombucha", "Maya", (b,))])
        mem.forget(message_id=a)
        [seg] = [s for s in mem.segments() if b in s.message_ids]
        assert "Quillfeather" not in seg.label
        assert all("Quillfeather" not in x for c in mem.candidates() for x in c.statements)
        assert [(g.id, g.stmt, g.message_ids) for g in mem.facts()] == [(f.id, "Maya loves kombucha", (b,))]
    assert "quillfeather" not in everything(path)


_TOKENS = ["Quillfeather", "Zorbanite", "Vellichor", "Brambleton", "Saffronia", "Tindalo"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.sampled_from(["add", "merge", "update"]), min_size=2, max_size=5),
       forget=st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True))
def test_no_forgotten_messages_unique_word_survives(embedder, ops, forget):
    """Random add / merge / update sequences on one fact, then forgets: no forgotten message's own
    word (one no kept message says) is left anywhere in the file."""
    from fakes import FakeLLMServer

    extract = [_fact("Preference", f"Maya loves kombucha from {_TOKENS[i]}") for i in range(len(ops))]
    chosen = [{"add": '{"op": "add", "target": null}', "merge": '{"op": "merge", "target": 1}',
               "update": json.dumps({"op": "update", "target": 1,
                                     "stmt": f"Maya loves kombucha from {' and '.join(_TOKENS[:i + 1])}"})}[op]
              for i, op in enumerate(ops)][1:]
    with tempfile.TemporaryDirectory() as d, FakeLLMServer() as server:
        _route(server, {"extract": extract, "op": chosen})
        path = Path(d) / "m.db"
        with _open(path, embedder, server) as mem:
            ids = [mem.add("Maya", f"I love kombucha, the one from {_TOKENS[i]}.", at=T + timedelta(days=i))
                   for i in range(len(ops))]
            mem.add("Leo", "ok", at=T + timedelta(days=9))
            gone = [ids[i] for i in forget if i < len(ids)]
            for mid in gone:
                mem.forget(message_id=mid)
            kept = [m.text.lower() for m in mem.messages()]
        text = everything(path)
    for i, mid in enumerate(ids):
        if mid in gone:
            token = _TOKENS[i].lower()
            assert re.search(token, text) is None or any(token in k for k in kept), (ops, forget, token)


def test_a_merge_applying_the_other_files_forget_keeps_none_of_its_words(tmp_path, embedder, llm_server):
    """The other copy forgot A: merging it removes A here, and nothing here keeps A's words (the
    tombstone's forget, inside the merge, then its rebuild re-derives the facts from B)."""
    _route(llm_server, {"extract": [_fact("Preference", "Maya loves kombucha from Quillfeather bakery"),
                                    _fact("Preference", "Maya loves kombucha"),
                                    _fact("Preference", "Maya loves kombucha")],  # the rebuild's
                        "op": ['{"op": "merge", "target": 1}']})
    path, other = tmp_path / "a.db", tmp_path / "b.db"
    with _open(path, embedder, llm_server) as mem:
        a = mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(days=2))
        mem.add("Leo", "ok", at=T + timedelta(days=3))
        assert [f.message_ids for f in mem.facts()] == [(a, b)]
        mem.backup(other)
    with _open(other, embedder, llm_server) as mem:
        mem.forget(message_id=a)
    with _open(path, embedder, llm_server) as mem:
        assert mem.merge_from(other).removed_by_tombstones == 1
        assert [f.stmt for f in mem.facts()] == ["Maya loves kombucha"]
    assert "quillfeather" not in everything(path) and "quillfeather" not in everything(other)


def test_a_pending_candidate_worded_from_the_forgotten_message_is_not_written(tmp_path, embedder, llm_server):
    """Forgotten while the CoreFact candidates extracted with it in view wait in the queue: one
    holding its words is dropped (it would write them), one that does not is written."""
    _route(llm_server, {"extract": [json.dumps({"facts": [
        {"subject": "Maya", "type": "Preference", "stmt": "Maya loves the kombucha of Quillfeather bakery",
         "lines": [1, 2]},
        {"subject": "Maya", "type": "Preference", "stmt": "Maya loves kombucha", "lines": [2]}]})]})
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server, PLAIN, "manual") as mem:
        a = mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(minutes=5))
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        for _ in range(20):
            with raw(path) as con:
                if con.execute("SELECT count(*) FROM work_queue WHERE kind='fact'").fetchone()[0] == 2:
                    break
            mem.process(max_steps=1)
        assert mem.facts() == []  # both candidates wait
        mem.forget(message_id=a)
        assert "quillfeather" not in everything(path)
        mem.process()
        assert [(f.stmt, f.message_ids) for f in mem.facts()] == [("Maya loves kombucha", (b,))]
    assert "quillfeather" not in everything(path)


def test_a_queued_candidate_still_citing_a_forgotten_message_writes_nothing(tmp_path, embedder, llm_server):
    """A file forgotten in before this check may hold a queued candidate that still cites the
    forgotten message (and may hold its words): processing writes nothing from it."""
    _route(llm_server, {"extract": [json.dumps({"facts": [
        {"subject": "Maya", "type": "Preference", "stmt": "Maya loves the kombucha of Quillfeather bakery",
         "lines": [1, 2]}]})]})
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server, PLAIN, "manual") as mem:
        mem.add("Maya", "Quillfeather bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(minutes=5))
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        for _ in range(20):
            with raw(path) as con:
                if con.execute("SELECT count(*) FROM work_queue WHERE kind='fact'").fetchone()[0] == 1:
                    break
            mem.process(max_steps=1)
    con = apsw.Connection(str(path))  # as the forget of a version before this check left it: a message
    try:  # that no candidate cites any more... but this one, still queued
        con.execute("UPDATE work_queue SET payload=replace(payload, '[1, 2]', '[99, 2]') WHERE kind='fact'")
    finally:
        con.close()
    with _open(path, embedder, llm_server, PLAIN, "manual") as mem:
        mem.process()
        assert mem.facts() == [] and b in [m.id for m in mem.messages()]


def test_a_candidate_decided_before_a_forget_is_decided_again_after_it(tmp_path, embedder, llm_server):
    """A fact step decides with no transaction open (here: waiting on the LLM's choice) while the
    message it cites is forgotten: the forget takes the message out of the queued candidate, and
    the step, read before, is decided again rather than written citing a message that is gone
    (which failed processing with a foreign key error)."""
    asked, release = threading.Event(), threading.Event()

    def choose() -> str:
        asked.set()
        release.wait(30)
        return '{"op": "add", "target": null}'

    llm_server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}', prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Drinks"}', prompts.OPERATION_SYSTEM: choose,
        prompts.EXTRACT_SYSTEM: lambda: json.dumps({"facts": [
            {"subject": "Maya", "type": "Preference", "stmt": "Maya loves tea", "lines": [2]},
            {"subject": "Maya", "type": "Preference", "stmt": "Maya loves kombucha", "lines": [1, 2]}]})})
    path, (_, b, _) = _forget_while_waiting(tmp_path, embedder, llm_server, asked, release, [
        "Kombucha is my drink.", "I love kombucha and tea."])  # (it was: the step wrote its source A, gone)
    with _llm_memory(path, embedder, llm_server) as mem:
        assert sorted((f.stmt, f.message_ids) for f in mem.facts()) == [
            ("Maya loves kombucha", (b,)), ("Maya loves tea", (b,))]


def test_a_fact_worded_from_its_trajectory_context_outlives_a_forget_beside_it(tmp_path, embedder, llm_server):
    """B's extraction was shown B's segment (A, B) and the trajectory context before it (P, which
    says "golden retriever Rex"): forgetting A keeps the fact citing B, its words all said by P."""
    def reply(req: dict[str, Any]) -> str:
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if system == prompts.EXTRACT_SYSTEM:
            return _fact("Relation", "Maya's golden retriever Rex is fine now", (2,)) if "He is fine now" in user \
                else '{"facts": []}'
        return {prompts.BOUNDARY_SYSTEM: '{"continues": true}' if "vet" in user or "fine" in user
                else '{"continues": false}', prompts.TRAJECTORY_SYSTEM: '{"compatible": [1]}',
                prompts.TITLE_SYSTEM: '{"title": "Small talk"}'}.get(system, "{}")

    llm_server.default = reply
    path = tmp_path / "m.db"
    with Memory(path, embedder=embedder, config=Config(llm_retries=0, tau_split=0.0, tau_merge=1.0),
                llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs()) as mem:
        mem.add("Maya", "My dog Rex is a golden retriever.", at=T - timedelta(days=1))
        mem.add("Leo", "Nice weather for football today.", at=T - timedelta(hours=20))
        a = mem.add("Maya", "Took Rex, my golden retriever, to the vet.", at=T)
        b = mem.add("Maya", "He is fine now.", at=T + timedelta(minutes=5))
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        assert [s.message_ids for s in mem.segments() if a in s.message_ids] == [(a, b)]
        [f] = mem.facts()
        assert f.message_ids == (b,)
        mem.forget(message_id=a)
        assert [(g.id, g.stmt, g.message_ids) for g in mem.facts()] == [(f.id, f.stmt, (b,))]
    assert "vet" not in everything(path).split()


def test_a_fact_worded_again_after_a_forget_takes_the_slot_of_its_new_wording(tmp_path, embedder, llm_server):
    """Added from A by the offline rules (slot "favourite drink"), merged from B ("favourite
    beverage"): forgetting A words the fact from B, its slot too."""
    def reply(req: dict[str, Any]) -> str:
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if system == prompts.EXTRACT_SYSTEM:
            if "favourite beverage" in user:
                return _fact("Preference", "Maya's favourite beverage is kombucha")
            return '{"facts": "broken"}' if "favourite drink" in user else '{"facts": []}'
        return _other_steps(system, '{"op": "merge", "target": 1}', "Small talk")

    llm_server.default = reply
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server, PLAIN, "inline") as mem:
        a = mem.add("Maya", "My favourite drink is kombucha.", at=T - timedelta(days=20))
        mem.add("Leo", "Did you see the football match?", at=T - timedelta(days=10))
        b = mem.add("Maya", "My favourite beverage is kombucha.", at=T)
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        assert [f.message_ids for f in mem.facts()] == [(a, b)]
        mem.forget(message_id=a)
        assert [(f.stmt, f.message_ids) for f in mem.facts()] == [("Maya's favourite beverage is kombucha", (b,))]
    with raw(path) as con:
        assert con.execute("SELECT slot FROM core_facts").fetchall() == [("favourite beverage",)]
    assert "drink" not in everything(path)


def test_the_log_of_a_merge_worded_beside_the_forgotten_message_loses_its_words(tmp_path, embedder, llm_server):
    """B's candidate, worded by the LLM that read A beside B, merged into a fact from Z: the fact
    keeps Z's words, and the log row of the merge (citing B, its summary the candidate's wording)
    keeps none of A's after A is forgotten."""
    def reply(req: dict[str, Any]) -> str:
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if system == prompts.EXTRACT_SYSTEM:
            if "I love kombucha" in user:
                return _fact("Preference", "Maya loves the kombucha of the zorblax bakery", (2,))
            return _fact("Preference", "Maya loves kombucha") if "every single day" in user else '{"facts": []}'
        return _other_steps(system, '{"op": "merge", "target": 1}', "Drinks")

    llm_server.default = reply
    path = tmp_path / "m.db"
    with _open(path, embedder, llm_server, PLAIN, "inline") as mem:
        z = mem.add("Maya", "Kombucha every single day for me.", at=T - timedelta(days=20))
        mem.add("Leo", "Did you see the football match?", at=T - timedelta(days=10))
        a = mem.add("Maya", "The zorblax bakery makes the kombucha I adore.", at=T)
        b = mem.add("Maya", "I love kombucha.", at=T + timedelta(minutes=5))
        mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3))
        assert [(f.stmt, f.message_ids) for f in mem.facts()] == [("Maya loves kombucha", (z, b))]
        assert "zorblax" in everything(path)
        mem.forget(message_id=a)
        assert [(f.stmt, f.message_ids) for f in mem.facts()] == [("Maya loves kombucha", (z, b))]
    assert "zorblax" not in everything(path)


def _forget_while_deciding(tmp_path: Path, embedder: Any, llm_server: Any, blocked: str) -> Path:
    """A (Quillfeather) and B share a segment; its ``blocked`` step (close: the title; extract: the
    CoreFact candidates) is deciding, waiting on the LLM, when A is forgotten."""
    asked, release = threading.Event(), threading.Event()

    def reply(req: dict[str, Any]) -> str:  # as an LLM would: from A's words when it is shown them
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if system == blocked and not asked.is_set():
            asked.set()
            release.wait(30)
        if system == prompts.TITLE_SYSTEM:
            return '{"title": "Quillfeather bakery visit"}' if "Quillfeather" in user else '{"title": "Kombucha"}'
        if system == prompts.EXTRACT_SYSTEM:
            return _fact("Preference", "Maya loves the kombucha of Quillfeather bakery", (2,)) \
                if "Quillfeather" in user else _fact("Preference", "Maya loves kombucha")
        return _other_steps(system, '{"op": "add", "target": null}')

    llm_server.default = reply
    return _forget_while_waiting(tmp_path, embedder, llm_server, asked, release, [
        "Quillfeather bakery makes the kombucha I adore.", "I love kombucha."])[0]


def _llm_memory(path: Path, embedder: Any, llm_server: Any) -> Memory:
    """Processing only when asked, default thresholds, an LLM that may take a minute."""
    return _open(path, embedder, llm_server, Config(llm_retries=0, llm_timeout_s=60), "manual")


def _forget_while_waiting(tmp_path: Path, embedder: Any, llm_server: Any, asked: threading.Event,
                          release: threading.Event, maya: list[str]) -> tuple[Path, list[int]]:
    """Maya says ``maya`` (A, then B five minutes later), Leo something else three days on; another
    thread processes the file until a step waits on the LLM (the server sets ``asked``, then waits
    for ``release``), A is forgotten meanwhile, and the step is let go: processing ends without an
    error, and the file is processed once more. Returns the file and the three message ids."""
    path = tmp_path / "m.db"
    with _llm_memory(path, embedder, llm_server) as mem:
        ids = [mem.add("Maya", text, at=T + timedelta(minutes=5 * i)) for i, text in enumerate(maya)]
        ids.append(mem.add("Leo", "Did you see the football match?", at=T + timedelta(days=3)))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with _llm_memory(path, embedder, llm_server) as other:
                other.process()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    worker = threading.Thread(target=work)
    worker.start()
    assert asked.wait(60)  # a step is deciding
    with _llm_memory(path, embedder, llm_server) as mem:
        mem.forget(message_id=ids[0])
    release.set()
    worker.join(60)
    assert errors == []
    with _llm_memory(path, embedder, llm_server) as mem:
        mem.process()
    return path, ids


def test_an_extract_deciding_while_a_message_is_forgotten_writes_none_of_its_words(tmp_path, embedder, llm_server):
    """The extract step read the segment with A; the forget makes it stale: decided again without A."""
    assert "quillfeather" not in everything(_forget_while_deciding(tmp_path, embedder, llm_server,
                                                                   prompts.EXTRACT_SYSTEM))


def test_a_title_deciding_while_a_message_is_forgotten_is_not_written(tmp_path, embedder, llm_server):
    """The close step read the segment's lines with A; the forget makes it stale: titled again."""
    assert "quillfeather" not in everything(_forget_while_deciding(tmp_path, embedder, llm_server,
                                                                   prompts.TITLE_SYSTEM))
