"""Offline (extractive) answers from a context: the current state first, never an unrelated line,
never another person's thing.

The answer is one candidate — a fact, or a sentence of an evidence message (with at most one
more sentence of the same message) — chosen in this order:

1. when the facts sufficed, the top fact;
2. only candidates that could answer: a fact about the person the question names (when it names
   one) sharing a content word of the question; a sentence that is not itself a question and
   says more than a name ("I'm Sam." does not answer "What sport does Sam play?"), and that
   shares a content word of the question or is close to it in meaning (cosine ≥
   :data:`MEANING_ALONE`: "I adopted a little beagle last week" answers "What pet does Sam
   have?");
3. never another person's own thing when the question names someone: a message by someone the
   question does not name, in the first person ("my cat Biscuit") and naming no one the question
   names, or a message by the person named that speaks only of the listener's ("your cat"),
   answers only when nothing else can;
4. current before superseded: a superseded fact, or a sentence of a message that backs one,
   answers only when it holds more of the question (its words and names) than every current
   candidate (the question names the old value);
5. then the best score: the cosine of the candidate to the question (the bundled encoder; a
   fact's from the fact search, less :data:`FACT_HANDICAP`), plus :data:`WORD_WEIGHT` × the
   share of the question's content words it holds, plus :data:`KIND_WEIGHT` when it holds what
   the question asks for (a time for "when", a number for "how many", a name for "who" / "what is
   the name"), less :data:`RANK_WEIGHT` per rank of its evidence message;
6. else "I don't know".

Cosines cost an embedding per sentence, so only a bounded set of sentences is scored by meaning:
those of the :data:`MEANING_TOP` best-ranked evidence messages and the :data:`MEANING_WORDS`
sentences of the others sharing the most question words. Without an encoder (``meaning=None``)
every cosine is 0: the rules above by shared words alone.

A chosen sentence is completed by one more sentence of its message: one holding question words
it lacks, else the next one when it only restates the question (fewer than :data:`NOVEL` words of
its own) and the next says more. "When" questions carry the resolved date: a fact's date, or the
sentence's relative times resolved against the day it was said ("last week" = the week of Mon 4
Mar 2024); as a fact's date is only the day it was said, a current sentence whose relative time
resolves answers instead of the fact when it holds as many question words. The settings were
chosen on LoCoMo development conversations by cross-validation (benchmarks/offline_answers.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Protocol, Sequence

from .entities import STOP_WORDS
from .fulltext import compose
from .timeutil import relative_notes

__all__ = ["offline_answer", "content_words", "has_content_words", "stem", "DONT_KNOW", "Meaning"]

DONT_KNOW = "I don't know: nothing in memory answers the question."
#: a sentence sharing no content word with the question answers when its cosine reaches this
#: (the cosine from which such a sentence holds the answer as often as one sharing a word does)
MEANING_ALONE = 0.83
#: subtracted from a fact's cosine (its statement names its subject, which lifts the cosine to a
#: question about them; offline facts are fragments of what was said)
FACT_HANDICAP = 0.2
#: the weight of the share of the question's content words a candidate holds
WORD_WEIGHT = 0.1
#: the weight of holding what the question asks for (a time, a number, a name)
KIND_WEIGHT = 0.1
#: subtracted per rank of the evidence message (the retrieval's order breaks near-ties)
RANK_WEIGHT = 0.001
#: every sentence of this many best-ranked evidence messages is scored by meaning ...
MEANING_TOP = 2
#: ... and this many sentences of the others, those sharing the most question words
MEANING_WORDS = 4
#: a sentence with fewer own content words than this is completed by a next one with as many
NOVEL = 2

#: the cosines to the question of what was said, given as (speaker, sentence) pairs (the query
#: pipeline's encoder)
Meaning = Callable[[Sequence[tuple[str, str]]], Sequence[float]]

_WORD = re.compile(r"[A-Za-z0-9\u00C0-\u024F]+(?:'[a-z]+)?")
_CAP = re.compile(r"\b[A-Z][a-z\u00C0-\u024F]+(?:'s)?\b")
_SENT = re.compile(r"(?<=[.!?])\s+")
_QUESTION = frozenset("what when where which who whom whose why how did does do is was were are".split())
_SUFFIXES = ("ing", "ed", "es", "s", "e")
_FIRST = re.compile(r"\b(?:I|me|my|mine|myself|we|us|our|ours|ourselves)\b", re.IGNORECASE)
_SECOND = re.compile(r"\b(?:you|your|yours|yourself|yourselves)\b", re.IGNORECASE)
_MINE = re.compile(r"\b(?:my|mine|our|ours)\b", re.IGNORECASE)
_NUMBER = re.compile(r"\b(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|"
                     r"forty|fifty|hundred|thousand|dozen|several|few|couple)\b", re.IGNORECASE)
_TIME = re.compile(r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december|"
                   r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|today|tonight|tomorrow|"
                   r"ago|since|(?:19|20)\d\d)\b", re.IGNORECASE)
#: a capitalised word that does not start a sentence: a name
_NAME_IN = re.compile(r"(?<![.!?\"'(\[]\s)(?<!^)\b[A-Z][\w\u00C0-\u024F]+")
_WHICH_NAMED = re.compile(r"\b(?:which|what) (?:city|country|place|state|town|team|band|company|store|shop|"
                          r"book|movie|film|show|game|song|artist|author|brand|restaurant|school|name)\b")


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
    @property
    def score(self) -> float: ...


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


def _asks_for(question: str) -> str | None:
    """What the question asks for: a ``time``, a ``number``, a ``name``, or None."""
    q = question.lower()
    if _is_when(question):
        return "time"
    if any(k in q for k in ("how many", "how much", "how old", "how long", "how often")):
        return "number"
    if q.startswith(("who ", "whom ", "whose ", "where ")) or " name " in f" {q} " or _WHICH_NAMED.search(q):
        return "name"
    return None


def _holds(kind: str | None, text: str, said_at: datetime | None, question_words: set[str]) -> bool:
    """Whether ``text`` holds what the question asks for (a name not in the question)."""
    if kind == "time":
        return bool(_TIME.search(text)) or (said_at is not None and bool(relative_notes(text, said_at)))
    if kind == "number":
        return bool(_NUMBER.search(text))
    if kind == "name":
        return any(m.group(0).lower() not in question_words for m in _NAME_IN.finditer(text.strip()))
    return False


def _others_own(text: str, by_subject: bool, names_it: bool) -> bool:
    """Whether ``text`` speaks of another person's own thing: said by someone the question does
    not name, in the first person, neither to the listener ("you") nor naming anyone it names; or
    said by the person named to the listener ("your cat"), with nothing of their own ("my")."""
    second = bool(_SECOND.search(text))
    if by_subject:
        return second and not _MINE.search(text)
    return bool(_FIRST.search(text)) and not second and not names_it


def _fact_answer(f: FactLike, when: bool) -> str:
    if f.valid_to is not None and f.valid_from is not None:
        return f"{f.stmt} (from {f.valid_from:%Y-%m-%d} until {f.valid_to:%Y-%m-%d}; no longer current)"
    if when and f.valid_from is not None and not re.search(r"\d{4}-\d{2}-\d{2}", f.stmt):
        return f"{f.stmt} (since {f.valid_from:%Y-%m-%d})"
    return f.stmt


@dataclass
class _Said:
    """One sentence of an evidence message."""

    item: int              # rank of its message in the evidence
    index: int             # its place in the message
    text: str
    shared: set[str]       # question content words it holds
    own: int               # content words of its own (neither the question's nor a name)
    answers: bool          # not a question, and more than a name
    others: bool           # another person's own thing


@dataclass
class _Candidate:
    text: str
    shared: int            # question content words it holds
    held: int              # ... and names (a superseded candidate must hold more than current ones)
    others: bool
    stale: bool
    score: float
    dated: bool = False    # a sentence whose relative time resolves (for a "when" question)
    fact: FactLike | None = None
    evidence: EvidenceLike | None = None


def offline_answer(question: str, facts: Sequence[FactLike], evidence: Sequence[EvidenceLike],
                   sufficient: bool, meaning: Meaning | None = None) -> str:
    """The extractive answer (module docstring); ``meaning``: the cosines to the question of what
    was said, or None (shared words alone)."""
    if sufficient and facts:
        return facts[0].stmt
    people = {f.subject for f in facts} | {e.speaker for e in evidence}
    names = _names(question, people)
    qwords = content_words(question) - names
    lowq = {w.lower().removesuffix("'s") for w in _WORD.findall(question)}
    kind = _asks_for(question)
    stale_msgs = {m for f in facts if f.valid_to is not None for m in f.message_ids}
    cands: list[_Candidate] = []
    for f in facts:
        words = content_words(f.stmt)
        if names and not words & names:
            continue  # a fact about someone else
        shared = words & qwords
        if not (shared if qwords else words & names):
            continue  # a fact names its subject, which lifts its cosine: it must share a word
        cos = float(f.score) - FACT_HANDICAP if meaning is not None else 0.0
        holds = (f.valid_from is not None) if kind == "time" else _holds(kind, f.stmt, None, lowq)
        cands.append(_Candidate(f.stmt, len(shared), len(shared | (words & names)), False, f.valid_to is not None,
                                _blend(cos, len(shared), len(qwords), holds, 0), fact=f))
    said = _sentences(evidence, names, qwords)
    scored = _to_score(said) if meaning is not None else [s for s in said if s.answers]
    cosines: dict[tuple[int, int], float] = {}
    if meaning is not None and scored:  # one batch
        got = meaning([(evidence[s.item].speaker, s.text) for s in scored])
        cosines = {(s.item, s.index): float(c) for s, c in zip(scored, got, strict=True)}
    for s in scored:
        e = evidence[s.item]
        cos = cosines.get((s.item, s.index), 0.0)
        named = bool(names & (content_words(s.text) | {stem(e.speaker)}))  # a question of names only
        if not (s.shared or (not qwords and named) or cos >= MEANING_ALONE):
            continue
        unit = _completed(s, [x for x in said if x.item == s.item])
        text = " ".join(x.text for x in unit)
        shared = set().union(*(x.shared for x in unit))
        holds = _holds(kind, s.text, e.local_at, lowq)  # the sentence itself, not what completes it
        held = len(shared | (content_words(text) & names))
        cands.append(_Candidate(text, len(shared), held, s.others, bool(set(e.message_ids) & stale_msgs),
                                _blend(cos, len(shared), len(qwords), holds, s.item),
                                kind == "time" and bool(relative_notes(text, e.local_at)), evidence=e))
    if not cands:
        return DONT_KNOW
    fresh_best = max((c.held for c in cands if not c.stale), default=-1)
    # a superseded candidate holding more of the question than every current one names the old value
    best = max(cands, key=lambda c: (not c.others, (2 if c.held > fresh_best else 0) if c.stale else 1, c.score))
    if best.fact is not None and kind == "time":  # a fact gives the day it was said; a sentence its resolved day
        dated = [c for c in cands if c.dated and not c.others and not c.stale and c.shared >= best.shared]
        best = max(dated, key=lambda c: c.score, default=best)
    if best.fact is not None:
        return _fact_answer(best.fact, kind == "time")
    assert best.evidence is not None
    e = best.evidence
    notes = relative_notes(best.text, e.local_at) if kind == "time" else []
    dates = f" ({'; '.join(notes)})" if notes else ""
    return f"{e.speaker} ({e.local_at:%Y-%m-%d}): {best.text}{dates}"


def _blend(cos: float, shared: int, n_qwords: int, holds: bool, rank: int) -> float:
    return (cos + WORD_WEIGHT * (shared / n_qwords if n_qwords else 0.0) + (KIND_WEIGHT if holds else 0.0)
            - RANK_WEIGHT * rank)


def _sentences(evidence: Sequence[EvidenceLike], names: set[str], qwords: set[str]) -> list[_Said]:
    """Every sentence of the evidence, with what the rules need to know of it."""
    out: list[_Said] = []
    for i, e in enumerate(evidence):
        stmt = e.stmt.removesuffix(" …")  # an excerpt's mark (memsif_lite.offline_evidence)
        by_subject = stem(e.speaker) in names
        msg_others = bool(names) and _others_own(stmt, by_subject, bool(content_words(stmt) & names))
        for j, text in enumerate(x.strip() for x in _SENT.split(stmt) if x.strip()):
            words = content_words(text)
            others = msg_others or (bool(names) and _others_own(text, by_subject, bool(words & names)))
            out.append(_Said(i, j, text, words & qwords, len(words - qwords - names),
                             not text.endswith("?") and bool(words - names), others))
    return out


def _to_score(said: list[_Said]) -> list[_Said]:
    """The sentences scored by meaning: those of the :data:`MEANING_TOP` best-ranked messages, and
    the :data:`MEANING_WORDS` of the others sharing the most question words (ties: the
    better-ranked); only sentences that could answer."""
    top = [s for s in said if s.answers and s.item < MEANING_TOP]
    rest = sorted((s for s in said if s.answers and s.item >= MEANING_TOP and s.shared),
                  key=lambda s: (-len(s.shared), s.item, s.index))
    return top + rest[:MEANING_WORDS]


def _completed(s: _Said, message: list[_Said]) -> list[_Said]:
    """``s`` and, in message order, the sentence of its message holding the most question words
    it lacks; else the next sentence when ``s`` only restates the question and the next says more."""
    others = [x for x in message if x is not s and x.answers]
    extra = max(others, key=lambda x: (len(x.shared - s.shared), -abs(x.index - s.index)), default=None)
    if extra is not None and extra.shared - s.shared:
        return sorted((s, extra), key=lambda x: x.index)
    nxt = next((x for x in others if x.index == s.index + 1), None)
    if s.own < NOVEL and nxt is not None and nxt.own >= NOVEL:
        return [s, nxt]
    return [s]
