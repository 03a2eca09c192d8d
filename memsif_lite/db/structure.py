"""segments, trajectories, message_units and their vec0 tables (Structured Interaction Memory)."""

from __future__ import annotations

import json
from collections import Counter
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import StorageCorruptError
from ..int8 import quantize
from ..timeutil import is_stored
from .base import Table
from .rows import Members, MessageRow, Unit, entity_json, from_sum, sum_bytes
from .messages import cache_ready, cached_search
from .vector_cache import Allowed, VectorCache

__all__ = ["Structure", "UNIT_TABLES", "NO_SUM", "STOW_SUMS", "SEGMENT_SUM", "NO_COUNTS", "DROP_COUNTS",
           "COUNT_TRAJECTORY_ENTITIES", "trajectory_counts", "counts_kept", "malformed_units",
           "trajectory_count_problems"]

#: ``segments.vec_sum`` since schema 16: empty. A segment's running sum is most of its row's bytes
#: and is needed only until the segment is linked to a trajectory (it is never added to again; its
#: search vector is in segment_vec): the open segment and a closed one waiting for its link keep it
#: in ``segment_sums`` (a few rows, whose pages are reused), so a segments row is written at the
#: size it keeps. A linked segment read back (:meth:`Structure.load`) sums its members' vectors.
NO_SUM = b""
#: the SQL that moves running sums into ``segment_sums`` (the migration to schema 16, an import)
STOW_SUMS = ("INSERT OR REPLACE INTO segment_sums(segment_id, vec_sum) SELECT id, vec_sum FROM segments "
             "WHERE trajectory_id IS NULL AND length(vec_sum) > 0",
             "UPDATE segments SET vec_sum = x'' WHERE length(vec_sum) > 0")
#: a segment's running sum as stored: x'' for a linked one (recomputed), NULL when an open one lost its row
SEGMENT_SUM = ("CASE WHEN trajectory_id IS NULL THEN (SELECT s.vec_sum FROM segment_sums s "
                "WHERE s.segment_id=segments.id) ELSE x'' END")

#: ``segments.entities`` of a segment linked to a trajectory since schema 18: empty. Its entity counts
#: are those of its members' placements (``message_units.entities``), the same ones
#: :func:`~memsif_lite.forgetting.recompute_unit` and a ``known_at`` rewind count; a linked segment
#: read back (:meth:`Structure.load`, :meth:`Structure.segment_rows`) counts them again.
NO_COUNTS = ""
#: the SQL that drops the stored counts of linked segments (the migration to schema 18, an import)
DROP_COUNTS = "UPDATE segments SET entities = '' WHERE trajectory_id IS NOT NULL AND entities != ''"
#: a segment's entity counts as JSON: stored, or for a linked one counted from its members'
#: placements (a member whose entities are not a JSON list of names adds none)
_SEGMENT_COUNTS = ("CASE WHEN entities != '' OR trajectory_id IS NULL THEN entities ELSE "
                   "(SELECT json_group_object(e, n) FROM (SELECT j.value AS e, count(*) AS n FROM message_units u, "
                   "json_each(CASE WHEN json_valid(u.entities) AND json_type(u.entities)='array' THEN u.entities "
                   "ELSE '[]' END) j WHERE u.segment_id=segments.id AND j.type='text' GROUP BY j.value)) END")

#: a trajectory's entity counts as a JSON object (sorted, as :func:`~.rows.entity_json` writes them)
_TRAJECTORY_COUNTS = ("(SELECT coalesce(json_group_object(e.entity, e.n), '{}') FROM trajectory_entities e "
                      "WHERE e.trajectory_id = trajectories.id)")


def counts_kept(con: Any) -> bool:
    """Whether the file keeps trajectories' entity counts in ``trajectory_entities`` (schema 22;
    a file of an older schema read as it is keeps them in the row: a JSON object)."""
    return con.execute("SELECT 1 FROM sqlite_schema WHERE type='table' AND name='trajectory_entities'"
                       ).fetchone() is not None


def trajectory_counts(con: Any) -> str:
    """The SQL of a ``trajectories`` row's entity counts as a JSON object, whatever the schema."""
    return _TRAJECTORY_COUNTS if counts_kept(con) else "entities"


