"""Offline CoreFacts follow the changes a speaker states in passing (issue 26, item 4): started /
stopped / quit / switched to / accepted / moved / no longer / again end or replace the fact they
change, only the speaker's own, with history kept; a fact's time is the day the message names
("last Saturday"), not the time it was said. Real files, the bundled model, no LLM."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsif_lite import Memory
from memsif_lite.fact_changes import ended_by, ends_any, key_words
from memsif_lite.timeutil import stated_times

DAY0 = datetime(2024, 5, 6, 9)  # a Monday


def _remember(mem: Memory, lines: list[tuple[int, str, str]]) -> None:
    """(day after DAY0, speaker, text) — one session a day, and a closing message a month later
    so that every segment is closed (CoreFacts are written when a segment closes)."""
    for i, (day, speaker, text) in enumerate(lines):
        at = DAY0 + timedelta(days=day, minutes=i)
        mem.add(speaker, text, at=at, session=f"day {day}")
    last = max(day for day, _, _ in lines)
    mem.add("Closer", "Unrelated closing remark about the weather.", at=DAY0 + timedelta(days=last + 30),
            session="closing")


def _by_stmt(mem: Memory) -> dict[str, object]:
    return {f.stmt: f for f in mem.facts(include_superseded=True)}


# (verb, what was true before, the change said in passing, the fact it ends, the fact now current)
SCENARIOS = [
    ("started", "I quit running when my knee started hurting.", "Good news: I started running again, slowly.",
     "Sam quit running (around 2024-05-06)", "Sam started running (around 2024-05-16)"),
    ("stopped", "I love climbing, it's the best part of my week.", "I stopped climbing because of my shoulder.",
     "Sam loves climbing", "Sam stopped climbing (around 2024-05-16)"),
    ("quit", "I work at Globex, it is close to home.", "I quit my job at Globex yesterday.",
     "Sam works at Globex", "Sam quit their job at Globex (around 2024-05-15)"),
    ("switched to", "I started running last month, every morning.", "I switched from running to cycling.",
     "Sam started running (around 2024-04)", "Sam switched to cycling (around 2024-05-16)"),
    ("accepted", "I work at Globex, it is close to home.", "I accepted the offer from Acme, starting Monday.",
     "Sam works at Globex", "Sam works at Acme"),
    ("moved", "I live in Leeds, near the market.", "We moved to York last weekend, the flat is bigger.",
     "Sam lives in Leeds", "Sam lives in York"),
    ("no longer", "I'm vegetarian, so no meat for me please.", "I'm no longer vegetarian, to be honest.",
     "Sam is vegetarian", "Sam is no longer vegetarian (as of 2024-05-16)"),
    ("again", "I'm vegetarian, so no meat for me please.", "I had a steak again last night, it was great.",
     "Sam is vegetarian", "Sam eats meat again (as of 2024-05-15)"),
    ("again (a habit)", "I quit smoking two weeks ago.", "Ugh, I'm smoking again since the exams.",
     "Sam quit smoking (around 2024-04-22)", "Sam is smoking again (as of 2024-05-16)"),
]


@pytest.mark.parametrize("verb, before, change, old, new", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_stated_change_ends_the_fact_it_changes(tmp_path, embedder, verb, before, change, old, new):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, [(0, "Sam", before), (0, "Ava", "Good to know!"),
                        (10, "Sam", change), (10, "Ava", "Thanks for telling me.")])
        facts = _by_stmt(mem)
        assert old in facts and new in facts, sorted(facts)
        ended, current = facts[old], facts[new]
        assert current.valid_to is None and current.superseded_by is None
        assert ended.valid_to is not None and ended.superseded_by == current.id  # no longer current ...
        assert ended.valid_from < ended.valid_to <= DAY0 + timedelta(days=10, minutes=2)
        assert [e.op for e in mem.fact_history(ended.id)] == ["add", "superseded"]  # ... and still in history
        assert old not in {f.stmt for f in mem.facts()}
        assert new in {f.stmt for f in mem.facts()}


def test_the_change_takes_the_day_it_names(tmp_path, embedder):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, [(0, "Sam", "I live in Leeds, near the market."),
                        (13, "Sam", "We moved to York last weekend, the flat is bigger.")])  # said Sun 19 May
        facts = _by_stmt(mem)
    saturday = datetime(2024, 5, 11, 9, 1)  # "last weekend" on Sunday 19 May: from Saturday 11 May
    assert facts["Sam lives in York"].valid_from == saturday
    assert facts["Sam lives in Leeds"].valid_to == saturday


def test_another_persons_statement_never_ends_the_users_fact(tmp_path, embedder):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, [(0, "User", "I'm vegetarian, and I love climbing on weekends."),
                        (0, "User", "I work at Globex and I live in Leeds."),
                        (5, "Kim", "Funny, I stopped climbing last year and I'm no longer vegetarian."),
                        (5, "Kim", "I had a steak again yesterday. I quit my job and moved to York."),
                        (6, "Leo", "I accepted the offer from Acme. I'm no longer with Globex either.")])
        user = {f.stmt for f in mem.facts(subject="User")}
        everyone = _by_stmt(mem)
    assert {"User is vegetarian", "User loves climbing on weekends", "User works at Globex",
            "User lives in Leeds"} <= user
    assert all(f.valid_to is None for f in everyone.values() if f.subject == "User")
    assert {"Kim is no longer vegetarian (as of 2024-05-11)", "Leo works at Acme"} <= set(everyone)


def test_a_new_value_replaces_a_stated_end_and_again_ends_a_negation(tmp_path, embedder):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, [(0, "Sam", "I work at Globex, it is close to home."),
                        (5, "Sam", "I quit my job at Globex, it was too much."),
                        (9, "Sam", "I work at Initech now, much calmer."),
                        (12, "Sam", "I don't eat meat anymore."),
                        (20, "Sam", "I eat meat again, my doctor insisted.")])
        current = {f.stmt for f in mem.facts()}
    assert "Sam works at Initech" in current
    assert not any("Globex" in s for s in current)  # the job and its end are both history now
    assert "Sam eats meat again (as of 2024-05-26)" in current and "Sam does not eat meat" not in current


def test_the_demo_lease_takes_the_day_last_saturday_names(tmp_path, embedder, sample_messages):
    with Memory(tmp_path / "demo.db", embedder=embedder) as mem:
        mem.add_many(sample_messages)
        lease = [f for f in mem.facts() if f.stmt.startswith("Maya signed the lease")]
    # said on Saturday 16 March 2024: "last Saturday" is the 9th
    assert [f.stmt for f in lease] == ["Maya signed the lease on a small apartment in Ribeira (around 2024-03-09)"]
    assert lease[0].valid_from.date() == date(2024, 3, 9)


def test_forgetting_a_source_keeps_the_day_the_others_name(tmp_path, embedder):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, [(4, "Sam", "I signed the lease last Saturday!"),  # Friday and Saturday: the 4th
                        (4, "Ava", "Congratulations!"),
                        (5, "Sam", "Yes, I signed the lease last Saturday, finally.")])
        [fact] = [f for f in mem.facts() if f.stmt.startswith("Sam signed")]
        assert fact.message_ids == (1, 3) and fact.valid_from == datetime(2024, 5, 4, 9)
        mem.forget(message_id=1)  # the other source names the same day
        [fact] = [f for f in mem.facts() if f.stmt.startswith("Sam signed")]
        assert fact.message_ids == (3,) and fact.valid_from == datetime(2024, 5, 4, 9)
        mem.forget(message_id=3)
        assert not [f for f in mem.facts() if f.stmt.startswith("Sam signed")]


@pytest.mark.parametrize("text, day, precision", [
    ("I signed the lease last Saturday!", date(2024, 3, 9), "day"),
    ("We had pizza yesterday", date(2024, 3, 15), "day"),
    ("It was last night", date(2024, 3, 15), "day"),
    ("I started two weeks ago", date(2024, 3, 2), "day"),
    ("I adopted her in July", date(2023, 7, 1), "month"),
    ("I went vegan in March", date(2024, 3, 1), "month"),
    ("in March 2022", date(2022, 3, 1), "month"),
    ("last month", date(2024, 2, 1), "month"),
    ("last year", date(2023, 1, 1), "year"),
    ("I signed the lease last sat", None, None),  # "sat": a word of its own, no day
    ("we had pizza yday", date(2024, 3, 15), "day"),
    ("it was last nite", date(2024, 3, 15), "day"),
    ("i started 2 wks ago", date(2024, 3, 2), "day"),
    ("quit last thurs", date(2024, 3, 14), "day"),
    ("moved last yr", date(2023, 1, 1), "year"),
])
def test_stated_times_resolve_past_expressions(text, day, precision):
    said = datetime(2024, 3, 16, 20, 31)  # a Saturday
    if day is None:
        assert stated_times(text, said) == []
        return
    [(start, end, got, prec)] = stated_times(text, said)
    assert got.date() == day and prec == precision and got.time() == said.time()
    assert text[start:end].lower() in text.lower()


@pytest.mark.parametrize("text", ["See you tomorrow", "next week", "this weekend", "today", "in March 2025",
                                  "see u tmrw", "next wk", "tonite"])
def test_stated_times_leave_out_what_lies_ahead(text):
    assert stated_times(text, datetime(2024, 3, 16, 20, 31)) == []


def test_key_words_leave_out_subject_date_change_words_and_light_verbs():
    assert key_words("Sam stopped playing tennis (around 2024-05-01)", "Sam") == {"tenni"}
    assert key_words("Sam loves playing tennis", "Sam") == {"tenni"}
    assert key_words("Sam no longer lives in Lisbon (as of 2024-05-01)", "Sam") == {"liv", "lisbon"}


def test_a_stop_ends_states_not_dated_events_nor_other_things():
    class F:
        def __init__(self, fid, ftype, stmt, slot=None, valid_from="2024-01-01T00:00:00"):
            self.id, self.subject, self.type, self.stmt, self.slot, self.valid_from = \
                fid, "Sam", ftype, stmt, slot, valid_from

    facts = [F(1, "Preference", "Sam loves climbing"), F(2, "Event", "Sam started climbing (around 2023-05-01)",
                                                          "habit climb"),
             F(3, "Event", "Sam joined a climbing gym (around 2023-05-01)"), F(4, "Preference", "Sam loves hiking"),
             F(5, "Preference", "Sam loves climbing", valid_from="2024-06-01T00:00:00")]
    ended = ended_by("Sam", "Event", "Sam stopped climbing (around 2024-05-01)", True, (), "2024-05-01T10:00:00",
                     facts)
    assert [f.id for f in ended] == [1, 2]  # not the dated event, not hiking, not what was said later


ASSISTANT_CHAT = [  # (day, speaker, text): a user and an assistant over two months
    (0, "User", "Hi! Can you help me plan meals this week? I'm vegetarian, so no meat please."),
    (0, "Assistant", "Of course! Vegetarian meals it is. Anything else I should know?"),
    (0, "User", "I work at Globex as a data analyst, so lunches need to be easy to pack."),
    (0, "Assistant", "Got it, packable lunches for the office."),
    (0, "User", "I live in Leeds, so the market in town is my usual grocery stop."),
    (2, "User", "I started climbing last month, any tips for sore forearms?"),
    (2, "Assistant", "Rest days and gentle stretching help a lot with forearm soreness."),
    (2, "User", "Also I quit smoking two weeks ago, so I want healthy snacks instead."),
    (2, "Assistant", "Great decision! Carrot sticks and nuts are good snacks."),
    (27, "User", "Update: I had a steak again last night, the vegetarian thing is over."),
    (27, "Assistant", "No judgement! Want some recipes with meat then?"),
    (27, "User", "I accepted the offer from Acme, starting Monday."),
    (27, "Assistant", "Congratulations on the new job!"),
    (34, "User", "I stopped climbing because of my shoulder. Now I'm doing swimming instead."),
    (34, "Assistant", "Swimming is gentle on shoulders, good choice."),
    (34, "User", "And I moved to York last weekend, the flat is much bigger."),
    (34, "Assistant", "York is lovely! Enjoy the new flat."),
    (45, "User", "Ugh, I'm smoking again, the new job is stressful."),
    (45, "Assistant", "Sorry to hear that. Want some tips to cut down?"),
]
# (question, what the answer says, what it must not say: the stale state)
ASSISTANT_QUESTIONS = [
    ("Is the user vegetarian?", ("no longer vegetarian", "vegetarian thing is over"), None),
    ("Does the user eat meat?", "eats meat again", "no meat"),
    ("Where does the user work?", "Acme", "Globex"),
    ("Does the user still go climbing?", "stopped climbing", "started climbing"),
    ("Is the user swimming now?", "swimming", None),
    ("Where does the user live?", "York", "Leeds"),
    ("When did the user move to York?", "1 Jun 2024", None),  # "last weekend", said on Sunday 9 June
    ("Does the user smoke?", "smoking again", "quit smoking"),
]


def test_ask_answers_the_current_state_of_an_assistant_chat(tmp_path, embedder):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        _remember(mem, ASSISTANT_CHAT)
        for question, says, stale in ASSISTANT_QUESTIONS:
            answer = mem.ask(question, budget_tokens=1000)
            alternatives = says if isinstance(says, tuple) else (says,)
            assert answer.extractive and any(a in answer.text for a in alternatives), (question, answer.text)
            assert stale is None or stale not in answer.text, (question, answer.text)


_WORDS = ["climbing", "running", "no longer", "stopped", "again", "tea", "Globex", "vegetarian", "the", "now", "plays"]


@settings(max_examples=200, deadline=None)
@given(stmt=st.lists(st.sampled_from(_WORDS), max_size=4), change=st.booleans(),
       ends=st.lists(st.lists(st.sampled_from(_WORDS), max_size=2), max_size=2),
       facts=st.lists(st.tuples(st.lists(st.sampled_from(_WORDS), min_size=1, max_size=4),
                                st.sampled_from(["Event", "Preference", "Identity"]),
                                st.sampled_from([None, "habit:x"])), max_size=6))
def test_a_candidate_that_ends_nothing_is_known_without_reading_the_facts(stmt, change, ends, facts):
    """``ends_any`` (false: the decision reads no facts) is false only when ``ended_by`` finds none."""
    from memsif_lite.db.rows import FactRow

    rows = [FactRow(i, "Sam", t, "Sam " + " ".join(w), slot, "2024-01-01T00:00:00")
            for i, (w, t, slot) in enumerate(facts)]
    text = "Sam " + " ".join(stmt)
    phrases = [" ".join(p) for p in ends]
    found = ended_by("Sam", "Preference", text, change, phrases, "2024-06-01T00:00:00", rows)
    if not ends_any("Sam", text, change, phrases):
        assert found == []
