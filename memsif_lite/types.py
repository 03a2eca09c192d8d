"""Frozen dataclasses returned by the public API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from .timeutil import local_time

__all__ = ["Message", "Added", "SearchResult", "Segment", "Trajectory", "CoreFact", "FactEvent", "ActiveFact",
           "CandidateCluster", "FactItem", "EvidenceItem", "Context", "Answer", "Change", "UndoReport",
           "SessionItem"]


@dataclass(frozen=True)
class Message:
    """A stored message. ``at`` is UTC (naive); ``utc_offset_min`` the UTC offset of the time the
    caller gave (``None`` when it was naive, i.e. taken as UTC)."""

    id: int
    speaker: str
    text: str
    at: datetime
    session: str | None
    source_id: str | None = None
    utc_offset_min: int | None = None

    @property
    def local_at(self) -> datetime:
        """The time as the speaker gave it: aware, at their UTC offset (UTC when unknown)."""
        tz = timezone(timedelta(minutes=self.utc_offset_min or 0))
        return self.at.replace(tzinfo=timezone.utc).astimezone(tz)


@dataclass(frozen=True)
class SessionItem:
    """A session item (:meth:`Memory.add_item`): a JSON object kept with a session that is not
    chat (a tool call, its output), never indexed. ``at`` is UTC (naive)."""

    id: int
    session: str
    at: datetime
    item: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Added:
    """What :meth:`Memory.remember` did with one message: its id, and whether it is ``new`` (False:
    the file held it already, e.g. the same call retried, and nothing was written for it)."""

    id: int
    new: bool


@dataclass(frozen=True)
class SearchResult:
    """One hit of :meth:`Memory.search`.

    At ``level="message"`` the hit is one message. At ``"segment"``/``"trajectory"`` it is a
    composite unit: ``text`` holds its messages as ``Speaker: text`` lines, ``speaker`` the
    distinct speakers, ``at`` its start, and ``message_ids`` its members in order.
    """

    id: int
    speaker: str
    text: str
    at: datetime
    session: str | None
    score: float
    level: str = "message"
    source_id: str | None = None
    message_ids: tuple[int, ...] = ()
    source_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Segment:
    """A Topical Segment: a contiguous, topic-coherent run of messages."""

    id: int
    trajectory_id: int | None
    message_ids: tuple[int, ...]
    start: datetime
    end: datetime
    entities: tuple[str, ...]
    label: str
    closed: bool


@dataclass(frozen=True)
class Trajectory:
    """An Event Trajectory: non-contiguous segments of one evolving event or task."""

    id: int
    segment_ids: tuple[int, ...]
    message_ids: tuple[int, ...]
    start: datetime
    end: datetime
    entities: tuple[str, ...]
    label: str


@dataclass(frozen=True)
class CoreFact:
    """A schema-guided fact written at ingest. ``valid_to``/``superseded_by`` are set when a
    later fact superseded it; it stays queryable with ``include_superseded=True``."""

    id: int
    subject: str
    type: str
    stmt: str
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: int | None
    message_ids: tuple[int, ...]
    origin: str


@dataclass(frozen=True)
class FactEvent:
    """One row of a fact's history: add, update, merge, supersede or superseded."""

    at: datetime
    op: str
    stmt: str
    detail: str | None


@dataclass(frozen=True)
class ActiveFact:
    """A query-driven fact promoted from a candidate cluster."""

    id: int
    cluster_id: int
    subject: str
    stmt: str
    message_ids: tuple[int, ...]
    queries: tuple[str, ...]
    score_src: float
    score_qry: float


@dataclass(frozen=True)
class CandidateCluster:
    """C_k = (s_k, X_k, Q_k, R_k) with its two scores; ``active_fact_id`` once promoted."""

    id: int
    subject: str
    statements: tuple[str, ...]
    queries: tuple[str, ...]
    message_ids: tuple[int, ...]
    score_src: float
    score_qry: float
    active_fact_id: int | None


