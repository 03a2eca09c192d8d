"""vector_partition, vector_lists: the dense partition of message vectors as the file keeps it
(``sql/0015_vector_partition.sql``; what it is for: :mod:`memsif_lite.partition`). Everything read
here is checked before it is used: a damaged row is read as "no partition" / "no list", which costs
recall only, and ``memsif check`` names it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..partition import BLOCK_IDS, NONE, Centroids
from .base import Table, bump_counter, highest_message_id

__all__ = ["PartitionRows", "ListMap", "partition_problems"]

#: the most blocks of ids a file's lists are looked up in (ids up to 2^32); a block beyond is ignored
#: (its messages count as unlisted): a damaged file with a huge id cannot make a reader allocate for it
MAX_BLOCKS = 1 << 20


class ListMap:
    """Each message id's list under one version, kept as the file's blocks of 4,096 ids (not one
    array indexed by id: ids may be sparse, or huge in a damaged file)."""

    def __init__(self, blocks: dict[int, np.ndarray]):
        usable = {b: a for b, a in blocks.items() if 0 <= b < MAX_BLOCKS}
        top = max(usable, default=-1)
        self.slot = np.full(top + 1, -1, dtype=np.int64)  # block -> its offset in data, -1: none
        self.data = np.concatenate([usable[b] for b in sorted(usable)]) if usable else np.empty(0, np.uint16)
        for i, b in enumerate(sorted(usable)):
            self.slot[b] = i * BLOCK_IDS
        #: blocks 0 .. top all held (the usual file): block b's offset in data is b * BLOCK_IDS
        self.dense = len(usable) == top + 1

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The lists of ``ids`` (``NONE`` where the file gives none)."""
        if self.dense and len(ids) and 0 <= int(ids.min()) and int(ids.max()) < len(self.data):
            return self.data[ids]  # every block from the first held: the blocks' concatenation is indexed by id
        out = np.full(len(ids), NONE, dtype=np.uint16)
        block = ids // BLOCK_IDS
        inside = (ids >= 0) & (block < len(self.slot))
        at = np.full(len(ids), -1, dtype=np.int64)
        at[inside] = self.slot[block[inside]]
        held = at >= 0
        out[held] = self.data[at[held] + ids[held] % BLOCK_IDS]
        return out

    @property
    def nbytes(self) -> int:
        return self.slot.nbytes + self.data.nbytes


EMPTY = ListMap({})


def _stamp(con: Any) -> str | None:
    row = con.execute("SELECT value FROM meta WHERE key='partition_stamp'").fetchone()
    return None if row is None else str(row[0])


def _centroids(con: Any, dim: int) -> tuple[Centroids | None, str | None]:
    """The current version's centroids, or None with why (None, None: there is none)."""
    rows = con.execute("SELECT version, trained_rows, lists, dim, centroids, assigned_through "
                       "FROM vector_partition").fetchall()
    if not rows:
        return None, None
    if len(rows) > 1:
        return None, f"vector_partition holds {len(rows)} versions (one expected)"
    version, trained, lists, d, blob, through = rows[0]
    if not all(isinstance(v, int) for v in (version, trained, lists, d, through)) or not isinstance(blob, bytes):
        return None, "vector_partition: a value of the wrong type"
    if d != dim or not 1 <= lists < NONE or trained < 1 or len(blob) != lists * dim * 4:
        return None, f"vector_partition: {lists} lists of dimension {d} do not fit its {len(blob)} bytes " \
                     f"or the file's dimension {dim}"
    vectors = np.frombuffer(blob, dtype="<f4").reshape(lists, dim).astype(np.float32)
    if not np.all(np.isfinite(vectors)):
        return None, "vector_partition: a centroid is not finite"
    return Centroids(int(version), int(trained), vectors, int(through)), None


def _block(blob: Any, lists: int) -> np.ndarray | None:
    if not isinstance(blob, bytes) or len(blob) != 2 * BLOCK_IDS:
        return None
    a = np.frombuffer(blob, dtype="<u2").astype(np.uint16)
    return a if bool(np.all((a < lists) | (a == NONE))) else None


