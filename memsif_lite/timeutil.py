"""Timestamps: everything is stored as naive UTC ISO-8601 text, which sorts chronologically."""

from __future__ import annotations

import contextlib
import re
from datetime import datetime, timedelta, timezone
from typing import Callable, Iterator

from .errors import InvalidInputError, StorageCorruptError

__all__ = ["to_stored", "utc_offset_min", "local_time", "from_stored", "is_stored", "parse_locomo_date", "now_stored",
           "day_label", "relative_notes", "stated_times", "plain_time_words"]

_LOCOMO = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.IGNORECASE
)
_MONTHS = {m: i for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september",
     "october", "november", "december"], start=1)}


def to_stored(at: object) -> str:
    """A datetime or ISO-8601 string to the stored form. Aware values are converted to UTC;
    naive values are taken as UTC. Anything else is an InvalidInputError."""
    dt = _parse(at)
    if dt.tzinfo is not None:
        try:
            dt = dt.astimezone(timezone.utc).replace(tzinfo=None)
        except (OverflowError, ValueError):  # e.g. 0001-01-01T00:00:00+14:00 is before year 1 in UTC
            raise InvalidInputError(f"timestamp {at!s} is out of range once converted to UTC "
                                    "(years 1-9999)") from None
    return dt.isoformat(timespec="microseconds" if dt.microsecond else "seconds")


def utc_offset_min(at: object) -> int | None:
    """The UTC offset, in whole minutes, of the time the caller gave (``+02:00`` → 120); ``None``
    for a naive time (taken as UTC, offset unknown). Sub-minute offsets are rounded."""
    dt = _parse(at)
    off = dt.utcoffset()
    return None if off is None else round(off.total_seconds() / 60)


def local_time(at_utc: datetime, offset_min: int | None) -> datetime:
    """A stored (naive UTC) time at its speaker's UTC offset, as a naive local time; unchanged
    when the offset is unknown."""
    if offset_min is None:
        return at_utc
    try:
        return at_utc + timedelta(minutes=offset_min)
    except OverflowError:  # a rounded sub-minute offset at the very edge of year 1 or 9999
        return at_utc


def _parse(at: object) -> datetime:
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
                raise InvalidInputError(
                    f"unparsable timestamp {at!r}: use ISO-8601, e.g. 2024-05-08T13:56:00") from None
    elif isinstance(at, datetime):
        dt = at
    else:
        raise InvalidInputError(f"timestamp must be a datetime or an ISO-8601 string, got {type(at).__name__}")
    return dt


def from_stored(s: str) -> datetime:
    """A stored time (naive UTC ISO-8601 text) as a naive datetime. The file may come from anyone:
    a value that is not one is a :class:`StorageCorruptError`, never a raw ``ValueError``."""
    try:
        dt = datetime.fromisoformat(s)
    except (TypeError, ValueError):
        dt = None
    if dt is None or dt.tzinfo is not None:
        raise StorageCorruptError(f"stored time {str(s)[:40]!r} is not a memsif timestamp: the memory file "
                                  "is damaged or was edited (run `memsif check`)")
    return dt


def is_stored(s: object) -> bool:
    """Is ``s`` exactly a time as :func:`to_stored` writes it (naive UTC, canonical text)? What a
    file or an export must hold in its time columns: the text order is the time order."""
    if not isinstance(s, str):
        return False
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        return False
    return dt.tzinfo is None and dt.isoformat(timespec="microseconds" if dt.microsecond else "seconds") == s


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


#: the record clock: what ``now_stored`` reads (:func:`record_clock` replaces it)
_clock: list[Callable[[], datetime]] = [_system_clock]


def now_stored() -> str:
    """Record time now (the local clock, stored UTC): when memsif learns or changes something."""
    return to_stored(_clock[-1]())


@contextlib.contextmanager
def record_clock(clock: Callable[[], datetime]) -> Iterator[None]:
    """Read record time from ``clock`` instead of the system clock while the block runs: for tests
    (they step a clock instead of sleeping), not part of the API (record time is assumed
    monotonic: docs/history.md, "How known_at rewinds")."""
    _clock.append(clock)
    try:
        yield
    finally:
        _clock.remove(clock)


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


_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
#: how many days "N <unit>s ago" goes back (a month as 30 days, a year as 365)
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
#: time words as chat spells them, each read as the word it stands for ("tmrw", "last wk", "next
#: tues"); not "sat", "sun" or "wed" (words of their own), nor "this yr" ("is this yr car?")
_CHAT_TIME = {"tmrw": "tomorrow", "tmr": "tomorrow", "tmrow": "tomorrow", "2moro": "tomorrow", "2morrow": "tomorrow",
              "tomorow": "tomorrow", "tommorow": "tomorrow", "tommorrow": "tomorrow", "yday": "yesterday",
              "tonite": "tonight", "2nite": "tonight", "nite": "night", "wk": "week", "wks": "weeks", "wknd": "weekend",
              "wkend": "weekend", "yr": "year", "yrs": "years", "mon": "monday", "tue": "tuesday", "tues": "tuesday",
              "weds": "wednesday", "thu": "thursday", "thur": "thursday", "thurs": "thursday", "fri": "friday"}
