"""The offline CoreFact extractor (paper §3.3, without an LLM): candidates
``<subject, type, stmt, meta>`` from the clearest first-person statements of a closed segment.

The offline extractor only turns first-person sentences of these shapes into facts, read as a
phone or a chat app types them too (:func:`typed_plainly`: "I’m", "im", "i dont"), precision
first: a statement whose object would be cut mid-phrase (too long, ending in "like our", a
trailing "three years") is dropped, never stored truncated; first-person words inside the object
become third-person ("my parents" → "their parents"); the subject is the speaker:

* Identity: "I live in / I|we moved (back) to / I'm from / I work as / I work at|for / I got a new
  job at / I accepted the offer from / I quit|left my job (at) / I got promoted to / my name is /
  I'm N years old / I'm vegetarian|vegan / I went|switched to vegan / I'm allergic to X / I have a
  X allergy / I don't|can't eat X / I have diabetes|asthma… / I'm lactose intolerant|diabetic|
  pregnant"
* Relation: "my sister|brother|mom|dad|wife|husband|partner|son|daughter|friend|dog|cat… (named) X",
  "I have|I've got a dog… named X", "my dog's name is X"
* Preference: "I love|like|enjoy|adore|hate|prefer X", "my favourite K is X"
* Event: "I adopted|started|finished|joined|signed|visited|graduated|bought|won|ran|completed|
  quit|launched|published X", "I was diagnosed with X", family events ("my sister got married",
  "we had a baby", "my grandma passed away"), habits ("I started|stopped|quit|gave up X-ing",
  "I swim now"), plans with a date ("I'm going to X on Sunday / next week / in October").
* Changes said in passing (:mod:`memsif_lite.fact_changes` says what each ends): "I'm no longer /
  not … anymore / the X thing is over" (a diet, a habit, "on the team", "with Tom"), "I no
  longer live|work in|at X", "I no longer X / don't X anymore" (a habit), "I'm X-ing again", "I
  had a steak again" (the diets it breaks, :data:`_BREAKS`), "I'm doing X instead (of Y)", "I
  switched (from Y) to X". They carry ``change``, and what else they end in ``ends``.

An event or a change is dated by the past time its clause names, resolved against the speaker's
local date ("I signed the lease last Saturday" said on Sat 16 March 2024 → 9 March; "yesterday",
"last night", "two weeks ago", "last month", "in July": :func:`memsif_lite.timeutil.stated_times`):
``Candidate.since``, the fact's ``valid_from``; else the message's date. A plan keeps the date it
was made, and a lasting state the date it was said (in "a trip last year for my daughter Sara's
birthday" the year is not the daughter's).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, NamedTuple, Sequence

from .config import FactType
from .db import MessageRow
from .entities import normalise
from .fact_changes import LIGHT, stem
from .timeutil import from_stored, local_time, plain_time_words, stated_times, to_stored

__all__ = ["Candidate", "extract_offline", "stated_starts", "typed_plainly"]

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
                        r"eight|nine|ten|a few|few|a couple of|a couple|couple of|couple|several|many))?"
                        r"\s+(?:years?|months?|weeks?|days?)$", re.I)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_FILLER_TAIL = re.compile(r"\s+(?:either|too|as well|also|anyway|though|lol|haha|btw|tbh|fyi|ngl|imo)$", re.I)
#: emoji and other pictographs (with their joiners and variation selectors) ending a phrase
_SYMBOL_TAIL = re.compile("[\\s\u2600-\u27bf\u2b00-\u2bff\ufe0f\u200d\U0001f000-\U0001faff]+$")
#: what follows "I'm going to" when it names where, not what: a determiner
_GOING_TO = frozenset("the a an my our his her their some".split())
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

#: foods that end a diet when eaten "again" (the vocabulary of :data:`_BREAKS`)
_FOODS = {"meat": "meat|steaks?|burgers?|bacon|ham|beef|pork|chicken|lamb|sausages?|salami|turkey|ribs",
          "fish": "fish|salmon|tuna|sushi|shrimps?|prawns?|seafood",
          "dairy": "cheese|milk|butter|yogh?urt|ice cream|dairy",
          "eggs": "eggs?|omelett?es?"}
#: the diets each kind of food ends
_BREAKS = {"meat": ("vegetarian", "vegan", "pescatarian", "pescetarian"), "fish": ("vegetarian", "vegan"),
           "dairy": ("vegan",), "eggs": ("vegan",)}
_FOOD = "|".join(_FOODS.values())
#: -ing words that name no habit ("I'm feeling sick again", "I'm trying again")
_NOT_HABITS = ("feeling|thinking|trying|getting|going|saying|looking|hoping|wondering|starting|being|having|talking|"
               "asking|doing|telling|seeing|watching|waiting|planning|using|making|coming")
#: what a state change's object may start with when it is not a habit, a diet or a place
_STATE_START = r"(?:a|an|the|on|in|at|with|part of|a member of)\b"
#: verbs that "I no longer …" / "I don't … anymore" does not make a habit of
_NOT_HABIT_VERBS = ("live|work|eat|drink|know|think|want|have|need|like|love|care|mind|remember|see|get|feel|mean|"
                    "believe|understand|trust|talk|speak|hear|recall|recognize|recognise|exist|use")

#: what a formatter's part returns when the statement would be incomplete (it is then dropped)
_CUT = "\x00"
Fmt = Callable[[str, re.Match, str], str]
Ends = Callable[[re.Match], tuple[str, ...]]


class _Rule(NamedTuple):
    type: str
    slot: str | None              # "habit": the activity's; "favourite": the kind's
    rx: re.Pattern
    fmt: Fmt                      # (subject, match, date) -> statement
    change: bool = False          # the statement reports a change of its slot
    ends: Ends | None = None      # what else it ends: phrases naming the state facts it replaces


_PLAN = re.compile(r"\bI(?:'m| am) (?:going|planning|hoping|scheduled|supposed) to ([^.!?]+)|"
                   r"\bI(?:'ll| will| plan to) ([^.!?]+)")
#: where a clause ends: a statement takes its time from its own clause
_CLAUSE = re.compile(r"[,;:]|\s(?:and|but|because|so|while|though|although|then)\s|\s-\s")

#: (type, slot, regex, formatter, change[, ends]): the fields of :class:`_Rule`
_TABLE: list[tuple[Any, ...]] = [
    ("Identity", "lives in",
     re.compile(r"\bI(?:'m| am)? ?(?:now |currently |still )?(?:live|living) in ((?:(?:St|Mt|Ft)\. )?[A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} lives in {_place(m.group(1))}", False),
    ("Identity", "lives in",
     re.compile(r"\b(?:I|[Ww]e)(?:'ve| have)? ?(?:just |recently |finally )?(?:moved|relocated)(?: back)? to "
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
     re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:got|started|landed|accepted|began) (?:a |my |the )?"
                r"(?:new )?(?:job|position|role)(?: as an? [a-z ]+?)? (?:at|with|for) ([^.!?]*)"),
     lambda s, m, d: f"{s} works at {_obj(m.group(1))}", True),
    ("Identity", "works at",
     re.compile(r"\bI(?:'ve| have)? (?:just |recently )?(?:started|began) working (?:at|for) "
                r"((?:(?:St|Dr|Mt|Ft)\. )?[^.!?]*)"),
     lambda s, m, d: f"{s} works at {_obj(m.group(1))}", True),
    ("Identity", "works at",
     re.compile(r"\bI(?:'ve| have)? (?:just |finally )?accepted (?:the |an |a |their )?(?:new )?(?:job )?offer "
                r"(?:from|at|with) ([A-Z][^.!?]*)"),
     lambda s, m, d: f"{s} works at {_place(m.group(1))}", True),
    ("Identity", "works at",
     re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(?:quit|left) (?:my|the) (?:job|position|role)"
                r"(?: (?:at|with) ([A-Z][^.!?]*))?"),
     lambda s, m, d: f"{s} quit their job{' at ' + _place(m.group(1)) if m.group(1) else ''} (around {d})", True),
    ("Identity", None,
     re.compile(r"\bI no longer (live|work)s? ((?:in|at|for|as) [^.!?]+)|"
                r"\bI (?:don't|do not) (live|work) ((?:in|at|for|as) [^.!?]+?) any ?more\b"),
     lambda s, m, d: f"{s} no longer {_verb3(m.group(1) or m.group(3))} {_obj(m.group(2) or m.group(4), 5)} "
                     f"(as of {d})", True),
    ("Identity", "name", re.compile(r"\b[Mm]y name is ([A-Z][a-z]+(?: [A-Z][a-z]+)?)"),
     lambda s, m, d: f"{s}'s name is {m.group(1)}", False),
    ("Identity", "age", re.compile(r"\bI(?:'m| am) (\d{1,3}) years old", re.I),
     lambda s, m, d: f"{s} is {m.group(1)} years old (as of {d})", False),
    ("Identity", "diet", re.compile(rf"\bI(?:'m| am) (?:now |still |a |fully |strictly )*({_DIETS})\b", re.I),
     lambda s, m, d: f"{s} is {m.group(1).lower()}", False),
    ("Identity", "diet", re.compile(rf"\bI (?:went|became|have become|'ve become|turned|(?:have |'ve )?switched to) "
                                    rf"(?:a |being |fully )?({_DIETS})\b", re.I),
     lambda s, m, d: f"{s} is {m.group(1).lower()}", True),
    ("Identity", "diet",
     re.compile(rf"\bI(?:'m| am) no longer (?:a |an )?({_DIETS})\b|\bI(?:'m| am) not (?:a |an )?({_DIETS}) any ?more\b|"
                rf"\bI(?:'ve| have)? (?:stopped|quit|gave up|given up) being (?:a |an )?({_DIETS})\b|"
                rf"\b[Tt]he ({_DIETS}) (?:thing|phase|diet|experiment) is (?:over|done|finished)\b", re.I),
     lambda s, m, d: f"{s} is no longer {_first(m).lower()} (as of {d})", True),
    ("Identity", None,
     re.compile(rf"\bI(?:'ve| have)? ?(?:had|ate|eat|'m eating|am eating|been eating|ordered|cooked) "
                rf"((?:(?:a|an|some|the|big|huge|juicy|little|bit of|of) )*({_FOOD})) (again|now|these days)\b", re.I),
     lambda s, m, d: f"{s} eats {_food_kind(m.group(2))} {'again' if m.group(3).lower() == 'again' else 'now'} "
                     f"(as of {d})", True, lambda m: _BREAKS[_food_kind(m.group(2))]),
    ("Identity", None,
     re.compile(rf"\bI(?:'m| am) no longer (?!(?:a |an )?(?:{_DIETS})\b)({_STATE_START}[^.!?]+)|"
                rf"\bI(?:'m| am) not (?!(?:a |an )?(?:{_DIETS})\b)({_STATE_START}[^.!?]*?) any ?more\b"),
     lambda s, m, d: f"{s} is no longer {_obj(_first(m), 5)} (as of {d})", True),
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
    ("Relation", None, re.compile(rf"\b[Mm]y ({_RELATIONS})'s name is ([A-Z][a-z]+)\b|"
                                  rf"\bI(?: have|'ve got| have got| got) (?:a|an) "
                                  rf"(?:new |little |baby |big )?({_RELATIONS}) (?:named|called) ([A-Z][a-z]+)\b"),
     lambda s, m, d: f"{s} has a {(m.group(1) or m.group(3)).lower()} named {_name(m.group(2) or m.group(4))}", False),
    ("Event", None, re.compile(rf"\b(I|[Ww]e|[Mm]y (?:{_RELATIONS})) (?:just |recently |finally )?({_FAMILY_EVENT})\b"),
     lambda s, m, d: (_CUT if m.group(1).lower() in ("i", "we") and m.group(2).endswith("born")  # their own birth:
                      else f"{_who(s, m.group(1))} {_family(m.group(2))} (around {d})"), False),  # not of today
    ("Preference", None,
     re.compile(r"\bI (?:really |absolutely |just |truly )?(love|like|enjoy|adore|hate|dislike|prefer) ([^.!?]+)"),
     lambda s, m, d: f"{s} {_verb3(m.group(1))} {_obj(m.group(2))}", False),
    ("Preference", "favourite", re.compile(r"\bmy favou?rite ([a-z]+(?: [a-z]+)?) is ([^.!?]+)", re.I),
     lambda s, m, d: f"{s}'s favourite {m.group(1).lower()} is {_obj(m.group(2))}", False),
    ("Event", "habit", re.compile(r"\bI(?:'ve| have|'m| am)? (?:just |recently |finally )?"
                                  r"(stopped|quit|gave up|given up|no longer) ([a-z]+ing\b[^.!?]*)"),
     lambda s, m, d: f"{s} {_stopped(m.group(1))} {_obj(m.group(2), 4)} (around {d})", True),
    ("Event", "habit", re.compile(rf"\bI(?:'m| am) not ((?!(?:{_NOT_HABITS})\b)[a-z]+ing\b[^.!?]*?) any ?more\b"),
     lambda s, m, d: f"{s} stopped {_obj(m.group(1), 4)} (around {d})", True),
    ("Event", "habit",
     re.compile(rf"\bI no longer ((?!(?:{_NOT_HABIT_VERBS})\b)[a-z]{{3,}}\b[^.!?]*)|"
                rf"\bI (?:don't|do not) ((?!(?:{_NOT_HABIT_VERBS})\b)[a-z]{{3,}}\b(?: [a-z]+){{0,2}}?) any ?more\b"),
     lambda s, m, d: f"{s} no longer {_verb_phrase(_obj(_first(m), 4))} (as of {d})", True),
    ("Event", "habit", re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?(started|took up|began) "
                                  r"([a-z]+ing\b[^.!?]*)"),
     lambda s, m, d: f"{s} started {_obj(m.group(2), 4)} (around {d})", True),
    ("Event", "habit",
     re.compile(rf"\bI(?:'m| am|'ve been| have been) ((?!(?:{_NOT_HABITS})\b)[a-z]+ing\b(?: (?!again\b)[a-z]+){{0,2}}?)"
                r" again\b"),
     lambda s, m, d: f"{s} is {_obj(m.group(1), 4)} again (as of {d})", True),
    ("Event", "habit",
     re.compile(rf"\bI(?:'m| am) (?:now )?((?:(?:doing|playing|going|taking) [a-z]+|(?!(?:{_NOT_HABITS})\b)[a-z]+ing)\b"
                r"(?: [a-z]+){0,2}?) (?:now )?instead(?: of ([a-z]+ing\b[^.!?]*))?"),
     lambda s, m, d: f"{s} is {_obj(m.group(1), 4)} now (as of {d})", True,
     lambda m: (m.group(2),) if m.group(2) else ()),
    ("Event", "habit",
     re.compile(r"\bI(?:'ve| have)? (?:just |recently |finally )?switched (?:from ([a-z]+ing\b[^.!?]*?) )?"
                r"to ([a-z]+ing\b[^.!?]*)"),
     lambda s, m, d: f"{s} switched to {_obj(m.group(2), 4)} (around {d})", True,
     lambda m: (m.group(1),) if m.group(1) else ()),
    ("Event", None,
     re.compile(rf"\bI(?:'ve| have)? (?:just |recently |finally )?switched (?:from ((?![a-z]+ing\b)[^.!?]+?) )?"
                rf"to (?!(?:a |an |being )?(?:{_DIETS})\b|[a-z]+ing\b)([^.!?]+)"),
     lambda s, m, d: f"{s} switched {'from ' + _obj(m.group(1), 4) + ' ' if m.group(1) else ''}"
                     f"to {_obj(m.group(2), 5)} (around {d})", True,
     lambda m: (m.group(1),) if m.group(1) else ()),
    ("Event", "habit", re.compile(r"(?:^|[,;]\s*|\band )(?:now )?I ((?!am\b|know\b|think\b|see\b|guess\b|mean\b|hope\b)"
                                  r"[a-z]{3,}) (?:now|instead)\b"),
     lambda s, m, d: f"{s} {_verb3(m.group(1))} now (as of {d})", True),
    ("Event", None,
     re.compile(r"\bI (?:just |recently |finally |have |'ve )?(adopted|finished|joined|signed|visited|graduated from|"
                r"bought|won|ran|completed|launched|published|(?:started|quit)(?! [a-z]+ing\b)) ([^.!?]+)"),
     lambda s, m, d: f"{s} {m.group(1)} {_obj(m.group(2))} (around {d})", False),
    ("Event", None, _PLAN,
     lambda s, m, d: f"{s} plans to {_plan(m.group(1) or m.group(2), going=_going(m))}", False),
]
_RULES = [_Rule(*r) for r in _TABLE]


def _obj(text: str, max_words: int = 8) -> str:
    """The object phrase up to a clause boundary; "" when it is cut mid-phrase or too long (so
    the statement is dropped rather than stored truncated)."""
    head = _STOP_AT.split(text.strip(), maxsplit=1)[0].strip().rstrip(" '\"")
    if len(head.split()) > 3 * max_words:  # too long whatever tails it ends in
        return _CUT
    for _ in range(3):  # "jazz 🎷 btw": each tail off, whichever comes last
        head = _FILLER_TAIL.sub("", _TIME_TAIL.sub("", _SYMBOL_TAIL.sub("", head))).strip()
    words = head.split()
    if not words or len(words) > max_words or words[-1].lower() in _DANGLING:
        return _CUT
    return _third_person(" ".join(words))


def _going(m: re.Match[str]) -> bool:
    """A plan said as "I'm / I am going to …" (not "I'll be going to", "planning to")."""
    return m.group(1) is not None and m.string[m.start(0):m.start(1)].lower().endswith("going to ")


def _plan(text: str, going: bool = False) -> str:
    """What a plan is to do; ``going``: said as "I'm going to …", where a place or a thing
    ("Paris", "the beach") is where the speaker is going, not what they will do."""
    head = _SYMBOL_TAIL.sub("", _PLAN_STOP.split(text.strip(), maxsplit=1)[0].strip())
    words = head.split()
    if (not words or len(words) > 12 or words[-1].lower() in _DANGLING or _VAGUE.search(head)
            or not _WHEN.search(head)):
        return _CUT
    if going and (words[0][:1].isupper() or words[0].lower() in _GOING_TO):
        head = "go to " + head
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
    return {"no longer": "stopped", "given up": "gave up"}.get(verb, verb)


def _first(m: re.Match) -> str:
    """The first group that matched (rules with alternatives)."""
    return next((g for g in m.groups() if g), "")


def _food_kind(food: str) -> str:
    f = food.lower()
    return next(kind for kind, words in _FOODS.items() if re.fullmatch(words, f))


def _verb_phrase(text: str) -> str:
    """ "play tennis" as a third person says it ("plays tennis")."""
    if _CUT in text:
        return _CUT
    verb, _, rest = text.partition(" ")
    return f"{_verb3(verb)} {rest}".strip()


#: apostrophes as phones and word processors type them (’ ‘ ʼ ´ ` ＇): the rules read "'"
_APOSTROPHES = re.compile("[\u2019\u2018\u02bc\u00b4`\uff07]")
#: "i" as a word ("i live in Porto", "i'm", "i've"), not "i.e."
_LOWER_I = re.compile(r"(?<![\w'])i(?=['\s,;:!?)]|$)")
#: contractions typed without their apostrophe in chat; "im" and "Im", not "IM" (a message)
_BARE = {"im": "I'm", "ive": "I've", "dont": "don't", "cant": "can't", "didnt": "didn't", "doesnt": "doesn't",
         "isnt": "isn't", "wasnt": "wasn't", "arent": "aren't", "werent": "weren't", "havent": "haven't",
         "hasnt": "hasn't", "wont": "won't"}
_BARE_WORD = re.compile(r"(?<![\w'])(?:(" + "|".join(_BARE) + r")|(Im))(?![\w'])")


def typed_plainly(text: str) -> str:
    """A message as the rules read it: the typography of phones and chat made plain — curly
    apostrophes and quotes straight, "i" as a word capitalised, "im", "ive", "dont", "cant"… with
    their apostrophe, time phrases chat spells its own way written out ("2 wks ago", "tmrw":
    :func:`~memsif_lite.timeutil.plain_time_words`). Real chat types "I’m allergic to peanuts"
    (the default of phone keyboards) or "im allergic to peanuts"; the rules, written for "I'm",
    found nothing in either. Statements are made of the text so read ("don't", "I")."""
    text = _APOSTROPHES.sub("'", text).replace("\u201c", '"').replace("\u201d", '"')
    text = _BARE_WORD.sub(lambda m: _BARE[(m.group(1) or m.group(2)).lower()], text)
    return plain_time_words(_LOWER_I.sub("I", text))


def _sentences(text: str) -> list[str]:
    """Sentences (and lines) of a message, typed plainly (:func:`typed_plainly`); "St. Mary's"
    does not end one."""
    out: list[str] = []
    for piece in re.split(r"(?<=[.!?])\s+|\n", typed_plainly(text)):
        if out and _ABBREV.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def _verb3(v: str) -> str:
    v = v.lower()
    return v + ("es" if v.endswith(("s", "sh", "ch", "x")) else "s")


_HABIT_LEAD = re.compile(r"^(?:(?:is|stopped|started|quit|gave up|took up|began|no longer|now|"
                         r"switched(?: from .+?)? to)\s+)+")


def _activity(text: str) -> str:
    """The activity a habit statement is about, normalised ("running"/"runs"/"run" → "run"); a
    light verb keeps its object ("playing tennis" → "play tennis", "going swimming" → "swim")."""
    w = [x for x in _HABIT_LEAD.sub("", text.lower()).split() if x not in ("to", "the", "a", "an", "my", "their")]
    if not w:
        return ""
    word = stem(w[0])
    if word in ("go", "do") and len(w) > 1 and w[1].endswith("ing"):
        return stem(w[1])
    if word in LIGHT and len(w) > 1:
        return f"{word} {stem(w[1])}"
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
    #: the statement reports a change ("I moved to", "now", a new job, "I stopped", "again"): only
    #: then does it supersede a different earlier value of its slot (else it may refine it), or
    #: end a fact it contradicts (:mod:`memsif_lite.fact_changes`)
    change: bool = False
    #: when the statement says it began, if it says so ("last Saturday"): the fact's ``valid_from``
    since: str | None = None
    #: phrases naming the subject's current facts (of this type) that the statement ends besides
    #: its own slot's: the diets "I had a steak again" breaks, what "instead of" replaces
    ends: tuple[str, ...] = ()

    @property
    def valid_from(self) -> str:
        """When the fact holds from: the time the statement names, else the time it was said."""
        return self.since or self.at

    def to_json(self) -> str:
        return json.dumps({"subject": self.subject, "type": self.type, "stmt": self.stmt,
                           "message_ids": list(self.message_ids), "at": self.at, "slot": self.slot,
                           "origin": self.origin, "change": self.change, "since": self.since,
                           "ends": list(self.ends)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Candidate":
        d = json.loads(text)
        return cls(d["subject"], d["type"], d["stmt"], tuple(d["message_ids"]), d["at"], d["slot"], d["origin"],
                   bool(d.get("change", False)), d.get("since"), tuple(d.get("ends", ())))


def extract_offline(messages: Sequence[MessageRow], schema: Sequence[FactType]) -> list[Candidate]:
    """Candidates from a segment's messages; only types present in the schema. A statement that
    could only be stored cut mid-phrase is not extracted at all."""
    allowed = {t.name.lower(): t.name for t in schema}
    rules = [rule for rule in _RULES if rule.type.lower() in allowed]  # once, not once a sentence
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = set()
    for msg in messages:
        mid, speaker, text, at = msg.id, msg.speaker, msg.text, msg.at
        said = from_stored(at)
        local = local_time(said, msg.utc_offset_min)
        for sentence in _sentences(text):
            times = stated_times(sentence, local)
            for rule in rules:
                for m in rule.rx.finditer(sentence):
                    obj = next((g for g in reversed(m.groups()) if g), "")
                    if rule.type != "Identity" and (not obj or _PRONOUN_START.match(obj.strip())):
                        continue
                    since, label = None, at[:10]
                    # an event's or a change's own time ("last Saturday" is the 9th, not today); a
                    # plan's is when it was made, and a lasting state's time words are about else
                    dated = rule.rx is not _PLAN and (rule.type == "Event" or rule.change)
                    stated = _time_of(sentence, m.start(), times) if dated else None
                    if stated is not None:
                        since = to_stored(said + (stated[0] - local))
                        label = stated[0].strftime({"day": "%Y-%m-%d", "month": "%Y-%m", "year": "%Y"}[stated[1]])
                    stmt = rule.fmt(speaker, m, label).strip()
                    if _CUT in stmt or len(stmt.split()) < 3:
                        continue
                    key = (normalise(stmt), speaker.lower())
                    if key in seen:
                        continue
                    seen.add(key)
                    slot_key = rule.slot
                    if rule.slot == "favourite":
                        slot_key = "favourite " + m.group(1).lower()
                    elif rule.slot == "habit":
                        slot_key = "habit " + _activity(stmt[len(speaker) + 1:].split(" (")[0])
                    ends = tuple(e for e in (rule.ends(m) if rule.ends else ()) if e)
                    out.append(Candidate(speaker, allowed[rule.type.lower()], stmt, (mid,), at, slot_key, "rule",
                                         rule.change or bool(_CHANGE.search(sentence)), since, ends))
    return out


def stated_starts(msg: MessageRow) -> set[str]:
    """Every time a fact from this message may be said to start at: the times its relative
    expressions name, as :func:`extract_offline` stores them."""
    said = from_stored(msg.at)
    local = local_time(said, msg.utc_offset_min)
    return {to_stored(said + (t[2] - local))
            for sentence in _sentences(msg.text) for t in stated_times(sentence, local)}


def _time_of(sentence: str, start: int, times: Sequence[tuple[int, int, datetime, str]]
             ) -> tuple[datetime, str] | None:
    """The time a statement starting at ``start`` names: the first time expression of its clause
    after it ("I moved to Porto last week"), else the last one before it ("Yesterday I quit")."""
    lo, hi = 0, len(sentence)
    for b in _CLAUSE.finditer(sentence):
        if b.end() <= start:
            lo = b.end()
        elif b.start() >= start:
            hi = min(hi, b.start())
    mine = [(t[2], t[3]) for t in times if lo <= t[0] and t[1] <= hi]
    after = [(t[2], t[3]) for t in times if lo <= t[0] and t[1] <= hi and t[0] >= start]
    return after[0] if after else mine[-1] if mine else None
