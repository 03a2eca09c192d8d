"""LangChain (``pip install 'memsif_lite[langchain]'``): a chat message history stored as memsif
messages, and a retriever returning what :meth:`Memory.context` found as ``Document`` objects.

``MemsifChatMessageHistory(memory, session_id)`` is a ``BaseChatMessageHistory``: human, AI and
system messages are stored as messages of ``session_id`` under the speakers their roles map to
(:class:`~memsif_lite.integrations.Speakers`), so the history is segmented, linked and mined for
CoreFacts like any conversation. What is not chat — tool messages, the tool calls of an AI message,
a message without text — is kept as a session item (:meth:`Memory.add_item`, the message as
``message_to_dict`` gives it): data of the session, never indexed as something a speaker said.
``messages`` returns them all in the order they were added (an AI message's text and its tool calls
as one message again), so a tool-calling agent gets its history back whole.

``MemsifRetriever(memory=memory, k=4)`` is a ``BaseRetriever``: the context's CoreFacts and
ActiveFacts first, then its dated evidence, at most ``k`` (``invoke(query, k=3)`` too), each a
``Document`` whose ``metadata`` says where it comes from — ``kind`` (``"fact"`` / ``"evidence"``),
``time``, ``speaker``, ``session``, ``message_ids``, ``source_ids``, ``segment_ids``,
``trajectory_ids`` and ``fact_ids``.

::

    from memsif_lite import open_memory
    from memsif_lite.integrations.langchain import MemsifChatMessageHistory, MemsifRetriever

    memory = open_memory(user="maya")
    history = MemsifChatMessageHistory(memory, "chat-1")
    history.add_user_message("I moved to Porto last week.")
    docs = MemsifRetriever(memory=memory, k=4).invoke("Where does Maya live?")
"""

from __future__ import annotations

from typing import Any, Sequence

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.messages import (AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage,
                                     message_to_dict, messages_from_dict)
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict

from ..errors import InvalidInputError
from ..memory import Memory
from ..types import Context, Message
from . import Speakers, now_utc

__all__ = ["MemsifChatMessageHistory", "MemsifRetriever", "message_text", "context_documents"]

_ROLES = {"human": "user", "ai": "assistant", "system": "system",
          "HumanMessageChunk": "user", "AIMessageChunk": "assistant", "SystemMessageChunk": "system"}


def message_text(message: BaseMessage) -> str:
    """The text of a message: its string content, or its text blocks joined."""
    content = message.content
    if isinstance(content, str):
        return content
    parts = [b if isinstance(b, str) else b.get("text") for b in content
             if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")]
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip())


class MemsifChatMessageHistory(BaseChatMessageHistory):
    """A chat history kept as the messages of ``session_id`` in ``memory`` (see the module docstring)."""

    def __init__(self, memory: Memory, session_id: str, *, speakers: Speakers | None = None):
        if not isinstance(memory, Memory):
            raise InvalidInputError("memory must be a memsif_lite.Memory")
        if not isinstance(session_id, str) or not session_id.strip() or len(session_id) > 200:
            raise InvalidInputError("session_id must be a string of 1-200 characters")
        self.memory, self.session_id, self.speakers = memory, session_id, speakers or Speakers()

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        out: list[BaseMessage] = []
        for m in self.memory.items(self.session_id):
            if isinstance(m, Message):
                role = self.speakers.role(m.speaker)
                cls = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}[role]
                out.append(cls(content=m.text))
                continue
            (message,) = messages_from_dict([m.item["langchain"]])
            if m.item.get("joined") and out and isinstance(out[-1], AIMessage):  # its text is the message before
                message = message.model_copy(update={"content": out.pop().content})
            out.append(message)
        return out

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        rows: list[dict[str, Any]] = []
        for message in messages:
            if not isinstance(message, BaseMessage):
                raise InvalidInputError(f"expected LangChain messages, got {type(message).__name__}")
        for message in messages:
            role = message.role if isinstance(message, ChatMessage) else _ROLES.get(message.type)
            speaker = self.speakers.speaker(role) if role else None
            text = message_text(message)
            calls = isinstance(message, AIMessage) and bool(message.tool_calls)
            if speaker is not None and text.strip():
                rows.append({"speaker": speaker, "text": text, "at": now_utc(), "session": self.session_id})
                if not calls:
                    continue
                message = message.model_copy(update={"content": ""})  # the calls, after the text
            self._flush(rows)
            self.memory.add_item(self.session_id, {"langchain": message_to_dict(message), "joined": calls and
                                                   speaker is not None and bool(text.strip())})
        self._flush(rows)

    def _flush(self, rows: list[dict[str, Any]]) -> None:
        if rows:
            self.memory.add_many(rows)
            rows.clear()

    def clear(self) -> None:
        stored = self.memory.items(self.session_id)
        for m in sorted(stored, key=lambda m: isinstance(m, Message)):  # the items, then the messages
            if isinstance(m, Message):
                self.memory.forget(message_id=m.id)
            else:
                self.memory.forget(item_id=m.id)


def context_documents(memory: Memory, context: Context) -> list[Document]:
    """The facts, then the evidence, of a context as Documents (metadata as in the module docstring)."""
    placed = {}  # message id -> (segment id, trajectory id)
    for seg in memory.segments():
        for mid in seg.message_ids:
            placed[mid] = (seg.id, seg.trajectory_id)

    def where(ids: Sequence[int]) -> dict[str, list[int]]:
        segs = sorted({placed[i][0] for i in ids if i in placed})
        trajs = sorted({t for i in ids if i in placed for t in [placed[i][1]] if t is not None})
        return {"segment_ids": segs, "trajectory_ids": trajs}

    docs = []
    for f in context.facts:
        docs.append(Document(page_content=f.stmt, metadata={
            "kind": "fact", "fact_kind": f.kind, "fact_ids": [f.id], "subject": f.subject, "type": f.type,
            "time": f.valid_from.isoformat() if f.valid_from else None,
            "valid_to": f.valid_to.isoformat() if f.valid_to else None, "speaker": None, "session": None,
            "message_ids": list(f.message_ids), "source_ids": [], **where(f.message_ids), "score": f.score}))
    for e in context.evidence:
        facts = [f.id for f in context.facts if set(f.message_ids) & set(e.message_ids)]
        docs.append(Document(page_content=e.stmt, metadata={
            "kind": "evidence", "time": e.local_at.isoformat(), "speaker": e.speaker, "session": e.session,
            "message_ids": list(e.message_ids), "source_ids": list(e.source_ids), **where(e.message_ids),
            "fact_ids": facts}))
    return docs


class MemsifRetriever(BaseRetriever):
    """What the memory holds about a query, as Documents (see the module docstring): at most ``k``,
    from a context of ``budget_tokens``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: Memory
    k: int = 4
    budget_tokens: int = 2000

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        k = self.k if k is None else k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError("k must be a positive integer")
        return context_documents(self.memory, self.memory.context(query, budget_tokens=self.budget_tokens))[:k]
