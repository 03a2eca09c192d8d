"""Offline (extractive) answers from a context: the current state first, never an unrelated line.

Rules, in order:

1. when the facts sufficed, the top fact;
2. a fact that matches the question (it shares a content word of the question, and names the
   person the question asks about when it names one) — current facts before superseded ones,
   so "Where does Maya live?" is answered by "Maya lives in Porto", not by the Lisbon fact it
   superseded; a superseded fact answers only when it matches the question better (e.g. the
   question names the old value);
3. else the evidence sentence (or the two sentences of one message) sharing the most content
   words with the question (ties: the better-ranked evidence); a sentence from a message that
   backs a superseded fact is used only when nothing else matches; a sentence sharing only a
   name ("I'm Sam.") does not answer "What sport does Sam play?";
4. else "I don't know".

"When" questions carry the resolved date: a fact's date, or the sentence's relative times
resolved against the day it was said ("last week" = the week of Mon 4 Mar 2024).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Protocol, Sequence

from .entities import STOP_WORDS
from .fulltext import compose
from .timeutil import relative_notes

__all__ = ["offline_answer", "content_words", "has_content_words", "stem", "DONT_KNOW"]

DONT_KNOW = "I don't know: nothing in memory answers the question."
_WORD = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:'[a-z]+)?")
_CAP = re.compile(r"\b[A-Z][a-z\u00C0-\u024F]+(?:'s)?\b")
_SENT = re.compile(r"(?<=[.!?])\s+")
_QUESTION = frozenset("what when where which who whom whose why how did does do is was were are".split())
_SUFFIXES = ("ing", "ed", "es", "s", "e")


class FactLike(Protocol):
    @property
    def subject(self) -> str: ...
    @property
    def stmt(self) -> str: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def message_ids(self) -> tuple[int, ...]: ...


class EvidenceLike(Protocol):
    @property
    def speaker(self) -> str: ...
    @property
    def stmt(self) -> str: ...
    @property
    def message_ids(self) -> tuple[int, ...]: ...
    @property
    def local_at(self) -> datetime: ...


def stem(word: str) -> str:
    """A crude stem: lower case, one common suffix removed (lives/lived/living → liv)."""
    w = word.lower().removesuffix("'s")
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w


def content_words(text: str) -> set[str]:
    """Stems of the words that are neither stop words nor question words."""
    return {stem(w) for w in _WORD.findall(compose(text))
            if w.lower() not in STOP_WORDS and w.lower() not in _QUESTION}


def has_content_words(text: str, n: int) -> bool:
    """Whether ``text`` has at least ``n`` distinct content words (as :func:`content_words`
    counts them), reading only as far as needed."""
    seen: set[str] = set()
    for m in _WORD.finditer(compose(text)):  # lazily: a long text is read only as far as needed
        w = m.group(0)
        lw = w.lower()
        if lw in STOP_WORDS or lw in _QUESTION:
            continue
        seen.add(stem(w))
        if len(seen) >= n:
            return True
    return n <= 0


def _names(question: str, people: set[str]) -> set[str]:
    """Names in the question: capitalised words after the first, and known people it mentions."""
    caps = {stem(m.group(0)) for m in _CAP.finditer(question) if m.start() > 0}
    low = question.lower()
    return caps | {stem(p) for p in people if p and re.search(rf"\b{re.escape(p.lower())}\b", low)}


def _is_when(question: str) -> bool:
    q = question.lower()
    return q.startswith("when") or " when " in q or "what date" in q or "what year" in q or "how long ago" in q


def _fact_answer(f: FactLike, when: bool) -> str:
    if f.valid_to is not None and f.valid_from is not None:
        return f"{f.stmt} (from {f.valid_from:%Y-%m-%d} until {f.valid_to:%Y-%m-%d}; no longer current)"
    if when and f.valid_from is not None and not re.search(r"\d{4}-\d{2}-\d{2}", f.stmt):
        return f"{f.stmt} (since {f.valid_from:%Y-%m-%d})"
    return f.stmt


def offline_answer(question: str, facts: Sequence[FactLike], evidence: Sequence[EvidenceLike],
                   sufficient: bool) -> str:
    """The extractive answer (module docstring)."""
    if sufficient and facts:
        return facts[0].stmt
    people = {f.subject for f in facts} | {e.speaker for e in evidence}
    names = _names(question, people)
    qwords = content_words(question) - names
    when = _is_when(question)

    def score(text: str) -> tuple[int, int]:
        words = content_words(text)
        return len(words & qwords), len(words & names)

    def matches(s: tuple[int, int]) -> bool:
        return s[0] > 0 if qwords else s[1] > 0

    best_fact: tuple[tuple[int, int], FactLike] | None = None
    best_key: tuple[int, int, int, datetime] | None = None
    for f in facts:
        s = score(f.stmt)
        if not matches(s) or (names and not s[1]):
            continue
        # more shared words first, then current before superseded, then the latest
        fkey = (s[0], s[1], int(f.valid_to is None), f.valid_from or datetime.min)
        if best_key is None or fkey > best_key:
            best_fact, best_key = (s, f), fkey
    stale = {m for f in facts if f.valid_to is not None for m in f.message_ids}
    best_sent: tuple[tuple[int, int, int], EvidenceLike, str] | None = None
    for e in evidence:
        fresh = 0 if set(e.message_ids) & stale else 1
        sents = [x.strip() for x in _SENT.split(e.stmt) if x.strip()]
        # the fewest sentences (at most 2, in order) that share the most question words
        ranked = sorted(range(len(sents)), key=lambda i: (-len(content_words(sents[i]) & qwords), i))
        keep: list[int] = []
        have: set[str] = set()
        for i in ranked[:2]:
            got = content_words(sents[i]) & qwords
            if got - have or (not qwords and not keep):
                keep.append(i)
                have |= got
        text = " ".join(sents[i] for i in sorted(keep))
        if not text:
            continue
        s = score(f"{e.speaker} {text}")
        if not matches(score(text) if qwords else s):
            continue
        skey = (fresh, s[0], s[1])
        if best_sent is None or skey > best_sent[0]:
            best_sent = (skey, e, text)
    if best_fact is not None:
        fact_key = best_fact[0]
        sent_better = best_sent is not None and best_sent[0][0] and best_sent[0][1] > fact_key[0]
        dated_sent = (when and best_sent is not None and best_sent[0][0] and best_sent[0][1] >= fact_key[0]
                      and relative_notes(best_sent[2], best_sent[1].local_at))
        if not (sent_better or dated_sent):
            return _fact_answer(best_fact[1], when)
    if best_sent is None:
        return DONT_KNOW
    _, e, sent = best_sent
    notes = relative_notes(sent, e.local_at) if when else []
    dates = f" ({'; '.join(notes)})" if notes else ""
    return f"{e.speaker} ({e.local_at:%Y-%m-%d}): {sent}{dates}"
