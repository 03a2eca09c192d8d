"""Offline CoreFacts on a labelled fixture of invented conversations (tests/fixtures/
facts_labelled.json): the facts that must and must not be extracted, and the state (current /
superseded) after each conversation."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FIXTURES
from fakes import FakeEmbedder
from memsif_lite import Config, Memory
from memsif_lite.config import DEFAULT_FACT_SCHEMA
from memsif_lite.fact_extraction import extract_offline, typed_plainly
from memsif_lite.db.rows import MessageRow

LABELLED = json.loads((FIXTURES / "facts_labelled.json").read_text(encoding="utf-8"))["conversations"]
#: every message its own segment, so facts are written as the conversation goes
ONE_PER_SEGMENT = Config(sem_low=0.0, sem_high=1.0, tau_merge=0.99, tau_split=0.98)


def _norm(stmt: str) -> str:
    return re.sub(r"\s*\((?:around|as of|since) [^)]*\)$", "", stmt).strip().lower()


def _extracted(conv: dict) -> set[str]:
    rows = [MessageRow(i + 1, sp, text, at, "1", None) for i, (sp, text, at) in enumerate(conv["messages"])]
    return {_norm(c.stmt) for c in extract_offline(rows, DEFAULT_FACT_SCHEMA)}


def test_precision_and_recall_on_the_labelled_fixture():
    tp = fp = fn = 0
    for conv in LABELLED:
        got, must = _extracted(conv), {m.lower() for m in conv["must"]}
        assert not got & {m.lower() for m in conv["must_not"]}, conv["name"]
        tp, fp, fn = tp + len(got & must), fp + len(got - must), fn + len(must - got)
    precision, recall = tp / (tp + fp), tp / (tp + fn)
    assert precision >= 0.95 and recall >= 0.9, (precision, recall)


@pytest.mark.parametrize("conv", [c for c in LABELLED if c["current"] or c["superseded"]], ids=lambda c: c["name"])
def test_state_after_the_conversation(tmp_path, conv):
    with Memory(tmp_path / "f.db", embedder=FakeEmbedder(), config=ONE_PER_SEGMENT) as mem:
        for speaker, text, at in conv["messages"]:
            mem.add(speaker, text, at=at)
        mem.add("Closer", "Unrelated closing remark about the weather.", at="2025-01-01T00:00:00")
        facts = mem.facts(include_superseded=True)
    current = {_norm(f.stmt) for f in facts if f.valid_to is None}
    superseded = {_norm(f.stmt) for f in facts if f.valid_to is not None}
    assert {s.lower() for s in conv["current"]} <= current
    assert {s.lower() for s in conv["superseded"]} <= superseded
    assert not current & superseded
    for f in facts:  # never valid from and to the same moment
        assert f.valid_to is None or f.valid_to > f.valid_from


def test_a_neighbourhood_refines_a_city_it_does_not_replace_it(tmp_path):
    with Memory(tmp_path / "f.db", embedder=FakeEmbedder(), config=ONE_PER_SEGMENT) as mem:
        mem.add("Nora", "I live in Amsterdam, it's lovely in spring.", at="2024-01-05T10:00:00")
        mem.add("Nora", "I live in De Pijp, near the market.", at="2024-02-05T10:02:00")
        mem.add("Closer", "Unrelated closing remark about the weather.", at="2025-01-01T00:00:00")
        current = {f.stmt for f in mem.facts()}
        assert {"Nora lives in Amsterdam", "Nora lives in De Pijp"} <= current
        mem.add("Nora", "I live in Utrecht now.", at="2025-02-01T10:00:00")
        mem.add("Closer", "Another closing remark about trains.", at="2025-03-01T00:00:00")
        lives = {f.stmt for f in mem.facts() if " lives in " in f.stmt}
    assert lives == {"Nora lives in Utrecht"}


@given(st.text())
def test_plain_typing_is_plain_already(text):
    """``typed_plainly`` once is enough: what it returns it leaves as it is."""
    once = typed_plainly(text)
    assert typed_plainly(once) == once


@pytest.mark.parametrize(("typed", "plain"), [
    ("I’m allergic to nuts", "I'm allergic to nuts"), ("im allergic to nuts", "I'm allergic to nuts"),
    ("Im in Porto", "I'm in Porto"), ("i dont eat meat", "I don't eat meat"), ("i’ve got a dog", "I've got a dog"),
    ("she said “yes”", 'she said "yes"'), ("i cant and i wont", "I can't and I won't"),
    ("me and i, too", "me and I, too"), ("i", "I"), ("Ana‘s ʼ ´ `", "Ana's ' ' '")])
def test_phone_and_chat_typing_made_plain(typed, plain):
    assert typed_plainly(typed) == plain


@pytest.mark.parametrize("text", ["i.e. this one", "Jony Ive designed it", "IM me later", "imagine it", "Ivy and Jim",
                                  "I'm fine, don't worry", "dontcha know", "the item is in", "pi is 3.14", "Wi-Fi"])
def test_text_typed_plainly_is_left_as_it_is(text):
    assert typed_plainly(text) == text
