"""core_facts, fact_sources, fact_history, fact_vec (CoreFacts)."""

from __future__ import annotations

import json
from typing import Any, Collection, Sequence

import numpy as np

from ..int8 import quantize
from ..timeutil import from_stored
from ..types import CoreFact, FactEvent
from .base import Table
from .messages import cached_search, next_id, retire_id
from .rows import FactRow
from .vector_cache import VectorCache

__all__ = ["CoreFacts"]

_ROW = "id, subject, type, stmt, slot, valid_from"
_FROM = "from messages "


def from_messages(message_ids: Sequence[int]) -> str:
    """The ``detail`` of a merge/update event: the messages it came from (``forget`` reads it back)."""
    return _FROM + json.dumps(list(message_ids))


def _event_sources(detail: str | None) -> list[int] | None:
    if not detail or not detail.startswith(_FROM):
        return None
    try:
        ids = json.loads(detail[len(_FROM):])
    except (ValueError, RecursionError):
        return None
    return [int(m) for m in ids] if isinstance(ids, list) and all(isinstance(m, int) for m in ids) else None


class CoreFacts(Table):
    """``cache``: the in-process copy of ``fact_vec`` (:class:`VectorCache`) that :meth:`nearest`
    searches and the writes here keep staged; without one, vec0 answers (the same ranking)."""

    def __init__(self, con: Any, cache: VectorCache | None = None):
        super().__init__(con)
        self.cache = cache

    # -- for the Add/Update/Merge/Supersede decision ------------------------------------------------
    def current_like(self, subject: str, ftype: str, limit: int = 20) -> list[FactRow]:
        """Current facts with this subject (any case) and type, newest first."""
        return [FactRow(*r) for r in self.con.execute(
            f"SELECT {_ROW} FROM core_facts WHERE valid_to IS NULL AND lower(subject)=lower(?) AND type=? "
            "ORDER BY id DESC LIMIT ?", (subject, ftype, limit))]

    def current_stated(self, subject: str, ftype: str, stmt: str) -> list[FactRow]:
        """Current facts with this subject (any case) and type whose statement is ``stmt`` but for
        ASCII case and closing punctuation, oldest first: where an exact duplicate is looked for
        before the nearest facts (a case variant may embed farther away than other statements)."""
        return [FactRow(*r) for r in self.con.execute(
            f"SELECT {_ROW} FROM core_facts WHERE valid_to IS NULL AND lower(subject)=lower(?) AND type=? "
            "AND lower(rtrim(stmt, '.!? ')) = lower(rtrim(?, '.!? ')) ORDER BY id", (subject, ftype, stmt))]

    def current_in_slot(self, subject: str, ftype: str, slot: str) -> list[FactRow]:
        """Current facts with this subject (any case), type and slot, newest first (all of them:
        a slot holds a few values, whatever else the subject holds)."""
        return [FactRow(*r) for r in self.con.execute(
            f"SELECT {_ROW} FROM core_facts WHERE valid_to IS NULL AND lower(subject)=lower(?) AND type=? AND slot=? "
            "ORDER BY id DESC", (subject, ftype, slot))]

    def current_of(self, subject: str, limit: int = 1000) -> list[FactRow]:
        """Current facts with this subject (any case), any type, newest first."""
        return [FactRow(*r) for r in self.con.execute(
            f"SELECT {_ROW} FROM core_facts WHERE valid_to IS NULL AND lower(subject)=lower(?) "
            "ORDER BY id DESC LIMIT ?", (subject, limit))]

    def current(self, fid: int) -> FactRow | None:
        r = self.con.execute(f"SELECT {_ROW} FROM core_facts WHERE id=? AND valid_to IS NULL", (fid,)).fetchone()
        return None if r is None else FactRow(*r)

    def nearest(self, vec: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(fact id, cosine distance) of the ``k`` nearest CoreFacts, current or not (fewer when
        there are fewer), ties by id: from the in-process cache when it can answer, else vec0."""
        hits = None if self.cache is None or k <= 0 else cached_search(self.con, self.cache, vec, min(int(k), 4096))
        return hits if hits is not None else self.knn("fact_vec", vec, k)

    def stmt(self, fid: int) -> str:
        return str(self.con.execute("SELECT stmt FROM core_facts WHERE id=?", (fid,)).fetchone()[0])

    # -- writes ------------------------------------------------------------------------------------
    def insert(self, *, subject: str, ftype: str, stmt: str, slot: str | None, valid_from: str, now: str,
               origin: str, vector: np.ndarray, message_ids: Sequence[int]) -> int:
        fid = next_id(self.con, "core_facts")  # never a forgotten fact's id (sql/0010)
        self.con.execute(
            "INSERT INTO core_facts(id, subject, type, stmt, slot, valid_from, created_at, updated_at, origin) "
            "VALUES(?,?,?,?,?,?,?,?,?)", (fid, subject, ftype, stmt, slot, valid_from, now, now, origin))
        code = quantize(vector)
        self.con.execute("INSERT INTO fact_vec(rowid, embedding) VALUES(?, vec_int8(?))", (fid, code.tobytes()))
        self._staged(fid, code)
        self.add_sources(fid, message_ids)
        return fid

    def rewrite(self, fid: int, stmt: str, vector: np.ndarray, now: str) -> None:
        self.con.execute("UPDATE core_facts SET stmt=?, updated_at=? WHERE id=?", (stmt, now, fid))
        code = quantize(vector)
        self.set_vector("fact_vec", fid, code.tobytes())
        self._staged(fid, code)

    def set_fact_vector(self, fid: int, code: bytes) -> None:
        """Put back a stored vector (int8 codes, as ``fact_vec`` holds them): undo."""
        self.set_vector("fact_vec", fid, code)
        self._staged(fid, np.frombuffer(code, dtype=np.int8).copy())

    def _staged(self, fid: int, code: np.ndarray | None) -> None:
        """Tell the cache about a vector written (None: deleted) in the open transaction."""
        if self.cache is not None:
            if code is None:
                self.cache.stage_delete(fid)
            else:
                self.cache.stage_set(fid, code)

    def touch(self, fid: int, now: str) -> None:
        self.con.execute("UPDATE core_facts SET updated_at=? WHERE id=?", (now, fid))

    def supersede(self, fid: int, *, by: int, valid_to: str, now: str) -> None:
        self.con.execute("UPDATE core_facts SET valid_to=?, superseded_by=?, updated_at=? WHERE id=?",
                         (valid_to, by, now, fid))

    def add_sources(self, fid: int, message_ids: Sequence[int]) -> None:
        for mid in message_ids:
            self.con.execute("INSERT OR IGNORE INTO fact_sources(fact_id, message_id) VALUES(?,?)", (fid, mid))

    def log(self, fid: int, op: str, stmt: str, detail: str | None, at: str) -> None:
        self.con.execute("INSERT INTO fact_history(fact_id, at, op, stmt, detail) VALUES(?,?,?,?,?)",
                         (fid, at, op, stmt, detail))

    def delete(self, fid: int) -> None:
        """Delete one CoreFact with its history; a fact it superseded becomes current again (and
        loses the history entry saying it was superseded by this one)."""
        self.con.execute("DELETE FROM fact_history WHERE op='superseded' AND detail=? AND fact_id IN "
                         "(SELECT id FROM core_facts WHERE superseded_by=?)", (f"superseded by fact {fid}", fid))
        self.con.execute("UPDATE core_facts SET valid_to=NULL, superseded_by=NULL WHERE superseded_by=?", (fid,))
        self.con.execute("DELETE FROM fact_sources WHERE fact_id=?", (fid,))
        self.con.execute("DELETE FROM fact_history WHERE fact_id=?", (fid,))
        self.con.execute("DELETE FROM fact_vec WHERE rowid=?", (fid,))
        self._staged(fid, None)
        self.con.execute("DELETE FROM core_facts WHERE id=?", (fid,))
        retire_id(self.con, "core_facts", fid)

    def drop_source(self, mid: int) -> tuple[list[int], list[int]]:
        """Remove a message from every fact's provenance; returns (the facts left with no source,
        the facts that keep other sources)."""
        facts = [f for (f,) in self.con.execute("SELECT fact_id FROM fact_sources WHERE message_id=?", (mid,))]
        self.con.execute("DELETE FROM fact_sources WHERE message_id=?", (mid,))
        orphans: list[int] = []
        kept: list[int] = []
        for f in facts:
            left = self.con.execute("SELECT count(*) FROM fact_sources WHERE fact_id=?", (f,)).fetchone()[0]
            (kept if left else orphans).append(f)
        return orphans, kept

    def drop_unsupported_events(self, fid: int) -> str | None:
        """Delete the merge/update events of a fact that came only from messages no longer among
        its sources. Returns the statement the remaining history ends with when it differs from
        the fact's current one (an update to undo), else None."""
        remaining = set(self.sources(fid))  # (not "messages that exist": a forgotten id can be reused)
        for hid, detail in self.con.execute(
                "SELECT id, detail FROM fact_history WHERE fact_id=? AND op IN ('merge','update')", (fid,)).fetchall():
            ids = _event_sources(detail)
            if ids is not None and not remaining.intersection(ids):
                self.con.execute("DELETE FROM fact_history WHERE id=?", (hid,))
        wording = None  # replay: the wording each remaining event leaves
        for hid, op, stmt in self.con.execute(
                "SELECT id, op, stmt FROM fact_history WHERE fact_id=? ORDER BY id", (fid,)).fetchall():
            if op in ("add", "supersede", "update"):
                wording = stmt
            elif wording is not None and stmt != wording:
                self.con.execute("UPDATE fact_history SET stmt=? WHERE id=?", (wording, hid))
        return None if wording is None or wording == self.stmt(fid) else str(wording)

    def reword(self, fid: int, stmt: str, slot: str | None, vector: np.ndarray, now: str,
               events: Collection[int]) -> None:
        """A fact worded again (``forget``: its wording held words only a forgotten message had):
        its statement, slot and vector, and the statement of each of its ``fact_history`` rows in
        ``events`` (ids, :meth:`events`) become ``stmt``."""
        self.rewrite(fid, stmt, vector, now)
        self.con.execute("UPDATE core_facts SET slot=? WHERE id=?", (slot, fid))
        for hid in sorted(set(events)):
            self.con.execute("UPDATE fact_history SET stmt=? WHERE id=? AND fact_id=?", (stmt, hid, fid))

    def slot(self, fid: int) -> str | None:
        """The slot a fact fills (:class:`~memsif_lite.db.rows.FactRow`), None: none, or no such fact."""
        r = self.con.execute("SELECT slot FROM core_facts WHERE id=?", (fid,)).fetchone()
        return None if r is None or r[0] is None else str(r[0])

    def events(self, fid: int) -> list[tuple[int, str]]:
        """(history row id, statement) of a fact's ``fact_history``, oldest first."""
        return [(int(h), str(t)) for h, t in self.con.execute(
            "SELECT id, stmt FROM fact_history WHERE fact_id=? ORDER BY id", (fid,))]

    def realign_valid_from(self, fid: int, now: str, stated: Collection[str] = ()) -> None:
        """After a source went: a fact holds from its earliest remaining source when the time it
        had is none of theirs, nor on a day they name (``stated``: the times "last week" and the
        like resolve to, the caller resolves them) (the facts it superseded end then too)."""
        row = self.con.execute("SELECT valid_from FROM core_facts WHERE id=?", (fid,)).fetchone()
        times = {t for (t,) in self.con.execute(
            "SELECT m.at FROM fact_sources s JOIN messages m ON m.id=s.message_id WHERE s.fact_id=?", (fid,))}
        if row is None or not times or row[0] in times or row[0][:10] in {t[:10] for t in stated}:
            return
        new = min(times)
        self.con.execute("UPDATE core_facts SET valid_from=?, updated_at=? WHERE id=?", (new, now, fid))
        self.con.execute("UPDATE core_facts SET valid_to=? WHERE superseded_by=? AND valid_to=?", (new, fid, row[0]))

    # -- reads for the API -------------------------------------------------------------------------
    def exists(self, fid: int) -> bool:
        return self.con.execute("SELECT 1 FROM core_facts WHERE id=?", (fid,)).fetchone() is not None

    def citing(self, message_ids: Sequence[int]) -> list[int]:
        """The facts any of these messages is a source of, by id."""
        return sorted({int(f) for (f,) in self.rows_in(
            "SELECT fact_id FROM fact_sources WHERE message_id IN ({marks})", list(message_ids))})

    def sources(self, fid: int) -> tuple[int, ...]:
        return tuple(m for (m,) in self.con.execute(
            "SELECT message_id FROM fact_sources WHERE fact_id=? ORDER BY message_id", (fid,)))

    def select(self, *, subject: str | None, ftype: str | None, include_superseded: bool,
               valid_at: str | None = None) -> list[CoreFact]:
        """``valid_at``: only the facts valid at that (stored) time, superseded since or not, as they
        stood then: one superseded later was current, so it shows no end and no successor."""
        then = "NULL, NULL" if valid_at is not None else "valid_to, superseded_by"
        sql = f"SELECT id, subject, type, stmt, valid_from, {then}, origin FROM core_facts WHERE 1=1"
        args: list[Any] = []
        if valid_at is not None:
            sql += " AND valid_from <= ? AND (valid_to IS NULL OR valid_to > ?)"
            args += [valid_at, valid_at]
        if subject is not None:
            sql += " AND lower(subject)=lower(?)"
            args.append(subject)
        if ftype is not None:
            sql += " AND lower(type)=lower(?)"
            args.append(ftype)
        if not include_superseded:
            sql += " AND valid_to IS NULL"
        rows = self.con.execute(sql + " ORDER BY valid_from, id", args).fetchall()
        sources = self._sources([r[0] for r in rows])
        return [CoreFact(r[0], r[1], r[2], r[3], from_stored(r[4]), from_stored(r[5]) if r[5] else None, r[6],
                         tuple(sources.get(r[0], ())), r[7]) for r in rows]

    def _sources(self, ids: Sequence[int]) -> dict[int, list[int]]:
        """fact id -> its source messages in order, for the given facts (one query per 500)."""
        sources: dict[int, list[int]] = {}
        for fid, mid in self.rows_in("SELECT fact_id, message_id FROM fact_sources WHERE fact_id IN ({marks}) "
                                     "ORDER BY fact_id, message_id", ids):
            sources.setdefault(fid, []).append(mid)
        return sources

    def get(self, fid: int) -> CoreFact | None:
        return self.many([fid]).get(fid)

    def many(self, ids: Sequence[int]) -> dict[int, CoreFact]:
        """The facts with these ids that exist (two queries per 500 ids)."""
        ids = list(dict.fromkeys(ids))
        sources = self._sources(ids)
        return {r[0]: CoreFact(r[0], r[1], r[2], r[3], from_stored(r[4]), from_stored(r[5]) if r[5] else None, r[6],
                               tuple(sources.get(r[0], ())), r[7])
                for r in self.rows_in("SELECT id, subject, type, stmt, valid_from, valid_to, superseded_by, origin "
                                      "FROM core_facts WHERE id IN ({marks})", ids)}

    def history(self, fid: int) -> list[FactEvent]:
        return [FactEvent(from_stored(r[0]), r[1], r[2], r[3]) for r in self.con.execute(
            "SELECT at, op, stmt, detail FROM fact_history WHERE fact_id=? ORDER BY id", (fid,))]
