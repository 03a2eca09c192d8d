"""How mem0's memories map onto memsif (used by :mod:`memsif_lite.compat.mem0`): the subject of a
call and its file (:class:`Scope`), memory ids (:class:`MemoryId`), what a message memory's
``source_id`` holds (:class:`Record`) and its versions (:class:`Stored`), mem0's forms of messages
and metadata, and the dicts mem0 documents for a memory."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from ..errors import InvalidInputError
from ..homes import validate_name
from ..memory import Memory as MemsifMemory
from ..types import CoreFact, Message

__all__ = ["PREFIX", "MAX_SOURCE", "ROLES", "FACT_EVENTS", "Scope", "MemoryId", "Record", "Stored", "iso",
           "content_hash", "check_metadata", "as_messages", "stored_memories", "message_item", "fact_item", "matches"]

PREFIX = "mem0:"              # the start of the source_id of a message memory
MAX_SOURCE = 200              # memsif's limit on a source_id
ROLES = ("user", "assistant")
RRF_K = 60
_KEY = re.compile(r"[0-9a-f]{32}")
_FACT = re.compile(r"[1-9][0-9]{0,17}")
FACT_EVENTS = {"add": "ADD", "update": "UPDATE", "merge": "UPDATE", "supersede": "UPDATE", "superseded": "DELETE"}


@dataclass(frozen=True)
class Scope:
    """The subject of a call: its file (user and/or agent, validated, lower case) and a run."""

    user: str | None
    agent: str | None
    run: str | None = None

    @classmethod
    def of(cls, user_id: Any = None, agent_id: Any = None, run_id: Any = None,
           filters: Mapping[str, Any] | None = None) -> "Scope":
        given = dict(filters or {})
        for key, value in (("user_id", user_id), ("agent_id", agent_id), ("run_id", run_id)):
            if value is not None:
                if given.get(key) not in (None, value):
                    raise InvalidInputError(f"{key} is given twice with different values")
                given[key] = value
        user, agent, run = given.get("user_id"), given.get("agent_id"), given.get("run_id")
        if user is None and agent is None:
            raise InvalidInputError("give user_id or agent_id (memsif keeps one memory file per user / agent"
                                    + ("; a run_id is a session of such a file)" if run is not None else ")"))
        if run is not None and (not isinstance(run, str) or not run.strip() or len(run) > MAX_SOURCE):
            raise InvalidInputError(f"run_id must be a non-empty string of at most {MAX_SOURCE} characters")
        return cls(None if user is None else validate_name(user, "user"),
                   None if agent is None else validate_name(agent, "agent"), run)

    def ids(self) -> dict[str, str]:
        return {k: v for k, v in (("user_id", self.user), ("agent_id", self.agent), ("run_id", self.run)) if v}


@dataclass(frozen=True)
class MemoryId:
    kind: str      # "m" (a message memory) or "f" (a CoreFact)
    key: str       # 32 hex digits, or the fact id
    scope: Scope

    def __str__(self) -> str:
        return f"{self.kind}:{self.key}:{self.scope.user or ''}:{self.scope.agent or ''}"

    @classmethod
    def parse(cls, memory_id: Any) -> "MemoryId":
        if not isinstance(memory_id, str):
            raise InvalidInputError(f"memory_id must be a string, not {type(memory_id).__name__}")
        parts = memory_id.split(":")
        if len(parts) != 4 or parts[0] not in ("m", "f") or not (_KEY if parts[0] == "m" else _FACT).fullmatch(
                parts[1]) or not (parts[2] or parts[3]):
            raise InvalidInputError(f"{memory_id[:80]!r} is not a memory id of memsif_lite.compat.mem0 "
                                    "('m:<key>:<user>:<agent>' or 'f:<fact id>:<user>:<agent>')")
        return cls(parts[0], parts[1], Scope(validate_name(parts[2], "user") if parts[2] else None,
                                             validate_name(parts[3], "agent") if parts[3] else None))


@dataclass(frozen=True)
class Record:
    """What a message memory's ``source_id`` holds."""

    key: str
    version: int
    role: str
    metadata: dict | None
    updated_at: str | None = None

    def updated(self) -> datetime | None:
        """The time mem0 last updated an imported memory (stored as memsif stores times: UTC)."""
        return None if self.updated_at is None else datetime.fromisoformat(self.updated_at)

    def source_id(self) -> str:
        doc: dict[str, Any] = {"k": self.key, "v": self.version, "r": self.role}
        if self.metadata:
            doc["m"] = self.metadata
        if self.updated_at:
            doc["u"] = self.updated_at
        text = PREFIX + json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        if len(text) > MAX_SOURCE:
            raise InvalidInputError(f"metadata too large: memsif keeps a memory's metadata in its source id, at most "
                                    f"{MAX_SOURCE} characters with the key ({len(text)} here)")
        return text

    @classmethod
    def parse(cls, source_id: str | None) -> "Record | None":
        """The record of a stored message, or None (not a message memory, or not one we wrote)."""
        if not source_id or not source_id.startswith(PREFIX):
            return None
        try:
            doc = json.loads(source_id[len(PREFIX):])
        except ValueError:
            return None
        if not (isinstance(doc, dict) and isinstance(doc.get("k"), str) and _KEY.fullmatch(doc["k"])
                and type(doc.get("v")) is int and doc["v"] >= 1 and doc.get("r") in ROLES
                and isinstance(doc.get("m", {}), dict) and isinstance(doc.get("u", ""), str)):
            return None
        try:
            datetime.fromisoformat(doc.get("u") or "2000-01-01")
        except ValueError:
            return None
        return cls(doc["k"], doc["v"], doc["r"], doc.get("m") or None, doc.get("u") or None)


