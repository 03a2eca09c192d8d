"""Before images of derived rows, and the derived state rewound to a record time (``known_at``;
docs/history.md, "Two clocks").

A change (:meth:`ChangeLog.record <memsif_lite.db.changes.ChangeLog.record>`, the outermost one
of a transaction's nested records) watches the tables below with an SQLite *session*
(``apsw.Session``): when it ends, the session's changeset names every row the change inserted,
updated or deleted, with the values it had before. Those rows, as they were, are the change's
``before`` images (JSON, compressed: :func:`pack`, in ``change_log.images``; schema 13 to 15 kept
the JSON text in ``change_log.before``): ``null`` for a row the change created, the
whole row otherwise (BLOB columns — running vector sums — left out: a rewound segment or
trajectory has no vector; its entity counts, :data:`DERIVED`, are recomputed from its members).
Rewinding to record time K starts from the current rows and puts back, for every row a later
change wrote, its image in the earliest such change: the state at K.

A change that keeps no images (a ``forget``, a change copied from another file, one logged
before schema 13) cannot be rewound across; what it removed stays removed.
"""

from __future__ import annotations

import json
import re
import weakref
import zlib
from typing import Any, Callable, Iterable

import apsw

from ..errors import StorageCorruptError
from .base import Table, by_second
from .messages import learnt

__all__ = ["IMAGE_TABLES", "DERIVED", "ERASE_CHUNK", "watch", "images", "touched", "renumber", "Rewind", "Rows",
           "pack", "unpack", "IMAGE_COLUMN", "record_time", "malformed_record_times"]

#: the derived tables rewound, with their primary key columns (positions in the row)
IMAGE_TABLES: dict[str, tuple[int, ...]] = {"core_facts": (0,), "fact_sources": (0, 1), "segments": (0,),
                                            "trajectories": (0,), "message_units": (0,), "active_facts": (0,)}

#: columns an image leaves out (``null``) because a rewind derives them: a segment's or trajectory's
#: entity counts are those of its members' placements (``message_units.entities``) — they would
#: otherwise be most of the log, re-imaged at every message placed
DERIVED = {"segments": "entities", "trajectories": "entities"}

#: table -> primary key -> row (a list, in column order); a table's rows at some record time
Rows = dict[str, dict[tuple[Any, ...], list[Any]]]


#: the column of change_log holding a change's before images (schema 16; ``before``, JSON text, before it)
IMAGE_COLUMN = "images"

#: what images look like: a preset dictionary for :func:`pack` (deflate finds the repeats of a short
#: image here rather than nowhere). Part of the file format: never change it, add a new tag instead.
_ZDICT = (b'"trajectories":[[[,null,null,"2023-1"core_facts":[[[,"fact_sources":[[[,"active_facts":[[['
          b',null,null,"2024-0T00:00:00",null,null,"2024-01-0T00:00:00",0,null]]],'
          b'{"segments":[[[,null,null,null,"2024-01-0T0:00:00","2024-01-0T0:00:00",0,null]]],'
          b'"message_units":[[[],null]]}')
#: the first byte of a packed image: raw deflate with :data:`_ZDICT`
_DEFLATE = 1
#: the largest image :func:`unpack` inflates (a hostile file must not exhaust memory)
_MAX_IMAGE = 64 << 20


def record_time(op: str, alias: str = "") -> str:
    """The condition ``{alias}at {op} ?`` on a change's record time, on the index ``change_log_at``
    (schema 19: of ``unixepoch(at)``), :func:`~.base.by_second`: its argument is given three times."""
    return by_second(f"{alias}at", op)


def malformed_record_times(con: Any) -> list[str]:
    """``memsif check``: changes whose record time is not a time (the index of record times,
    ``unixepoch(at)``, holds none for them: a read by record time, :func:`record_time`, would not
    find them)."""
    n, first = con.execute("SELECT count(*), min(id) FROM change_log WHERE unixepoch(at) IS NULL").fetchone()
    return [f"{n} changes have a record time that is not a memsif timestamp (first: change {first})"] if n else []


#: a 4 KiB window and a small hash: an image is short, and a big one is a list of like entries (a
#: few µs where the defaults' 256 KiB of state took ~90); :func:`unpack` takes any window
_PRIMED = zlib.compressobj(9, zlib.DEFLATED, -12, 4, zlib.Z_DEFAULT_STRATEGY, _ZDICT)


