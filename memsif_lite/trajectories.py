"""Event Trajectories (paper §3.2): link each closed Topical Segment to an evolving event.

For a closed segment S_i: retrieve candidate trajectories by vector search in the file,
re-rank them by φ(S_i, E_j) (semantic part + entity Jaccard), keep the top K, and ask the
trajectory judge which are the same event / task / consistent state. The segment joins the
highest-scoring compatible one, or starts a new trajectory. Offline judge: a candidate is
compatible iff φ ≥ ``trajectory_threshold``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from . import prompts
from .db import Database, Unit
from .db.structure import entity_counts
from .llm import LLM
from .matching import overlap_of, phi_given
from .errors import StaleError
from .segments import label, list_segments, reads_lines, segment_lines
from .timeutil import from_stored
from .types import Segment, Trajectory

__all__ = ["TrajectoryJudge", "OfflineTrajectoryJudge", "LLMTrajectoryJudge", "TrajectoryBuilder", "TrajectoryDecision",
           "list_trajectories", "Read"]

log = logging.getLogger("memsif_lite")


class TrajectoryJudge(Protocol):
    """Given a closed segment and its top-K candidate trajectories (best φ first), the index of
    the one it joins, or None for a new trajectory (a judge whose ``reads_lines`` is False is given
    no lines: :func:`~memsif_lite.segments.reads_lines`)."""

    def choose(self, segment_lines: Sequence[str], candidate_lines: Sequence[Sequence[str]],
               scores: Sequence[float]) -> int | None: ...


class OfflineTrajectoryJudge:
    """Deterministic: the best candidate whose φ reaches ``threshold``."""

    reads_lines = False  # the scores only

    def __init__(self, threshold: float):
        self.threshold = threshold

    def choose(self, segment_lines: Sequence[str], candidate_lines: Sequence[Sequence[str]],
               scores: Sequence[float]) -> int | None:
        for i, s in enumerate(scores):  # scores are sorted, best first
            if s >= self.threshold:
                return i
        return None


class LLMTrajectoryJudge:
    """Asks the LLM which candidates are the same event; falls back to the offline judge."""

    def __init__(self, llm: LLM, fallback: TrajectoryJudge):
        self.llm, self.fallback = llm, fallback

    def choose(self, segment_lines: Sequence[str], candidate_lines: Sequence[Sequence[str]],
               scores: Sequence[float]) -> int | None:
        if not candidate_lines:
            return None
        compatible = self.llm.complete(prompts.trajectory(segment_lines, candidate_lines))
        if compatible is None:
            return self.fallback.choose(segment_lines, candidate_lines, scores)
        # candidates come ordered by matching score: the first compatible one scores highest
        return compatible[0] if compatible else None


@dataclass(frozen=True)
class Read:
    """What a linking decision read (the closed segment, the chosen trajectory), kept for
    :meth:`TrajectoryBuilder.apply` to use while nothing was written since (``stamp``:
    :meth:`~memsif_lite.db.Database.write_stamp`), instead of reading it again."""

    stamp: tuple[int, int] | None
    segment: Unit
    chosen: Unit | None


@dataclass(frozen=True)
class TrajectoryDecision:
    """The top-K candidates ((id, message count) as seen) and the chosen one (None: a new trajectory)."""

    candidates: tuple[tuple[int, int], ...]
    chosen: int | None
    read: Read | None = field(default=None, compare=False, repr=False)


class TrajectoryBuilder:
    def __init__(self, db: Database, *, alpha: float, top_k: int, levels: tuple[float, float],
                 judge: TrajectoryJudge):
        self.db, self.alpha, self.top_k, self.levels = db, alpha, top_k, levels
        self.judge = judge

    def candidates(self, seg: Unit) -> list[tuple[float, Unit]]:
        """Top-K trajectories by φ: KNN on the semantic part first, then entity overlap."""
        structure = self.db.structure
        scored = []
        ents = seg.entities.keys()
        tids = structure.dense("trajectory", seg.mean, max(4 * self.top_k, 12))
        overlaps = structure.entity_overlaps(tids, ents)
        for tid in tids:
            t = structure.load("trajectory", tid, counts=False)
            common, held = overlaps[tid]
            s = phi_given(seg.centroid, t.centroid, overlap_of(common, len(ents), held), alpha=self.alpha,
                          levels=self.levels)
            scored.append((s, t))
        scored.sort(key=lambda x: (-x[0], x[1].id))
        return scored[: self.top_k]

    def decide(self, segment_id: int) -> TrajectoryDecision:
        """Candidates and the judge's choice, with no transaction open (the judge may be an LLM)."""
        stamp = self.db.write_stamp()
        seg = self.db.structure.load("segment", segment_id)
        cands = self.candidates(seg)
        choice = None
        if cands:
            scores = [s for s, _ in cands]
            if not reads_lines(self.judge):  # the offline judge reads only the scores: no lines read for it
                choice = self.judge.choose((), (), scores)
            else:
                cand_lines = [self._trajectory_lines(t.id) for _, t in cands]
                choice = self.judge.choose(segment_lines(self.db, segment_id, 8), cand_lines, scores)
        chosen = cands[choice][1] if choice is not None else None
        return TrajectoryDecision(tuple((t.id, t.n) for _, t in cands), chosen.id if chosen is not None else None,
                                  Read(stamp, seg, chosen))

    def apply(self, segment_id: int, d: TrajectoryDecision) -> int:
        """Link the closed segment to the chosen trajectory or a new one (inside a write
        transaction); returns its id. Raises StaleError if a candidate changed meanwhile. Decided
        in this transaction with nothing written since (offline, inside ``add``'s), it applies what
        the decision read (:class:`Read`): the same rows."""
        structure = self.db.structure
        read = d.read
        if read is not None and read.segment.id == segment_id and self.db.unchanged_since(read.stamp):
            seg, traj = read.segment, read.chosen
        else:
            for tid, n in d.candidates:
                if structure.count_where_trajectory(tid) != n:
                    raise StaleError("a candidate trajectory changed")
            seg = structure.load("segment", segment_id)
            traj = structure.load("trajectory", d.chosen, counts=False) if d.chosen is not None else None
        if traj is not None:
            traj.add(seg.vec_sum, [], seg.start_at, seg.end_at, n=seg.n)
            structure.save("trajectory", traj, n_segments=structure.segment_count(traj.id) + 1)
            structure.add_entities(traj.id, seg.entities)
            tid = traj.id
        else:
            tid = structure.create_trajectory(seg)
        structure.link(segment_id, tid)
        return tid

    def _trajectory_lines(self, tid: int) -> list[str]:
        out: list[str] = []
        for sid in self.db.structure.latest_segments(tid, 2):
            out.extend(segment_lines(self.db, sid, 4))
        return out


def list_trajectories(db: Database) -> list[Trajectory]:
    """Every Event Trajectory, with its segments and messages in order."""
    by_traj: dict[int, list[Segment]] = {}
    for s in list_segments(db):
        if s.trajectory_id is not None:
            by_traj.setdefault(s.trajectory_id, []).append(s)
    out = []
    for tid, ents, start, end, title in db.structure.trajectory_rows():
        ss = by_traj.get(tid, [])
        counts = entity_counts(f"trajectory {tid}", ents)
        out.append(Trajectory(tid, tuple(s.id for s in ss), tuple(m for s in ss for m in s.message_ids),
                              from_stored(start), from_stored(end), tuple(sorted(counts)), title or label(counts)))
    return out
