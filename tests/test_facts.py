"""Dual-Track Fact Memory: CoreFacts (Add/Update/Merge/Supersede with history), ActiveFact
scores and promotion, forget."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder
from memsif_lite import Config, InvalidInputError, Memory, NotFoundError, prompts
from memsif_lite.active_facts import Evidence, is_promoted, query_score, source_score
from memsif_lite.matching import coherence

LEVELS = (0.0, 1.0)
T0 = datetime(2024, 1, 1, 9)


def unit_vectors(draw_list):
    arr = np.asarray(draw_list, dtype=np.float64)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return arr / np.where(norms == 0, 1, norms)


vectors_st = st.lists(st.lists(st.floats(-1, 1, allow_nan=False), min_size=4, max_size=4).filter(
    lambda v: sum(x * x for x in v) > 1e-3), min_size=1, max_size=6)


@given(n=st.integers(1, 50), vecs=vectors_st, levels=st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (0.796, 0.881)]))
def test_scores_lie_in_unit_interval_and_singletons_never_promote(n, vecs, levels):
    v = unit_vectors(vecs)
    for score in (source_score(n, v, levels), query_score(n, v, levels)):
        assert 0.0 <= score < 1.0
    assert source_score(1, v, levels) == 0.0 and query_score(1, v, levels) == 0.0
    assert not is_promoted(source_score(1, v, levels), 1.0, 0.45, 0.45)
    assert not is_promoted(1.0, query_score(1, v, levels), 0.45, 0.45)


@given(vecs=vectors_st, perm=st.randoms())
def test_coherence_symmetric_and_one_for_identical(vecs, perm):
    v = unit_vectors(vecs)
    order = list(range(len(v)))
    perm.shuffle(order)
    assert coherence(v, LEVELS) == pytest.approx(coherence(v[order], LEVELS))
    assert coherence(np.stack([v[0]] * 3), LEVELS) == pytest.approx(1.0)
    assert coherence(v[:1], LEVELS) == 1.0


@given(s=st.floats(0, 0.999), q=st.floats(0, 0.999), ts=st.floats(0.01, 1), tq=st.floats(0.01, 1))
def test_promotion_iff_both_scores_pass(s, q, ts, tq):
    assert is_promoted(s, q, ts, tq) == (s >= ts and q >= tq)


def _store_with_messages(d, n=6, cfg=None):
    mem = Memory(Path(d) / "m.db", embedder=FakeEmbedder(), config=cfg or Config(sem_low=0.0, sem_high=1.0))
    mem.add_many([{"speaker": "Ana", "text": f"topic{i} unrelated words{i} here{i}", "at": T0 + timedelta(hours=i * 10)}
                  for i in range(n)])
    return mem


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["where does ana swim", "ana swimming pool", "pool times ana"]),
                                st.lists(st.integers(1, 6), min_size=1, max_size=3)), min_size=1, max_size=6))
def test_duplicate_queries_and_sources_never_change_scores(steps):
    with tempfile.TemporaryDirectory() as d:
        mem = _store_with_messages(d)
        for query, mids in steps:
            mem.accumulate(query, [Evidence("Ana swims at the city pool", "Ana", tuple(mids))])
        [before] = mem.candidates()
        query, mids = steps[-1]
        mem.accumulate(query, [Evidence("Ana swims at the city pool", "Ana", tuple(mids))])  # the same again
        [after] = mem.candidates()
        assert (after.score_src, after.score_qry) == pytest.approx((before.score_src, before.score_qry))
        assert after.queries == before.queries and after.message_ids == before.message_ids
        promoted = len(mem.active_facts()) == 1
        assert promoted == is_promoted(before.score_src, before.score_qry, mem.config.theta_s, mem.config.theta_q)
        mem.close()


def test_promotion_needs_recurring_demand_and_several_sources(tmp_path):
    mem = _store_with_messages(tmp_path, cfg=Config(sem_low=0.0, sem_high=1.0, theta_s=0.3, theta_q=0.3))
    stmt = "Ana swims at the city pool"
    qs = ["where does ana swim", "which pool does ana swim in", "ana swimming pool where"]
    for bad in (("5",), (1.0,), (True,), 5):
        with pytest.raises(InvalidInputError):
            Evidence(stmt, "Ana", bad)  # type: ignore[arg-type]
    with pytest.raises(NotFoundError, match="999"):  # evidence naming a message not stored: nothing is kept
        mem.accumulate(qs[0], [Evidence(stmt, "Ana", (1, 999)), Evidence(stmt, "Ana", (3,))])
    assert mem.candidates() == []
    mem.accumulate(qs[0], [Evidence(stmt, "Ana", (1,)), Evidence(stmt, "Ana", (3,))])
    assert mem.stats()["active_facts"] == 0  # two sources but one query
    mem.accumulate(qs[1], [Evidence(stmt, "Ana", (5,))])
    [cluster] = mem.candidates()
    assert cluster.queries == tuple(qs[:2]) and cluster.message_ids == (1, 3, 5)
    assert cluster.score_src > 0.3 and cluster.score_qry > 0.3
    [fact] = mem.active_facts()
    assert fact.stmt == stmt and fact.subject == "ana" and fact.message_ids == (1, 3, 5)
    mem.close()
    with Memory(tmp_path / "m.db", embedder=FakeEmbedder(), config=Config(sem_low=0.0, sem_high=1.0)) as again:
        assert [f.stmt for f in again.active_facts()] == [stmt]  # persists across reopenings


FACTS_CONFIG = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.99, tau_split=0.98)


def _facts_memory(path, **kw):
    return Memory(path, embedder=FakeEmbedder(), config=FACTS_CONFIG, **kw)


def test_offline_core_facts_supersede_keeps_history(memory):
    mem = memory(config=FACTS_CONFIG)
    mem.add("Maya", "I live in Lisbon and I love tiled facades.", at=T0)
    mem.add("Leo", "Nice, my sister Clara lives there too.", at=T0 + timedelta(days=1))
    mem.add("Maya", "Big news: I moved to Porto last week!", at=T0 + timedelta(days=60))
    mem.add("Leo", "Porto suits you.", at=T0 + timedelta(days=61))  # closes the previous segment
    current = {f.stmt for f in mem.facts()}
    assert {"Maya lives in Porto", "Maya loves tiled facades", "Leo has a sister named Clara"} <= current
    assert "Maya lives in Lisbon" not in current
    [old] = [f for f in mem.facts(subject="maya", include_superseded=True) if f.stmt == "Maya lives in Lisbon"]
    [new] = mem.facts(subject="MAYA", type="identity")
    # "last week", said on Fri 1 Mar 2024, is the week of Mon 19 Feb: Porto from then, Lisbon until then
    assert new.valid_from == datetime(2024, 2, 19, 9)
    assert old.superseded_by == new.id and old.valid_to == datetime(2024, 2, 19, 9) and old.message_ids == (1,)
    assert [e.op for e in mem.fact_history(old.id)] == ["add", "superseded"]
    assert [e.op for e in mem.fact_history(new.id)] == ["supersede"]
    assert mem.stats()["superseded_facts"] == 1
    with pytest.raises(NotFoundError):
        mem.fact_history(999)


@pytest.mark.parametrize("forgotten", [1, 2])
def test_exact_duplicates_merge_provenance_and_forgetting_either_undoes_its_part(memory, forgotten):
    mem = memory(config=FACTS_CONFIG)
    mem.add("Maya", "I love ceramics.", at=T0)
    mem.add("Maya", "As you know, I love ceramics.", at=T0 + timedelta(days=3))
    mem.add("Leo", "ok", at=T0 + timedelta(days=4))
    [f] = mem.facts(type="Preference")
    assert f.stmt == "Maya loves ceramics" and f.message_ids == (1, 2) and f.valid_from == T0
    assert [e.op for e in mem.fact_history(f.id)] == ["add", "merge"]
    mem.forget(message_id=forgotten)  # the merge it made goes with it; nothing stays dated by it
    [f] = mem.facts(type="Preference")
    kept = 3 - forgotten
    assert f.message_ids == (kept,) and f.valid_from == T0 + timedelta(days=3 * (kept - 1))
    assert [e.op for e in mem.fact_history(f.id)] == (["add"] if forgotten == 2 else ["add", "merge"])


@pytest.mark.parametrize("real_model", [False, True])
def test_an_exact_duplicate_merges_however_many_facts_of_its_type_the_subject_holds(memory, embedder, real_model):
    """The chooser is shown a bounded list of the subject's facts; the most similar ones come
    first, so that the exact duplicate is among them when the subject already holds more facts of
    the type than the list shows (it was cut off after the ten newest of the type: a lifetime of
    "I love ..." kept every repeat as a new fact)."""
    mem = memory(config=FACTS_CONFIG, **({"embedder": embedder} if real_model else {}))
    loves = ["ceramics", "tiled facades", "jazz", "long walks", "green tea", "old maps", "chess", "sailing",
             "poetry", "bread baking", "birdwatching", "cycling"]
    mem.add_many([{"speaker": "Maya", "text": f"I love {w}.", "at": T0 + timedelta(days=3 * i)}
                  for i, w in enumerate(loves)]
                 + [{"speaker": "Maya", "text": "As you know, I love ceramics.", "at": T0 + timedelta(days=60)},
                    {"speaker": "Leo", "text": "ok", "at": T0 + timedelta(days=64)}])
    prefs = mem.facts(type="Preference")
    assert sorted(f.stmt for f in prefs) == sorted(f"Maya loves {w}" for w in loves)  # twelve, no copy
    [f] = [f for f in prefs if f.stmt == "Maya loves ceramics"]
    assert f.message_ids == (1, 13) and [e.op for e in mem.fact_history(f.id)] == ["add", "merge"]


def test_offline_extractor_does_not_invent(memory):
    mem = memory(config=FACTS_CONFIG)
    mem.add_many([{"speaker": "Ana", "text": t, "at": T0 + timedelta(days=i)} for i, t in enumerate([
        "Do you live in Berlin?", "I love it!", "What do you think about that?", "Hmm, maybe.", "ok"])])
    assert mem.facts(include_superseded=True) == []


def test_an_assistant_or_system_speaker_gets_no_core_facts(memory):
    """CoreFacts are about people: the first-person rules read every speaker's "I ...", and an
    assistant's small talk ("I love museums too!") or a system prompt made facts about them."""
    mem = memory(config=FACTS_CONFIG)
    mem.add_many([{"speaker": sp, "text": t, "at": T0 + timedelta(minutes=i)} for i, (sp, t) in enumerate([
        ("Maya", "I love jazz."), ("assistant", "I love museums too! I live in the cloud."),
        ("System", "I want you to answer briefly. I am a helpful assistant."),
        (" ASSISTANT ", "I'm allergic to nothing, I live in Porto."), ("ｔｏｏｌ", "I love rain."),
        ("developer", "I live in Lisbon."), ("model", "I live in a data centre."), ("Ai", "I love long walks."),
        ("Maya", "I live in Porto.")])])
    mem.add("Maya", "bye", at=T0 + timedelta(days=2))  # the segment closes
    mem.process()
    # (Gemini's "model" is a machine's role; "Ai" is a person's given name, and LangChain's "ai" type with it)
    assert sorted(f.stmt for f in mem.facts(include_superseded=True)) == ["Ai loves long walks", "Maya lives in Porto",
                                                                          "Maya loves jazz"]


