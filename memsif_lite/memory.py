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
from .errors import InvalidInputError, MemoryFileError, NotFoundError, ReadOnlyError
from .filters import MessageFilter, Names
from .forgetting import forget
from .llm import ModelHealth, require_litellm
from .merging import MergeReport, merge_file
from .query import Answer, Context
from .segments import BoundaryJudge, list_segments
from .timeutil import from_stored, to_stored
from .trajectories import TrajectoryJudge, list_trajectories
from .types import ActiveFact, CandidateCluster, CoreFact, FactEvent, Message, SearchResult, Segment, Trajectory
from .worker import ProcessReport

__all__ = ["Memory"]


class Memory:
    """Long-term memory in one SQLite file. ``llm``: a litellm model string (``"openai/gpt-4o-mini"``);
    ``llm_kwargs`` go to every call (``api_base``, ``api_key``...). Without ``llm`` every step is
    offline. ``read_only`` opens an existing file without writing (writes raise ReadOnlyError).
    ``embedder`` replaces the model the file records (:class:`~memsif_lite.embed.Embedder`);
    ``boundary_judge`` / ``trajectory_judge`` the judges (:mod:`memsif_lite.segments`,
    :mod:`memsif_lite.trajectories`); ``process``: ``"inline"``, ``"background"`` or ``"manual"``
    (:class:`~memsif_lite.worker.Processor`)."""

    def __init__(self, path: str | Path, *, config: Config | None = None, llm: str | None = None,
                 llm_kwargs: Mapping[str, Any] | None = None, embedder: Embedder | None = None,
                 boundary_judge: BoundaryJudge | None = None, trajectory_judge: TrajectoryJudge | None = None,
                 process: str | None = None, read_only: bool = False):
        if config is not None and not isinstance(config, Config):
            raise InvalidInputError("config must be a memsif_lite.Config")
        if llm is not None and (not isinstance(llm, str) or not llm.strip()):
            raise InvalidInputError("llm must be a litellm model string such as 'openai/gpt-4o-mini'")
        if llm_kwargs is not None and not isinstance(llm_kwargs, Mapping):
            raise InvalidInputError("llm_kwargs must be a mapping of litellm keyword arguments")
        if llm is not None:
            require_litellm()  # a clear ConfigError naming the `llm` extra, before any file is touched
        self.path = Path(path)
        self.config = cfg = config or Config()
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._db, emb = pipelines.open_database(self.path, cfg, embedder, read_only=self.read_only)
        self._closed = False
        health = ModelHealth(down_after=cfg.llm_down_after, backoff_s=cfg.llm_backoff_s, schema_mode=cfg.llm_schema)
        llm_ = pipelines.make_llm(self._db, llm, llm_kwargs, cfg, health, record_calls=not self.read_only)
        self._p = pipelines.build(self._db, cfg, emb, llm_, boundary_judge=boundary_judge,
                                  trajectory_judge=trajectory_judge)
        setup = pipelines.Setup(self.path, cfg, emb, llm, llm_kwargs, boundary_judge, trajectory_judge)
        self._processor = pipelines.processor(setup, "manual" if self.read_only else process, self._p, health)

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop background processing and close the file. Further calls raise MemoryFileError."""
        with self._lock:
            if not self._closed:
                self._closed = True
                try:
                    self._processor.close(2.0)
                finally:
                    self._db.close()

    @contextlib.contextmanager
    def _session(self, write: str | None = None) -> Iterator[Database]:
        """Every public call: the lock, an open file, SQLite errors mapped to StorageError;
        ``write`` names a call that writes, refused on a read-only Memory."""
        with self._lock:
            if self._closed:
                raise MemoryFileError("this Memory is closed")
            if write and self.read_only:
                raise ReadOnlyError(f"{write}() writes to {self.path}, which this Memory opened read-only")
            with store.map_errors():
                yield self._db

    # -- writing ---------------------------------------------------------------------------
    def add(self, speaker: str, text: str, *, at: Any = None, session: Any = None,
            source_id: str | None = None) -> int:
        """Store one message (one transaction) and update the structure. Returns its id."""
        return self.add_many([dict(speaker=speaker, text=text, at=at, session=session, source_id=source_id)])[0]

    def add_many(self, messages: Iterable[Mapping[str, Any]], *, progress=None,
                 skip_existing: bool = False) -> list[int]:
        """Store many mappings (``speaker``, ``text``, optional ``at``, ``session``, ``source_id``)
        in one transaction with batched embedding; nothing is written if one is invalid.
        ``skip_existing``: skip messages already stored (same ``source_id`` and speaker, else same
        speaker, time and text); only new ids are returned."""
        rows = self._p.ingest.validate(messages)
        with self._session("add"):
            ids = self._p.ingest.add(rows, progress, process=self._processor.in_add, skip_existing=skip_existing)
            self._processor.after_add()
            return ids

    def process(self, *, max_steps: int | None = None, max_seconds: float | None = None) -> ProcessReport:
        """Run queued steps (placement, segment close, CoreFacts) now, until done or a limit."""
        with self._session("process"):
            return self._processor.run(max_steps, max_seconds)

    def accumulate(self, question: str, evidence: Sequence[Evidence]) -> None:
        """Feed query-local evidence (:class:`~memsif_lite.Evidence`) to the ActiveFact track, as
        :meth:`ask` does: for agents that answer from :meth:`context` with their own LLM."""
        check_question(question, 2000)
        if not all(isinstance(e, Evidence) for e in evidence):
            raise InvalidInputError("evidence must be a sequence of memsif_lite.Evidence")
        with self._session("accumulate"):
            self._p.query.accumulate(question, evidence)

    def forget(self, *, message_id: int | None = None, fact_id: int | None = None) -> None:
        """Delete a message (and all derived only from it) or a CoreFact, in one transaction."""
        with self._session("forget") as db:
            forget(db, self._p.active_facts, message_id=message_id, fact_id=fact_id)

    # -- reading ---------------------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, level: str = "message", speakers: Names = None,
               sessions: Names = None, since: Any = None, until: Any = None) -> list[SearchResult]:
        """Hybrid search (KNN + BM25, RRF) at ``level`` message/segment/trajectory, filtered inside."""
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
        with self._session("import_from") as db:
            return db.admin.import_from(Path(path), model_id=emb.model_id, dim=emb.dim)

    def merge_from(self, path: str | Path, *, dry_run: bool = False) -> MergeReport:
        """Bring in what another copy of this memory has, in one transaction (:mod:`memsif_lite.merging`)."""
        with self._session(None if dry_run else "merge_from") as db:
            report = merge_file(db, path, mine=self.path, pipes=self._p, cfg=self.config,
                                process_now=self._processor.in_add, dry_run=dry_run)
            if not dry_run:
                self._processor.after_add()
            return report

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
        transaction, so a read-only Memory refuses it: use :meth:`context`). ``now`` fixes "today"
        for the answer prompt. Filters as in :meth:`context`."""
        check_question(question, budget_tokens)
        flt = MessageFilter.build(speakers=speakers, sessions=sessions, since=since, until=until)
        at = from_stored(to_stored(now)) if now is not None else None
        with self._session("ask"):
            return self._p.query.ask(question, budget_tokens, at, flt)
