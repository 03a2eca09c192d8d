"""The offline CoreFact extractor (paper §3.3, without an LLM): candidates
``<subject, type, stmt, meta>`` from the clearest first-person statements of a closed segment.

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
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from .config import FactType
from .db import MessageRow
from .entities import normalise

__all__ = ["Candidate", "extract_offline"]

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
