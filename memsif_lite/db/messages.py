"""messages, message_vec, message_fts."""

from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable, Iterator, Sequence, TypeVar

import numpy as np

from .. import partition
from ..embed import passage, passage_hash
from ..errors import StorageCorruptError
from ..fulltext import index_text
from ..int8 import quantize
from ..timeutil import from_stored, is_stored
from ..tokens import count_tokens
from ..types import Message
from . import bm25
from .base import Table, bump_counter, by_second
from .rows import MessageRow, from_i8
from .vector_cache import Allowed, VectorCache

__all__ = ["Messages", "cached_search", "cache_ready", "index_fulltext", "unindex_fulltext", "next_id", "retire_id",
           "high_water", "ID_HIGH", "malformed_times", "id_problems", "ID_LIMIT", "CONTENT_KEY",
           "SHORTEN_CONTENT_KEYS", "CREATED_AT", "created_at_of", "SAME_AS_KNOWN",
           "learnt"]

T = TypeVar("T")

_COLS = "id, speaker, text, at, session, source_id, utc_offset_min, tokens"

#: how many bytes of a passage's content hash (sha256) a message row keeps: the key of the
#: embedding cache (Messages.vector_by_hash); schema 17 and earlier kept all 32
CONTENT_KEY = 8
#: the SQL that shortens the keys an older file or export holds (the migration to schema 18, an import)
SHORTEN_CONTENT_KEYS = "UPDATE messages SET content_hash = substr(content_hash, 1, 8) WHERE length(content_hash) > 8"

#: ``messages.created_at`` of a message whose created_at is its ``known_at`` (schema 19: every
#: message added here; it differs only for one that came with a merge or an import)
SAME_AS_KNOWN = ""


def created_at_of(alias: str = "") -> str:
    """The SQL expression of a message's created_at (``alias``: the table's, e.g. ``"m."``)."""
    return f"coalesce(nullif({alias}created_at, '{SAME_AS_KNOWN}'), {alias}known_at)"


#: a message's created_at, read from ``messages`` without an alias
CREATED_AT = created_at_of()


def learnt(op: str, alias: str = "") -> str:
    """The condition ``{alias}known_at {op} ?`` (a message learnt by, or after, a record time) on the
    index ``messages_known_at`` (schema 20: of ``unixepoch(known_at)``), :func:`~.base.by_second`:
    its argument is given three times."""
    if op not in ("<=", ">"):
        raise ValueError(op)
    return by_second(f"{alias}known_at", op)


#: the id spaces users see, and the meta key of each one's high-water mark (sql/0010)
ID_HIGH = {"messages": "message_id_high", "core_facts": "fact_id_high"}


def high_water(con: Any, table: str) -> int:
    """The highest id ``table`` has ever used in this file: its current largest id, or the largest
    id deleted from it (meta's mark; garbage there reads as 0, the mark is only a floor). For
    messages also any id a queued step is keyed by: a new message must not inherit its steps."""
    queued = " coalesce((SELECT max(message_id) FROM work_queue), 0)," if table == "messages" else ""
    return int(con.execute(
        f"SELECT max(coalesce((SELECT max(id) FROM {table}), 0),{queued} "
        "coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key=?), 0))", (ID_HIGH[table],)).fetchone()[0])


#: ids memsif gives stay below this (2**53: exact in JSON everywhere); a file whose ids or marks
#: reach it (a planted mark, a crafted export) is damaged, not a reason for an OverflowError
ID_LIMIT = 2**53


def next_id(con: Any, table: str) -> int:
    """The id of a new row of ``table``: above every id it ever used, so an id is never reused
    (SQLite's own choice, max(id)+1, would give a forgotten last row's id to the next one)."""
    high = high_water(con, table)
    if high + 1 >= ID_LIMIT:
        raise _beyond(table, high)
    return high + 1


