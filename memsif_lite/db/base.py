"""What every table group shares: the connection and the guarded KNN query."""

from __future__ import annotations

from typing import Any

import apsw
import numpy as np

from .rows import f32

__all__ = ["Table", "VEC_TABLES"]

#: vec0 tables and the plain table whose ids they mirror
VEC_TABLES = {"message_vec": "messages", "segment_vec": "segments", "trajectory_vec": "trajectories",
              "fact_vec": "core_facts", "active_fact_vec": "active_facts"}


class Table:
    """Base of the table groups: holds the connection."""

    def __init__(self, con: apsw.Connection):
        # typed loosely on purpose: rows are mapped to dataclasses right here, column by column
        self.con: Any = con

    def knn(self, table: str, vec: np.ndarray, k: int,
            only: tuple[str, list[Any]] | None = None) -> list[tuple[int, float]]:
        """(rowid, cosine distance) of the ``k`` nearest vectors in a vec0 table, nearest first.
        sqlite-vec refuses ``k`` above 4096 and an empty table needs no query. ``only`` is a
        ``(SELECT id ..., args)`` subquery: the KNN then runs over those rows only (vec0 applies
        ``rowid IN (...)`` inside the search)."""
        if table not in VEC_TABLES:
            raise ValueError(f"not a vector table: {table}")
        k = min(int(k), 4096)
        if k <= 0:
            return []
        sub, args = only if only is not None else ("", [])
        where = f" AND rowid IN ({sub})" if only is not None else ""
        return [(int(r), float(d)) for r, d in self.con.execute(
            f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ?{where} ORDER BY distance",
            (f32(vec), k, *args))]

    def count(self, table: str) -> int:
        return int(self.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
