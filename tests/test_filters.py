"""Filters (speaker, session, time) on search, context, ask, facts and messages: applied inside the
KNN / full-text queries, so a filtered result is the unfiltered ranking restricted to the matching
messages, and never holds a non-matching one."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from fakes import FakeEmbedder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsif_lite import InvalidInputError, Memory
from memsif_lite.filters import MessageFilter
from memsif_lite.retrieval import rrf, top_scored

SPEAKERS = ["Ana", "Bo", "Cy"]
WORDS = ["violin", "lisbon", "garden", "puppy", "coffee", "marathon", "piano", "market", "river", "castle"]
T0 = datetime(2024, 5, 1, 9, 0)
N = 45


def _text(i: int) -> str:
    # distinct lengths (no BM25 ties), a few fact-shaped sentences for the offline extractor
    words = [WORDS[(i * 7 + j) % len(WORDS)] for j in range(i % 9 + 1)] + [f"w{i}"] * (i // 9 + 1)
    head = f"I live in {WORDS[i % 4].title()}. " if i % 5 == 0 else ""
    return head + " ".join(words) + "."


@pytest.fixture(scope="module")
def mem(tmp_path_factory):
    m = Memory(tmp_path_factory.mktemp("filters") / "f.db", embedder=FakeEmbedder())
    m.add_many([{"speaker": SPEAKERS[i % 3], "text": _text(i), "session": str(i // 15 + 1),
                 "at": T0 + timedelta(hours=7 * i)} for i in range(N)])
    yield m
    m.close()


def _matches(msg, f: MessageFilter | None) -> bool:
    if f is None:
        return True
    at = msg.at.isoformat()
    return ((not f.speakers or msg.speaker.lower() in {s.lower() for s in f.speakers})
            and (not f.sessions or msg.session in f.sessions)
            and (f.since is None or at >= f.since) and (f.until is None or at <= f.until)
            and (f.as_of is None or at <= f.as_of))


filters_st = st.builds(
    dict,
    speakers=st.one_of(st.none(), st.sampled_from(SPEAKERS + ["ana", "Nobody"]),
                       st.lists(st.sampled_from(SPEAKERS), min_size=1, max_size=3)),
    sessions=st.one_of(st.none(), st.sampled_from(["1", "2", "3", 2, "9"]),
                       st.lists(st.sampled_from(["1", "2", "3"]), min_size=1, max_size=2)),
    since=st.one_of(st.none(), st.integers(0, N * 7).map(lambda h: T0 + timedelta(hours=h))),
    until=st.one_of(st.none(), st.integers(0, N * 7).map(lambda h: (T0 + timedelta(hours=h)).isoformat())),
    as_of=st.one_of(st.none(), st.integers(0, N * 7).map(lambda h: T0 + timedelta(hours=h))),
).filter(lambda d: d["since"] is None or d["until"] is None or d["since"].isoformat() <= d["until"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=filters_st, query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join))
def test_filtered_rankings_are_the_unfiltered_ones_restricted(mem, kw, query):
    flt = MessageFilter.build(**kw)
    everything = {m.id: m for m in mem.messages()}
    matching = {i for i, m in everything.items() if _matches(m, flt)}
    r = mem._p.retriever  # the two rankings the fused search is made of
    qvec = r.embed_query(query)
    for full, part in ((r.dense(qvec, N), r.dense(qvec, N, flt)), (r.bm25(query, N), r.bm25(query, N, flt))):
        assert part == [m for m in full if m in matching]
    hits = mem.search(query, k=N, **kw)
    assert {h.id for h in hits} == matching  # every matching message is found, nothing else
    fused = rrf(r.dense(qvec, 50, flt), r.bm25(query, 50, flt))
    assert [h.id for h in hits] == sorted(fused, key=lambda m: (-fused[m], m))
    assert [m.id for m in mem.messages(**kw)] == sorted(matching)
    units = {"segment": {s.id: set(s.message_ids) for s in mem.segments()},
             "trajectory": {t.id: set(t.message_ids) for t in mem.trajectories()}}
    for level in ("segment", "trajectory"):
        for h in mem.search(query, k=10, level=level, **kw):
            assert h.message_ids and set(h.message_ids) <= matching
        # units holding a matching message, in the unfiltered order (the cache's walk, and vec0's KNN)
        holding = [u for u in r._unit_dense(level, qvec, 1000, None) if units[level].get(u, set()) & matching]
        for depth in (1, 3, 40, 300):  # 300: more than WALK, the units are listed first
            assert r._unit_dense(level, qvec, depth, flt) == holding[:depth]
            if flt is not None:
                assert mem._db.filters._unit_knn(level, qvec, depth, flt) == holding[:depth]
    ctx = mem.context(query, budget_tokens=3000, **kw)
    assert set(ctx.message_ids) <= matching
    for f in ctx.facts:
        assert not flt or not flt.speakers or f.subject.lower() in {s.lower() for s in flt.speakers}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kw=filters_st)
def test_filtered_facts_are_the_facts_whose_subject_and_sources_match(mem, kw):
    flt = MessageFilter.build(**kw)
    everything = {m.id: m for m in mem.messages()}
    facts = mem.facts(include_superseded=True)
    assert facts, "the fixture should yield CoreFacts"
    no_speaker = MessageFilter(sessions=flt.sessions, since=flt.since, until=flt.until) if flt else None
    expected = [f for f in facts if flt is None or (
        (not flt.speakers or f.subject.lower() in {s.lower() for s in flt.speakers})
        and any(_matches(everything[m], no_speaker) for m in f.message_ids))]
    if flt is not None and flt.as_of is not None:  # valid then, and shown as it stood then
        when = datetime.fromisoformat(flt.as_of)
        expected = [dataclasses.replace(f, valid_to=None, superseded_by=None) for f in expected
                    if f.valid_from <= when and (f.valid_to is None or f.valid_to > when)]
    assert mem.facts(include_superseded=True, **kw) == expected


def test_a_narrow_filter_still_fills_k(mem):
    """Post-filtering a top-k would return nothing here: Cy's session-3 messages are not among the
    best unfiltered hits, yet the filtered search returns k of them."""
    cy3 = [m.id for m in mem.messages(speakers="Cy", sessions=3)]
    top = [h.id for h in mem.search("violin lisbon", k=5)]
    hits = mem.search("violin lisbon", k=5, speakers="Cy", sessions=3)
    assert len(hits) == 5 and {h.id for h in hits} <= set(cy3) and not set(top) & {h.id for h in hits}


def test_context_and_ask_evidence_only_from_matching_messages(mem):
    ctx = mem.context("Where does Ana live?", budget_tokens=2000, speakers="Bo")
    assert ctx.evidence and all(e.speaker == "Bo" for e in ctx.evidence)
    a = mem.ask("Where does Ana live?", until="2024-05-03")  # a date alone: the end of that day
    assert a.evidence and all(e.at <= datetime(2024, 5, 3, 23, 59, 59, 999999) for e in a.evidence)


def test_messages_pages(mem):
    everything = [m.id for m in mem.messages()]
    assert [m.id for m in mem.messages(limit=10, offset=5)] == everything[5:15]
    assert mem.messages(limit=0) == [] and mem.messages(offset=N) == []


@pytest.mark.parametrize("kw", [
    {"speakers": 3}, {"speakers": [""]}, {"speakers": [None]}, {"sessions": [1.5]}, {"since": "soon"},
    {"since": "2024-05-02", "until": "2024-05-01"}, {"until": 12}, {"speakers": ["x"] * 1001},
])
def test_bad_filters_are_refused(mem, kw):
    with pytest.raises(InvalidInputError):
        mem.search("violin", **kw)
    with pytest.raises(InvalidInputError):
        MessageFilter.build(**kw)


def test_filter_values_are_normalised():
    f = MessageFilter.build(speakers=" Ana  Maria ", sessions=[1, "1"], since=datetime(2024, 5, 1, 2, tzinfo=timezone(
        timedelta(hours=2))), until="2024-05-02")
    assert f == MessageFilter(("Ana Maria",), ("1",), "2024-05-01T00:00:00", "2024-05-02T23:59:59.999999")
    assert MessageFilter.build() is None and MessageFilter.build(speakers=[]) is None


@settings(max_examples=200, deadline=None)
@given(scores=st.dictionaries(st.integers(1, 5000),
                              st.sampled_from([0.1, 0.2, 0.25, 0.5, 1 / 3, 0.7]) | st.floats(0, 1), max_size=400),
       limit=st.integers(0, 60))
def test_the_best_few_are_the_head_of_the_full_ranking(scores, limit):
    """The partitioned top-``limit`` (used when trajectories add thousands of candidates) is
    exactly the head of the full sort: same items, same order, ties by id."""
    full = top_scored(scores)
    assert full == sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
    assert top_scored(scores, limit) == full[:limit]
