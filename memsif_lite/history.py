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
from typing import Any, Collection, Iterable, Mapping, Sequence

from .checks import check_id
from .db import Database, MessageRow
from .db.changes import UNDOABLE_OPS, CarriedChange
from .db.merge import tombstone_hash
from .entities import normalise
from .errors import InvalidInputError, NotFoundError
from .filters import MessageFilter
from .timeutil import from_stored
from .types import Change, Segment, Trajectory, UndoReport

__all__ = ["decision_key", "fact_actor", "changes", "undo", "take_back_theirs", "carry_log",
           "segments_as_of", "trajectories_as_of"]


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
    """The changes an undo of ``change_id`` takes back, newest first (reads only). A change that
    came with a merge is taken back through the change here that wrote its candidate."""
    target = db.changes.get(change_id)
    if target is None:
        raise NotFoundError(f"no change with id {change_id}")
    if target.origin is not None and target.op in UNDOABLE_OPS and target.undone_by is None:
        local = db.changes.realization(change_id)
        if local is None:
            raise InvalidInputError(
                f"change {change_id} came from file {target.origin} and no change here wrote its candidate (the "
                "merge's replay decided otherwise, has not run yet, or it was taken back): nothing to undo")
        return sorted([*_plan(db, local), target], key=lambda c: -c.id)
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
        _take_back(db, plan, "user")
    return UndoReport(change_id, tuple(plan), _facts(plan))


def _take_back(db: Database, plan: Sequence[Change], actor: str, *, skip: int | None = None) -> None:
    """Restore each change of ``plan`` (newest first) and log its ``undo`` row (but ``skip``'s: a
    merge copies the other file's own row for it)."""
    for c in plan:
        with db.changes.record("undo", actor, undoes=c.id, summary=f"undo of change {c.id} ({c.op})") as change:
            change.touch("facts", db.changes.restore(c.id) if c.origin is None else [])
            change.skip = c.id == skip


# -- merges carry the log (docs/history.md, "Merges") ------------------------------------------------
def take_back_theirs(db: Database, theirs: Sequence[CarriedChange], actor: str) -> set[int]:
    """Before a merge's rebuild (inside its transaction): each undo in the other file's log of a
    change this file holds too (the same uid, or one that wrote the same candidate here), not
    undone here yet, is made here — the change and what built on it here. Returns the ids (in the
    other file) of those undos that could not be made here (a forget or a merge built on the
    change since): :func:`carry_log` copies them without their target."""
    have = db.changes.uids()
    by_id = {c.id: c for c in theirs}
    refused = set()
    for c in theirs:
        target = by_id.get(c.undoes) if c.op == "undo" and c.undoes is not None else None
        tid = None if c.uid in have or target is None else have.get(target.uid)
        if tid is None:
            continue
        mine = db.changes.get(tid)
        if mine is None or mine.undone_by is not None or mine.op not in UNDOABLE_OPS:
            continue
        try:
            plan = _plan(db, tid)
        except InvalidInputError:
            if mine.origin is None:
                refused.add(c.id)
            continue
        _take_back(db, plan, actor, skip=tid)
    return refused


def carry_log(db: Database, theirs: Sequence[CarriedChange], *, file_id: str, messages: Mapping[int, int | None],
              refused: Collection[int] = ()) -> int:
    """Copy the other file's log rows this file does not hold (by uid) into it, in their order, with
    their record time and actor, ``origin`` the file that recorded them (``file_id`` for its own).
    Message ids become this file's (``messages``: theirs -> ours, None when not here); a row naming a
    message not here (forgotten on either side) keeps no summary; the other ids (facts, segments,
    ...) are theirs and are not kept: a copied CoreFact change is tied to this file's facts by the
    change here that wrote its candidate. Returns the rows copied."""
    have = db.changes.uids()
    ours: dict[int, int] = {}
    n = 0
    for c in theirs:
        if c.uid in have:
            ours[c.id] = have[c.uid]
            continue
        mids = [messages.get(m) for m in c.ids.get("messages", ())]
        kept = [m for m in mids if m is not None]
        undoes = None if c.undoes is None or c.id in refused else ours.get(c.undoes)
        summary = None if len(kept) < len(mids) else c.summary
        if c.id in refused and summary is not None:
            summary += " (not taken back here: a later change built on it here)"
        ours[c.id] = have[c.uid] = db.changes.write(
            c.op, c.actor, ids={"messages": kept}, purpose=c.purpose, summary=summary, decision=c.decision,
            undoes=undoes, origin=c.origin or file_id, at=c.at, uid=c.uid)
        n += 1
    return n


def _facts(plan: Sequence[Change]) -> tuple[int, ...]:
    return tuple(sorted({f for c in plan for f in c.fact_ids}))


# -- as_of: valid time (docs/history.md) -------------------------------------------------------------
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
