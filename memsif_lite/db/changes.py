"""change_log, change_facts: the append-only log of changes to derived state (docs/history.md).

A change is recorded by the code that makes it, in the same transaction, through
:meth:`ChangeLog.record`: while its block runs, every CoreFact write goes through
:class:`RecordedFacts`, which notes the facts touched and — for a change that can be taken back —
each fact's row, the sources the change adds (all of the fact's sources as they were, when the
change removes any) and (when rewritten) vector as they were before the change (its *before
image*), and the ``fact_history`` rows it added. The log row is written when the block ends
without an error (an error rolls the whole transaction back, the log row never existed).
Records nest: a CoreFact step that runs inside a merge records its own row. The outermost record
of a transaction also keeps the before images of every derived row the change wrote (its
``images`` column, :mod:`.rewind`), which ``known_at`` reads rewind with.

:meth:`ChangeLog.restore` takes one change back from its images; :mod:`memsif_lite.history` decides
which changes to take back. ``forget`` keeps no images, and :meth:`ChangeLog.redact` erases the
content (summary, images) of every earlier row that holds what it forgets.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Collection, Iterator, Sequence

import numpy as np

from ..errors import StorageCorruptError
from ..store import change_uid
from ..timeutil import from_stored, now_stored
from ..types import Change
from .base import Table
from .facts import CoreFacts
from .messages import SAME_AS_KNOWN, created_at_of
from .rewind import IMAGE_COLUMN, IMAGE_TABLES, Rewind, images, pack, record_time, touched, unpack, watch
from .vector_cache import VectorCache

__all__ = ["ChangeLog", "Journal", "RecordedFacts", "CarriedChange", "UNDOABLE_OPS", "OPS"]

#: the operations :meth:`Memory.undo` can take back
UNDOABLE_OPS = frozenset({"fact.add", "fact.update", "fact.merge", "fact.supersede"})
#: every operation the log knows (a merge copies no other)
OPS = UNDOABLE_OPS | {"place", "link", "active.promote", "active.restate", "active.withdraw", "forget", "merge", "undo",
                      "baseline", "import"}
_FACT_COLS = ("subject", "type", "stmt", "slot", "valid_from", "valid_to", "superseded_by", "created_at",
              "updated_at", "origin")
_KINDS = ("facts", "messages", "segments", "trajectories", "active_facts")
#: a copied change (one that came with a merge) keeps no images: it can be taken back through the
#: change here that wrote the same candidate (:meth:`ChangeLog.realization`)
_LOCAL = ("l.decision=c.decision AND l.origin IS NULL AND l.undo IS NOT NULL AND l.op != 'undo' "
          "AND NOT EXISTS(SELECT 1 FROM change_log u WHERE u.undoes=l.id)")
_CHANGE = ("c.id, c.at, c.actor, c.op, c.purpose, c.summary, c.ids, (c.undo IS NOT NULL OR (c.origin IS NOT NULL "
           f"AND c.decision IS NOT NULL AND EXISTS(SELECT 1 FROM change_log l WHERE {_LOCAL}))), c.undoes, c.origin, "
           "(SELECT min(u.id) FROM change_log u WHERE u.undoes=c.id)")
#: the columns a merge copies from the other file's log (``uid`` computed for a schema 11 file)
_CARRIED = "id, at, actor, op, purpose, summary, ids, decision, undoes, origin"


@dataclass
class Journal:
    """What one change touches while it runs: facts (with their before images when ``undoable``),
    and ids of other kinds the caller adds (:meth:`touch`)."""

    undoable: bool
    history_mark: int
    images: dict[int, dict[str, Any] | None] = field(default_factory=dict)
    ids: dict[str, list[int]] = field(default_factory=dict)
    summary: str | None = None
    #: set by the block when it changed nothing after all: no row is written
    skip: bool = False
    _seen: dict[str, set[int]] = field(default_factory=dict, repr=False)

    def touch(self, kind: str, ids: Sequence[int]) -> None:
        have = self.ids.setdefault(kind, [])
        seen = self._seen.setdefault(kind, set(have))  # (a forget by source may touch thousands)
        for i in ids:
            if i not in seen:
                seen.add(i)
                have.append(i)


@dataclass(frozen=True)
class CarriedChange:
    """A row of another file's log, as a merge reads it (:meth:`ChangeLog.carried`)."""

    id: int
    uid: int
    at: str
    actor: str
    op: str
    purpose: str | None
    summary: str | None
    ids: dict[str, list[int]]
    decision: str | None
    undoes: int | None
    origin: str | None


