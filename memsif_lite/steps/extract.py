"""*extract*: the CoreFact candidates of a closed segment, each queued as a *fact* step (paper §3.3)."""

from __future__ import annotations

from typing import Any

from ..core_facts import Candidate
from ..db import QueuedStep
from ..llm import Prompt
from ..timeutil import now_stored
from .base import Rebuild, Step, StepKind, Tools
from .close import segment_problem


class Extract(Step[list[Candidate]]):
    kind = StepKind.EXTRACT
    order = 2
    asks_ahead = True

    def problem(self, segment_id: Any, payload: Any) -> str | None:
        return segment_problem(self.kind, segment_id)

    def prompt(self, tools: Tools, row: QueuedStep) -> Prompt[Any] | None:
        sid = row.segment_id
        if sid is None or tools.db.structure.segment_state(sid) is None:
            return None
        return tools.core_facts.extract_prompt(sid)

    def decide(self, tools: Tools, row: QueuedStep) -> list[Candidate] | None:
        sid = row.segment_id
        assert sid is not None
        if tools.db.structure.segment_state(sid) is None:
            return None
        return tools.core_facts.extract(sid)

    def apply(self, tools: Tools, row: QueuedStep, candidates: list[Candidate]) -> None:
        for i, c in enumerate(candidates):
            tools.db.queue.push(StepKind.FACT, row.message_id, now_stored(), payload=c.to_json(), index=i)

    def survives(self, segment_id: Any, payload: Any, rebuild: Rebuild) -> bool:
        return segment_id not in rebuild.dropped_segments