def pack(images: Any) -> bytes:
    """Before images (JSON-able) as stored in ``change_log.images``: compact JSON, deflated against
    :data:`_ZDICT` (a place's images: 137 bytes of JSON, about 51 stored)."""
    z = _PRIMED.copy()  # the same state as a new one given the dictionary, without setting it again
    raw = json.dumps(images, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return bytes([_DEFLATE]) + z.compress(raw) + z.flush()


def unpack(raw: Any) -> Any:
    """A stored image read back (untrusted): the JSON it holds, or None when it is not one :func:`pack`
    wrote (or, from a file of schema 13 to 15 read as it is, the JSON text of ``before``)."""
    if isinstance(raw, str):
        return _loads(raw)
    text = _text(raw)
    if text is None:
        return None
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _text(raw: Any) -> bytes | None:
    """The JSON text (UTF-8, not checked) of a stored image :func:`pack` wrote; None when it is not
    one (then :meth:`Rewind.erase` parses it, as it did every image)."""
    if not isinstance(raw, bytes) or not raw or raw[0] != _DEFLATE:
        return None
    try:
        z = zlib.decompressobj(-15, _ZDICT)
        text = z.decompress(memoryview(raw)[1:], _MAX_IMAGE)  # (a view: no copy of the blob)
    except zlib.error:
        return None
    return None if z.unconsumed_tail or not z.eof else text


#: where an image entry's key begins in the JSON text of a change's images: ``[[k`` (an entry is
#: ``[[k, ...], row]``; JSON writes an integer as its digits, whitespace may lie between tokens)
_ENTRY_KEY = re.compile(rb"\[\s*\[\s*(-?[0-9]+)\s*[,\]]")


def _first_keys(keys: dict[str, set[tuple[Any, ...]]]) -> frozenset[bytes] | None:
    """The integers some key of ``keys`` begins with, as JSON writes them (its digits: one way
    only, "-0" aside); None when a key does not begin with an integer."""
    out: set[bytes] = set()
    for pks in keys.values():
        for pk in pks:
            if not pk or not isinstance(pk[0], int) or isinstance(pk[0], bool):
                return None
            out.add(str(pk[0]).encode("ascii"))
    return frozenset(out | ({b"-0"} if b"0" in out else set()))


#: up to this many first keys are searched for with one pattern naming them (a search stops at the
#: first; more alternatives cost more at each entry): above, every entry key is compared with them
_FEW_KEYS = 32


def _holder(first: frozenset[bytes]) -> Callable[[bytes], bool]:
    """The test whether the JSON text of a change's images may hold an image of a row keyed by one
    of ``first`` (:func:`_first_keys`), or is not a JSON object at all (then it is parsed, and erased,
    as before). A key is matched whole: what follows it must end the entry key, as in :data:`_ENTRY_KEY`."""
    if not first:
        return lambda text: text.lstrip()[:1] != b"{"
    if len(first) <= _FEW_KEYS:
        named = re.compile(rb"\[\s*\[\s*(?:" + b"|".join(re.escape(k) for k in sorted(first)) + rb")\s*[,\]]")
        return lambda text: text.lstrip()[:1] != b"{" or named.search(text) is not None
    return lambda text: text.lstrip()[:1] != b"{" or not first.isdisjoint(_ENTRY_KEY.findall(text))


def image_column(con: Any) -> str:
    """The column that holds the images in this file (``before`` in a file of schema 13 to 15 opened
    read-only, not migrated)."""
    cols = {r[1] for r in con.execute("PRAGMA table_info(change_log)")}
    return IMAGE_COLUMN if IMAGE_COLUMN in cols else "before"


def watch(con: apsw.Connection) -> apsw.Session:
    """A session recording every change to :data:`IMAGE_TABLES` from now on."""
    s = apsw.Session(con, "main")
    for t in IMAGE_TABLES:
        s.attach(t)
    return s


def _plain(v: Any) -> Any:
    return None if isinstance(v, bytes) else v


def images(con: apsw.Connection, session: apsw.Session) -> dict[str, list[list[Any]]]:
    """The before images of what ``session`` saw: table -> [[primary key, row or null], ...]. An
    update's changeset holds the old values of the columns it changed; the others are read from
    the row as it is now (unchanged by the change, so as they were)."""
    out: dict[str, list[list[Any]]] = {}
    for ch in apsw.Changeset.iter(session.changeset()):
        pk_cols = IMAGE_TABLES[ch.name]
        if ch.op == "INSERT":
            assert ch.new is not None
            out.setdefault(ch.name, []).append([[ch.new[i] for i in pk_cols], None])
            continue
        assert ch.old is not None
        old = list(ch.old)
        pk = [old[i] for i in pk_cols]
        if ch.op == "UPDATE":
            cols, now = _current_row(con, ch.name, pk)
            assert now is not None  # an update's row is there when the change ends
            old = [now[i] if v is apsw.no_change else v for i, v in enumerate(old)]
        else:
            cols = _columns(con, ch.name)
        row = [None if cols[i] == DERIVED.get(ch.name) else _plain(v) for i, v in enumerate(old)]
        out.setdefault(ch.name, []).append([pk, row])
    moved = _moved(con)
    if moved:  # a merge's rebuild renumbered messages: its images name them by their new ids
        con.execute("DELETE FROM temp.renumbered")
        for t, entries in out.items():
            out[t] = _renumber(con, t, entries, moved)
    return out


#: the tables whose rows name a message, the column
_MESSAGE_COLUMN = {"message_units": "message_id", "fact_sources": "message_id"}


#: the connections :func:`renumber` made ``temp.renumbered`` on (a temporary table is the
#: connection's own): the others have none to read, and are not asked
_RENUMBERING: weakref.WeakSet[Any] = weakref.WeakSet()


def _moved(con: Any) -> dict[int, int]:
    if con not in _RENUMBERING:
        return {}
    if con.execute("SELECT 1 FROM sqlite_temp_master WHERE name='renumbered'").fetchone() is None:
        return {}
    return dict(con.execute("SELECT old, new FROM temp.renumbered").fetchall())


def _renumber(con: Any, table: str, entries: list[list[Any]], moved: dict[int, int]) -> list[list[Any]]:
    """``entries`` (images of ``table``) with the messages of ``moved`` (old id -> new) renamed; an
    image of a renamed row wins over a ``null`` one of the same key (the row made under its new id)."""
    if table not in _MESSAGE_COLUMN:
        return entries
    col = _columns(con, table).index(_MESSAGE_COLUMN[table])
    pk_cols = IMAGE_TABLES[table]
    out, renamed = [], set()
    at = pk_cols.index(col)
    for key, row in entries:
        if row is not None and row[col] in moved:
            row = list(row)
            row[col] = moved[row[col]]
            key = [row[i] for i in pk_cols]
            renamed.add(tuple(key))
        elif row is None and key[at] in moved:
            key = [moved[v] if i == at else v for i, v in enumerate(key)]
        out.append([key, row])
    return [e for e in out if e[1] is not None or tuple(e[0]) not in renamed]


def renumber(con: Any, moved: dict[int, int]) -> None:
    """A merge's rebuild stores messages again under new ids (``moved``: old id -> new): the images
    of earlier changes, and those of the change running (when it ends), name them by their new ids."""
    if not moved:
        return
    for cid, raw in con.execute(f"SELECT id, {IMAGE_COLUMN} FROM change_log WHERE {IMAGE_COLUMN} IS NOT NULL"
                                ).fetchall():
        d = unpack(raw)
        if not isinstance(d, dict):
            continue
        new = {t: (_renumber(con, t, v, moved) if t in _MESSAGE_COLUMN and isinstance(v, list)
                   and all(_entry(e, t, _types(con, t)) is not None for e in v) else v) for t, v in d.items()}
        if new != d:
            con.execute(f"UPDATE change_log SET {IMAGE_COLUMN}=? WHERE id=?", (pack(new), cid))
    _RENUMBERING.add(con)
    con.execute("CREATE TEMP TABLE IF NOT EXISTS renumbered(old INTEGER PRIMARY KEY, new INTEGER)")
    con.executemany("INSERT OR REPLACE INTO temp.renumbered(old, new) VALUES(?, ?)", list(moved.items()))


def touched(session: apsw.Session) -> dict[str, set[tuple[Any, ...]]]:
    """table -> primary keys of the rows ``session`` saw written."""
    out: dict[str, set[tuple[Any, ...]]] = {}
    for ch in apsw.Changeset.iter(session.changeset()):
        row = ch.new if ch.op == "INSERT" else ch.old
        assert row is not None
        out.setdefault(ch.name, set()).add(tuple(row[i] for i in IMAGE_TABLES[ch.name]))
    return out


def _columns(con: Any, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


#: per connection, table -> its columns as last read (:func:`_current_row` checks them against the
#: columns of the row it reads, so a changed schema is read again, never used)
_KNOWN_COLUMNS: weakref.WeakKeyDictionary[Any, dict[str, list[str]]] = weakref.WeakKeyDictionary()


def _current_row(con: Any, table: str, pk: list[Any]) -> tuple[list[str], Any]:
    """``table``'s columns and its row of primary key ``pk`` as it is now (None if there is none).
    The columns as this connection last read them are used while the row read has the same ones;
    else they are read again (``PRAGMA table_info`` once per table, not once per image)."""
    known = _KNOWN_COLUMNS.setdefault(con, {})
    cols = known.get(table)
    if cols is not None:
        try:
            cur = con.execute(_by_key(table, cols), pk)
            names = [d[0] for d in cur.description]
        except (apsw.SQLError, apsw.ExecutionCompleteError):  # a column renamed; or no such row
            names = None
        if names == cols:
            return names, cur.fetchone()
        if names is not None:
            cur.close()  # its row unread: left open, it would keep this connection's read snapshot
    cols = known[table] = _columns(con, table)
    return cols, con.execute(_by_key(table, cols), pk).fetchone()


def _by_key(table: str, cols: list[str]) -> str:
    return f"SELECT * FROM {table} WHERE " + " AND ".join(f"{cols[i]}=?" for i in IMAGE_TABLES[table])


_SCALAR = (type(None), int, float, str)


def _types(con: Any, table: str) -> list[tuple[type, ...]]:
    """The Python types an image may hold in each column of ``table`` (by its declared type)."""
    out: list[tuple[type, ...]] = []
    for r in con.execute(f"PRAGMA table_info({table})"):
        decl = (r[2] or "").upper()
        out.append((type(None), int) if "INT" in decl else (type(None), str) if "TEXT" in decl
                   else (type(None), int, float) if "REAL" in decl else _SCALAR)
    return out


def _entry(e: Any, table: str, types: list[tuple[type, ...]]) -> tuple[tuple[Any, ...], list[Any] | None] | None:
    """One image read back (untrusted: a file may be edited), or None when it is not a well formed
    image of a row of ``table``: a key of scalars, one per primary key column, and the whole row (or
    null), each column of its type, its key columns the key's."""
    pk_cols = IMAGE_TABLES[table]
    if not (isinstance(e, list) and len(e) == 2 and isinstance(e[0], list) and len(e[0]) == len(pk_cols)):
        return None
    key, row = e
    if not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in key):
        return None
    if row is not None:
        if not (isinstance(row, list) and len(row) == len(types)):
            return None
        if not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(row, types, strict=True)):
            return None
        if [row[i] for i in pk_cols] != key:
            return None
    return tuple(key), row


