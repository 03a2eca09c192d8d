"""Why does it believe that? The change log read back (``Memory.changes``) and taken back
(``Memory.undo``); the design is in docs/history.md.

Undo takes back one CoreFact change (``fact.add`` / ``fact.update`` / ``fact.merge`` /
``fact.supersede``) and every later change that built on it — one that touched a fact the change
touched, or a fact such a later change touched — newest first, each from the before images its
log row keeps, in one transaction that logs one ``undo`` row per change taken back. The candidate
an undone change wrote is remembered (its ``decision`` hash), so processing the same messages again
(a merge's replay) does not write it again. A ``forget`` keeps nothing of what it removed and cannot
be undone; nor can a change that a later forget or merge built on (say so, do not guess).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Iterable, Sequence

from .checks import check_id
from .db import Database, MessageRow
from .db.changes import UNDOABLE_OPS
from .db.merge import tombstone_hash
from .entities import normalise
from .errors import InvalidInputError, NotFoundError
from .filters import MessageFilter
from .timeutil import from_stored
from .types import Change, CoreFact, Segment, Trajectory, UndoReport

__all__ = ["decision_key", "fact_actor", "changes", "undo", "facts_as_of", "segments_as_of", "trajectories_as_of"]


def decision_key(subject: str, ftype: str, stmt: str, cited: Iterable[MessageRow]) -> str:
    """The hash naming one CoreFact candidate across files and replays: its subject, type and
    statement, and the content hashes of the messages it cites (message ids change in a merge)."""
    material = [normalise(subject), ftype, stmt, sorted(tombstone_hash(m.speaker, m.text, m.at).hex() for m in cited)]
    return hashlib.sha256(json.dumps(material, ensure_ascii=False).encode("utf-8")).hexdigest()


def fact_actor(op_by: str, origin: str, model: str | None) -> tuple[str, str | None]:
    """(actor, prompt purpose) of a CoreFact change: the LLM that chose the operation, else the LLM
    that extracted the candidate, else the offline rule."""
    if op_by != "rule":
        return op_by, "fact_operation"
    if origin == "llm" and model is not None:
        return f"llm:{model}", "fact_extract"
    return "rule", None


def changes(db: Database, *, since: Any = None, until: Any = None, actor: Any = None, fact_id: Any = None,
            op: Any = None, limit: Any = None) -> list[Change]:
    """``Memory.changes``: log rows in order, by record time (``since`` / ``until``: datetime, date
    or ISO string, inclusive), ``actor`` (``llm`` matches every ``llm:<model>``), ``fact_id`` and
    ``op`` (``fact`` matches every ``fact.*``)."""
    flt = MessageFilter.build(since=since, until=until)
    for name, value in (("actor", actor), ("op", op)):
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 200):
            raise InvalidInputError(f"{name} must be a non-empty string")
    if fact_id is not None:
        check_id(fact_id, "fact_id")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidInputError("limit must be a non-negative integer")
    return db.changes.select(since=flt.since if flt else None, until=flt.until if flt else None, actor=actor,
                             fact_id=fact_id, op=op, limit=limit)


def _plan(db: Database, change_id: int) -> list[Change]:
    """The changes an undo of ``change_id`` takes back, newest first (reads only)."""
    target = db.changes.get(change_id)
    if target is None:
        raise NotFoundError(f"no change with id {change_id}")
    if target.op == "forget":
        raise InvalidInputError(f"change {change_id} is a forget: nothing it removed was kept, so it cannot be "
                                "undone")
    if target.undone_by is not None:
        raise InvalidInputError(f"change {change_id} was undone already (by change {target.undone_by})")
    if target.op not in UNDOABLE_OPS:
        raise InvalidInputError(f"change {change_id} ({target.op}) cannot be undone: only CoreFact changes "
                                f"({', '.join(sorted(UNDOABLE_OPS))}) can")
    if not target.undoable:
        raise InvalidInputError(f"change {change_id} cannot be undone: a later forget erased what it would restore")
    later = db.changes.later_touching(change_id, set(target.fact_ids))
    found = db.changes.rows([cid for cid, _ in later])
    for c in found:
        if c.op not in UNDOABLE_OPS or not c.undoable:
            raise InvalidInputError(
                f"change {change_id} cannot be undone: a later {c.op} (change {c.id}, by {c.actor}) changed the "
                "same facts and cannot be taken back with it")
    return sorted([target, *found], key=lambda c: -c.id)


def undo(db: Database, change_id: Any, *, dry_run: bool = False) -> UndoReport:
    """``Memory.undo``: see the module docstring. With ``dry_run`` nothing is written."""
    check_id(change_id, "change_id")
    if dry_run:
        with db.read():
            plan = _plan(db, change_id)
        return UndoReport(change_id, tuple(plan), _facts(plan), dry_run=True)
    with db.write():
        plan = _plan(db, change_id)
        for c in plan:
            touched = db.changes.restore(c.id)
            db.changes.write("undo", "user", ids={"facts": touched}, undoes=c.id,
                             summary=f"undo of change {c.id} ({c.op})")
    return UndoReport(change_id, tuple(plan), _facts(plan))


def _facts(plan: Sequence[Change]) -> tuple[int, ...]:
    return tuple(sorted({f for c in plan for f in c.fact_ids}))


# -- as_of: valid time (docs/history.md) -------------------------------------------------------------
def facts_as_of(facts: list[CoreFact], flt: MessageFilter | None) -> list[CoreFact]:
    """Facts read ``as_of`` a time (filtered to those valid then by the data-access layer) as they
    stood then: one superseded later was current, so it shows no end and no successor."""
    if flt is None or flt.as_of is None:
        return facts
    return [dataclasses.replace(f, valid_to=None, superseded_by=None) for f in facts]


def segments_as_of(db: Database, segments: list[Segment], as_of: Any) -> list[Segment]:
    """The Topical Segments as they stood at valid time ``as_of``: only messages said by then, a
    segment with later messages still open (and in no trajectory yet), one with none left out."""
    flt = MessageFilter.build(as_of=as_of)
    if flt is None:
        return segments
    rows = db.messages.many(sorted(db.filters.keep([m for s in segments for m in s.message_ids], flt)))
    out = []
    for s in segments:
        kept = tuple(m for m in s.message_ids if m in rows)
        if not kept:
            continue
        whole = len(kept) == len(s.message_ids)
        out.append(dataclasses.replace(
            s, message_ids=kept, end=max(from_stored(rows[m].at) for m in kept), closed=s.closed and whole,
            trajectory_id=s.trajectory_id if whole else None))
    return out


def trajectories_as_of(trajectories: list[Trajectory], segments: list[Segment]) -> list[Trajectory]:
    """The Event Trajectories made of ``segments`` (as :func:`segments_as_of` gives them)."""
    by_traj: dict[int, list[Segment]] = {}
    for s in segments:
        if s.trajectory_id is not None:
            by_traj.setdefault(s.trajectory_id, []).append(s)
    out = []
    for t in trajectories:
        ss = by_traj.get(t.id)
        if ss:
            out.append(dataclasses.replace(t, segment_ids=tuple(s.id for s in ss),
                                           message_ids=tuple(m for s in ss for m in s.message_ids),
                                           start=min(s.start for s in ss), end=max(s.end for s in ss)))
    return out