def test_the_user_cannot_be_stored_under_a_machine_role_name():
    """Every CoreFact about the user would be dropped: the integrations refuse it up front."""
    from memsif_lite.integrations import Speakers

    assert Speakers(user="Maya", assistant="Bot").user == "Maya"
    for name in ("assistant", "System", " TOOL ", "ａｓｓｉｓｔａｎｔ"):
        with pytest.raises(InvalidInputError, match="cannot be stored as"):
            Speakers(user=name, assistant="Bot", system="Rules")


def test_an_llm_fact_about_the_assistant_is_not_written(memory, llm_server):
    """The same for a model's candidates: one about the assistant is dropped, the user's fact from
    the assistant's line is kept."""
    replies = ['{"facts": []}', json.dumps({"facts": [  # each message is a segment of its own here
        {"subject": "assistant", "type": "Preference", "stmt": "assistant loves museums", "lines": [1]},
        {"subject": "Maya", "type": "Event", "stmt": "Maya has a flight to Porto on 2024-01-05", "lines": [1]}]})]
    llm_server.route({
        prompts.BOUNDARY_SYSTEM: '{"continues": false}',
        prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
        prompts.TITLE_SYSTEM: '{"title": "Trip"}',
        prompts.EXTRACT_SYSTEM: lambda: replies.pop(0) if replies else '{"facts": []}',
        prompts.OPERATION_SYSTEM: '{"op": "add", "target": null}',
    })
    mem = memory(config=Config(sem_low=0.0, sem_high=1.0, tau_split=0.98, tau_merge=0.99, llm_retries=0),
                 llm="openai/test-model", process="inline", llm_kwargs=llm_server.llm_kwargs())
    mem.add("Maya", "Is my flight booked?", at=T0)
    mem.add("assistant", "Yes: your flight to Porto is on Friday. I love museums, you will too!",
            at=T0 + timedelta(minutes=1))
    mem.add("Maya", "thanks", at=T0 + timedelta(days=2))
    mem.process()
    assert [f.stmt for f in mem.facts()] == ["Maya has a flight to Porto on 2024-01-05"]


