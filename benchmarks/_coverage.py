"""Answer coverage: the share of a gold answer's content words present in a context's text.

System-agnostic (it reads only text): lower-case, split into alphanumeric words, drop common
stop words, map month names (and their abbreviations) to their numbers, write numbers without
leading zeros, and read an ISO date ``YYYY-MM-DD`` as the three words of "D Month YYYY" (so
"2023-05-08" and "8 May 2023" give the same words ``8 5 2023``). A question is *fully covered*
when every answer word is present.
"""

from __future__ import annotations

import re

__all__ = ["words", "coverage", "STOP"]

_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_ALNUM = re.compile(r"[a-z0-9]+")
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
MONTH = {m: str(i) for i, m in enumerate(_MONTHS, start=1)}
MONTH.update({m[:3]: str(i) for i, m in enumerate(_MONTHS, start=1)})
MONTH["sept"] = "9"
#: common English function words (fixed here, independent of any system under test)
STOP = frozenset("""
a about after all also am an and any are as at be been being but by can could did do does doing
for from had has have having he her hers him his how i if in into is it its itself me my myself no
nor not of on or our ours out over she so some such than that the their theirs them then there these
they this those to too up very was we were what when where which while who whom why will with would
you your yours s t d ll m re ve just
""".split())


def words(text: str) -> set[str]:
    """The normalised content words of a text."""
    text = _ISO.sub(lambda m: f" {int(m.group(3))} {int(m.group(2))} {m.group(1)} ", str(text).lower())
    out = set()
    for w in _ALNUM.findall(text):
        if w in STOP:
            continue
        if w.isdigit():
            w = str(int(w))
        out.add(MONTH.get(w, w))
    return out


def coverage(answer: object, context_words: set[str]) -> float | None:
    """Share of the answer's words in ``context_words`` (from :func:`words`); None when the
    answer has no content word."""
    gold = words(str(answer))
    if not gold:
        return None
    return len(gold & context_words) / len(gold)
