"""The facade: ``Memory(path)`` over one SQLite file. Each method checks its arguments, takes
the lock and delegates to the ingest pipeline, the query pipeline or the data-access layer."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from . import pipelines, store
from .active_facts import Evidence
from .checks import check_page, check_question, check_search
from .config import Config
from .db import Database, to_message
from .embed import Embedder
from .errors import InvalidInputError, MemoryFileError, NotFoundError
from .filters import MessageFilter, Names
from .forgetting import forget_fact, forget_message
from .query import Answer, Context
from .segments import BoundaryJudge, list_segments
from .timeutil import from_stored, to_stored
from .trajectories import TrajectoryJudge, list_trajectories
from .types import ActiveFact, CandidateCluster, CoreFact, FactEvent, Message, SearchResult, Segment, Trajectory

__all__ = ["Memory"]


class Memory:
    """Long-term memory in one SQLite file.

    >>> with Memory("me.db") as mem:                       # doctest: +SKIP
    ...     mem.add("Ana", "I moved to Lisbon in May.", at="2024-05-02T10:00:00")
    ...     mem.search("where does Ana live?")

    ``llm`` is a litellm model string (``"openai/gpt-4o-mini"``, ``"ollama/qwen3:4b"``);
    ``llm_kwargs`` go to every call (``api_base``, ``api_key``, ``timeout``...). Without ``llm``
    every step uses its offline fallback. ``embedder`` replaces the embedding model (the
    :class:`~memsif_lite.embed.Embedder` protocol; default: the model the file records, else
    ``config.embedding_model`` or the bundled one). ``boundary_judge`` / ``trajectory_judge``
    replace the judges (protocols in :mod:`memsif_lite.segments` / :mod:`memsif_lite.trajectories`).
    """

    def __init__(self, path: str | Path, *, config: Config | None = None, llm: str | None = None,
                 llm_kwargs: Mapping[str, Any] | None = None, embedder: Embedder | None = None,
                 boundary_judge: BoundaryJudge | None = None, trajectory_judge: TrajectoryJudge | None = None):
        if config is not None and not isinstance(config, Config):
            raise InvalidInputError("config must be a memsif_lite.Config")
        if llm is not None and (not isinstance(llm, str) or not llm.strip()):
            raise InvalidInputError("llm must be a litellm model string such as 'openai/gpt-4o-mini'")
        if llm_kwargs is not None and not isinstance(llm_kwargs, Mapping):
            raise InvalidInputError("llm_kwargs must be a mapping of litellm keyword arguments")
        self.path = Path(path)
        self.config = cfg = config or Config()
        self._lock = threading.RLock()
        self._closed = True
        info = store.inspect(self.path)  # refuses foreign/newer/hostile files before anything else
        emb = embedder or pipelines.embedder_for(cfg, info)
        if info is not None:  # a file made with another model is refused before it is opened for writing
            store.check_embedding(info.meta, emb.model_id, emb.dim, emb.metric, self.path)
        con = store.connect(self.path, dim=emb.dim, synchronous=cfg.synchronous, busy_timeout_ms=cfg.busy_timeout_ms,
                            initial_meta=pipelines.initial_meta(emb))
        self._db = Database(con)
        try:
            with store.map_errors():
                pipelines.check_meta(self._db, emb, cfg, self.path)
        except BaseException:
            self._db.close()
            raise
        self._closed = False
        self._llm = pipelines.make_llm(self._db, llm, llm_kwargs, cfg)
        self._p = pipelines.build(self._db, cfg, emb, self._llm, boundary_judge=boundary_judge,
                                  trajectory_judge=trajectory_judge)

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the file. Further calls raise MemoryFileError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    @contextlib.contextmanager
    def _session(self) -> Iterator[Database]:
        """Every public call: the lock, an open file, SQLite errors mapped to StorageError."""
        with self._lock:
            if self._closed:
                raise MemoryFileError("this Memory is closed")
            with store.map_errors():
                yield self._db

    # -- writing ---------------------------------------------------------------------------
    def add(self, speaker: str, text: str, *, at: Any = None, session: Any = None,
            source_id: str | None = None) -> int:
        """Store one message (one transaction) and update the structure. Returns its id."""
        return self.add_many([{"speaker": speaker, "text": text, "at": at, "session": session,
                               "source_id": source_id}])[0]

    def add_many(self, messages: Iterable[Mapping[str, Any]], *, progress=None,
                 skip_existing: bool = False) -> list[int]:
        """Store many messages in one transaction with batched embedding. Each item is a mapping
        with ``speaker``, ``text`` and optional ``at``, ``session``, ``source_id``. Nothing is
        written if any item is invalid; ``progress(n)`` is called as messages are placed.
        ``skip_existing``: skip messages already in the file (same ``source_id`` and speaker, else
        same speaker, time and text) and return only the new ids."""
        rows = self._p.ingest.validate(messages)
        with self._session():
            return self._p.ingest.add(rows, progress, skip_existing=skip_existing)

    def accumulate(self, question: str, evidence: Sequence[Evidence]) -> None:
        """Feed query-local evidence (:class:`~memsif_lite.Evidence`) to the ActiveFact track, as
        :meth:`ask` does: for agents that answer from :meth:`context` with their own LLM."""
        check_question(question, 2000)
        if not all(isinstance(e, Evidence) for e in evidence):
            raise InvalidInputError("evidence must be a sequence of memsif_lite.Evidence")
        with self._session():
            self._p.query.accumulate(question, evidence)

    def forget(self, *, message_id: int | None = None, fact_id: int | None = None) -> None:
        """Delete a message (and everything derived only from it) or a CoreFact, in one
        transaction. Exactly one of ``message_id`` / ``fact_id``."""
        if (message_id is None) == (fact_id is None):
            raise InvalidInputError("give exactly one of message_id or fact_id")
        with self._session() as db, db.write():
            if message_id is not None:
                if not db.messages.exists(message_id):
                    raise NotFoundError(f"no message with id {message_id}")
                forget_message(db, message_id, self._p.active_facts)
            elif fact_id is not None:
                if not db.facts.exists(fact_id):
                    raise NotFoundError(f"no fact with id {fact_id}")
                forget_fact(db, fact_id)

    # -- reading ---------------------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, level: str = "message", speakers: Names = None,
               sessions: Names = None, since: Any = None, until: Any = None) -> list[SearchResult]:
        """Hybrid search (dense KNN + BM25, fused by RRF) at ``level`` message, segment or trajectory;
        ``speakers``, ``sessions``, ``since``, ``until`` filter inside it (:mod:`memsif_lite.filters`)."""
        check_search(query, k, level)
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        with self._session():
            return self._p.retriever.search(query, k=k, level=level, flt=flt)

    def get(self, message_id: int) -> Message:
        with self._session() as db:
            if (row := db.messages.get(message_id)) is None:
                raise NotFoundError(f"no message with id {message_id}")
            return to_message(row)

    def messages(self, *, speakers: Names = None, sessions: Names = None, since: Any = None, until: Any = None,
                 limit: int | None = None, offset: int = 0) -> list[Message]:
        """Messages in the order they were added, filtered, one page (``limit``/``offset``)."""
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        check_page(limit, offset)
        with self._session() as db, db.read():
            return [to_message(r) for r in db.filters.messages(flt, limit, offset)]

    def segments(self) -> list[Segment]:
        """All Topical Segments in order, with their messages, span, entities and a label."""
        with self._session() as db, db.read():
            return list_segments(db)

    def trajectories(self) -> list[Trajectory]:
        """All Event Trajectories, with their segments and messages in order."""
        with self._session() as db, db.read():
            return list_trajectories(db)

    def stats(self) -> dict[str, int]:
        """Counts of everything in the file."""
        with self._session() as db, db.read():
            return db.admin.stats()

    # -- facts -----------------------------------------------------------------------------------
    def facts(self, *, subject: str | None = None, type: str | None = None,  # noqa: A002 - the paper's name
              include_superseded: bool = False, speakers: Names = None, sessions: Names = None, since: Any = None,
              until: Any = None) -> list[CoreFact]:
        """CoreFacts, current ones only unless ``include_superseded``; ``subject`` matches
        case-insensitively. Filters: subject in ``speakers``; a source message in ``sessions`` and
        in [``since``, ``until``] (:mod:`memsif_lite.filters`)."""
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        with self._session() as db, db.read():
            return db.filters.only_facts(db.facts.select(subject=subject, ftype=type,
                                                         include_superseded=include_superseded), flt)

    def fact_history(self, fact_id: int) -> list[FactEvent]:
        """Every change to a CoreFact, oldest first."""
        with self._session() as db, db.read():
            if not db.facts.exists(fact_id):
                raise NotFoundError(f"no fact with id {fact_id}")
            return db.facts.history(fact_id)

    def active_facts(self) -> list[ActiveFact]:
        """Promoted ActiveFacts with provenance and the queries that triggered them."""
        with self._session() as db, db.read():
            return db.clusters.list_active()

    def candidates(self) -> list[CandidateCluster]:
        """All candidate clusters C_k with their statements, queries, sources and scores."""
        with self._session() as db, db.read():
            return db.clusters.list_candidates()

    # -- portability and health ------------------------------------------------------------------
    def export_to(self, path: str | Path) -> int:
        """Write everything as JSON lines from one consistent snapshot; returns the line count."""
        with self._session() as db, db.read():
            return db.admin.export_to(Path(path))

    def import_from(self, path: str | Path) -> dict[str, int]:
        """Load an export into this (fresh) memory file, in one transaction."""
        emb = self._p.embeddings.embedder
        with self._session() as db:
            return db.admin.import_from(Path(path), model_id=emb.model_id, dim=emb.dim)

    def backup(self, dest: str | Path) -> None:
        """A consistent, self-contained copy (``VACUUM INTO``), safe while others write."""
        with self._session() as db:
            db.admin.backup(dest)

    def check(self) -> list[str]:
        """Integrity, full-text and vector-table checks; an empty list means healthy."""
        with self._session() as db:
            return db.admin.check()

    # -- the query pipeline ----------------------------------------------------------------------
    def context(self, question: str, *, budget_tokens: int = 2000, speakers: Names = None, sessions: Names = None,
                since: Any = None, until: Any = None) -> Context:
        """Facts, then (if they do not suffice) dated evidence from the interaction memory, as a
        ready-to-paste block within ``budget_tokens`` — for agents that call their own LLM.
        Reads only. Filters as in :meth:`search` and :meth:`facts`."""
        check_question(question, budget_tokens)
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        with self._session():
            return self._p.query.context(question, budget_tokens, flt=flt)

    def ask(self, question: str, *, budget_tokens: int = 2000, now: Any = None, speakers: Names = None,
            sessions: Names = None, since: Any = None, until: Any = None) -> Answer:
        """Answer from memory (paper §3.5): the LLM's answer from the context, or offline an
        extractive one (``Answer.extractive``); then the evidence feeds the ActiveFact track (one
        transaction). ``now`` fixes "today" for the answer prompt. Filters as in :meth:`context`."""
        check_question(question, budget_tokens)
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        at = from_stored(to_stored(now)) if now is not None else None
        with self._session():
            return self._p.query.ask(question, budget_tokens, at, flt)

