"""messages, message_vec, message_fts."""

from __future__ import annotations

import numpy as np

from ..timeutil import from_stored
from ..types import Message
from .base import Table
from .rows import MessageRow, f32

__all__ = ["Messages"]

_COLS = "id, speaker, text, at, session, source_id, utc_offset_min"


def _row(r: tuple) -> MessageRow:
    return MessageRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6])


def to_message(r: MessageRow) -> Message:
    return Message(r.id, r.speaker, r.text, from_stored(r.at), r.session, r.source_id, r.utc_offset_min)


class Messages(Table):
    def insert(self, *, speaker: str, text: str, at: str, session: str | None, source_id: str | None,
               content_hash: bytes, created_at: str, vector: np.ndarray, utc_offset_min: int | None = None) -> int:
        """The message row, its vector and its full-text row."""
        self.con.execute(
            "INSERT INTO messages(speaker, text, at, session, source_id, content_hash, created_at, utc_offset_min) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (speaker, text, at, session, source_id, content_hash, created_at, utc_offset_min))
        mid = self.con.last_insert_rowid()
        self.con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?, ?)", (mid, f32(vector)))
        self.con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)", (mid, speaker, text))
        return mid

    def vector_by_hash(self, content_hash: bytes) -> np.ndarray | None:
        """The stored vector of a message with this content hash (the file is the embedding cache)."""
        row = self.con.execute(
            "SELECT v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
            "WHERE m.content_hash=? LIMIT 1", (content_hash,)).fetchone()
        return None if row is None else np.frombuffer(row[0], dtype=np.float32).copy()

    def vector(self, mid: int) -> np.ndarray | None:
        row = self.con.execute("SELECT embedding FROM message_vec WHERE rowid=?", (mid,)).fetchone()
        return None if row is None else np.frombuffer(row[0], dtype=np.float32).copy()

    def get(self, mid: int) -> MessageRow | None:
        r = self.con.execute(f"SELECT {_COLS} FROM messages WHERE id=?", (mid,)).fetchone()
        return None if r is None else _row(r)

    def many(self, ids: list[int]) -> dict[int, MessageRow]:
        out: dict[int, MessageRow] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            for r in self.con.execute(f"SELECT {_COLS} FROM messages WHERE id IN ({marks})", chunk):
                out[r[0]] = _row(r)
        return out

    def all(self) -> list[Message]:
        return [to_message(_row(r)) for r in self.con.execute(f"SELECT {_COLS} FROM messages ORDER BY id")]

    def exists(self, mid: int) -> bool:
        return self.con.execute("SELECT 1 FROM messages WHERE id=?", (mid,)).fetchone() is not None

    def dense(self, qvec: np.ndarray, depth: int) -> list[int]:
        return [m for m, _ in self.knn("message_vec", qvec, depth)]

    def bm25(self, fts_query: str, speaker_weight: float, depth: int) -> list[int]:
        return [r[0] for r in self.con.execute(
            "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, ?, 1.0) LIMIT ?",
            (fts_query, speaker_weight, depth))]

    def delete(self, mid: int) -> None:
        """The row, its vector and its full-text entry (provenance rows must be gone first)."""
        row = self.con.execute("SELECT speaker, text FROM messages WHERE id=?", (mid,)).fetchone()
        self.con.execute("INSERT INTO message_fts(message_fts, rowid, speaker, text) VALUES('delete', ?, ?, ?)",
                         (mid, row[0], row[1]))
        self.con.execute("DELETE FROM message_vec WHERE rowid=?", (mid,))
        self.con.execute("DELETE FROM messages WHERE id=?", (mid,))
