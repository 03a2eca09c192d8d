"""*extract*: the CoreFact candidates of a closed segment, each queued as a *fact* step (paper §3.3)."""

from __future__ import annotations

from typing import Any

from ..core_facts import Candidate
from ..db import QueuedStep
from ..llm import Prompt
from ..timeutil import now_stored
from .base import SegmentStep, StepKind, Tools


class Extract(SegmentStep[list[Candidate]]):
    kind = StepKind.EXTRACT
    order = 2
    asks_ahead = True

    def prompt(self, tools: Tools, row: QueuedStep) -> Prompt[Any] | None:
        sid = self.segment(tools, row)
        return None if sid is None else tools.core_facts.extract_prompt(sid)

    def decide(self, tools: Tools, row: QueuedStep) -> list[Candidate] | None:
        sid = self.segment(tools, row)
        return None if sid is None else tools.core_facts.extract(sid)

    def apply(self, tools: Tools, row: QueuedStep, candidates: list[Candidate]) -> None:
        for i, c in enumerate(candidates):
            tools.db.queue.push(StepKind.FACT, row.message_id, now_stored(), payload=c.to_json(), index=i)
