"""Event Trajectories (paper §3.2): link each closed Topical Segment to an evolving event.

For a closed segment S_i: retrieve candidate trajectories by vector search in the file,
re-rank them by φ(S_i, E_j) (semantic part + entity Jaccard), keep the top K, and ask the
trajectory judge which are the same event / task / consistent state. The segment joins the
highest-scoring compatible one, or starts a new trajectory. Offline judge: a candidate is
compatible iff φ ≥ ``trajectory_threshold``.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Protocol, Sequence

import apsw

from . import prompts
from .matching import phi
from .segments import Unit, entity_json, load_unit

__all__ = ["TrajectoryJudge", "OfflineTrajectoryJudge", "LLMTrajectoryJudge", "TrajectoryBuilder"]

log = logging.getLogger("memsif_lite")


class TrajectoryJudge(Protocol):
    def choose(self, segment_lines: Sequence[str], candidate_lines: Sequence[Sequence[str]],
               scores: Sequence[float]) -> int | None: ...


class OfflineTrajectoryJudge:
    def __init__(self, threshold: float):
        self.threshold = threshold

    def choose(self, segment_lines, candidate_lines, scores) -> int | None:
        for i, s in enumerate(scores):  # scores are sorted, best first
            if s >= self.threshold:
                return i
        return None


class LLMTrajectoryJudge:
    def __init__(self, llm, fallback: OfflineTrajectoryJudge):
        self.llm, self.fallback = llm, fallback

    def choose(self, segment_lines, candidate_lines, scores) -> int | None:
        if not candidate_lines:
            return None
        system, user, validate = prompts.trajectory(segment_lines, candidate_lines)
        verdict = self.llm.complete_json("trajectory", system, user, lambda o: ("ok", validate(o)), max_tokens=40)
        if verdict is None:
            return self.fallback.choose(segment_lines, candidate_lines, scores)
        return verdict[1]


class TrajectoryBuilder:
    def __init__(self, con: apsw.Connection, *, alpha: float, top_k: int, levels: tuple[float, float],
                 judge: TrajectoryJudge, lines):
        self.con, self.alpha, self.top_k, self.levels = con, alpha, top_k, levels
        self.judge = judge
        self.lines = lines  # segment_id -> list of "Speaker: text"

    def candidates(self, seg: Unit) -> list[tuple[float, Unit]]:
        """Top-K trajectories by φ: KNN on the semantic part first, then entity overlap."""
        n = self.con.execute("SELECT count(*) FROM trajectories").fetchone()[0]
        if n == 0:
            return []
        k = min(n, max(4 * self.top_k, 12), 4096)
        rows = self.con.execute("SELECT rowid FROM trajectory_vec WHERE embedding MATCH ? AND k = ?",
                                (seg.mean.tobytes(), k)).fetchall()
        scored = []
        for (tid,) in rows:
            t = load_unit(self.con, "trajectories", tid)
            s = phi(seg.centroid, seg.entities.keys(), t.centroid, t.entities.keys(), alpha=self.alpha, levels=self.levels)
            scored.append((s, t))
        scored.sort(key=lambda x: (-x[0], x[1].id))
        return scored[: self.top_k]

    def assign(self, segment_id: int) -> int:
        seg = load_unit(self.con, "segments", segment_id)
        cands = self.candidates(seg)
        choice = None
        if cands:
            cand_lines = [self._trajectory_lines(t.id) for _, t in cands]
            choice = self.judge.choose(self.lines(segment_id, 8), cand_lines, [s for s, _ in cands])
        if choice is not None:
            traj = cands[choice][1]
            traj.add(seg.vec_sum, [], seg.start_at, seg.end_at, n=seg.n)
            traj.entities.update(seg.entities)
            self.con.execute(
                "UPDATE trajectories SET n_segments=n_segments+1, n_messages=?, vec_sum=?, entities=?, "
                "start_at=?, end_at=? WHERE id=?",
                (traj.n, traj.vec_sum.tobytes(), entity_json(traj.entities), traj.start_at, traj.end_at, traj.id))
            self.con.execute("UPDATE trajectory_vec SET embedding=? WHERE rowid=?", (traj.mean.tobytes(), traj.id))
            tid = traj.id
        else:
            self.con.execute(
                "INSERT INTO trajectories(n_segments, n_messages, vec_sum, entities, start_at, end_at) "
                "VALUES(1,?,?,?,?,?)",
                (seg.n, seg.vec_sum.tobytes(), entity_json(Counter(seg.entities)), seg.start_at, seg.end_at))
            tid = self.con.last_insert_rowid()
            self.con.execute("INSERT INTO trajectory_vec(rowid, embedding) VALUES(?, ?)", (tid, seg.mean.tobytes()))
        self.con.execute("UPDATE segments SET trajectory_id=? WHERE id=?", (tid, segment_id))
        return tid

    def _trajectory_lines(self, tid: int) -> list[str]:
        sids = [r[0] for r in self.con.execute(
            "SELECT id FROM segments WHERE trajectory_id=? ORDER BY id DESC LIMIT 2", (tid,))]
        out: list[str] = []
        for sid in reversed(sids):
            out.extend(self.lines(sid, 4))
        return out
