"""The ingest pipeline (paper §3.2–3.3): validate → embed (content-hash cache) → store the
message, its vector, its full-text row and its *place* step in one short ``BEGIN IMMEDIATE``
transaction. The steps that follow (place it in a Topical Segment; when a segment closes: its
title, Event Trajectory and CoreFacts) run from the work queue (:mod:`memsif_lite.worker`).

Offline they run inside that same transaction (nothing waits on a model), so a failure at any
step (embedder, judge, disk) leaves the file as it was and the structure is there at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Iterable, Mapping

from .db import Database, MessageRow
from .db.merge import tombstone_hash
from .db.queue import PLACE
from .embed import Embeddings, passage, passage_hash
from .entities import extract_entities
from .errors import InvalidInputError, InvalidMessageError
from .timeutil import now_stored, to_stored, utc_offset_min
from .tokens import count_tokens_many
from .types import Added
from .int8 import dequantize, quantize
from .worker import Worker

__all__ = ["MessageIn", "IngestPipeline", "MAX_SPEAKER", "MAX_SESSION", "RETRY_WINDOW"]

MAX_SPEAKER = 200
MAX_SESSION = 200
#: a message given without a time is stored at "now", so a retry of the same call has another
#: time: under ``skip_existing`` it is the same message when an earlier call stored the same
#: speaker, text and session (without a source id) this recently
RETRY_WINDOW = timedelta(minutes=10)
_KEYS = frozenset({"speaker", "text", "at", "session", "source_id"})


@dataclass(frozen=True)
class MessageIn:
    """A validated message, ready to store (``at`` in the stored UTC form)."""

    speaker: str
    text: str
    at: str
    session: str | None
    source_id: str | None
    utc_offset_min: int | None = None
    #: no time was given: ``at`` is when it was stored (see :data:`RETRY_WINDOW`)
    untimed: bool = False

    @property
    def passage(self) -> str:
        """What is embedded: ``Speaker: text`` (questions name people)."""
        return passage(self.speaker, self.text)

    @classmethod
    def from_mapping(cls, m: Any, *, index: int = 0, max_chars: int = 1_000_000) -> "MessageIn":
        """Validate one mapping with ``speaker``, ``text`` and optional ``at``, ``session``,
        ``source_id``; anything else is an :class:`InvalidInputError` naming message ``index``."""
        def bad(why: str) -> InvalidInputError:
            return InvalidMessageError(index, why)

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
        try:
            stored_at = now_stored() if at is None else to_stored(at)
        except InvalidInputError as e:
            raise bad(str(e)) from None
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
        if source_id is not None:
            _unicode(source_id, "source_id", bad)
        return cls(speaker, text, stored_at, session, source_id, None if at is None else utc_offset_min(at),
                   untimed=at is None)


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
    """Stores messages with their place steps; runs the steps at once when told to (offline)."""

    def __init__(self, db: Database, *, embeddings: Embeddings, worker: Worker, max_chars: int):
        self.db = db
        self.embeddings = embeddings
        self.worker = worker
        self.max_chars = max_chars

    def validate(self, messages: Iterable[Any]) -> list[MessageIn]:
        return [MessageIn.from_mapping(m, index=i, max_chars=self.max_chars) for i, m in enumerate(messages)]

    def add(self, rows: list[MessageIn], progress: Callable[[int], None] | None = None, *,
            process: bool = False, skip_existing: bool = False) -> list[Added]:
        """Store validated messages in one transaction; returns each one's id and whether it is
        new. ``process``: run the queued steps inside the same transaction (only with offline
        judges: no LLM may be called while it is open). ``skip_existing``: a message already in the
        file (checked inside the transaction: :meth:`present_id`) is not stored again; its row
        gives the stored message's id, and False."""
        if not rows:
            return []
        passages = [r.passage for r in rows]
        hashes = [passage_hash(p) for p in passages]
        with self.db.read():
            vecs = self.embeddings.passages_cached(passages, hashes)
        tokens = count_tokens_many([r.text for r in rows])  # counted once, here, not per query
        codes = quantize(vecs)  # the whole batch at once: each row's codes are what quantize(row) gives
        # the stored (int8) direction, exactly what a later step reads back
        stored = dequantize(codes) if process else None
        created = now_stored()
        out: list[Added] = []
        skipped = 0
        try:
            with self.db.write():
                ids = self.db.messages.new_ids()
                forgotten = self.db.tombstones.any()  # none is added below: asked once
                for i, (r, h, v, n) in enumerate(zip(rows, hashes, vecs, tokens, strict=True)):
                    present = self.present_id(r, created) if skip_existing else None
                    if present is not None:
                        skipped += 1
                        out.append(Added(present, False))
                        continue
                    mid = self.db.messages.insert(speaker=r.speaker, text=r.text, at=r.at, session=r.session,
                                                  source_id=r.source_id, content_hash=h, created_at=created, vector=v,
                                                  utc_offset_min=r.utc_offset_min, tokens=n, code=codes[i],
                                                  mid=next(ids))
                    self.db.queue.push(PLACE, mid, created)
                    if forgotten:  # added again on purpose
                        self.db.tombstones.discard(tombstone_hash(r.speaker, r.text, r.at))
                    if stored is not None:  # the row as stored, too: the place step need not read it back
                        self.worker.hint(mid, stored[i], extract_entities(r.text),
                                         MessageRow(mid, r.speaker, r.text, r.at, r.session, r.source_id,
                                                    r.utc_offset_min, n))
                    out.append(Added(mid, True))
                if process:
                    self.worker.run(progress=progress)
        except BaseException:
            self.worker.drop_hints()  # the rows they describe were rolled back; their ids may come again
            raise
        if progress is not None:
            progress(skipped if process else len(rows))
        return out

    def present_id(self, r: MessageIn, created: str) -> int | None:
        """The stored message ``r`` is (the ``skip_existing`` rule): the same ``source_id`` and
        speaker when it has a source id, else the same speaker, time and text; and, for a message
        given without a time, one with the same speaker, text and session that an earlier call
        stored within :data:`RETRY_WINDOW` (a retried call; repeats within one call are kept)."""
        found = self.db.filters.present_id(r.speaker, r.text, r.at, r.source_id)
        if found is None and r.untimed and r.source_id is None:
            since = to_stored(datetime.fromisoformat(r.at) - RETRY_WINDOW)
            found = self.db.filters.retried_id(r.speaker, r.text, r.session, since, created)
        return found
