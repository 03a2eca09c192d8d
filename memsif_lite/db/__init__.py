"""The data-access layer: every SQL statement outside ``sql/`` (DDL) and ``store.py`` (opening,
migrations, transactions) lives in this package, grouped by table, returning dataclasses.

:class:`Database` is what the pipelines receive: one connection, one attribute per table group

* ``messages``  — messages, message_vec (through the in-process ``vectors`` cache), message_fts
* ``structure`` — segments, trajectories, message_units and their vectors
* ``facts``     — CoreFacts with sources, history and vectors
* ``clusters``  — candidate clusters C_k and ActiveFacts
* ``admin``     — meta, llm_calls, counts, export/import, check, backup
* ``queue``     — the work queue of pipeline steps still to run
* ``filters``   — filtered rankings and listings (speaker, session, time), "already present"
* ``tombstones`` — hashes of forgotten messages; ``merge`` — what ``memsif merge`` reads and moves
* ``changes``   — the change log (``facts`` tells it what every CoreFact write touches)
* ``overview``  — whole-file listings for the HTML view (:mod:`memsif_lite.view`)
* ``items``     — session items: non-chat JSON kept with a session, never indexed
* ``partition`` — the dense partition of message vectors (centroids, each message's list)

The BM25 ranking both ``messages`` and ``filters`` run is :mod:`memsif_lite.db.bm25` (the OR of
the question's words, bounded on large files).

Transactions are the caller's: :meth:`Database.write` (``BEGIN IMMEDIATE``) and
:meth:`Database.read` (one consistent snapshot). SQLite errors leave as ``StorageError``.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import apsw

from .. import store
from .admin import Admin
from .bm25 import or_query
from .changes import ChangeLog, RecordedFacts
from .clusters import Clusters
from .facts import CoreFacts, from_messages
from .filtering import Filtering
from .items import ItemRow, SessionItems
from .merge import MergeRows, Tombstones
from .messages import Messages, to_message
from .overview import Overview
from .partition import PartitionRows
from .queue import Queue, QueuedStep
from .rows import FactRow, MessageRow, Unit, entity_json, f32
from .structure import UNIT_TABLES, Structure
from .vector_cache import VectorCache

__all__ = ["Database", "QueuedStep", "Unit", "FactRow", "MessageRow", "UNIT_TABLES", "entity_json", "f32", "to_message",
           "from_messages", "ItemRow", "or_query"]


class Database:
    def __init__(self, con: apsw.Connection):
        self.con = con
        dim = int(store.read_meta(con).get("embedding_dim", "0"))
        self.vectors = VectorCache(con, dim)
        self.unit_vectors = {"segment": VectorCache(con, dim, "segment_vec"),
                             "trajectory": VectorCache(con, dim, "trajectory_vec")}
        self.fact_vectors = VectorCache(con, dim, "fact_vec")
        self.caches = [self.vectors, *self.unit_vectors.values(), self.fact_vectors]
        self.messages = Messages(con, self.vectors)
        self.structure = Structure(con, self.unit_vectors)
        self.changes = ChangeLog(con, self.fact_vectors)
        self.facts: CoreFacts = RecordedFacts(con, self.changes, self.fact_vectors)
        self.clusters = Clusters(con)
        self.admin = Admin(con, self.caches)
        self.queue = Queue(con)
        self.filters = Filtering(con, self.messages, self.structure)
        self.tombstones = Tombstones(con)
        self.merge = MergeRows(con, self.caches)
        self.overview = Overview(con)
        self.items = SessionItems(con)
        self.partition = PartitionRows(con, dim)
        self._writes = 0  # write transactions begun (:meth:`write_stamp`)
        self._writing = False

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction (see :func:`memsif_lite.store.write`); the vector
        cache applies what it staged when the transaction commits, and drops it otherwise."""
        try:
            with store.write(self.con) as con:
                for c in self.caches:
                    c.begin()
                self._writes += 1
                self._writing = True
                try:
                    yield con
                finally:
                    self._writing = False
        except BaseException:
            for c in self.caches:
                c.rollback()
            raise
        with store.map_errors(), contextlib.ExitStack() as every:
            for c in self.caches:  # each cache is reached even if another one fails
                every.callback(c.commit)

    @contextlib.contextmanager
    def read(self) -> Iterator[None]:
        """One consistent read snapshot (a deferred transaction), unless a transaction is open."""
        with store.map_errors():
            if not self.con.get_autocommit():
                yield
                return
            with self.con:
                yield

    @contextlib.contextmanager
    def write_or_join(self) -> Iterator[None]:
        """A write transaction, or the one already open on this connection (offline inline
        processing runs its steps inside ``add``'s transaction)."""
        if self.in_transaction:
            yield
            return
        with self.write():
            yield

    def write_stamp(self) -> tuple[int, int] | None:
        """Inside a transaction of :meth:`write`: a stamp that :meth:`unchanged_since` accepts while
        nothing has been written since (this connection's count of rows written, ``total_changes``,
        is the same, and no other connection can write while it holds the write lock), so what was
        read after taking it still holds; None outside one. A step whose decision is made and
        applied in one transaction (offline, inside ``add``'s) applies what it read when deciding
        instead of reading it again."""
        return (self._writes, self.con.total_changes()) if self._writing else None

    def unchanged_since(self, stamp: tuple[int, int] | None) -> bool:
        """Whether nothing was written since :meth:`write_stamp` gave ``stamp``, in the same transaction."""
        return stamp is not None and self._writing and stamp == (self._writes, self.con.total_changes())

    @property
    def in_transaction(self) -> bool:
        return not self.con.get_autocommit()

    def close(self) -> None:
        self.con.close()
