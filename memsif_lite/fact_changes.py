"""What a stated change ends, offline (paper §3.3's Supersede for changes said in passing).

A CoreFact candidate that reports a change ("I stopped climbing", "I'm no longer vegetarian",
"I'm smoking again", "I moved to York") supersedes, besides the earlier values of its own slot
(:class:`memsif_lite.core_facts.OfflineOperationChooser`), the current facts of its subject that
it contradicts — never another subject's, and only facts that describe a state (not a dated
event: "Sam joined a climbing gym" stays true history):

* a *negation* ("no longer", "stopped", "quit", "gave up", "not … anymore") ends the positive
  facts about the same thing: every key word of the negated statement is a key word of the fact
  ("Sam stopped climbing" ends "Sam loves climbing"), among the types :data:`NEGATION_ENDS` lists;
* a positive change ("again", "now", "moved to", a new job) ends the negations about the same
  thing ("Sam is smoking again" ends "Sam no longer smokes");
* a candidate's explicit ``ends`` phrases end positive facts of its own type: the diets "I had a
  steak again" breaks, what "instead of running" / "switched from running" replaces.

Key words are a statement's content words without its subject, its date, the words that say the
change, and light verbs ("playing tennis" and "plays tennis" share "tennis"); a statement whose
key words are all light names nothing to match.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Protocol, Sequence, TypeVar

from .entities import STOP_WORDS, normalise

__all__ = ["stem", "key_words", "is_negation", "is_state", "ends_any", "ended_by", "LIGHT", "NEGATION_ENDS"]

_NEGATION = re.compile(r"\b(?:no longer|not|never|stopped|quit|gave up|given up)\b", re.I)
_DATE_TAIL = re.compile(r"\s*\((?:around|as of|since) [^)]*\)\s*$")
_WORD = re.compile(r"[a-z0-9\u00C0-\u024F]+(?:'[a-z]+)?")
#: words that say that something changed, not what
_CHANGE_WORDS = frozenset("longer stopped stop quit gave given started start began begun took switched switch instead "
                          "again now anymore eats eat has have had".split())
#: verbs whose object names the activity ("playing tennis"): they never match on their own
LIGHT = frozenset("go do play learn take study practic practis watch read eat drink mak hav use get work attend "
                  "teach visit join".split())
#: the types of fact a negation of each type ends (a habit's end also ends a liking of it)
NEGATION_ENDS = {"Identity": ("Identity", "Relation"), "Relation": ("Relation",),
                 "Event": ("Event", "Preference"), "Preference": ("Preference",)}


class FactLike(Protocol):
    @property
    def subject(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def stmt(self) -> str: ...
    @property
    def slot(self) -> str | None: ...
    @property
    def valid_from(self) -> str: ...


F = TypeVar("F", bound=FactLike)


def stem(word: str) -> str:
    """A word without its ending ("running"/"runs"/"run" → "run", "dancing"/"dance" → "danc")."""
    for suf in ("ing", "es", "s", "e"):
        if word.endswith(suf) and len(word) - len(suf) >= (2 if suf == "ing" else 3):
            word = word[: -len(suf)]
            break
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]
    return word


def _body(stmt: str, subject: str) -> str:
    text = _DATE_TAIL.sub("", stmt)
    if text.lower().startswith(subject.lower()):
        text = text[len(subject):]
    return text.lower()


def key_words(stmt: str, subject: str = "") -> frozenset[str]:
    """The stems that say what a statement is about (module docstring): no light verb."""
    words = {stem(w.removesuffix("'s")) for w in _WORD.findall(_body(stmt, subject))
             if w not in STOP_WORDS and w not in _CHANGE_WORDS}
    return frozenset(words - LIGHT - {stem(w) for w in _CHANGE_WORDS})


def is_negation(stmt: str, subject: str) -> bool:
    """Whether a statement says that something no longer holds ("Sam stopped climbing")."""
    return bool(_NEGATION.search(_body(stmt, subject)))


def is_state(f: FactLike) -> bool:
    """A fact that can stop holding: not a dated event, except a habit."""
    return f.type != "Event" or (f.slot or "").startswith("habit")


def ends_any(subject: str, stmt: str, change: bool, ends: Iterable[str]) -> bool:
    """Whether :func:`ended_by` can find anything for this candidate: a stated change with key
    words, or an ``ends`` phrase with key words (else the caller need not read the facts)."""
    return bool(change and key_words(stmt, subject)) or any(key_words(p) for p in ends)


def ended_by(subject: str, ftype: str, stmt: str, change: bool, ends: Iterable[str], at: str,
             facts: Sequence[F]) -> list[F]:
    """The facts among ``facts`` (current facts of the candidate's subject: the caller chooses
    them) that a candidate — its subject, type, statement, whether it states a change, its ``ends``
    phrases, when it was said — ends (module docstring)."""
    negation = is_negation(stmt, subject)
    own = key_words(stmt, subject) if change else frozenset()
    phrases = [k for k in (key_words(p) for p in ends) if k]
    key = normalise(stmt)
    out = []
    for f in facts:
        if f.valid_from >= at or not is_state(f):
            continue
        f_key, words, f_negation = _reading(f.stmt, f.subject)
        if f_key == key:
            continue
        if own and own <= words and f_negation != negation and (
                not negation or f.type in NEGATION_ENDS.get(ftype, (ftype,))):
            out.append(f)
        elif not f_negation and f.type == ftype and any(p <= words for p in phrases):
            out.append(f)
    return out


@lru_cache(maxsize=1 << 15)
def _reading(stmt: str, subject: str) -> tuple[str, frozenset[str], bool]:
    """A fact's normalised statement, key words and whether it is a negation: ``ended_by`` reads
    every current fact of a subject for each candidate, and a fact's statement rarely changes."""
    return normalise(stmt), key_words(stmt, subject), is_negation(stmt, subject)
