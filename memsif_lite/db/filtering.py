"""Filtered reads (see :mod:`memsif_lite.filters`): every query here restricts the candidates
INSIDE SQL — the vec0 KNN and the FTS5 match both take ``rowid IN (SELECT ... WHERE ...)``, so a
filter never empties a top-k that was cut before filtering. The speaker/session/time columns are
indexed."""

from __future__ import annotations

import unicodedata
from typing import Any, Sequence

import numpy as np

from ..filters import MessageFilter
from ..types import CoreFact
from .base import Table
from .rows import MessageRow

__all__ = ["Filtering", "message_sql"]

_COLS = "id, speaker, text, at, session, source_id, utc_offset_min, tokens"


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _spellings(names: Sequence[str]) -> list[str]:
    """Each name as given, composed and decomposed (NFC / NFD): "Léa" or "지민" written either way
    by whoever stored it is the same speaker."""
    return list(dict.fromkeys(v for n in names for v in (n, unicodedata.normalize("NFC", n),
                                                         unicodedata.normalize("NFD", n))))


def _conditions(f: MessageFilter, alias: str, *, speakers: bool = True,
                as_of: bool = True) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    args: list[Any] = []
    if speakers and f.speakers:
        names = _spellings(f.speakers)
        where.append(f"{alias}.speaker COLLATE NOCASE IN ({_marks(len(names))})")
        args += names
    if f.sessions:
        where.append(f"{alias}.session IN ({_marks(len(f.sessions))})")
        args += f.sessions
    if f.since is not None:
        where.append(f"{alias}.at >= ?")
        args.append(f.since)
    if f.until is not None:
        where.append(f"{alias}.at <= ?")
        args.append(f.until)
    if as_of and f.as_of is not None:
        where.append(f"{alias}.at <= ?")
        args.append(f.as_of)
    if f.known_at is not None:  # record time: learnt by then
        where.append(f"{alias}.known_at <= ?")
        args.append(f.known_at)
    return where, args


def _message_where(f: MessageFilter | None) -> tuple[str, list[Any]]:
    """The condition on ``messages m`` that the matching messages meet (all of them without a
    filter), with its arguments."""
    where, args = _conditions(f, "m") if f is not None else ([], [])
    return " AND ".join(where) or "1", args


def message_sql(f: MessageFilter) -> tuple[str, list[Any]]:
    """``SELECT id FROM messages WHERE ...`` for the matching messages, with its arguments."""
    where, args = _message_where(f)
    return "SELECT m.id FROM messages m WHERE " + where, args


def _fact_sql(f: MessageFilter, table: str, sources: str) -> tuple[str, list[Any]]:
    """Facts whose subject is one of the speakers and with a source message in the sessions/time."""
    where: list[str] = []
    args: list[Any] = []
    if f.speakers:
        names = _spellings(f.speakers)
        where.append(f"x.subject COLLATE NOCASE IN ({_marks(len(names))})")
        args += names
    core = table == "core_facts"  # as_of: a CoreFact's validity, not its sources' times (below)
    cond, cargs = _conditions(f, "m", speakers=False, as_of=not core)
    if cond:
        where.append(f"EXISTS ({sources} AND {' AND '.join(cond)})")
        args += cargs
    if f.as_of is not None and core:  # valid then (docs/history.md)
        where.append("x.valid_from <= ? AND (x.valid_to IS NULL OR x.valid_to > ?)")
        args += [f.as_of, f.as_of]
    if f.known_at is not None:  # held then: made by then (shown as it stood then: memsif_lite.record_time)
        where.append("x.created_at <= ?")
        args.append(f.known_at)
    return f"SELECT x.id FROM {table} x WHERE " + (" AND ".join(where) or "1"), args


_CORE_SOURCES = "SELECT 1 FROM fact_sources s JOIN messages m ON m.id=s.message_id WHERE s.fact_id=x.id"
_ACTIVE_SOURCES = ("SELECT 1 FROM cluster_statements cs JOIN cluster_evidence e ON e.statement_id=cs.id "
                   "JOIN messages m ON m.id=e.message_id WHERE cs.cluster_id=x.cluster_id")


