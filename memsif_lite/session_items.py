"""Session items (:meth:`Memory.add_item`, :meth:`Memory.items`): JSON objects an agent framework
keeps with a session that are not chat — a tool call, its output, a reasoning item. Stored as given
in ``session_items`` (sql/0014), never indexed, never read by segmentation, CoreFact extraction,
search or context. An item sits after the session's last message at the time it was added, and
goes when that message is forgotten (or by ``Memory.forget(item_id=)``)."""

from __future__ import annotations

import json
from typing import Any

from . import store
from .db import Database, ItemRow, to_message
from .db.items import MAX_ITEM_CHARS, stored_item_problem
from .errors import InvalidInputError, MemoryFileError
from .filters import MessageFilter
from .ingest import MAX_SESSION
from .timeutil import from_stored, is_stored, now_stored, to_stored
from .types import Message, SessionItem

__all__ = ["MAX_ITEM_CHARS", "add_item", "session_items", "check_session"]

#: the schema version that added session items
ITEMS_SCHEMA = 14


def check_session(session: Any) -> str:
    if isinstance(session, bool) or not isinstance(session, (str, int)):
        raise InvalidInputError("session must be a string or an integer")
    session = str(session)
    if not session.strip() or len(session) > MAX_SESSION:
        raise InvalidInputError(f"session must be 1-{MAX_SESSION} characters")
    return session


def item_json(item: Any) -> str:
    """The JSON text of a session item: a JSON object (string keys, finite numbers) of at most
    :data:`MAX_ITEM_CHARS` characters, else an :class:`InvalidInputError`."""
    if not isinstance(item, dict):
        raise InvalidInputError(f"a session item must be a JSON object (a dict), got {type(item).__name__}")
    try:
        text = json.dumps(item, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidInputError(f"a session item must be plain JSON: {e}") from None
    if len(text) > MAX_ITEM_CHARS:
        raise InvalidInputError(f"a session item is {len(text)} characters of JSON, more than {MAX_ITEM_CHARS}")
    if json.loads(text) != item:  # e.g. non-string keys, tuples: it would not come back as given
        raise InvalidInputError("a session item must be plain JSON (string keys, lists, no tuples)")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("a session item holds text that is not valid Unicode (a lone surrogate)") from None
    return text


def add_item(db: Database, session: str, text: str, at: Any) -> int:
    stored = now_stored() if at is None else to_stored(at)
    with db.write():
        return db.items.insert(session, text, stored)


def session_items(db: Database, session: str) -> list[Message | SessionItem]:
    """The session's messages (in the order added) with its items, each after the message it followed."""
    with db.read():
        messages = db.filters.messages(_only(session), None, 0)
        # a file opened read-only at an older schema has no session items
        rows = db.items.of_session(session) if store.schema_version(db.con) >= ITEMS_SCHEMA else []
    after: dict[int | None, list[ItemRow]] = {}
    for r in rows:
        after.setdefault(r.message_id, []).append(r)
    out: list[Message | SessionItem] = [_item(r) for r in after.pop(None, [])]
    for m in messages:
        out.append(to_message(m))
        out.extend(_item(r) for r in after.pop(m.id, []))
    return out


def _only(session: str) -> MessageFilter | None:
    return MessageFilter.build(sessions=[session])


def _item(r: ItemRow) -> SessionItem:
    # a memory file may come from anyone: an item that is not what add_item stores is named, not trusted
    if stored_item_problem(r.item) is not None or not is_stored(r.at):
        raise MemoryFileError(f"session item {r.id} is not one memsif stored (not a JSON object, or a bad time)")
    return SessionItem(r.id, r.session, from_stored(r.at), json.loads(r.item))
