"""*place*: put a stored message in the open segment, or close it and open a new one (paper §3.1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..db import QueuedStep
from ..embed import passage
from ..entities import extract_entities
from ..segments import PlaceDecision
from ..timeutil import now_stored
from .base import Step, StepKind, Tools


@dataclass(frozen=True)
class Placing:
    message_id: int
    vec: np.ndarray
    ents: list[str]
    at: str
    decision: PlaceDecision


class Place(Step[Placing]):
    kind = StepKind.PLACE
    order = 0

    def decide(self, tools: Tools, row: QueuedStep) -> Placing | None:
        hint = tools.hints.pop(row.message_id, None)
        msg = hint[2] if hint is not None and hint[2] is not None else tools.db.messages.get(row.message_id)
        if msg is None:  # forgotten meanwhile
            return None
        vec, ents = hint[:2] if hint is not None else (tools.db.messages.vector(msg.id), extract_entities(msg.text))
        if vec is None:
            return None
        decision = tools.segments.decide(vec, ents, msg.at, passage(msg.speaker, msg.text), msg.id, msg)
        return Placing(msg.id, vec, ents, msg.at, decision)

    def apply(self, tools: Tools, row: QueuedStep, p: Placing) -> None:
        judge = tools.llm.model if tools.llm is not None and p.decision.decision.startswith("judge_") else None
        with tools.db.changes.record("place", f"llm:{judge}" if judge else "rule", messages=[p.message_id]) as change:
            sid, closed = tools.segments.apply(p.message_id, p.vec, p.ents, p.at, p.decision)
            change.touch("segments", [sid])
        if closed is not None:
            tools.db.queue.push(StepKind.CLOSE, p.message_id, now_stored(), segment_id=closed)
