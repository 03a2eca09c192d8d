"""ActiveFacts (paper §3.4): query-driven facts promoted from candidate clusters.

After an answer, each query-local evidence entry ``{stmt, subject, provenance}`` joins a
candidate cluster C_k = (s_k, X_k, Q_k, R_k): the cluster of the same (normalised) subject whose
statements it is compatible with (mean normalised cosine ≥ ``COMPATIBLE``), else a new one.
X_k keeps deduplicated statements, Q_k the distinct triggering queries (near-duplicates, cosine
≥ ``QUERY_DUPLICATE``, removed), R_k the distinct messages the evidence came from.

    Score_src = (1 − 1/|R_k|) · Coh(X_k)        Score_qry = (1 − 1/|Q_k|) · Coh(Q_k)

with Coh the mean pairwise normalised cosine (1 for a singleton; statements are normalised with
the model's passage levels, queries with its query levels: two different questions about the
same person score low, two wordings of one question high). A cluster is promoted into an
ActiveFact when both scores reach θ_s and θ_q; its statement is the cluster's most central
statement, and it is updated as the cluster changes (withdrawn only if ``forget`` removes the
support that promoted it). Clusters and ActiveFacts live in the file and persist across queries and reopenings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .db import Database
from .entities import normalise, words_of
from .matching import coherence
from .errors import InvalidInputError
from .timeutil import now_stored

__all__ = ["Evidence", "source_score", "query_score", "is_promoted", "ActiveFactStore", "COMPATIBLE",
           "QUERY_DUPLICATE", "STATEMENT_DUPLICATE"]

#: an evidence statement joins a cluster when its mean normalised cosine to X_k reaches this
#: (0.75 ≈ clearly the same matter: two unrelated statements about one person score ≈ 0.4)
COMPATIBLE = 0.75
#: two queries this similar (raw cosine) count as one triggering query
QUERY_DUPLICATE = 0.97
#: two statements this similar (raw cosine) are one statement
STATEMENT_DUPLICATE = 0.985


@dataclass(frozen=True)
class Evidence:
    """One query-local evidence entry, with its provenance."""

    stmt: str
    subject: str
    message_ids: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.stmt, str) or not isinstance(self.subject, str):
            raise InvalidInputError("Evidence stmt and subject must be strings")
        ids = tuple(self.message_ids) if isinstance(self.message_ids, (tuple, list)) else None
        if ids is None or not all(isinstance(m, int) and not isinstance(m, bool) for m in ids):
            raise InvalidInputError("Evidence message_ids must be a tuple of message ids (integers)")
        object.__setattr__(self, "message_ids", ids)


def source_score(n_sources: int, statement_vectors: np.ndarray, levels: tuple[float, float]) -> float:
    if n_sources <= 0:
        return 0.0
    return (1.0 - 1.0 / n_sources) * coherence(statement_vectors, levels)


def query_score(n_queries: int, query_vectors: np.ndarray, levels: tuple[float, float]) -> float:
    if n_queries <= 0:
        return 0.0
    return (1.0 - 1.0 / n_queries) * coherence(query_vectors, levels)


def is_promoted(score_src: float, score_qry: float, theta_s: float, theta_q: float) -> bool:
    return score_src >= theta_s and score_qry >= theta_q


class ActiveFactStore:
    """Candidate clusters and their promotion (the caller holds the write transaction)."""

    def __init__(self, db: Database, *, levels: tuple[float, float], query_levels: tuple[float, float],
                 theta_s: float, theta_q: float, embed_passages: Callable[[Sequence[str]], np.ndarray]):
        self.db, self.levels, self.query_levels = db, levels, query_levels
        self.theta_s, self.theta_q = theta_s, theta_q
        self.embed_passages = embed_passages

    def accumulate(self, query: str, qvec: np.ndarray, evidence: Sequence[Evidence]) -> list[int]:
        """Fold one answered query's evidence into candidate clusters; returns touched cluster ids."""
        evidence = [e for e in evidence if e.stmt.strip() and e.message_ids]
        if not evidence:
            return []
        vecs = self.embed_passages([e.stmt for e in evidence])
        touched: list[int] = []
        now = now_stored()
        for e, v in zip(evidence, vecs, strict=True):
            cid = self._cluster_for(normalise(e.subject), v, now)
            sid = self._statement(cid, e.stmt, v, now)
            for mid in e.message_ids:
                self.db.clusters.add_evidence(sid, mid)
            self._query(cid, query, qvec, now)
            if cid not in touched:
                touched.append(cid)
        for cid in touched:
            self.refresh(cid)
        return touched

    def _cluster_for(self, subject: str, v: np.ndarray, now: str) -> int:
        clusters = self.db.clusters
        best, best_score = None, -1.0
        low, high = self.levels
        for cid in clusters.for_subject(subject):
            xs = [vec for _, _, vec in clusters.statements(cid)]
            score = float(np.clip((np.stack(xs) @ v - low) / (high - low), 0, 1).mean()) if xs else 0.0
            if score > best_score:
                best, best_score = cid, score
        if best is not None and best_score >= COMPATIBLE:
            return best
        return clusters.create(subject, now)

    def _statement(self, cid: int, stmt: str, v: np.ndarray, now: str) -> int:
        for sid, text, vec in self.db.clusters.statements(cid):
            if text == stmt or float(vec @ v) >= STATEMENT_DUPLICATE:
                return sid
        return self.db.clusters.add_statement(cid, stmt, v, now)

    def _query(self, cid: int, query: str, qvec: np.ndarray, now: str) -> None:
        for text, vec in self.db.clusters.queries(cid):
            if text == query or float(vec @ qvec) >= QUERY_DUPLICATE:
                return
        self.db.clusters.add_query(cid, query, qvec, now)

    def scores(self, cid: int) -> tuple[float, float]:
        clusters = self.db.clusters
        xs = [vec for _, _, vec in clusters.statements(cid)]
        qs = [vec for _, vec in clusters.queries(cid)]
        src = source_score(clusters.n_sources(cid), np.stack(xs) if xs else np.zeros((0, 1)), self.levels)
        qry = query_score(len(qs), np.stack(qs) if qs else np.zeros((0, 1)), self.query_levels)
        return src, qry

    def refresh(self, cid: int, *, withdraw: bool = False) -> int | None:
        """Recompute a cluster's scores; promote or update its ActiveFact. A promoted entry stays
        when later evidence lowers the scores (it was demanded and supported); it is withdrawn
        only with ``withdraw=True``, which ``forget`` uses when its support is deleted."""
        clusters = self.db.clusters
        src, qry = self.scores(cid)
        now = now_stored()
        clusters.set_scores(cid, src, qry, now)
        row = clusters.active_of(cid)
        if not is_promoted(src, qry, self.theta_s, self.theta_q) and (row is None or withdraw):
            if row:
                with self.db.changes.record("active.withdraw", "rule", active_facts=[row[0]]):
                    clusters.delete_active(row[0])
            return None
        stmt, vec = self._central_statement(cid)
        if row is None:
            with self.db.changes.record("active.promote", "rule") as change:
                aid = clusters.promote(cid, clusters.subject(cid), stmt, vec, now)
                change.touch("active_facts", [aid])
            return aid
        if row[1] != stmt:
            with self.db.changes.record("active.restate", "rule", active_facts=[row[0]]):
                clusters.restate(row[0], stmt, vec, now)
        return row[0]

    def forget_message(self, mid: int, said: str = "") -> None:
        """Remove a message from all evidence; a statement it was evidence of that holds a word of
        ``said`` (what the message said) that none of its other evidence says goes too; clusters
        left empty disappear, the rest are re-scored with ``withdraw=True``."""
        clusters = self.db.clusters
        citing = clusters.citing(mid)
        touched = clusters.drop_source(mid)
        for sid in citing:
            kept = clusters.statement(sid)
            if kept is None:
                continue
            texts = [f"{m.speaker} {m.text}" for m in self.db.messages.many(list(kept[1])).values()]
            if words_of(kept[0]) & (words_of(said) - words_of(" ".join(texts))):
                clusters.drop_statement(sid)
        for cid in sorted(touched):
            if not clusters.statements(cid):
                clusters.delete(cid)
            else:
                self.refresh(cid, withdraw=True)

    def _central_statement(self, cid: int) -> tuple[str, np.ndarray]:
        rows = self.db.clusters.statements(cid)
        vs = np.stack([vec for _, _, vec in rows])
        centrality = (vs @ vs.T).sum(axis=1)
        i = int(np.argmax(centrality[::-1]))  # ties: the latest statement
        i = len(rows) - 1 - i
        return rows[i][1], np.ascontiguousarray(vs[i], dtype=np.float32)
