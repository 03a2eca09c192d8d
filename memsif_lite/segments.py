"""Topical Segments (paper §3.2): the double-threshold boundary rule, applied online.

Messages are processed in arrival order. The first message opens a segment. For each later
message u_t and the open segment S_i:  φ(u_t, S_i) ≥ τ_merge appends;  φ ≤ τ_split opens a new
segment;  otherwise the boundary judge decides (the LLM when configured, else the offline
rule: continue iff φ is above the band's midpoint and the time gap is under ``MAX_GAP``).
Then the episode rules hold whatever φ or the judge said (memsif_lite.episodes, issue 26): a
session change or a gap over ``segment_gap_s`` ends the segment; the rest of a same-speaker burst
joins it. They are applied with the decision, where the message itself is known.
When a segment closes the worker hands it to the trajectory step and then to CoreFact
extraction (:mod:`memsif_lite.steps`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Mapping, NamedTuple, Protocol, Sequence

import numpy as np

from . import prompts
from .db import Database, MessageRow, Unit
from .db.structure import entity_counts
from .episodes import ATTACH, boundary_rule
from .errors import StaleError
from .llm import LLM
from .matching import phi
from .timeutil import from_stored
from .types import Segment

__all__ = ["BoundaryJudge", "OfflineBoundaryJudge", "LLMBoundaryJudge", "SegmentBuilder", "PlaceDecision",
           "segment_lines", "list_segments", "label", "MAX_GAP", "Placed", "Seen",
           "reads_lines"]

log = logging.getLogger("memsif_lite")

#: offline judge: a gap longer than this between messages counts against continuing a topic
MAX_GAP = timedelta(hours=6)


def segment_lines(db: Database, segment_id: int, limit: int = 6) -> list[str]:
    """A segment's last ``limit`` messages as ``Speaker: text`` lines (text cut at 500 characters)."""
    return [f"{s}: {t[:500]}" for s, t in db.structure.last_lines(segment_id, limit)]


class BoundaryJudge(Protocol):
    """Decides the ambiguous band τ_split < φ < τ_merge: does the message continue the segment?
    A judge whose ``reads_lines`` is False is given no lines (they are not read for it)."""

    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool: ...


def reads_lines(judge: object) -> bool:
    """Whether a judge reads the lines it is given (a judge that does not say so does)."""
    return bool(getattr(judge, "reads_lines", True))


class OfflineBoundaryJudge:
    """Deterministic: continue iff φ ≥ the band's midpoint and the gap is under MAX_GAP."""

    reads_lines = False  # φ and the gap only

    def __init__(self, tau_split: float, tau_merge: float):
        self.mid = (tau_split + tau_merge) / 2.0

    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool:
        return score >= self.mid and gap <= MAX_GAP


class LLMBoundaryJudge:
    """Asks the LLM; falls back to the offline judge when the call fails."""

    def __init__(self, llm: LLM, fallback: BoundaryJudge):
        self.llm, self.fallback = llm, fallback

    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool:
        verdict = self.llm.complete(prompts.boundary(segment_lines, message_line))
        if verdict is None:
            return self.fallback.continues(segment_lines, message_line, score, gap)
        return verdict


@dataclass(frozen=True)
class Seen:
    """What a placement decision read (the open segment, the episode rule for the message), kept
    for :meth:`SegmentBuilder.apply` to use while nothing was written since (``stamp``:
    :meth:`~memsif_lite.db.Database.write_stamp`), instead of reading it again."""

    stamp: tuple[int, int] | None
    message_id: int | None
    segment: Unit | None
    rule: str | None


@dataclass(frozen=True)
class PlaceDecision:
    """Where one message goes, decided with no transaction open (the judge may be an LLM), and
    the open segment's state it was decided on."""

    open_id: int | None
    open_n: int
    decision: str            # first | merge | split | judge_merge | judge_split
    score: float | None
    seen: Seen | None = field(default=None, compare=False, repr=False)


class Placed(NamedTuple):
    """What :meth:`SegmentBuilder.apply` did: the segment the message went to, the one it closed."""

    segment_id: int
    closed: int | None


