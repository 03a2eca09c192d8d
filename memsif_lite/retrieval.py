"""Retrieval over the file: dense KNN (sqlite-vec), BM25 (FTS5), reciprocal rank fusion,
at the level of messages, Topical Segments or Event Trajectories."""

from __future__ import annotations

import re
import threading
from typing import Callable, Sequence

import numpy as np

from .db import Database, MessageRow, or_query
from .entities import STOP_WORDS
from .filters import MessageFilter
from .fulltext import cjk_query_terms, compose, foreign_function_words, without_cjk
from .timeutil import from_stored
from .tokens import cached_for_short_texts
from .types import SearchResult

__all__ = ["Retriever", "fts_query", "query_terms", "rrf", "top_scored", "top_units", "RRF_K", "SPEAKER_WEIGHT",
           "UNIT_PREFIX"]

RRF_K = 60
#: BM25 weight of the speaker column relative to the text (names in questions matter, but less)
SPEAKER_WEIGHT = 0.3
#: the units of this many best-ranked messages are looked up first; the rest only when they could
#: still change the top units (top_units), which gives the same result as looking up all
UNIT_PREFIX = 60
#: a top segment or trajectory of more messages than this adds none of them as candidates: its
#: score goes to its members the message-level ranking found (a trajectory of a long life can hold
#: hundreds of thousands; no LoCoMo conversation reaches it: 369-680 messages)
MEMBER_CAP = 2000
_TOKEN = re.compile(r"\w+", re.UNICODE)


def query_terms(text: str) -> list[str]:
    """The words a question is matched by: stop words and single Latin letters (the ``s`` of a
    possessive matches a large share of all messages and costs the most) dropped, and the function
    words of another language the question is written in (:mod:`memsif_lite.fulltext`); CJK runs as
    the index holds them (characters and pairs). If nothing is left, the words without the English
    stop words, then every word. Composed first, as the index is; at most 64, in order."""
    return list(_query_terms(text))


@cached_for_short_texts(256)  # the BM25 query and the evidence's sentence ranking both ask
def _query_terms(text: str) -> tuple[str, ...]:
    text = compose(text)
    plain = without_cjk(text)
    words = [w.lower() for w in _TOKEN.findall(plain)]
    content = [w for w in words if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]
    foreign = foreign_function_words(plain)
    terms = [w for w in content if w not in foreign] + cjk_query_terms(text)
    return tuple(dict.fromkeys(terms or content or words))[:64]


def fts_query(text: str) -> str | None:
    """A safe FTS5 query: every one of the :func:`query_terms` quoted, OR-ed; None when there is
    none. (The BM25 ranking runs it bounded on large files: :mod:`memsif_lite.db.bm25`.)"""
    terms = query_terms(text)
    return or_query(terms) if terms else None


def rrf(*rankings: list[int], k: int = RRF_K) -> dict[int, float]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return scores


def top_scored(scores: dict[int, float], limit: int | None = None) -> list[tuple[int, float]]:
    """Items by score, best first, ties by id; only the best ``limit`` (the same ones a full sort
    would put first, found by partition when there are many: trajectories can add thousands)."""
    if limit is not None and limit <= 0:
        return []
    if limit is None or len(scores) <= 4 * limit:
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    ids = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    part = np.argpartition(-vals, limit - 1)[:limit]
    part = np.flatnonzero(vals >= vals[part].min())  # every tie at the cut, ordered by id below
    order = part[np.lexsort((ids[part], -vals[part]))][:limit]
    return [(int(ids[i]), float(vals[i])) for i in order]


def top_units(dense: list[int], by_member: list[int], top: int, *, complete: bool) -> list[tuple[int, float]] | None:
    """The ``top`` units by RRF of their own dense ranking and ``by_member`` (units in the order of
    their best-ranked member). When ``by_member`` is only the start of that list (``complete``
    False), a unit it leaves out ranks after all it holds, so it can add at most
    1/(RRF_K + len + 1) to its dense score: the result is returned only when every listed top
    unit scores strictly more than any left-out unit could, and is then what the whole list
    gives; else None."""
    scores = rrf(dense, by_member)
    if complete:
        return top_scored(scores, top)
    listed = set(by_member)
    best = top_scored({u: s for u, s in scores.items() if u in listed}, top)
    cap = 1.0 / (RRF_K + len(by_member) + 1)
    rival = max([scores[u] + cap for u in dense if u not in listed] + [cap])
    return best if len(best) == top and best[-1][1] > rival + 1e-12 else None