class ChangeLog(Table):
    def __init__(self, con: Any, fact_cache: VectorCache | None = None):
        super().__init__(con)
        self.fact_cache = fact_cache  # the CoreFact vectors an undo puts back or deletes are staged in it
        self._open: list[Journal] = []
        #: rows a forget inside the open change touched: the change keeps no image of them
        self._forgotten: dict[str, set[tuple[Any, ...]]] = {}

    @contextlib.contextmanager
    def forgetting(self) -> Iterator[list[int]]:
        """The block forgets messages (a merge applying the other file's tombstones; it adds their
        ids to the list it is given): the rows it writes hold what is forgotten, so earlier
        changes' content about them is erased (:meth:`redact`, and their before images), and the
        open change keeps no image of them."""
        session = watch(self.con)
        gone: list[int] = []
        try:
            yield gone
            keys = touched(session)
        finally:
            session.close()
        Rewind(self.con).erase(keys)
        self.redact(facts=[pk[0] for pk in keys.get("core_facts", ())], messages=gone)
        for table, pks in keys.items():
            self._forgotten.setdefault(table, set()).update(pks)

    # -- recording ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def record(self, op: str, actor: str, *, purpose: str | None = None, summary: str | None = None,
               decision: str | None = None, undoes: int | None = None, origin: str | None = None,
               undoable: bool = False, **ids: Sequence[int]) -> Iterator[Journal]:
        """Run the block as one change and log it (inside the caller's write transaction). The
        outermost record of a transaction watches the derived tables (:mod:`.rewind`) and keeps
        their before images; a ``forget`` keeps none, and erases the earlier images that hold what
        it forgot."""
        mark = self.con.execute("SELECT coalesce(max(id), 0) FROM fact_history").fetchone()[0] if undoable else 0
        j = Journal(undoable, int(mark), summary=summary)
        for kind, values in ids.items():
            j.touch(kind, values)
        session = watch(self.con) if not self._open else None
        self._open.append(j)
        try:
            yield j
        except BaseException:
            if session is not None:
                session.close()
                self._forgotten.clear()
            raise
        finally:
            self._open.pop()
        before = None
        if session is not None:
            if op == "forget":
                Rewind(self.con).erase(touched(session))
            elif not j.skip:
                kept = {t: [e for e in entries if tuple(e[0]) not in self._forgotten.get(t, ())]
                        for t, entries in images(self.con, session).items()}
                before = pack({t: e for t, e in kept.items() if e})
            session.close()
            self._forgotten.clear()
        if j.skip:
            return
        undo = None
        if undoable:
            added = [h for (h,) in self.con.execute("SELECT id FROM fact_history WHERE id > ? ORDER BY id", (mark,))]
            undo = json.dumps({"facts": [{"id": f, "before": img} for f, img in j.images.items()],
                               "history": added}, separators=(",", ":"))
        j.touch("facts", list(j.images))
        self.write(op, actor, purpose=purpose, summary=j.summary, ids=j.ids, undo=undo, decision=decision,
                   undoes=undoes, origin=origin, before=before)

    def write(self, op: str, actor: str, *, ids: dict[str, list[int]], purpose: str | None = None,
              summary: str | None = None, undo: str | None = None, decision: str | None = None,
              undoes: int | None = None, origin: str | None = None, at: str | None = None,
              uid: int | None = None, before: bytes | None = None) -> int:
        """Append one row (and its change_facts rows); returns its id. A new change gets a random
        ``uid``; a copied one keeps its own (and no ``before`` images: they are of the other file)."""
        shown = {k: list(v) for k, v in ids.items() if v}
        self.con.execute(
            "INSERT INTO change_log(at, actor, op, purpose, summary, ids, undo, decision, undoes, origin, uid, "
            f"{IMAGE_COLUMN}) "
            "VALUES(?,?,?,?,?,?,?,?,?,?, coalesce(?, random()), ?)",
            (at or now_stored(), actor, op, purpose, summary, json.dumps(shown, separators=(",", ":")), undo, decision,
             undoes, origin, uid, before))
        cid = int(self.con.last_insert_rowid())
        for fid in shown.get("facts", []):
            self.con.execute("INSERT OR IGNORE INTO change_facts(fact_id, change_id) VALUES(?,?)", (fid, cid))
        return cid

    def note_all(self, op: str, actor: str, *, summary: str) -> int:
        """A change that brought in everything the file holds (an import into a fresh file): one
        row naming every CoreFact, placed message, segment, trajectory and ActiveFact, with
        before images saying none of them existed; the messages are learnt now."""
        q = self.con.execute
        ids = {"facts": [i for (i,) in q("SELECT id FROM core_facts ORDER BY id")],
               "messages": [i for (i,) in q("SELECT message_id FROM message_units ORDER BY message_id")],
               "segments": [i for (i,) in q("SELECT id FROM segments ORDER BY id")],
               "trajectories": [i for (i,) in q("SELECT id FROM trajectories ORDER BY id")],
               "active_facts": [i for (i,) in q("SELECT id FROM active_facts ORDER BY id")]}
        now = now_stored()
        created = created_at_of()  # a message's created_at stays what it was
        q(f"UPDATE messages SET created_at = CASE WHEN {created} = ?1 THEN '{SAME_AS_KNOWN}' ELSE {created} END, "
          "known_at=?1", (now,))
        before = {t: [[list(k), None] for k in rows] for t, rows in Rewind(self.con).rows(IMAGE_TABLES).items()}
        return self.write(op, actor, summary=summary, ids=ids, at=now, before=pack(before))

    @property
    def journal(self) -> Journal | None:
        return self._open[-1] if self._open else None

    def before(self, fid: int, *, vector: bool = False, sources: bool = False) -> None:
        """Called by :class:`RecordedFacts` before it changes fact ``fid``; ``sources``: before it
        removes any of the fact's sources (its image then lists them all)."""
        j = self.journal
        if j is None:
            return
        if fid not in j.images:
            j.images[fid] = self._image(fid) if j.undoable else None
        img = j.images[fid]
        if img is None or not j.undoable:
            return
        if vector and "vector" not in img:
            row = self.con.execute("SELECT embedding FROM fact_vec WHERE rowid=?", (fid,)).fetchone()
            img["vector"] = None if row is None else bytes(row[0]).hex()
        if sources and "sources" not in img:
            added = set(img.pop("added"))
            img["sources"] = [m for m in CoreFacts(self.con).sources(fid) if m not in added]

    def adding(self, fid: int, message_ids: Sequence[int]) -> None:
        """Called by :class:`RecordedFacts` before it adds these sources to fact ``fid``: the image
        notes those the fact does not hold yet."""
        self.before(fid)
        j = self.journal
        img = j.images.get(fid) if j is not None else None
        if img is None or "added" not in img:
            return
        wanted = list(dict.fromkeys(message_ids))
        held = {m for (m,) in self.rows_in(
            "SELECT message_id FROM fact_sources WHERE fact_id=? AND message_id IN ({marks})", wanted, (fid,))}
        held.update(img["added"])
        img["added"].extend(m for m in wanted if m not in held)

    def created(self, fid: int) -> None:
        """Fact ``fid`` did not exist before this change."""
        j = self.journal
        if j is not None:
            j.images[fid] = None

    def _image(self, fid: int) -> dict[str, Any] | None:
        row = self.con.execute(f"SELECT {', '.join(_FACT_COLS)} FROM core_facts WHERE id=?", (fid,)).fetchone()
        if row is None:
            return None
        return {"row": list(row), "added": []}  # its sources then: those it holds after, but the added

    # -- reading ------------------------------------------------------------------------------------
    def select(self, *, since: str | None = None, until: str | None = None, actor: str | None = None,
               fact_id: int | None = None, op: str | None = None, limit: int | None = None) -> list[Change]:
        """Rows in order, filtered by record time, actor (``llm`` matches every ``llm:<model>``),
        fact touched and operation."""
        where, args = ["1"], []  # type: tuple[list[str], list[Any]]
        if since is not None:
            where.append(record_time(">=", "c."))
            args += [since] * 3
        if until is not None:
            where.append(record_time("<=", "c."))
            args += [until] * 3
        if actor is not None:
            where.append("(c.actor = ? OR c.actor LIKE ? ESCAPE '\\')")
            args += [actor, actor.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + ":%"]
        if fact_id is not None:  # a copied change: through the change here that wrote its candidate
            where.append("(c.id IN (SELECT change_id FROM change_facts WHERE fact_id=?) OR (c.origin IS NOT NULL AND "
                         "c.decision IN (SELECT l.decision FROM change_facts x JOIN change_log l ON l.id=x.change_id "
                         "WHERE x.fact_id=? AND l.decision IS NOT NULL)))")
            args += [fact_id, fact_id]
        if op is not None:
            where.append("(c.op = ? OR c.op LIKE ?)")
            args += [op, op + ".%"]
        rows = self.con.execute(f"SELECT {_CHANGE} FROM change_log c WHERE {' AND '.join(where)} ORDER BY c.id LIMIT ?",
                                (*args, -1 if limit is None else limit)).fetchall()
        return [_change(r) for r in rows]

    def get(self, cid: int) -> Change | None:
        got = self.rows([cid])
        return got[0] if got else None

    def rows(self, ids: Sequence[int]) -> list[Change]:
        return [_change(r) for r in self.rows_in(
            f"SELECT {_CHANGE} FROM change_log c WHERE c.id IN ({{marks}}) ORDER BY c.id", list(ids))]

    def later_touching(self, after: int, facts: set[int]) -> list[tuple[int, set[int]]]:
        """(change id, facts it touched) of every change after ``after`` that touched any fact of
        ``facts`` or of a change found so (the closure), in order, undos and undone ones left out."""
        rows = self.con.execute(
            "SELECT c.id, c.ids FROM change_log c WHERE c.id > ? AND c.op != 'undo' "
            "AND NOT EXISTS(SELECT 1 FROM change_log u WHERE u.undoes=c.id) "
            "AND EXISTS(SELECT 1 FROM change_facts x WHERE x.change_id=c.id) ORDER BY c.id", (after,)).fetchall()
        out = []
        closure = set(facts)
        for cid, ids in rows:
            touched = set(_ids(ids).get("facts", ()))
            if touched & closure:
                closure |= touched
                out.append((int(cid), touched))
        return out

    def undone_decision(self, key: str) -> bool:
        """Whether a fact change that wrote this candidate was undone (so it is not written again)."""
        return self.con.execute(
            "SELECT 1 FROM change_log c JOIN change_log u ON u.undoes=c.id WHERE c.decision=? LIMIT 1",
            (key,)).fetchone() is not None

    def realization(self, cid: int) -> int | None:
        """The change here that wrote the candidate of copied change ``cid`` (the latest one, not
        undone), which an undo of ``cid`` takes back; None if there is none."""
        row = self.con.execute("SELECT max(l.id) FROM change_log c, change_log l WHERE c.id=? "
                               f"AND c.origin IS NOT NULL AND {_LOCAL}", (cid,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- merges -------------------------------------------------------------------------------------
    def uids(self) -> dict[int, int]:
        """uid -> id of every change in this file."""
        return {int(u): int(i) for u, i in self.con.execute("SELECT uid, id FROM change_log WHERE uid IS NOT NULL")}

    def carried(self, *, has_uid: bool) -> list[CarriedChange]:
        """Every row of this file's log, to be copied into another by a merge (this file opened
        read-only: ``has_uid`` false for a schema 11 file, whose uids are computed as its upgrade
        would). Values are returned as stored: the merge checks them."""
        cols = _CARRIED + (", uid" if has_uid else ", NULL")
        out = []
        for r in self.con.execute(f"SELECT {cols} FROM change_log ORDER BY id"):
            cid, at, actor, op, purpose, summary, ids, decision, undoes, origin, uid = r
            if uid is None and all(isinstance(v, str) for v in (at, actor, op, ids)):
                uid = change_uid(cid, at, actor, op, ids, decision)
            out.append(CarriedChange(cid, uid, at, actor, op, purpose, summary, _ids(ids), decision, undoes, origin))
        return out

    def last_id(self) -> int:
        return int(self.con.execute("SELECT coalesce(max(id), 0) FROM change_log").fetchone()[0])

    # -- undo and forget ----------------------------------------------------------------------------
    def restore(self, cid: int) -> list[int]:
        """Take change ``cid`` back from its images (inside a write transaction): facts it made are
        deleted, the others get their row, sources and vector back, the history it wrote goes.
        Returns the facts touched."""
        raw = self.con.execute("SELECT undo FROM change_log WHERE id=?", (cid,)).fetchone()[0]
        undo = _undo_record(cid, raw)
        for h in undo["history"]:
            self.con.execute("DELETE FROM fact_history WHERE id=?", (h,))
        made = []
        for item in undo["facts"]:
            fid, img = int(item["id"]), item["before"]
            if img is None:
                made.append(fid)
                continue
            sets = ", ".join(f"{c}=?" for c in _FACT_COLS)
            self.con.execute(f"UPDATE core_facts SET {sets} WHERE id=?", (*img["row"], fid))
            if "sources" in img:  # every source the fact had
                self.con.execute("DELETE FROM fact_sources WHERE fact_id=?", (fid,))
                for mid in img["sources"]:
                    self.con.execute("INSERT INTO fact_sources(fact_id, message_id) VALUES(?,?)", (fid, mid))
            else:  # the sources the change added
                for mid in img["added"]:
                    self.con.execute("DELETE FROM fact_sources WHERE fact_id=? AND message_id=?", (fid, mid))
        facts = CoreFacts(self.con, self.fact_cache)
        for item in undo["facts"]:
            img = item["before"]
            if img is not None and img.get("vector") is not None:
                facts.set_fact_vector(int(item["id"]), bytes.fromhex(img["vector"]))
        for fid in made:
            facts.delete(fid)  # (its 'superseded' history entries went with the change's history above)
        return [int(item["id"]) for item in undo["facts"]]

    def redact(self, *, facts: Sequence[int] = (), messages: Sequence[int] = ()) -> int:
        """Erase the content (summary, undo and before images) of every row that touched these facts
        or cites these messages: what ``forget`` removes is not kept in the log either (a fact that
        outlives the forget may have been worded by the forgotten message: a later change's before
        image holds that wording). Returns the rows redacted."""
        n = 0
        ids = sorted(set(facts))
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            self.con.execute(
                f"UPDATE change_log SET {_ERASED} WHERE ({_HELD}) "
                f"AND id IN (SELECT change_id FROM change_facts WHERE fact_id IN ({','.join('?' * len(chunk))}))",
                chunk)
            n += self.con.changes()
            self.con.execute(  # and every change that wrote the same candidates: one that came with a merge,
                # or one whose fact a merge's rebuild removed before its replay wrote it again
                f"UPDATE change_log SET {_ERASED} WHERE ({_HELD}) "
                "AND decision IN "
                "(SELECT l.decision FROM change_facts x JOIN change_log l ON l.id=x.change_id WHERE l.decision IS NOT "
                f"NULL AND x.fact_id IN ({','.join('?' * len(chunk))}))", chunk)
            n += self.con.changes()
        mids = sorted(set(messages))
        for start in range(0, len(mids), 500):  # (one pass over the log for up to 500 messages)
            chunk = mids[start:start + 500]
            self.con.execute(
                f"UPDATE change_log SET {_ERASED} WHERE ({_HELD}) "
                "AND EXISTS(SELECT 1 FROM json_each(change_log.ids, '$.messages') "
                f"WHERE value IN ({','.join('?' * len(chunk))}))", chunk)
            n += self.con.changes()
        return n

    def naming(self, messages: Sequence[int], *, after: int = 0) -> list[tuple[int, str, list[int], frozenset[int]]]:
        """(row id, its content as text: summary, undo and before images; the messages it cites;
        those of ``messages`` among them) of every row with an id above ``after`` still holding
        content that cites any of these messages, by id. Each row's content is read once, however
        many of them it cites (an import's row cites every message)."""
        named: dict[int, set[int]] = {}
        for rid, value in self.rows_in(
                f"SELECT c.id, j.value FROM change_log c, json_each(c.ids, '$.messages') j "
                f"WHERE c.id > ? AND ({_HELD}) AND j.value IN ({{marks}})", sorted(set(messages)), (after,)):
            named.setdefault(int(rid), set()).add(int(value))  # equal to one of ``messages`` (5.0, true too)
        out = []
        for rid, summary, undo, image, cited in self.rows_in(
                f"SELECT id, summary, undo, {IMAGE_COLUMN}, ids FROM change_log WHERE id IN ({{marks}}) ORDER BY id",
                sorted(named)):
            text = " ".join(str(x) for x in (summary, undo) if x is not None)
            if image is not None:
                text += " " + json.dumps(unpack(image), ensure_ascii=False)
            mids = [m for m in _ids(cited).get("messages", []) if isinstance(m, int)]
            out.append((int(rid), text, mids, frozenset(named[int(rid)])))
        return out

    def holding(self, rows: Sequence[int]) -> set[int]:
        """Those of these rows (ids) that still hold content (not erased)."""
        return {r for (r,) in self.rows_in(f"SELECT id FROM change_log WHERE id IN ({{marks}}) AND ({_HELD})",
                                            sorted(set(rows)))}

    def erase(self, rows: Sequence[int]) -> int:
        """Erase the content (summary, undo and before images) of these rows, by id, as
        :meth:`redact` does. Returns the rows erased."""
        n = 0
        for rid in sorted(set(rows)):
            self.con.execute(f"UPDATE change_log SET {_ERASED} WHERE id=? AND ({_HELD})", (rid,))
            n += self.con.changes()
        return n


#: what :meth:`ChangeLog.redact` erases of a row, and the test that it still holds some of it
_ERASED = f"summary=NULL, undo=NULL, {IMAGE_COLUMN}=NULL"
_HELD = f"summary IS NOT NULL OR undo IS NOT NULL OR {IMAGE_COLUMN} IS NOT NULL"


def _undo_record(cid: int, raw: Any) -> dict[str, Any]:
    """A change's undo record (JSON: ``{"facts": [{"id", "before"}], "history": [ids]}``, each
    ``before`` null or ``{"row", "added" | "sources"[, "vector"]}``), or a clear error when it is not
    one: a file from anyone may hold anything there."""
    try:
        undo = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        undo = None
    if not (isinstance(undo, dict) and _int_list(undo.get("history")) and isinstance(undo.get("facts"), list)
            and all(isinstance(item, dict) and _int_list([item.get("id")]) and "before" in item
                    and _image_ok(item["before"])
                    for item in undo["facts"])):
        raise StorageCorruptError(f"change {cid} cannot be undone: its undo record is damaged; the memory file "
                                  "is damaged or was edited (run `memsif check`)")
    return undo


def _int_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)


def _image_ok(img: Any) -> bool:
    if img is None:
        return True
    if not (isinstance(img, dict) and isinstance(img.get("row"), list) and len(img["row"]) == len(_FACT_COLS)
            and _int_list(img.get("sources" if "sources" in img else "added"))):
        return False
    vector = img.get("vector")
    if vector is None:
        return True
    try:
        return isinstance(vector, str) and len(bytes.fromhex(vector)) > 0
    except ValueError:
        return False


def _ids(raw: Any) -> dict[str, list[int]]:
    try:
        d = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return {}
    if not isinstance(d, dict):
        return {}
    return {k: [int(i) for i in v if isinstance(i, int) and not isinstance(i, bool)]
            for k, v in d.items() if k in _KINDS and isinstance(v, list)}


def _change(r: Sequence[Any]) -> Change:
    undoable = bool(r[7]) and r[3] in UNDOABLE_OPS and r[10] is None  # images kept, not undone yet
    return Change(int(r[0]), from_stored(r[1]), str(r[2]), str(r[3]), r[4], r[5],
                  {k: tuple(v) for k, v in _ids(r[6]).items()}, undoable, r[10], r[8], r[9])


class RecordedFacts(CoreFacts):
    """:class:`~memsif_lite.db.facts.CoreFacts` whose writes tell the open record what they touch."""

    def __init__(self, con: Any, changes: ChangeLog, cache: VectorCache | None = None):
        super().__init__(con, cache)
        self.changes = changes

    def _superseded_by(self, fid: int) -> list[int]:
        return [f for (f,) in self.con.execute("SELECT id FROM core_facts WHERE superseded_by=?", (fid,))]

    def insert(self, **kw: Any) -> int:
        fid = super().insert(**kw)
        self.changes.created(fid)
        return fid

    def rewrite(self, fid: int, stmt: str, vector: np.ndarray, now: str) -> None:
        self.changes.before(fid, vector=True)
        super().rewrite(fid, stmt, vector, now)

    def touch(self, fid: int, now: str) -> None:
        self.changes.before(fid)
        super().touch(fid, now)

    def supersede(self, fid: int, *, by: int, valid_to: str, now: str) -> None:
        self.changes.before(fid)
        super().supersede(fid, by=by, valid_to=valid_to, now=now)

    def add_sources(self, fid: int, message_ids: Sequence[int]) -> None:
        self.changes.adding(fid, message_ids)
        super().add_sources(fid, message_ids)

    def delete(self, fid: int) -> None:
        self.changes.before(fid, sources=True)
        for f in self._superseded_by(fid):
            self.changes.before(f)
        super().delete(fid)

    def drop_source(self, mid: int) -> tuple[list[int], list[int]]:
        for (f,) in self.con.execute("SELECT fact_id FROM fact_sources WHERE message_id=?", (mid,)).fetchall():
            self.changes.before(f, sources=True)
        return super().drop_source(mid)

    def drop_unsupported_events(self, fid: int) -> str | None:
        self.changes.before(fid)
        return super().drop_unsupported_events(fid)

    def reword(self, fid: int, stmt: str, slot: str | None, vector: np.ndarray, now: str,
               events: Collection[int]) -> None:
        self.changes.before(fid, vector=True)
        super().reword(fid, stmt, slot, vector, now, events)

    def realign_valid_from(self, fid: int, now: str, stated: Collection[str] = ()) -> None:
        for f in [fid, *self._superseded_by(fid)]:
            self.changes.before(f)
        super().realign_valid_from(fid, now, stated)
