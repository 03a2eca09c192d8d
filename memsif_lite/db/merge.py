"""tombstones, and the reads and writes a merge needs (``memsif_lite.merging``): whole message
rows with their vectors, the rebuild point, and moving messages to new ids."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..int8 import dequantize, quantize
from ..tokens import count_tokens
from .base import Table
from .messages import CONTENT_KEY, SAME_AS_KNOWN, created_at_of, high_water, index_fulltext

__all__ = ["Tombstones", "MergeRows", "FullMessage", "tombstone_hash"]


def tombstone_hash(speaker: str, text: str, at: str) -> bytes:
    """What a tombstone keeps of a forgotten message: a hash of speaker, text and (stored UTC) time."""
    return hashlib.sha256("\x1f".join((speaker, text, at)).encode("utf-8")).digest()


@dataclass(frozen=True)
class FullMessage:
    """Everything stored about a message, its vector included (float32 bytes)."""

    id: int
    speaker: str
    text: str
    at: str
    session: str | None
    source_id: str | None
    content_hash: bytes
    created_at: str
    utc_offset_min: int | None
    vector: bytes

    @property
    def tombstone(self) -> bytes:
        return tombstone_hash(self.speaker, self.text, self.at)

    @property
    def order(self) -> tuple[str, str, str, str, str]:
        """Time order, ties broken by content (the same on every machine)."""
        return (self.at, self.speaker, self.text, self.session or "", self.source_id or "")


class Tombstones(Table):
    def add(self, h: bytes, created_at: str, local_at: str | None = None) -> bool:
        """Record a tombstone; True if it is new. ``local_at``: forgotten here, at that time."""
        self.con.execute("INSERT OR IGNORE INTO tombstones(hash, created_at, local_at) VALUES(?,?,?)",
                         (h, created_at, local_at))
        new = bool(self.con.changes())
        if not new and local_at is not None:
            self.con.execute("UPDATE tombstones SET local_at=min(coalesce(local_at, ?), ?) WHERE hash=?",
                             (local_at, local_at, h))
        return new

    def any(self) -> bool:
        """Whether any message is forgotten (an ``add`` of many asks once, not once a message)."""
        return bool(self.con.execute("SELECT EXISTS(SELECT 1 FROM tombstones)").fetchone()[0])

    def discard(self, h: bytes) -> None:
        """A message added again on purpose is no longer forgotten."""
        self.con.execute("DELETE FROM tombstones WHERE hash=?", (h,))

    def all(self) -> set[bytes]:
        return {bytes(h) for (h,) in self.con.execute("SELECT hash FROM tombstones")}

    def dirty_from(self) -> str | None:
        """The earliest time whose structure a local ``forget`` changed without a rebuild."""
        return self.con.execute("SELECT min(local_at) FROM tombstones").fetchone()[0]

    def settle(self) -> None:
        self.con.execute("UPDATE tombstones SET local_at=NULL WHERE local_at IS NOT NULL")


_FULL = (f"m.id, m.speaker, m.text, m.at, m.session, m.source_id, m.content_hash, {created_at_of('m.')}, "
         "m.utc_offset_min, v.embedding FROM messages m JOIN message_vec v ON v.rowid=m.id")


def _full(r: tuple, int8: bool) -> FullMessage:
    """A message row; its vector as float32 bytes whichever way the file stores it (int8 codes
    since schema 6, float32 before)."""
    vec = bytes(r[9])
    if int8:
        vec = np.ascontiguousarray(dequantize(np.frombuffer(vec, dtype=np.int8)), dtype=np.float32).tobytes()
    return FullMessage(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), r[7], r[8], vec)


class MergeRows(Table):
    def __init__(self, con: Any, caches: list[Any]):
        super().__init__(con)
        self.caches = caches

    def caches_changed(self) -> None:
        """Inside the merge's transaction: every process's vector caches reload (this one now, the
        others through ``vector_epoch``), since messages and segments were rewritten under them."""
        self.con.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key='vector_epoch'")
        for c in self.caches:
            c.invalidate()

    # -- reading a file (ours, or the other one, opened read-only) ------------------------------------------
    def messages(self, *, has_offset: bool = True, int8: bool = True, has_known: bool = True) -> list[FullMessage]:
        """Every message, whole (``has_offset``, ``int8``, ``has_known``: the file's schema has UTC
        offsets, int8 vectors, record times: a file older than schema 13 keeps created_at whole)."""
        cols = _FULL if has_offset else _FULL.replace("m.utc_offset_min", "NULL")
        cols = cols if has_known else cols.replace(created_at_of("m."), "m.created_at")
        return [_full(r, int8) for r in self.con.execute(f"SELECT {cols} ORDER BY m.id")]

    def tombstones(self, *, has_table: bool = True) -> set[bytes]:
        return Tombstones(self.con).all() if has_table else set()

    def clusters(self) -> list[tuple[str, list[tuple[str, list[int]]], list[tuple[str, bytes]]]]:
        """(subject, [(statement, evidence message ids)], [(query, vector)]) of every candidate cluster."""
        out = []
        for cid, subject in self.con.execute("SELECT id, subject FROM candidate_clusters ORDER BY id").fetchall():
            stmts = []
            for sid, stmt in self.con.execute("SELECT id, stmt FROM cluster_statements WHERE cluster_id=? "
                                              "ORDER BY id", (cid,)).fetchall():
                mids = [m for (m,) in self.con.execute(
                    "SELECT message_id FROM cluster_evidence WHERE statement_id=? ORDER BY message_id", (sid,))]
                stmts.append((stmt, mids))
            queries = [(q, bytes(v)) for q, v in self.con.execute(
                "SELECT query, vector FROM cluster_queries WHERE cluster_id=? ORDER BY id", (cid,))]
            out.append((subject, stmts, queries))
        return out

    def facts_summary(self) -> set[tuple[str, str, str, str, bool]]:
        """(subject, type, stmt, valid_from, current) of every CoreFact: what a merge reports on."""
        return {(r[0], r[1], r[2], r[3], r[4] is None) for r in self.con.execute(
            "SELECT subject, type, stmt, valid_from, valid_to FROM core_facts")}

    def query_count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM cluster_queries").fetchone()[0])

    # -- the rebuild point -------------------------------------------------------------------------------
    def last_placed_before(self, at: str) -> tuple[int, str] | None:
        """(segment id, segment start) of the latest placed message earlier than ``at``."""
        row = self.con.execute(
            "SELECT s.id, s.start_at FROM message_units u JOIN messages m ON m.id=u.message_id "
            "JOIN segments s ON s.id=u.segment_id WHERE m.at < ? ORDER BY m.at DESC, m.id DESC LIMIT 1",
            (at,)).fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def replaced(self, at: str, first_segment: int | None) -> list[FullMessage]:
        """The messages a rebuild from ``at`` places again: from ``at`` on, or in a segment from
        ``first_segment`` on."""
        if first_segment is None:
            return [_full(r, True) for r in self.con.execute(f"SELECT {_FULL} WHERE m.at >= ? ORDER BY m.id", (at,))]
        return [_full(r, True) for r in self.con.execute(
            f"SELECT {_FULL} WHERE m.at >= ? OR m.id IN (SELECT message_id FROM message_units WHERE segment_id >= ?) "
            "ORDER BY m.id", (at, first_segment))]

    def earliest_fact_source(self, mids: Iterable[int]) -> tuple[str | None, list[int]]:
        """The CoreFacts with a source among ``mids``, and the earliest time of all their sources."""
        ids = list(mids)
        facts = {f for (f,) in self.rows_in(
            "SELECT DISTINCT fact_id FROM fact_sources WHERE message_id IN ({marks})", ids)}
        if not facts:
            return None, []
        fl = sorted(facts)
        times = [t for (t,) in self.rows_in("SELECT min(m.at) FROM fact_sources s JOIN messages m "
                                             "ON m.id=s.message_id WHERE s.fact_id IN ({marks})", fl) if t is not None]
        return (min(times) if times else None), fl

    # -- the reset --------------------------------------------------------------------------------------
    def segments_from(self, first_segment: int | None) -> tuple[list[int], list[int]]:
        """(segment ids from ``first_segment`` on, the trajectories they belong to)."""
        where, args = ("", ()) if first_segment is None else (" WHERE id >= ?", (first_segment,))
        rows = self.con.execute(f"SELECT id, trajectory_id FROM segments{where}", args).fetchall()
        return [r[0] for r in rows], sorted({r[1] for r in rows if r[1] is not None})

    def drop_segment(self, sid: int) -> None:
        self.con.execute("DELETE FROM message_units WHERE segment_id=?", (sid,))
        self.con.execute("DELETE FROM segment_vec WHERE rowid=?", (sid,))
        self.con.execute("DELETE FROM segments WHERE id=?", (sid,))
        self.con.execute("DELETE FROM segment_sums WHERE segment_id=?", (sid,))

    def max_message_id(self) -> int:
        """The highest message id this file ever used (ids are never reused: sql/0010)."""
        return high_water(self.con, "messages")

    def insert(self, mid: int, m: FullMessage, vector: bytes, content_hash: bytes, *, known_at: str,
               moved: int | None = None) -> None:
        """A message under a given id, with its vector and full-text row; learnt at ``known_at``,
        or when message ``moved`` was (a message placed again under a new id)."""
        if moved is not None:
            row = self.con.execute("SELECT known_at FROM messages WHERE id=?", (moved,)).fetchone()
            known_at = known_at if row is None or row[0] is None else row[0]
        self.con.execute(
            "INSERT INTO messages(id, speaker, text, at, session, source_id, content_hash, created_at, utc_offset_min, "
            "known_at) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (mid, m.speaker, m.text, m.at, m.session, m.source_id, content_hash[:CONTENT_KEY],
             SAME_AS_KNOWN if m.created_at == known_at else m.created_at, m.utc_offset_min, known_at))
        code = quantize(np.frombuffer(vector, dtype=np.float32))
        self.con.execute("UPDATE messages SET tokens=? WHERE id=?", (count_tokens(m.text), mid))
        self.con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?, vec_int8(?))", (mid, code.tobytes()))
        index_fulltext(self.con, mid, m.speaker, m.text)

    def move_evidence(self, old: int, new: int) -> None:
        """ActiveFact evidence follows a message to its new id."""
        self.con.execute("UPDATE cluster_evidence SET message_id=? WHERE message_id=?", (new, old))

    def queued(self, mid: int) -> list[tuple[int, str, int | None, str | None]]:
        """(sub, kind, segment_id, payload) of the steps keyed by a message, in order."""
        return self.con.execute("SELECT sub, kind, segment_id, payload FROM work_queue WHERE message_id=? "
                                "ORDER BY sub", (mid,)).fetchall()

    def rekey(self, mid: int, sub: int, new_mid: int, new_sub: int) -> None:
        self.con.execute("UPDATE work_queue SET message_id=?, sub=? WHERE message_id=? AND sub=?",
                         (new_mid, new_sub, mid, sub))

    def unqueue(self, mid: int, sub: int) -> None:
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND sub=?", (mid, sub))
