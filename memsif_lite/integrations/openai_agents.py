"""The OpenAI Agents SDK (``pip install 'memsif_lite[agents]'``): a session whose history is the
long-term memory, and a ``recall`` tool that reads it.

``MemsifSession`` implements the SDK's ``Session`` protocol (``get_items``, ``add_items``,
``pop_item``, ``clear_session``). Each chat item (a user, assistant or system message) is stored
as a memsif message of the session (``session=session_id``), under the speaker its role maps to
(:class:`~memsif_lite.integrations.Speakers`), so it is segmented, linked into trajectories and
mined for CoreFacts like any conversation, and ``recall`` finds it in later sessions. Items that
are not chat — function calls and their outputs, reasoning, web searches, a message without text —
are kept as they came as session items (:meth:`Memory.add_item`): data of the session, never
indexed as something a speaker said. ``get_items`` returns the session in the order it was added
(:meth:`Memory.items`): each stored message as a ``{"role", "content"}`` item, each other item as
it was given, so the SDK replays a tool call with its output.

``recall_tool(memory)`` is a function tool ``recall(question)`` returning
:meth:`Memory.context` — CoreFacts, then dated evidence — for the agent to answer from.

::

    from agents import Agent, Runner
    from memsif_lite.integrations.openai_agents import MemsifSession, recall_tool

    session = MemsifSession.open("chat-1", user="maya")        # <home>/users/maya.db
    agent = Agent(name="Assistant", tools=[recall_tool(session.memory)])
    Runner.run_sync(agent, "Where do I live?", session=session)
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import InvalidInputError
from ..homes import open_memory
from ..memory import Memory
from ..types import Message, SessionItem
from . import Speakers, now_utc

if TYPE_CHECKING:
    from agents import FunctionTool

__all__ = ["MemsifSession", "recall_tool", "item_text"]

log = logging.getLogger("memsif_lite")


def item_text(item: Mapping[str, Any]) -> str | None:
    """The text of a chat message item (``content`` a string, or its ``input_text`` /
    ``output_text`` / ``refusal`` parts joined); None for an item that is not a message."""
    if not isinstance(item, Mapping) or item.get("type", "message") != "message" or "role" not in item:
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts = [p.get("text", p.get("refusal")) for p in content if isinstance(p, Mapping)]
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip()) or None


class MemsifSession:
    """An Agents SDK session stored in a memsif file (see the module docstring). ``memory`` stays
    open while the session is used; ``close()`` closes it when the session opened it (:meth:`open`)."""

    session_settings = None  # the SDK's SessionSettings: none of its own

    def __init__(self, session_id: str, memory: Memory, *, speakers: Speakers | None = None):
        if not isinstance(session_id, str) or not session_id.strip() or len(session_id) > 200:
            raise InvalidInputError("session_id must be a string of 1-200 characters")
        if not isinstance(memory, Memory):
            raise InvalidInputError("memory must be a memsif_lite.Memory")
        self.session_id = session_id
        self.memory = memory
        self.speakers = speakers or Speakers()
        self._owns = False

    @classmethod
    def open(cls, session_id: str, *, user: str | None = None, agent: str | None = None,
             home: str | Path | None = None, speakers: Speakers | None = None,
             **memory_kwargs: Any) -> "MemsifSession":
        """A session in the memory file of ``user`` and/or ``agent`` under ``home``
        (:func:`memsif_lite.open_memory`); ``speakers`` defaults to the user's name for the user."""
        memory = open_memory(user=user, agent=agent, home=home, **memory_kwargs)
        session = cls(session_id, memory, speakers=speakers or Speakers(user=user or "user"))
        session._owns = True
        return session

    def close(self) -> None:
        if self._owns:
            self.memory.close()

    # -- the Session protocol ------------------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise InvalidInputError("limit must be a non-negative integer or None")
        stored = await asyncio.to_thread(self._stored)
        if limit is not None:
            stored = stored[len(stored) - limit:] if limit else []
        return [self._item(m) for m in stored]

    async def add_items(self, items: list[Any]) -> None:
        def add() -> None:
            rows: list[dict[str, Any]] = []
            for item in items:
                text = item_text(item)
                speaker = self.speakers.speaker(str(item.get("role"))) if text is not None else None
                if text is not None and speaker is not None and text.strip():
                    rows.append({"speaker": speaker, "text": text, "at": now_utc(), "session": self.session_id})
                    continue
                if rows:  # the chat before it first, so that the item follows it
                    self.memory.add_many(rows)
                    rows = []
                self.memory.add_item(self.session_id, _plain(item))
            if rows:
                self.memory.add_many(rows)

        await asyncio.to_thread(add)

    async def pop_item(self) -> dict[str, Any] | None:
        def pop() -> Message | SessionItem | None:
            stored = self._stored()
            if not stored:
                return None
            self._forget(stored[-1])
            return stored[-1]

        last = await asyncio.to_thread(pop)
        return None if last is None else self._item(last)

    async def clear_session(self) -> None:
        def clear() -> None:
            stored = self._stored()
            for m in sorted(stored, key=lambda m: isinstance(m, Message)):  # the items, then the messages
                self._forget(m)

        await asyncio.to_thread(clear)

    def _stored(self) -> list[Message | SessionItem]:
        return self.memory.items(self.session_id)

    def _forget(self, m: Message | SessionItem) -> None:
        if isinstance(m, Message):
            self.memory.forget(message_id=m.id)
        else:
            self.memory.forget(item_id=m.id)

    def _item(self, m: Message | SessionItem) -> dict[str, Any]:
        if isinstance(m, SessionItem):
            return m.item
        return {"role": self.speakers.role(m.speaker), "content": m.text}


def _plain(item: Any) -> Any:
    """An item as a JSON object: the SDK's items are dicts; a pydantic model is dumped."""
    dump = getattr(item, "model_dump", None)
    return dump(mode="json", exclude_unset=True) if callable(dump) and not isinstance(item, Mapping) else item


def recall_tool(memory: Memory, *, budget_tokens: int = 1000, name: str = "recall") -> "FunctionTool":
    """A function tool ``recall(question)``: :meth:`Memory.context` of ``question`` — what the
    memory holds about it (CoreFacts, then dated evidence) within ``budget_tokens``."""
    from agents import function_tool

    if not isinstance(memory, Memory):
        raise InvalidInputError("memory must be a memsif_lite.Memory")

    def recall(question: str) -> str:
        """Look up what long-term memory holds about a question: facts about the user and dated
        excerpts of earlier conversations. Ask one specific question at a time.

        Args:
            question: What to look up, as a question (e.g. "Where does the user live?").
        """
        return memory.context(question, budget_tokens=budget_tokens).text

    return function_tool(recall, name_override=name)
