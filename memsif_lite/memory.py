"""The facade: ``Memory(path)`` over one SQLite file. Each method checks its arguments, takes
the lock and delegates to the ingest pipeline, the query pipeline or the data-access layer."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from . import history, pipelines, record_time, store
from .active_facts import Evidence
from .checks import check_id, check_page, check_question, check_search, check_text
from .config import Config
from .db import Database, to_message
from .embed import Embedder
from .errors import InvalidInputError, MemoryFileError, NotFoundError, ReadOnlyError
from .filters import Criteria, MessageFilter
from .forgetting import forget
from .keys import KeyLike, as_key
from .llm import ModelHealth, require_litellm
from .merging import MergeReport, merge_file
from .query import Answer, Context
from .segments import BoundaryJudge
from .session_items import add_item, check_session, item_json, session_items
from .timeutil import from_stored, to_stored
from .trajectories import TrajectoryJudge
from .types import (ActiveFact, Added, CandidateCluster, Change, CompactReport, CoreFact, FactEvent, Message,
                    SearchResult, Segment, SessionItem, Trajectory, UndoReport)
from .view import ViewPage, view_page
from .worker import ProcessReport

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

__all__ = ["Memory"]

T = TypeVar("T")


class Memory:
    """Long-term memory in one SQLite file. ``llm``: a litellm model string (``"openai/gpt-4o-mini"``);
    ``llm_kwargs`` go to every call (``api_base``, ``api_key``...). Without ``llm`` every step is
    offline. ``read_only`` opens an existing file without writing (writes raise ReadOnlyError).
    ``embedder`` replaces the model the file records (:class:`~memsif_lite.embed.Embedder`);
    ``boundary_judge`` / ``trajectory_judge`` the judges (:mod:`memsif_lite.segments`,
    :mod:`memsif_lite.trajectories`); ``process``: ``"inline"``, ``"background"`` or ``"manual"``
    (:class:`~memsif_lite.modes.Mode`). ``key``: the file is encrypted with this passphrase or key
    bytes (a new file is created encrypted; :mod:`memsif_lite.keys`)."""

    def __init__(self, path: str | Path, *, config: Config | None = None, llm: str | None = None,
                 llm_kwargs: Mapping[str, Any] | None = None, embedder: Embedder | None = None,
                 boundary_judge: BoundaryJudge | None = None, trajectory_judge: TrajectoryJudge | None = None,
                 process: str | None = None, read_only: bool = False, key: KeyLike | None = None):
        if config is not None and not isinstance(config, Config):
            raise InvalidInputError("config must be a memsif_lite.Config")
        if llm is not None and (not isinstance(llm, str) or not llm.strip()):
            raise InvalidInputError("llm must be a litellm model string such as 'openai/gpt-4o-mini'")
        if llm_kwargs is not None and not isinstance(llm_kwargs, Mapping):
            raise InvalidInputError("llm_kwargs must be a mapping of litellm keyword arguments")
        if llm is not None:
            require_litellm()  # a clear ConfigError naming the `llm` extra, before any file is touched
        self.path, secret = Path(path), as_key(key)
        self.config = cfg = config or Config()
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._db, emb, self._quiet = pipelines.open_database(self.path, cfg, embedder, read_only=self.read_only,
                                                             key=secret)
        self._closed = False
        self._health = ModelHealth(down_after=cfg.llm_down_after, backoff_s=cfg.llm_backoff_s,
                                   schema_mode=cfg.llm_schema)
        self._setup = pipelines.Setup(self._quiet.path, cfg, emb, llm, llm_kwargs, boundary_judge, trajectory_judge,
                                      secret)
        self._mode = "manual" if self.read_only else process
        self._p, self._processor = pipelines.wire(self._db, self._setup, self._health, self._mode, self.read_only)

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
                    if self._setup.key is not None:  # the key stays in memory only while the file is open
                        self._setup.key.wipe()

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

    def _read(self, fn: Callable[[Database], T], *, snapshot: bool = True, undo: Callable[[], None] | None = None) -> T:
        """A public read: ``fn`` on the file, in one read snapshot unless ``snapshot`` is false;
        read-only, read as immutable while no one else has the file open (:class:`~memsif_lite.store.QuietReads`)."""
        def once() -> T:
            with self._db.read() if snapshot else contextlib.nullcontext():
                return fn(self._db)

        with self._session():
            return self._quiet.read(once, self._share, undo)

    def _share(self) -> None:
        """Another process has the file open: read it from now on as SQLite coordinates readers
        with a writer (through its ``-shm``), on a new connection."""
        old = self._db
        self._db = pipelines.reopen(self._quiet.path, self.config, self._setup.emb, read_only=True, key=self._setup.key)
        self._quiet = store.QuietReads(self._quiet.path, None)
        self._processor.close(0.0)
        self._p, self._processor = pipelines.wire(self._db, self._setup, self._health, self._mode, self.read_only)
        old.close()

    def _filter(self, criteria: Criteria) -> MessageFilter | None:
        flt = MessageFilter.build(**criteria)
        if flt is not None and flt.known_at is not None:  # an old file read as it is has no record times
            self._read(record_time.require, snapshot=False)
        return flt

    # -- writing ---------------------------------------------------------------------------
    def add(self, speaker: str, text: str, *, at: Any = None, session: Any = None,
            source_id: str | None = None, skip_existing: bool = False) -> int:
        """Store one message (one transaction) and update the structure. Returns its id (with
        ``skip_existing``, the stored one's if it is there already: see :meth:`remember`)."""
        return self.remember([dict(speaker=speaker, text=text, at=at, session=session, source_id=source_id)],
                             skip_existing=skip_existing)[0].id

    def add_many(self, messages: Iterable[Mapping[str, Any]], *, progress=None,
                 skip_existing: bool = False) -> list[int]:
        """Store many mappings (``speaker``, ``text``, optional ``at``, ``session``, ``source_id``)
        in one transaction with batched embedding; nothing is written if one is invalid.
        ``skip_existing``: skip messages already stored (the rule of :meth:`remember`); only new ids
        are returned."""
        return [a.id for a in self.remember(messages, progress=progress, skip_existing=skip_existing) if a.new]

    def remember(self, messages: Iterable[Mapping[str, Any]], *, progress=None, skip_existing: bool = True
                 ) -> list[Added]:
        """:meth:`add_many` for calls that may be retried: a message already stored (the same
        ``source_id`` and speaker, else the same speaker, time and text; given without a time, the
        same speaker, text and session stored by an earlier call in the last 10 minutes) is not
        stored again. Returns each message's id and whether it is new."""
        rows = self._p.ingest.validate(messages)
        with self._session("add"):
            done = self._p.ingest.add(rows, progress, process=self._processor.in_add, skip_existing=skip_existing)
            self._processor.after_add()
            return done

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

    def forget(self, *, message_id: int | None = None, fact_id: int | None = None, source_id: str | None = None,
               speaker: str | None = None, item_id: int | None = None) -> list[int]:
        """Delete a message (and all derived only from it, its session items too), a CoreFact, the
        messages with a ``source_id`` (of ``speaker`` when given), or a session item, in one
        transaction; returns the ids deleted. Ids are never reused, so a stale id can only raise
        NotFoundError, never hit another message."""
        with self._session("forget") as db:
            return forget(db, self._p.active_facts, message_id=message_id, fact_id=fact_id, source_id=source_id,
                          speaker=speaker, item_id=item_id)

    def add_item(self, session: str, item: dict, *, at: Any = None) -> int:
        """Keep a JSON object that is not chat (a tool call, its output) with ``session``, after the
        session's messages so far; never indexed (:mod:`memsif_lite.session_items`). Returns its id."""
        session = check_session(session)
        text = item_json(item)
        with self._session("add_item") as db:
            return add_item(db, session, text, at)

    # -- reading ---------------------------------------------------------------------------
    def search(self, query: str, *, k: int = 10, level: str = "message",
               **criteria: Unpack[Criteria]) -> list[SearchResult]:
        """Hybrid search (KNN + BM25, RRF) at ``level`` message/segment/trajectory, in one read
        snapshot; filtered inside by ``speakers``, ``sessions``, ``since``, ``until``
        (:class:`~memsif_lite.filters.Criteria`)."""
        check_search(query, k, level)
        flt = self._filter(criteria)
        return self._read(lambda db: self._p.retriever.search(query, k=k, level=level, flt=flt))

    def get(self, message_id: int) -> Message:
        check_id(message_id, "message_id")
        row = self._read(lambda db: db.messages.get(message_id), snapshot=False)
        if row is None:
            raise NotFoundError(f"no message with id {message_id}")
        return to_message(row)

    def messages(self, *, limit: int | None = None, offset: int = 0, **criteria: Unpack[Criteria]) -> list[Message]:
        """Messages in the order they were added, filtered, one page (``limit``/``offset``)."""
        flt = self._filter(criteria)
        check_page(limit, offset)
        return self._read(lambda db: [to_message(r) for r in db.filters.messages(flt, limit, offset)])

    def items(self, session: str) -> list[Message | SessionItem]:
        """The session's messages, in the order added, with its session items (:meth:`add_item`)
        each after the message that was the session's last when it was added."""
        session = check_session(session)
        return self._read(lambda db: session_items(db, session), snapshot=False)

    def segments(self, *, as_of: Any = None, known_at: Any = None) -> list[Segment]:
        """All Topical Segments in order, with their messages, span, entities and a label; ``as_of``:
        as they stood at that (valid) time (:func:`~memsif_lite.history.segments_as_of`); ``known_at``:
        as the file held them at that record time (:mod:`~memsif_lite.record_time`)."""
        return self._read(lambda db: history.segments_as_of(db, record_time.segments(db, known_at), as_of))

    def trajectories(self, *, as_of: Any = None, known_at: Any = None) -> list[Trajectory]:
        """All Event Trajectories, with their segments and messages in order (``as_of``, ``known_at``: as
        :meth:`segments`)."""
        def read(db: Database) -> list[Trajectory]:
            trajs, segs = record_time.trajectories(db, known_at)
            return history.trajectories_as_of(trajs, history.segments_as_of(db, segs, as_of))
        return self._read(read)

    def stats(self) -> dict[str, int]:
        """Counts of everything in the file."""
        return self._read(lambda db: db.admin.stats())

    def view(self, path: str | Path | None = None, *, live: str | None = None) -> ViewPage:
        """The memory as one self-contained HTML page (:mod:`memsif_lite.view`), read in one snapshot;
        written to ``path`` (0600) when given. ``live``: the stamp a served page polls for."""
        if live is not None and not isinstance(live, str):
            raise InvalidInputError("live must be a string (the file's stamp) or None")
        page = self._read(lambda db: view_page(db, self.path, live=live))
        return page if path is None else page.write(path)

    # -- facts -----------------------------------------------------------------------------------
    def facts(self, *, subject: str | None = None, type: str | None = None,  # noqa: A002 - the paper's name
              include_superseded: bool = False, **criteria: Unpack[Criteria]) -> list[CoreFact]:
        """CoreFacts, current ones only unless ``include_superseded``; ``subject`` matches
        case-insensitively. Filters: subject in ``speakers``; a source message in ``sessions`` and
        in [``since``, ``until``] (:mod:`memsif_lite.filters`)."""
        for name, value in (("subject", subject), ("type", type)):
            if value is not None:
                check_text(value, name)
        flt = self._filter(criteria)
        if flt is not None and flt.known_at is not None:  # as the file held them then
            return self._read(lambda db: record_time.facts_known_at(
                db, flt, subject=subject, ftype=type, include_superseded=include_superseded))
        as_of = flt.as_of if flt is not None else None  # as_of: those valid then, superseded since or not
        return self._read(lambda db: db.filters.only_facts(db.facts.select(
            subject=subject, ftype=type, include_superseded=include_superseded or bool(as_of), valid_at=as_of), flt))

    def fact_history(self, fact_id: int) -> list[FactEvent]:
        """Every change to a CoreFact, oldest first."""
        check_id(fact_id, "fact_id")
        history = self._read(lambda db: db.facts.history(fact_id) if db.facts.exists(fact_id) else None)
        if history is None:
            raise NotFoundError(f"no fact with id {fact_id}")
        return history

    def changes(self, *, since: Any = None, until: Any = None, actor: str | None = None, fact_id: int | None = None,
                op: str | None = None, limit: int | None = None) -> list[Change]:
        """The change log, oldest first (:func:`~memsif_lite.history.changes`; docs/history.md)."""
        return self._read(lambda db: history.changes(db, since=since, until=until, actor=actor, fact_id=fact_id,
                                                     op=op, limit=limit))

    def undo(self, change_id: int, *, dry_run: bool = False) -> UndoReport:
        """Take back a CoreFact change and the later changes built on it, in one transaction (itself
        logged); ``dry_run`` lists them and writes nothing (:func:`~memsif_lite.history.undo`)."""
        if dry_run:
            return self._read(lambda db: history.undo(db, change_id, dry_run=True), snapshot=False)
        with self._session("undo") as db:
            return history.undo(db, change_id)

    def active_facts(self, *, known_at: Any = None) -> list[ActiveFact]:
        """Promoted ActiveFacts with provenance and the queries that triggered them (``known_at``: those
        the file held at that record time, with their statement then)."""
        return self._read(lambda db: record_time.active_facts(db, known_at))

    def candidates(self) -> list[CandidateCluster]:
        """All candidate clusters C_k with their statements, queries, sources and scores."""
        return self._read(lambda db: db.clusters.list_candidates())

    # -- portability and health ------------------------------------------------------------------
    def export_to(self, path: str | Path, *, overwrite: bool = False) -> int:
        """Write everything as JSON lines from one consistent snapshot, to a new file (0600) unless
        ``overwrite``; returns the line count."""
        dest = Path(path)
        return self._read(lambda db: db.admin.export_to(dest, overwrite=overwrite), undo=dest.unlink)

    def import_from(self, path: str | Path) -> dict[str, int]:
        """Load an export into this (fresh) memory file, in one transaction."""
        emb = self._p.embeddings.embedder
        with self._session("import_from") as db:
            return db.admin.import_from(Path(path), model_id=emb.model_id, dim=emb.dim)

    def merge_from(self, path: str | Path, *, dry_run: bool = False, key: KeyLike | None = None) -> MergeReport:
        """Bring in what another copy of this memory has, in one transaction (:mod:`memsif_lite.merging`);
        ``key`` opens the other file if it is encrypted (it is only read, never written)."""
        def run(db: Database) -> MergeReport:
            return merge_file(db, path, mine=self.path, pipes=self._p, cfg=self.config,
                              process_now=self._processor.in_add, dry_run=dry_run, key=key)

        if dry_run:
            return self._read(run, snapshot=False)
        with self._session("merge_from") as db:
            report = run(db)
            self._processor.after_add()
            return report

    def backup(self, dest: str | Path) -> None:
        """A consistent, self-contained copy (``VACUUM INTO``), safe while others write; encrypted
        with this file's key if it is encrypted."""
        self._read(lambda db: db.admin.backup(dest), snapshot=False, undo=Path(dest).unlink)

    def compact(self) -> CompactReport:
        """Rewrite the file in place, each table in one stretch (SQLite's ``VACUUM``; nothing in the
        memory changes): a first search after a reboot reads far less of the disk. One transaction;
        needs free disk about twice the file (else StorageFullError first). docs/python.md."""
        with self._session("compact") as db:
            return db.admin.compact(self._quiet.path)

    def check(self) -> list[str]:
        """Integrity, full-text and vector-table checks; an empty list means healthy."""
        return self._read(lambda db: db.admin.check(), snapshot=False)

    # -- the query pipeline ----------------------------------------------------------------------
    def context(self, question: str, *, budget_tokens: int = 2000, **criteria: Unpack[Criteria]) -> Context:
        """Facts, then (if they do not suffice) dated evidence from the interaction memory, as a
        ready-to-paste block within ``budget_tokens`` — for agents that call their own LLM.
        Reads only; offline, in one read snapshot (an LLM is never called with a transaction
        open, so with one the facts and the evidence are read apart). Filters as in
        :meth:`search` and :meth:`facts`."""
        check_question(question, budget_tokens)
        flt = self._filter(criteria)
        return self._read(lambda db: self._p.query.context(question, budget_tokens, flt=flt),
                          snapshot=self._setup.llm is None)

    def ask(self, question: str, *, budget_tokens: int = 2000, now: Any = None,
            **criteria: Unpack[Criteria]) -> Answer:
        """Answer from memory (paper §3.5): the LLM's answer from the context, or offline an
        extractive one (``Answer.extractive``); then the evidence feeds the ActiveFact track (one
        transaction, so a read-only Memory refuses it: use :meth:`context`). ``now`` fixes "today"
        for the answer prompt. Filters as in :meth:`context`."""
        check_question(question, budget_tokens)
        flt = self._filter(criteria)
        then = flt and (flt.as_of or flt.known_at)  # "today" for the answer: the time asked about
        at = from_stored(to_stored(now)) if now is not None else (from_stored(then) if then else None)
        with self._session("ask"):
            return self._p.query.ask(question, budget_tokens, at, flt)
