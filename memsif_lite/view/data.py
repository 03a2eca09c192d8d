"""What the HTML view holds: one document read from the file in one snapshot, packed compactly.

Columns instead of rows (one JSON array per field), so 100,000 messages cost their text and a few
bytes each: ids, times and segment ids are delta-coded (mostly small numbers), sessions and UTC
offsets run-length coded (long runs), speakers and sessions indexes into a list of names. Times are
whole seconds since 1970-01-01 UTC. The page (``view.js``) decodes them; :func:`columns` is the
same decoding in Python (tests read a page back with it).

Message text is the bulk of a page: when all of it would pass :data:`TEXT_BUDGET` bytes, the
longest texts are shortened (:func:`clip_texts`) and the page says how many were.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..db import Database
from ..segments import label
from ..timeutil import from_stored, now_stored
from ..version import __version__

__all__ = ["gather", "clip_texts", "delta", "undelta", "runs", "unruns", "columns", "TEXT_BUDGET", "FORMAT"]

#: the document's format version (the page refuses one it does not know)
FORMAT = 1
#: at most this many bytes (UTF-8) of message text in one page, which stays under 30 MB with them
TEXT_BUDGET = 20_000_000
#: the most bytes of one message's text a page keeps (a pasted document), fewer when the budget needs it
TEXT_CAP = 20_000
#: pending steps listed (all are counted)
BACKLOG_ROWS = 200

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)


def _seconds(stored: str) -> int:
    return (from_stored(stored) - _EPOCH) // _SECOND


def delta(xs: Sequence[int]) -> list[int]:
    """``[x0, x1 - x0, x2 - x1, ...]``."""
    return [b - a for a, b in zip([0, *xs], xs, strict=False)]


def undelta(ds: Iterable[int]) -> list[int]:
    out, acc = [], 0
    for d in ds:
        acc += d
        out.append(acc)
    return out


def runs(xs: Sequence[Any]) -> list[list[Any]]:
    """``[[value, how many in a row], ...]``."""
    out: list[list[Any]] = []
    for x in xs:
        if out and out[-1][0] == x:
            out[-1][1] += 1
        else:
            out.append([x, 1])
    return out


def unruns(rs: Iterable[Sequence[Any]]) -> list[Any]:
    return [v for v, n in rs for _ in range(n)]


def clip_texts(texts: list[str], budget: int = TEXT_BUDGET, cap: int = TEXT_CAP) -> int:
    """Shorten, in place, the texts longer than a cap of UTF-8 bytes (halved until all of them fit
    ``budget`` bytes, never below 200) to at most the cap, ending in an ellipsis; returns how many
    were shortened."""
    sizes = [len(t.encode("utf-8", "surrogatepass")) for t in texts]
    cap = max(cap, 200)
    while cap > 200 and sum(min(n, cap) for n in sizes) > budget:
        cap //= 2
    cap = max(cap, 200)
    n = 0
    for i, t in enumerate(texts):
        if sizes[i] > cap:  # cut at a character boundary, leaving room for the ellipsis (3 bytes)
            texts[i] = t.encode("utf-8", "surrogatepass")[:cap - 3].decode("utf-8", "ignore") + "\u2026"
            n += 1
    return n


def _index(names: dict[Any, int], value: Any) -> int:
    if value is None:
        return -1
    return names.setdefault(value, len(names))


def _entities_label(entities: str) -> str:
    try:
        counts = json.loads(entities)
    except (TypeError, ValueError):
        return ""
    if not isinstance(counts, dict):
        return ""
    try:
        return label(counts)
    except TypeError:  # a damaged or crafted file: counts that are not numbers
        return label({str(k): v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)})


def _file(path: Path, db: Database, generated: int) -> dict[str, Any]:
    meta = db.admin.meta()

    def size(p: str) -> int:
        try:
            return os.stat(p).st_size
        except OSError:
            return 0

    return {"name": path.name, "bytes": size(str(path)), "wal_bytes": size(f"{path}-wal"),
            "schema": db.overview.schema_version(), "model": meta.get("embedding_model", ""),
            "dim": meta.get("embedding_dim", ""), "created_at": meta.get("created_at", ""),
            "created_by": meta.get("created_by", ""), "generated_at": generated,
            "generator": f"memsif_lite {__version__}"}


def _messages(db: Database) -> dict[str, Any]:
    speakers: dict[Any, int] = {}
    sessions: dict[Any, int] = {}
    ids, ts, offs, sps, ses, segs, texts = [], [], [], [], [], [], []
    for mid, speaker, text, at, session, off, seg in db.overview.messages():
        ids.append(mid)
        ts.append(_seconds(at))
        offs.append(off)
        sps.append(_index(speakers, speaker))
        ses.append(_index(sessions, session))
        segs.append(seg or 0)
        texts.append(text)
    clipped = clip_texts(texts)
    return {"speakers": list(speakers), "sessions": list(sessions), "id": delta(ids), "t": delta(ts),
            "off": runs(offs), "sp": sps, "se": runs(ses), "seg": delta(segs), "x": texts, "clipped": clipped}


def _structure(db: Database) -> tuple[dict[str, Any], dict[str, Any]]:
    segs: dict[str, list[Any]] = {"id": [], "tr": [], "a": [], "b": [], "c": [], "l": []}
    for sid, tid, ents, start, end, closed, title in db.structure.segment_rows():
        for k, v in zip(segs, (sid, tid or 0, _seconds(start), _seconds(end), int(bool(closed)),
                               title or _entities_label(ents)), strict=True):
            segs[k].append(v)
    trajs: dict[str, list[Any]] = {"id": [], "a": [], "b": [], "l": []}
    for tid, ents, start, end, title in db.structure.trajectory_rows():
        for k, v in zip(trajs, (tid, _seconds(start), _seconds(end), title or _entities_label(ents)), strict=True):
            trajs[k].append(v)
    return segs, trajs


def _facts(db: Database) -> dict[str, Any]:
    sources = db.overview.fact_sources()
    history = db.overview.fact_histories()
    cols: dict[str, list[Any]] = {"id": [], "su": [], "ty": [], "x": [], "a": [], "b": [], "by": [], "o": [],
                                  "src": [], "h": []}
    for fid, subject, ftype, stmt, start, end, by, origin in db.overview.facts():
        events = [[_seconds(at), op, text, detail] for at, op, text, detail in history.get(fid, [])]
        for k, v in zip(cols, (fid, subject, ftype, stmt, _seconds(start), _seconds(end) if end else None, by,
                               origin, sources.get(fid, []), events), strict=True):
            cols[k].append(v)
    return cols


def _backlog(db: Database) -> dict[str, Any]:
    n, oldest = db.queue.backlog()
    rows = [[s.kind, s.message_id, s.segment_id, _seconds(s.created_at), s.attempts]
            for s in db.overview.pending_steps(BACKLOG_ROWS)]
    return {"n": n, "oldest": _seconds(oldest) if oldest else None, "kinds": db.overview.pending_kinds(),
            "rows": rows}


def gather(db: Database, path: Path, *, live: str | None = None) -> dict[str, Any]:
    """The view's document of the file at ``path`` (read in the caller's snapshot). ``live``: the
    file's stamp, which the served page polls for (``memsif view --serve``)."""
    segs, trajs = _structure(db)
    actives = [[a.id, a.subject, a.stmt, list(a.message_ids)] for a in db.clusters.list_active()]
    return {"v": FORMAT, "file": _file(path, db, _seconds(now_stored())), "stats": db.admin.stats(),
            "live": live, "m": _messages(db), "s": segs, "tr": trajs, "f": _facts(db), "af": actives,
            "q": _backlog(db)}


def columns(doc: dict[str, Any]) -> dict[str, list[Any]]:
    """The messages of a document as plain columns again (what ``view.js`` decodes)."""
    m = doc["m"]
    speakers, sessions = m["speakers"], m["sessions"]
    return {"id": undelta(m["id"]), "t": undelta(m["t"]), "off": unruns(m["off"]),
            "speaker": [speakers[i] for i in m["sp"]],
            "session": [sessions[i] if i >= 0 else None for i in unruns(m["se"])],
            "segment": [s or None for s in undelta(m["seg"])], "text": list(m["x"])}
