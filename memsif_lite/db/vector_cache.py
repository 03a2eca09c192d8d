"""An in-process copy of ``message_vec`` for fast, exact dense search. The file stays the only
source of truth; the cache is a view of it that is checked before every query.

* **Loaded lazily**, at the first dense query (for the message vectors: while that query's
  question is embedded, :func:`memsif_lite.pipelines.loading_beside`), from vec0's chunks: one
  query for their validity bits and rowids, then their codes by blob I/O (:meth:`VectorCache._load_chunks`).
* **This process's writes** are staged as they happen and applied when their transaction
  commits (dropped on rollback); while that transaction is open, queries see them overlaid on
  the cache (exactly: the staged rows are scored like the others), unless another process had
  committed since the last sync, when they go to vec0.
* **Other processes' writes** are detected before each query: ``PRAGMA data_version`` changes
  when another connection commits (read inside the snapshot, after its first read: before that
  it can lag one transaction behind). Then, in the same read snapshot, the file's
  ``vector_epoch`` (bumped in the same transaction by every deletion or import) is compared
  with the cache's: equal means only appends happened and the rows above the high-water id are
  loaded; different means a full reload. So a query never returns a message forgotten, nor
  misses one committed, before its snapshot began.
* **Ranking** is sqlite-vec's, bit for bit: int8 codes, the query quantised the same way, exact
  integer dot products, cosine distance in double rounded to float32 (``int8.cosine_distances``),
  ties by id (taken for the rows a float32 pass over every scanned row leaves near the ``k``-th:
  :meth:`VectorCache._ranked`) — up to dimension 1,023 (the bundled model's is 384). Above it a sum can pass 2²⁴,
  where float32 rounds, in sqlite-vec's sums as in the cache's, each in its own order: distances
  then differ in their last digits (seen at dimension 1,536: a cold review's finding, 2026-12-02).
* **Filtered search** (:class:`Allowed`): the message cache holds each message's time (its
  stored text, ``TIME_BYTES`` bytes) beside its vector, so a time window (``since`` / ``until`` /
  ``as_of``) is one vectorised comparison and an id set (speakers, sessions) one ``isin``; only
  the rows that pass are ranked — the same ranking as vec0's KNN with ``rowid IN (...)``. A
  message's time never changes in place (rows are only added and deleted), so it follows the
  vectors' coherence rules. A cache holding a time it cannot compare exactly as SQLite would
  (longer than ``TIME_BYTES``, not ASCII: a damaged file), or a vector without its message,
  declines time windows and vec0 serves them.
* **Memory**: ``dim + 12`` bytes per vector (int8 codes, id, inverse norm: computed by the first
  search that scans it), plus ``TIME_BYTES`` per message (mapped in when a time window first needs
  them) — 42 MB for 100,000 messages of dimension 384 — plus one block of ``BLOCK × dim``
  float32 scratch (1.5 MB) for the blockwise dequantisation. Above ``MAX_BYTES`` the cache turns
  itself off and vec0 serves.
"""

from __future__ import annotations

import itertools
import logging
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import apsw
import numpy as np

from ..int8 import NEAR_MARGIN, cosine_distances, inverse_norms, quantize, squared_norms
from .. import partition as dense
from ..partition import NONE, Centroids, probe
from .partition import EMPTY, ListMap, PartitionRows

__all__ = ["VectorCache", "Allowed", "MAX_BYTES", "BLOCK", "TIME_BYTES"]

log = logging.getLogger("memsif_lite")

#: rows dequantised at a time (fits the CPU cache; larger blocks measured slower)
BLOCK = 1024
#: the most memory the cache may hold; a bigger file is searched through vec0 instead
MAX_BYTES = 1 << 30
#: bytes of a stored time held per message (``YYYY-MM-DDTHH:MM:SS.ffffff``, the longest one memsif writes)
TIME_BYTES = 26
#: arrays of at least this many bytes are mapped in up front (:func:`_mapped`)
_MAPPED_FROM = 1 << 20
#: arrays of at least this many bytes are touched by two threads (:func:`_touch`)
_TOUCHED_FROM = 64 << 20
#: vec0 chunks read into the buffer at a time by a full load (64 of 64 rows: 1.5 MB at dimension 384)
_GROUP = 64
#: rows whose inverse norms are computed together, at the first search that scans one of them
NORM_ROWS = 256


@dataclass(frozen=True)
class Allowed:
    """The rows a filtered search may return: those whose message time (``messages.at``, the
    stored text) lies within ``[since, until]`` (each bound optional, inclusive, compared as text as
    SQLite does) and, when ``ids`` is given, whose id is one of ``ids``. Times only in the message
    cache; a unit cache takes ``ids``."""

    since: str | None = None
    until: str | None = None
    ids: np.ndarray | None = None

    @property
    def timed(self) -> bool:
        return self.since is not None or self.until is not None

    def admits(self, rid: int, at: str | None) -> bool:
        """One row (staged in this process's transaction) by the same rule."""
        if self.timed and (at is None or (self.since is not None and at < self.since)
                           or (self.until is not None and at > self.until)):
            return False
        return self.ids is None or bool(np.isin(rid, self.ids))