def test_forget_message_removes_everything_derived_only_from_it(db):
    with _facts_memory(db) as mem:
        mem.add("Maya", "I live in Lisbon.", at=T0)
        a = mem.add("Maya", "I moved to Porto!", at=T0 + timedelta(days=30))
        b = mem.add("Maya", "I love ceramics.", at=T0 + timedelta(days=31))
        mem.add("Maya", "I love ceramics, really.", at=T0 + timedelta(days=32))
        mem.add("Leo", "ok", at=T0 + timedelta(days=40))
        mem.accumulate("where does maya live", [Evidence("Maya moved to Porto", "Maya", (a,))])
        mem.forget(message_id=a)
        stmts = {f.stmt for f in mem.facts()}
        assert "Maya lives in Porto" not in stmts and "Maya lives in Lisbon" in stmts  # validity restored
        assert mem.candidates() == []
        mem.forget(message_id=b)
        [f] = mem.facts(type="Preference")
        assert f.message_ids == (4,)  # still supported by the other message
        assert all(m.id not in (a, b) for m in mem.messages())
        assert mem.search("Porto", k=5)[0].id != a
        segs = mem.segments()
        assert sorted(m for s in segs for m in s.message_ids) == [1, 4, 5]
        for f in mem.facts(include_superseded=True):
            assert f.message_ids  # no fact whose every source is gone
        fid = mem.facts(type="Preference")[0].id
        mem.forget(fact_id=fid)
        assert mem.facts(type="Preference") == []
        assert [m.id for m in mem.messages()] == [1, 4, 5]
        with pytest.raises(InvalidInputError):
            mem.forget()
        with pytest.raises(NotFoundError):
            mem.forget(message_id=a)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(order=st.permutations(list(range(6))), k=st.integers(1, 6))
