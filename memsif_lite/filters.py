"""Filters on who said what, where and when: one frozen, validated :class:`MessageFilter`, built
once (by the Python API, the CLI or a tool layer) and applied by the data-access layer
(:mod:`memsif_lite.db.filtering`) before a ranking cuts its top k, never by post-filtering a top-k:
the vector cache ranks only the matching rows (or vec0's KNN takes ``rowid IN (SELECT ...)``), the
full-text query checks each hit's message.

What a filter means, per result kind:

* messages (``search``, evidence of ``context`` / ``ask``, ``messages``): the message's speaker
  is one of ``speakers`` (ASCII case-insensitive, composed or decomposed alike), its session one
  of ``sessions``, and its time (UTC) within ``[since, until]``;
* segments / trajectories (``search(level=...)``, the structure-aware evidence ranking): only
  units holding at least one matching message are ranked, and only their matching messages are
  returned or added as candidates;
* CoreFacts and ActiveFacts (``facts``, the facts part of ``context`` / ``ask``): the fact's
  subject is one of ``speakers``, and at least one of its source messages lies in ``sessions``
  and in ``[since, until]`` (the time of the messages that support it, not ``valid_from``).

``as_of`` is a point in *valid time* (when things were said and true, not when memsif learnt them:
docs/history.md): only messages said by then; of the CoreFacts, those valid then (``valid_from`` at or
before it, and not yet superseded — a fact superseded later is current as of that time); of the
ActiveFacts, those with a source message said by then.

``known_at`` is a point in *record time* (when memsif learnt things: the local clock at ``add``, at
the ``import`` or ``merge`` that brought them): only messages learnt by then; the CoreFacts and
ActiveFacts the file held then (rewound from the change log's before images by
:mod:`memsif_lite.record_time`; the rankings of ``context`` / ``ask`` consider those among the
facts still stored, created by then and not superseded by then).

Each given criterion must hold (AND); within ``speakers`` or ``sessions`` any value may match (OR).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import Any, Sequence, TypedDict

from .checks import check_text
from .errors import InvalidInputError
from .timeutil import to_stored

__all__ = ["MessageFilter", "Criteria", "MAX_VALUES", "Names"]

#: one speaker (or session) or several
Names = str | int | Sequence[str | int] | None

#: most speakers (or sessions) one filter may name
MAX_VALUES = 1000
_DATE_ONLY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}\s*$")


def _names(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, (str, int)) and not isinstance(value, bool) else value
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise InvalidInputError(f"{what} must be a string or a sequence of strings")
    out: list[str] = []
    for v in items:
        if isinstance(v, bool) or not isinstance(v, (str, int)):
            raise InvalidInputError(f"{what} must be strings, got {type(v).__name__}")
        s = " ".join(str(v).split())
        if not s or len(s) > 200:
            raise InvalidInputError(f"{what} must be 1-200 characters each")
        out.append(check_text(s, what))
    if len(out) > MAX_VALUES:
        raise InvalidInputError(f"at most {MAX_VALUES} {what}")
    return tuple(dict.fromkeys(out))


def _bound(value: Any, end_of_day: bool) -> str | None:
    """A datetime, a date or an ISO-8601 string as the stored UTC form; a date alone (``date`` or
    ``"2024-05-06"``) means the start of that day for ``since`` and its end for ``until``."""
    if value is None:
        return None
    if isinstance(value, str) and _DATE_ONLY.match(value):
        value = date.fromisoformat(value.strip())
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime.combine(value, time.max if end_of_day else time.min)
    return to_stored(value)


class Criteria(TypedDict, total=False):
    """The filter keywords the reading methods of ``Memory`` take (``**criteria``), as given:
    :meth:`MessageFilter.build` validates them."""

    speakers: Names
    sessions: Names
    since: Any
    until: Any
    as_of: Any
    known_at: Any


@dataclass(frozen=True)
class MessageFilter:
    """Validated criteria (see the module docstring); ``since``/``until`` in the stored UTC form,
    both inclusive. Build one with :meth:`build`; an instance with no criterion is never built."""

    speakers: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    as_of: str | None = None
    known_at: str | None = None

    @classmethod
    def build(cls, *, speakers: Names = None, sessions: Names = None, since: Any = None,
              until: Any = None, as_of: Any = None, known_at: Any = None) -> "MessageFilter | None":
        """The filter, or ``None`` when nothing is filtered. Bad values raise InvalidInputError."""
        if isinstance(speakers, int) and not isinstance(speakers, bool):
            raise InvalidInputError("speakers must be a string or a sequence of strings")
        f = cls(_names(speakers, "speakers"), _names(sessions, "sessions"), _bound(since, False), _bound(until, True),
                _bound(as_of, True), _bound(known_at, True))
        if f.since is not None and f.until is not None and f.since > f.until:
            raise InvalidInputError(f"since ({f.since}) is after until ({f.until})")
        return f if (f.speakers or f.sessions or f.since or f.until or f.as_of or f.known_at) else None

    def describe(self) -> str:
        """``speaker Ana or Bo, session 2, since 2024-05-01T00:00:00`` (for messages to people)."""
        parts = []
        if self.speakers:
            parts.append("speaker " + " or ".join(self.speakers))
        if self.sessions:
            parts.append("session " + " or ".join(self.sessions))
        if self.since:
            parts.append(f"since {self.since}")
        if self.until:
            parts.append(f"until {self.until}")
        if self.as_of:
            parts.append(f"as of {self.as_of}")
        if self.known_at:
            parts.append(f"known at {self.known_at}")
        return ", ".join(parts)
