"""``known_at=``: the memory as this file held it at a point in *record time* (when memsif learnt
or changed things: docs/history.md, "Two clocks"), where ``as_of=`` is a point in valid time.

Messages carry their record time (``messages.known_at``: the SQL filter of
:mod:`memsif_lite.db.filtering`). The derived state — CoreFacts with their sources, Topical
Segments and their placements, Event Trajectories, ActiveFacts — is rewound from the current rows
with the before images the change log keeps (:mod:`memsif_lite.db.rewind`). What a ``forget``
erased is not kept anywhere, so a ``known_at`` before a forget cannot show it: such a read shows
what is left (and the rows whose images the forget erased as they are now).
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections import Counter
from typing import Any

from . import store
from .db import Database
from .db.rewind import Rewind
from .db.rows import ActiveFactRow
from .db.structure import NO_COUNTS
from .errors import MemoryFileError
from .filters import MessageFilter
from .segments import label, list_segments
from .timeutil import from_stored
from .trajectories import list_trajectories
from .types import ActiveFact, CoreFact, Segment, Trajectory

__all__ = ["State", "SCHEMA", "require", "state", "point", "facts_known_at", "segments_known_at",
           "trajectories_known_at", "active_known_at", "shown_as_then", "segments", "trajectories", "active_facts"]

#: table -> its rows then, as ``{column: value}``
State = dict[str, list[dict[str, Any]]]

_TABLES = ("core_facts", "fact_sources", "segments", "trajectories", "message_units", "active_facts")


#: the schema that gave messages their record time and changes their before images
SCHEMA = 13


def require(db: Database) -> None:
    """Refuse ``known_at`` on a file of an older schema (opened read-only, so not migrated)."""
    if store.schema_version(db.con) < SCHEMA:
        raise MemoryFileError(f"known_at needs a memory file of schema {SCHEMA} or later (record times); this "
                              "one is older: open it once for writing to upgrade it")


def state(db: Database, known_at: str, tables: tuple[str, ...] = _TABLES) -> State:
    """The derived rows (of ``tables``) as they stood at record time ``known_at`` (stored form)."""
    require(db)
    then = Rewind(db.con).named_at(known_at, tables)
    if "message_units" in then:
        _known_members(db, known_at, then)
    return then


def _known_members(db: Database, known_at: str, then: State) -> None:
    """Leave out of ``then`` the placements of messages learnt after ``known_at`` (a later change
    whose images a forget erased leaves its placements in the current rows), the segments left with
    no members (every segment was made by placing one), and the trajectories left with no segment."""
    later = Rewind(db.con).learnt_after(known_at)
    then["message_units"] = [u for u in then["message_units"] if u["message_id"] not in later]
    if "segments" in then:
        placed = {u["segment_id"] for u in then["message_units"]}
        then["segments"] = [s for s in then["segments"] if s["id"] in placed]
        if "trajectories" in then:
            linked = {s["trajectory_id"] for s in then["segments"]}
            then["trajectories"] = [t for t in then["trajectories"] if t["id"] in linked]


def point(known_at: Any) -> str | None:
    """``known_at`` as given (datetime, date or ISO string) in the stored form; None for None."""
    flt = MessageFilter.build(known_at=known_at)
    return flt.known_at if flt is not None else None


def segments(db: Database, known_at: Any) -> list[Segment]:
    """``Memory.segments``: now, or as the file held them at record time ``known_at``."""
    k = point(known_at)
    return list_segments(db) if k is None else segments_known_at(state(db, k, ("segments", "message_units")))


def trajectories(db: Database, known_at: Any) -> tuple[list[Trajectory], list[Segment]]:
    """``Memory.trajectories``: (trajectories, segments) now, or at record time ``known_at``."""
    k = point(known_at)
    if k is None:
        return list_trajectories(db), list_segments(db)
    then = state(db, k, ("segments", "message_units", "trajectories"))
    segs = segments_known_at(then)
    return trajectories_known_at(then, segs), segs


def active_facts(db: Database, known_at: Any) -> list[ActiveFact]:
    """``Memory.active_facts``: now, or at record time ``known_at``."""
    k = point(known_at)
    return db.clusters.list_active() if k is None else active_known_at(db, state(db, k, ("active_facts",)))


def _fold(name: str) -> str:
    return unicodedata.normalize("NFC", name).casefold()


def facts_known_at(db: Database, flt: MessageFilter, *, subject: str | None = None, ftype: str | None = None,
                   include_superseded: bool = False) -> list[CoreFact]:
    """``Memory.facts(known_at=...)``: the CoreFacts the file held then, with their wording, validity
    and sources then; the other criteria of ``flt`` as :mod:`memsif_lite.filters` says (``as_of``:
    valid then, by the validity they had at ``known_at``, and shown as current then)."""
    assert flt.known_at is not None
    then = state(db, flt.known_at, ("core_facts", "fact_sources"))
    sources: dict[int, list[int]] = {}
    for r in then["fact_sources"]:
        sources.setdefault(r["fact_id"], []).append(r["message_id"])
    by_messages = dataclasses.replace(flt, speakers=(), as_of=None)  # a source said in sessions/[since, until]
    per_source = bool(flt.sessions or flt.since or flt.until)
    out = []
    for r in then["core_facts"]:
        if subject is not None and _fold(r["subject"]) != _fold(subject):
            continue
        if ftype is not None and r["type"].lower() != ftype.lower():
            continue
        if flt.as_of is not None:
            if not (r["valid_from"] <= flt.as_of and (r["valid_to"] is None or r["valid_to"] > flt.as_of)):
                continue
        elif not include_superseded and r["valid_to"] is not None:
            continue
        if flt.speakers and _fold(r["subject"]) not in {_fold(s) for s in flt.speakers}:
            continue
        mids = tuple(sorted(sources.get(r["id"], ())))
        if per_source and not db.filters.keep(list(mids), by_messages):
            continue
        now = flt.as_of is None  # as_of: current then, so no end and no successor
        out.append(CoreFact(r["id"], r["subject"], r["type"], r["stmt"], from_stored(r["valid_from"]),
                            from_stored(r["valid_to"]) if now and r["valid_to"] else None,
                            r["superseded_by"] if now else None, mids, r["origin"]))
    out.sort(key=lambda f: (f.valid_from, f.id))
    return out


def _member_entities(then: State) -> dict[int, Counter[str]]:
    """segment id -> the entity counts of its placed messages: a rewound segment's entities (its
    image leaves them out, :data:`~memsif_lite.db.rewind.DERIVED`), as placing them counted."""
    out: dict[int, Counter[str]] = {}
    for u in then["message_units"]:
        counts = out.setdefault(u["segment_id"], Counter())
        ents = _json(u["entities"])
        if isinstance(ents, list):
            counts.update(e for e in ents if isinstance(e, str))
    return out


def segments_known_at(then: State) -> list[Segment]:
    """The Topical Segments of a rewound state, as :func:`~memsif_lite.segments.list_segments`."""
    members: dict[int, list[int]] = {}
    for u in then["message_units"]:
        members.setdefault(u["segment_id"], []).append(u["message_id"])
    derived = _member_entities(then)
    out = []
    for r in then["segments"]:
        counts = (_counts(r["entities"]) if r["entities"] not in (None, NO_COUNTS)
                  else dict(derived.get(r["id"], Counter())))
        out.append(Segment(r["id"], r["trajectory_id"], tuple(sorted(members.get(r["id"], ()))),
                           from_stored(r["start_at"]), from_stored(r["end_at"]), tuple(sorted(counts)),
                           r["title"] or label(counts), bool(r["closed"])))
    return out


def trajectories_known_at(then: State, segments: list[Segment]) -> list[Trajectory]:
    """The Event Trajectories of a rewound state (``segments``: :func:`segments_known_at`'s)."""
    by_traj: dict[int, list[Segment]] = {}
    for s in segments:
        if s.trajectory_id is not None:
            by_traj.setdefault(s.trajectory_id, []).append(s)
    out = []
    derived = _member_entities(then)
    for r in then["trajectories"]:
        ss = by_traj.get(r["id"], [])
        if r["entities"] not in (None, NO_COUNTS):  # (a file before schema 22 kept them in the row)
            counts = _counts(r["entities"])
        else:  # the sum of its segments' (as linking them added them up)
            total: Counter[str] = Counter()
            for seg in ss:
                total.update(derived.get(seg.id, Counter()))
            counts = dict(total)
        out.append(Trajectory(r["id"], tuple(s.id for s in ss), tuple(m for s in ss for m in s.message_ids),
                              from_stored(r["start_at"]), from_stored(r["end_at"]), tuple(sorted(counts)),
                              r["title"] or label(counts)))
    return out


def active_known_at(db: Database, then: State) -> list[ActiveFact]:
    """The ActiveFacts of a rewound state: their statement then; their cluster's evidence, queries
    and scores as they are now (candidate clusters are not rewound)."""
    now = {a.id: a for a in db.clusters.list_active()}
    out = []
    for r in then["active_facts"]:
        cur = now.get(r["id"])
        out.append(ActiveFact(r["id"], r["cluster_id"], r["subject"], r["stmt"],
                              cur.message_ids if cur else (), cur.queries if cur else (),
                              cur.score_src if cur else 0.0, cur.score_qry if cur else 0.0))
    return out


def shown_as_then(db: Database, known_at: str, ids: list[int], active: dict[int, ActiveFactRow]
                  ) -> tuple[dict[int, dict[str, Any]], dict[int, ActiveFactRow]]:
    """What ``context`` shows at record time ``known_at`` for the facts it ranked: the rows of
    CoreFacts ``ids`` then (those it held), each with its sources then (``message_ids``), and the
    ActiveFacts of ``active`` it held then, with their wording then (their clusters are not
    rewound: their evidence is that of the messages known then)."""
    want = set(ids)
    then = state(db, known_at, ("core_facts", "fact_sources", "active_facts"))
    sources: dict[int, list[int]] = {}
    for r in then["fact_sources"]:
        sources.setdefault(r["fact_id"], []).append(r["message_id"])
    core = {r["id"]: {**r, "message_ids": tuple(sorted(sources.get(r["id"], ())))}
            for r in then["core_facts"] if r["id"] in want}
    later = Rewind(db.con).learnt_after(known_at)
    held = {r["id"]: r for r in then["active_facts"]}
    return core, {fid: dataclasses.replace(a, subject=h["subject"], stmt=h["stmt"],
                                           message_ids=tuple(m for m in a.message_ids if m not in later))
                  for fid, a in active.items() if (h := held.get(fid)) is not None}


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _counts(raw: Any) -> dict[str, int]:
    d = _json(raw)
    return d if isinstance(d, dict) else {}
