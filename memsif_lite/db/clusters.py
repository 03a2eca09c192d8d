"""candidate_clusters, cluster_statements, cluster_evidence, cluster_queries, active_facts,
active_fact_vec (ActiveFacts and their candidate clusters C_k)."""

from __future__ import annotations

import numpy as np

from ..types import ActiveFact, CandidateCluster
from .base import Table
from .rows import ActiveFactRow, f32, i8

__all__ = ["Clusters"]


def _vec(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32)


class Clusters(Table):
    # -- C_k -------------------------------------------------------------------------------------
    def for_subject(self, subject: str) -> list[int]:
        return [r[0] for r in self.con.execute("SELECT id FROM candidate_clusters WHERE subject=?", (subject,))]

    def create(self, subject: str, now: str) -> int:
        self.con.execute("INSERT INTO candidate_clusters(subject, created_at, updated_at) VALUES(?,?,?)",
                         (subject, now, now))
        return self.con.last_insert_rowid()

    def subject(self, cid: int) -> str:
        return str(self.con.execute("SELECT subject FROM candidate_clusters WHERE id=?", (cid,)).fetchone()[0])

    def set_scores(self, cid: int, src: float, qry: float, now: str) -> None:
        self.con.execute("UPDATE candidate_clusters SET score_src=?, score_qry=?, updated_at=? WHERE id=?",
                         (src, qry, now, cid))

    def delete(self, cid: int) -> None:
        """A cluster with no statements left, its queries and its ActiveFact."""
        af = self.active_of(cid)
        if af is not None:
            self.delete_active(af[0])
        self.con.execute("DELETE FROM cluster_queries WHERE cluster_id=?", (cid,))
        self.con.execute("DELETE FROM candidate_clusters WHERE id=?", (cid,))

    # -- X_k (statements) and R_k (evidence) -------------------------------------------------------
    def statements(self, cid: int) -> list[tuple[int, str, np.ndarray]]:
        """(id, stmt, vector) of a cluster's statements, oldest first."""
        return [(r[0], r[1], _vec(r[2])) for r in self.con.execute(
            "SELECT id, stmt, vector FROM cluster_statements WHERE cluster_id=? ORDER BY id", (cid,))]

    def add_statement(self, cid: int, stmt: str, vec: np.ndarray, now: str) -> int:
        self.con.execute("INSERT INTO cluster_statements(cluster_id, stmt, vector, at) VALUES(?,?,?,?)",
                         (cid, stmt, f32(vec), now))
        return self.con.last_insert_rowid()

    def add_evidence(self, sid: int, mid: int) -> None:
        self.con.execute("INSERT OR IGNORE INTO cluster_evidence(statement_id, message_id) VALUES(?,?)", (sid, mid))

    def n_sources(self, cid: int) -> int:
        return int(self.con.execute(
            "SELECT count(DISTINCT e.message_id) FROM cluster_statements s "
            "JOIN cluster_evidence e ON e.statement_id=s.id WHERE s.cluster_id=?", (cid,)).fetchone()[0])

    def drop_source(self, mid: int) -> set[int]:
        """Remove a message from all evidence (and statements left without evidence); returns
        the clusters touched."""
        stmts = [s for (s,) in self.con.execute("SELECT statement_id FROM cluster_evidence WHERE message_id=?",
                                                (mid,)).fetchall()]
        self.con.execute("DELETE FROM cluster_evidence WHERE message_id=?", (mid,))
        touched: set[int] = set()
        for sid in stmts:
            touched.add(int(self.con.execute("SELECT cluster_id FROM cluster_statements WHERE id=?",
                                             (sid,)).fetchone()[0]))
            left = self.con.execute("SELECT count(*) FROM cluster_evidence WHERE statement_id=?", (sid,)).fetchone()[0]
            if left == 0:
                self.con.execute("DELETE FROM cluster_statements WHERE id=?", (sid,))
        return touched

    def citing(self, mid: int) -> list[int]:
        """The statements a message is evidence of."""
        return [int(s) for (s,) in self.con.execute(
            "SELECT statement_id FROM cluster_evidence WHERE message_id=? ORDER BY statement_id", (mid,))]

    def statement(self, sid: int) -> tuple[str, tuple[int, ...]] | None:
        """A statement's text and the messages it is evidence of (None: it is gone)."""
        row = self.con.execute("SELECT stmt FROM cluster_statements WHERE id=?", (sid,)).fetchone()
        if row is None:
            return None
        return str(row[0]), tuple(int(m) for (m,) in self.con.execute(
            "SELECT message_id FROM cluster_evidence WHERE statement_id=? ORDER BY message_id", (sid,)))

    def drop_statement(self, sid: int) -> None:
        """Delete a statement with its evidence (``forget``: it held a forgotten message's words)."""
        self.con.execute("DELETE FROM cluster_evidence WHERE statement_id=?", (sid,))
        self.con.execute("DELETE FROM cluster_statements WHERE id=?", (sid,))

    # -- Q_k (queries) -------------------------------------------------------------------------------
    def queries(self, cid: int) -> list[tuple[str, np.ndarray]]:
        return [(q, _vec(b)) for q, b in self.con.execute(
            "SELECT query, vector FROM cluster_queries WHERE cluster_id=? ORDER BY id", (cid,))]

    def add_query(self, cid: int, query: str, qvec: np.ndarray, now: str) -> None:
        self.con.execute("INSERT INTO cluster_queries(cluster_id, query, vector, at) VALUES(?,?,?,?)",
                         (cid, query, f32(qvec), now))

    # -- ActiveFacts -----------------------------------------------------------------------------------
    def active_of(self, cid: int) -> tuple[int, str] | None:
        """(id, stmt) of the cluster's ActiveFact, if promoted."""
        row = self.con.execute("SELECT id, stmt FROM active_facts WHERE cluster_id=?", (cid,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def promote(self, cid: int, subject: str, stmt: str, vec: np.ndarray, now: str) -> int:
        self.con.execute("INSERT INTO active_facts(cluster_id, subject, stmt, created_at, updated_at) "
                         "VALUES(?,?,?,?,?)", (cid, subject, stmt, now, now))
        fid = self.con.last_insert_rowid()
        self.con.execute("INSERT INTO active_fact_vec(rowid, embedding) VALUES(?, vec_int8(?))", (fid, i8(vec)))
        return fid

    def restate(self, fid: int, stmt: str, vec: np.ndarray, now: str) -> None:
        self.con.execute("UPDATE active_facts SET stmt=?, updated_at=? WHERE id=?", (stmt, now, fid))
        self.set_vector("active_fact_vec", fid, i8(vec))

    def delete_active(self, fid: int) -> None:
        self.con.execute("DELETE FROM active_fact_vec WHERE rowid=?", (fid,))
        self.con.execute("DELETE FROM active_facts WHERE id=?", (fid,))

    def nearest_active(self, vec: np.ndarray, k: int) -> list[tuple[int, float]]:
        return self.knn("active_fact_vec", vec, k)  # fewer when there are fewer

    def active_many(self, ids: list[int]) -> dict[int, ActiveFactRow]:
        """The ActiveFacts with these ids that exist, with their clusters' evidence messages (two queries)."""
        rows = list(self.rows_in("SELECT id, subject, stmt, created_at, cluster_id FROM active_facts "
                                 "WHERE id IN ({marks})", ids))
        msgs: dict[int, list[int]] = {}
        for cid, mid in self.rows_in(
                "SELECT DISTINCT s.cluster_id, e.message_id FROM cluster_statements s "
                "JOIN cluster_evidence e ON e.statement_id=s.id WHERE s.cluster_id IN ({marks}) "
                "ORDER BY s.cluster_id, e.message_id", [r[4] for r in rows]):
            msgs.setdefault(cid, []).append(mid)
        return {int(r[0]): ActiveFactRow(int(r[0]), str(r[1]), str(r[2]), str(r[3]), tuple(msgs.get(r[4], ())))
                for r in rows}

    def active_query_vectors(self, fid: int) -> list[np.ndarray]:
        """The vectors of the queries that promoted an ActiveFact."""
        return [_vec(b) for (b,) in self.con.execute(
            "SELECT q.vector FROM active_facts a JOIN cluster_queries q ON q.cluster_id=a.cluster_id WHERE a.id=?",
            (fid,))]

    # -- reads for the API -----------------------------------------------------------------------------
    def messages(self, cid: int) -> tuple[int, ...]:
        return tuple(m for (m,) in self.con.execute(
            "SELECT DISTINCT e.message_id FROM cluster_statements s JOIN cluster_evidence e ON e.statement_id=s.id "
            "WHERE s.cluster_id=? ORDER BY e.message_id", (cid,)))

    def query_texts(self, cid: int) -> tuple[str, ...]:
        return tuple(q for (q,) in self.con.execute(
            "SELECT query FROM cluster_queries WHERE cluster_id=? ORDER BY id", (cid,)))

    def list_active(self) -> list[ActiveFact]:
        rows = self.con.execute(
            "SELECT a.id, a.cluster_id, a.subject, a.stmt, c.score_src, c.score_qry FROM active_facts a "
            "JOIN candidate_clusters c ON c.id=a.cluster_id ORDER BY a.id").fetchall()
        return [ActiveFact(r[0], r[1], r[2], r[3], self.messages(r[1]), self.query_texts(r[1]), r[4], r[5])
                for r in rows]

    def list_candidates(self) -> list[CandidateCluster]:
        rows = self.con.execute(
            "SELECT c.id, c.subject, c.score_src, c.score_qry, a.id FROM candidate_clusters c "
            "LEFT JOIN active_facts a ON a.cluster_id=c.id ORDER BY c.id").fetchall()
        return [CandidateCluster(r[0], r[1], tuple(s for _, s, _ in self.statements(r[0])), self.query_texts(r[0]),
                                 self.messages(r[0]), r[2], r[3], r[4]) for r in rows]
