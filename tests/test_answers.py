"""Offline answers from the current state (memsif_lite.answers), one test per rule, on invented
conversations; the README's example end to end with the real model."""

from __future__ import annotations

from datetime import datetime

from memsif_lite import Memory
from memsif_lite.answers import DONT_KNOW, content_words, offline_answer
from memsif_lite.types import EvidenceItem, FactItem

T1, T2 = datetime(2024, 1, 10, 9), datetime(2024, 3, 16, 20, 31)


def _fact(fid, stmt, subject="Maya", start=T1, end=None, mids=(1,), kind="core"):
    return FactItem(kind, fid, subject, "Identity", stmt, start, end, mids, 0.9)


def _ev(mid, speaker, stmt, at=T2):
    return EvidenceItem((mid,), speaker, stmt, at, "1", ())


LISBON = _fact(1, "Maya lives in Lisbon", end=T2, mids=(1,))
PORTO = _fact(2, "Maya lives in Porto", start=T2, mids=(2,))


def test_readme_example_answers_porto_offline(tmp_path, embedder):
    with Memory(tmp_path / "me.db", embedder=embedder) as mem:
        mem.add("Maya", "I live in Lisbon, near the castle.", at="2024-01-10T09:00:00", session="1")
        mem.add("Maya", "I moved to Porto! I signed the lease last week.", at="2024-03-16T20:31:00", session="2")
        mem.add_many([{"speaker": "Leo", "text": "Congrats! When do you move?", "at": "2024-03-16T20:32:00+01:00"}])
        where = mem.ask("Where does Maya live?", budget_tokens=2000)
        lease = mem.ask("When did Maya sign the lease?", budget_tokens=2000)
        sport = mem.ask("What sport does Maya play?", budget_tokens=2000)
    assert where.extractive and "Porto" in where.text and "Lisbon" not in where.text
    assert "the week of Mon 4 Mar 2024" in lease.text
    assert sport.text == DONT_KNOW


def test_a_matching_current_fact_answers_before_evidence():
    evidence = [_ev(1, "Maya", "I live in Lisbon, near the castle.", T1), _ev(2, "Maya", "I moved to Porto!")]
    assert offline_answer("Where does Maya live?", [LISBON, PORTO], evidence, False) == "Maya lives in Porto"
    # order of the facts does not matter: the current one wins a tie
    assert offline_answer("Where does Maya live?", [PORTO, LISBON], evidence, False) == "Maya lives in Porto"


def test_superseded_fact_answers_only_a_question_about_the_old_value():
    ans = offline_answer("When did Maya live in Lisbon?", [PORTO, LISBON], [], False)
    assert ans.startswith("Maya lives in Lisbon") and "2024-01-10" in ans and "no longer current" in ans


def test_never_quotes_a_superseded_statement_when_a_newer_sentence_answers():
    # the Lisbon message (provenance of the superseded fact) ranks first; no fact matches "stay"
    evidence = [_ev(1, "Maya", "I stay in Lisbon for now, near the castle.", T1),
                _ev(2, "Maya", "Since March I stay in Porto with Leo.")]
    facts = [_fact(1, "Maya's home city was Lisbon", end=T2, mids=(1,))]
    ans = offline_answer("Where does Maya stay?", facts, evidence, False)
    assert "Porto" in ans and "Lisbon" not in ans


def test_a_self_introduction_does_not_answer_an_unrelated_question():
    intro = _ev(1, "Sam", "I'm Sam. Nice to meet you!")
    tennis = _ev(2, "Sam", "I play tennis every Sunday morning.")
    assert offline_answer("What sport does Sam play?", [], [intro], False) == DONT_KNOW
    ans = offline_answer("What sport does Sam play?", [], [intro, tennis], False)
    assert ans == "Sam (2024-03-16): I play tennis every Sunday morning."
    # a fact about someone else is not the answer either
    assert offline_answer("Where does Sam live?", [PORTO], [], False) == DONT_KNOW


