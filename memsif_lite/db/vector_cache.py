"""An in-process copy of ``message_vec`` for fast, exact dense search. The file stays the only
source of truth; the cache is a view of it that is checked before every query.

* **Loaded lazily** by one scan of ``message_vec`` at the first dense query.
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
  ties by id.
* **Memory**: ``dim + 16`` bytes per vector (int8 codes, id, squared norm) — 40 MB for 100,000
  messages of dimension 384 — plus one block of ``BLOCK × dim`` float32 scratch (1.5 MB) for the
  blockwise dequantisation. Above ``MAX_BYTES`` the cache turns itself off and vec0 serves.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..int8 import cosine_distances, quantize

__all__ = ["VectorCache", "MAX_BYTES", "BLOCK"]

#: rows dequantised at a time (fits the CPU cache; larger blocks measured slower)
BLOCK = 1024
#: the most memory the cache may hold; a bigger file is searched through vec0 instead
MAX_BYTES = 1 << 30


class VectorCache:
    """One vec0 table in memory. ``table="message_vec"`` (rows are only appended or deleted, and
    deletions bump ``vector_epoch``) syncs incrementally; a unit table (``segment_vec``,
    ``trajectory_vec``: rows rewritten in place as segments grow) reloads whenever another
    process has committed."""

    def __init__(self, con: Any, dim: int, table: str = "message_vec"):
        self.con, self.dim, self.table = con, dim, table
        self.append_only = table == "message_vec"
        self._codes = np.empty((0, dim), dtype=np.int8)
        self._ids = np.empty(0, dtype=np.int64)
        self._sq = np.empty(0, dtype=np.float64)
        self._n = 0
        self._loaded = False
        self._disabled = False
        self._dv: int | None = None     # data_version at the last sync
        self._epoch = ""                # vector_epoch at the last sync (+ this process's bumps)
        self._hw = 0                    # every id <= _hw committed by others is in the cache
        self._staged: list[tuple[str, int, np.ndarray | None]] = []
        self._scratch = np.empty((BLOCK, dim), dtype=np.float32)
        self._others = True
        self._in_txn = False            # inside this process's write transaction (begin .. commit/rollback)
        self._read_in_txn = False       # and rows were loaded during it

    # -- this process's writes --------------------------------------------------------------
    def stage_add(self, mid: int, code: np.ndarray) -> None:
        self._staged.append(("add", mid, code))

    def stage_delete(self, mid: int) -> None:
        self._staged.append(("delete", mid, None))

    def stage_set(self, rid: int, code: np.ndarray) -> None:
        """A row rewritten (or added: a unit cache does not track a high-water id)."""
        self._staged.append(("set", rid, code))

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
        self._in_txn = self._read_in_txn = False
        if not self._loaded or not staged:
            return
        others = self._others
        if others and not self.append_only:
            self._reset()  # someone else rewrote rows too: reload at the next query
            return
        for op, mid, code in staged:
            at = np.flatnonzero(self._ids[:self._n] == mid)
            if op == "delete":
                for i in at[::-1]:  # swap with the last row (order does not matter: ranking sorts)
                    last = self._n - 1
                    self._codes[i], self._ids[i], self._sq[i] = self._codes[last], self._ids[last], self._sq[last]
                    self._n = last
                if self.append_only:
                    self._epoch = str(int(self._epoch) + 1)
            elif op == "set" and len(at):
                assert code is not None
                self._codes[at[0]] = code
                self._sq[at[0]] = _squared_norms(code[None, :])[0]
            else:
                assert code is not None
                self._append(np.array([mid], dtype=np.int64), code[None, :])
                if not others:
                    self._hw = max(self._hw, mid)
        if self.append_only and any(op == "delete" for op, _, _ in staged):
            # a deleted newest id is free again (no AUTOINCREMENT): another process may reuse it,
            # so the high-water mark comes down to what is held (sync skips rows it already has)
            self._hw = min(self._hw, int(self._ids[:self._n].max(initial=0)))

    # -- reads -----------------------------------------------------------------------------
    def usable(self) -> bool:
        """Searchable now: nothing staged, or this process's staged writes on top of a cache that
        was current when their transaction began (nobody else can commit while it is open), which
        ``search`` overlays exactly."""
        return not self._disabled and (not self._staged or (self._loaded and not self._others))

    def sync(self) -> None:
        """Bring the cache up to the caller's read snapshot (call inside one)."""
        epoch = self._file_epoch()  # first: starts the snapshot, so data_version below is current
        dv = self._data_version()
        if self._loaded and dv == self._dv:
            return
        present: set[int] = set()
        if not self._loaded or epoch != self._epoch or not self.append_only:
            self._reset()
            cur = self.con.execute(f"SELECT rowid, embedding FROM {self.table}")
        else:
            cur = self.con.execute("SELECT m.id, v.embedding FROM messages m JOIN message_vec v ON v.rowid=m.id "
                                   "WHERE m.id > ?", (self._hw,))
            present = set(self._ids[:self._n][self._ids[:self._n] > self._hw].tolist())
        while batch := list(itertools.islice(cur, 4096)):  # in batches: no large transient copy
            rows = [r for r in batch if r[0] not in present]
            if not rows:
                continue
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            codes = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.int8).reshape(len(rows), self.dim)
            self._append(ids, codes)
            self._hw = max(self._hw, int(ids.max()))
        self._dv, self._epoch, self._loaded = dv, epoch, True
        self._read_in_txn = self._read_in_txn or self._in_txn
        if self.nbytes > MAX_BYTES:
            self._disabled = True
            self._reset()

    def search(self, qvec: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(id, cosine distance) of the ``k`` nearest messages, nearest first, ties by id; inside
        this process's write transaction, with what it staged (rows set, added, deleted)."""
        qf = quantize(qvec).astype(np.float32)  # the query quantised as sqlite-vec does
        if not self._staged:
            return self._search_rows(qf, k)
        latest: dict[int, np.ndarray | None] = {}
        for op, rid, code in self._staged:
            latest[rid] = None if op == "delete" else code
        hits = [h for h in self._search_rows(qf, k + len(latest)) if h[0] not in latest]
        live = [(rid, code) for rid, code in latest.items() if code is not None]
        if live and k > 0:
            codes = np.stack([c for _, c in live])
            dist = cosine_distances(codes.astype(np.float32) @ qf, _squared_norms(codes), float(qf @ qf))
            hits += [(rid, float(d)) for (rid, _), d in zip(live, dist, strict=True)]
        return sorted(hits, key=lambda h: (h[1], h[0]))[:k]

    def _search_rows(self, qf: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The cached rows only; ``qf``: the quantised query as float32."""
        n = self._n
        if k <= 0 or n == 0:
            return []
        dots = np.empty(n, dtype=np.float32)
        for s in range(0, n, BLOCK):
            e = min(s + BLOCK, n)
            m = self._scratch[:e - s]
            np.copyto(m, self._codes[s:e], casting="unsafe")
            dots[s:e] = m @ qf
        dist = cosine_distances(dots, self._sq[:n], float(qf @ qf))
        ids = self._ids[:n]
        if k < n:
            part = np.argpartition(dist, k - 1)[:k]
            cut = dist[part].max()
            part = np.flatnonzero(dist <= cut)  # keep every tie at the boundary, ordered by id below
        else:
            part = np.arange(n)
        order = part[np.lexsort((ids[part], dist[part]))][:k]
        return list(zip(ids[order].tolist(), dist[order].tolist(), strict=True))

    @property
    def nbytes(self) -> int:
        """Memory held (allocated capacity of codes, ids and norms, plus the scratch block)."""
        return self._codes.nbytes + self._ids.nbytes + self._sq.nbytes + self._scratch.nbytes

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
        self._sq = np.empty(0, dtype=np.float64)
        self._n, self._hw, self._loaded = 0, 0, False

    def _append(self, ids: np.ndarray, codes: np.ndarray) -> None:
        need = self._n + len(ids)
        if need > len(self._ids):
            cap = max(need, int(len(self._ids) * 1.25) + 256)
            for name, shape, dt in (("_codes", (cap, self.dim), np.int8), ("_ids", (cap,), np.int64),
                                    ("_sq", (cap,), np.float64)):
                new = np.empty(shape, dtype=dt)
                new[:self._n] = getattr(self, name)[:self._n]
                setattr(self, name, new)
        self._codes[self._n:need] = codes
        self._ids[self._n:need] = ids
        self._sq[self._n:need] = _squared_norms(codes)
        self._n = need


def _squared_norms(codes: np.ndarray) -> np.ndarray:
    """Exact squared norms of int8 code rows (as float64, the cosine's denominator)."""
    wide = codes.astype(np.int32)
    return np.einsum("ij,ij->i", wide, wide).astype(np.float64)
