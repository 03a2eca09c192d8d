"""*close*: a segment just closed gets its title (with an LLM) and its Event Trajectory (paper §3.2)."""

from __future__ import annotations

from typing import Any

from .. import prompts
from ..db import QueuedStep
from ..llm import Prompt
from ..segments import segment_lines
from ..timeutil import now_stored
from ..trajectories import TrajectoryDecision
from .base import SegmentStep, StepKind, Tools

Closing = tuple[str | None, TrajectoryDecision]


class Close(SegmentStep[Closing]):
    kind = StepKind.CLOSE
    order = 1
    asks_ahead = True

    def prompt(self, tools: Tools, row: QueuedStep) -> Prompt[Any] | None:
        sid = self.segment(tools, row)
        return None if sid is None else self.title_prompt(tools, sid)

    def decide(self, tools: Tools, row: QueuedStep) -> Closing | None:
        sid = self.segment(tools, row)
        if sid is None:  # emptied by forget
            return None
        title = tools.llm.complete(self.title_prompt(tools, sid)) if tools.llm is not None else None
        return title, tools.trajectories.decide(sid)

    def apply(self, tools: Tools, row: QueuedStep, decision: Closing) -> None:
        sid = row.segment_id
        assert sid is not None
        title, trajectory = decision
        state = tools.db.structure.segment_state(sid)
        if state is not None and state[1] is None:
            judge = tools.llm.model if tools.llm is not None and trajectory.candidates else None
            with tools.db.changes.record("link", f"llm:{judge}" if judge else "rule", segments=[sid]) as change:
                if title:
                    tools.db.structure.set_segment_title(sid, title)
                change.touch("trajectories", [tools.trajectories.apply(sid, trajectory)])
            tools.db.queue.push(StepKind.EXTRACT, row.message_id, now_stored(), segment_id=sid)

    @staticmethod
    def title_prompt(tools: Tools, sid: int) -> Prompt[str]:
        return prompts.title(segment_lines(tools.db, sid, 12))