def test_forget_never_leaves_a_fact_without_sources(order, k):
    texts = ["I live in Lisbon.", "I moved to Porto!", "I love ceramics.", "I love ceramics.", "My dog Pixel is sweet.",
             "I adopted a cat named Mochi."]
    with tempfile.TemporaryDirectory() as d:
        with _facts_memory(Path(d) / "m.db") as mem:
            ids = mem.add_many([{"speaker": "Maya", "text": t, "at": T0 + timedelta(days=i)}
                                for i, t in enumerate(texts)])
            mem.add("Leo", "ok", at=T0 + timedelta(days=9))
            for i in order[:k]:
                mem.forget(message_id=ids[i])
            alive = {m.id for m in mem.messages()}
            for f in mem.facts(include_superseded=True):
                assert f.message_ids and set(f.message_ids) <= alive
                if f.superseded_by is not None:
                    assert f.superseded_by in {g.id for g in mem.facts(include_superseded=True)}


def test_copies_an_older_release_kept_are_shown_once_in_a_context(memory, embedder):
    """A file an older memsif wrote may hold one fact many times (it added a repeat as a new fact
    once a subject held ten facts of its type): a context shows it once, and the places the
    copies would have taken go to the next facts."""
    mem = memory(embedder=embedder, config=Config(tau_merge=0.99, tau_split=0.98))
    mem.add_many([{"speaker": "Maya", "text": t, "at": T0 + timedelta(days=i)} for i, t in enumerate(
        ["I love ceramics.", "I love tiled facades.", "I love jazz.", "ok"])])
    [ceramics] = [f for f in mem.facts() if f.stmt == "Maya loves ceramics"]
    db = mem._db
    vec = embedder.embed(["Maya loves ceramics"], kind="passage")[0]
    with db.write():  # what the older release wrote: the same fact, added again and again
        for i in range(12):
            db.facts.insert(subject="maya" if i % 2 else "Maya", ftype="Preference", stmt="Maya loves ceramics!",
                            slot=None, valid_from=f"2024-0{1 + i % 9}-01T00:00:00", now="2024-12-01T00:00:00",
                            origin="rule", vector=vec, message_ids=list(ceramics.message_ids))
    assert len(mem.facts()) == 15
    for ctx in (mem.context("What does Maya love?", budget_tokens=800),
                mem.context("What does Maya love?", budget_tokens=800, speakers=["Maya"])):  # filtered: vec0's KNN
        shown = [f.stmt.rstrip("!") for f in ctx.facts if f.kind == "core"]
        assert sorted(shown) == ["Maya loves ceramics", "Maya loves jazz", "Maya loves tiled facades"]
        assert ctx.text.lower().count("maya loves ceramics") == 1


