"""*fact*: one CoreFact candidate, written by the operation chosen for it (paper §3.3)."""

from __future__ import annotations

import json
from typing import Any

from ..checks import INT64_MAX
from ..core_facts import Candidate, FactDecision, about_a_person
from ..db import QueuedStep
from ..history import decision_key, fact_actor
from ..timeutil import is_stored
from .base import Rebuild, Step, StepKind, Tools

#: the candidate, its decision, and the candidate's hash in the change log (:func:`~memsif_lite.history.decision_key`)
Choice = tuple[Candidate, FactDecision, str]


class Fact(Step[Choice]):
    kind = StepKind.FACT
    order = 3  # + the candidate's position in its extraction

    def problem(self, segment_id: Any, payload: Any) -> str | None:
        """A candidate must have the shape ``core_facts.Candidate.to_json`` writes."""
        if not isinstance(payload, str):
            return "a fact step without its candidate"
        try:
            d = json.loads(payload)
        except ValueError:
            return "a fact step whose candidate is not JSON"
        return _candidate_problem(d)

    def decide(self, tools: Tools, row: QueuedStep) -> Choice | None:
        assert row.payload is not None
        c = Candidate.from_json(row.payload)
        if not about_a_person(c):  # an assistant's "I love museums" (also a step an older release queued)
            return None
        if not all(tools.db.messages.exists(m) for m in c.message_ids):
            # a source forgotten since: a forget now takes it out of the candidate, or drops the
            # candidate when it holds its words; one still citing it comes from a file forgotten
            # in before that, and may hold them (docs/history.md)
            return None
        cited = tools.db.messages.many(list(c.message_ids))
        key = decision_key(c.subject, c.type, c.stmt, cited.values())
        if tools.db.changes.undone_decision(key):  # taken back with `memsif undo`: not written again
            return None
        return c, tools.core_facts.decide(c), key

    def apply(self, tools: Tools, row: QueuedStep, choice: Choice) -> None:
        c, d, key = choice
        actor, purpose = fact_actor(d.op.by, c.origin, tools.llm.model if tools.llm is not None else None)
        with tools.db.changes.record(f"fact.{d.op.name}", actor, purpose=purpose, summary=f"{c.subject}: {d.op.stmt}",
                                     decision=key, undoable=True, messages=c.message_ids):
            tools.core_facts.apply(c, d)

    def survives(self, segment_id: Any, payload: Any, rebuild: Rebuild) -> bool:
        return not rebuild.moved_messages.intersection(Candidate.from_json(str(payload)).message_ids)


def _candidate_problem(d: Any) -> str | None:
    if not isinstance(d, dict):
        return "a fact step whose candidate is not an object"
    for key in ("subject", "type", "stmt", "origin"):
        v = d.get(key)
        if not isinstance(v, str) or not v.strip() or not _utf8(v):
            return f"a fact candidate without a valid {key!r}"
    if not (d.get("slot") is None or (isinstance(d["slot"], str) and _utf8(d["slot"]))):
        return "a fact candidate with an invalid 'slot'"
    if not isinstance(d.get("change", False), bool):
        return "a fact candidate with an invalid 'change'"
    mids = d.get("message_ids")
    if not isinstance(mids, list) or not mids or not all(
            isinstance(m, int) and not isinstance(m, bool) and 0 < m <= INT64_MAX for m in mids):
        return "a fact candidate whose 'message_ids' are not message ids"
    if not is_stored(d.get("at")):
        return "a fact candidate whose 'at' is not a stored time"
    since = d.get("since")
    if since is not None and not (is_stored(since) and since <= d["at"]):
        return "a fact candidate whose 'since' is not a stored time before its 'at'"
    ends = d.get("ends", [])
    if not isinstance(ends, list) or not all(isinstance(e, str) and _utf8(e) for e in ends):
        return "a fact candidate whose 'ends' are not phrases"
    return None


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