_TOMORROW = "tomorrow|tmrw|tmr|tmrow|2moro|2morrow|tomorow|tommorow|tommorrow"
_DAY_NAMES = "|".join(_WEEKDAYS) + "|mon|tues?|weds|thu(?:rs?)?|fri"
_UNITS = r"(day|week|wk|month|year|yr)s?"
_REL = re.compile(
    rf"\b(yesterday|yday|today|tonight|tonite|2nite|{_TOMORROW}|"
    rf"(?:last|next|this) (?:week|wk|weekend|wknd|wkend|month|year|{_DAY_NAMES})|(?:last|next) yr|"
    rf"(\d+|a|an|one|two|three|four|five|six|a few|few|a couple of|a couple|couple of|couple) {_UNITS} ago)\b",
    re.IGNORECASE | re.ASCII)  # ASCII: "laſt", "thıs" are no "last", "this" (Unicode case folding says they are)
_NUM = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a few": 3, "few": 3,
        "a couple of": 2, "a couple": 2, "couple of": 2, "couple": 2}
#: counts that are only about so many ("a few days ago" ≈)
_VAGUE_COUNTS = frozenset({"a few", "few", "a couple of", "a couple", "couple of", "couple"})


_WORD = re.compile(r"[a-z0-9]+")
#: a word every phrase :data:`_REL` matches holds (its first, or "ago"), and likewise for :data:`_PAST`:
#: a text without one names no relative time (the scans cost ~15–25 µs a message)
_REL_WORDS = frozenset({"yesterday", "yday", "today", "tonight", "tonite", "2nite", "last", "next", "this", "ago",
                        *_TOMORROW.split("|")})
_PAST_WORDS = frozenset({"yesterday", "yday", "last", "ago", *_MONTHS})


def _spelled_out(phrase: str) -> str:
    """A time phrase with chat's spellings written out ("last wk" → "last week"), the other words as
    they were."""
    return " ".join(_CHAT_TIME.get(w.lower(), w) for w in phrase.split(" "))


def _plain_time(phrase: str) -> str:
    """A time phrase as :func:`_resolve` and :func:`_past` read it: spelled out, in lowercase."""
    return _spelled_out(phrase).lower()


def plain_time_words(text: str) -> str:
    """``text`` with the time phrases chat spells its own way written out ("i quit 2 wks ago" →
    "i quit 2 weeks ago", "see u tmrw" → "see u tomorrow", "last nite" → "last night"), only where
    they name a day as :func:`relative_notes` and :func:`stated_times` read them; every other
    word as it was."""
    if _CHAT_TIME.keys().isdisjoint(_WORD.findall(text.lower())):  # most text: the scans below cost ~40 µs
        return text
    return _PAST.sub(lambda m: _spelled_out(m.group(0)), _REL.sub(lambda m: _spelled_out(m.group(0)), text))


def day_label(dt: datetime) -> str:
    """``Mon 8 May 2023``."""
    return f"{dt.strftime('%a')} {dt.day} {dt.strftime('%b %Y')}"


def _weekend(d: datetime, which: str) -> str:
    """Sat–Sun: ``this`` = the current (said on Sat/Sun) or coming weekend; ``next`` = the coming
    one when said Monday–Thursday, the one after this one when said Friday–Sunday; ``last`` = the
    one before this one."""
    wd = d.weekday()
    sat = d - timedelta(days=wd - 5) if wd >= 5 else d + timedelta(days=5 - wd)
    if which == "last" or (which == "next" and wd >= 4):
        sat += timedelta(days=-7 if which == "last" else 7)
    return f"{day_label(sat)} – {day_label(sat + timedelta(days=1))}"


def relative_notes(text: str, said_at: datetime) -> list[str]:
    """Resolve relative time expressions against the date a message was said, e.g.
    ``'"yesterday" = Sun 7 May 2023'``; approximate ones are marked with ≈. ``said_at`` should
    be the speaker's LOCAL time (:func:`local_time`): "yesterday" is relative to their date."""
    notes: list[str] = []
    if _REL_WORDS.isdisjoint(_WORD.findall(text.lower())):  # no word a relative time begins or ends with
        return notes
    for m in _REL.finditer(text):
        try:
            target, approx = _resolve(m, said_at)
        except (OverflowError, ValueError):  # the day meant is before year 1 or after 9999: no note
            continue
        note = f'"{m.group(0)}" {"≈" if approx else "="} {target}'
        if note not in notes:
            notes.append(note)
    return notes