def _entries(d: Any, table: str, types: list[tuple[type, ...]], cid: int) -> list[tuple[tuple[Any, ...],
                                                                                         list[Any] | None]]:
    """One table's images of change ``cid`` read back; a malformed one is a damaged file."""
    out = []
    for e in d if isinstance(d, list) else [None]:
        got = _entry(e, table, types)
        if got is None:
            raise StorageCorruptError(f"change {cid}: a malformed before image of {table} in the change log "
                                      "(run `memsif check`; restore a backup)")
        out.append(got)
    return out


def _loads(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return None


def parse(con: Any, raw: Any) -> dict[str, list[tuple[tuple[Any, ...], list[Any] | None]]]:
    """A change's stored images read back (:func:`unpack`), table by table (malformed images left out)."""
    d = unpack(raw)
    if not isinstance(d, dict):
        return {}
    out = {}
    for t, v in d.items():
        if t in IMAGE_TABLES and isinstance(v, list):
            types = _types(con, t)
            out[t] = [got for e in v if (got := _entry(e, t, types)) is not None]
    return out


class Rewind(Table):
    def rows(self, tables: Iterable[str]) -> Rows:
        """The current rows of ``tables``, by primary key."""
        out: Rows = {}
        for t in tables:
            pk = IMAGE_TABLES[t]
            out[t] = {tuple(r[i] for i in pk): [_plain(v) for v in r] for r in self.con.execute(f"SELECT * FROM {t}")}
        return out

    def at(self, known_at: str, tables: Iterable[str]) -> Rows:
        """The rows of ``tables`` as they stood at record time ``known_at``: the current ones with
        the images of every change made here after it put back, newest first (so the earliest
        change's image of a row wins)."""
        tables = [t for t in IMAGE_TABLES if t in set(tables)]
        state = self.rows(tables)
        types = {t: _types(self.con, t) for t in tables}
        col = image_column(self.con)
        later = self.con.execute(f"SELECT id, {col} FROM change_log WHERE {record_time('>')} AND origin IS NULL "
                                 f"AND {col} IS NOT NULL ORDER BY id DESC", (known_at,) * 3)
        for cid, raw in later:
            d = unpack(raw)
            if not isinstance(d, dict):  # not images memsif wrote: none kept
                continue
            for table in tables:
                part = d.get(table)
                if part is None:
                    continue
                rows = state[table]
                for pk, row in _entries(part, table, types[table], cid):
                    if row is None:
                        rows.pop(pk, None)
                    else:
                        rows[pk] = row
        return state

    def learnt_after(self, known_at: str) -> set[int]:
        """The ids of the messages learnt after record time ``known_at``."""
        return {m for (m,) in self.con.execute(f"SELECT id FROM messages WHERE {learnt('>')}", (known_at,) * 3)}

    def named_at(self, known_at: str, tables: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """:meth:`at`, each table's rows as ``{column: value}`` in primary key order."""
        out = {}
        for t, rows in self.at(known_at, tables).items():
            cols = _columns(self.con, t)
            out[t] = [dict(zip(cols, rows[pk], strict=False)) for pk in sorted(rows)]
        return out

    def erase(self, keys: dict[str, set[tuple[Any, ...]]]) -> int:
        """``forget``: the images of these rows go (what is forgotten is not kept), and with a source
        of a CoreFact the images of that fact (its wording came from it); the other images of the
        same changes stay, and so do the ``null`` ones (the row was made then: they hold nothing).
        Only a change whose images may hold one of them (:func:`_holder`: a search of the inflated
        JSON) is parsed; the log is read a chunk of rows at a time (at a million messages it holds
        over a million images); an image that inflates to something other than a JSON object is erased, as
        one that does not inflate; one that reads as an object but is not valid JSON is left to
        ``memsif check`` unless it names one of the keys. Returns the changes whose images changed."""
        keys = {t: set(v) for t, v in keys.items()}
        keys.setdefault("core_facts", set()).update((k[0],) for k in keys.get("fact_sources", ()))
        n, last = 0, None
        first = _first_keys(keys)
        may_hold = _holder(first) if first is not None else None
        while True:
            chunk = self.con.execute(
                f"SELECT id, {IMAGE_COLUMN} FROM change_log WHERE {IMAGE_COLUMN} IS NOT NULL "
                f"{'' if last is None else 'AND id > ? '}ORDER BY id LIMIT {ERASE_CHUNK}",
                () if last is None else (last,)).fetchall()
            if not chunk:
                return n
            last = chunk[-1][0]
            n += self._erase_in(chunk, keys, may_hold)

    def _erase_in(self, chunk: list[tuple[Any, Any]], keys: dict[str, set[tuple[Any, ...]]],
                  may_hold: Callable[[bytes], bool] | None) -> int:
        n = 0
        for cid, raw in chunk:
            if may_hold is not None and (text := _text(raw)) is not None and not may_hold(text):
                continue  # (most of a long log: inflated, searched, not parsed)
            parsed = parse(self.con, raw)
            kept = {t: [[list(pk), row] for pk, row in entries if row is None or pk not in keys.get(t, ())]
                    for t, entries in parsed.items()}
            if all(len(kept[t]) == len(parsed[t]) for t in parsed) and isinstance(unpack(raw), dict):
                continue
            kept = {t: v for t, v in kept.items() if v}
            self.con.execute(f"UPDATE change_log SET {IMAGE_COLUMN}=? WHERE id=?", (pack(kept) if kept else None, cid))
            n += 1
        return n


#: change-log rows :meth:`Rewind.erase` reads at a time (its memory: their images, not the log's)
ERASE_CHUNK = 20_000