class Filtering(Table):
    # -- rankings ------------------------------------------------------------------------------
    def dense(self, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        """Nearest matching messages (vec0 KNN with the rowid constraint), nearest first."""
        return [m for m, _ in self.knn("message_vec", qvec, depth, only=message_sql(f))]

    def bm25(self, fts_query: str, speaker_weight: float, depth: int, f: MessageFilter) -> list[int]:
        # `+rowid`: FTS5 would otherwise run the MATCH once per candidate rowid (320 ms instead of
        # 1 ms for a 90 % filter over 2,000 messages, benchmarks/filters.py); this way the MATCH runs
        # once and the candidates are a materialised list checked per hit
        sql, args = message_sql(f)
        return [r[0] for r in self.con.execute(
            f"SELECT rowid FROM message_fts WHERE message_fts MATCH ? AND +rowid IN ({sql}) "
            "ORDER BY bm25(message_fts, ?, 1.0) LIMIT ?", (fts_query, *args, speaker_weight, depth))]

    def unit_dense(self, level: str, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        """Nearest segments (or trajectories) holding at least one matching message."""
        sql, args = message_sql(f)
        if level == "segment":
            units = f"SELECT u.segment_id FROM message_units u WHERE u.message_id IN ({sql})"
            table = "segment_vec"
        else:
            units = ("SELECT s.trajectory_id FROM message_units u JOIN segments s ON s.id=u.segment_id "
                     f"WHERE s.trajectory_id IS NOT NULL AND u.message_id IN ({sql})")
            table = "trajectory_vec"
        return [u for u, _ in self.knn(table, qvec, depth, only=(units, args))]

    def nearest_facts(self, qvec: np.ndarray, k: int, f: MessageFilter) -> list[tuple[int, float]]:
        return self.knn("fact_vec", qvec, min(k, self.count("fact_vec")),
                        only=_fact_sql(f, "core_facts", _CORE_SOURCES))

    def nearest_active(self, qvec: np.ndarray, k: int, f: MessageFilter) -> list[tuple[int, float]]:
        return self.knn("active_fact_vec", qvec, min(k, self.count("active_fact_vec")),
                        only=_fact_sql(f, "active_facts", _ACTIVE_SOURCES))

    # -- sets and listings -----------------------------------------------------------------------
    def keep(self, ids: Sequence[int], f: MessageFilter) -> set[int]:
        """The matching ones among ``ids``."""
        sql, args = message_sql(f)
        return {r[0] for r in self.rows_in(sql + " AND m.id IN ({marks})", ids, args)}

    def already_present(self, speaker: str, text: str, at: str, source_id: str | None) -> bool:
        """Is this message in the file already: same ``source_id`` and speaker when it has a
        source id, else the same speaker, time and text (both indexed)."""
        return self.present_id(speaker, text, at, source_id) is not None

    def present_id(self, speaker: str, text: str, at: str, source_id: str | None) -> int | None:
        """The id of the stored message :meth:`already_present` finds, or None."""
        args: tuple[Any, ...]
        if source_id is not None:
            sql, args = "SELECT id FROM messages WHERE source_id=? AND speaker=? LIMIT 1", (source_id, speaker)
        else:
            sql, args = "SELECT id FROM messages WHERE speaker=? AND at=? AND text=? LIMIT 1", (speaker, at, text)
        row = self.con.execute(sql, args).fetchone()
        return None if row is None else int(row[0])

    def retried_id(self, speaker: str, text: str, session: str | None, since: str, before_created: str) -> int | None:
        """The id of a message with this speaker, text and session, without a source id, timed at or
        after ``since`` and stored before ``before_created`` (by an earlier call): what a retry of a
        call that gave no time finds (index messages_speaker_at)."""
        row = self.con.execute("SELECT id FROM messages WHERE speaker=? AND at>=? AND text=? AND session IS ? "
                               "AND source_id IS NULL AND created_at<? ORDER BY at DESC LIMIT 1",
                               (speaker, since, text, session, before_created)).fetchone()
        return None if row is None else int(row[0])

    def only_facts(self, facts: list[CoreFact], f: MessageFilter | None) -> list[CoreFact]:
        """The matching ones among ``facts`` (all of them without a filter)."""
        if f is None:
            return facts
        sql, args = _fact_sql(f, "core_facts", _CORE_SOURCES)
        keep = {r[0] for r in self.con.execute(sql, args)}
        return [x for x in facts if x.id in keep]

    def messages(self, f: MessageFilter | None, limit: int | None, offset: int) -> list[MessageRow]:
        """Matching messages in the order they were added, one page."""
        where, args = _message_where(f)
        rows = self.con.execute(f"SELECT {_COLS} FROM messages m WHERE {where} ORDER BY m.id LIMIT ? OFFSET ?",
                                (*args, -1 if limit is None else limit, offset))
        return [MessageRow(*r) for r in rows]
