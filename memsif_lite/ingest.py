"""The ingest pipeline (paper §3.2–3.3): validate → embed (content-hash cache) → store the
message, its vector and its full-text row → place it in a Topical Segment → when a segment
closes: its title (LLM only), its Event Trajectory, its CoreFacts.

Everything for one ``add_many`` happens in one ``BEGIN IMMEDIATE`` transaction: a failure at any
step (embedder, judge, disk) leaves the file as it was.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from . import prompts
from .core_facts import CoreFactWriter
from .db import Database
from .embed import Embeddings
from .entities import extract_entities
from .errors import InvalidInputError
from .llm import LLM
from .segments import SegmentBuilder, segment_lines
from .timeutil import now_stored, to_stored
from .tokens import count_tokens_many
from .trajectories import TrajectoryBuilder

__all__ = ["MessageIn", "IngestPipeline", "MAX_SPEAKER", "MAX_SESSION"]

MAX_SPEAKER = 200
MAX_SESSION = 200
_KEYS = frozenset({"speaker", "text", "at", "session", "source_id"})


@dataclass(frozen=True)
class MessageIn:
    """A validated message, ready to store (``at`` in the stored UTC form)."""

    speaker: str
    text: str
    at: str
    session: str | None
    source_id: str | None

    @property
    def passage(self) -> str:
        """What is embedded: ``Speaker: text`` (questions name people)."""
        return f"{self.speaker}: {self.text}"

    @classmethod
    def from_mapping(cls, m: Any, *, index: int = 0, max_chars: int = 1_000_000) -> "MessageIn":
        """Validate one mapping with ``speaker``, ``text`` and optional ``at``, ``session``,
        ``source_id``; anything else is an :class:`InvalidInputError` naming message ``index``."""
        def bad(why: str) -> InvalidInputError:
            return InvalidInputError(f"message {index}: {why}")

        if not isinstance(m, Mapping):
            raise bad("expected a mapping with 'speaker' and 'text'")
        unknown = set(m) - _KEYS
        if unknown:
            raise bad(f"unknown keys {sorted(unknown)}")
        speaker = _string(m.get("speaker"), "speaker", MAX_SPEAKER, bad)
        speaker = " ".join(speaker.split())
        text = m.get("text")
        if not isinstance(text, str):
            raise bad(f"text must be a string, got {type(text).__name__}")
        if not text.strip():
            raise bad("text is empty")
        if len(text) > max_chars:
            raise bad(f"text longer than max_message_chars ({max_chars})")
        _unicode(text, "text", bad)
        at = m.get("at")
        stored_at = now_stored() if at is None else to_stored(at)
        session = m.get("session")
        if session is not None:
            if isinstance(session, bool) or not isinstance(session, (str, int)):
                raise bad("session must be a string or an integer")
            session = str(session)
            if not session.strip() or len(session) > MAX_SESSION:
                raise bad(f"session must be 1-{MAX_SESSION} characters")
            _unicode(session, "session", bad)
        source_id = m.get("source_id")
        if source_id is not None and (not isinstance(source_id, str) or len(source_id) > MAX_SESSION):
            raise bad("source_id must be a short string")
        return cls(speaker, text, stored_at, session, source_id)


def _string(value: Any, name: str, most: int, bad: Callable[[str], InvalidInputError]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise bad(f"{name} must be a non-empty string")
    if len(" ".join(value.split())) > most:
        raise bad(f"{name} longer than {most} characters")
    _unicode(value, name, bad)
    return value


def _unicode(value: str, name: str, bad: Callable[[str], InvalidInputError]) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise bad(f"{name} is not valid Unicode text ({e.reason})") from None


class IngestPipeline:
    """Stores messages and builds the structure and CoreFacts as segments close."""

    def __init__(self, db: Database, *, embeddings: Embeddings, segments: SegmentBuilder,
                 trajectories: TrajectoryBuilder, core_facts: CoreFactWriter, llm: LLM | None,
                 max_chars: int):
        self.db = db
        self.embeddings = embeddings
        self.segments = segments
        self.trajectories = trajectories
        self.core_facts = core_facts
        self.llm = llm
        self.max_chars = max_chars

    def validate(self, messages: Iterable[Any]) -> list[MessageIn]:
        return [MessageIn.from_mapping(m, index=i, max_chars=self.max_chars) for i, m in enumerate(messages)]

    def add(self, rows: list[MessageIn], progress: Callable[[int], None] | None = None) -> list[int]:
        """Store validated messages in one transaction; returns their ids."""
        if not rows:
            return []
        passages = [r.passage for r in rows]
        hashes = [hashlib.sha256(p.encode("utf-8")).digest() for p in passages]
        with self.db.read():
            vecs = self.embeddings.passages_cached(passages, hashes)
        ents = [extract_entities(r.text) for r in rows]
        tokens = count_tokens_many([r.text for r in rows])  # counted once, here, not per query
        created = now_stored()
        ids: list[int] = []
        with self.db.write():
            for r, h, v, e, line, n in zip(rows, hashes, vecs, ents, passages, tokens, strict=True):
                mid = self.db.messages.insert(speaker=r.speaker, text=r.text, at=r.at, session=r.session,
                                              source_id=r.source_id, content_hash=h, created_at=created, vector=v,
                                              tokens=n)
                placed = self.segments.place(mid, v, e, r.at, line)
                if placed.closed_segment_id is not None:
                    self.close_segment(placed.closed_segment_id)
                ids.append(mid)
                if progress is not None:
                    progress(1)
        return ids

    def close_segment(self, segment_id: int) -> None:
        """A segment closed: title (with an LLM), trajectory, CoreFacts."""
        if self.llm is not None:
            title = self.llm.complete(prompts.title(segment_lines(self.db, segment_id, 12)))
            if title:
                self.db.structure.set_segment_title(segment_id, title)
        self.trajectories.assign(segment_id)
        self.core_facts.consolidate(segment_id)
