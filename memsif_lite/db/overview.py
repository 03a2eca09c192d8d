"""Whole-file listings for the HTML view (:mod:`memsif_lite.view`): every message with its segment,
every CoreFact with its sources and history, the pending steps and the schema version, each in one
query, as plain rows (the view packs them into columns). Segments and trajectories come from
:meth:`Structure.segment_rows` / :meth:`Structure.trajectory_rows`."""

from __future__ import annotations

from typing import Iterator

from .. import store
from .base import Table
from .queue import QueuedStep

__all__ = ["Overview"]

_QUEUE_COLS = "id, message_id, sub, kind, segment_id, payload, created_at, attempts"


class Overview(Table):
    def messages(self) -> Iterator[tuple[int, str, str, str, str | None, int | None, int | None]]:
        """(id, speaker, text, at, session, utc_offset_min, segment id or None) of every message, by id."""
        return iter(self.con.execute(
            "SELECT m.id, m.speaker, m.text, m.at, m.session, m.utc_offset_min, u.segment_id FROM messages m "
            "LEFT JOIN message_units u ON u.message_id = m.id ORDER BY m.id"))

    def facts(self) -> list[tuple[int, str, str, str, str, str | None, int | None, str]]:
        """(id, subject, type, stmt, valid_from, valid_to, superseded_by, origin) of every CoreFact,
        superseded ones included, by id."""
        return self.con.execute("SELECT id, subject, type, stmt, valid_from, valid_to, superseded_by, origin "
                                "FROM core_facts ORDER BY id").fetchall()

    def fact_sources(self) -> dict[int, list[int]]:
        """fact id -> the ids of the messages it rests on, in order."""
        out: dict[int, list[int]] = {}
        for fid, mid in self.con.execute("SELECT fact_id, message_id FROM fact_sources ORDER BY fact_id, message_id"):
            out.setdefault(fid, []).append(mid)
        return out

    def fact_histories(self) -> dict[int, list[tuple[str, str, str, str | None]]]:
        """fact id -> its history events (at, op, stmt, detail), oldest first."""
        out: dict[int, list[tuple[str, str, str, str | None]]] = {}
        for fid, at, op, stmt, detail in self.con.execute(
                "SELECT fact_id, at, op, stmt, detail FROM fact_history ORDER BY fact_id, id"):
            out.setdefault(fid, []).append((at, op, stmt, detail))
        return out

    def pending_steps(self, limit: int) -> list[QueuedStep]:
        """The first ``limit`` pending steps, in queue order (the count is :meth:`Queue.backlog`'s)."""
        return [QueuedStep(*r) for r in self.con.execute(
            f"SELECT {_QUEUE_COLS} FROM work_queue ORDER BY message_id, sub LIMIT ?", (int(limit),))]

    def pending_kinds(self) -> dict[str, int]:
        """How many steps of each kind are pending."""
        return {str(k): int(n) for k, n in self.con.execute(
            "SELECT kind, count(*) FROM work_queue GROUP BY kind ORDER BY kind")}

    def schema_version(self) -> int:
        return store.schema_version(self.con)
