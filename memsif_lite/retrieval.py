"""Retrieval over the file: dense KNN (sqlite-vec), BM25 (FTS5), reciprocal rank fusion,
at the level of messages, Topical Segments or Event Trajectories."""

from __future__ import annotations

import re
from typing import Callable

import apsw
import numpy as np

from .entities import _STOP
from .timeutil import from_stored
from .types import SearchResult

__all__ = ["Retriever", "fts_query", "rrf"]

RRF_K = 60
#: BM25 weight of the speaker column relative to the text (names in questions matter, but less)
SPEAKER_WEIGHT = 0.3
_TOKEN = re.compile(r"\w+", re.UNICODE)


def fts_query(text: str) -> str | None:
    """A safe FTS5 query: every word quoted, OR-ed; stop words dropped unless nothing else is left."""
    words = [w.lower() for w in _TOKEN.findall(text)]
    keep = [w for w in words if w not in _STOP] or words
    keep = list(dict.fromkeys(keep))[:64]
    if not keep:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in keep)


def units_by_best_member(msg_rank: list[int], unit_of: dict[int, int]) -> list[int]:
    """Segments/trajectories in the order of their best-ranked member message."""
    return list(dict.fromkeys(unit_of[m] for m in msg_rank if m in unit_of))


def rrf(*rankings: list[int], k: int = RRF_K) -> dict[int, float]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return scores


class Retriever:
    def __init__(self, con: apsw.Connection, embed_query: Callable[[str], np.ndarray]):
        self.con = con
        self.embed_query = embed_query

    # -- rankings ------------------------------------------------------------------------------
    def dense(self, table: str, qvec: np.ndarray, depth: int) -> list[int]:
        depth = min(depth, 4096)
        return [r[0] for r in self.con.execute(
            f"SELECT rowid FROM {table} WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (qvec.astype(np.float32).tobytes(), depth))]

    def bm25(self, query: str, depth: int) -> list[int]:
        q = fts_query(query)
        if q is None:
            return []
        return [r[0] for r in self.con.execute(
            "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, ?, 1.0) LIMIT ?", (q, SPEAKER_WEIGHT, depth))]

    def message_scores(self, query: str, depth: int) -> dict[int, float]:
        qvec = self.embed_query(query)
        return rrf(self.dense("message_vec", qvec, depth), self.bm25(query, depth))

    # -- search ----------------------------------------------------------------------------------
    def search(self, query: str, *, k: int, level: str) -> list[SearchResult]:
        depth = max(4 * k, 50)
        msg_scores = self.message_scores(query, depth)
        if level == "message":
            top = sorted(msg_scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
            return [self._message_hit(mid, score) for mid, score in top]
        qvec = self.embed_query(query)
        msg_rank = [mid for mid, _ in sorted(msg_scores.items(), key=lambda kv: (-kv[1], kv[0]))]
        if level == "segment":
            unit_of = self._segment_of(msg_rank)
            dense = self.dense("segment_vec", qvec, depth)
        else:
            unit_of = self._trajectory_of(msg_rank)
            dense = self.dense("trajectory_vec", qvec, depth)
        scores = rrf(dense, units_by_best_member(msg_rank, unit_of))
        top = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        return [self._unit_hit(level, uid, score) for uid, score in top]

    def _segment_of(self, mids: list[int]) -> dict[int, int]:
        if not mids:
            return {}
        marks = ",".join("?" * len(mids))
        return dict(self.con.execute(
            f"SELECT message_id, segment_id FROM message_units WHERE message_id IN ({marks})", mids).fetchall())

    def _trajectory_of(self, mids: list[int]) -> dict[int, int]:
        if not mids:
            return {}
        marks = ",".join("?" * len(mids))
        return {m: t for m, t in self.con.execute(
            f"SELECT u.message_id, s.trajectory_id FROM message_units u JOIN segments s ON s.id=u.segment_id "
            f"WHERE u.message_id IN ({marks})", mids) if t is not None}

    def _message_hit(self, mid: int, score: float) -> SearchResult:
        r = self.con.execute("SELECT id, speaker, text, at, session, source_id FROM messages WHERE id=?",
                             (mid,)).fetchone()
        return SearchResult(r[0], r[1], r[2], from_stored(r[3]), r[4], score, "message", r[5], (r[0],),
                            (r[5],) if r[5] else ())

    def unit_messages(self, level: str, uid: int) -> list[tuple]:
        if level == "segment":
            where, arg = "u.segment_id=?", uid
        else:
            where, arg = "u.segment_id IN (SELECT id FROM segments WHERE trajectory_id=?)", uid
        return self.con.execute(
            "SELECT m.id, m.speaker, m.text, m.at, m.session, m.source_id FROM message_units u "
            f"JOIN messages m ON m.id=u.message_id WHERE {where} ORDER BY m.id", (arg,)).fetchall()

    def _unit_hit(self, level: str, uid: int, score: float) -> SearchResult:
        rows = self.unit_messages(level, uid)
        speakers = ", ".join(dict.fromkeys(r[1] for r in rows))
        text = "\n".join(f"{r[1]}: {r[2]}" for r in rows)
        return SearchResult(uid, speakers, text, from_stored(rows[0][3]), rows[0][4], score, level, None,
                            tuple(r[0] for r in rows), tuple(r[5] for r in rows if r[5]))


def rank_with_structure(retriever: Retriever, query: str, *, depth: int = 200, use_segments: bool = True,
                        use_trajectories: bool = True, w_segment: float = 0.2, w_trajectory: float = 0.05,
                        top_units: int = 3) -> list[tuple[int, float]]:
    """Rank messages for a query using the interaction structure (paper §3.5's fall-back to
    Structured Interaction Memory).

    A message's score is its own hybrid (dense + BM25) RRF score plus ``w_segment`` × its Topical
    Segment's RRF score and ``w_trajectory`` × its Event Trajectory's RRF score (units ranked by
    their own vectors and by their best member). Members of the top ``top_units`` segments and
    trajectories become candidates even when no message-level ranking found them: that is how
    neighbouring turns and non-contiguous turns of the same event reach the context.
    The defaults were chosen on the LoCoMo development half (benchmarks/locomo.py).
    """
    con = retriever.con
    qvec = retriever.embed_query(query)
    msg_scores = rrf(retriever.dense("message_vec", qvec, depth), retriever.bm25(query, depth))
    msg_rank = [m for m, _ in sorted(msg_scores.items(), key=lambda kv: (-kv[1], kv[0]))]
    total: dict[int, float] = dict(msg_scores)
    levels = []
    if use_segments:
        levels.append(("segment", "segment_vec", w_segment, retriever._segment_of(msg_rank),
                       "SELECT message_id FROM message_units WHERE segment_id=?"))
    if use_trajectories:
        levels.append(("trajectory", "trajectory_vec", w_trajectory, retriever._trajectory_of(msg_rank),
                       "SELECT u.message_id FROM message_units u JOIN segments s ON s.id=u.segment_id "
                       "WHERE s.trajectory_id=?"))
    for _, table, weight, unit_of, members_sql in levels:
        unit_scores = rrf(retriever.dense(table, qvec, max(top_units * 4, 32)), units_by_best_member(msg_rank, unit_of))
        top = sorted(unit_scores.items(), key=lambda kv: (-kv[1], kv[0]))[:top_units]
        for uid, us in top:
            for (mid,) in con.execute(members_sql, (uid,)):
                total[mid] = total.get(mid, 0.0) + weight * us
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
