"""work_queue: the pending steps of the paper's pipeline, in (message_id, sub) order.

The data layer knows the kinds of steps only as their step classes tell it
(:mod:`memsif_lite.steps` registers each one here): the ``sub`` a kind is queued at
(its ``order``) and why a row of that kind cannot run (its ``problem``). It names one kind
itself, :data:`PLACE`, a message's first step (``forget`` drops it, ``check`` counts it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Collection, Protocol, Sequence

from .base import Table

__all__ = ["Queue", "QueuedStep", "StepRule", "PLACE", "register", "unregister", "step_problem", "malformed_steps"]

log = logging.getLogger("memsif_lite")

#: the kind of a message's first step, as stored
PLACE = "place"
_COLS = "id, message_id, sub, kind, segment_id, payload, created_at, attempts"


@dataclass(frozen=True)
class QueuedStep:
    """One row of the work queue: a step of a kind, for a message, still to run."""

    id: int
    message_id: int
    sub: int
    kind: str
    segment_id: int | None
    payload: str | None
    created_at: str
    attempts: int


class StepRule(Protocol):
    """What the queue needs to know of a kind of step (:class:`memsif_lite.steps.Step` has it)."""

    @property
    def kind(self) -> str: ...

    @property
    def order(self) -> int: ...

    def problem(self, segment_id: Any, payload: Any) -> str | None: ...


_RULES: dict[str, StepRule] = {}


def register(rule: StepRule) -> None:
    """Make a kind of step known (``memsif_lite.steps.Registry`` calls it for each of its steps)."""
    _RULES[str(rule.kind)] = rule


def unregister(kind: str) -> None:
    _RULES.pop(str(kind), None)


def step_problem(kind: Any, segment_id: Any, payload: Any) -> str | None:
    """Why a queued row cannot be run, or None. The file may come from anyone (or from an export):
    a row of an unknown kind, or one its step refuses (a close without its segment, a CoreFact
    candidate that is not one), is set aside, never run."""
    rule = _RULES.get(kind) if isinstance(kind, str) else None
    if rule is None:
        return f"unknown step kind {str(kind)[:40]!r}"
    return rule.problem(segment_id, payload)


def malformed_steps(con: Any) -> list[str]:
    """``memsif check``: the queued rows :func:`step_problem` refuses (the worker sets them aside)."""
    out = []
    for mid, sub, kind, seg, payload in con.execute(
            "SELECT message_id, sub, kind, segment_id, payload FROM work_queue ORDER BY message_id, sub"):
        why = step_problem(kind, seg, payload)
        if why is not None:
            out.append(f"queued step (message {mid}, sub {sub}) cannot run: {why}")
    return out


class Queue(Table):
    def push(self, kind: str, message_id: int, created_at: str, *, segment_id: int | None = None,
             payload: str | None = None, index: int = 0) -> None:
        """Enqueue a step of a registered kind at sub = its order + ``index`` (a CoreFact candidate's position)."""
        sub = _RULES[str(kind)].order + index
        self.con.execute("INSERT INTO work_queue(message_id, sub, kind, segment_id, payload, created_at) "
                         "VALUES(?,?,?,?,?,?)", (message_id, sub, str(kind), segment_id, payload, created_at))

    def head(self) -> QueuedStep | None:
        """The next step to run."""
        r = self.con.execute(f"SELECT {_COLS} FROM work_queue ORDER BY message_id, sub LIMIT 1").fetchone()
        return None if r is None else QueuedStep(*r)

    def pending(self, kinds: tuple[str, ...], limit: int) -> list[QueuedStep]:
        """The earliest pending steps of the given kinds, in queue order."""
        marks = ",".join("?" * len(kinds))
        return [QueuedStep(*r) for r in self.con.execute(
            f"SELECT {_COLS} FROM work_queue WHERE kind IN ({marks}) ORDER BY message_id, sub LIMIT ?",
            (*kinds, limit))]

    # A step is identified by (message_id, sub), never by its rowid: rowids of deleted rows are
    # reused, while a (message_id, sub) pair is enqueued at most once in a file's life.
    def exists(self, step: QueuedStep) -> bool:
        """Whether the step is still queued as it was read (``forget`` may have rewritten its payload,
        or made it stale: :meth:`restamp`)."""
        return self.con.execute("SELECT 1 FROM work_queue WHERE id=? AND message_id=? AND sub=? AND payload IS ?",
                                (step.id, step.message_id, step.sub, step.payload)).fetchone() is not None

    def restamp(self, segment_ids: Collection[int]) -> None:
        """Make the pending steps of these segments stale: each takes an id no row has (:meth:`exists`
        fails for a step read before, whose decision is then made again from what is there now)."""
        for sid in sorted(set(segment_ids)):
            for (qid,) in self.con.execute("SELECT id FROM work_queue WHERE segment_id=? ORDER BY id",
                                           (sid,)).fetchall():
                self.con.execute("UPDATE work_queue SET id=(SELECT max(id) + 1 FROM work_queue) WHERE id=?", (qid,))

    def set_payload(self, step: QueuedStep, payload: str) -> None:
        self.con.execute("UPDATE work_queue SET payload=? WHERE message_id=? AND sub=?",
                         (payload, step.message_id, step.sub))

    def done(self, step: QueuedStep) -> None:
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND sub=?", (step.message_id, step.sub))

    def set_aside(self, step: QueuedStep, why: str) -> None:
        """Remove a row that cannot be run (:func:`step_problem`), saying so in the log, so that
        the queue (and every ``add`` that runs it) goes on."""
        log.warning("queued step (message %d, sub %d, kind %.40r) set aside: %s; payload %.200r",
                    step.message_id, step.sub, step.kind, why, step.payload)
        self.done(step)

    def drop_message(self, message_id: int) -> None:
        """A forgotten message's pending placement."""
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND kind=?", (message_id, PLACE))

    def citing(self, kind: str, message_ids: Sequence[int]) -> list[QueuedStep]:
        """The pending steps of a kind whose payload (a JSON object) lists one of these messages in
        its ``message_ids`` (a CoreFact candidate's), in queue order; other payloads are skipped."""
        return sorted({QueuedStep(*r) for r in self.rows_in(
            f"SELECT {_COLS} FROM work_queue WHERE kind=? AND EXISTS(SELECT 1 FROM json_each(CASE WHEN "
            "json_valid(payload) AND json_type(payload, '$.message_ids')='array' THEN payload ELSE '{{}}' END, "
            "'$.message_ids') WHERE value IN ({marks}))", list(message_ids), (kind,))},
            key=lambda q: (q.message_id, q.sub))

    def backlog(self) -> tuple[int, str | None]:
        """(pending steps, creation time of the oldest)."""
        n, oldest = self.con.execute("SELECT count(*), min(created_at) FROM work_queue").fetchone()
        return int(n), oldest