class PartitionRows(Table):
    def __init__(self, con: Any, dim: int):
        super().__init__(con)
        self.dim = dim
        #: the highest message id below which a count cannot make training due (refresh keeps it)
        self.count_due_at = 0

    def present(self) -> bool:
        """The file has the partition's tables (schema 15 on)."""
        return _stamp(self.con) is not None

    def stamp(self) -> str | None:
        """Changes with every write to the partition (None: an older schema without one)."""
        return _stamp(self.con)

    def max_message_id(self) -> int:
        return highest_message_id(self.con)

    def message_ids(self) -> np.ndarray:
        """Every message id that has a vector, ascending."""
        return np.fromiter((r[0] for r in self.con.execute("SELECT id FROM messages ORDER BY id")), dtype=np.int64)

    def codes_of(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, int8 codes) of those of ``ids`` that have a vector."""
        return self._codes(list(self.rows_in("SELECT m.id, v.embedding FROM messages m JOIN message_vec v "
                                             "ON v.rowid = m.id WHERE m.id IN ({marks})", ids.tolist())))

    def codes_after(self, through: int, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, int8 codes) of the first ``limit`` messages with an id above ``through``, by id."""
        return self._codes(self.con.execute(
            "SELECT m.id, v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id WHERE m.id > ? "
            "ORDER BY m.id LIMIT ?", (through, limit)).fetchall())

    def pending(self, through: int) -> int:
        """Messages with an id above ``through`` (waiting for a list)."""
        return int(self.con.execute("SELECT count(*) FROM messages WHERE id > ?", (through,)).fetchone()[0])

    def _codes(self, rows: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        rows = [r for r in rows if isinstance(r[1], bytes) and len(r[1]) == self.dim]
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        codes = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.int8).reshape(len(rows), self.dim)
        return ids, codes

    def version(self) -> int | None:
        row = self.con.execute("SELECT max(version) FROM vector_partition").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def current(self) -> Centroids | None:
        """The current lists, or None (none trained yet, or damaged)."""
        return _centroids(self.con, self.dim)[0]

    def list_map(self, current: Centroids) -> ListMap:
        """Each message id's list under ``current`` (none where its block is missing or damaged)."""
        return ListMap(self.blocks(current))

    def blocks(self, current: Centroids) -> dict[int, np.ndarray]:
        """The sound blocks of ``current``'s lists, by block number."""
        out = {}
        for block, blob in self.con.execute("SELECT block, lists FROM vector_lists WHERE version=?",
                                            (current.version,)):
            a = _block(blob, current.lists) if isinstance(block, int) and 0 <= block < MAX_BLOCKS else None
            if a is not None:
                out[block] = a
        return out

    def header(self) -> tuple[int, int, int] | None:
        """(version, trained_rows, assigned_through) of the current lists, without the centroids
        (None: none, or not one sound row)."""
        rows = self.con.execute("SELECT version, trained_rows, assigned_through FROM vector_partition").fetchall()
        return tuple(rows[0]) if len(rows) == 1 and all(isinstance(v, int) for v in rows[0]) else None

    def message_blocks(self, through: int) -> set[int]:
        """The blocks holding a message with an id up to ``through``."""
        return {int(b) for (b,) in self.con.execute(f"SELECT DISTINCT id / {BLOCK_IDS} FROM messages WHERE id <= ?",
                                                    (through,))}

    def codes_in_block(self, block: int, through: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, int8 codes) of the messages of ``block`` with an id up to ``through``, by id."""
        return self._codes(self.con.execute(
            "SELECT m.id, v.embedding FROM messages m JOIN message_vec v ON v.rowid = m.id "
            "WHERE m.id >= ? AND m.id < ? AND m.id <= ? ORDER BY m.id",
            (block * BLOCK_IDS, (block + 1) * BLOCK_IDS, through)).fetchall())

    def replace(self, trained_rows: int, vectors: np.ndarray) -> int:
        """New lists (in the caller's transaction): the old version and its blocks go; returns the
        version, never one given before (from the stamp, which only grows: a reader holding rows
        laid out by an old version's lists must never take the new lists for them)."""
        stamp = self.stamp() or "0"
        version = max(self.version() or 0, int(stamp) if stamp.isdigit() else 0) + 1
        self.con.execute("DELETE FROM vector_partition")
        self.con.execute("DELETE FROM vector_lists")
        self.con.execute("INSERT INTO vector_partition(version, trained_rows, lists, dim, centroids) VALUES(?,?,?,?,?)",
                         (version, trained_rows, len(vectors), vectors.shape[1], vectors.astype("<f4").tobytes()))
        self._bump()
        return version

    def set_lists(self, version: int, ids: np.ndarray, lists: np.ndarray) -> None:
        """Give messages ``ids`` (ascending) their ``lists``, and mark every id up to the last one
        done (in the caller's transaction)."""
        self.write_lists(version, ids, lists)
        self.set_through(version, int(ids[-1]))

    def write_lists(self, version: int, ids: np.ndarray, lists: np.ndarray, *, blocks: Any = ()) -> None:
        """Store the lists of ``ids`` (in the caller's transaction); each of ``blocks`` is written
        whole from them (a lost or damaged block listed again: its other ids have no message)."""
        for b in blocks:
            self.con.execute("DELETE FROM vector_lists WHERE block=?", (int(b),))
        for b in np.unique(np.concatenate([ids // BLOCK_IDS, np.asarray(list(blocks), dtype=np.int64)])).tolist():
            sel = (ids >= b * BLOCK_IDS) & (ids < (b + 1) * BLOCK_IDS)
            self._set_block(b, version, ids[sel] - b * BLOCK_IDS, lists[sel])
        self._bump()

    def set_through(self, version: int, through: int) -> None:
        self.con.execute("UPDATE vector_partition SET assigned_through=max(assigned_through, ?) WHERE version=?",
                         (through, version))

    def _set_block(self, block: int, version: int, offsets: np.ndarray, lists: np.ndarray) -> None:
        row = self.con.execute("SELECT lists FROM vector_lists WHERE block=? AND version=?",
                               (block, version)).fetchone()
        held = None if row is None else _block(row[0], NONE)
        a = np.full(BLOCK_IDS, NONE, dtype=np.uint16) if held is None else held.copy()
        a[offsets] = lists
        self.con.execute("INSERT INTO vector_lists(block, version, lists) VALUES(?,?,?) ON CONFLICT(block) "
                         "DO UPDATE SET version=excluded.version, lists=excluded.lists",
                         (block, version, a.astype("<u2").tobytes()))

    def _bump(self) -> None:
        bump_counter(self.con, "partition_stamp")


def partition_problems(con: Any, dim: int) -> list[str]:
    """``memsif check``: a damaged partition (it only costs recall; ``memsif process`` rebuilds it)."""
    if _stamp(con) is None:
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
        return ["meta 'partition_stamp' is missing: the dense partition is off (dense search scans every row)"] \
            if "vector_partition" in tables else []
    current, why = _centroids(con, dim)
    out = [f"{why} (dense search scans every row; `memsif process` trains it again)"] if why else []
    if current is not None:
        rows = PartitionRows(con, dim)
        listed = [b for (b,) in con.execute("SELECT block FROM vector_lists WHERE version=?", (current.version,))]
        held, sound = set(listed), rows.blocks(current)
        bad = [b for b in listed if b not in sound]
        if bad:
            out.append(f"{len(bad)} blocks of vector_lists are damaged (first: {bad[0]}); their messages are "
                       "scanned every time until `memsif process` lists them again")
        lost = sorted(rows.message_blocks(current.assigned_through) - held)
        if lost:
            out.append(f"{len(lost)} blocks of vector_lists are missing (first: {lost[0]}); their messages are "
                       "scanned every time until `memsif process` lists them again")
    return out
