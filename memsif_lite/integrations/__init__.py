"""Adapters for agent frameworks, each thin over the public :class:`memsif_lite.Memory` API and each
importing its framework only inside its own module (``import memsif_lite`` loads none of them):

* :mod:`memsif_lite.integrations.openai_agents` — OpenAI Agents SDK (``pip install 'memsif_lite[agents]'``)
* :mod:`memsif_lite.integrations.langchain` — LangChain (``pip install 'memsif_lite[langchain]'``)
* :mod:`memsif_lite.integrations.langgraph` — LangGraph (``pip install 'memsif_lite[langchain]'``)

What they share: the chat roles a conversation's messages are stored under (:class:`Speakers`) and
the time they are stored with.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..core_facts import check_user_speaker
from ..errors import InvalidInputError

__all__ = ["Speakers", "now_utc"]


@dataclass(frozen=True)
class Speakers:
    """The speaker each chat role is stored as: name the user (``Speakers(user="Maya")``) and her
    CoreFacts get her name as their subject ("I live in Porto" becomes "Maya lives in Porto")."""

    user: str = "user"
    assistant: str = "assistant"
    system: str = "system"

    def __post_init__(self) -> None:
        names = (self.user, self.assistant, self.system)
        if not all(isinstance(n, str) and n.strip() for n in names):
            raise InvalidInputError("speaker names must be non-empty strings")
        if len({" ".join(n.split()) for n in names}) != 3:
            raise InvalidInputError("the user, assistant and system speakers must be three different names")
        check_user_speaker(self.user)

    def speaker(self, role: str) -> str | None:
        """The speaker a role is stored as; None for a role that is not chat (tool, function...)."""
        return {"user": self.user, "assistant": self.assistant, "system": self.system,
                "developer": self.system}.get(role)

    def role(self, speaker: str) -> str:
        """The role of a stored speaker: a speaker this mapping does not name (a message another
        program stored in the same session) is read back as the user's."""
        return {" ".join(self.assistant.split()): "assistant", " ".join(self.system.split()): "system"}.get(
            speaker, "user")


def now_utc() -> dt.datetime:
    """The time a message is stored with (aware, UTC): given explicitly, so a message repeated in a
    conversation ("yes") is stored again rather than taken for a retried call."""
    return dt.datetime.now(dt.timezone.utc)