def _beyond(table: str, high: int) -> StorageCorruptError:
    return StorageCorruptError(f"the {table} ids of this file reach {high}, beyond any id memsif gives "
                               "(a damaged or crafted file); run `memsif check`")


def id_problems(con: Any) -> list[str]:
    """For ``check``: id spaces whose ids or high-water marks are beyond :data:`ID_LIMIT`."""
    return [f"{table}: ids or their high-water mark reach {high}, beyond any id memsif gives"
            for table in ID_HIGH if (high := high_water(con, table)) + 1 >= ID_LIMIT]


def retire_id(con: Any, table: str, rid: int) -> None:
    """Record, in the deleting transaction, that ``rid`` was used: no later row takes it."""
    con.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                "CAST(max(coalesce(CAST(value AS INTEGER), 0), CAST(excluded.value AS INTEGER)) AS TEXT)",
                (ID_HIGH[table], str(int(rid))))


def index_fulltext(con: Any, mid: int, speaker: str, text: str) -> None:
    """A message's full-text entry, its speaker and text as :func:`~memsif_lite.fulltext.index_text`
    rewrites them (add, merge and import write through here; migrations 8 and 9 in store.py, below
    this layer, rewrite old files' entries the same way)."""
    con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)",
                (mid, index_text(speaker), index_text(text)))


def unindex_fulltext(con: Any, mid: int, speaker: str, text: str) -> None:
    """Remove what :func:`index_fulltext` indexed for this message (FTS5 needs the same values)."""
    con.execute("INSERT INTO message_fts(message_fts, rowid, speaker, text) VALUES('delete', ?, ?, ?)",
                (mid, index_text(speaker), index_text(text)))


def malformed_times(con: Any) -> list[str]:
    """``memsif check``: messages whose time is not a stored time (reading them raises
    StorageCorruptError, :func:`~memsif_lite.timeutil.from_stored`), and messages whose record time
    (``known_at``: every message has one; an import sets them before it checks) is not one either:
    the reads by record time (:func:`learnt`) compare it as a stored time (one that ``unixepoch``
    reads otherwise, e.g. a Julian day, would be misplaced; NULL or one it cannot read, never
    found), and a created_at kept as :data:`SAME_AS_KNOWN` is read from it."""
    bad, unknown = [], []
    for mid, at, known in con.execute("SELECT id, at, known_at FROM messages"):
        if not is_stored(at):
            bad.append(mid)
        if not is_stored(known):
            unknown.append(mid)
    out = [f"{len(bad)} messages have a time that is not a memsif timestamp (first: message {min(bad)})"] \
        if bad else []
    if unknown:
        out.append(f"{len(unknown)} messages have no record time (known_at) that is a memsif timestamp "
                   f"(first: message {min(unknown)})")
    return out


def cached_search(con: Any, cache: VectorCache, qvec: np.ndarray, depth: int,
                  allowed: Allowed | None = None) -> list[tuple[int, float]] | None:
    """``cache.search`` once the cache is brought up to the caller's read snapshot (one is begun
    here when none is open), or None when it cannot answer (turned off, or unable to apply
    ``allowed`` exactly): the caller asks vec0, which gives the same ranking."""
    return cache.search(qvec, depth, allowed) if cache_ready(con, cache, allowed) else None


def cache_ready(con: Any, cache: VectorCache, allowed: Allowed | None = None) -> bool:
    """Whether ``cache`` can answer a search (among ``allowed``) once brought up to the caller's
    read snapshot (one is begun here when none is open): :func:`cached_search`'s first half."""
    if not cache.usable():
        return False
    times = allowed is not None and allowed.timed
    if con.get_autocommit():
        with con:
            cache.sync(times=times)
    else:
        cache.sync(times=times)
    return cache.usable(allowed)