def test_a_stated_move_ends_every_earlier_home_however_many_facts_of_its_type_the_subject_holds(memory):
    """"I moved to Porto" ends every earlier value of the slot, not only those among the newest
    twenty facts of its type (a subject with many Identity facts kept an old home current)."""
    mem = memory(config=FACTS_CONFIG)
    said = ["I live in Lisbon.", "I live in Sintra."] + [f"I'm originally from Town{chr(65 + i)}." for i in range(22)]
    mem.add_many([{"speaker": "Maya", "text": t, "at": T0 + timedelta(days=i)} for i, t in enumerate(said)]
                 + [{"speaker": "Maya", "text": "Big news: I moved to Porto last week!", "at": T0 + timedelta(days=90)},
                    {"speaker": "Leo", "text": "Porto suits you.", "at": T0 + timedelta(days=91)}])
    homes = {f.stmt for f in mem.facts(type="Identity") if " lives in " in f.stmt}
    assert homes == {"Maya lives in Porto"}
    ended = {f.stmt for f in mem.facts(include_superseded=True) if f.superseded_by is not None}
    assert ended == {"Maya lives in Lisbon", "Maya lives in Sintra"}


def test_a_value_that_ended_and_holds_again_is_shown_current(memory, embedder):
    """Lisbon, then Porto, then back to Lisbon: two Lisbon facts, one ended and one current; a
    context shows the current one (the same statement is not a copy when one of them ended)."""
    mem = memory(embedder=embedder, config=Config(tau_merge=0.99, tau_split=0.98))
    mem.add_many([{"speaker": "Maya", "text": t, "at": T0 + timedelta(days=d)} for d, t in [
        (0, "I live in Lisbon."), (1, "ok"), (60, "Big news: I moved to Porto!"), (61, "ok"),
        (150, "Big news: I moved back to Lisbon!"), (151, "ok"), (152, "Leo here, welcome back.")]])
    lisbon = [f for f in mem.facts(include_superseded=True) if f.stmt == "Maya lives in Lisbon"]
    assert sorted(f.valid_to is None for f in lisbon) == [False, True]
    ctx = mem.context("Where does Maya live?", budget_tokens=800)
    shown = [(f.stmt, f.valid_to is None) for f in ctx.facts if f.kind == "core"]
    assert ("Maya lives in Lisbon", True) in shown and ("Maya lives in Lisbon", False) in shown