def test_when_questions_carry_the_resolved_date():
    ev = _ev(1, "Ana", "Olive arrived yesterday. She is a beagle.", datetime(2023, 5, 8, 13))
    ans = offline_answer("When did Olive arrive?", [], [ev], False)
    assert ans == 'Ana (2023-05-08): Olive arrived yesterday. ("yesterday" = Sun 7 May 2023)'
    # not a "when" question: no date notes
    assert "=" not in offline_answer("Who arrived?", [], [ev], False)
    # a dated fact keeps its date; an undated one gets its start
    started = _fact(3, "Ana started pottery classes", subject="Ana", start=datetime(2023, 4, 2))
    assert offline_answer("When did Ana start pottery?", [started], [], False) == \
        "Ana started pottery classes (since 2023-04-02)"


def test_facts_that_sufficed_answer_directly():
    active = _fact(9, "Maya walks Olive at 7", kind="active")
    assert offline_answer("anything", [active], [], True) == "Maya walks Olive at 7"


def test_content_words_stem_and_drop_question_words():
    assert content_words("Where does Maya live?") == {"maya", "liv"}
    assert content_words("She lives there; living, lived") == {"liv"}


def test_low_information_lines_are_greetings_thanks_and_acknowledgements():
    from memsif_lite.offline_evidence import low_information

    for text in ("Thanks!", "Wow, that is amazing, Mel!", "Haha yeah, same here"):
        assert low_information(text, 1), text
    for text in ("I love pottery so much", "Yes, since 2020!", "Congrats on the new job!"):
        assert not low_information(text, 1), text
    assert not low_information("Thanks!", 0)  # 0: off


def test_context_leaves_out_filler_below_the_top_hit(memory):
    mem = memory()
    mem.add("Ana", "Thanks so much, that is amazing!", at="2024-01-01T10:00:00")
    mem.add("Ana", "My violin exam went well, I got a distinction.", at="2024-01-01T10:01:00")
    mem.add("Ben", "Wow, amazing!", at="2024-01-01T10:02:00")
    texts = [e.stmt for e in mem.context("How did Ana's violin exam go?", budget_tokens=500).evidence]
    assert "My violin exam went well, I got a distinction." in texts
    assert "Wow, amazing!" not in texts[1:] and "Thanks so much, that is amazing!" not in texts[1:]


def test_the_reply_to_a_top_ranked_question_follows_it():
    from memsif_lite.db.rows import MessageRow
    from memsif_lite.offline_evidence import with_replies

    rows = {1: MessageRow(1, "Ana", "How long have you played the violin?", "2024-01-01T10:00:00", "1", None),
            2: MessageRow(2, "Ben", "Since 2015!", "2024-01-01T10:01:00", "1", None),
            3: MessageRow(3, "Ana", "Cool. Any exams?", "2024-01-01T10:02:00", "1", None),
            4: MessageRow(4, "Ana", "Hello?", "2024-01-01T10:03:00", "2", None),
            5: MessageRow(5, "Ben", "Hi!", "2024-01-01T10:04:00", "3", None)}
    assert with_replies([1, 3, 4], rows, 5) == [1, 2, 3, 4]      # 3's next is Ana's own; 4's is another session
    assert with_replies([3, 1], rows, 1) == [3, 1]               # only the top 1 is expanded
    assert with_replies([1, 2], rows, 0) == [1, 2]               # 0: off


def test_two_sentences_of_one_message_beat_a_fact_that_shares_less():
    adopted = _fact(5, "Leo adopted a dog from the shelter", subject="Leo")
    ev = _ev(6, "Leo", "Big news, I adopted a dog from the shelter! Her name is Pixel. She sleeps a lot.")
    ans = offline_answer("What is the name of Leo's dog?", [adopted], [ev], False)
    assert ans == "Leo (2024-03-16): Big news, I adopted a dog from the shelter! Her name is Pixel."

