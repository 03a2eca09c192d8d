"""The flat baselines' store: the same message tables memsif uses (sql/0001: messages, a vec0
table, an FTS5 index), filled directly with no structure, and the flat rankings over it.

It is an independent, minimal flat RAG store (what a turn-level retriever in one SQLite file
costs), not memsif code: only the schema file, ``fts_query``, ``rrf`` and the BM25 speaker weight
are shared, so that the flat and memsif rankings differ only by what memsif adds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import apsw
import numpy as np
import sqlite_vec

from memsif_lite.int8 import quantize
from memsif_lite.retrieval import SPEAKER_WEIGHT, fts_query, rrf

SCHEMA = Path(__file__).resolve().parent.parent / "sql" / "0001_messages.sql"


class FlatStore:
    def __init__(self, path: Path, dim: int, *, create: bool = True):
        self.path = path
        self.con = apsw.Connection(str(path))
        self.con.enable_load_extension(True)
        self.con.load_extension(sqlite_vec.loadable_path())
        self.con.enable_load_extension(False)
        if create:  # else: read the message tables of an existing (memsif) file
            self.con.execute("PRAGMA journal_mode=WAL")
            self.con.execute(SCHEMA.read_text(encoding="utf-8").replace("{dim}", str(dim)))
        # a memsif file (schema 5+) stores int8 codes; the flat store's own tables are float32
        ddl = self.con.execute("SELECT sql FROM sqlite_schema WHERE name='message_vec'").fetchone()[0]
        self.int8 = "int8[" in ddl

    def add(self, turns: list[dict], vecs: np.ndarray, at: list[str]) -> list[int]:
        ids = []
        with self.con:
            for t, v, when in zip(turns, vecs, at, strict=True):
                passage = f"{t['speaker']}: {t['text']}"
                self.con.execute(
                    "INSERT INTO messages(speaker, text, at, session, source_id, content_hash, created_at) "
                    "VALUES(?,?,?,?,?,?,?)", (t["speaker"], t["text"], when, t.get("session"), t.get("source_id"),
                                              hashlib.sha256(passage.encode()).digest(), when))
                mid = self.con.last_insert_rowid()
                self.con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?, ?)",
                                 (mid, np.asarray(v, dtype=np.float32).tobytes()))
                self.con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)",
                                 (mid, t["speaker"], t["text"]))
                ids.append(mid)
        return ids

    def size(self) -> int:
        self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return self.path.stat().st_size

    def recency(self) -> list[int]:
        return [r[0] for r in self.con.execute("SELECT id FROM messages ORDER BY at DESC, id DESC")]

    def dense(self, qvec: np.ndarray, depth: int) -> list[int]:
        if self.int8:
            return [r[0] for r in self.con.execute(
                "SELECT rowid FROM message_vec WHERE embedding MATCH vec_int8(?) AND k = ? ORDER BY distance",
                (quantize(qvec).tobytes(), depth))]
        return [r[0] for r in self.con.execute(
            "SELECT rowid FROM message_vec WHERE embedding MATCH ? AND k = ? ORDER BY distance",
            (np.asarray(qvec, dtype=np.float32).tobytes(), depth))]

    def bm25(self, question: str, depth: int) -> list[int]:
        q = fts_query(question)
        if q is None:
            return []
        return [r[0] for r in self.con.execute(
            "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, ?, 1.0) LIMIT ?",
            (q, SPEAKER_WEIGHT, depth))]

    def ranking(self, system: str, question: str, qvec: np.ndarray | None) -> list[int]:
        """``qvec``: the question's vector (naive_rag and hybrid_rag; None for the others)."""
        if system == "recency":
            return self.recency()
        if system == "naive_rag":
            assert qvec is not None
            return self.dense(qvec, 200)
        if system == "bm25":
            return self.bm25(question, 200)
        if system == "hybrid_rag":
            assert qvec is not None
            s = rrf(self.dense(qvec, 200), self.bm25(question, 200))
            return [m for m, _ in sorted(s.items(), key=lambda kv: (-kv[1], kv[0]))]
        raise ValueError(system)

    def close(self) -> None:
        self.con.close()