def test_the_chooser_sees_a_restated_fact_and_the_slots_values_however_far_their_vectors_lie(memory):
    """``related`` for a subject holding twenty-five facts of a type, all nearer the candidate than
    the two that matter: the one it states again (in other case, its vector elsewhere) and its
    slot's earlier value (the oldest fact, its vector elsewhere) are both listed."""
    from memsif_lite.core_facts import Candidate, CoreFactWriter, OfflineOperationChooser, OfflineFactExtractor

    mem = memory(config=FACTS_CONFIG)
    mem.add("Maya", "hello", at=T0)
    db, dim = mem._db, FakeEmbedder().dim
    near, far, farther = (np.eye(dim, dtype=np.float32)[i] for i in range(3))
    with db.write():
        def fact(stmt, slot, vec, day):
            return db.facts.insert(subject="Maya", ftype="Identity", stmt=stmt, slot=slot, now="2024-12-01T00:00:00",
                                   valid_from=f"2024-01-{day:02d}T00:00:00", origin="rule", vector=vec, message_ids=[1])
        acme = fact("Maya works at Acme", "works at", far, 1)
        said = fact("Maya loves Jazz Nights", None, farther, 2)
        for i in range(25):
            fact(f"Maya is from Town{i}", "is from", near, 3)
    writer = CoreFactWriter(db, extractor=OfflineFactExtractor(FACTS_CONFIG.fact_schema),
                            chooser=OfflineOperationChooser(),
                            embed_passages=lambda texts: np.stack([near] * len(texts)))
    with db.read():
        move = Candidate("Maya", "Identity", "Maya works at Beta", (1,), "2024-02-01T00:00:00", "works at",
                         change=True)
        assert acme in [r.id for r in writer.related(move, near)]
        again = Candidate("maya", "Identity", "Maya loves jazz nights.", (1,), "2024-02-01T00:00:00")
        assert writer.related(again, near)[0].id == said
        assert writer.decide(again).op.name == "merge" and writer.decide(again).op.target == said


def test_moving_back_ends_every_other_home_and_starts_the_old_one_again(memory):
    """"I live in Lisbon", "I live in Porto" (a refinement: both current), then "I moved back to
    Lisbon": not a merge into the current Lisbon (Porto would stay) but a Supersede: Lisbon holds
    again from the move, both earlier homes end; forgetting the move puts them back."""
    mem = memory(config=FACTS_CONFIG)
    mem.add_many([{"speaker": "Maya", "text": t, "at": T0 + timedelta(days=d)} for d, t in [
        (0, "I live in Lisbon."), (30, "I live in Porto."), (150, "Big news: I moved back to Lisbon!"),
        (151, "ok")]] + [{"speaker": "Leo", "text": "Welcome back.", "at": T0 + timedelta(days=152)}])
    homes = [f for f in mem.facts(include_superseded=True) if " lives in " in f.stmt]
    current = [f for f in homes if f.valid_to is None]
    assert [f.stmt for f in current] == ["Maya lives in Lisbon"] and current[0].message_ids == (3,)
    assert sorted(f.stmt for f in homes if f.valid_to is not None) == ["Maya lives in Lisbon", "Maya lives in Porto"]
    mem.forget(message_id=3)
    assert sorted(f.stmt for f in mem.facts() if " lives in " in f.stmt) == ["Maya lives in Lisbon",
                                                                             "Maya lives in Porto"]