class SegmentBuilder:
    """Places each new message into the open segment or a new one (closing the open one)."""

    def __init__(self, db: Database, *, alpha: float, tau_merge: float, tau_split: float,
                 levels: tuple[float, float], judge: BoundaryJudge, gap_s: float = float("inf"),
                 burst_s: float = 0.0):
        self.db = db
        self.alpha, self.tau_merge, self.tau_split, self.levels = alpha, tau_merge, tau_split, levels
        self.judge = judge
        self.gap_s, self.burst_s = gap_s, burst_s

    def decide(self, vec: np.ndarray, ents: list[str], at: str, line: str,
               message_id: int | None = None, message: MessageRow | None = None) -> PlaceDecision:
        """The double-threshold rule against the open segment; the judge only inside the band, and
        not when an episode rule decides for the message (``message_id``; ``message``: its row, when
        the caller has read it) anyway."""
        stamp = self.db.write_stamp()
        seg = self.db.structure.open_segment()
        if seg is None:
            return PlaceDecision(None, 0, "first", None, Seen(stamp, message_id, None, None))
        score = phi(vec, ents, seg.centroid, seg.entities.keys(), alpha=self.alpha, levels=self.levels)
        rule = self._episode(message_id, seg, message) if message_id is not None else None
        if rule:
            decision = rule
        elif score >= self.tau_merge:
            decision = "merge"
        elif score <= self.tau_split:
            decision = "split"
        else:
            gap = abs(from_stored(at) - from_stored(seg.end_at))
            # the offline judge reads only φ and the gap: the segment's lines are not read for it
            lines = segment_lines(self.db, seg.id) if reads_lines(self.judge) else ()
            ok = self.judge.continues(lines, line, score, gap)
            decision = "judge_merge" if ok else "judge_split"
        seen = Seen(stamp, message_id, seg, rule) if message_id is not None else None
        return PlaceDecision(seg.id, seg.n, decision, score, seen)

    def apply(self, message_id: int, vec: np.ndarray, ents: list[str], at: str, d: PlaceDecision) -> Placed:
        """Write a decision (inside a write transaction); returns the segment the message went to
        and the one it closed, if any. Raises :class:`StaleError` if the open segment changed since
        the decision. Decided in this transaction with nothing written since (offline, inside
        ``add``'s), it applies what the decision read (:class:`Seen`): the same rows."""
        structure = self.db.structure
        seen = d.seen
        if seen is not None and seen.message_id == message_id and self.db.unchanged_since(seen.stamp):
            seg, rule = seen.segment, seen.rule
        else:
            seg = structure.open_segment()
            if (seg.id if seg else None) != d.open_id or (seg.n if seg else 0) != d.open_n:
                raise StaleError("the open segment changed")
            rule = self._episode(message_id, seg)
        closed = None
        decision = rule or d.decision
        if decision in ("merge", "judge_merge", ATTACH):
            assert seg is not None
            seg.add(vec, ents, at, at)
            structure.save("segment", seg)
            seg_id = seg.id
        else:
            if seg is not None:
                structure.close_segment(seg.id)
                closed = seg.id
            seg_id = structure.create_segment(vec, ents, at)
        structure.place_message(message_id, seg_id, ents, d.score, decision)
        return Placed(seg_id, closed)

    def _episode(self, message_id: int, seg: Unit | None, new: MessageRow | None = None) -> str | None:
        """The episode rules (memsif_lite.episodes) for a message (``new``: its row, if read) and the
        open segment: they hold whatever φ or the judge decided. The open segment's last message
        is the one before."""
        if new is None or new.id != message_id:
            new = self.db.messages.get(message_id)
        if seg is None or new is None:
            return None
        last = self.db.structure.last_member(seg.id)
        prev = self.db.messages.get(last) if last is not None and last != message_id else None
        return boundary_rule(prev, new, seg.end_at, gap_s=self.gap_s, burst_s=self.burst_s)

def label(entity_counts: Mapping[str, int], n: int = 4) -> str:
    """A unit's label when it has no title: top entities by count, whole names before their parts."""
    ranked = sorted(entity_counts.items(), key=lambda kv: (-kv[1], -len(kv[0].split()), kv[0]))
    picked: list[str] = []
    for e, _ in ranked:
        if any(e in p.split() for p in picked):
            continue
        picked.append(e)
        if len(picked) == n:
            break
    return ", ".join(picked)


def list_segments(db: Database) -> list[Segment]:
    """Every Topical Segment in order, with its messages, span, entities and label."""
    members = db.structure.memberships()
    out = []
    for sid, tid, ents, start, end, closed, title in db.structure.segment_rows():
        counts = entity_counts(f"segment {sid}", ents)
        out.append(Segment(sid, tid, tuple(members.get(sid, ())), from_stored(start), from_stored(end),
                           tuple(sorted(counts)), title or label(counts), bool(closed)))
    return out
