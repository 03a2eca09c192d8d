"""CoreFacts (paper §3.3): schema-guided facts written when a Topical Segment closes.

Candidates ``<subject, type, stmt, meta>`` come from the LLM (JSON, validated against the
schema; the segment's trajectory supplies earlier context) or, offline and whenever the LLM
fails, from a deterministic extractor of the clearest first-person statements
(:mod:`memsif_lite.fact_extraction`). Before a candidate is written, its subject's existing
facts are retrieved (one stating it again, the most similar, its slot's values, the newest of its
type) and one operation is chosen:

* **Add** a new fact;  **Update** an existing fact with compatible new evidence (statement
  rewritten, provenance extended);  **Merge** a duplicate into an existing fact (provenance
  extended);  **Supersede** an outdated fact: it gets ``valid_to`` and ``superseded_by`` and stays
  queryable for historical questions.

A candidate that states a current fact again (same subject, type, normalised statement) is
Merged into it, with or without an LLM (:func:`exact_duplicate`: no model is asked) — or, when its
subject said it as a change of a slot that holds another value as well ("I moved back to Lisbon"
while Lisbon and Porto are current), Supersedes it, ending every earlier value of the slot; an
LLM chooser's Add whose statement a current fact already states is a Merge into that fact (a
Supersede of it, with what the change ends, when the candidate states a change). Offline the
operation is otherwise: Supersede when a slot (one kind of value: where someone lives, works *at*, works
*as*, their name, age, diet, a favourite, one habit) gets a different value from a later message
that states a change ("I moved to", "now", a new job, a promotion, "I stopped …", "again") —
every earlier value of that slot then ends —, when the slot holds one value only (name, age,
diet, a favourite) or when its value said it no longer held ("Sam quit their job"); else Add
("I live in De Pijp" after "I live in Amsterdam" refines, it does not replace). A stated change
also ends the current facts of its subject it contradicts beyond its slot ("I stopped climbing"
ends "Sam loves climbing", "I had a steak again" ends "Sam is vegetarian":
:mod:`memsif_lite.fact_changes`), on the subject's own word only. A fact holds from the day its
message names ("last Saturday"), else from when it was said; what it replaces ends then. Every
change is written to ``fact_history``.

Whose facts a candidate may touch (message text comes from anyone, and an LLM may obey text
written in it): the operation is chosen among current facts of the candidate's own subject only
(subjects compared by :func:`same_subject`), and a chooser's answer naming any other fact falls
back to the offline rule. A candidate may Update, Merge into or Supersede an existing fact only
when every message it cites was said by its subject (and only then ends what it contradicts); a
candidate about someone else ("Maya moved to Porto", said by Mallory, is a legitimate fact about
Maya) gets the offline rule's operation
— Merge into an exact duplicate, else Add — so what one speaker says never rewrites or ends
another's fact, whatever the LLM answers. And as an LLM that read another speaker's line may still
cite the subject's own line for a statement it took from elsewhere, an LLM's change of a fact
(anything but an Add) must be *grounded*: every name in the new statement (a capitalised word,
month and day names aside) is in a message the candidate cites, in the subject's name or in the
fact it changes; otherwise the offline rule decides (:func:`grounded`).

CoreFacts are about people: a candidate whose subject is a chat's assistant, system or tool speaker
(:data:`MACHINE_SPEAKERS`) is not written — an assistant's "I love museums" is small talk, and the
first-person rules would make every such line a fact about it.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np

from . import prompts
from .config import FactType
from .db import Database, FactRow, MessageRow, from_messages
from .entities import normalise
from .errors import InvalidInputError, StaleError
from .fact_changes import ended_by, ends_any, is_negation
from .fact_extraction import Candidate, extract_offline
from .fulltext import compose
from .llm import LLM, Prompt
from .timeutil import now_stored

__all__ = ["Candidate", "Operation", "FactExtractor", "OfflineFactExtractor", "LLMFactExtractor",
           "OperationChooser", "OfflineOperationChooser", "LLMOperationChooser", "CoreFactWriter", "FactDecision",
           "extract_offline", "same_subject", "exact_duplicate", "CONTEXT_MESSAGES", "MACHINE_SPEAKERS",
           "about_a_person", "machine_speaker", "check_user_speaker"]

log = logging.getLogger("memsif_lite")

#: the earlier messages of its trajectory an extraction shows beside a closed segment
CONTEXT_MESSAGES = 6

#: the chat roles that are no person: the speakers memsif stores them as by default (its
#: integrations, :class:`memsif_lite.integrations.Speakers`; its importers, which keep a role's own
#: name; the MCP server's ``assistant``), and Gemini's role for the assistant, ``model`` (no person's
#: name; LangChain's ``ai`` message type is left out: Ai is a given name), compared by :func:`machine_speaker`
MACHINE_SPEAKERS = frozenset({"assistant", "system", "developer", "tool", "function", "model"})


def machine_speaker(name: str) -> bool:
    """Whether ``name`` is one of :data:`MACHINE_SPEAKERS` (Unicode compatibility forms, case and
    spacing aside: "Assistant", "ａｓｓｉｓｔａｎｔ")."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split()) in MACHINE_SPEAKERS


