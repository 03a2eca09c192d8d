"""CoreFacts (paper §3.3): schema-guided facts written when a Topical Segment closes.

Candidates ``<subject, type, stmt, meta>`` come from the LLM (JSON, validated against the
schema; the segment's trajectory supplies earlier context) or, offline and whenever the LLM
fails, from a deterministic extractor of the clearest first-person statements (below). Before a
candidate is written, existing facts with the same subject and type (and the most similar ones)
are retrieved and one operation is chosen:

* **Add** a new fact;  **Update** an existing fact with compatible new evidence (statement
  rewritten, provenance extended);  **Merge** a duplicate into an existing fact (provenance
  extended);  **Supersede** an outdated fact: it gets ``valid_to`` and ``superseded_by`` and stays
  queryable for historical questions.

Offline the operation is: Merge for an exact duplicate (same subject, type, normalised
statement); Supersede when a slot (one kind of value: where someone lives, works *at*, works
*as*, their name, age, diet, a favourite, one habit) gets a different value from a later message
that states a change ("I moved to", "now", a new job, a promotion, "I stopped …") — every earlier
value of that slot then ends — or when the slot holds one value only (name, age, diet, a
favourite); else Add ("I live in De Pijp" after "I live in Amsterdam" refines, it does not
replace). Every change is written to ``fact_history``.

Whose facts a candidate may touch (message text comes from anyone, and an LLM may obey text
written in it): the operation is chosen among current facts of the candidate's own subject only
(subjects compared by :func:`same_subject`), and a chooser's answer naming any other fact falls
back to the offline rule. A candidate may Update, Merge into or Supersede an existing fact only
when every message it cites was said by its subject; a candidate about someone else ("Maya moved
to Porto", said by Mallory, is a legitimate fact about Maya) gets the offline rule's operation
— Merge into an exact duplicate, else Add — so what one speaker says never rewrites or ends
another's fact, whatever the LLM answers.

The offline extractor only turns first-person sentences of these shapes into facts, precision
first: a statement whose object would be cut mid-phrase (too long, ending in "like our", a
trailing "three years") is dropped, never stored truncated; first-person words inside the object
become third-person ("my parents" → "their parents"); the subject is the speaker:

* Identity: "I live in / I moved to / I'm from / I work as / I work at|for / I got a new job at /
  I got promoted to / my name is / I'm N years old / I'm vegetarian|vegan / I went vegan / I'm
  allergic to X / I have a X allergy / I don't|can't eat X / I have diabetes|asthma… / I'm
  lactose intolerant|diabetic|pregnant"
* Relation: "my sister|brother|mom|dad|wife|husband|partner|son|daughter|friend|dog|cat… (named) X"
* Preference: "I love|like|enjoy|adore|hate|prefer X", "my favourite K is X"
* Event: "I adopted|started|finished|joined|signed|visited|graduated|bought|won|ran|completed|
  quit|launched|published X", "I was diagnosed with X", family events ("my sister got married",
  "we had a baby", "my grandma passed away"), habits ("I started|stopped|quit|gave up X-ing",
  "I swim now"), plans with a date ("I'm going to X on Sunday / next week / in October"), dated
  with the message's date.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from . import prompts
from .config import FactType
from .db import Database, FactRow, MessageRow, from_messages
from .llm import LLM, Prompt
from .segments import StaleError
from .entities import normalise
from .fulltext import compose
from .timeutil import now_stored

__all__ = ["Candidate", "Operation", "FactExtractor", "OfflineFactExtractor", "LLMFactExtractor",
           "OperationChooser", "OfflineOperationChooser", "LLMOperationChooser", "CoreFactWriter", "FactDecision",
           "extract_offline", "same_subject"]

log = logging.getLogger("memsif_lite")

_STOP_AT = re.compile(r"\s+(?:and|but|because|so|which|who|since|when|while|although|though|if)\s+|[,;:()\"]|\s+-\s+"
                      r"|\s+(?:last|next|this|yesterday|today|tomorrow|ago|recently|now|soon|anymore|again)\b")
#: a plan's object keeps its time words; it ends at a clause boundary only
_PLAN_STOP = re.compile(r"\s+(?:and|but|because|so|which|who|since|while|although|though|if)\s+|[,;:()\"]|\s+-\s+")
_PLACE = re.compile(r"^(?:[A-Z][\w'.-]*)(?:\s+(?:(?:of|de|da|do|del|la|le|upon|on)\s+)?[A-Z][\w'.-]*)*")
_PRONOUN_START = re.compile(r"^(?:it|that|this|you|them|him|her|those|these|how|what|when|where|why|seeing|hearing|"
                            r"the idea|your|yours|doing that|to hear|too|so much|a lot)\b", re.I)
#: an object ending in one of these was cut mid-phrase ("another painting like our")
_DANGLING = frozenset("a an the my our your his her their its to of for with in on at and or but like about from by "
                      "that this these those some so as than into onto over under very really just more most "
                      "every each any all no not".split())
_VAGUE = re.compile(r"\b(?:you|it|that|this|them|there|something|anything|everything|stuff|things?)\b", re.I)
_TIME_TAIL = re.compile(r"(?:\s+(?:for|about|almost|over|nearly))?(?:\s+(?:\d+|a|an|one|two|three|four|five|six|seven|"
                        r"eight|nine|ten|a few|a couple of|several|many))?\s+(?:years?|months?|weeks?|days?)$", re.I)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_FILLER_TAIL = re.compile(r"\s+(?:either|too|as well|also|anyway|though|lol|haha)$", re.I)
_ABBREV = re.compile(r"\b(?:St|Dr|Mr|Mrs|Ms|Prof|Mt|Jr|Sr|vs|etc|e\.g|i\.e)\.$")
_WHEN = re.compile(rf"\b(?:tomorrow|tonight|(?:next|this) (?:week|weekend|month|year|{_DAYS})|on (?:{_DAYS})|"
                   rf"in (?:{_MONTHS})|on \d{{1,2}}(?:st|nd|rd|th)? (?:{_MONTHS})|in \d{{4}})\b", re.I)
_CHANGE = re.compile(r"\b(?:now|moved|relocated|new|switched|changed|no longer|anymore|these days|recently became)\b",
                     re.I)
_NOT_NAMES = frozenset("monday tuesday wednesday thursday friday saturday sunday january february march april may june "
                       "july august september october november december i last this next the and but".split())
_RELATIONS = ("sister|brother|mother|mom|mum|father|dad|wife|husband|partner|boyfriend|girlfriend|son|daughter|"
              "best friend|friend|colleague|boss|grandmother|grandma|grandfather|grandpa|aunt|uncle|cousin|"
              "niece|nephew|dog|cat|puppy|kitten|fiance|fiancee")
_FAMILY_EVENT = (r"got married|got engaged|got divorced|passed away|retired|was born|were born|"
                 r"had (?:a|our|her|his|their) (?:first |second |third )?(?:baby|son|daughter|child)(?: girl| boy)?|"
                 r"gave birth|(?:is|are|am) pregnant|(?:are|is) expecting(?: a baby)?")
_DIETS = "vegetarian|vegan|pescatarian|pescetarian|keto"
_CONDITIONS = (r"diabetes|type [12] diabetes|asthma|celiac disease|coeliac disease|epilepsy|arthritis|"
               r"high blood pressure|migraines|a heart condition|a bad back|a bad knee|ADHD|IBS")

#: what a formatter's part returns when the statement would be incomplete (it is then dropped)
_CUT = "\x00"
Fmt = Callable[[str, re.Match, str], str]
# (type, slot or None, regex, formatter(subject, match, date) -> stmt, the statement reports a change)
_RULES: list[tuple[str, str | None, re.Pattern, Fmt, bool]] = [
    ("Identity", "lives in",
     re.compile(r"\bI(?:'m| am)? ?(?:now |currently |still )?(?:live|living) in ((?:(?:St|Mt|Ft)\. )?[A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} lives in {_place(m.group(1))}", False),
    ("Identity", "lives in",
     re.compile(r"\bI(?:'ve| have)? ?(?:just |recently |finally )?(?:moved|relocated) to "
                r"((?:(?:St|Mt|Ft)\. )?[A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} lives in {_place(m.group(1))}", True),
    ("Identity", "is from", re.compile(r"\bI(?:'m| am) (?:originally )?from ([A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} is from {_place(m.group(1))}", False),
    ("Identity", "works as", re.compile(r"\bI(?:'m| am)? ?(?:now |currently )?work(?:ing)? as (an? [^.!?]*)", re.I),
     lambda s, m, d: f"{s} works as {_obj(m.group(1))}", False),
    ("Identity", "works as", re.compile(r"\bI (?:just |recently |finally )?got promoted to ([^.!?]*)"),
     lambda s, m, d: f"{s} works as {_obj(m.group(1))}", True),
    ("Identity", "works at", re.compile(r"\bI(?:'m| am)? ?(?:now |currently )?work(?:ing)? (?:at|for) "
                                        r"((?:(?:St|Dr|Mt|Ft)\. )?[^.!?]*)", re.I),
     lambda s, m, d: f"{s} works at {_obj(m.group(1))}", False),
    ("Identity", "works at",
     re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:got|started|landed|accepted|began) (?:a |my )?"
                r"(?:new )?(?:job|position|role)(?: as an? [a-z ]+?)? (?:at|with|for) ([^.!?]*)"),
     lambda s, m, d: f"{s} works at {_obj(m.group(1))}", True),
    ("Identity", "works at",
     re.compile(r"\bI(?:'ve| have)? (?:just |recently )?(?:started|began) working (?:at|for) "
                r"((?:(?:St|Dr|Mt|Ft)\. )?[^.!?]*)"),
     lambda s, m, d: f"{s} works at {_obj(m.group(1))}", True),
    ("Identity", "name", re.compile(r"\b[Mm]y name is ([A-Z][a-z]+(?: [A-Z][a-z]+)?)"),
     lambda s, m, d: f"{s}'s name is {m.group(1)}", False),
    ("Identity", "age", re.compile(r"\bI(?:'m| am) (\d{1,3}) years old", re.I),
     lambda s, m, d: f"{s} is {m.group(1)} years old (as of {d})", False),
    ("Identity", "diet", re.compile(rf"\bI(?:'m| am) (?:now |still |a |fully |strictly )*({_DIETS})\b", re.I),
     lambda s, m, d: f"{s} is {m.group(1).lower()}", False),
    ("Identity", "diet", re.compile(rf"\bI (?:went|became|have become|'ve become|turned) (?:a |fully )?({_DIETS})\b",
                                    re.I),
     lambda s, m, d: f"{s} is {m.group(1).lower()}", True),
    ("Identity", None, re.compile(r"\bI(?:'m| am) (gluten[- ]free|dairy[- ]free|lactose[- ]intolerant|"
                                  r"diabetic|asthmatic|epileptic|pregnant)\b", re.I),
     lambda s, m, d: f"{s} is {m.group(1).lower()}", False),
    ("Identity", None, re.compile(r"\bI(?:'m| am) (?:severely |very |really |deathly |quite )?allergic to ([^.!?]+)",
                                  re.I),
     lambda s, m, d: f"{s} is allergic to {_obj(m.group(1))}", False),
    ("Identity", None, re.compile(r"\bI have (?:an? |a severe |a serious )?([a-z]+) allergy\b", re.I),
     lambda s, m, d: f"{s} is allergic to {m.group(1).lower()}", False),
    ("Identity", None, re.compile(r"\bI (?:don't|do not|no longer|never|can't|cannot|can not) (eat|drink) ([^.!?]+)",
                                  re.I),
     lambda s, m, d: f"{s} does not {m.group(1).lower()} {_obj(m.group(2), 5)}", False),
    ("Identity", None, re.compile(rf"\bI(?:'ve| have)(?: been diagnosed with| got| developed)? ({_CONDITIONS})\b"),
     lambda s, m, d: f"{s} has {m.group(1)}", False),
    ("Event", None, re.compile(r"\bI(?:'ve| have| was)? (?:just |recently )?(?:been )?diagnosed with ([^.!?]+)", re.I),
     lambda s, m, d: f"{s} was diagnosed with {_obj(m.group(1))} (around {d})", False),
    ("Relation", None, re.compile(rf"\b[Mm]y ({_RELATIONS}) (?:(?:is )?(?:named|called) )?([A-Z][a-z]+)\b"),
     lambda s, m, d: f"{s} has a {m.group(1).lower()} named {_name(m.group(2))}", False),
    ("Event", None, re.compile(rf"\b(I|[Ww]e|[Mm]y (?:{_RELATIONS})) (?:just |recently |finally )?({_FAMILY_EVENT})\b"),
     lambda s, m, d: f"{_who(s, m.group(1))} {_family(m.group(2))} (around {d})", False),
    ("Preference", None,
     re.compile(r"\bI (?:really |absolutely |just |truly )?(love|like|enjoy|adore|hate|dislike|prefer) ([^.!?]+)"),
     lambda s, m, d: f"{s} {_verb3(m.group(1))} {_obj(m.group(2))}", False),
    ("Preference", "favourite", re.compile(r"\bmy favou?rite ([a-z]+(?: [a-z]+)?) is ([^.!?]+)", re.I),
     lambda s, m, d: f"{s}'s favourite {m.group(1).lower()} is {_obj(m.group(2))}", False),
    ("Event", "habit", re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(stopped|quit|gave up|no longer) "
                                  r"([a-z]+ing\b[^.!?]*)"),
     lambda s, m, d: f"{s} {_stopped(m.group(1))} {_obj(m.group(2), 4)} (around {d})", True),
    ("Event", "habit", re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(started|took up|began) "
                                  r"([a-z]+ing\b[^.!?]*)"),
     lambda s, m, d: f"{s} started {_obj(m.group(2), 4)} (around {d})", False),
    ("Event", "habit", re.compile(r"(?:^|[,;]\s*|\band )(?:now )?I ((?!am\b|know\b|think\b|see\b|guess\b|mean\b|hope\b)"
                                  r"[a-z]{3,}) now\b"),
     lambda s, m, d: f"{s} {_verb3(m.group(1))} now (as of {d})", True),
    ("Event", None,
     re.compile(r"\bI (?:just |recently |finally |have |'ve )?(adopted|finished|joined|signed|visited|graduated from|"
                r"bought|won|ran|completed|launched|published|(?:started|quit)(?! [a-z]+ing\b)) ([^.!?]+)"),
     lambda s, m, d: f"{s} {m.group(1)} {_obj(m.group(2))} (around {d})", False),
    ("Event", None, re.compile(r"\bI(?:'m| am) (?:going|planning|hoping|scheduled|supposed) to ([^.!?]+)|"
                               r"\bI(?:'ll| will| plan to) ([^.!?]+)"),
     lambda s, m, d: f"{s} plans to {_plan(m.group(1) or m.group(2))}", False),
]


def same_subject(a: str, b: str) -> bool:
    """One subject written two ways: case and Unicode composition aside ("maya" is "Maya")."""
    return compose(a).lower() == compose(b).lower()


def _obj(text: str, max_words: int = 8) -> str:
    """The object phrase up to a clause boundary; "" when it is cut mid-phrase or too long (so
    the statement is dropped rather than stored truncated)."""
    head = _STOP_AT.split(text.strip(), maxsplit=1)[0].strip().rstrip(" '\"")
    head = _FILLER_TAIL.sub("", _TIME_TAIL.sub("", head)).strip()
    words = head.split()
    if not words or len(words) > max_words or words[-1].lower() in _DANGLING:
        return _CUT
    return _third_person(" ".join(words))


def _plan(text: str) -> str:
    head = _PLAN_STOP.split(text.strip(), maxsplit=1)[0].strip()
    words = head.split()
    if (not words or len(words) > 12 or words[-1].lower() in _DANGLING or _VAGUE.search(head)
            or not _WHEN.search(head)):
        return _CUT
    return _third_person(head)


def _third_person(text: str) -> str:
    """First-person words inside an object, as a third person would report them."""
    return re.sub(r"\b(my|me|myself)\b", lambda m: {"my": "their", "me": "them", "myself": "themselves"}[m.group(1)],
                  text)


def _place(text: str) -> str:
    m = _PLACE.match(text.strip())
    return m.group(0) if m else _obj(text, 4)


def _name(word: str) -> str:
    return _CUT if word.lower() in _NOT_NAMES else word


def _who(speaker: str, who: str) -> str:
    w = who.lower()
    return speaker if w in ("i", "we") else f"{speaker}'s {w.split(' ', 1)[1]}"


def _family(event: str) -> str:
    e = event.lower()
    if e.startswith(("am ", "are ", "is ")):
        return "is " + e.split(" ", 1)[1]
    return re.sub(r"^had (?:our|her|his|their) ", "had a ", e).replace("were born", "was born")


def _stopped(verb: str) -> str:
    return "stopped" if verb == "no longer" else verb


def _sentences(text: str) -> list[str]:
    """Sentences (and lines) of a message; "St. Mary's" does not end one."""
    out: list[str] = []
    for piece in re.split(r"(?<=[.!?])\s+|\n", text):
        if out and _ABBREV.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _verb3(v: str) -> str:
    v = v.lower()
    return v + ("es" if v.endswith(("s", "sh", "ch", "x")) else "s")


def _activity(text: str) -> str:
    """The activity a habit statement is about, normalised ("running"/"runs"/"run" → "run")."""
    w = re.sub(r"^(?:stopped|started|quit|gave up|took up|began)\s+", "", text.lower()).split()
    word = w[0] if w else ""
    for suf in ("ing", "es", "s"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "aeiousl":
        word = word[:-1]
    return word


@dataclass(frozen=True)
class Candidate:
    """A CoreFact candidate ``<subject, type, stmt, meta>`` with its provenance."""

    subject: str
    type: str
    stmt: str
    message_ids: tuple[int, ...]
    at: str                       # time of the (latest) supporting message
    slot: str | None = None
    origin: str = "rule"
    #: the statement reports a change of its slot ("I moved to", "now", a new job, "I stopped"):
    #: only then does it supersede a different earlier value (else it may refine it)
    change: bool = False

    def to_json(self) -> str:
        return json.dumps({"subject": self.subject, "type": self.type, "stmt": self.stmt,
                           "message_ids": list(self.message_ids), "at": self.at, "slot": self.slot,
                           "origin": self.origin, "change": self.change}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Candidate":
        d = json.loads(text)
        return cls(d["subject"], d["type"], d["stmt"], tuple(d["message_ids"]), d["at"], d["slot"], d["origin"],
                   bool(d.get("change", False)))


@dataclass(frozen=True)
class Operation:
    """The decision for one candidate: ``add`` | ``update`` | ``merge`` | ``supersede``, the
    existing fact it applies to, and the statement to store."""

    name: str
    target: int | None
    stmt: str


def extract_offline(messages: Sequence[MessageRow], schema: Sequence[FactType]) -> list[Candidate]:
    """Candidates from a segment's messages; only types present in the schema. A statement that
    could only be stored cut mid-phrase is not extracted at all."""
    allowed = {t.name.lower(): t.name for t in schema}
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for msg in messages:
        mid, speaker, text, at = msg.id, msg.speaker, msg.text, msg.at
        day = at[:10]
        for sentence in _sentences(text):
            for ftype, slot, rx, fmt, change in _RULES:
                if ftype.lower() not in allowed:
                    continue
                for m in rx.finditer(sentence):
                    obj = next((g for g in reversed(m.groups()) if g), "")
                    if ftype != "Identity" and (not obj or _PRONOUN_START.match(obj.strip())):
                        continue
                    stmt = fmt(speaker, m, day).strip()
                    if _CUT in stmt or len(stmt.split()) < 3:
                        continue
                    key = (normalise(stmt), speaker.lower())
                    if key in seen:
                        continue
                    seen.add(key)
                    slot_key = slot
                    if slot == "favourite":
                        slot_key = "favourite " + m.group(1).lower()
                    elif slot == "habit":
                        slot_key = "habit " + _activity(stmt.split(" ", 1)[1].split(" (")[0])
                    out.append(Candidate(speaker, allowed[ftype.lower()], stmt, (mid,), at, slot_key, "rule",
                                         bool(slot_key) and (change or bool(_CHANGE.search(sentence)))))
    return out


# -- extraction: protocol, offline rule, LLM rule falling back to it ----------------------------------
class FactExtractor(Protocol):
    def extract(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> list[Candidate]: ...


class OfflineFactExtractor:
    """The documented first-person patterns above."""

    def __init__(self, schema: Sequence[FactType]):
        self.schema = tuple(schema)

    def extract(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> list[Candidate]:
        return extract_offline(messages, self.schema)


class LLMFactExtractor:
    """The LLM reads the closed segment (and earlier messages of its trajectory); the offline
    extractor is used when the call fails."""

    def __init__(self, llm: LLM, schema: Sequence[FactType], fallback: FactExtractor):
        self.llm, self.schema, self.fallback = llm, tuple(schema), fallback

    def prompt(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> Prompt[Any]:
        return prompts.extract_facts([f"[{m.at[:10]}] {m.speaker}: {m.text[:600]}" for m in messages],
                                     [f"[{m.at[:10]}] {m.speaker}: {m.text[:400]}" for m in context], self.schema)

    def extract(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> list[Candidate]:
        got = self.llm.complete(self.prompt(messages, context))
        if got is None:
            return self.fallback.extract(messages, context)
        return [Candidate(subj, ftype, stmt, tuple(messages[i].id for i in lines),
                          max(messages[i].at for i in lines), None, "llm")
                for subj, ftype, stmt, lines in got]


# -- the operation: protocol, offline rule, LLM rule falling back to it --------------------------------
class OperationChooser(Protocol):
    def choose(self, c: Candidate, related: Sequence[FactRow]) -> Operation: ...


#: slots whose new value always replaces the old one (others need a statement of change)
ALWAYS_SINGLE = frozenset({"name", "age", "diet"})


class OfflineOperationChooser:
    """Merge an exact duplicate; Supersede an earlier value of the same slot (same kind: "lives
    in" vs "works at" vs "works as" vs one habit) when the new statement reports a change, or
    the slot holds one value only (name, age, diet, a favourite); else Add: a plain "I live in
    De Pijp" after "I live in Amsterdam" refines, it does not replace, and a value never
    supersedes one from the same moment."""

    def choose(self, c: Candidate, related: Sequence[FactRow]) -> Operation:
        key = normalise(c.stmt)
        for r in related:
            if same_subject(r.subject, c.subject) and r.type == c.type and normalise(r.stmt) == key:
                return Operation("merge", r.id, r.stmt)
        if c.slot:
            for r in related:
                if (same_subject(r.subject, c.subject) and r.slot == c.slot and r.valid_from < c.at
                        and (c.change or c.slot in ALWAYS_SINGLE or c.slot.startswith("favourite "))):
                    return Operation("supersede", r.id, c.stmt)
        return Operation("add", None, c.stmt)


class LLMOperationChooser:
    """The LLM chooses among the related facts; the offline rule when the call fails."""

    def __init__(self, llm: LLM, fallback: OperationChooser):
        self.llm, self.fallback = llm, fallback

    def choose(self, c: Candidate, related: Sequence[FactRow]) -> Operation:
        if not related:
            return self.fallback.choose(c, related)
        got = self.llm.complete(prompts.fact_operation(c.subject, c.type, c.stmt, [r.stmt for r in related]))
        if got is None:
            return self.fallback.choose(c, related)
        name, target, stmt = got  # the prompt's reply type admits only the numbers of ``related``
        return Operation(name, related[target].id if target is not None else None, stmt or c.stmt)


@dataclass(frozen=True)
class FactDecision:
    """The operation chosen for one candidate (with no transaction open: the chooser may be an
    LLM), the candidate's vector, and the related facts (id, stmt) it was chosen against."""

    op: Operation
    vector: np.ndarray
    related: tuple[tuple[int, str], ...]


class CoreFactWriter:
    """Extracts candidates from a closed segment and applies Add/Update/Merge/Supersede."""

    def __init__(self, db: Database, *, extractor: FactExtractor, chooser: OperationChooser,
                 embed_passages: Callable[[Sequence[str]], np.ndarray]):
        self.db = db
        self.extractor = extractor
        self.chooser = chooser
        self.embed_passages = embed_passages

    def extract(self, segment_id: int) -> list[Candidate]:
        """The CoreFact candidates of a closed segment (the extractor may be an LLM)."""
        structure = self.db.structure
        return self.extractor.extract(structure.segment_messages(segment_id),
                                      structure.trajectory_context(segment_id, 6))

    def extract_prompt(self, segment_id: int) -> Prompt[Any] | None:
        """The prompt ``extract`` will send for this segment (None: the extractor asks no LLM),
        so that the worker can ask it ahead, beside other segments' prompts."""
        if not isinstance(self.extractor, LLMFactExtractor):
            return None
        structure = self.db.structure
        return self.extractor.prompt(structure.segment_messages(segment_id),
                                     structure.trajectory_context(segment_id, 6))

    def related(self, c: Candidate, vec: np.ndarray, k: int = 5) -> list[FactRow]:
        """Current facts of the candidate's subject: those of its type, plus the most similar ones
        (no other subject's fact is ever shown to the chooser)."""
        facts = self.db.facts
        rows = [r for r in facts.current_like(c.subject, c.type) if same_subject(r.subject, c.subject)]
        have = {r.id for r in rows}
        for fid, _ in facts.nearest(vec, k):
            if fid not in have:
                r = facts.current(fid)
                if r is not None and same_subject(r.subject, c.subject):
                    rows.append(r)
                    have.add(fid)
        return rows[:k + 5]

    def decide(self, c: Candidate) -> FactDecision:
        """The operation for a candidate (module docstring: only facts of its own subject, and only
        an exact-duplicate Merge or an Add when someone else said it), whatever the chooser says."""
        vec = self.embed_passages([c.stmt])[0]
        related = self.related(c, vec)
        offline = OfflineOperationChooser()
        if not self._said_by_subject(c):
            op = offline.choose(c, related)
        else:
            op = self.chooser.choose(c, related)
            if op.name != "add" and op.target not in {r.id for r in related}:
                log.warning("fact operation %s on fact %s refused: not a current fact of %r", op.name, op.target,
                            c.subject)
                op = offline.choose(c, related)
        return FactDecision(op, vec, tuple((r.id, r.stmt) for r in related))

    def _said_by_subject(self, c: Candidate) -> bool:
        """Whether every message the candidate cites was said by its subject."""
        got = self.db.messages.many(list(c.message_ids))
        return bool(c.message_ids) and all(m in got and same_subject(got[m].speaker, c.subject)
                                           for m in c.message_ids)

    def apply(self, c: Candidate, d: FactDecision) -> int:
        """Write the decision (inside a write transaction); returns the fact id touched. Raises
        StaleError if a related fact changed since the decision."""
        facts = self.db.facts
        for fid, stmt in d.related:
            row = facts.current(fid)
            if row is None or row.stmt != stmt:
                raise StaleError("a related fact changed")
        op, now = d.op, now_stored()
        if op.name in ("merge", "update") and op.target is not None:
            if op.name == "update" and op.stmt != facts.stmt(op.target):
                facts.rewrite(op.target, op.stmt, self.embed_passages([op.stmt])[0], now)
            else:
                facts.touch(op.target, now)
            facts.add_sources(op.target, c.message_ids)
            facts.log(op.target, op.name, facts.stmt(op.target), from_messages(c.message_ids), now)
            return op.target
        vec = d.vector if op.stmt == c.stmt else self.embed_passages([op.stmt])[0]
        fid = facts.insert(subject=c.subject, ftype=c.type, stmt=op.stmt, slot=c.slot, valid_from=c.at, now=now,
                           origin=c.origin, vector=vec, message_ids=c.message_ids)
        if op.name == "supersede" and op.target is not None:
            targets = [op.target] + [r.id for r in facts.current_like(c.subject, c.type) if c.change and c.slot
                                     and r.slot == c.slot and r.id not in (op.target, fid) and r.valid_from < c.at]
            for target in targets:  # a stated change ends every earlier value of the slot
                facts.supersede(target, by=fid, valid_to=c.at, now=now)
                facts.log(target, "superseded", facts.stmt(target), f"superseded by fact {fid}", now)
                facts.log(fid, "supersede", op.stmt, f"supersedes fact {target}", now)
        else:
            facts.log(fid, "add", op.stmt, None, now)
        return fid