class Retriever:
    """Rankings over the file: dense (vec0), BM25 (FTS5), fused, per level."""

    def __init__(self, db: Database, embed_query: Callable[[str], np.ndarray], *,
                 segment_weight: float = 0.2, trajectory_weight: float = 0.05, top_units: int = 3):
        self.db = db
        self.embed_query = embed_query
        self.segment_weight, self.trajectory_weight, self.top_units = segment_weight, trajectory_weight, top_units

    # -- rankings (a filter applies inside the KNN / FTS queries: see memsif_lite.filters) -------------
    def dense(self, qvec: np.ndarray, depth: int, flt: MessageFilter | None = None) -> list[int]:
        if flt is None:
            return self.db.messages.dense(qvec, depth)
        return self.db.filters.dense(qvec, depth, flt)

    def bm25(self, query: str, depth: int, flt: MessageFilter | None = None) -> list[int]:
        terms = query_terms(query)
        if not terms:
            return []
        if flt is None:
            return self.db.messages.bm25(terms, SPEAKER_WEIGHT, depth)
        return self.db.filters.bm25(terms, SPEAKER_WEIGHT, depth, flt)

    def message_scores(self, query: str, depth: int, flt: MessageFilter | None = None) -> dict[int, float]:
        return self.fused(self.embed_query(query), query, depth, flt)

    def fused(self, qvec: np.ndarray, query: str, depth: int, flt: MessageFilter | None = None) -> dict[int, float]:
        """The RRF of the dense and BM25 rankings (unfiltered on a large file: the two overlapped,
        :meth:`~memsif_lite.db.Messages.nearest_beside`)."""
        return self._fused(qvec, query, depth, flt)[0]

    def _fused(self, qvec: np.ndarray, query: str, depth: int, flt: MessageFilter | None,
               units: Sequence[tuple[str, int]] = ()) -> tuple[dict[int, float], dict[str, list[int]]]:
        """:meth:`fused`, and the dense ranking of each ``(level, depth)`` of ``units``, unfiltered,
        scanned while the BM25 query runs when the two are overlapped (with a filter: none). The
        unit caches are brought up to the read snapshot (SQL: their load, at the first query after
        opening) by the thread that then runs the BM25 query, while the other one scans the
        message vectors (numpy: at the first query, computing their inverse norms too); each
        unit ranking waits for that, and a level whose cache cannot answer is left out (the
        caller asks :meth:`_unit_dense`)."""
        if flt is not None:
            return rrf(self.dense(qvec, depth, flt), self.bm25(query, depth, flt)), {}
        prepared: dict[str, Callable[[], list[int]] | None] = {}
        ready = threading.Event()

        def prepare_then_bm25() -> list[int]:
            try:
                for lv, d in units:
                    prepared[lv] = self.db.structure.prepared_dense(lv, qvec, d)
            finally:
                ready.set()
            return self.bm25(query, depth)

        def unit_ranking(level: str) -> Callable[[], list[int] | None]:
            def rank() -> list[int] | None:
                ready.wait()
                f = prepared.get(level)
                return None if f is None else f()
            return rank
        hits, words, ranked = self.db.messages.nearest_beside(qvec, depth, prepare_then_bm25,
                                                              [unit_ranking(lv) for lv, _ in units])
        return rrf([m for m, _ in hits], words), {lv: r for (lv, _), r in zip(units, ranked, strict=True)
                                                   if r is not None}

    def _unit_dense(self, level: str, qvec: np.ndarray, depth: int, flt: MessageFilter | None) -> list[int]:
        if flt is None:
            return self.db.structure.dense(level, qvec, depth)
        return self.db.filters.unit_dense(level, qvec, depth, flt)

    def _members(self, level: str, uid: int, flt: MessageFilter | None) -> list[MessageRow]:
        rows = self.db.structure.unit_messages(level, uid)
        if flt is None:
            return rows
        keep = self.db.filters.keep([r.id for r in rows], flt)
        return [r for r in rows if r.id in keep]

    # -- search ----------------------------------------------------------------------------------
    def search(self, query: str, *, k: int, level: str, flt: MessageFilter | None = None) -> list[SearchResult]:
        """With a filter: messages that match it, or units holding one, showing only those messages."""
        depth = max(4 * k, 50)
        msg_scores = self.message_scores(query, depth, flt)
        if level == "message":
            top = top_scored(msg_scores)[:k]
            rows = self.db.messages.many([m for m, _ in top])
            return [_message_hit(rows[mid], score) for mid, score in top]
        msg_rank = [mid for mid, _ in top_scored(msg_scores)]
        by_member = self.db.structure.units_by_best_member(msg_rank)[level]
        dense = self._unit_dense(level, self.embed_query(query), depth, flt)
        top = top_scored(rrf(dense, by_member))[:k]
        return [_unit_hit(level, uid, self._members(level, uid, flt), score) for uid, score in top]

    def rank_with_structure(self, query: str, *, depth: int = 200, flt: MessageFilter | None = None,
                            limit: int | None = None) -> list[tuple[int, float]]:
        """Rank messages for a query using the interaction structure (paper §3.5's fall-back to
        Structured Interaction Memory).

        A message's score is its own hybrid (dense + BM25) RRF score plus ``segment_weight`` × its
        Topical Segment's RRF score and ``trajectory_weight`` × its Event Trajectory's RRF score
        (units ranked by their own vectors and by their best member); a weight of 0 leaves that
        level out. Members of the top ``top_units`` segments and trajectories become candidates
        even when no message-level ranking found them: that is how neighbouring turns and
        non-contiguous turns of the same event reach the context (``limit``: only the best so
        many). The defaults were chosen on the
        LoCoMo development half (benchmarks/locomo.py). With a filter, only matching messages are
        ranked, only units holding one are considered, and only their matching members are added.
        """
        qvec = self.embed_query(query)
        levels = [(lv, w) for lv, w in (("segment", self.segment_weight), ("trajectory", self.trajectory_weight))
                  if w > 0]
        unit_depth = max(self.top_units * 4, 32)
        units = [(lv, unit_depth) for lv, _ in levels] if self.top_units > 0 else []
        msg_scores, unit_dense = self._fused(qvec, query, depth, flt, units)  # units scanned beside BM25
        total: dict[int, float] = dict(msg_scores)
        if not levels or self.top_units <= 0:
            return top_scored(total, limit)
        found: list[dict[str, dict[int, int]]] = []  # units_of every ranked message, once asked

        def units_of_all() -> dict[str, dict[int, int]]:
            if not found:
                found.append(self.db.structure.units_of(list(msg_scores)))
            return found[0]

        by_member = self.db.structure.units_by_best_member([m for m, _ in top_scored(msg_scores, UNIT_PREFIX)])
        whole = len(msg_scores) <= UNIT_PREFIX
        for level, weight in levels:
            dense = unit_dense[level] if level in unit_dense else self._unit_dense(level, qvec, unit_depth, flt)
            top = top_units(dense, by_member[level], self.top_units, complete=whole)
            if top is None:  # the units of the first messages cannot decide: look up all
                by_member = self.db.structure.units_by_best_member([m for m, _ in top_scored(msg_scores)],
                                                                    units_of_all())
                whole = True
                top = top_units(dense, by_member[level], self.top_units, complete=True)
            assert top is not None
            members = self.db.structure.members(level, [uid for uid, _ in top], cap=MEMBER_CAP)
            large = {uid for uid, _ in top} - set(members)
            if large:  # over MEMBER_CAP messages: only their members the message-level ranking found
                for uid in large:
                    members[uid] = []
                for mid, uid in sorted(units_of_all()[level].items()):
                    if uid in large:
                        members[uid].append(mid)
            keep = None if flt is None else self.db.filters.keep([m for ms in members.values() for m in ms], flt)
            for uid, us in top:
                for mid in members[uid]:
                    if keep is None or mid in keep:
                        total[mid] = total.get(mid, 0.0) + weight * us
        return top_scored(total, limit)


def _message_hit(r: MessageRow, score: float) -> SearchResult:
    return SearchResult(r.id, r.speaker, r.text, from_stored(r.at), r.session, score, "message", r.source_id, (r.id,),
                        (r.source_id,) if r.source_id else ())


def _unit_hit(level: str, uid: int, rows: list[MessageRow], score: float) -> SearchResult:
    speakers = ", ".join(dict.fromkeys(r.speaker for r in rows))
    text = "\n".join(f"{r.speaker}: {r.text}" for r in rows)
    return SearchResult(uid, speakers, text, from_stored(rows[0].at), rows[0].session, score, level, None,
                        tuple(r.id for r in rows), tuple(r.source_id for r in rows if r.source_id))
