"""Topical Segments (paper §3.2): the double-threshold boundary rule, applied online.

Messages are processed in arrival order. The first message opens a segment. For each later
message u_t and the open segment S_i:  φ(u_t, S_i) ≥ τ_merge appends;  φ ≤ τ_split opens a new
segment;  otherwise the boundary judge decides (the LLM when configured, else the offline
rule: continue iff φ is above the band's midpoint and the time gap is under ``MAX_GAP``).
When a segment closes it is handed to the trajectory step and then to the closing hooks
(CoreFact extraction).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Protocol, Sequence

import apsw
import numpy as np

from . import prompts
from .matching import phi, unit
from .timeutil import from_stored

__all__ = ["Unit", "load_unit", "BoundaryJudge", "OfflineBoundaryJudge", "LLMBoundaryJudge", "SegmentBuilder",
           "MAX_GAP"]

log = logging.getLogger("memsif_lite")

#: offline judge: a gap longer than this between messages counts against continuing a topic
MAX_GAP = timedelta(hours=6)


@dataclass
class Unit:
    """A composite unit's running state: float64 vector sum, entity counts, time span."""

    id: int
    n: int
    vec_sum: np.ndarray
    entities: Counter
    start_at: str
    end_at: str

    @property
    def centroid(self) -> np.ndarray:
        """Mean of the member unit vectors (for φ)."""
        return self.vec_sum / max(self.n, 1)

    @property
    def mean(self) -> np.ndarray:
        """The L2-normalised mean (what the vec0 tables hold, for vector search)."""
        return unit(self.vec_sum / max(self.n, 1))

    def add(self, vec: np.ndarray, ents: Sequence[str], at_start: str, at_end: str, n: int = 1) -> None:
        self.vec_sum = self.vec_sum + vec.astype(np.float64)
        self.entities.update(ents)
        self.n += n
        self.start_at = min(self.start_at, at_start)
        self.end_at = max(self.end_at, at_end)


def load_unit(con: apsw.Connection, table: str, uid: int) -> Unit:
    count_col = "n_messages"
    row = con.execute(f"SELECT id, {count_col}, vec_sum, entities, start_at, end_at FROM {table} WHERE id=?",
                      (uid,)).fetchone()
    return Unit(row[0], row[1], np.frombuffer(row[2], dtype=np.float64).copy(), Counter(json.loads(row[3])),
                row[4], row[5])


def entity_json(c: Counter) -> str:
    return json.dumps(dict(sorted(c.items())), ensure_ascii=False)


class BoundaryJudge(Protocol):
    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool: ...


class OfflineBoundaryJudge:
    """Deterministic: continue iff φ ≥ the band's midpoint and the gap is under MAX_GAP."""

    def __init__(self, tau_split: float, tau_merge: float):
        self.mid = (tau_split + tau_merge) / 2.0

    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool:
        return score >= self.mid and gap <= MAX_GAP


class LLMBoundaryJudge:
    """Asks the LLM; falls back to the offline judge when the call fails."""

    def __init__(self, llm, fallback: OfflineBoundaryJudge):
        self.llm, self.fallback = llm, fallback

    def continues(self, segment_lines: Sequence[str], message_line: str, score: float, gap: timedelta) -> bool:
        system, user, validate = prompts.boundary(segment_lines, message_line)
        verdict = self.llm.complete_json("boundary", system, user, validate, max_tokens=20)
        if verdict is None:
            return self.fallback.continues(segment_lines, message_line, score, gap)
        return verdict


class SegmentBuilder:
    """Places each new message into the open segment or a new one; closes segments."""

    def __init__(self, con: apsw.Connection, *, alpha: float, tau_merge: float, tau_split: float,
                 levels: tuple[float, float], judge: BoundaryJudge,
                 on_close: Callable[[int], None]):
        self.con = con
        self.alpha, self.tau_merge, self.tau_split, self.levels = alpha, tau_merge, tau_split, levels
        self.judge = judge
        self.on_close = on_close

    def open_segment(self) -> Unit | None:
        row = self.con.execute("SELECT id FROM segments WHERE closed=0 ORDER BY id DESC LIMIT 1").fetchone()
        return load_unit(self.con, "segments", row[0]) if row else None

    def lines(self, segment_id: int, limit: int = 6) -> list[str]:
        rows = self.con.execute(
            "SELECT m.speaker, m.text FROM message_units u JOIN messages m ON m.id=u.message_id "
            "WHERE u.segment_id=? ORDER BY u.message_id DESC LIMIT ?", (segment_id, limit)).fetchall()
        return [f"{s}: {t[:500]}" for s, t in reversed(rows)]

    def place(self, message_id: int, vec: np.ndarray, ents: list[str], at: str, line: str) -> int:
        """Assign one message (already stored) to a segment; return the segment id."""
        seg = self.open_segment()
        score: float | None = None
        if seg is None:
            decision = "first"
        else:
            score = phi(vec, ents, seg.centroid, seg.entities.keys(), alpha=self.alpha, levels=self.levels)
            if score >= self.tau_merge:
                decision = "merge"
            elif score <= self.tau_split:
                decision = "split"
            else:
                gap = abs(from_stored(at) - from_stored(seg.end_at))
                ok = self.judge.continues(self.lines(seg.id), line, score, gap)
                decision = "judge_merge" if ok else "judge_split"
        if decision in ("merge", "judge_merge"):
            assert seg is not None
            seg.add(vec, ents, at, at)
            self._save(seg)
            seg_id = seg.id
        else:
            if seg is not None:
                self.close(seg.id)
            seg_id = self._create(vec, ents, at)
        self.con.execute(
            "INSERT INTO message_units(message_id, segment_id, entities, phi, decision) VALUES(?,?,?,?,?)",
            (message_id, seg_id, json.dumps(ents, ensure_ascii=False), score, decision))
        return seg_id

    def close(self, segment_id: int) -> None:
        self.con.execute("UPDATE segments SET closed=1 WHERE id=?", (segment_id,))
        self.on_close(segment_id)

    def _create(self, vec: np.ndarray, ents: list[str], at: str) -> int:
        c = Counter(ents)
        self.con.execute(
            "INSERT INTO segments(n_messages, vec_sum, entities, start_at, end_at, closed) VALUES(1,?,?,?,?,0)",
            (vec.astype(np.float64).tobytes(), entity_json(c), at, at))
        sid = self.con.last_insert_rowid()
        self.con.execute("INSERT INTO segment_vec(rowid, embedding) VALUES(?, ?)", (sid, unit(vec).tobytes()))
        return sid

    def _save(self, seg: Unit) -> None:
        self.con.execute(
            "UPDATE segments SET n_messages=?, vec_sum=?, entities=?, start_at=?, end_at=? WHERE id=?",
            (seg.n, seg.vec_sum.tobytes(), entity_json(seg.entities), seg.start_at, seg.end_at, seg.id))
        self.con.execute("UPDATE segment_vec SET embedding=? WHERE rowid=?", (seg.mean.tobytes(), seg.id))
