"""Frozen dataclasses returned by the public API."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

__all__ = ["Message", "SearchResult", "Segment", "Trajectory"]


@dataclass(frozen=True)
class Message:
    id: int
    speaker: str
    text: str
    at: datetime
    session: str | None
    source_id: str | None = None


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
    extra: dict = field(default_factory=dict, compare=False, hash=False)