@dataclass(frozen=True)
class FactItem:
    kind: str                      # "core" or "active"
    id: int
    subject: str
    type: str | None
    stmt: str
    valid_from: datetime | None
    valid_to: datetime | None
    message_ids: tuple[int, ...]
    score: float


@dataclass(frozen=True)
class EvidenceItem:
    message_ids: tuple[int, ...]
    speaker: str
    stmt: str
    at: datetime
    session: str | None
    source_ids: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: UTC offset of the (last) source message's time as its caller gave it; None: unknown (UTC)
    utc_offset_min: int | None = None
    #: tokens of ``stmt`` when known (counted at ingest), so the budget needs no tokenizer call
    stmt_tokens: int | None = field(default=None, compare=False, repr=False)

    @property
    def local_at(self) -> datetime:
        """``at`` at the speaker's UTC offset (naive local time; ``at`` when unknown)."""
        return local_time(self.at, self.utc_offset_min)


@dataclass(frozen=True)
class Context:
    """What :meth:`Memory.context` returns: a ready-to-paste block and its parts."""

    question: str
    text: str
    facts: tuple[FactItem, ...]
    evidence: tuple[EvidenceItem, ...]
    sufficient: bool
    tokens: int
    budget_tokens: int

    @property
    def message_ids(self) -> tuple[int, ...]:
        ids = {m for e in self.evidence for m in e.message_ids} | {m for f in self.facts for m in f.message_ids}
        return tuple(sorted(ids))


@dataclass(frozen=True)
class Answer:
    text: str
    extractive: bool
    context: str
    evidence: tuple[EvidenceItem, ...]
    facts: tuple[FactItem, ...]
    sufficient: bool
    tokens_in: int
    tokens_out: int
    llm_calls: int
    timings_ms: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Change:
    """One row of the change log (:meth:`Memory.changes`, docs/history.md): ``at`` is record time
    (UTC, naive: when memsif made the change), ``actor`` who decided it (``rule``, ``llm:<model>``,
    ``user``, ``merge:<file id>``, ``memsif`` for what a file held before it had a log), ``op`` what
    it did (``fact.add`` / ``fact.update`` / ``fact.merge`` / ``fact.supersede``, ``place``, ``link``,
    ``active.promote`` / ``active.restate`` / ``active.withdraw``, ``forget``, ``merge``, ``undo``,
    ``baseline``), ``purpose`` the prompt that decided it (LLM actors), ``summary`` the statement
    written (None once forgotten), ``ids`` what it touched by kind (``facts``, ``messages``,
    ``segments``, ``trajectories``, ``active_facts``); ``undoable``: :meth:`Memory.undo` can take it
    back; ``undone_by`` the undo that did; ``undoes`` (an undo) the change it took back; ``origin``
    the file that recorded it when it came with a merge."""

    id: int
    at: datetime
    actor: str
    op: str
    purpose: str | None
    summary: str | None
    ids: dict[str, tuple[int, ...]]
    undoable: bool
    undone_by: int | None = None
    undoes: int | None = None
    origin: str | None = None

    @property
    def fact_ids(self) -> tuple[int, ...]:
        return self.ids.get("facts", ())


@dataclass(frozen=True)
class UndoReport:
    """What :meth:`Memory.undo` took back (or, with ``dry_run``, would): the change asked for and the
    later changes that built on it, newest first, and the facts they touched."""

    change_id: int
    undone: tuple[Change, ...]
    fact_ids: tuple[int, ...]
    dry_run: bool = False


@dataclass(frozen=True)
class CompactReport:
    """What :meth:`Memory.compact` did: the file's bytes before and after (its pages, as the main file
    holds them once SQLite has copied its ``-wal`` back), the bytes of the ``-wal`` left beside it
    (cut back to a frame or two unless another connection reads an older snapshot), seconds."""

    bytes_before: int
    bytes_after: int
    wal_bytes: int
    seconds: float