#: (trajectory, entity, count) as its members' placements add up: what the stored rows must be
_MEMBER_COUNTS = ("SELECT s.trajectory_id, j.value, count(*) FROM segments s "
                  "JOIN message_units u ON u.segment_id = s.id, "
                  "json_each(CASE WHEN json_valid(u.entities) AND json_type(u.entities) = 'array' "
                  "THEN u.entities ELSE '[]' END) j "
                  "WHERE s.trajectory_id IS NOT NULL AND j.type = 'text' GROUP BY 1, 2")
#: a trajectory's entity counts since schema 22 are rows of ``trajectory_entities`` (one an entity;
#: ``trajectories.entities`` keeps :data:`NO_COUNTS`), counted from its members: what the migration to
#: schema 22 runs (sql/0022) and an import (an export holds them as a JSON object, as before)
COUNT_TRAJECTORY_ENTITIES = ("DELETE FROM trajectory_entities", "DELETE FROM trajectory_entity_totals",
                             f"INSERT INTO trajectory_entities(trajectory_id, entity, n) {_MEMBER_COUNTS}",
                             "INSERT INTO trajectory_entity_totals(trajectory_id, n) SELECT trajectory_id, count(*) "
                             "FROM trajectory_entities GROUP BY trajectory_id",
                             "UPDATE trajectories SET entities = '' WHERE entities != ''")

#: the two composite levels: table, vec0 table
UNIT_TABLES = {"segment": ("segments", "segment_vec"), "trajectory": ("trajectories", "trajectory_vec")}
_MEMBERS = {
    "segment": "u.segment_id=?",
    "trajectory": "u.segment_id IN (SELECT id FROM segments WHERE trajectory_id=?)",
}


def _unit_problem(n: Any, blob: Any, entities: Any, start: Any, end: Any, dim: int, *,
                  linked: bool = False, trajectory: bool = False) -> str | None:
    """Why a stored segment or trajectory row cannot be read, or None. A segment ``linked`` to a
    trajectory keeps no running sum (schema 16: :data:`NO_SUM`); a ``trajectory`` keeps its entity
    counts in ``trajectory_entities`` (schema 22: ``entities`` is :data:`NO_COUNTS`)."""
    if linked:
        pass
    elif not isinstance(blob, bytes) or len(blob) != 4 * dim:
        return f"its running sum holds {len(blob) if isinstance(blob, bytes) else 0} bytes, not {4 * dim}"
    if not isinstance(n, int) or n < 0:
        return "its message count is not a count"
    if trajectory:
        if entities != NO_COUNTS:
            return "its entities are not kept in trajectory_entities"
    elif linked and entities == NO_COUNTS:
        pass
    elif not isinstance(entities, str) or _stored_counts(entities) is None:
        return "its entities are not a JSON object of counts"
    if not (is_stored(start) and is_stored(end)):
        return "its span is not made of memsif timestamps"
    return None


@lru_cache(maxsize=256)
def _stored_counts(text: str) -> dict[str, int] | None:
    """A unit's stored entity counts (a JSON object of integers), None if they are not. Kept for
    the units read again and again (placement and trajectory linking reload the same ones): read
    only, a caller copies it."""
    try:
        counts = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(counts, dict) or not set(map(type, counts.values())) <= {int}:
        return None
    return counts


def _entity_list(mid: int, text: Any) -> list[str]:
    """A message's stored entities (a JSON list of strings), or a clear error for a damaged file."""
    try:
        ents = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        ents = None
    if not isinstance(ents, list) or not all(isinstance(e, str) for e in ents):
        raise StorageCorruptError(f"the entities of message {mid} are not a JSON list; the memory file is damaged "
                                  "or was edited (run `memsif check`)")
    return ents


def entity_counts(what: str, text: Any) -> dict[str, int]:
    """A segment's or trajectory's stored entity counts (a JSON object), or a clear error for a
    damaged file (``what``: e.g. "segment 3")."""
    try:
        counts = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        counts = None
    if not isinstance(counts, dict):
        raise StorageCorruptError(f"the entities of {what} are not a JSON object; the memory file is damaged "
                                  "or was edited (run `memsif check`)")
    return counts


