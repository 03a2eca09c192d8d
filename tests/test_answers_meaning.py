"""Offline answers by meaning (memsif_lite.answers): the bundled encoder chooses the sentence that
answers, and a question about one person never gets another person's own thing. The model tests
use the real ONNX encoder on memory files in tmp_path; the rule tests give the cosines themselves
(any cosines: the rule must hold whatever the encoder thinks)."""

from __future__ import annotations

import json
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from memsif_lite import Memory, answers
from memsif_lite.answers import DONT_KNOW, offline_answer
from memsif_lite.cli import main
from memsif_lite.types import EvidenceItem

T = datetime(2024, 5, 2, 18, 0)


def _ev(mid: int, speaker: str, stmt: str, at: datetime = T) -> EvidenceItem:
    return EvidenceItem((mid,), speaker, stmt, at, "1", ())


def test_the_demo_cat_question_answers_mochi(tmp_path):
    """Leo's cat Biscuit ranks first for "Maya's cat"; Maya's "her name is Mochi" is the answer."""
    from click.testing import CliRunner

    db = str(tmp_path / "demo.db")
    assert CliRunner().invoke(main, ["demo", "--db", db]).exit_code == 0
    r = CliRunner().invoke(main, ["ask", "--db", db, "--json", "What is the name of Maya's cat?"])
    assert r.exit_code == 0, r.output
    text = json.loads(r.stdout)["text"]
    assert "Mochi" in text and "Biscuit" not in text and "Pixel" not in text and text.startswith("Maya (")


def test_the_demo_cat_question_at_the_demo_budget(tmp_path, embedder, sample_messages):
    with Memory(tmp_path / "m.db", embedder=embedder) as mem:
        mem.add_many(sample_messages)
        cat = mem.ask("What is the name of Maya's cat?", budget_tokens=400)
        dog = mem.ask("What is the name of Leo's dog?", budget_tokens=400)
    assert "Mochi" in cat.text and cat.text.startswith("Maya (")
    assert "Pixel" in dog.text and dog.text.startswith("Leo (")


def _sam_and_ana(path, embedder) -> Memory:
    mem = Memory(path, embedder=embedder)
    mem.add_many([
        {"speaker": "Sam", "text": "Hi Ana, I'm Sam.", "at": "2024-05-02T18:00:00", "session": "1"},
        {"speaker": "Ana", "text": "Nice to meet you! I work at the library.", "at": "2024-05-02T18:01:00",
         "session": "1"},
        {"speaker": "Sam", "text": "I adopted a little beagle last week.", "at": "2024-05-02T18:02:00",
         "session": "1"},
        {"speaker": "Sam", "text": "I work as a maths teacher.", "at": "2024-05-02T18:03:00", "session": "1"},
        {"speaker": "Ana", "text": "The weather is lovely today.", "at": "2024-05-02T18:04:00", "session": "1"},
    ])
    return mem


def test_meaning_answers_when_the_answer_shares_no_word_with_the_question(tmp_path, embedder):
    with _sam_and_ana(tmp_path / "m.db", embedder) as mem:
        pet = mem.ask("What pet does Sam have?", budget_tokens=500)
        job = mem.ask("What is Sam's job?", budget_tokens=500)
        ctx = mem.context("What pet does Sam have?", budget_tokens=500)
    assert "beagle" in pet.text and pet.text.startswith("Sam")  # the sentence, or the fact drawn from it
    assert job.text == "Sam (2024-05-02): I work as a maths teacher."
    # by shared words alone the same context answers nothing
    assert offline_answer("What pet does Sam have?", ctx.facts, ctx.evidence, ctx.sufficient) == DONT_KNOW


def test_nothing_close_in_meaning_is_still_i_dont_know(tmp_path, embedder):
    with _sam_and_ana(tmp_path / "m.db", embedder) as mem:
        assert mem.ask("What car does Sam drive?", budget_tokens=500).text == DONT_KNOW
        assert mem.ask("Which country was Ana born in?", budget_tokens=500).text == DONT_KNOW


