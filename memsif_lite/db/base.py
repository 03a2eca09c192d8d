"""What every table group shares: the connection and the guarded KNN query."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import apsw
import numpy as np

from .rows import i8

__all__ = ["Table", "VEC_TABLES", "by_second"]

#: vec0 tables and the plain table whose ids they mirror
VEC_TABLES = {"message_vec": "messages", "segment_vec": "segments", "trajectory_vec": "trajectories",
              "fact_vec": "core_facts", "active_fact_vec": "active_facts"}


def highest_message_id(con: Any) -> int:
    """The largest message id stored (0: none)."""
    return int(con.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])


def by_second(column: str, op: str) -> str:
    """The condition ``{column} {op} ?`` on a stored time (text order is time order), written so
    that an index of its second, ``unixepoch({column})``, answers it (``change_log_at`` since schema
    19, ``messages_known_at`` since 20): one range of seconds on the index, in which a row of another
    second than the bound's is decided by the index alone (SQLite defers reading the row) and a row
    of the bound's own second is read for the exact time. Its argument is given three times. (A file
    of an older schema read as it is has its index on the text: the same rows, found by a scan.)"""
    if op not in (">", ">=", "<", "<="):
        raise ValueError(op)
    s = op[0]
    return f"(unixepoch({column}) {s}= unixepoch(?) AND (unixepoch({column}) {s} unixepoch(?) OR {column} {op} ?))"


def bump_counter(con: Any, key: str) -> None:
    """Add one to the meta counter ``key`` (in the caller's transaction): ``vector_epoch``,
    ``partition_stamp``, the changes other processes' caches look for."""
    con.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key=?", (key,))


class Table:
    """Base of the table groups: holds the connection."""

    def __init__(self, con: apsw.Connection):
        # typed loosely on purpose: rows are mapped to dataclasses right here, column by column
        self.con: Any = con

    def knn(self, table: str, vec: np.ndarray, k: int,
            only: tuple[str, list[Any]] | None = None) -> list[tuple[int, float]]:
        """(rowid, cosine distance) of the ``k`` nearest vectors in a vec0 table, nearest first.
        sqlite-vec refuses ``k`` above 4096 and an empty table needs no query. Vectors are int8
        (the query is quantised the same way); ties are ordered by rowid. ``only`` is a
        ``(SELECT id ..., args)`` subquery: the KNN then runs over those rows only (vec0 applies
        ``rowid IN (...)`` inside the search)."""
        if table not in VEC_TABLES:
            raise ValueError(f"not a vector table: {table}")
        k = min(int(k), 4096)
        if k <= 0:
            return []
        sub, args = only if only is not None else ("", [])
        where = f" AND rowid IN ({sub})" if only is not None else ""
        rows = self.con.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH vec_int8(?) AND k = ?{where} ORDER BY distance",
            (i8(vec), k, *args)).fetchall()
        return sorted(((int(r), float(d)) for r, d in rows), key=lambda x: (x[1], x[0]))

    def rows_in(self, sql: str, ids: Sequence[Any], args: Sequence[Any] = ()) -> Iterator[Any]:
        """The rows of ``sql`` for ``ids``, asked 500 at a time (SQLite's variable limit): ``{marks}``
        in ``sql`` stands for the placeholders of the ``IN`` list; ``args`` bind before them."""
        for start in range(0, len(ids), 500):
            chunk = list(ids[start:start + 500])
            yield from self.con.execute(sql.format(marks=",".join("?" * len(chunk))), (*args, *chunk))

    def set_vector(self, table: str, rowid: int, code: bytes) -> None:
        """Replace a stored int8 vector (sqlite-vec 0.1.9 rejects ``UPDATE`` of an int8 column:
        the subtype is lost, so it is a delete and an insert)."""
        if table not in VEC_TABLES:
            raise ValueError(f"not a vector table: {table}")
        self.con.execute(f"DELETE FROM {table} WHERE rowid=?", (rowid,))
        self.con.execute(f"INSERT INTO {table}(rowid, embedding) VALUES(?, vec_int8(?))", (rowid, code))

    def count(self, table: str) -> int:
        return int(self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
