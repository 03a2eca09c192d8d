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

import re
from dataclasses import dataclass
from typing import Sequence

import apsw
import numpy as np

from .matching import coherence
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


def normalise_subject(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def _vec(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


class ActiveFactStore:
    def __init__(self, con: apsw.Connection, *, levels: tuple[float, float], theta_s: float, theta_q: float,
                 embed_passages, query_levels: tuple[float, float] | None = None):
        self.con, self.levels, self.theta_s, self.theta_q = con, levels, theta_s, theta_q
        self.query_levels = query_levels or levels
        self.embed_passages = embed_passages

    def accumulate(self, query: str, qvec: np.ndarray, evidence: Sequence[Evidence]) -> list[int]:
        """Fold one answered query's evidence into candidate clusters; returns touched cluster ids."""
        evidence = [e for e in evidence if e.stmt.strip() and e.message_ids]
        if not evidence:
            return []
        vecs = self.embed_passages([e.stmt for e in evidence])
        touched: list[int] = []
        now = now_stored()
        for e, v in zip(evidence, vecs):
            cid = self._cluster_for(normalise_subject(e.subject), v, now)
            sid = self._statement(cid, e.stmt, v, now)
            for mid in e.message_ids:
                self.con.execute("INSERT OR IGNORE INTO cluster_evidence(statement_id, message_id) VALUES(?,?)",
                                 (sid, mid))
            self._query(cid, query, qvec, now)
            if cid not in touched:
                touched.append(cid)
        for cid in touched:
            self.refresh(cid)
        return touched

    def _cluster_for(self, subject: str, v: np.ndarray, now: str) -> int:
        best, best_score = None, -1.0
        for (cid,) in self.con.execute("SELECT id FROM candidate_clusters WHERE subject=?", (subject,)).fetchall():
            xs = np.stack([_vec(b) for (b,) in self.con.execute(
                "SELECT vector FROM cluster_statements WHERE cluster_id=?", (cid,))])
            low, high = self.levels
            score = float(np.clip((xs @ v - low) / (high - low), 0, 1).mean()) if len(xs) else 0.0
            if score > best_score:
                best, best_score = cid, score
        if best is not None and best_score >= COMPATIBLE:
            return best
        self.con.execute("INSERT INTO candidate_clusters(subject, created_at, updated_at) VALUES(?,?,?)",
                         (subject, now, now))
        return self.con.last_insert_rowid()

    def _statement(self, cid: int, stmt: str, v: np.ndarray, now: str) -> int:
        for sid, text, blob in self.con.execute(
                "SELECT id, stmt, vector FROM cluster_statements WHERE cluster_id=?", (cid,)).fetchall():
            if text == stmt or float(_vec(blob) @ v) >= STATEMENT_DUPLICATE:
                return sid
        self.con.execute("INSERT INTO cluster_statements(cluster_id, stmt, vector, at) VALUES(?,?,?,?)",
                         (cid, stmt, v.astype(np.float32).tobytes(), now))
        return self.con.last_insert_rowid()

    def _query(self, cid: int, query: str, qvec: np.ndarray, now: str) -> None:
        for text, blob in self.con.execute("SELECT query, vector FROM cluster_queries WHERE cluster_id=?", (cid,)):
            if text == query or float(_vec(blob) @ qvec) >= QUERY_DUPLICATE:
                return
        self.con.execute("INSERT INTO cluster_queries(cluster_id, query, vector, at) VALUES(?,?,?,?)",
                         (cid, query, qvec.astype(np.float32).tobytes(), now))

    def scores(self, cid: int) -> tuple[float, float]:
        xs = [_vec(b) for (b,) in self.con.execute("SELECT vector FROM cluster_statements WHERE cluster_id=?", (cid,))]
        qs = [_vec(b) for (b,) in self.con.execute("SELECT vector FROM cluster_queries WHERE cluster_id=?", (cid,))]
        n_src = self.con.execute(
            "SELECT count(DISTINCT e.message_id) FROM cluster_statements s "
            "JOIN cluster_evidence e ON e.statement_id=s.id WHERE s.cluster_id=?", (cid,)).fetchone()[0]
        src = source_score(n_src, np.stack(xs) if xs else np.zeros((0, 1)), self.levels)
        qry = query_score(len(qs), np.stack(qs) if qs else np.zeros((0, 1)), self.query_levels)
        return src, qry

    def refresh(self, cid: int, *, withdraw: bool = False) -> int | None:
        """Recompute a cluster's scores; promote or update its ActiveFact. A promoted entry stays
        when later evidence lowers the scores (it was demanded and supported); it is withdrawn
        only with ``withdraw=True``, which ``forget`` uses when its support is deleted."""
        src, qry = self.scores(cid)
        now = now_stored()
        self.con.execute("UPDATE candidate_clusters SET score_src=?, score_qry=?, updated_at=? WHERE id=?",
                         (src, qry, now, cid))
        row = self.con.execute("SELECT id, stmt FROM active_facts WHERE cluster_id=?", (cid,)).fetchone()
        if not is_promoted(src, qry, self.theta_s, self.theta_q) and (row is None or withdraw):
            if row:
                self.con.execute("DELETE FROM active_fact_vec WHERE rowid=?", (row[0],))
                self.con.execute("DELETE FROM active_facts WHERE id=?", (row[0],))
            return None
        stmt, vec = self._central_statement(cid)
        subject = self.con.execute("SELECT subject FROM candidate_clusters WHERE id=?", (cid,)).fetchone()[0]
        if row is None:
            self.con.execute("INSERT INTO active_facts(cluster_id, subject, stmt, created_at, updated_at) "
                             "VALUES(?,?,?,?,?)", (cid, subject, stmt, now, now))
            fid = self.con.last_insert_rowid()
            self.con.execute("INSERT INTO active_fact_vec(rowid, embedding) VALUES(?, ?)", (fid, vec.tobytes()))
            return fid
        if row[1] != stmt:
            self.con.execute("UPDATE active_facts SET stmt=?, updated_at=? WHERE id=?", (stmt, now, row[0]))
            self.con.execute("UPDATE active_fact_vec SET embedding=? WHERE rowid=?", (vec.tobytes(), row[0]))
        return row[0]

    def _central_statement(self, cid: int) -> tuple[str, np.ndarray]:
        rows = self.con.execute("SELECT stmt, vector FROM cluster_statements WHERE cluster_id=? ORDER BY id",
                                (cid,)).fetchall()
        vs = np.stack([_vec(b) for _, b in rows])
        centrality = (vs @ vs.T).sum(axis=1)
        i = int(np.argmax(centrality[::-1]))  # ties: the latest statement
        i = len(rows) - 1 - i
        return rows[i][0], np.ascontiguousarray(vs[i], dtype=np.float32)
