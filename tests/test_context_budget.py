"""What a context shows of its facts within a budget (found by a new user, stop 40): a context is
judged sufficient on the facts it shows — never on facts its budget left out (a budget of 200 gave
an empty text called sufficient) — and a fact no longer current is never shown in place of the one
that replaced it (a budget of 300 showed "Sam lives in Berlin [… no longer current]" alone)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsif_lite import Memory

SAID = [("I live in Berlin", "2024-01-01T10:00:00", "1"), ("I work as a nurse at Charite", "2024-01-01T10:00:10", "1"),
        ("we moved to Hamburg last week!", "2024-03-01T10:00:00", "2"),
        ("i started a new job at UKE hospital", "2024-03-01T10:00:10", "2"),
        ("I live in Hamburg now", "2024-04-01T10:00:00", "3"), ("bye", "2024-05-01T10:00:00", "4")]
QUESTION = "Where does Sam live?"


@pytest.fixture(scope="module")
def sam(tmp_path_factory) -> Memory:
    """Sam's chat with the bundled model, and two questions asked (they promote an ActiveFact that
    makes the question's context sufficient offline when it is shown)."""
    mem = Memory(Path(tmp_path_factory.mktemp("sam")) / "sam.db")
    for text, at, session in SAID:
        mem.add("Sam", text, at=at, session=session)
    mem.ask(QUESTION)
    mem.ask("Where does Sam work?")
    yield mem
    mem.close()


def test_the_chat_holds_what_the_budgets_must_choose_between(sam):
    facts = {f.stmt: f.valid_to for f in sam.facts(include_superseded=True)}
    assert facts["Sam lives in Berlin"] is not None and facts["Sam lives in Hamburg"] is None
    assert sam.active_facts() and sam.context(QUESTION, budget_tokens=2000).sufficient


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(min_value=50, max_value=2000))
def test_a_context_is_sufficient_only_on_facts_it_shows_and_shows_the_current_first(sam, budget):
    c = sam.context(QUESTION, budget_tokens=budget)
    assert c.tokens <= budget
    if c.sufficient:  # judged on facts it shows: some are shown, among them an ActiveFact (the offline check)
        assert c.facts and any(f.kind == "active" for f in c.facts) and c.text
    else:
        assert c.evidence or budget < 100  # nothing judged it sufficient: the evidence is read
    shown = [f.stmt for f in c.facts]
    if "Sam lives in Berlin" in shown:  # no longer current: never in place of its successor
        assert "Sam lives in Hamburg" in shown
        assert shown.index("Sam lives in Hamburg") < shown.index("Sam lives in Berlin")
    current = [f.valid_to is None for f in c.facts]
    assert current == sorted(current, reverse=True)  # current facts first
