"""The runner: the one place the transaction sequence of a queued step is written.

1. *check* the row (its step's :meth:`~memsif_lite.steps.base.Step.problem`; an unknown kind or a
   malformed row is set aside so the queue goes on);
2. *decide* with no transaction open: the step reads the state it needs and asks the judges,
   extractors and choosers — an LLM when one is configured, which may take seconds;
3. *apply* in one short ``BEGIN IMMEDIATE`` transaction (or ``add``'s own, offline) that first
   checks the row is still queued (another process may have applied it meanwhile), then writes
   the decision (:class:`~memsif_lite.errors.StaleError` when the state it read changed: the
   decision is discarded and made again) and deletes the row in the same transaction.
"""

from __future__ import annotations

from ..db import QueuedStep
from .base import Outcome, Registry, Tools

__all__ = ["Runner"]


class Runner:
    def __init__(self, tools: Tools, steps: Registry):
        self.tools, self.steps = tools, steps

    def run(self, row: QueuedStep, read_at: tuple[int, int] | None = None) -> Outcome:
        """Run one queued step; raises StaleError (nothing written) when its decision went stale.
        ``read_at``: :meth:`~memsif_lite.db.Database.write_stamp` taken before ``row`` was read from
        the queue: while nothing was written since, the row is known to be queued still."""
        db = self.tools.db
        step = self.steps.get(row.kind) if isinstance(row.kind, str) else None
        why = f"unknown step kind {str(row.kind)[:40]!r}" if step is None else step.problem(row.segment_id, row.payload)
        if step is None or why is not None:  # a row from a crafted file or export must not stop every later write
            with db.write_or_join():
                db.queue.set_aside(row, why or "")
            return Outcome.SET_ASIDE
        decision = step.decide(self.tools, row)
        with db.write_or_join():
            if not db.unchanged_since(read_at) and not db.queue.exists(row):
                return Outcome.ALREADY_APPLIED
            if decision is not None:
                step.apply(self.tools, row, decision)
            db.queue.done(row)
        return Outcome.GONE if decision is None else Outcome.APPLIED
