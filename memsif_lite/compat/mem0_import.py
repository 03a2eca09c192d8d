"""``import_mem0`` (``memsif import-mem0``): mem0's JSON export into one memory file per user /
agent, as :class:`memsif_lite.compat.mem0.Memory` keeps them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Mapping

from ..errors import InvalidInputError
from ..homes import memory_path, open_memory
from ..timeutil import to_stored

from .mem0_model import ROLES, MemoryId, Record, Scope, check_metadata

__all__ = ["import_mem0"]


def _export_items(doc: Any) -> list[Any]:
    if isinstance(doc, Mapping):
        for key in ("results", "memories"):
            if isinstance(doc.get(key), list):
                return doc[key]
        raise InvalidInputError("expected a list of memories, or an object with a 'results' (or 'memories') list")
    if isinstance(doc, list):
        return doc
    raise InvalidInputError("expected a list of memories, or an object with a 'results' list")


def _import_key(item: Mapping[str, Any], scope: Scope) -> str:
    """The memory's key: its mem0 UUID (or this facade's key), else a name-based UUID of its id,
    else of what it says and when (so a second import finds it again)."""
    given = item.get("id")
    if isinstance(given, str) and given:
        try:
            return MemoryId.parse(given).key  # listed by this facade: the same memory
        except InvalidInputError:
            pass
        try:
            return uuid.UUID(given).hex
        except ValueError:
            return uuid.uuid5(uuid.NAMESPACE_URL, f"mem0:id:{given}").hex
    basis = json.dumps([scope.user, scope.agent, item.get("memory"), item.get("created_at")])
    return uuid.uuid5(uuid.NAMESPACE_URL, f"mem0:memory:{basis}").hex


def _import_row(i: int, item: Any) -> tuple[Scope, dict[str, Any]]:
    if not isinstance(item, Mapping):
        raise InvalidInputError(f"memory {i}: expected an object")
    text = item.get("memory")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError(f"memory {i}: 'memory' must be a non-empty string")
    try:
        scope = Scope.of(item.get("user_id"), item.get("agent_id"), item.get("run_id"))
        role = item.get("role") or "user"
        if role not in ROLES:
            raise InvalidInputError(f"role must be 'user' or 'assistant', not {role!r}")
        meta = check_metadata(item.get("metadata"))
        cats = item.get("categories")
        if cats is not None:
            if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats):
                raise InvalidInputError("categories must be a list of strings")
            meta = {**(meta or {}), "categories": cats}
        created, updated = item.get("created_at"), item.get("updated_at")
        at = to_stored(created) if created is not None else None
        updated = None if updated is None else to_stored(updated)  # a bad time is refused before anything is written
        name = str(item.get("user_id") if role == "user" else item.get("agent_id") or "assistant")
        if role == "user" and item.get("user_id") is None:
            name = "user"
        rec = Record(_import_key(item, scope), 1, role, meta, updated)
        return scope, {"speaker": name, "text": text, "at": at, "session": scope.run, "source_id": rec.source_id()}
    except InvalidInputError as e:
        raise InvalidInputError(f"memory {i}: {e}") from None


def import_mem0(path: str | Path, *, home: str | Path | None = None, **memory_kwargs: Any) -> dict[str, Any]:
    """Load mem0's JSON export (what ``get_all`` returns: ``{"results": [...]}`` or a list of
    memories with ``memory``, ``user_id`` / ``agent_id`` / ``run_id``, ``metadata``, ``categories``,
    ``created_at``...) into each subject's file under ``home`` as message memories. The whole
    file is checked before anything is written (an InvalidInputError names the memory); each file
    is written in one transaction; a second run stores nothing again (a memory's key comes from its
    mem0 id). What this facade's ``get_all`` lists imports too: its message memories keep their
    ids, its CoreFacts are skipped (memsif derives them again from the messages). Returns the
    counts and the files written."""
    src = Path(path)
    try:
        doc = json.loads(src.read_bytes().decode("utf-8"))
    except OSError as e:
        raise InvalidInputError(f"cannot read {src}: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidInputError(f"{src} is not a JSON export of mem0 ({e})") from None
    groups: dict[Scope, list[dict[str, Any]]] = {}
    for i, item in enumerate(_export_items(doc)):
        if isinstance(item, Mapping) and isinstance(item.get("id"), str) and item["id"].startswith("f:"):
            try:
                MemoryId.parse(item["id"])
                continue  # a CoreFact this facade listed: memsif derives it again from the messages
            except InvalidInputError:
                pass
        scope, row = _import_row(i, item)
        groups.setdefault(Scope(scope.user, scope.agent), []).append(row)
    files: dict[str, int] = {}
    new = 0
    for scope, rows in groups.items():
        with open_memory(scope.user, scope.agent, home=home, **memory_kwargs) as mem:
            added = mem.remember(rows)
        files[str(memory_path(scope.user, scope.agent, home=home))] = len(rows)
        new += sum(a.new for a in added)
    total = sum(files.values())
    return {"file": str(src), "memories": total, "new": new, "already_present": total - new, "files": files}
