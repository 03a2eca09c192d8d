"""The lookahead (``Config.llm_concurrency``): which queued step runs next, and which prompts are
asked ahead while it runs.

With several LLM requests allowed, placement runs ahead of the closes, extractions and fact steps
until that many segments wait for their LLM work (a boundary decision reads only the open segment,
so this changes no result), and the independent prompts of the steps that wait — those of the
kinds that ask ahead (:attr:`~memsif_lite.steps.Step.asks_ahead`: titles, CoreFact extraction) —
are asked together.
"""

from __future__ import annotations

from typing import Any

from .db import QueuedStep
from .llm import Prompt
from .steps import Registry, StepKind, Tools

__all__ = ["Lookahead"]


class Lookahead:
    def __init__(self, tools: Tools, steps: Registry):
        self.tools, self.steps = tools, steps
        self._asked: set[tuple[int, int]] = set()  # queued steps whose prompts were asked ahead

    def next(self) -> QueuedStep | None:
        """The queued step to run next (the head of the queue without concurrent LLM requests)."""
        db, llm = self.tools.db, self.tools.llm
        head = db.queue.head()
        if head is None or llm is None or llm.concurrency < 2:
            return head
        waiting = db.queue.pending(self.steps.asking_ahead(), llm.concurrency)
        batch: list[Prompt[Any]] = []
        for w in waiting:
            step = self.steps.get(w.kind)
            if step is None or step.problem(w.segment_id, w.payload) is not None:
                continue  # malformed: the runner sets it aside when it reaches the head
            if (w.message_id, w.sub) in self._asked:
                continue
            p = step.prompt(self.tools, w)
            if p is not None:
                self._asked.add((w.message_id, w.sub))
                batch.append(p)
        llm.prefetch(batch)
        if head.kind != StepKind.PLACE and len(waiting) < llm.concurrency:
            place = db.queue.pending((StepKind.PLACE,), 1)
            if place:
                return place[0]
        return head

    def settle(self) -> None:
        """The end of a worker run."""
        if len(self._asked) > 10_000:
            self._asked.clear()
