"""Filtered reads (see :mod:`memsif_lite.filters`): every ranking here restricts the candidates
before it cuts its top k, never after, so a filter never empties a top-k:

* dense over messages: the in-process vector cache ranks only the rows the filter admits
  (:class:`~memsif_lite.db.vector_cache.Allowed`: a time window compared beside the cache, an id
  list read here for speakers or sessions); without the cache, vec0's KNN with ``rowid IN
  (SELECT ... WHERE ...)``;
* dense over segments and trajectories: the unfiltered ranking (cache) walked down, keeping the
  units that hold a matching message, until ``depth`` are found — the same list; for a narrow
  filter, the units holding a matching message listed first and only they ranked by the cache;
* BM25: the FTS5 match joined to each hit's message row, the filter checked per hit.

The speaker/session/time columns are indexed."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from typing import Any, Sequence

import numpy as np

from ..filters import MessageFilter
from ..types import CoreFact
from . import bm25
from .base import Table
from .messages import CREATED_AT, Messages, learnt
from .rows import MessageRow
from .structure import UNIT_TABLES, Structure
from .vector_cache import Allowed

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
        where.append(learnt("<=", f"{alias}."))
        args += [f.known_at] * 3
    return where, args


def _earliest(*times: str | None) -> str | None:
    """The earliest of the given stored times (text order is time order), or None."""
    given = [t for t in times if t is not None]
    return min(given) if given else None


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


def _units_sql(level: str, f: MessageFilter) -> tuple[str, list[Any]]:
    """The segments (or trajectories) holding at least one matching message, with its arguments."""
    sql, args = message_sql(f)
    if level == "segment":
        return f"SELECT u.segment_id FROM message_units u WHERE u.message_id IN ({sql})", args
    return ("SELECT s.trajectory_id FROM message_units u JOIN segments s ON s.id=u.segment_id "
            f"WHERE s.trajectory_id IS NOT NULL AND u.message_id IN ({sql})"), args


#: units a filtered unit ranking checks one by one at most; a narrower filter lists its units
WALK = 256

_CORE_SOURCES = "SELECT 1 FROM fact_sources s JOIN messages m ON m.id=s.message_id WHERE s.fact_id=x.id"
_ACTIVE_SOURCES = ("SELECT 1 FROM cluster_statements cs JOIN cluster_evidence e ON e.statement_id=cs.id "
                   "JOIN messages m ON m.id=e.message_id WHERE cs.cluster_id=x.cluster_id")


class Filtering(Table):
    def __init__(self, con: Any, messages: Messages, structure: Structure):
        super().__init__(con)
        self._messages, self._structure = messages, structure  # for their in-process vector caches

    def allowed(self, f: MessageFilter) -> Allowed:
        """The matching messages as the vector cache applies them: a time window alone is compared
        beside the cache; speakers, sessions or a record time (``known_at``) become the list of
        matching ids (indexed columns, the time window inside the same query)."""
        if f.speakers or f.sessions or f.known_at is not None:
            sql, args = message_sql(f)
            return Allowed(ids=np.fromiter((r[0] for r in self.con.execute(sql, args)), dtype=np.int64))
        return Allowed(since=f.since, until=_earliest(f.until, f.as_of))

    # -- rankings ------------------------------------------------------------------------------
    def dense(self, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        """Nearest matching messages, nearest first: the vector cache over the matching rows, else
        vec0's KNN with the rowid constraint (the same ranking)."""
        hits = self._messages.cached_nearest(qvec, depth, self.allowed(f))
        if hits is None:
            hits = self.knn("message_vec", qvec, depth, only=message_sql(f))
        return [m for m, _ in hits]

    def bm25(self, terms: Sequence[str], speaker_weight: float, depth: int, f: MessageFilter) -> list[int]:
        # each hit joined to its message row (CROSS JOIN: FTS5 first, the MATCH runs once) and the
        # filter checked there: as cheap as an unfiltered match (0.14 vs 0.12 ms, a time filter over
        # 10,000 messages), where `+rowid IN (SELECT ...)` first listed every matching id (0.9 ms);
        # bounded on large files as the unfiltered ranking is (memsif_lite.db.bm25)
        return bm25.ranked(self.con, terms, speaker_weight, depth, where=_message_where(f),
                           words=self._messages.common_words)

    def unit_dense(self, level: str, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        """Nearest segments (or trajectories) holding at least one matching message: the unfiltered
        ranking from the cache, walked down keeping the units that hold one, until ``depth`` are
        kept or the ranking ends (each step checks about as many as the share found so far says
        are needed). When that share says more than ``WALK`` units are still to check (a narrow
        filter), the units holding a matching message are listed instead and the cache ranks only
        them; without the cache, vec0's KNN over those units."""
        out: list[int] = []
        seen, found, k = 0, 0, 8 * depth
        ranked: list[int] = []
        while len(out) < depth:
            if seen == len(ranked):
                if seen and seen < k:  # the whole ranking is walked
                    break
                k = k if not seen else 8 * k
                got = self._structure.cached_dense(level, qvec, k)  # the same order, a longer prefix
                if got is None:
                    return self._unit_knn(level, qvec, depth, f)
                if seen == len(got):
                    break
                ranked = got
            share = found / seen if seen else 1.0
            if (depth - len(out)) / max(share, 1 / 64) > WALK:  # a narrow filter: list its units instead
                return self._unit_ranked_among(level, qvec, depth, f)
            step = int((depth - len(out)) / max(share, 1 / 16) * 1.25) + 2
            batch = ranked[seen:seen + step]
            holding = self._holding(level, batch, f)
            out += [u for u in batch if u in holding]
            seen, found = seen + len(batch), found + len(holding)
        return out[:depth]

    def _holding(self, level: str, uids: Sequence[int], f: MessageFilter) -> set[int]:
        """Those of ``uids`` holding at least one matching message (each checked until one is found;
        the ids as one JSON array: measured twice as fast as an ``IN`` list here)."""
        where, args = _message_where(f)
        members = ("message_units u" if level == "segment" else  # CROSS JOIN: from the unit to its members
                   "segments s CROSS JOIN message_units u ON u.segment_id=s.id")
        unit = "u.segment_id" if level == "segment" else "s.trajectory_id"
        return {int(r[0]) for r in self.con.execute(
            f"SELECT x.value FROM json_each(?) x WHERE EXISTS (SELECT 1 FROM {members} CROSS JOIN messages m "
            f"ON m.id=u.message_id WHERE {unit}=x.value AND {where})", (json.dumps(list(uids)), *args))}

    def _unit_ranked_among(self, level: str, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        """The cache's ranking of the units holding a matching message, listed first (one query)."""
        sql, args = _units_sql(level, f)
        ids = np.fromiter((r[0] for r in self.con.execute(sql, args)), dtype=np.int64)
        ranked = self._structure.cached_dense(level, qvec, depth, Allowed(ids=ids))
        return ranked if ranked is not None else self._unit_knn(level, qvec, depth, f)

    def _unit_knn(self, level: str, qvec: np.ndarray, depth: int, f: MessageFilter) -> list[int]:
        return [u for u, _ in self.knn(UNIT_TABLES[level][1], qvec, depth, only=_units_sql(level, f))]

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
        source id, else the same speaker, time and text (both indexed: messages_source_id, messages_speaker)."""
        return self.present_id(speaker, text, at, source_id) is not None

    def present_id(self, speaker: str, text: str, at: str, source_id: str | None) -> int | None:
        """The id of the stored message :meth:`already_present` finds, or None."""
        args: tuple[Any, ...]
        if source_id is not None:
            sql, args = "SELECT id FROM messages WHERE source_id=? AND speaker=? LIMIT 1", (source_id, speaker)
        else:
            sql, args = ("SELECT id FROM messages WHERE speaker=? COLLATE NOCASE AND speaker=? AND at=? AND text=? "
                         "LIMIT 1", (speaker, speaker, at, text))
        row = self.con.execute(sql, args).fetchone()
        return None if row is None else int(row[0])

    def retried_id(self, speaker: str, text: str, session: str | None, since: str, before_created: str) -> int | None:
        """The id of a message with this speaker, text and session, without a source id, timed at or
        after ``since`` and stored before ``before_created`` (by an earlier call): what a retry of a
        call that gave no time finds (index messages_speaker: the exact speaker is among its case-blind
        matches)."""
        row = self.con.execute("SELECT id FROM messages WHERE speaker=? COLLATE NOCASE AND speaker=? AND at>=? "
                               f"AND text=? AND session IS ? AND source_id IS NULL AND {CREATED_AT}<? "
                               "ORDER BY at DESC LIMIT 1",
                               (speaker, speaker, since, text, session, before_created)).fetchone()
        return None if row is None else int(row[0])

    def only_facts(self, facts: list[CoreFact], f: MessageFilter | None) -> list[CoreFact]:
        """The matching ones among ``facts`` (all of them without a filter), which were read valid
        at ``f.as_of`` already (``CoreFacts.select(valid_at=...)``): that is not checked again."""
        if f is None or not (f.speakers or f.sessions or f.since or f.until):
            return facts
        sql, args = _fact_sql(dataclasses.replace(f, as_of=None), "core_facts", _CORE_SOURCES)
        keep = {r[0] for r in self.con.execute(sql, args)}
        return [x for x in facts if x.id in keep]

    def messages(self, f: MessageFilter | None, limit: int | None, offset: int) -> list[MessageRow]:
        """Matching messages in the order they were added, one page."""
        where, args = _message_where(f)
        rows = self.con.execute(f"SELECT {_COLS} FROM messages m WHERE {where} ORDER BY m.id LIMIT ? OFFSET ?",
                                (*args, -1 if limit is None else limit, offset))
        return [MessageRow(*r) for r in rows]
