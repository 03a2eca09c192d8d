"""A mem0-shaped facade: ``from memsif_lite.compat.mem0 import Memory`` in place of
``from mem0 import Memory``. Thin over :class:`memsif_lite.Memory` and one file per subject
(:mod:`memsif_lite.homes`); it returns the dicts mem0 documents (docs/mem0.md).

Subjects and files
    ``user_id`` / ``agent_id`` name the file (``users/<user>.db``, ``users/<user>/<agent>.db``,
    ``agents/<agent>.db`` under the memory home): each is checked by
    :func:`~memsif_lite.homes.validate_name` (``"../x"`` is an InvalidInputError, never a path),
    names are case-insensitive, and a call only ever opens the files of the subject it names
    (``user_id`` alone: the user's file and the user's per-agent files). ``run_id`` is a session
    of that file (memsif's ``session``), so it needs a user or an agent beside it.

Memories
    Two kinds, told apart by the id:

    - a **message memory**: each ``user`` / ``assistant`` message given to :meth:`Memory.add` is
      stored as a memsif message (speaker: the user id, or the agent id for the assistant). The
      memsif message's ``source_id`` holds the memory's key, its version, the role and the
      metadata (``mem0:{...}`` JSON, at most 200 characters: larger metadata is refused).
      :meth:`Memory.update` appends the new text as the next version (memsif never edits a
      message), so :meth:`Memory.history` lists every version; only the latest is returned by
      ``get`` / ``search`` / ``get_all``.
    - a **CoreFact** memsif derived from the messages (paper §3.3; offline by its rules, or by
      the LLM). It can be read, searched, deleted and its history read (Add / Update / Merge /
      Supersede), not edited by hand: say the correction with :meth:`Memory.add`.

Ids
    ``m:<32 hex>:<user>:<agent>`` (a message memory) or ``f:<fact id>:<user>:<agent>`` (a
    CoreFact; an absent user or agent is empty). The id names the one file the memory lives in,
    so ``get`` / ``update`` / ``delete`` / ``history`` open that file and no other (an id is
    parsed and its names validated before any path is built). As with mem0's ids, an application
    serving many users must check that an id it is handed belongs to the caller.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Mapping

from ..errors import InvalidInputError, NotFoundError
from ..homes import OpenMemories, default_home, memory_path, validate_name
from ..memory import Memory as MemsifMemory

from .mem0_import import import_mem0
from .mem0_model import (FACT_EVENTS, MemoryId, Record, Scope, as_messages, check_metadata, fact_item, iso,
                         matches, message_item, stored_memories)

__all__ = ["Memory", "import_mem0"]

log = logging.getLogger("memsif_lite")

RRF_K = 60


class Memory:
    """mem0's ``Memory`` over memsif files: one per user / agent under ``home`` (else
    ``$MEMSIF_HOME``, else the platform's data directory). ``memory_kwargs`` go to every
    :class:`memsif_lite.Memory` it opens (``llm=``, ``llm_kwargs=``, ``config=``, ``key=``, ``process=``;
    ``process`` is ``"inline"`` unless given, also with an LLM: ``add`` waits for the steps it
    queued, as mem0's ``add`` waits for its LLM)."""

    def __init__(self, home: str | Path | None = None, **memory_kwargs: Any):
        if memory_kwargs.get("read_only"):
            raise InvalidInputError("memsif_lite.compat.mem0.Memory writes; open files read-only with memsif_lite")
        self.home = Path(home).expanduser() if home is not None else default_home()
        self._kwargs = {"process": "inline", **memory_kwargs}  # add() reports the facts it made, as mem0's does
        self._files_open = OpenMemories(self.home, **self._kwargs)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "Memory":
        """mem0's ``Memory.from_config``: ``home`` and ``llm`` (a litellm model string, or mem0's
        ``{"provider": ..., "config": {"model": ..., "api_key"/"base_url"...}}``) are used; memsif
        keeps its own embedder, vector store and history, so other keys are ignored."""
        if not isinstance(config, Mapping):
            raise InvalidInputError("config must be a dict")
        kwargs: dict[str, Any] = {}
        llm = config.get("llm")
        if isinstance(llm, str):
            kwargs["llm"] = llm
        elif isinstance(llm, Mapping):
            conf = dict(llm.get("config") or {})
            model = conf.pop("model", None)
            if not isinstance(model, str):
                raise InvalidInputError("config['llm']['config']['model'] must name the model")
            kwargs["llm"] = f"{llm.get('provider', 'openai')}/{model}"
            extra = {"api_key": conf.get("api_key"), "api_base": conf.get("base_url") or conf.get("openai_base_url")
                                                             or conf.get("ollama_base_url")}
            kwargs["llm_kwargs"] = {k: v for k, v in extra.items() if v}
        ignored = sorted(set(config) - {"home", "llm"})
        if ignored:
            log.info("memsif_lite.compat.mem0: config keys %s are not used (memsif keeps its own)", ignored)
        return cls(config.get("home"), **kwargs)

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every memory file this facade opened."""
        self._files_open.close()

    # -- files ---------------------------------------------------------------------------------
    def _file(self, scope: Scope, *, create: bool) -> MemsifMemory | None:
        return self._files_open.get(scope.user, scope.agent, create=create)

    def _files(self, scope: Scope) -> list[tuple[Scope, MemsifMemory]]:
        """The existing files of a scope: a user alone also owns the user's per-agent files."""
        scopes = [Scope(scope.user, scope.agent, scope.run)]
        if scope.user is not None and scope.agent is None:
            folder = memory_path(scope.user, home=self.home).with_suffix("")
            if folder.is_dir() and not folder.is_symlink():
                for f in sorted(folder.glob("*.db")):
                    try:
                        scopes.append(Scope(scope.user, validate_name(f.stem, "agent"), scope.run))
                    except InvalidInputError:
                        continue  # not a file memsif named: not this user's memory
        out = []
        for s in scopes:
            mem = self._file(s, create=False)
            if mem is not None:
                out.append((s, mem))
        return out

    # -- the mem0 API ----------------------------------------------------------------------------
    def add(self, messages: Any, *, user_id: str | None = None, agent_id: str | None = None,
            run_id: str | None = None, metadata: Mapping[str, Any] | None = None, infer: bool = True,
            memory_type: str | None = None, prompt: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Store the messages as memories; with ``infer``, also report the CoreFacts memsif added,
        changed or ended on the way (``event``: ADD / UPDATE / DELETE; memsif derives facts
        whatever ``infer`` says — they are written as topical segments close)."""
        if memory_type is not None or prompt is not None:
            raise InvalidInputError("memory_type and prompt are not supported: memsif derives CoreFacts with its own "
                                    "rules and prompts (docs/mem0.md)")
        scope = Scope.of(user_id, agent_id, run_id)
        msgs, meta = as_messages(messages), check_metadata(metadata)
        rows, keys = [], []
        for m in msgs:
            key = uuid.uuid4().hex
            speaker = (user_id or "user") if m["role"] == "user" else (agent_id or "assistant")
            rows.append({"speaker": speaker, "text": m["content"], "session": scope.run,
                         "source_id": Record(key, 1, m["role"], meta).source_id()})
            keys.append(key)
        if not rows:
            return {"results": []}
        mem = self._file(scope, create=True)
        assert mem is not None
        before = {f.id: f for f in mem.facts()} if infer else {}
        added = mem.remember(rows)
        results = [{"id": str(MemoryId("m", key, scope)), "memory": row["text"], "event": "ADD" if a.new else "NONE"}
                   for key, row, a in zip(keys, rows, added, strict=True)]
        if infer:
            after = {f.id: f for f in mem.facts()}
            for fid, f in after.items():
                old = before.get(fid)
                if old is None:
                    results.append({"id": str(MemoryId("f", str(fid), scope)), "memory": f.stmt, "event": "ADD"})
                elif old.stmt != f.stmt:
                    results.append({"id": str(MemoryId("f", str(fid), scope)), "memory": f.stmt, "event": "UPDATE",
                                    "previous_memory": old.stmt})
            results += [{"id": str(MemoryId("f", str(fid), scope)), "memory": f.stmt, "event": "DELETE"}
                        for fid, f in before.items() if fid not in after]
        return {"results": results}

    def get(self, memory_id: str) -> dict[str, Any] | None:
        """One memory, or None when there is no such memory."""
        mid = MemoryId.parse(memory_id)
        mem = self._file(mid.scope, create=False)
        if mem is None:
            return None
        if mid.kind == "f":
            fact = next((f for f in mem.facts(include_superseded=True) if f.id == int(mid.key)), None)
            return None if fact is None else fact_item(mid.scope, fact)
        stored = stored_memories(mem, None).get(mid.key)
        return None if stored is None else message_item(mid.scope, mid.key, stored)

    def get_all(self, *, user_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                filters: Mapping[str, Any] | None = None, limit: int = 100,
                top_k: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """The subject's memories (current CoreFacts, then message memories in the order they were
        added), at most ``limit`` (``top_k``), those whose metadata matches ``filters``."""
        scope, limit, wanted = self._query(user_id, agent_id, run_id, filters, limit, top_k)
        items = []
        for s, mem in self._files(scope):
            items += [fact_item(s, f) for f in mem.facts(sessions=[s.run] if s.run else None)]
            items += [message_item(s, k, st) for k, st in stored_memories(mem, s.run).items()]
        return {"results": [i for i in items if matches(i, wanted)][:limit]}

    def search(self, query: str, *, user_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, limit: int = 100, filters: Mapping[str, Any] | None = None,
               threshold: float | None = None, top_k: int | None = None) -> dict[str, list[dict[str, Any]]]:
        """Memories for ``query``, best first: memsif's hybrid (dense + BM25) message ranking and its
        CoreFact retrieval (with an LLM configured, a fact ranks by its source messages instead: the
        retrieval of :meth:`memsif_lite.Memory.context` would ask the LLM), fused by reciprocal
        rank. ``score`` is that fused rank in (0, 1] (1: first of a ranking; a fact before a message
        on a tie), not a cosine; ``threshold`` applies to it."""
        scope, limit, wanted = self._query(user_id, agent_id, run_id, filters, limit, top_k)
        if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                      or not 0 <= threshold <= 1):
            raise InvalidInputError("threshold must be a number between 0 and 1")
        scored: list[dict[str, Any]] = []
        for s, mem in self._files(scope):
            runs = [s.run] if s.run else None
            stored = stored_memories(mem, s.run)
            latest = {st.latest[0].id: k for k, st in stored.items()}
            found = mem.search(query, k=min(1000, max(3 * limit, 30)), sessions=runs)
            hits = [latest[h.id] for h in found if h.id in latest]
            facts = {f.id: f for f in mem.facts(sessions=runs)}
            if self._kwargs.get("llm") is None:  # memsif's fact retrieval (offline, so no LLM call)
                ranked = [facts[f.id] for f in mem.context(query, sessions=runs).facts
                          if f.kind == "core" and f.id in facts]
            else:  # context() would ask the LLM: a fact ranks where its best source message ranks
                rank = {h.id: n for n, h in enumerate(found)}
                ranked = sorted((f for f in facts.values() if any(m in rank for m in f.message_ids)),
                                key=lambda f: min(rank.get(m, len(rank)) for m in f.message_ids))
            for items in ([message_item(s, k, stored[k]) for k in hits], [fact_item(s, f) for f in ranked]):
                items = [i for i in items if matches(i, wanted)]
                scored += [{**i, "score": (RRF_K + 1) / (RRF_K + rank)} for rank, i in enumerate(items, 1)]
        scored.sort(key=lambda i: (-i["score"], not i["id"].startswith("f:")))  # facts first (paper §3.5)
        return {"results": [i for i in scored if threshold is None or i["score"] >= threshold][:limit]}

    def update(self, memory_id: str, data: str, metadata: Mapping[str, Any] | None = None) -> dict[str, str]:
        """Give a message memory new text (its next version; the id stays). A CoreFact is refused:
        memsif derives facts from what was said, so say the correction with :meth:`add`."""
        mid = MemoryId.parse(memory_id)
        if not isinstance(data, str) or not data.strip():
            raise InvalidInputError("data must be a non-empty string")
        meta = check_metadata(metadata)
        if mid.kind == "f":
            raise InvalidInputError(f"memory {memory_id} is a CoreFact memsif derived from messages and is not edited "
                                    "by hand: add() the corrected statement (memsif updates or supersedes the fact), "
                                    "or delete() it")
        mem = self._file(mid.scope, create=False)
        stored = None if mem is None else stored_memories(mem, None).get(mid.key)
        if mem is None or stored is None:
            raise NotFoundError(f"no memory with id {memory_id}")
        msg, rec = stored.latest
        new = Record(rec.key, rec.version + 1, rec.role, meta if metadata is not None else rec.metadata)
        mem.remember([{"speaker": msg.speaker, "text": data, "session": msg.session, "source_id": new.source_id()}])
        return {"message": "Memory updated successfully!"}

    def delete(self, memory_id: str) -> dict[str, str]:
        """Forget a memory (every version of a message memory; a CoreFact) and what was derived only from it."""
        mid = MemoryId.parse(memory_id)
        mem = self._file(mid.scope, create=False)
        if mem is not None and mid.kind == "f":
            mem.forget(fact_id=int(mid.key))  # NotFoundError when there is none
            return {"message": "Memory deleted successfully!"}
        stored = None if mem is None else stored_memories(mem, None).get(mid.key)
        if mem is None or stored is None:
            raise NotFoundError(f"no memory with id {memory_id}")
        for msg, _ in stored.versions:
            mem.forget(message_id=msg.id)
        return {"message": "Memory deleted successfully!"}

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, str]:
        """Forget every message (of ``run_id``: that session's) and fact in the subject's own files,
        and nothing in any other file."""
        scope = Scope.of(user_id, agent_id, run_id)
        for s, mem in self._files(scope):
            for msg in mem.messages(sessions=[s.run] if s.run else None):
                mem.forget(message_id=msg.id)
            if s.run is None:
                for f in mem.facts(include_superseded=True):
                    mem.forget(fact_id=f.id)
        return {"message": "Memories deleted successfully!"}

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """A memory's changes, oldest first: a message memory's versions (ADD, then UPDATE), a
        CoreFact's history (Add / Update / Merge / Supersede, and DELETE when it was superseded).
        A deleted memory has none: memsif keeps nothing of what it forgot."""
        mid = MemoryId.parse(memory_id)
        mem = self._file(mid.scope, create=False)
        if mem is None:
            return []
        rows: list[dict[str, Any]] = []
        if mid.kind == "f":
            try:
                events = mem.fact_history(int(mid.key))
            except NotFoundError:
                return []
            old = None
            for n, e in enumerate(events, 1):
                event = FACT_EVENTS.get(e.op, "UPDATE")
                rows.append({"id": f"{memory_id}#{n}", "memory_id": memory_id, "old_memory": old,
                             "new_memory": None if event == "DELETE" else e.stmt, "event": event,
                             "created_at": iso(e.at), "updated_at": None, "is_deleted": event == "DELETE",
                             "actor_id": None, "role": None, "detail": e.detail})
                old = e.stmt
            return rows
        stored = stored_memories(mem, None).get(mid.key)
        old_text = None
        for msg, rec in stored.versions if stored else ():
            rows.append({"id": f"{memory_id}#{rec.version}", "memory_id": memory_id, "old_memory": old_text,
                         "new_memory": msg.text, "event": "ADD" if old_text is None else "UPDATE",
                         "created_at": iso(msg.at), "updated_at": None if old_text is None else iso(msg.at),
                         "is_deleted": False, "actor_id": None, "role": rec.role})
            old_text = msg.text
        return rows

    def reset(self) -> None:
        """Not provided: it would forget every user's memory at once. Use :meth:`delete_all` per
        user, or remove the memory home directory yourself."""
        raise InvalidInputError("reset() is not provided by memsif_lite.compat.mem0: delete_all(user_id=...) per "
                                f"user, or remove the memory home ({self.home}) yourself")

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _query(user_id: Any, agent_id: Any, run_id: Any, filters: Any, limit: Any,
               top_k: Any) -> tuple[Scope, int, dict[str, Any]]:
        if filters is not None and not isinstance(filters, Mapping):
            raise InvalidInputError("filters must be a dict")
        scope = Scope.of(user_id, agent_id, run_id, filters)
        n = top_k if top_k is not None else limit
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 10**6:
            raise InvalidInputError("limit / top_k must be an integer between 0 and 1000000")
        wanted = {k: v for k, v in (filters or {}).items() if k not in ("user_id", "agent_id", "run_id")}
        for k, v in wanted.items():
            if isinstance(v, Mapping) or k in ("AND", "OR", "NOT"):
                raise InvalidInputError(f"filter {k!r}: only equality on metadata is supported ({{'key': value}})")
        return scope, n, wanted