def test_another_persons_thing_loses_even_when_closer_in_meaning():
    """Leo's first-person sentence and Maya's "your cat" are closer to the question than Maya's
    own answer, by the cosines given; neither is Maya's cat."""
    evidence = [_ev(1, "Leo", "My cat Biscuit is ten years old."),
                _ev(2, "Maya", "How is Pixel? I love the name of your cat Biscuit."),
                _ev(3, "Maya", "Yes, her name is Mochi.")]
    cos = {"My cat Biscuit is ten years old.": 0.95, "How is Pixel?": 0.9,
           "I love the name of your cat Biscuit.": 0.94, "Yes, her name is Mochi.": 0.8}
    ans = offline_answer("What is the name of Maya's cat?", [], evidence, False,
                         lambda said: [cos[t] for _, t in said])
    assert ans == "Maya (2024-05-02): Yes, her name is Mochi."
    # about Leo, the same evidence answers with Biscuit (Maya's words to Leo about his cat, or his own)
    ans = offline_answer("What is the name of Leo's cat?", [], evidence, False, lambda said: [cos[t] for _, t in said])
    assert "Biscuit" in ans and "Mochi" not in ans


PEOPLE = ["Maya", "Leo", "Sam", "Ana", "Ben"]
THINGS = ["cat", "dog", "car", "bike", "garden", "boat"]
OWN = ["My {t} is called {v}.", "I named my {t} {v}.", "Our {t} {v} is the best.", "We call the {t} {v}."]
LISTENER = ["Your {t} {v} is so lovely!", "I hope your {t} {v} is fine.", "Is your {t} {v} ok?"]
SUBJECT = ["My {t} is called {v}.", "Yes, the {t} is named {v}.", "I named my {t} {v} last year."]
VALUES = ["Mochi", "Biscuit", "Rex", "Olive", "Bolt", "Nimbus", "Pepper", "Juno"]


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_question_about_a_never_gets_bs_own_thing(data):
    """Whatever the cosines and the order of the evidence: when the question names A and A's
    own sentence about the thing is in the evidence, the answer is never a sentence by another
    person in the first person about their own thing, nor A's words about the listener's."""
    a, b = data.draw(st.lists(st.sampled_from(PEOPLE), min_size=2, max_size=2, unique=True))
    thing = data.draw(st.sampled_from(THINGS))
    va, *others = data.draw(st.lists(st.sampled_from(VALUES), min_size=2, max_size=4, unique=True))
    items = [(a, data.draw(st.sampled_from(SUBJECT)).format(t=thing, v=va))]
    for v in others:
        items.append(data.draw(st.sampled_from([(b, data.draw(st.sampled_from(OWN)).format(t=thing, v=v)),
                                                (a, data.draw(st.sampled_from(LISTENER)).format(t=thing, v=v))])))
    items = data.draw(st.permutations(items))
    evidence = [_ev(i + 1, s, t) for i, (s, t) in enumerate(items)]
    cosines = data.draw(st.dictionaries(st.sampled_from([t for _, t in items]), st.floats(0.0, 1.0)))
    question = data.draw(st.sampled_from([f"What is the name of {a}'s {thing}?", f"What is {a}'s {thing} called?",
                                          f"What did {a} name the {thing}?"]))
    ans = offline_answer(question, [], evidence, False, lambda said: [cosines.get(t, 0.5) for _, t in said])
    assert va in ans and not any(v in ans for v in others), (question, items, ans)
    assert ans.startswith(f"{a} (")


def test_only_a_bounded_set_of_sentences_is_scored_in_one_batch():
    calls: list[int] = []

    def meaning(said):
        calls.append(len(said))
        return [0.9] * len(said)

    evidence = [_ev(i, "Ana", f"Sentence {i} about the garden. Another one about roses. A third one.")
                for i in range(1, 40)]
    offline_answer("What grows in Ana's garden?", [], evidence, False, meaning)
    assert len(calls) == 1
    assert calls[0] <= 3 * answers.MEANING_TOP + answers.MEANING_WORDS