def malformed_units(con: Any, dim: int) -> list[str]:
    """``memsif check``: segments and trajectories that :meth:`Structure.load` would refuse."""
    out = []
    kept = counts_kept(con)
    for level, (table, _) in UNIT_TABLES.items():
        linked, blob = ("trajectory_id IS NOT NULL", SEGMENT_SUM) if table == "segments" else ("0", "vec_sum")
        for r in con.execute(f"SELECT id, n_messages, {blob}, entities, start_at, end_at, {linked} FROM {table} "
                             "ORDER BY id"):
            why = _unit_problem(r[1], r[2], r[3], r[4], r[5], dim, linked=bool(r[6]),
                                trajectory=kept and level == "trajectory")
            if why is not None:
                out.append(f"{level} {r[0]}: {why}")
    return out[:20]


def trajectory_count_problems(con: Any) -> list[str]:
    """``memsif check``: trajectories whose stored entity counts (``trajectory_entities``) are not
    their members' placements' added up (one pass over ``message_units``: seconds at a million)."""
    if not counts_kept(con):
        return []  # a file of an older schema read as it is: the counts are in the row (checked above)
    differ = con.execute(
        f"WITH m(t, e, n) AS ({_MEMBER_COUNTS}), "
        "s(t, e, n) AS (SELECT trajectory_id, entity, n FROM trajectory_entities) "
        "SELECT t FROM (SELECT * FROM m EXCEPT SELECT * FROM s) UNION "
        "SELECT t FROM (SELECT * FROM s EXCEPT SELECT * FROM m) ORDER BY 1").fetchall()
    out = []
    if differ:
        ids = ", ".join(str(t) for (t,) in differ[:5])
        out.append(f"{len(differ)} trajectories have entity counts that are not their members' (first: {ids})")
    totals = con.execute(
        "WITH c(t, n) AS (SELECT trajectory_id, count(*) FROM trajectory_entities GROUP BY 1), "
        "s(t, n) AS (SELECT trajectory_id, n FROM trajectory_entity_totals) "
        "SELECT t FROM (SELECT * FROM c EXCEPT SELECT * FROM s) UNION "
        "SELECT t FROM (SELECT * FROM s EXCEPT SELECT * FROM c) ORDER BY 1").fetchall()
    if totals:
        ids = ", ".join(str(t) for (t,) in totals[:5])
        out.append(f"{len(totals)} trajectories have a count of distinct entities that is not their rows' "
                   f"(first: {ids})")
    return out