class _Job:
    def __init__(self, fn: Callable[[], Any]):
        self.fn, self.done = fn, threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as e:  # raised in the caller's thread (Messages.nearest_beside)
            self.error = e

    def finish(self, interrupt: Callable[[], Any]) -> None:
        """Wait until the job has ended, even through a KeyboardInterrupt (raised once it has:
        until then the other thread is still using the connection); ``interrupt`` (the
        connection's) is called at the first one, so that a long query there stops soon."""
        interrupted: KeyboardInterrupt | None = None
        while True:
            try:
                self.done.wait()
                break
            except KeyboardInterrupt as e:
                if interrupted is None:
                    interrupt()
                interrupted = e
        if interrupted is not None:
            raise interrupted


class _Tasks:
    """Functions that two threads share out: each takes the next one not yet taken until none is
    left; each runs once."""

    def __init__(self, fns: Sequence[Callable[[], Any]]):
        self._fns = list(fns)
        self._out: list[Any] = [None] * len(self._fns)
        self._errors: list[BaseException | None] = [None] * len(self._fns)
        self._next = 0
        self._lock = threading.Lock()

    def work(self) -> None:
        while True:
            with self._lock:
                i = self._next
                if i >= len(self._fns):
                    return
                self._next += 1
            try:
                self._out[i] = self._fns[i]()
            except BaseException as e:  # raised in the caller's thread (results)
                self._errors[i] = e

    def results(self) -> list[Any]:
        """What each function returned, in order (once both threads are done); its error if one raised."""
        for e in self._errors:
            if e is not None:
                raise e
        return self._out


class _Beside:
    """The threads that run :meth:`Messages.nearest_beside`'s second half, kept between queries (a
    thread started per query made the caller wait until the new thread was scheduled: 3-10 ms a
    query on the 2-core sandbox under load, 2026-12-02): an idle one takes the job, else a new one
    is started (memories queried at once in several threads get one each). A forked child starts
    its own."""

    def __init__(self) -> None:
        self._forked()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        """A new lock and no idle thread (in a forked child: the parent's threads are not there,
        and its lock may have been held by one of them at the fork)."""
        self._lock = threading.Lock()
        self._generation = getattr(self, "_generation", -1) + 1
        self._idle: list[queue.SimpleQueue[_Job]] = []

    def submit(self, fn: Callable[[], Any]) -> _Job:
        job = _Job(fn)
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
            generation = self._generation
        if jobs is None:
            jobs = queue.SimpleQueue()
            threading.Thread(target=self._loop, args=(jobs, generation), name="memsif-beside", daemon=True).start()
        jobs.put(job)
        return job

    def _loop(self, jobs: queue.SimpleQueue[_Job], generation: int) -> None:
        while True:
            job = jobs.get()
            job.run()
            with self._lock:  # idle again before the caller hears of it: its next job finds this thread
                if self._generation == generation:
                    self._idle.append(jobs)
            job.done.set()
            del job  # an idle thread holds nothing of the memory it last served


_BESIDE = _Beside()


def _row(r: tuple) -> MessageRow:
    return MessageRow(*r)  # the columns of _COLS, in MessageRow's order


def to_message(r: MessageRow) -> Message:
    return Message(r.id, r.speaker, r.text, from_stored(r.at), r.session, r.source_id, r.utc_offset_min)