def _resolve(m: re.Match[str], said_at: datetime) -> tuple[str, bool]:
    """The day (or span) one relative expression names, and whether it is approximate."""
    phrase = _plain_time(m.group(0))
    d = said_at
    approx = False
    if phrase == "yesterday":
        target = day_label(d - timedelta(days=1))
    elif phrase in ("today", "tonight"):
        target = day_label(d)
    elif phrase == "tomorrow":
        target = day_label(d + timedelta(days=1))
    elif m.group(2):
        n = _NUM.get(m.group(2).lower()) or int(m.group(2))
        unit = _plain_time(m.group(3))
        days = _UNIT_DAYS[unit] * n
        approx = unit != "day" or m.group(2).lower() in _VAGUE_COUNTS
        target = day_label(d - timedelta(days=days))
    else:
        which, what = phrase.split(" ", 1)
        step = {"last": -1, "next": 1, "this": 0}[which]
        if what in _WEEKDAYS:
            wd = _WEEKDAYS.index(what)
            delta = (wd - d.weekday()) % 7
            if step == -1:
                delta = delta - 7 if delta > 0 else -7
            elif step == 1:
                delta = delta if delta > 0 else 7
            target = day_label(d + timedelta(days=delta))
        elif what == "weekend":
            target = _weekend(d, which)
        elif what == "week":
            target = "the week of " + day_label(d + timedelta(days=7 * step - d.weekday()))
        elif what == "month":
            y, mo = d.year, d.month + step
            y, mo = (y - 1, 12) if mo == 0 else (y + 1, 1) if mo == 13 else (y, mo)
            target = datetime(y, mo, 1).strftime("%B %Y")
        else:
            target = str(d.year + step)
    return target, approx


_PAST = re.compile(
    rf"\b(yesterday|yday|last (?:night|nite)|last (?:week|wk|weekend|wknd|wkend|month|year|yr|{_DAY_NAMES})|"
    rf"(\d+|a|an|one|two|three|four|five|six|a few|few|a couple of|a couple|couple of|couple) {_UNITS} ago|"
    r"in (" + "|".join(_MONTHS) + r")(?:,? (\d{4}))?)\b", re.IGNORECASE | re.ASCII)


def stated_times(text: str, said_at: datetime) -> list[tuple[int, int, datetime, str]]:
    """The past days a text names relative to when it was said ("last Saturday", "yesterday",
    "last night", "two weeks ago", "in July", "in March 2023"): ``(start, end, first day, precision)``
    for each, the day at ``said_at``'s clock time (a week from its Monday, a weekend from its
    Saturday, a month from its 1st, a year from 1 January), precision ``day``, ``month`` or ``year``.
    "In July" is the latest July not after the month it was said in. What lies ahead ("tomorrow",
    "next week", "this weekend") or names no day of its own ("today") is not listed."""
    out: list[tuple[int, int, datetime, str]] = []
    if _PAST_WORDS.isdisjoint(_WORD.findall(text.lower())):
        return out
    for m in _PAST.finditer(text):
        try:
            got = _past(m, said_at)
        except (OverflowError, ValueError):  # before year 1
            continue
        if got is not None and got[0] <= said_at:
            out.append((m.start(), m.end(), got[0], got[1]))
    return out


def _past(m: re.Match[str], d: datetime) -> tuple[datetime, str] | None:
    phrase = _plain_time(m.group(1))
    if phrase in ("yesterday", "last night"):
        return d - timedelta(days=1), "day"
    if m.group(2):
        n = _NUM.get(m.group(2).lower()) or int(m.group(2))
        unit = _plain_time(m.group(3))
        back = d - timedelta(days=_UNIT_DAYS[unit] * n)
        return back, {"month": "month", "year": "year"}.get(unit, "day")
    if m.group(4):
        month = _MONTHS[m.group(4).lower()]
        year = int(m.group(5)) if m.group(5) else d.year - (month > d.month)
        if not 1 <= year <= 9999:
            return None
        return d.replace(year=year, month=month, day=1), "month"
    what = phrase.split(" ", 1)[1]
    if what in _WEEKDAYS:
        delta = (_WEEKDAYS.index(what) - d.weekday()) % 7
        return d + timedelta(days=delta - 7 if delta > 0 else -7), "day"
    if what == "weekend":
        return d - timedelta(days=d.weekday() + 2), "day"  # the Saturday before this weekend
    if what == "week":
        return d - timedelta(days=d.weekday() + 7), "day"
    if what == "month":
        y, mo = (d.year - 1, 12) if d.month == 1 else (d.year, d.month - 1)
        return d.replace(year=y, month=mo, day=1), "month"
    return d.replace(year=d.year - 1, month=1, day=1), "year"
