"""work_queue: the pending steps of the paper's pipeline, in (message_id, sub) order."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from ..checks import INT64_MAX
from ..timeutil import is_stored
from .base import Table

__all__ = ["Queue", "Step", "PLACE", "CLOSE", "EXTRACT", "FACT", "step_problem", "malformed_steps"]

log = logging.getLogger("memsif_lite")

PLACE, CLOSE, EXTRACT, FACT = "place", "close", "extract", "fact"
_SUB = {PLACE: 0, CLOSE: 1, EXTRACT: 2}
_COLS = "id, message_id, sub, kind, segment_id, payload, created_at, attempts"


@dataclass(frozen=True)
class Step:
    id: int
    message_id: int
    sub: int
    kind: str
    segment_id: int | None
    payload: str | None
    created_at: str
    attempts: int


def step_problem(kind: Any, segment_id: Any, payload: Any) -> str | None:
    """Why a queued row cannot be run, or None. The file may come from anyone (or from an export):
    a row with an unknown kind, a close or extract without its segment, or a CoreFact candidate
    that is not one (the shape ``core_facts.Candidate.to_json`` writes) is set aside, never run."""
    if kind == PLACE:
        return None
    if kind in (CLOSE, EXTRACT):
        return None if isinstance(segment_id, int) else f"a {kind} step without its segment"
    if kind != FACT:
        return f"unknown step kind {str(kind)[:40]!r}"
    if not isinstance(payload, str):
        return "a fact step without its candidate"
    try:
        d = json.loads(payload)
    except ValueError:
        return "a fact step whose candidate is not JSON"
    return _candidate_problem(d)


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
    return None


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        """Enqueue a step; a CoreFact candidate's position is ``index`` (sub = 3 + index)."""
        sub = _SUB[kind] if kind != FACT else 3 + index
        self.con.execute("INSERT INTO work_queue(message_id, sub, kind, segment_id, payload, created_at) "
                         "VALUES(?,?,?,?,?,?)", (message_id, sub, kind, segment_id, payload, created_at))

    def head(self) -> Step | None:
        """The next step to run."""
        r = self.con.execute(f"SELECT {_COLS} FROM work_queue ORDER BY message_id, sub LIMIT 1").fetchone()
        return None if r is None else Step(*r)

    def pending(self, kinds: tuple[str, ...], limit: int) -> list[Step]:
        """The earliest pending steps of the given kinds, in queue order."""
        marks = ",".join("?" * len(kinds))
        return [Step(*r) for r in self.con.execute(
            f"SELECT {_COLS} FROM work_queue WHERE kind IN ({marks}) ORDER BY message_id, sub LIMIT ?",
            (*kinds, limit))]

    # A step is identified by (message_id, sub), never by its rowid: rowids of deleted rows are
    # reused, while a (message_id, sub) pair is enqueued at most once in a file's life.
    def exists(self, step: Step) -> bool:
        return self.con.execute("SELECT 1 FROM work_queue WHERE message_id=? AND sub=?",
                                (step.message_id, step.sub)).fetchone() is not None

    def done(self, step: Step) -> None:
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND sub=?", (step.message_id, step.sub))

    def set_aside(self, step: Step, why: str) -> None:
        """Remove a row that cannot be run (:func:`step_problem`), saying so in the log, so that
        the queue (and every ``add`` that runs it) goes on."""
        log.warning("queued step (message %d, sub %d, kind %.40r) set aside: %s; payload %.200r",
                    step.message_id, step.sub, step.kind, why, step.payload)
        self.done(step)

    def drop_message(self, message_id: int) -> None:
        """A forgotten message's pending placement."""
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND kind=?", (message_id, PLACE))

    def backlog(self) -> tuple[int, str | None]:
        """(pending steps, creation time of the oldest)."""
        n, oldest = self.con.execute("SELECT count(*), min(created_at) FROM work_queue").fetchone()
        return int(n), oldest
