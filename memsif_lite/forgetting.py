"""``Memory.forget``: delete a message or a fact and everything derived only from it.

A forgotten message leaves a tombstone (a hash of its speaker, text and time, never the content),
so that merging a copy of the file that still has it does not bring it back (``memsif merge``).

Provenance makes this exact: a message's vector, full-text row and structure membership go
with it; its segment and trajectory are recomputed from the remaining members (and removed if
empty); CoreFacts whose every source is gone are deleted (a fact they had superseded becomes
current again); a fact that keeps other sources loses the merge/update events that came only from
the message, an update it made is undone and its validity starts at its earliest remaining
source (a later merge re-derives such facts exactly: the
tombstone marks the file dirty from their earliest source), and it keeps no word only the message
had (:func:`reword`: worded again from its remaining sources, else deleted; so does a fact whose
LLM extraction was shown the message beside its own sources); ActiveFact evidence
from it is removed, with the statements holding its own words, and the clusters re-scored (a
cluster left without statements disappears, a promotion that no longer holds is withdrawn); the
segment that held it loses its LLM title (and a pending step of its segment, or of one shown it,
read before is decided again); a change log row made from messages shown with it
loses its content when that holds a word of it they do not say.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import numpy as np

from .active_facts import ActiveFactStore
from .checks import check_id, check_text
from .config import FactType
from .core_facts import CONTEXT_MESSAGES, Candidate, same_subject
from .db import Database, QueuedStep, Unit
from .db.merge import tombstone_hash
from .errors import InvalidInputError, NotFoundError
from .entities import words_of
from .fact_extraction import extract_offline, stated_starts
from .timeutil import now_stored, to_stored

__all__ = ["Batch", "forget", "forget_message", "forget_fact", "recompute_unit", "reword"]


def forget(db: Database, active_store: ActiveFactStore, *, message_id: Any = None, fact_id: Any = None,
           source_id: Any = None, speaker: Any = None, item_id: Any = None) -> list[int]:
    """``Memory.forget``: exactly one of a message id, a CoreFact id, a ``source_id`` (every
    message with it, of ``speaker`` when given) or a session item id, in one transaction. Returns the ids forgotten.
    Ids are never reused (sql/0010), so an id read earlier can only miss, never hit another message."""
    if sum(x is not None for x in (message_id, fact_id, source_id, item_id)) != 1:
        raise InvalidInputError("give exactly one of message_id, fact_id, source_id or item_id")
    if speaker is not None and source_id is None:
        raise InvalidInputError("speaker narrows a source_id; give source_id too")
    if message_id is not None:
        check_id(message_id, "message_id")
    if fact_id is not None:
        check_id(fact_id, "fact_id")
    if item_id is not None:  # a session item: nothing is derived from it
        check_id(item_id, "item_id")
        with db.write():
            if not db.items.delete(item_id):
                raise NotFoundError(f"no session item with id {item_id}")
        return [item_id]
    if source_id is not None:
        check_text(source_id, "source_id")
        if speaker is not None:
            speaker = " ".join(check_text(speaker, "speaker").split())  # as ingest stores it
    with db.write(), db.changes.record("forget", "user") as change:  # no images: nothing forgotten is kept
        if fact_id is not None:
            if not db.facts.exists(fact_id):
                raise NotFoundError(f"no fact with id {fact_id}")
            forget_fact(db, fact_id)
            db.changes.redact(facts=list(change.images))
            return [fact_id]
        if message_id is not None:
            if not db.messages.exists(message_id):
                raise NotFoundError(f"no message with id {message_id}")
            ids = [message_id]
        else:
            ids = db.messages.with_source(source_id, speaker)
            if not ids:
                who = f" from {speaker}" if speaker is not None else ""
                raise NotFoundError(f"no message{who} with source id {source_id!r}")
        batch = Batch(db, ids)
        for mid in ids:
            forget_message(db, mid, active_store, batch)
        batch.recompute_units()
        change.touch("messages", ids)
        db.changes.redact(facts=list(change.images), messages=ids)
        return ids


def forget_message(db: Database, mid: int, active_store: ActiveFactStore, batch: Batch | None = None) -> None:
    """Delete one message and what was derived only from it (the caller holds the transaction).
    One of a ``batch`` (:class:`Batch`): its segment and trajectory are recomputed by
    :meth:`Batch.recompute_units`, once for all, when the caller calls it."""
    row = db.messages.get(mid)
    sid = db.structure.segment_of_message(mid)
    shown = [m for m in db.structure.shown_with(mid, CONTEXT_MESSAGES) if m != mid]
    db.queue.drop_message(mid)
    # an extract or close step deciding now reads its segment with the message (or in its context):
    # it is decided again from what is left, rather than write its words after this
    db.queue.restamp({s for s in (db.structure.segment_of_message(m) for m in [mid, *shown]) if s is not None})
    orphans, kept = db.facts.drop_source(mid)
    for fid in orphans:
        db.facts.delete(fid)
    dirty = [row.at] if row is not None else []
    said = f"{row.speaker} {row.text}" if row is not None else ""
    beside = Shown(db, mid, said)
    for fid in kept:  # its merge/update events go; an update it made is undone
        fact = db.facts.get(fid)
        if fact is None:
            continue
        dirty.append(to_stored(fact.valid_from))
        before = db.facts.drop_unsupported_events(fid)
        if before is not None:
            db.facts.rewrite(fid, before, active_store.embed_passages([before])[0], now_stored())
        if reword(db, fid, said, active_store.embed_passages, beside.words(fact.message_ids)) is None:
            db.facts.delete(fid)  # nothing it keeps says it in words of its own
            continue
        sources = db.messages.many(list(db.facts.sources(fid))).values()
        db.facts.realign_valid_from(fid, now_stored(), {t for m in sources for t in stated_starts(m)})
    if said and shown:  # facts an LLM extracted with the message in view, citing others
        for fid in db.facts.citing(shown):
            fact = db.facts.get(fid)
            if fact is None or fid in kept:
                continue
            done = reword(db, fid, said, active_store.embed_passages, beside.words(fact.message_ids))
            if done is not False:
                dirty.append(to_stored(fact.valid_from))
            if done is None:
                db.facts.delete(fid)
    if said:  # CoreFact candidates extracted with the message in view, not written yet
        drop_candidates(db, db.queue.citing("fact", [mid, *shown]), mid, beside)
    if said and shown:  # the log's rows of changes made from what was shown with it (a merge's summary)
        leaky = []
        for rid, text, cited in (batch if batch is not None else Batch(db, [mid])).naming(shown):
            if mid in cited:
                continue  # erased with the message (:func:`forget`)
            held = words_of(text) & beside.said
            if held and held - beside.words(cited):
                leaky.append(rid)
        db.changes.erase(leaky)
    if row is not None:  # a merge re-derives everything from the earliest time this touched
        db.tombstones.add(tombstone_hash(row.speaker, row.text, row.at), now_stored(), local_at=min(dirty))
    active_store.forget_message(mid, said)
    db.structure.unplace_message(mid)  # (only now: the context extraction was shown is read above)
    db.messages.delete(mid)
    if sid is not None:
        db.structure.drop_title(sid)  # written from its lines, this one among them
        tid = db.structure.trajectory_of_segment(sid)
        if batch is not None:
            batch.segments[sid] = tid
            return
        recompute_unit(db, "segment", sid)
        if tid is not None:
            recompute_unit(db, "trajectory", tid)


class Batch:
    """What a forget of several messages (a ``source_id``) does once for all of them, where one
    forget after another would do it for each: the change-log rows citing what was shown with
    them are found in one pass over the log, not one a message (:meth:`naming`), and each segment
    and trajectory that lost members is recomputed from what is left once, at the end
    (:meth:`recompute_units`), not once a member (a trajectory of a long life holds hundreds of
    thousands). Nothing in between reads a unit's aggregate: a message's forget reads
    memberships, which change as before, one message at a time; an emptied segment waits for
    the end to be removed, and until then holds no message, as if it were gone. The rows found stay
    right because a change-log row is never deleted and its ``ids`` never change: between two
    messages a row can only be written (looked up again: ids above the last seen) or lose its
    content (each answer keeps only rows still holding some). Whoever makes a batch calls
    :meth:`recompute_units` before the transaction ends (:func:`forget`, a merge's tombstones)."""

    def __init__(self, db: Database, mids: Sequence[int]):
        self.db, self.mids = db, list(mids)
        self.segments: dict[int, int | None] = {}  # segment that lost members -> its trajectory
        self._rows: dict[int, tuple[int, str, list[int], frozenset[int]]] = {}
        self._covered: set[int] | None = None  # messages the rows were looked up for
        self._after = 0  # the log's last row when they were

    def naming(self, shown: Sequence[int]) -> list[tuple[int, str, list[int]]]:
        """:meth:`~memsif_lite.db.changes.ChangeLog.naming` of ``shown`` as it reads now: the first
        call looks up what every message of the batch was shown with then; a later one looks up
        only messages shown since (memberships change as messages go) and rows written since; rows
        erased since (they hold nothing now) are left out."""
        log = self.db.changes
        if self._covered is None:
            want = set(shown)
            if len(self.mids) > 1:
                for m in self.mids:
                    want.update(self.db.structure.shown_with(m, CONTEXT_MESSAGES))
            self._after = log.last_id()
            self._covered = set()
            self._add(log.naming(sorted(want)), want)
        else:
            missing = set(shown) - self._covered
            last = log.last_id()
            if last > self._after:  # rows written meanwhile (an ActiveFact promotion): for every message
                self._add(log.naming(sorted(self._covered | missing), after=self._after), set())
                self._after = last
            if missing:
                self._add(log.naming(sorted(missing)), missing)
        wanted = set(shown)
        rows = [self._rows[k] for k in sorted(self._rows) if self._rows[k][3] & wanted]
        held = log.holding([r[0] for r in rows])
        return [(rid, text, cited) for rid, text, cited, _ in rows if rid in held]

    def _add(self, rows: list[tuple[int, str, list[int], frozenset[int]]], covered: set[int]) -> None:
        for rid, text, cited, named in rows:
            had = self._rows.get(rid)
            self._rows[rid] = (rid, text, cited, named | had[3] if had else named)
        assert self._covered is not None
        self._covered |= covered

    def recompute_units(self) -> None:
        """Each segment that lost members, then each trajectory, from what is left (removed when
        nothing is)."""
        for sid in sorted(self.segments):
            recompute_unit(self.db, "segment", sid)
        for tid in sorted({t for t in self.segments.values() if t is not None}):
            recompute_unit(self.db, "trajectory", tid)


class Shown:
    """The words said beside a message being forgotten (``mid``, still placed; ``said``: its
    speaker and text, :attr:`said` its words), read once per segment for the whole forget of it:
    :meth:`words` of the messages a fact, candidate or change cites are theirs and those of
    everything its extraction was shown with them (their segments and the trajectory context of
    each: :meth:`~memsif_lite.core_facts.CoreFactWriter.extract`), ``mid`` aside. A forget reads
    these for every fact, queued candidate and change-log row near the message; segments and
    placements do not change until the forget's last steps, so each segment is read once."""

    def __init__(self, db: Database, mid: int, said: str):
        self.db, self.mid = db, mid
        self.said = words_of(said)
        self._segments: dict[int, frozenset[str]] = {}

    def words(self, message_ids: Sequence[int]) -> frozenset[str]:
        ids = [m for m in message_ids if m != self.mid]
        out: set[str] = set()
        for m in self.db.messages.many(ids).values():
            out |= words_of(f"{m.speaker} {m.text}")
        for sid in {self.db.structure.segment_of_message(m) for m in ids}:
            if sid is not None:
                out |= self._segment(sid)
        return frozenset(out)

    def _segment(self, sid: int) -> frozenset[str]:
        if sid not in self._segments:
            st = self.db.structure
            shown = {m.id for m in st.segment_messages(sid)}
            shown.update(m.id for m in st.trajectory_context(sid, CONTEXT_MESSAGES))
            shown.discard(self.mid)
            self._segments[sid] = words_of(" ".join(
                f"{m.speaker} {m.text}" for m in self.db.messages.many(sorted(shown)).values()))
        return self._segments[sid]


def reword(db: Database, fid: int, said: str, embed_passages: Callable[[Sequence[str]], np.ndarray],
           beside: frozenset[str] = frozenset()) -> bool | None:
    """A CoreFact keeps no word only a forgotten message had (``said``: its speaker and text): one
    that none of the fact's sources says (nor ``beside``: the words of the other messages its
    extraction was shown, :meth:`Shown.words`), function words aside, in its subject, statement, slot or history.
    A statement (or slot) that holds one is replaced by the one the offline rules extract from the
    fact's sources (of its subject and type, the one sharing most words with it; ties: the
    earliest), re-embedded, with that candidate's slot, and so is every history entry holding one.
    Returns False when nothing held such a word, True when the fact was worded again, None when the offline
    rules give no such statement: the fact must go."""
    fact = db.facts.get(fid)
    if fact is None or not said:
        return False
    sources = sorted(db.messages.many(list(fact.message_ids)).values(), key=lambda m: (m.at, m.id))
    gone = words_of(said) - beside - words_of(" ".join(f"{m.speaker} {m.text}" for m in sources))
    if not gone:
        return False
    leaky = [hid for hid, stmt in db.facts.events(fid) if words_of(stmt) & gone]
    stmt, slot = fact.stmt, db.facts.slot(fid)
    if not leaky and not words_of(f"{fact.subject} {stmt} {slot or ''}") & gone:
        return False
    if words_of(fact.subject) & gone:
        return None
    if words_of(f"{stmt} {slot or ''}") & gone:
        found = [c for c in extract_offline(sources, [FactType(fact.type, fact.type)])
                 if same_subject(c.subject, fact.subject)]
        if not found:
            return None
        have = words_of(stmt)
        best = max(found, key=lambda c: len(words_of(c.stmt) & have))  # ties: the earliest
        stmt, slot = best.stmt, best.slot
    db.facts.reword(fid, stmt, slot, embed_passages([stmt])[0], now_stored(), leaky)
    return True


def drop_candidates(db: Database, steps: Sequence[QueuedStep], mid: int, beside: Shown) -> None:
    """Pending *fact* steps whose candidate was extracted with message ``mid`` in view (``beside``
    its words, :class:`Shown`): one citing only it, or holding a word of it that none of the other messages
    it cites says (nor one shown beside them: :meth:`Shown.words`), is dropped, as :func:`reword`
    would drop the fact it writes; one that is kept
    cites the message no more (a *fact* step citing a message that is gone comes from before this
    check, and writes nothing: :class:`memsif_lite.steps.fact.Fact`)."""
    for step in steps:
        try:
            c = Candidate.from_json(str(step.payload))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue  # a malformed step is set aside when it comes up
        cited = [m for m in c.message_ids if m != mid]
        gone = beside.said - beside.words(cited)
        if not db.messages.many(cited) or words_of(" ".join([c.subject, c.stmt, *c.ends])) & gone:
            db.queue.done(step)
        elif len(cited) < len(c.message_ids):  # it no longer cites the message (a step read before now is stale)
            db.queue.set_payload(step, dataclasses.replace(c, message_ids=tuple(cited)).to_json())


def forget_fact(db: Database, fid: int) -> None:
    """Delete one CoreFact with its history; a fact it superseded becomes current again."""
    db.facts.delete(fid)


def recompute_unit(db: Database, level: str, uid: int) -> None:
    """A segment's or trajectory's aggregate from its remaining members (removed when none is left)."""
    members = db.structure.member_vectors(level, uid)
    if not members.ids:
        db.structure.delete_unit(level, uid)
        return
    u = Unit(uid, len(members.ids), members.vec_sum, members.entity_counts(), min(members.ats), max(members.ats))
    n_segments = db.structure.segment_count(uid) if level == "trajectory" else None
    db.structure.save(level, u, n_segments=n_segments)
    if level == "trajectory":
        db.structure.set_entities(uid, u.entities)
