"""LangGraph (``pip install 'memsif_lite[langchain]'``): a ``BaseStore`` for namespaced long-term
memories, one memsif file per namespace under a memory home.

A namespace is one or two labels, each a memory-home name (:func:`memsif_lite.homes.validate_name`,
in lower case): ``("alice",)`` is ``<home>/users/alice.db`` and ``("alice", "coder")``
``<home>/users/alice/coder.db`` — the files :func:`memsif_lite.open_memory` opens for that user
and agent, so a graph's memories sit beside the user's conversations and share their facts. The
namespace only ever picks a name inside the home: any other label (a path, ``..``, upper case, a
third level) is refused with ``InvalidNamespaceError``.

An item is a memsif message of the session ``"langgraph"`` whose ``source_id`` is the item's key and
whose text is its value as JSON (so the value's text is indexed, keys and all). ``put`` stores the
new value, then removes the old one (after a crash between the two, the newer one is read);
``get`` and ``search`` without a query list the namespace's items, oldest first; ``search`` with a
query ranks them by memsif's hybrid retrieval (dense + BM25, fused; ``score`` is the fused score);
``filter`` matches values exactly or with ``$eq $ne $gt $gte $lt $lte``, applied to the best
``5 × (offset + limit) + 20`` hits of a query. An item's ``created_at`` and ``updated_at`` are the
time of its last ``put``. ``index=`` and TTLs are not supported (every value is indexed, none expire).

::

    from memsif_lite.integrations.langgraph import MemsifStore

    with MemsifStore(home="memories") as store:
        store.put(("alice",), "food", {"text": "Alice is vegetarian"})
        store.search(("alice",), query="what does she eat?")
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from langgraph.store.base import (BaseStore, GetOp, InvalidNamespaceError, Item, ListNamespacesOp, MatchCondition,
                                  Op, PutOp, Result, SearchItem, SearchOp)

from ..errors import InvalidInputError, MemsifError, NotFoundError
from ..homes import OpenMemories, default_home, validate_name
from ..memory import Memory
from ..types import Message
from . import now_utc

__all__ = ["MemsifStore", "SESSION"]

log = logging.getLogger("memsif_lite")

#: the session every item is stored in (a memory file may hold other conversations too)
SESSION = "langgraph"
_OPS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b, "$gt": lambda a, b: a > b,
        "$gte": lambda a, b: a >= b, "$lt": lambda a, b: a < b, "$lte": lambda a, b: a <= b}


def _check_namespace(namespace: tuple[str, ...]) -> tuple[str, ...]:
    if not isinstance(namespace, tuple) or not 1 <= len(namespace) <= 2:
        raise InvalidNamespaceError(f"a namespace is (user,) or (user, agent), got {namespace!r}")
    for label in namespace:
        try:
            ok = validate_name(label, "namespace label") == label
        except InvalidInputError as e:
            raise InvalidNamespaceError(str(e)) from None
        if not ok:
            raise InvalidNamespaceError(f"namespace label {label!r} must be in lower case")
    return namespace


def _matches(value: Any, condition: Any) -> bool:
    if isinstance(condition, dict) and condition and all(k in _OPS for k in condition):
        try:
            return all(_OPS[op](value, want) for op, want in condition.items())
        except TypeError:  # e.g. "$gt" between a string and a number
            return False
    return bool(value == condition)


def _namespace_matches(ns: tuple[str, ...], cond: MatchCondition) -> bool:
    path = tuple(cond.path)
    if len(path) > len(ns):
        return False
    part = ns[:len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path):]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


class MemsifStore(BaseStore):
    """A LangGraph store over the memory files under ``home`` (see the module docstring).
    ``speaker``: who the items are stored as said by; ``memory_kwargs`` go to every
    :class:`~memsif_lite.Memory` it opens (``embedder=``, ``llm=``, ``key=``...)."""

    def __init__(self, home: str | Path | None = None, *, speaker: str = "memory", **memory_kwargs: Any):
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.speaker = speaker
        self._files_open = OpenMemories(self.home, **memory_kwargs)

    def __enter__(self) -> "MemsifStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._files_open.close()

    def _memory(self, ns: tuple[str, ...], *, create: bool) -> Memory | None:
        """The open memory of ``ns``; None when its file does not exist and ``create`` is false."""
        return self._files_open.get(ns[0], ns[1] if len(ns) > 1 else None, create=create)

    # -- the operations -----------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(_check_namespace(op.namespace), op.key))
            elif isinstance(op, PutOp):
                self._put(_check_namespace(op.namespace), op.key, op.value)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                raise InvalidInputError(f"unknown store operation {type(op).__name__}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await asyncio.to_thread(self.batch, list(ops))

    def _items(self, mem: Memory) -> dict[str, tuple[Message, dict[str, Any]]]:
        """key -> the newest message holding it, and its value. A message of the session that is not
        an item (no key, or text that is not a JSON object: stored by something else) is skipped."""
        out = {}
        for m in mem.messages(sessions=[SESSION]):
            try:
                value = json.loads(m.text)
            except ValueError:
                value = None
            if m.source_id is not None and isinstance(value, dict):
                out[m.source_id] = (m, value)
            elif m.source_id is not None:
                log.warning("%s: message %d of session %r is not a store item (not a JSON object)",
                            mem.path, m.id, SESSION)
        return out

    @staticmethod
    def _item(ns: tuple[str, ...], found: tuple[Message, dict[str, Any]], score: float | None = None) -> SearchItem:
        m, value = found
        return SearchItem(namespace=ns, key=str(m.source_id), value=value, created_at=m.local_at,
                          updated_at=m.local_at, score=score)

    def _get(self, ns: tuple[str, ...], key: str) -> Item | None:
        mem = self._memory(ns, create=False)
        found = None if mem is None else self._items(mem).get(key)
        if found is None:
            return None
        item = self._item(ns, found)
        return Item(namespace=item.namespace, key=item.key, value=item.value, created_at=item.created_at,
                    updated_at=item.updated_at)

    def _put(self, ns: tuple[str, ...], key: str, value: Mapping[str, Any] | None) -> None:
        if not isinstance(key, str) or not key.strip() or len(key) > 200:
            raise InvalidInputError("a key must be a string of 1-200 characters")
        mem = self._memory(ns, create=value is not None)
        if mem is None:
            return
        old = [m.id for m in mem.messages(sessions=[SESSION]) if m.source_id == key]
        if value is not None:
            if not isinstance(value, Mapping):
                raise InvalidInputError(f"a value must be a dict, got {type(value).__name__}")
            try:
                text = json.dumps(dict(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise InvalidInputError(f"a value must be JSON: {e}") from None
            mem.add(self.speaker, text, at=now_utc(), session=SESSION, source_id=key)
        for mid in old:
            try:
                mem.forget(message_id=mid)
            except NotFoundError:  # another process removed it first
                pass

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = tuple(op.namespace_prefix)
        if len(prefix) > 2:
            raise InvalidNamespaceError(f"a namespace is (user,) or (user, agent), got the prefix {prefix!r}")
        spaces = [ns for ns in self._namespaces() if ns[:len(prefix)] == prefix]
        found: list[SearchItem] = []
        for ns in spaces:
            mem = self._memory(ns, create=False)
            if mem is None:
                continue
            items = self._items(mem)
            if op.query:
                newest = {m.id for m, _ in items.values()}
                k = 5 * (op.offset + op.limit) + 20
                hits = [h for h in mem.search(op.query, k=k, sessions=[SESSION]) if h.id in newest]
                found += [self._item(ns, items[str(h.source_id)], h.score) for h in hits]
            else:
                found += [self._item(ns, i) for i in sorted(items.values(), key=lambda i: i[0].id)]
        if op.filter:
            found = [i for i in found if all(_matches(i.value.get(f), c) for f, c in op.filter.items())]
        if op.query:
            found.sort(key=lambda i: -(i.score or 0.0))
        return found[op.offset:op.offset + op.limit]

    def _namespaces(self) -> list[tuple[str, ...]]:
        """The namespaces whose file exists under the home, sorted."""
        users = self.home / "users"
        out: list[tuple[str, ...]] = []
        for f in sorted(users.glob("*.db")) + sorted(users.glob("*/*.db")):
            ns = tuple(f.relative_to(users).with_suffix("").parts)
            try:
                out.append(_check_namespace(ns))
            except (InvalidNamespaceError, MemsifError):
                continue  # a file memsif would not have made for a namespace
        return sorted(out)

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = []
        for ns in self._namespaces():
            mem = self._memory(ns, create=False)
            if mem is not None and mem.messages(sessions=[SESSION], limit=1):
                spaces.append(ns)
        if op.match_conditions:
            spaces = [ns for ns in spaces if all(_namespace_matches(ns, c) for c in op.match_conditions)]
        if op.max_depth is not None:
            spaces = sorted({ns[:op.max_depth] for ns in spaces})
        return spaces[op.offset:op.offset + op.limit]