@pytest.mark.parametrize("case", ["the held Lisbon has no slot", "the held Lisbon is dated after the move"])
def test_a_restated_change_never_leaves_two_current_copies(memory, case):
    """A move back to a value held already (one a model extracted, without a slot; or one dated
    after the move, added out of order) leaves that value current once."""
    from memsif_lite.core_facts import Candidate, CoreFactWriter, OfflineFactExtractor, OfflineOperationChooser

    mem = memory(config=FACTS_CONFIG)
    mem.add("Maya", "hello", at=T0)
    db, emb = mem._db, FakeEmbedder()
    late = case.endswith("after the move")
    with db.write():
        for stmt, slot, when in [("Maya lives in Porto", "lives in", "2024-01-30"),
                                 ("Maya lives in Lisbon", "lives in" if late else None,
                                  "2024-07-01" if late else "2024-01-01")]:
            db.facts.insert(subject="Maya", ftype="Identity", stmt=stmt, slot=slot, now="2024-12-01T00:00:00",
                            valid_from=f"{when}T00:00:00", origin="rule" if slot else "llm",
                            vector=emb.embed([stmt], kind="passage")[0], message_ids=[1])
    writer = CoreFactWriter(db, extractor=OfflineFactExtractor(FACTS_CONFIG.fact_schema),
                            chooser=OfflineOperationChooser(),
                            embed_passages=lambda texts: emb.embed(list(texts), kind="passage"))
    move = Candidate("Maya", "Identity", "Maya lives in Lisbon", (1,), "2024-05-30T00:00:00", "lives in", change=True)
    with db.read():
        decision = writer.decide(move)
    with db.write():
        writer.apply(move, decision)
    current = [f.stmt for f in mem.facts() if " lives in " in f.stmt]
    assert current.count("Maya lives in Lisbon") == 1, current
    assert current == ["Maya lives in Lisbon"] or late  # moved in May: Porto ends (out of order: a merge)


@pytest.mark.parametrize("said, current, ended", [
    (["I work as a nurse at Charite.", "I started a new job at UKE hospital!"],
     {"Sam works at UKE hospital"}, {"Sam works as a nurse at Charite"}),
    (["I work as a nurse at the Charite hospital.", "I started a new job at UKE hospital!"],
     {"Sam works at UKE hospital"}, {"Sam works as a nurse at the Charite hospital"}),
    (["I work as a teacher for kids.", "I started a new job at UKE hospital!"],  # no workplace: stays
     {"Sam works at UKE hospital", "Sam works as a teacher for kids"}, set()),
    (["I work at Charite.", "I started a new job at UKE hospital!"],
     {"Sam works at UKE hospital"}, {"Sam works at Charite"}),
    (["I work as a nurse at Charite.", "I work at UKE hospital.", "I started a new job at UKE hospital!"],
     {"Sam works at UKE hospital"}, {"Sam works as a nurse at Charite"}),  # stated again as a change
    (["I work at Siemens.", "I got promoted to team lead at the Berlin office."],  # a promotion: the
     {"Sam works at Siemens", "Sam works as team lead at the Berlin office"}, set()),  # workplace stays
    (["I work as a nurse at Charite.", "I quit my job at Siemens."],  # a quit names its own place
     {"Sam works as a nurse at Charite"}, set()),
])
def test_a_new_workplace_ends_a_role_stated_with_its_workplace(memory, said, current, ended):
    """Found by a new user (stop 40): "I work as a nurse at Charite", then "I started a new job at
    UKE hospital", left the nurse at Charite current beside the new job. A role stated with its
    workplace holds a value of the workplace's slot too — one way: a new workplace ends it; a
    promotion somewhere does not end the workplace, a quit naming a place does not end a role at
    another (a cold review's cases)."""
    mem = memory(config=FACTS_CONFIG)
    for i, text in enumerate(said):
        mem.add("Sam", text, at=T0 + timedelta(days=40 * i))
        mem.add("Sam", "ok", at=T0 + timedelta(days=40 * i + 1))
    mem.add("Sam", "bye", at=T0 + timedelta(days=400))  # the segment closes
    mem.process()
    facts = {f.stmt: f for f in mem.facts(include_superseded=True) if f.stmt.startswith("Sam works")}
    assert {s for s, f in facts.items() if f.valid_to is None} == current, facts
    assert {s for s, f in facts.items() if f.valid_to is not None} == ended, facts