class VectorCache:
    """One vec0 table in memory. ``table="message_vec"`` (rows are only appended or deleted, and
    deletions bump ``vector_epoch``) syncs incrementally; a unit table (``segment_vec``,
    ``trajectory_vec``, ``fact_vec``: rows rewritten in place as segments grow, facts reworded) reloads whenever another
    process has committed."""

    def __init__(self, con: Any, dim: int, table: str = "message_vec"):
        self.con, self.dim, self.table = con, dim, table
        self.append_only = table == "message_vec"
        self._codes = np.empty((0, dim), dtype=np.int8)
        self._ids = np.empty(0, dtype=np.int64)
        self._inv = np.empty(0, dtype=np.float32)  # each row's 1 / norm (int8.inverse_norms)
        self._times = np.empty(0, dtype=f"S{TIME_BYTES}")  # message cache: each row's time (else unused)
        self._timed = True              # every cached row's time is held exactly (see the module docstring)
        self._n = 0
        self._loaded = False
        self._disabled = False
        self._dv: int | None = None     # data_version at the last sync
        self._epoch = ""                # vector_epoch at the last sync (+ this process's bumps)
        self._hw = 0                    # every id <= _hw committed by others is in the cache
        self._staged: list[tuple[str, int, np.ndarray | None, str | None]] = []
        self._scratch = np.empty((BLOCK, dim), dtype=np.float32)
        self._lists = np.empty(0, dtype=np.uint16)  # message cache: each row's list in the partition
        self._normed = np.empty(0, dtype=bool)  # per NORM_ROWS positions: their inverse norms are computed
        self._part = PartitionRows(con, dim)
        self._stamp: str | None = None  # partition_stamp at the last load of the lists
        self._centroids: Centroids | None = None
        self._list_map: ListMap = EMPTY  # the file's lists, by message id
        self._index: _Index | None = None
        self._times_loaded = False
        self._others = True
        self._in_txn = False            # inside this process's write transaction (begin .. commit/rollback)
        self._read_in_txn = False       # and rows were loaded during it

    # -- this process's writes --------------------------------------------------------------
    def stage_add(self, mid: int, code: np.ndarray, at: str) -> None:
        """A message added, with its stored time."""
        self._staged.append(("add", mid, code, at))

    def stage_delete(self, mid: int) -> None:
        self._staged.append(("delete", mid, None, None))

    def stage_set(self, rid: int, code: np.ndarray) -> None:
        """A row rewritten (or added: a unit cache does not track a high-water id)."""
        self._staged.append(("set", rid, code, None))

    @property
    def has_staged(self) -> bool:
        return bool(self._staged)

    def rollback(self) -> None:
        self._staged.clear()
        if self._read_in_txn:  # rows were read inside the transaction: some may never have existed
            self._reset()
        self._in_txn = self._read_in_txn = False

    def invalidate(self) -> None:
        """Forget everything (after a bulk rewrite such as an import): reload at the next query."""
        self._staged.clear()
        self._reset()

    def begin(self) -> None:
        """Inside this process's write transaction: note whether others committed since the last
        sync (then this process's ids may not be the next ones, and the high-water id stays)."""
        self._others = self._data_version() != self._dv
        self._in_txn, self._read_in_txn = True, False
        self._staged.clear()  # nothing staged outlives its transaction

    def commit(self) -> None:
        """This process's transaction committed: apply what it staged."""
        staged, self._staged = self._staged, []
        read_in_txn = self._read_in_txn
        self._in_txn = self._read_in_txn = False
        if not self._loaded or not staged:
            return
        others = self._others
        if others and not self.append_only and not read_in_txn:
            self._reset()  # someone else rewrote rows too: reload at the next query
            return
        # (a unit cache loaded inside the transaction holds its writes already: applying them again
        # changes nothing, a set row being looked up by id and a deleted one being absent)
        for op, mid, code, when in staged:
            # an added row is appended as it is: only a delete or a rewrite looks for its id (a scan
            # of every cached id, 1 ms a row at a million, which ingest would pay for every message)
            at = np.flatnonzero(self._ids[:self._n] == mid) if op != "add" else np.empty(0, dtype=np.intp)
            if op == "delete":
                for i in at[::-1]:  # swap with the last row (order does not matter: ranking sorts)
                    last = self._n - 1
                    self._codes[i], self._ids[i] = self._codes[last], self._ids[last]
                    self._inv[i] = inverse_norms(self._codes[i:i + 1])[0]  # (the last row's may not be computed yet)
                    if self.append_only:
                        self._times[i], self._lists[i] = self._times[last], self._lists[last]
                    self._n, self._index = last, None
                if self.append_only:
                    self._epoch = str(int(self._epoch) + 1)
            elif op == "set" and len(at):
                assert code is not None
                self._codes[at[0]] = code
                self._inv[at[0]] = inverse_norms(code[None, :])[0]
            else:
                assert code is not None
                self._append(np.array([mid], dtype=np.int64), code[None, :], None if when is None else [when])
                if not others:
                    self._hw = max(self._hw, mid)
        if self.append_only and any(op == "delete" for op, _, _, _ in staged):
            # a deleted newest id is free again (no AUTOINCREMENT): another process may reuse it,
            # so the high-water mark comes down to what is held (sync skips rows it already has)
            self._hw = min(self._hw, int(self._ids[:self._n].max(initial=0)))

    # -- reads -----------------------------------------------------------------------------
    def usable(self, allowed: Allowed | None = None) -> bool:
        """Searchable now: nothing staged, or this process's staged writes on top of a cache that
        was current when their transaction began (nobody else can commit while it is open), which
        ``search`` overlays exactly — a unit cache always: one not current is loaded again inside
        the transaction, with its writes, which the overlay then repeats to no effect; with
        ``allowed``, also able to apply it exactly (a time window needs every row's time: known
        only once loaded, so ask again after :meth:`sync`)."""
        if self._disabled or (self._staged and self.append_only and (not self._loaded or self._others)):
            return False
        return allowed is None or not allowed.timed or (self.append_only and self._times_loaded and self._timed and all(
            op != "add" or _time_code([when]) is not None for op, _, _, when in self._staged))

    def sync(self, *, times: bool = False) -> None:
        """Bring the cache up to the caller's read snapshot (call inside one); ``times``: also hold
        every message's time (loaded at the first time-filtered search, not before)."""
        epoch = self._file_epoch()  # first: starts the snapshot, so data_version below is current
        dv = self._data_version()
        stamp = self._part.stamp() if self.append_only else None  # this process's own writes too
        if not (self._loaded and dv == self._dv):
            full = not self._loaded or epoch != self._epoch or not self.append_only
            if full and self.append_only:
                self._read_partition(stamp)  # first: a full load lays the rows out list by list
            try:
                self._sync_rows(full)
            except ValueError as e:  # vectors it cannot hold (an older file's float32, read as it is): vec0 answers
                log.info("vector cache: %s off (%s)", self.table, e)
                self._disabled = True
                self._reset()
                return
            self._dv, self._epoch, self._loaded = dv, epoch, True
            self._read_in_txn = self._read_in_txn or self._in_txn
            if self.nbytes > MAX_BYTES:
                self._disabled = True
                self._reset()
                return
        if self.append_only and stamp != self._stamp:
            self._load_lists(stamp)
        if times and self.append_only and not self._times_loaded:
            self._load_times()

    def _sync_rows(self, full: bool) -> None:
        if full:
            self._reset()
            if not self._load_chunks():
                self._load_rows(self.con.execute(f"SELECT rowid, embedding, NULL FROM {self.table}"), set())
            return
        cur = self.con.execute("SELECT m.id, v.embedding, m.at FROM messages m JOIN message_vec v "
                               "ON v.rowid=m.id WHERE m.id > ?", (self._hw,))
        self._load_rows(cur, set(self._ids[:self._n][self._ids[:self._n] > self._hw].tolist()))

    def _load_rows(self, cur: Any, present: set[int]) -> None:
        while batch := list(itertools.islice(cur, 4096)):  # in batches: no large transient copy
            rows = [r for r in batch if r[0] not in present]
            if not rows:
                continue
            if not all(isinstance(r[1], bytes) and len(r[1]) == self.dim for r in rows):
                raise ValueError(f"{self.table} holds vectors that are not {self.dim} int8 codes")
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            codes = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.int8).reshape(len(rows), self.dim)
            self._append(ids, codes, [r[2] for r in rows] if self.append_only else None)
            self._hw = max(self._hw, int(ids.max()))

    def _load_chunks(self) -> bool:
        """Load every row from vec0's own storage as vec0's scans read it: each chunk's validity
        bitmap and rowids (``{table}_chunks``, one query) and its int8 codes, read by SQLite's blob
        I/O straight into a small reused buffer (vec0 opens the same blobs, by chunk id) — no
        Python object per chunk, no copy of every code through one; False (nothing loaded) when
        the chunks do not look as sqlite-vec 0.1 writes them, and the caller reads row by row.
        With a partition, the rows are laid out list by list (the unlisted last): a search then
        scans each probed list as one contiguous run. On two cores a helper thread puts each group
        in place while the next one is read (:class:`_Placing`)."""
        t = self.table
        blob = None
        try:
            total = int(self.con.execute(f"SELECT count(*) FROM {t}_rowids").fetchone()[0])
            meta = self.con.execute(f"SELECT chunk_id, size, validity, rowids FROM {t}_chunks").fetchall()
            valid = _valid_many([(size, v, r, None) for _, size, v, r in meta], self.dim, t)
            ids = np.frombuffer(b"".join(r[3] for r in meta), dtype="<i8")[valid] if meta else np.empty(0, np.int64)
            if len(ids) != total:
                raise ValueError(f"{t}: {len(ids)} valid rows in the chunks, {total} rowids")
            dest: np.ndarray | None = None  # each valid row's position (None: in chunk order)
            if self.append_only and self._centroids is not None:
                lists = self._list_map.lookup(ids)
                dest = np.empty(total, dtype=np.int64)
                order = np.argsort(lists, kind="stable")  # a stable counting sort: list by list, the unlisted last
                dest[order] = np.arange(total)
            self._grow(total, total // 16)  # room for the adds that follow, without a copy of everything
            sizes = [int(r[1]) for r in meta]
            slot = np.cumsum([0] + sizes)  # each chunk's first slot among all chunks' slots
            held = np.concatenate(([0], np.cumsum(valid)))  # valid rows before each slot
            bounds = list(range(0, len(meta), _GROUP)) + [len(meta)]  # chunks read into the buffer at once
            widest = max((int(slot[e] - slot[s]) for s, e in zip(bounds, bounds[1:], strict=False)), default=0)
            ids_to, codes_to = self._ids, self._codes

            def place(buf: np.ndarray, a: int, b: int) -> None:
                codes = buf.reshape(-1, self.dim)
                v = valid[a:b]
                if not v.all():
                    codes = codes[v]
                r0, r1 = int(held[a]), int(held[b])
                to: Any = slice(r0, r1) if dest is None else dest[r0:r1]
                ids_to[to], codes_to[to] = ids[r0:r1], codes  # inverse norms: at the first search (_normalise)

            with _Placing(place, widest * self.dim, len(bounds) > 2) as placing:
                for g in bounds[:-1]:
                    group = meta[g:g + _GROUP]
                    a, b = int(slot[g]), int(slot[g + len(group)])
                    buf = placing.buffer()[:(b - a) * self.dim]
                    for (cid, size, _, _), at in zip(group, slot[g:g + len(group)].tolist(), strict=True):
                        if blob is None:
                            blob = self.con.blob_open("main", f"{t}_vector_chunks00", "vectors", cid, False)
                        else:
                            blob.reopen(cid)
                        if blob.length() != size * self.dim:
                            raise ValueError(f"{t}: chunk {cid} holds {blob.length()} bytes of codes, "
                                             f"not {size * self.dim}")
                        blob.read_into(buf, (at - a) * self.dim, size * self.dim)
                    placing.put(buf, a, b)
        except (apsw.SQLError, apsw.AbortError, ValueError) as e:
            log.info("vector cache: reading %s row by row (%s)", t, e)
            self._reset()
            return False
        finally:
            if blob is not None:
                blob.close()
        n = self._n = total
        self._hw = int(self._ids[:n].max(initial=0))
        if self.append_only:  # (the times: zeros, b"", as mapped in; loaded at the first time window)
            if dest is None:
                self._lists[:n] = self._list_map.lookup(self._ids[:n])
            else:
                self._lists[:n] = lists[order]  # the lists as laid out (sorted by the order above)
                assert self._centroids is not None
                self._index = _Index.contiguous(self._lists[:n], self._centroids.lists)
        return True

    def _load_times(self) -> None:
        """Every cached message's time (a vector without its message, or a time that cannot be
        compared exactly here, turns time windows over to vec0)."""
        n, self._timed = self._n, True  # every row's time is read again below
        order = np.argsort(self._ids[:n], kind="stable")
        sorted_ids = self._ids[:n][order]
        found = np.zeros(n, dtype=bool)
        cur = self.con.execute("SELECT id, at FROM messages ORDER BY id")
        while batch := list(itertools.islice(cur, 65536)):
            ids = np.fromiter((r[0] for r in batch), dtype=np.int64, count=len(batch))
            at = np.searchsorted(sorted_ids, ids)
            hit = at < n
            hit[hit] = sorted_ids[at[hit]] == ids[hit]
            if not hit.any():
                continue
            held = _time_code([r[1] for r, h in zip(batch, hit, strict=True) if h])
            if held is None:
                self._timed = False
                continue
            self._times[order[at[hit]]] = held
            found[order[at[hit]]] = True
        if not found.all():
            self._timed = False
        self._times_loaded = True

    def _read_partition(self, stamp: str | None) -> None:
        """The partition's centroids and each message id's list, as the file holds them now."""
        self._stamp = stamp
        self._centroids = None if stamp is None else self._part.current()
        self._list_map = EMPTY if self._centroids is None else self._part.list_map(self._centroids)

    def _load_lists(self, stamp: str | None) -> None:
        """The partition changed in the file: each cached row's list again. Rows laid out list by
        list stay so while the lists are the same version (a row's list never changes within
        one: newly listed rows were unlisted, and are scanned as such)."""
        held = self._centroids
        self._read_partition(stamp)
        c = self._centroids
        if c is None or held is None or c.version != held.version or c.lists != held.lists:
            self._index = None
        self._lists[:self._n] = self._list_map.lookup(self._ids[:self._n])
        if self._index is not None and not self._index.is_contiguous:
            self._index = None

    def search(self, qvec: np.ndarray, k: int, allowed: Allowed | None = None) -> list[tuple[int, float]]:
        """(id, cosine distance) of the ``k`` nearest messages, nearest first, ties by id; only
        among the rows ``allowed`` admits, when given (check :meth:`usable` with it first); inside
        this process's write transaction, with what it staged (rows set, added, deleted)."""
        qf = quantize(qvec).astype(np.float32)  # the query quantised as sqlite-vec does
        rows = self._probed_rows(qf, k) if allowed is None else self._allowed_rows(allowed)
        if not self._staged:
            return self._search_rows(qf, k, rows)
        latest: dict[int, tuple[np.ndarray | None, str | None]] = {}
        for op, rid, code, when in self._staged:
            latest[rid] = (None if op == "delete" else code, when)
        hits = [h for h in self._search_rows(qf, k + len(latest), rows) if h[0] not in latest]
        live = [(rid, code) for rid, (code, when) in latest.items()
                if code is not None and (allowed is None or allowed.admits(rid, when))]
        if live and k > 0:
            codes = np.stack([c for _, c in live])
            dist = cosine_distances(codes.astype(np.float32) @ qf, squared_norms(codes), float(qf @ qf))
            hits += [(rid, float(d)) for (rid, _), d in zip(live, dist, strict=True)]
        return sorted(hits, key=lambda h: (h[1], h[0]))[:k]

    def _probed_rows(self, qf: np.ndarray, k: int) -> np.ndarray | list[tuple[int, int]] | None:
        """The rows an unfiltered search scans: all (None) below ``MIN_ROWS`` or without a
        partition; else those of the nearest lists holding :func:`~memsif_lite.partition.scan_budget`
        rows, and every row with no list yet — as runs of positions (start, end)
        when the rows are laid out list by list, else as positions."""
        if self._centroids is None or self._n < dense.MIN_ROWS or not self.append_only:
            return None
        ix = self._index
        if ix is None or len(ix.sizes) != self._centroids.lists or self._n - ix.n > max(4096, ix.n // 20):
            # (rows appended since the index was made are scanned as they are, up to a twentieth more)
            ix = self._index = _Index.build(self._lists[:self._n], self._centroids.lists)
        chosen = np.sort(probe(self._centroids.vectors, ix.sizes, qf, dense.scan_budget(self._n, k)))
        order = ix.order
        if order is None:
            runs = [(int(ix.starts[j]), int(ix.starts[j + 1])) for j in chosen.tolist()]
            return runs + [(int(ix.starts[-1]), self._n)]  # the unlisted, then whatever came since
        parts = [order[ix.starts[j]:ix.starts[j + 1]] for j in chosen.tolist()]
        rows = np.concatenate(parts + [ix.unlisted, np.arange(ix.n, self._n)])
        rows.sort()  # in memory order: the gather reads forward
        return rows

    def _allowed_rows(self, allowed: Allowed) -> np.ndarray:
        """Positions of the cached rows ``allowed`` admits (one vectorised comparison per criterion)."""
        n = self._n
        keep = np.ones(n, dtype=bool)
        if allowed.since is not None:
            keep &= self._times[:n] >= allowed.since.encode("ascii")
        if allowed.until is not None:
            keep &= self._times[:n] <= allowed.until.encode("ascii")
        if allowed.ids is not None:
            keep &= np.isin(self._ids[:n], allowed.ids)
        return np.flatnonzero(keep)

    def _search_rows(self, qf: np.ndarray, k: int, rows: np.ndarray | list[tuple[int, int]] | None = None
                     ) -> list[tuple[int, float]]:
        """The cached rows only (those at positions ``rows``, or in its runs (start, end), when
        given); ``qf``: the quantised query as float32. Dot products of int8 codes are exact
        integers in float32, whichever rows share a block: a subset ranks exactly as it does
        within the whole."""
        if isinstance(rows, list):  # runs: read as they lie, packed into full blocks, no gather
            runs = [(a, b) for a, b in rows if b > a]
            if k <= 0 or not runs:
                return []
            if self._norms_pending():
                self._normalise(np.unique(np.concatenate([np.arange(a // NORM_ROWS, (b - 1) // NORM_ROWS + 1)
                                                          for a, b in runs])))
            dots = self._run_dots(runs, qf)
            inv = np.concatenate([self._inv[a:b] for a, b in runs])
            starts = np.array([a for a, _ in runs], dtype=np.int64)
            offsets = np.cumsum([0] + [b - a for a, b in runs[:-1]], dtype=np.int64)

            def place(i: np.ndarray) -> np.ndarray:
                j = np.searchsorted(offsets, i, side="right") - 1
                return starts[j] + (i - offsets[j])
            return self._ranked(dots, inv, place, qf, k)
        n = self._n if rows is None else len(rows)
        if k <= 0 or n == 0:
            return []
        if rows is None:  # every row: one run
            if self._norms_pending():
                self._normalise(np.arange(-(-n // NORM_ROWS)))
            return self._ranked(self._run_dots([(0, n)], qf), self._inv[:n], lambda i: i, qf, k)
        picked = rows
        if self._norms_pending():
            self._normalise(np.unique(picked // NORM_ROWS))
        dots = np.empty(n, dtype=np.float32)
        for s in range(0, n, BLOCK):  # gathered a block at a time: no transient copy of every picked row
            e = min(s + BLOCK, n)
            m = self._scratch[:e - s]
            np.copyto(m, self._codes[picked[s:e]], casting="unsafe")
            dots[s:e] = m @ qf
        return self._ranked(dots, self._inv[picked], lambda i: picked[i], qf, k)

    def _norms_pending(self) -> bool:
        """Some held row's inverse norm is not computed yet (after a full load, until searches have
        scanned every block): a search then finds which of its blocks to compute first."""
        return not bool(self._normed[:-(-self._n // NORM_ROWS)].all())

    def _normalise(self, blocks: np.ndarray) -> None:
        """The inverse norms of the rows in ``blocks`` (sorted numbers of blocks of ``NORM_ROWS``
        positions) not computed yet: a full load leaves them to the searches that scan them first
        (at a million messages ~0.1 s, of which the first search scans a third). A block marked
        done has every row below ``_n`` computed: rows appended later are computed as they come, a
        row moved by a deletion or rewritten in place at once."""
        todo = blocks[~self._normed[blocks]]
        if not len(todo):
            return
        for run in np.split(todo, np.flatnonzero(np.diff(todo) != 1) + 1):  # consecutive blocks at once
            a, b = int(run[0]) * NORM_ROWS, min(self._n, (int(run[-1]) + 1) * NORM_ROWS)
            if b > a:
                self._inv[a:b] = inverse_norms(self._codes[a:b])
        self._normed[todo] = True

    def _run_dots(self, runs: list[tuple[int, int]], qf: np.ndarray) -> np.ndarray:
        """The dot products with ``qf`` of the rows of ``runs`` (start, end), in order: the runs are
        converted to float32 one after the other into the scratch block and each full block is
        multiplied at once (a product per run, most of them a few hundred rows, cost ~11 % more
        at a million rows, 2026-12-02)."""
        dots = np.empty(sum(b - a for a, b in runs), dtype=np.float32)
        scratch, at, fill = self._scratch, 0, 0
        for a, b in runs:
            while a < b:
                e = min(b, a + BLOCK - fill)
                np.copyto(scratch[fill:fill + e - a], self._codes[a:e], casting="unsafe")
                fill, a = fill + e - a, e
                if fill == BLOCK:
                    np.matmul(scratch, qf, out=dots[at:at + BLOCK])
                    at, fill = at + BLOCK, 0
        if fill:
            np.matmul(scratch[:fill], qf, out=dots[at:at + fill])
        return dots

    def _ranked(self, dots: np.ndarray, inv: np.ndarray, place: Callable[[np.ndarray], np.ndarray],
                qf: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` nearest of the rows whose dot products with ``qf`` are ``dots`` (their
        inverse norms ``inv``; ``place`` maps indices of ``dots`` to cache positions), nearest
        first, ties by id. Every row's distance is first taken in float32 from its inverse norm;
        only the rows within :data:`~memsif_lite.int8.NEAR_MARGIN` of the ``k``-th of those (a
        superset of the exact ``k`` nearest) get their exact distance and are ranked: the result
        is that of ranking every row exactly."""
        n = len(dots)
        if k <= 0 or n == 0:
            return []
        qq = float(qf @ qf)
        near: np.ndarray = np.arange(n)
        if k < n:
            iq = np.float32(1.0 / np.sqrt(qq)) if qq > 0 else np.float32(np.inf)
            with np.errstate(invalid="ignore"):  # 0 * inf: an all-zero row or query, NaN (last)
                approx = np.float32(1.0) - dots * inv * iq
            cut = approx[np.argpartition(approx, k - 1)[k - 1]]
            if not np.isnan(cut):  # (else fewer than k rows can be ranked: all of them are)
                near = np.flatnonzero(approx <= cut + np.float32(NEAR_MARGIN))
        pos = place(near)
        dist = cosine_distances(dots[near], squared_norms(self._codes[pos]), qq)
        ids = self._ids[pos]
        order = np.lexsort((ids, dist))[:k]
        return list(zip(ids[order].tolist(), dist[order].tolist(), strict=True))

    @property
    def nbytes(self) -> int:
        """Memory held (allocated capacity of codes, ids and norms, plus the scratch block)."""
        return (self._codes.nbytes + self._ids.nbytes + self._inv.nbytes + self._times.nbytes + self._lists.nbytes
                + self._normed.nbytes + self._list_map.nbytes + self._scratch.nbytes
                + (0 if self._index is None else self._index.nbytes))

    @property
    def loaded(self) -> bool:
        """Loaded since the last reset (or turned off: vec0 answers), though perhaps behind the file."""
        return self._loaded or self._disabled

    @property
    def size(self) -> int:
        return self._n

    # -- internals -------------------------------------------------------------------------
    def _data_version(self) -> int:
        return int(self.con.execute("PRAGMA data_version").fetchone()[0])

    def _file_epoch(self) -> str:
        row = self.con.execute("SELECT value FROM meta WHERE key='vector_epoch'").fetchone()
        return str(row[0]) if row else "0"

    def _reset(self) -> None:
        self._codes = np.empty((0, self.dim), dtype=np.int8)
        self._ids = np.empty(0, dtype=np.int64)
        self._inv = np.empty(0, dtype=np.float32)
        self._times = np.empty(0, dtype=f"S{TIME_BYTES}")
        self._lists = np.empty(0, dtype=np.uint16)
        self._normed = np.empty(0, dtype=bool)
        self._n, self._hw, self._loaded, self._timed = 0, 0, False, True
        self._times_loaded, self._index = False, None

    def _grow(self, need: int, room: int = 0) -> None:
        """Room for ``need`` rows, whose memory is mapped in now, and, when the cache is empty,
        ``room`` more mapped in as they come (when it grows by appends: a quarter more than it
        held). The times are mapped in as they
        are written (a time-filtered search loads them): until then they read as zeros, ``b""``."""
        if need <= len(self._ids):
            return
        cap = need + room if self._n == 0 else max(need, int(len(self._ids) * 1.25) + 256)
        arrays: list[tuple[str, tuple[int, ...], Any, int]] = [
            ("_codes", (cap, self.dim), np.int8, need), ("_ids", (cap,), np.int64, need),
            ("_inv", (cap,), np.float32, need)]
        if self.append_only:
            arrays += [("_times", (cap,), np.dtype(f"S{TIME_BYTES}"), self._n), ("_lists", (cap,), np.uint16, need)]
        for name, shape, dt, ready in arrays:
            new = _mapped(shape, dt, ready)
            new[:self._n] = getattr(self, name)[:self._n]
            setattr(self, name, new)
        normed = np.zeros(-(-cap // NORM_ROWS), dtype=bool)
        normed[:len(self._normed)] = self._normed
        self._normed = normed

    def _append(self, ids: np.ndarray, codes: np.ndarray, times: Sequence[Any] | None) -> None:
        """Rows at the end; ``times``: their messages' stored times (message cache only)."""
        need = self._n + len(ids)
        self._grow(need)
        self._codes[self._n:need] = codes
        self._ids[self._n:need] = ids
        self._inv[self._n:need] = inverse_norms(codes)
        self._normed[-(-self._n // NORM_ROWS):-(-need // NORM_ROWS)] = True  # blocks that begin with these rows
        if self.append_only:
            self._lists[self._n:need] = self._list_map.lookup(ids)
            held = _time_code(times) if times is not None else None
            if held is None:  # a time that cannot be compared exactly here: time windows go to vec0
                self._timed = False
                self._times[self._n:need] = b""
            else:
                self._times[self._n:need] = held
        self._n = need

@dataclass(frozen=True)
class _Index:
    """The cache's first ``n`` rows grouped by list: list ``j``'s rows (``sizes[j]`` of them) are at
    positions ``order[starts[j]:starts[j + 1]]``, or, laid out list by list (``order`` None), at
    ``starts[j]`` to ``starts[j + 1]``; ``unlisted``: the positions of those with no list."""

    n: int
    order: np.ndarray | None
    starts: np.ndarray
    sizes: np.ndarray
    unlisted: np.ndarray

    @property
    def is_contiguous(self) -> bool:
        return self.order is None

    @property
    def nbytes(self) -> int:
        return (0 if self.order is None else self.order.nbytes) + self.starts.nbytes + self.sizes.nbytes \
            + self.unlisted.nbytes

    @classmethod
    def build(cls, lists: np.ndarray, count: int) -> _Index:
        order = np.argsort(lists, kind="stable")  # NONE (65535) sorts last
        sizes, starts = _runs(lists, count)
        return cls(len(lists), order, starts, sizes, order[int(starts[-1]):])

    @classmethod
    def contiguous(cls, lists: np.ndarray, count: int) -> _Index:
        """For rows already sorted by list (the unlisted last)."""
        sizes, starts = _runs(lists, count)
        return cls(len(lists), None, starts, sizes, np.arange(int(starts[-1]), len(lists)))


class _Placing:
    """A full load's second half beside its first: the groups of codes read by SQLite's blob I/O
    (in the loading thread: it holds the connection) are put in place in the cache — rows
    scattered list by list — by a helper thread, from two buffers used in turn, so that reading a
    group and placing the one before overlap (numpy's scatter and SQLite's reads both run without
    the GIL). Without a helper (``beside`` false, one core, no thread to be had) each group is
    placed at once. Leaving the ``with`` waits for the helper — through a KeyboardInterrupt too,
    raised once it has ended — and then raises the helper's error, if it had one."""

    def __init__(self, place: Callable[[np.ndarray, int, int], None], size: int, beside: bool):
        self._place = place
        beside = beside and _cores() >= 2
        self._bufs = [np.empty(size, dtype=np.int8) for _ in range(2 if beside else 1)]
        self._free = [threading.Event() for _ in self._bufs]
        for e in self._free:
            e.set()
        self._turn = 0
        self._todo: list[tuple[int, np.ndarray, int, int]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if beside:
            thread = threading.Thread(target=self._work, name="memsif-load", daemon=True)
            try:
                thread.start()
                self._thread = thread
            except RuntimeError:  # no thread to be had: each group placed here
                self._bufs, self._free = self._bufs[:1], self._free[:1]

    def buffer(self) -> np.ndarray:
        """The buffer to read the next group into (once the group it held before is placed)."""
        i = self._turn % len(self._bufs)
        while not self._free[i].wait(0.1):
            if self._thread is not None and not self._thread.is_alive():  # (it sets the flag whatever happens)
                raise RuntimeError("the vector cache's loading helper ended before placing a group")
        if self._error is not None:
            raise self._error
        return self._bufs[i]

    def put(self, buf: np.ndarray, a: int, b: int) -> None:
        """Place ``buf`` (the start of the buffer :meth:`buffer` gave last), holding slots ``a`` to ``b``."""
        i = self._turn % len(self._bufs)
        self._turn += 1
        if self._thread is None:
            self._place(buf, a, b)
            return
        self._free[i].clear()
        with self._ready:
            self._todo.append((i, buf, a, b))
            self._ready.notify()

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._todo and not self._closed:
                    self._ready.wait(0.1)  # (closed without a notify: a KeyboardInterrupt in between)
                if not self._todo:
                    return
                i, buf, a, b = self._todo.pop(0)
            try:
                if self._error is None:
                    self._place(buf, a, b)
            except BaseException as e:  # raised in the loading thread
                self._error = e
            finally:
                self._free[i].set()

    def __enter__(self) -> _Placing:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._closed = True  # the helper places what is queued, then ends
        thread = self._thread
        if thread is not None:
            interrupted: KeyboardInterrupt | None = None
            try:
                with self._ready:
                    self._ready.notify()
            except KeyboardInterrupt as e:
                interrupted = e
            while thread.is_alive():
                try:
                    thread.join()
                except KeyboardInterrupt as e:
                    interrupted = e
            if interrupted is not None:
                raise interrupted
        if self._error is not None and exc[0] is None:
            raise self._error


def _runs(lists: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = np.bincount(lists[lists != NONE], minlength=count)[:count]
    return sizes, np.concatenate(([0], np.cumsum(sizes)))


def _valid(size: Any, validity: Any, rowids: Any, vectors: Any, dim: int, table: str) -> np.ndarray:
    """A vec0 chunk's validity bits (which of its ``size`` slots hold a row), once its shape is
    checked (``vectors`` None: not read)."""
    _check_chunk(size, validity, rowids, vectors, dim, table)
    return np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[:size].astype(bool)


def _mapped(shape: tuple[int, ...], dtype: Any, ready: int | None = None) -> np.ndarray:
    """An array of zeros whose first ``ready`` rows (all by default) are mapped in now, the rest as
    they are written (below ``_MAPPED_FROM`` bytes, where anonymous mappings do not exist or one is
    refused: ``np.zeros``, nothing mapped in up front). Filled
    page by page as it is written, a 400 MB cache took a page fault per 4 KiB, which cost 1.6 s of
    the 2.3 s CPU its first load took at a million messages (2026-12-02, this sandbox); mapped in at
    once (:func:`_touch`) it costs a fraction of that."""
    dt = np.dtype(dtype)
    size = int(np.prod(shape)) * dt.itemsize
    if size < _MAPPED_FROM or not hasattr(mmap, "MAP_PRIVATE"):
        return np.zeros(shape, dtype=dt)  # (zeros, as a mapping reads: the times rely on it)
    try:
        buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # anonymous (fileno -1): zeros
    except OSError:  # refused (a memory limit): numpy's own allocation decides
        return np.zeros(shape, dtype=dt)
    rows = shape[0] if ready is None else max(0, min(ready, shape[0]))
    _touch(buf, size // shape[0] * rows if shape[0] else 0)
    return np.frombuffer(buf, dtype=dt).reshape(shape)


def _touch(buf: mmap.mmap, nbytes: int) -> None:
    """Write a zero to every page of the first ``nbytes`` of a fresh anonymous mapping (its pages
    are zero already), so the kernel maps them in now; from ``_TOUCHED_FROM`` bytes on with two
    cores, the second half from a helper thread: numpy's strided fill releases the GIL, so both
    cores take the page faults (450 MB: 95 ms against 193 for ``MAP_POPULATE``, 2026-12-03)."""
    pages = np.frombuffer(buf, dtype=np.uint8, count=nbytes)[::mmap.PAGESIZE]
    if nbytes < _TOUCHED_FROM or _cores() < 2:
        pages.fill(0)
        return
    half = len(pages) // 2
    helper = threading.Thread(target=pages[half:].fill, args=(0,), name="memsif-touch", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # no thread to be had: all of it here
        pages.fill(0)
        return
    try:
        pages[:half].fill(0)
    finally:
        helper.join()


def _cores() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _check_chunk(size: Any, validity: Any, rowids: Any, vectors: Any, dim: int, table: str) -> None:
    if not (isinstance(size, int) and size > 0 and isinstance(validity, bytes) and isinstance(rowids, bytes)
            and len(validity) * 8 >= size and len(rowids) == 8 * size
            and (vectors is None or (isinstance(vectors, bytes) and len(vectors) == size * dim))):
        raise ValueError(f"{table}: a chunk of an unexpected shape")


def _valid_many(chunks: list[tuple[Any, Any, Any, Any]], dim: int, table: str) -> np.ndarray:
    """The validity bits of several chunks (size, validity, rowids, vectors), concatenated, each
    chunk's shape checked (:func:`_valid`); one unpacking when they all have the same size."""
    if not chunks:
        return np.empty(0, dtype=bool)
    size, validity = chunks[0][0], chunks[0][1]
    if not isinstance(validity, bytes) or not all(
            c[0] == size and isinstance(c[1], bytes) and len(c[1]) == len(validity) for c in chunks):
        return np.concatenate([_valid(*c, dim, table) for c in chunks])
    for c in chunks:  # the shape checks alone (cheap), then the bits of all at once
        _check_chunk(*c, dim, table)
    bits = np.frombuffer(b"".join(c[1] for c in chunks), dtype=np.uint8).reshape(len(chunks), len(validity))
    return np.unpackbits(bits, axis=1, bitorder="little")[:, :size].astype(bool).ravel()


def _time_code(times: Sequence[Any]) -> np.ndarray | None:
    """Stored times as ``TIME_BYTES``-byte strings, whose byte order is SQLite's text order; None
    when one cannot be held exactly (not text: a vector without its message; longer, not ASCII, or
    holding NUL: not a time memsif wrote)."""
    if not all(isinstance(t, str) for t in times):
        return None
    joined = "".join(times)
    if not joined.isascii() or "\0" in joined or max(map(len, times), default=0) > TIME_BYTES:
        return None
    return np.array(times, dtype=f"S{TIME_BYTES}")