class Messages(Table):
    def __init__(self, con, cache: VectorCache):
        super().__init__(con)
        self.cache = cache
        self.common_words = bm25.CommonWords()  # which query words are common (bm25), while nothing is written

    def insert(self, *, speaker: str, text: str, at: str, session: str | None, source_id: str | None,
               content_hash: bytes, created_at: str, vector: np.ndarray, utc_offset_min: int | None = None,
               tokens: int | None = None, code: np.ndarray | None = None, mid: int | None = None) -> int:
        """The message row (with its UTC offset and token count; learnt at ``created_at``: its record
        time), its int8 vector (``code``: ``quantize(vector)``, when the caller has it) and its
        full-text row; its id is ``mid`` (from :meth:`new_ids`) or the next one."""
        mid = next_id(self.con, "messages") if mid is None else mid
        self.con.execute(
            "INSERT INTO messages(id, speaker, text, at, session, source_id, content_hash, created_at, known_at, "
            "utc_offset_min, tokens) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
            (mid, speaker, text, at, session, source_id, content_hash[:CONTENT_KEY], SAME_AS_KNOWN, created_at,
             utc_offset_min, count_tokens(text) if tokens is None else tokens))
        code = quantize(vector) if code is None else code
        self.con.execute("INSERT INTO message_vec(rowid, embedding) VALUES(?, vec_int8(?))", (mid, code.tobytes()))
        self.cache.stage_add(mid, code, at)
        index_fulltext(self.con, mid, speaker, text)
        return mid

    def new_ids(self) -> Iterator[int]:
        """The ids of messages :meth:`insert` stores one after the other in one transaction, each
        queued for its place step and nothing else written in between (``add``): each is
        :func:`next_id`'s, the one before it plus one, without asking the file again."""
        mid = next_id(self.con, "messages")
        while True:
            if mid >= ID_LIMIT:
                raise _beyond("messages", mid - 1)
            yield mid
            mid += 1

    def vector_by_hash(self, content_hash: bytes) -> np.ndarray | None:
        """The stored vector of a message whose passage has this content hash (the file is the
        embedding cache). The file keeps the hash's first :data:`CONTENT_KEY` bytes (schema 18:
        sql/0018_compact_keys.sql); a row whose key matches is taken only if its own passage hashes
        to ``content_hash``, so a key shared by chance, or made on purpose, never gives back another
        passage's vector."""
        for speaker, text, vec in self.con.execute(
                "SELECT m.speaker, m.text, v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
                "WHERE substr(m.content_hash, 1, 8)=?", (content_hash[:CONTENT_KEY],)):
            if passage_hash(passage(speaker, text)) == content_hash:
                return from_i8(vec)
        return None

    def vector(self, mid: int) -> np.ndarray | None:
        row = self.con.execute("SELECT embedding FROM message_vec WHERE rowid=?", (mid,)).fetchone()
        return None if row is None else from_i8(row[0])

    def get(self, mid: int) -> MessageRow | None:
        r = self.con.execute(f"SELECT {_COLS} FROM messages WHERE id=?", (mid,)).fetchone()
        return None if r is None else _row(r)

    def many(self, ids: list[int]) -> dict[int, MessageRow]:
        rows = self.rows_in(f"SELECT {_COLS} FROM messages WHERE id IN ({{marks}})", ids)
        return {r[0]: MessageRow(*r) for r in rows}

    def all(self) -> list[Message]:
        return [to_message(_row(r)) for r in self.con.execute(f"SELECT {_COLS} FROM messages ORDER BY id")]

    def exists(self, mid: int) -> bool:
        return self.con.execute("SELECT 1 FROM messages WHERE id=?", (mid,)).fetchone() is not None

    def with_source(self, source_id: str, speaker: str | None) -> list[int]:
        """Ids of the messages with this ``source_id`` (and speaker, when given: the pair ingest's
        ``skip_existing`` treats as one message), in order."""
        if speaker is None:
            rows = self.con.execute("SELECT id FROM messages WHERE source_id=? ORDER BY id", (source_id,))
        else:
            rows = self.con.execute("SELECT id FROM messages WHERE source_id=? AND speaker=? ORDER BY id",
                                    (source_id, speaker))
        return [int(r[0]) for r in rows]

    def missing(self, ids: Sequence[int]) -> list[int]:
        """Those of ``ids`` that are not stored, in the order given."""
        have = {r for (r,) in self.rows_in("SELECT id FROM messages WHERE id IN ({marks})", list(dict.fromkeys(ids)))}
        return [m for m in ids if m not in have]

    @property
    def cache_loaded(self) -> bool:
        """The vector cache has been loaded (a dense search would not load it first)."""
        return self.cache.loaded

    def load_cache(self) -> None:
        """Bring the vector cache up to the caller's read snapshot (one is begun here when none is
        open), loading it when it is not: what the first dense search after opening does first
        (nothing while it cannot answer: this process's writes staged in an open transaction)."""
        cache_ready(self.con, self.cache)

    def nearest(self, qvec: np.ndarray, depth: int) -> list[tuple[int, float]]:
        """(id, cosine distance) of the ``depth`` nearest messages: from the in-process cache
        (checked against the file first, in one read snapshot), else from vec0 — same ranking."""
        hits = self.cached_nearest(qvec, depth)
        return hits if hits is not None else self.knn("message_vec", qvec, depth)

    def cached_nearest(self, qvec: np.ndarray, depth: int, allowed: Allowed | None = None
                       ) -> list[tuple[int, float]] | None:
        """:meth:`nearest` from the in-process cache, among the messages ``allowed`` admits when
        given; None when the cache cannot answer (the caller asks vec0)."""
        return cached_search(self.con, self.cache, qvec, depth, allowed)

    def nearest_beside(self, qvec: np.ndarray, depth: int, beside: Callable[[], T],
                       also: Sequence[Callable[[], Any]] = ()) -> tuple[list[tuple[int, float]], T, list[Any]]:
        """``(self.nearest(qvec, depth), beside(), [f() for f in also])``, overlapped on a large file:
        once the cache holds :data:`~memsif_lite.partition.MIN_ROWS` rows and is brought up to the
        read snapshot the caller holds, ``beside`` (the BM25 query: its own SQL) runs in a second
        thread while this one scores the cached rows; ``also`` (other rankings that read no SQL:
        unit caches already brought to the snapshot, ``Structure.prepared_dense``) are taken one by
        one by whichever thread is free first. SQLite and numpy's products run without the GIL, so
        on two cores the slower of the two threads sets the time, not the sum. The results are
        those of running everything one after the other; an error in either thread is raised
        here, after both have ended."""
        cache = self.cache
        if self.con.get_autocommit() or cache.size < partition.MIN_ROWS or not cache_ready(self.con, cache):
            return self.nearest(qvec, depth), beside(), [f() for f in also]
        rest = _Tasks(also)

        def second() -> T:
            try:
                return beside()
            finally:
                rest.work()

        job = _BESIDE.submit(second)
        try:
            hits = cache.search(qvec, depth)
            rest.work()
        finally:
            job.finish(self.con.interrupt)
        if job.error is not None:
            raise job.error
        return hits, job.value, rest.results()

    def dense(self, qvec: np.ndarray, depth: int) -> list[int]:
        return [m for m, _ in self.nearest(qvec, depth)]

    def bm25(self, terms: Sequence[str], speaker_weight: float, depth: int) -> list[int]:
        """The best ``depth`` messages for the OR of ``terms`` by BM25, bounded on large files
        (:mod:`memsif_lite.db.bm25`)."""
        return bm25.ranked(self.con, terms, speaker_weight, depth, words=self.common_words)

    def delete(self, mid: int) -> None:
        """The row, its vector and its full-text entry (provenance rows must be gone first)."""
        row = self.con.execute("SELECT speaker, text FROM messages WHERE id=?", (mid,)).fetchone()
        unindex_fulltext(self.con, mid, row[0], row[1])
        self.con.execute("DELETE FROM message_vec WHERE rowid=?", (mid,))
        self.con.execute("DELETE FROM messages WHERE id=?", (mid,))
        retire_id(self.con, "messages", mid)
        self.bump_epoch()
        self.cache.stage_delete(mid)

    def bump_epoch(self) -> None:
        """Tell other processes' vector caches that message vectors were removed or rewritten
        (in the caller's transaction)."""
        bump_counter(self.con, "vector_epoch")
