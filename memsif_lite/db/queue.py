"""work_queue: the pending steps of the paper's pipeline, in (message_id, sub) order."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Table

__all__ = ["Queue", "Step", "PLACE", "CLOSE", "EXTRACT", "FACT"]

PLACE, CLOSE, EXTRACT, FACT = "place", "close", "extract", "fact"
_SUB = {PLACE: 0, CLOSE: 1, EXTRACT: 2}
_COLS = "id, message_id, sub, kind, segment_id, payload, created_at, attempts"


@dataclass(frozen=True)
class Step:
    id: int
    message_id: int
    sub: int
    kind: str
    segment_id: int | None
    payload: str | None
    created_at: str
    attempts: int


class Queue(Table):
    def push(self, kind: str, message_id: int, created_at: str, *, segment_id: int | None = None,
             payload: str | None = None, index: int = 0) -> None:
        """Enqueue a step; a CoreFact candidate's position is ``index`` (sub = 3 + index)."""
        sub = _SUB[kind] if kind != FACT else 3 + index
        self.con.execute("INSERT INTO work_queue(message_id, sub, kind, segment_id, payload, created_at) "
                         "VALUES(?,?,?,?,?,?)", (message_id, sub, kind, segment_id, payload, created_at))

    def head(self) -> Step | None:
        """The next step to run."""
        r = self.con.execute(f"SELECT {_COLS} FROM work_queue ORDER BY message_id, sub LIMIT 1").fetchone()
        return None if r is None else Step(*r)

    def pending(self, kinds: tuple[str, ...], limit: int) -> list[Step]:
        """The earliest pending steps of the given kinds, in queue order."""
        marks = ",".join("?" * len(kinds))
        return [Step(*r) for r in self.con.execute(
            f"SELECT {_COLS} FROM work_queue WHERE kind IN ({marks}) ORDER BY message_id, sub LIMIT ?",
            (*kinds, limit))]

    # A step is identified by (message_id, sub), never by its rowid: rowids of deleted rows are
    # reused, while a (message_id, sub) pair is enqueued at most once in a file's life.
    def exists(self, step: Step) -> bool:
        return self.con.execute("SELECT 1 FROM work_queue WHERE message_id=? AND sub=?",
                                (step.message_id, step.sub)).fetchone() is not None

    def done(self, step: Step) -> None:
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND sub=?", (step.message_id, step.sub))

    def drop_message(self, message_id: int) -> None:
        """A forgotten message's pending placement."""
        self.con.execute("DELETE FROM work_queue WHERE message_id=? AND kind=?", (message_id, PLACE))

    def backlog(self) -> tuple[int, str | None]:
        """(pending steps, creation time of the oldest)."""
        n, oldest = self.con.execute("SELECT count(*), min(created_at) FROM work_queue").fetchone()
        return int(n), oldest
