"""session_items: what an agent framework keeps with a session that is not chat (sql/0014).
Never indexed: no full-text row, no vector; nothing but this module reads the table."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .base import Table

__all__ = ["SessionItems", "ItemRow", "MAX_ITEM_CHARS", "stored_item_problem"]

#: the largest item stored, in characters of its JSON text
MAX_ITEM_CHARS = 1_000_000


@dataclass(frozen=True)
class ItemRow:
    id: int
    session: str
    message_id: int | None
    at: str
    item: str  # JSON object text


class SessionItems(Table):
    def insert(self, session: str, item: str, at: str) -> int:
        """Store ``item`` after the session's last message (its largest id), if it has one."""
        self.con.execute(
            "INSERT INTO session_items(session, message_id, at, item) "
            "VALUES(?, (SELECT max(id) FROM messages WHERE session=?), ?, ?)", (session, session, at, item))
        return int(self.con.last_insert_rowid())

    def of_session(self, session: str) -> list[ItemRow]:
        return [ItemRow(*r) for r in self.con.execute(
            "SELECT id, session, message_id, at, item FROM session_items WHERE session=? ORDER BY id", (session,))]

    def move(self, old: int, new: int) -> None:
        """The items after message ``old`` follow it to its new id ``new`` (a merge moves messages)."""
        self.con.execute("UPDATE session_items SET message_id=? WHERE message_id=?", (new, old))

    def delete(self, item_id: int) -> bool:
        self.con.execute("DELETE FROM session_items WHERE id=?", (item_id,))
        return bool(self.con.changes())


def stored_item_problem(text: Any) -> str | None:
    """Why an exported item's text is not one memsif would store, or None."""
    if not isinstance(text, str) or len(text) > MAX_ITEM_CHARS:
        return "not a JSON object of at most MAX_ITEM_CHARS characters"
    try:
        value = json.loads(text, parse_constant=_constant)
    except (ValueError, RecursionError):
        return "not JSON"
    return None if isinstance(value, dict) and not _has_nonfinite(value) else "not a JSON object"


def _has_nonfinite(v: Any) -> bool:
    if isinstance(v, float):
        return not math.isfinite(v)
    if isinstance(v, dict):
        return any(_has_nonfinite(x) for x in v.values())
    if isinstance(v, list):
        return any(_has_nonfinite(x) for x in v)
    return False


def _constant(name: str) -> Any:
    raise ValueError(name)
