"""Timestamps: everything is stored as naive UTC ISO-8601 text, which sorts chronologically."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .errors import InvalidInputError

__all__ = ["to_stored", "from_stored", "parse_locomo_date", "now_stored"]

_LOCOMO = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.IGNORECASE
)
_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"], start=1)}


def to_stored(at: object) -> str:
    """A datetime or ISO-8601 string to the stored form. Aware values are converted to UTC;
    naive values are taken as UTC. Anything else is an InvalidInputError."""
    if isinstance(at, str):
        s = at.strip()
        if s.endswith(("Z", "z")):
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError:
            try:
                dt = parse_locomo_date(at)
            except InvalidInputError:
                raise InvalidInputError(f"unparsable timestamp {at!r}: use ISO-8601, e.g. 2024-05-08T13:56:00") from None
    elif isinstance(at, datetime):
        dt = at
    else:
        raise InvalidInputError(f"timestamp must be a datetime or an ISO-8601 string, got {type(at).__name__}")
    if dt.tzinfo is not None:
        dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
    return dt.isoformat(timespec="microseconds" if dt.microsecond else "seconds")


def from_stored(s: str) -> datetime:
    return datetime.fromisoformat(s)


def now_stored() -> str:
    return to_stored(datetime.now(timezone.utc))


def parse_locomo_date(s: str) -> datetime:
    """LoCoMo's session dates: ``"1:56 pm on 8 May, 2023"``."""
    m = _LOCOMO.match(s or "")
    if not m:
        raise InvalidInputError(f"unparsable LoCoMo date {s!r}")
    hour, minute, ampm, day, month, year = m.groups()
    mon = _MONTHS.get(month.lower()) or next((v for k, v in _MONTHS.items() if k.startswith(month.lower()[:3])), None)
    if mon is None:
        raise InvalidInputError(f"unknown month in {s!r}")
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    try:
        return datetime(int(year), mon, int(day), h, int(minute))
    except ValueError as e:
        raise InvalidInputError(f"invalid date {s!r}: {e}") from e