class Structure(Table):
    def __init__(self, con, caches: dict[str, VectorCache]):
        super().__init__(con)
        self.caches = caches  # level -> in-process copy of its vec0 table
        self._kept = False  # trajectory_entities seen (a schema never goes back: asked until it is)

    def _counts_kept(self) -> bool:
        self._kept = self._kept or counts_kept(self.con)
        return self._kept

    def _put_vector(self, level: str, uid: int, vec: np.ndarray, *, new: bool) -> None:
        code = quantize(vec)
        vt = UNIT_TABLES[level][1]
        if new:
            self.con.execute(f"INSERT INTO {vt}(rowid, embedding) VALUES(?, vec_int8(?))", (uid, code.tobytes()))
        else:
            self.set_vector(vt, uid, code.tobytes())
        self.caches[level].stage_set(uid, code)

    # -- units ---------------------------------------------------------------------------------
    def load(self, level: str, uid: int, *, counts: bool = True) -> Unit:
        """A segment or trajectory as stored. ``counts=False``: a trajectory's entity counts are left
        out (an empty Counter; a trajectory of a long life holds tens of thousands): φ asks
        :meth:`entity_overlaps`, a link adds to them with :meth:`add_entities`, and :meth:`save`
        does not write them."""
        table = UNIT_TABLES[level][0]
        linked, blob = ("trajectory_id IS NOT NULL", SEGMENT_SUM) if level == "segment" else ("0", "vec_sum")
        row = self.con.execute(f"SELECT id, n_messages, {blob}, entities, start_at, end_at, {linked} FROM {table} "
                               "WHERE id=?", (uid,)).fetchone()
        dim = self.caches[level].dim
        kept = level == "trajectory" and self._counts_kept()
        why = _unit_problem(row[1], row[2], row[3], row[4], row[5], dim, linked=bool(row[6]), trajectory=kept)
        if why is not None:  # a crafted or damaged file: a clear error, never numpy's ValueError
            raise StorageCorruptError(f"{level} {uid} cannot be read: {why}; the memory file is damaged or was "
                                      "edited (run `memsif check`)")
        if row[6]:  # a linked segment: its sum (and its entity counts, unless stored) from its members
            members = self.member_vectors(level, uid)
            total = members.vec_sum
            counted = members.entity_counts() if row[3] == NO_COUNTS else Counter(_stored_counts(row[3]))
        elif kept:
            total = from_sum(row[2])
            counted = Counter(dict(self.con.execute("SELECT entity, n FROM trajectory_entities WHERE trajectory_id=?",
                                                    (uid,)).fetchall())) if counts else Counter()
        else:
            total = from_sum(row[2])
            counted = Counter(_stored_counts(row[3]))
        return Unit(row[0], row[1], total, counted, row[4], row[5])

    def save(self, level: str, u: Unit, *, n_segments: int | None = None) -> None:
        """Write a unit's running state and its search vector (a trajectory's entity counts are
        not written: :meth:`add_entities`, :meth:`set_entities`)."""
        table, vt = UNIT_TABLES[level]
        extra = ", n_segments=?" if n_segments is not None else ""
        total = sum_bytes(u.vec_sum)
        args: list = [u.n, u.start_at, u.end_at]
        if level == "segment":  # a linked segment keeps no entity counts (:data:`NO_COUNTS`)
            ents = "entities=CASE WHEN trajectory_id IS NULL THEN ? ELSE '' END, "
            args = [entity_json(u.entities), *args]
        else:
            ents = ""
        if n_segments is not None:
            args.append(n_segments)
        kept = "" if level == "segment" else ", vec_sum=?"  # a segment's: in segment_sums (a linked one has none)
        self.con.execute(f"UPDATE {table} SET {ents}n_messages=?, start_at=?, end_at=?{extra}{kept} WHERE id=?",
                         (*args, *([] if level == "segment" else [total]), u.id))
        if level == "segment":
            self.con.execute("UPDATE segment_sums SET vec_sum=? WHERE segment_id=?", (total, u.id))
        self._put_vector(level, u.id, u.mean, new=False)

    def delete_unit(self, level: str, uid: int) -> None:
        table, vt = UNIT_TABLES[level]
        self.con.execute(f"DELETE FROM {vt} WHERE rowid=?", (uid,))
        if level == "trajectory":
            self.con.execute("DELETE FROM trajectory_entities WHERE trajectory_id=?", (uid,))
            self.con.execute("DELETE FROM trajectory_entity_totals WHERE trajectory_id=?", (uid,))
        self.con.execute(f"DELETE FROM {table} WHERE id=?", (uid,))
        if level == "segment":
            self.con.execute("DELETE FROM segment_sums WHERE segment_id=?", (uid,))
        self.caches[level].stage_delete(uid)

    def dense(self, level: str, qvec: np.ndarray, depth: int) -> list[int]:
        """Nearest segments or trajectories: from the in-process cache (checked against the file
        first), else vec0 — same ranking."""
        hits = self.cached_dense(level, qvec, depth)
        return hits if hits is not None else [u for u, _ in self.knn(UNIT_TABLES[level][1], qvec, depth)]

    def cached_dense(self, level: str, qvec: np.ndarray, depth: int,
                     allowed: Allowed | None = None) -> list[int] | None:
        """:meth:`dense` from the in-process cache (among the units ``allowed`` admits, when given);
        None when it cannot answer."""
        hits = cached_search(self.con, self.caches[level], qvec, depth, allowed)
        return None if hits is None else [u for u, _ in hits]

    def prepared_dense(self, level: str, qvec: np.ndarray, depth: int) -> Callable[[], list[int]] | None:
        """:meth:`dense` in two steps: the cache is brought up to the caller's read snapshot now
        (SQL), and the returned function ranks it later without SQL (so it may run while another
        thread uses the connection: ``Messages.nearest_beside``); the same ranking, provided
        nothing is written in between. None outside a read snapshot (the two steps would see
        different states of the file) or when the cache cannot answer: ask :meth:`dense`."""
        cache = self.caches[level]
        if self.con.get_autocommit() or not cache_ready(self.con, cache):
            return None
        return lambda: [u for u, _ in cache.search(qvec, depth)]

    # -- segments ------------------------------------------------------------------------------
    def open_segment(self) -> Unit | None:
        row = self.con.execute("SELECT id FROM segments WHERE closed=0 ORDER BY id DESC LIMIT 1").fetchone()
        return self.load("segment", row[0]) if row else None

    def create_segment(self, vec: np.ndarray, ents: Iterable[str], at: str) -> int:
        u = Unit(0, 1, vec.astype(np.float64), Counter(ents), at, at)
        self.con.execute(
            "INSERT INTO segments(n_messages, vec_sum, entities, start_at, end_at, closed) VALUES(1,?,?,?,?,0)",
            (NO_SUM, entity_json(u.entities), at, at))
        sid = self.con.last_insert_rowid()
        self.con.execute("INSERT OR REPLACE INTO segment_sums(segment_id, vec_sum) VALUES(?,?)",
                         (sid, sum_bytes(u.vec_sum)))
        self._put_vector("segment", sid, u.mean, new=True)
        return sid

    def segment_state(self, sid: int) -> tuple[int, int | None, int] | None:
        """(closed, trajectory_id, n_messages) of a segment, or None if it is gone."""
        row = self.con.execute("SELECT closed, trajectory_id, n_messages FROM segments WHERE id=?", (sid,)).fetchone()
        return None if row is None else (int(row[0]), row[1], int(row[2]))

    def close_segment(self, sid: int) -> None:
        self.con.execute("UPDATE segments SET closed=1 WHERE id=?", (sid,))

    def set_segment_title(self, sid: int, title: str) -> None:
        self.con.execute("UPDATE segments SET title=? WHERE id=?", (title, sid))

    def drop_title(self, sid: int) -> None:
        """``forget``: a segment's title was written from its messages, the forgotten one among them:
        it goes, and so does its trajectory's title when it was this one's (the trajectory takes
        the title of another of its segments that has one, else none)."""
        row = self.con.execute("SELECT trajectory_id, title FROM segments WHERE id=?", (sid,)).fetchone()
        if row is None or row[1] is None:
            return
        self.con.execute("UPDATE segments SET title=NULL WHERE id=?", (sid,))
        if row[0] is not None:
            self.con.execute(
                "UPDATE trajectories SET title=(SELECT title FROM segments WHERE trajectory_id=? AND title IS NOT NULL "
                "ORDER BY id LIMIT 1) WHERE id=? AND title=?", (row[0], row[0], row[1]))

    def place_message(self, mid: int, sid: int, ents: list[str], phi: float | None, decision: str) -> None:
        self.con.execute(
            "INSERT INTO message_units(message_id, segment_id, entities, phi, decision) VALUES(?,?,?,?,?)",
            (mid, sid, json.dumps(ents, ensure_ascii=False, separators=(",", ":")), phi, decision))

    def segment_of_message(self, mid: int) -> int | None:
        row = self.con.execute("SELECT segment_id FROM message_units WHERE message_id=?", (mid,)).fetchone()
        return None if row is None else int(row[0])

    def segments_of_messages(self, mids: Sequence[int]) -> dict[int, int]:
        """message id -> its segment, for those of ``mids`` placed in one (one query)."""
        return dict(self.rows_in("SELECT message_id, segment_id FROM message_units WHERE message_id IN ({marks})",
                                 list(mids)))

    def unplace_message(self, mid: int) -> None:
        self.con.execute("DELETE FROM message_units WHERE message_id=?", (mid,))

    def last_lines(self, sid: int, limit: int) -> list[tuple[str, str]]:
        """(speaker, text) of a segment's last ``limit`` messages, oldest first."""
        rows = self.con.execute(
            "SELECT m.speaker, m.text FROM message_units u JOIN messages m ON m.id=u.message_id "
            "WHERE u.segment_id=? ORDER BY u.message_id DESC LIMIT ?", (sid, limit)).fetchall()
        return [(s, t) for s, t in reversed(rows)]

    def trajectory_of_segment(self, sid: int) -> int | None:
        row = self.con.execute("SELECT trajectory_id FROM segments WHERE id=?", (sid,)).fetchone()
        return None if row is None else row[0]

    # -- trajectories --------------------------------------------------------------------------
    def create_trajectory(self, seg: Unit) -> int:
        self.con.execute(
            "INSERT INTO trajectories(n_segments, n_messages, vec_sum, entities, start_at, end_at) VALUES(1,?,?,?,?,?)",
            (seg.n, sum_bytes(seg.vec_sum), NO_COUNTS, seg.start_at, seg.end_at))
        tid = self.con.last_insert_rowid()
        self.add_entities(tid, seg.entities)
        self._put_vector("trajectory", tid, seg.mean, new=True)
        return tid

    def add_entities(self, tid: int, counts: Mapping[str, int]) -> None:
        """Add a linked segment's entity counts to its trajectory's (a row an entity: schema 22), and
        the entities it had not held to its count of distinct ones."""
        rows = [(tid, e, n) for e, n in sorted(counts.items()) if n]
        if not rows:
            return
        new = len(rows) - self.entity_overlaps([tid], [e for _, e, _ in rows])[tid][0]
        self.con.executemany(
            "INSERT INTO trajectory_entities(trajectory_id, entity, n) VALUES(?,?,?) "
            "ON CONFLICT(trajectory_id, entity) DO UPDATE SET n = n + excluded.n", rows)
        if new:
            self.con.execute("INSERT INTO trajectory_entity_totals(trajectory_id, n) VALUES(?,?) "
                             "ON CONFLICT(trajectory_id) DO UPDATE SET n = n + excluded.n", (tid, new))

    def set_entities(self, tid: int, counts: Mapping[str, int]) -> None:
        """A trajectory's entity counts recounted (a forget, a merge's reset): replaced whole."""
        self.con.execute("DELETE FROM trajectory_entities WHERE trajectory_id=?", (tid,))
        self.con.execute("DELETE FROM trajectory_entity_totals WHERE trajectory_id=?", (tid,))
        self.add_entities(tid, counts)

    def entity_overlaps(self, tids: Sequence[int], entities: Iterable[str]) -> dict[int, tuple[int, int]]:
        """Per trajectory of ``tids``, (how many of ``entities`` it holds, how many it holds in all):
        φ's entity Jaccard for each candidate, by primary key (a lookup a trajectory and entity, and
        each one's count of distinct entities kept beside), two queries for them all."""
        ids, asked = sorted(set(tids)), sorted(set(entities))
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        totals = dict(self.con.execute(
            f"SELECT trajectory_id, n FROM trajectory_entity_totals WHERE trajectory_id IN ({marks})", ids))
        common: dict[int, int] = {}
        for start in range(0, len(asked), 500):  # (SQLite's variable limit)
            chunk = asked[start:start + 500]
            for tid, n in self.con.execute(
                    f"SELECT trajectory_id, count(*) FROM trajectory_entities WHERE trajectory_id IN ({marks}) "
                    f"AND entity IN ({','.join('?' * len(chunk))}) GROUP BY trajectory_id", (*ids, *chunk)):
                common[tid] = common.get(tid, 0) + int(n)
        out = {}
        for tid in ids:
            held, total = common.get(tid, 0), int(totals.get(tid, 0))
            if total < held:  # a damaged or edited file: a clear error, never a division by zero in φ
                raise StorageCorruptError(f"trajectory {tid} holds {held} of these entities but counts {total} in "
                                          "all; the memory file is damaged or was edited (run `memsif check`)")
            out[tid] = (held, total)
        return out

    def count_where_trajectory(self, tid: int) -> int:
        """A trajectory's message count (-1 if it no longer exists): its version for staleness checks."""
        row = self.con.execute("SELECT n_messages FROM trajectories WHERE id=?", (tid,)).fetchone()
        return -1 if row is None else int(row[0])

    def segment_count(self, tid: int) -> int:
        return int(self.con.execute("SELECT count(*) FROM segments WHERE trajectory_id=?", (tid,)).fetchone()[0])

    def link(self, sid: int, tid: int) -> None:
        """Put a closed segment into a trajectory (it keeps no running sum and no entity counts from now
        on: :data:`NO_SUM`, :data:`NO_COUNTS`); the trajectory takes the segment's title if it has none."""
        self.con.execute("UPDATE segments SET trajectory_id=?, entities='' WHERE id=?", (tid, sid))
        self.con.execute("DELETE FROM segment_sums WHERE segment_id=?", (sid,))
        self.con.execute("UPDATE trajectories SET title=coalesce(title, (SELECT title FROM segments WHERE id=?)) "
                         "WHERE id=?", (sid, tid))

    def latest_segments(self, tid: int, limit: int) -> list[int]:
        """A trajectory's last ``limit`` segments, oldest first."""
        rows = self.con.execute("SELECT id FROM segments WHERE trajectory_id=? ORDER BY id DESC LIMIT ?",
                                (tid, limit)).fetchall()
        return [r[0] for r in reversed(rows)]

    # -- membership ----------------------------------------------------------------------------
    def segment_messages(self, sid: int) -> list[MessageRow]:
        return self.unit_messages("segment", sid)

    def unit_messages(self, level: str, uid: int) -> list[MessageRow]:
        return [MessageRow(*r) for r in self.con.execute(
            "SELECT m.id, m.speaker, m.text, m.at, m.session, m.source_id, m.utc_offset_min FROM message_units u "
            f"JOIN messages m ON m.id=u.message_id WHERE {_MEMBERS[level]} ORDER BY m.id", (uid,))]

    def member_vectors(self, level: str, uid: int) -> Members:
        """A unit's members (message ids, vector codes, entities, times): what its aggregate is made of.
        The codes are read as one matrix (a trajectory of a long life holds hundreds of thousands)."""
        rows = self.con.execute(
            "SELECT u.message_id, v.embedding, u.entities, m.at FROM message_units u "
            "JOIN messages m ON m.id=u.message_id JOIN message_vec v ON v.rowid=u.message_id "
            f"WHERE {_MEMBERS[level]} ORDER BY u.message_id", (uid,)).fetchall()
        dim = self.caches[level].dim
        bad = next((r[0] for r in rows if not isinstance(r[1], bytes) or len(r[1]) != dim), None)
        if bad is not None:
            raise StorageCorruptError(f"the vector of message {bad} is not {dim} int8 values; the memory file is "
                                      "damaged or was edited (run `memsif check`)")
        codes = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.int8).reshape(len(rows), dim)
        parsed: dict[Any, list[str]] = {}  # members repeat a few lists (none, a speaker's name): parsed once a call
        ents = [parsed[r[2]] if r[2] in parsed else parsed.setdefault(r[2], _entity_list(r[0], r[2])) for r in rows]
        return Members([r[0] for r in rows], codes, ents, [r[3] for r in rows])

    def shown_with(self, mid: int, limit: int) -> list[int]:
        """The messages whose CoreFact extraction may have shown message ``mid`` to an LLM: those of
        its segment (read whole), and those of the later segments of its trajectory that had it
        among the last ``limit`` messages before them (:meth:`trajectory_context`)."""
        sid = self.segment_of_message(mid)
        if sid is None:
            return []
        out = [m.id for m in self.segment_messages(sid)]
        tid = self.trajectory_of_segment(sid)
        if tid is None:
            return out
        for (oid,) in self.con.execute("SELECT id FROM segments WHERE trajectory_id=? AND id>? ORDER BY id",
                                       (tid, sid)).fetchall():
            if mid not in {m.id for m in self.trajectory_context(oid, limit)}:
                break  # and so for every later one: its context is later still
            out += [m.id for m in self.segment_messages(oid)]
        return out

    def trajectory_context(self, sid: int, limit: int) -> list[MessageRow]:
        """The last ``limit`` messages of earlier segments of ``sid``'s trajectory, oldest first.
        Segments are runs of messages placed in id order, so the trajectory's segments are walked
        back from ``sid`` (index ``segments_trajectory``), each one's newest messages read, until
        a segment holds nothing newer than what was found: a few segments, not the trajectory."""
        tid = self.trajectory_of_segment(sid)
        if tid is None or limit <= 0:
            return []
        found: list[tuple] = []
        earlier = self.con.execute("SELECT id FROM segments WHERE trajectory_id=? AND id<? ORDER BY id DESC",
                                   (tid, sid))
        for (oid,) in earlier:
            rows = self.con.execute(
                "SELECT m.id, m.speaker, m.text, m.at, m.session, m.source_id, m.utc_offset_min FROM message_units u "
                "JOIN messages m ON m.id=u.message_id WHERE u.segment_id=? ORDER BY u.message_id DESC LIMIT ?",
                (oid, limit)).fetchall()
            if not rows:
                continue
            if len(found) >= limit and rows[0][0] < found[-1][0]:
                break  # this segment, and (placed before it) every earlier one, holds only older messages
            found = sorted(found + rows, key=lambda r: -r[0])[:limit]
        earlier.close()
        return [MessageRow(*r) for r in reversed(found)]

    def units_of(self, mids: list[int]) -> dict[str, dict[int, int]]:
        """Per level, message id -> its segment (trajectory), for the given messages (one query)."""
        out: dict[str, dict[int, int]] = {"segment": {}, "trajectory": {}}
        for mid, sid, tid in self.rows_in(
                "SELECT u.message_id, u.segment_id, s.trajectory_id FROM message_units u "
                "JOIN segments s ON s.id=u.segment_id WHERE u.message_id IN ({marks})", mids):
            out["segment"][mid] = sid
            if tid is not None:
                out["trajectory"][mid] = tid
        return out

    def units_by_best_member(self, ranked: list[int],
                             known: dict[str, dict[int, int]] | None = None) -> dict[str, list[int]]:
        """Per level, the segments (trajectories) holding any of the ``ranked`` message ids, in
        the order of their best-ranked member (one query; none when ``known``, :meth:`units_of`
        of these ids or more, is given)."""
        rank: dict[int, int] = {}
        for pos, mid in enumerate(ranked):
            rank.setdefault(mid, pos)
        units = self.units_of(list(rank)) if known is None else known
        out: dict[str, list[int]] = {}
        for level, unit_of in units.items():
            best: dict[int, int] = {}  # unit id -> rank of its best member
            for mid, uid in unit_of.items():
                if mid in rank:
                    best[uid] = min(rank[mid], best.get(uid, rank[mid]))
            out[level] = sorted(best, key=best.__getitem__)
        return out

    def last_member(self, segment_id: int) -> int | None:
        """The latest message placed in a segment."""
        return self.con.execute("SELECT max(message_id) FROM message_units WHERE segment_id=?",
                                (segment_id,)).fetchone()[0]

    def members(self, level: str, uids: list[int], cap: int | None = None) -> dict[int, list[int]]:
        """unit id -> its message ids in order, for the given units (one query); with ``cap``,
        only for the units of at most ``cap`` messages (by their count: a trajectory of a long
        life can hold hundreds of thousands), the others left out."""
        key = "u.segment_id" if level == "segment" else "s.trajectory_id"
        if cap is not None:
            table = "segments" if level == "segment" else "trajectories"
            uids = [u for u, n in self.rows_in(f"SELECT id, n_messages FROM {table} WHERE id IN ({{marks}})", uids)
                    if isinstance(n, int) and n <= cap]
        out: dict[int, list[int]] = {u: [] for u in uids}
        for uid, mid in self.rows_in(
                f"SELECT {key}, u.message_id FROM message_units u JOIN segments s ON s.id=u.segment_id "
                f"WHERE {key} IN ({{marks}})", uids):
            out[uid].append(mid)
        for mids in out.values():  # nearly in order already (by segment, then message): cheaper than SQLite's sort
            mids.sort()
        return out

    # -- listings --------------------------------------------------------------------------------
    def memberships(self) -> dict[int, list[int]]:
        """segment id -> its message ids in order."""
        members: dict[int, list[int]] = {}
        for mid, sid in self.con.execute("SELECT message_id, segment_id FROM message_units ORDER BY message_id"):
            members.setdefault(sid, []).append(mid)
        return members

    def segment_rows(self) -> list[tuple[int, int | None, str, str, str, int, str | None]]:
        """(id, trajectory_id, entities JSON, start_at, end_at, closed, title) of every segment (a
        linked one's entity counts counted from its members: :data:`NO_COUNTS`)."""
        return self.con.execute(
            f"SELECT id, trajectory_id, {_SEGMENT_COUNTS}, start_at, end_at, closed, title FROM segments "
            "ORDER BY id").fetchall()

    def trajectory_rows(self) -> list[tuple[int, str, str, str, str | None]]:
        """(id, entities JSON, start_at, end_at, title) of every trajectory."""
        return self.con.execute(f"SELECT id, {trajectory_counts(self.con)}, start_at, end_at, title FROM trajectories "
                                "ORDER BY id").fetchall()