@dataclass(frozen=True)
class Stored:
    """A message memory as stored: its versions (oldest first), each a message and its record."""

    versions: tuple[tuple[Message, Record], ...]

    @property
    def latest(self) -> tuple[Message, Record]:
        return self.versions[-1]


def iso(at: datetime | None) -> str | None:
    return None if at is None else at.replace(tzinfo=timezone.utc).isoformat()


def content_hash(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()  # noqa: S324 - mem0's content hash, not security


def check_metadata(metadata: Any) -> dict | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidInputError("metadata must be a dict")
    try:
        return json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"metadata must be JSON data: {e}") from None


def as_messages(messages: Any) -> list[dict[str, str]]:
    """mem0's ``messages``: a string (one user message), a dict, or a list of ``{role, content}``
    dicts; ``system`` messages are dropped (mem0 stores none either)."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    elif isinstance(messages, Mapping):
        messages = [messages]
    if not isinstance(messages, (list, tuple)):
        raise InvalidInputError("messages must be a string, a dict or a list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("content"), str) or not m["content"].strip():
            raise InvalidInputError(f"message {i}: a dict with a non-empty string 'content'")
        role = m.get("role", "user")
        if role == "system":
            continue
        if role not in ROLES:
            raise InvalidInputError(f"message {i}: role must be 'user', 'assistant' or 'system', not {role!r}")
        out.append({"role": role, "content": m["content"]})
    return out


def stored_memories(mem: MemsifMemory, run: str | None) -> dict[str, Stored]:
    """Every message memory of a file (of a run), by key: its versions, oldest first."""
    found: dict[str, list[tuple[Message, Record]]] = {}
    for m in mem.messages(sessions=[run] if run else None):
        rec = Record.parse(m.source_id)
        if rec is not None:
            found.setdefault(rec.key, []).append((m, rec))
    return {k: Stored(tuple(sorted(v, key=lambda x: (x[1].version, x[0].id)))) for k, v in found.items()}


def message_item(scope: Scope, key: str, s: Stored) -> dict[str, Any]:
    first, (msg, rec) = s.versions[0][0], s.latest
    updated = iso(msg.at if len(s.versions) > 1 else rec.updated())
    item = {"id": str(MemoryId("m", key, scope)), "memory": msg.text, "hash": content_hash(msg.text),
            "metadata": rec.metadata, "created_at": iso(first.at), "updated_at": updated,
            **Scope(scope.user, scope.agent, msg.session).ids(), "role": rec.role}
    return item


def fact_item(scope: Scope, f: CoreFact) -> dict[str, Any]:
    return {"id": str(MemoryId("f", str(f.id), scope)), "memory": f.stmt, "hash": content_hash(f.stmt),
            "metadata": {"memsif": {"kind": "core_fact", "subject": f.subject, "type": f.type,
                                    "valid_from": iso(f.valid_from), "valid_to": iso(f.valid_to),
                                    "superseded_by": f.superseded_by, "message_ids": list(f.message_ids)}},
            "created_at": iso(f.valid_from), "updated_at": None, **scope.ids()}


def matches(item: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    meta = item.get("metadata") or {}
    return all(meta.get(k) == v for k, v in wanted.items())