def check_user_speaker(name: str) -> None:
    """Refuse ``name`` as the speaker a chat's user is stored as when it is a :func:`machine_speaker`
    (no CoreFact about her would ever be kept): :class:`InvalidInputError`."""
    if machine_speaker(name):
        raise InvalidInputError(f"the user cannot be stored as {name.strip()!r}, a name memsif keeps for a chat's "
                                "assistant, system or tool role")


def about_a_person(c: Candidate) -> bool:
    """Whether a candidate's subject may be a person: not a :func:`machine_speaker`."""
    return not machine_speaker(c.subject)


def same_subject(a: str, b: str) -> bool:
    """One subject written two ways: case and Unicode composition aside ("maya" is "Maya")."""
    return compose(a).lower() == compose(b).lower()


@dataclass(frozen=True)
class Operation:
    """The decision for one candidate: ``add`` | ``update`` | ``merge`` | ``supersede``, the
    existing fact it applies to, the statement to store, and who chose it (``rule`` or
    ``llm:<model>``: the change log's actor)."""

    name: str
    target: int | None
    stmt: str
    by: str = "rule"


# -- extraction: protocol, offline rule, LLM rule falling back to it ----------------------------------
class FactExtractor(Protocol):
    def extract(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> list[Candidate]: ...

    def prompt(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> Prompt[Any] | None:
        """The prompt ``extract`` sends for these messages; None: it asks no LLM."""


class OfflineFactExtractor:
    """The documented first-person patterns (:mod:`memsif_lite.fact_extraction`)."""

    def __init__(self, schema: Sequence[FactType]):
        self.schema = tuple(schema)

    def prompt(self, messages: Sequence[MessageRow], context: Sequence[MessageRow]) -> Prompt[Any] | None:
        return None

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


_NAME = re.compile(r"(?<![\w'])[A-Z][\w'’-]*")
_CALENDAR = frozenset("january february march april may june july august september october november december "
                      "monday tuesday wednesday thursday friday saturday sunday".split())


def grounded(stmts: str | Iterable[str], sources: Sequence[str]) -> bool:
    """Whether every name the statements use (a capitalised word but a statement's first, and month
    or day names) is a word of ``sources``, in any case: what an LLM may write when it changes a fact."""
    words = {w.lower() for text in sources for w in re.findall(r"[\w'’-]+", text)}
    names = [m.group(0) for stmt in ([stmts] if isinstance(stmts, str) else stmts)
             for m in _NAME.finditer(stmt) if m.start() > 0]
    return all(n.lower() in words or n.lower().rstrip("'’s") in words or n.lower() in _CALENDAR
               for n in names)


# -- the operation: protocol, offline rule, LLM rule falling back to it --------------------------------
class OperationChooser(Protocol):
    def choose(self, c: Candidate, related: Sequence[FactRow]) -> Operation: ...


#: slots whose new value always replaces the old one (others need a statement of change)
ALWAYS_SINGLE = frozenset({"name", "age", "diet"})

#: a role stated with its workplace ("Sam works as a nurse at Charite"): the stored fact holds a
#: value of the "works at" slot too, so a new workplace ends it (one way only: a promotion "at the
#: Berlin office" does not end the workplace, a quit naming a place does not end a role elsewhere)
_ROLE_AT_PLACE = re.compile(r"\bworks as \S.*? at (?:the )?[A-Z]")


def _stored_slots(slot: str | None, stmt: str) -> set[str]:
    """The slots a stored fact of ``slot`` holds a value of (:data:`_ROLE_AT_PLACE`)."""
    if not slot:
        return set()
    return {slot, "works at"} if slot == "works as" and _ROLE_AT_PLACE.search(stmt) else {slot}


def _in_slot(c: Candidate, r: FactRow) -> bool:
    """Whether stored fact ``r`` holds a value of the candidate's slot: its own, or a role stated with
    its workplace for a new workplace (not for a quit: "Sam quit their job at Siemens" names its own)."""
    if not c.slot:
        return False
    if r.slot == c.slot:
        return True
    return c.slot == "works at" and not is_negation(c.stmt, c.subject) and c.slot in _stored_slots(r.slot, r.stmt)


def _sharing_slot(facts: Any, c: Candidate) -> list[FactRow]:
    """The subject's current facts of the candidate's type holding a value of its slot (:func:`_in_slot`)."""
    if not c.slot:
        return []
    rows = facts.current_in_slot(c.subject, c.type, c.slot)
    if c.slot == "works at":
        rows += [r for r in facts.current_in_slot(c.subject, c.type, "works as") if _in_slot(c, r)]
    return rows


def exact_duplicate(c: Candidate, related: Sequence[FactRow], *, may_end: bool = True) -> Operation | None:
    """For a candidate the first of ``related`` states again (same subject and type, the same
    statement but for case and punctuation): a Merge into it — or, when ``may_end`` (its subject's
    own word) and the candidate states a change of a slot that holds another value from before it
    ("I moved back to Lisbon" while Lisbon and Porto are both current), a Supersede of it, which the
    slot's sweep (:meth:`CoreFactWriter.apply`) extends to the other values. None when none states
    it."""
    key = normalise(c.stmt)
    dup = next((r for r in related if same_subject(r.subject, c.subject) and r.type == c.type
                and normalise(r.stmt) == key), None)
    if dup is None:
        return None
    if may_end and c.change and c.slot and dup.valid_from < c.at and any(
            same_subject(r.subject, c.subject) and r.type == c.type and _in_slot(c, r) and r.valid_from < c.at
            and normalise(r.stmt) != key for r in related):
        return Operation("supersede", dup.id, c.stmt)
    return Operation("merge", dup.id, dup.stmt)


class OfflineOperationChooser:
    """Merge an exact duplicate; Supersede an earlier value of the same slot (same kind: "lives
    in" vs "works at" vs "works as" vs one habit; a role stated with its workplace, "works as a
    nurse at Charite", holds a "works at" value a new workplace ends) when the new statement reports a change, the
    slot holds one value only (name, age, diet, a favourite) or the earlier value says it no
    longer holds ("Sam quit their job"); else Add: a plain "I live in De Pijp" after "I live in
    Amsterdam" refines, it does not replace, and a value never supersedes one from the same
    moment. (What a change ends beyond its slot: :mod:`memsif_lite.fact_changes`.)"""

    def choose(self, c: Candidate, related: Sequence[FactRow]) -> Operation:
        duplicate = exact_duplicate(c, related)
        if duplicate is not None:
            return duplicate
        if c.slot:
            for r in related:
                if (same_subject(r.subject, c.subject) and _in_slot(c, r) and r.valid_from < c.at
                        and (c.change or c.slot in ALWAYS_SINGLE or c.slot.startswith("favourite ")
                             or is_negation(r.stmt, r.subject))):
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
        return Operation(name, related[target].id if target is not None else None, stmt or c.stmt,
                         by=f"llm:{self.llm.model}")


@dataclass(frozen=True)
class FactDecision:
    """The operation chosen for one candidate (with no transaction open: the chooser may be an
    LLM), the candidate's vector, the related facts (id, stmt) it was chosen against, and the
    further facts (id, stmt) of its subject that the change it states ends (an Add or Supersede
    only: :mod:`memsif_lite.fact_changes`)."""

    op: Operation
    vector: np.ndarray
    related: tuple[tuple[int, str], ...]
    ends: tuple[tuple[int, str], ...] = ()


class CoreFactWriter:
    """Extracts candidates from a closed segment and applies Add/Update/Merge/Supersede."""

    def __init__(self, db: Database, *, extractor: FactExtractor, chooser: OperationChooser,
                 embed_passages: Callable[[Sequence[str]], np.ndarray]):
        self.db = db
        self.extractor = extractor
        self.chooser = chooser
        self.embed_passages = embed_passages

    def extract(self, segment_id: int) -> list[Candidate]:
        """The CoreFact candidates of a closed segment (the extractor may be an LLM); those not
        :func:`about_a_person` are dropped when their step is decided (``steps.fact``)."""
        structure = self.db.structure
        return self.extractor.extract(structure.segment_messages(segment_id),
                                      structure.trajectory_context(segment_id, CONTEXT_MESSAGES))

    def extract_prompt(self, segment_id: int) -> Prompt[Any] | None:
        """The prompt ``extract`` will send for this segment (None: the extractor asks no LLM),
        so that the worker can ask it ahead, beside other segments' prompts."""
        structure = self.db.structure
        return self.extractor.prompt(structure.segment_messages(segment_id),
                                     structure.trajectory_context(segment_id, CONTEXT_MESSAGES))

    def stating(self, subject: str, ftype: str, stmt: str) -> list[FactRow]:
        """The subject's current facts of this type that state ``stmt`` again, as
        :func:`exact_duplicate` compares them, oldest first."""
        return [r for r in self.db.facts.current_stated(subject, ftype, stmt)
                if same_subject(r.subject, subject) and normalise(r.stmt) == normalise(stmt)]

    def related(self, c: Candidate, vec: np.ndarray, k: int = 5) -> list[FactRow]:
        """Current facts of the candidate's subject (no other subject's fact is ever shown to the
        chooser), at most ``k + 5``: the oldest that states it again (:func:`exact_duplicate`
        merges into it), the ``k`` most similar (among its ``4 k`` nearest facts of any subject: an
        earlier value to update or supersede), the values of its slot, then the newest of its
        type. So a subject holding more facts of the type than the list shows still has its
        duplicate and its slot's values in it."""
        facts = self.db.facts
        rows = self.stating(c.subject, c.type, c.stmt)[:1]
        near = 0
        for fid, _ in facts.nearest(vec, 4 * k):
            r = facts.current(fid)
            if r is not None and same_subject(r.subject, c.subject) and r.id not in {x.id for x in rows}:
                rows.append(r)
                near += 1
                if near == k:
                    break
        for more in (_sharing_slot(facts, c), facts.current_like(c.subject, c.type)):
            have = {r.id for r in rows}
            rows += [r for r in more if r.id not in have and same_subject(r.subject, c.subject)]
        return rows[:k + 5]

    def decide(self, c: Candidate) -> FactDecision:
        """The operation for a candidate (module docstring: only facts of its own subject, and only
        an exact-duplicate Merge or an Add when someone else said it), whatever the chooser says."""
        vec = self.embed_passages([c.stmt])[0]
        related = self.related(c, vec)
        offline = OfflineOperationChooser()
        cited = self.db.messages.many(list(c.message_ids))
        said_by_subject = bool(c.message_ids) and all(m in cited and same_subject(cited[m].speaker, c.subject)
                                                      for m in c.message_ids)
        # a current fact stated again: no model is asked (only the subject's own word ends its facts)
        duplicate = exact_duplicate(c, related, may_end=said_by_subject)
        if duplicate is not None:
            op = duplicate
        elif not said_by_subject:
            op = offline.choose(c, related)
        else:
            op = self.chooser.choose(c, related)
            if op.name != "add" and op.target not in {r.id for r in related}:
                log.warning("fact operation %s on fact %s refused: not a current fact of %r", op.name, op.target,
                            c.subject)
                op = offline.choose(c, related)
            elif op.name != "add" and c.origin != "rule" and not grounded(
                    {c.stmt, op.stmt or c.stmt}, [m.text for m in cited.values()] + [c.subject]
                    + [r.stmt for r in related if r.id == op.target]):
                log.warning("fact operation %s on fact %s refused: %r names what its messages do not say",
                            op.name, op.target, op.stmt)
                op = offline.choose(c, related)
            if op.name == "add" and normalise(op.stmt) != normalise(c.stmt):  # the model's wording may be held
                held = self.stating(c.subject, c.type, op.stmt)
                if held:  # a merge into it; a supersede of it when the candidate states a change (ends apply)
                    h = held[0]
                    change = (c.change or bool(c.ends)) and h.valid_from < c.at
                    op = Operation("supersede", h.id, op.stmt, by=op.by) if change else \
                        Operation("merge", h.id, h.stmt, by=op.by)
                    if h.id not in {r.id for r in related}:
                        related = [*related, h]  # checked for changes before the write, as the others
        ends: list[FactRow] = []
        if said_by_subject and op.name in ("add", "supersede") and ends_any(c.subject, c.stmt, c.change, c.ends):
            # only the subject's own word ends its facts
            mine = [r for r in self.db.facts.current_of(c.subject) if same_subject(r.subject, c.subject)]
            ends = [r for r in ended_by(c.subject, c.type, c.stmt, c.change, c.ends, c.at, mine)
                    if r.id != op.target]
        return FactDecision(op, vec, tuple((r.id, r.stmt) for r in related), tuple((r.id, r.stmt) for r in ends))

    def apply(self, c: Candidate, d: FactDecision) -> int:
        """Write the decision (inside a write transaction); returns the fact id touched. Raises
        StaleError if a related fact changed since the decision."""
        facts = self.db.facts
        for fid, stmt in d.related + d.ends:
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
        fid = facts.insert(subject=c.subject, ftype=c.type, stmt=op.stmt, slot=c.slot, valid_from=c.valid_from,
                           now=now, origin=c.origin, vector=vec, message_ids=c.message_ids)
        targets = [eid for eid, _ in d.ends]  # what the change contradicts ...
        if op.name == "supersede" and op.target is not None:
            targets.append(op.target)
            if c.change and c.slot:  # ... and, a stated change, every earlier value of its slot
                targets += [r.id for r in _sharing_slot(facts, c)
                            if r.id not in (op.target, fid) and r.valid_from < c.at]
        else:
            facts.log(fid, "add", op.stmt, None, now)
        for target in dict.fromkeys(targets):
            row = facts.current(target)
            if row is None:
                continue
            # it ends when the new fact begins, or (said to have begun before it) when it was said
            facts.supersede(target, by=fid, valid_to=c.valid_from if c.valid_from > row.valid_from else c.at,
                            now=now)
            facts.log(target, "superseded", facts.stmt(target), f"superseded by fact {fid}", now)
            facts.log(fid, "supersede", op.stmt, f"supersedes fact {target}", now)
        return fid
