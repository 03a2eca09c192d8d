"""The context block within a token budget (paper §3.5): facts first, then dated evidence
grouped under a line per day, every line counted exactly so the text never exceeds the budget."""

from __future__ import annotations

import functools
import re
from datetime import date
from typing import Iterable, Sequence

from .tokens import count_tokens, joins_exactly
from .types import EvidenceItem, FactItem

__all__ = ["assemble", "fitting_facts"]


@functools.lru_cache(maxsize=4096)
def _ymd(d: date) -> str:
    return f"{d:%Y-%m-%d}"


def _fact_line(f: FactItem) -> str:
    when = ""
    if f.valid_to is not None:
        when = f" [from {_ymd(f.valid_from)} until {_ymd(f.valid_to)}; no longer current]"
    elif f.valid_from is not None and f.kind == "core":
        when = f" [since {_ymd(f.valid_from)}]"
    return f"- {f.stmt}{when}"


#: what Python's str.splitlines (and so a reader of the context) takes for the end of a line
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _evidence_line(e: EvidenceItem) -> str:
    """An evidence line without its day (the context groups lines under a line per day); a
    statement's own line breaks are indented, so only day lines and evidence lines start a line."""
    notes = f" (dates: {'; '.join(e.notes)})" if e.notes else ""
    return f"- {e.speaker}: {_LINE_BREAK.sub(chr(10) + '  ', e.stmt)}{notes}"


def _day_line(day: date) -> str:
    return f"[{_ymd(day)}]"


def _evidence_tokens(e: EvidenceItem) -> int:
    """Tokens of the evidence line: its prefix's plus the statement's from ingest, exact when the
    statement joins exactly (tokens.joins_exactly); else the whole line is counted."""
    if e.stmt_tokens is None or e.notes or not joins_exactly(e.stmt) or _LINE_BREAK.search(e.stmt):
        return count_tokens(_evidence_line(e))
    return count_tokens(f"- {e.speaker}:") + e.stmt_tokens


_HEAD_F = "Facts from memory:"


def _fitting(facts: Sequence[FactItem], budget: int) -> list[tuple[FactItem, int]]:
    """The facts a context of ``budget`` tokens shows, with their lines' tokens: current ones before
    those no longer current (each kind in the given order), while they fit in an eighth of the budget
    — a fact that was replaced is not shown in place of the one replacing it."""
    out: list[tuple[FactItem, int]] = []
    used = 0
    for f in sorted(facts, key=lambda f: f.valid_to is not None):  # (stable: rank order kept within)
        n = count_tokens(_fact_line(f))
        c = n + (count_tokens(_HEAD_F) if not out else 0)
        if used + c > budget // 8:
            break
        out.append((f, n))
        used += c
    return out


def fitting_facts(facts: Sequence[FactItem], budget: int) -> list[FactItem]:
    """The facts :func:`assemble` shows in a context of ``budget`` tokens, in the order it shows them:
    what a sufficiency check must judge (facts left out cannot make a context sufficient)."""
    return [f for f, _ in _fitting(facts, budget)]


def assemble(question: str, facts: Sequence[FactItem], evidence: Iterable[EvidenceItem],
              budget: int) -> tuple[str, int, list[FactItem], list[EvidenceItem]]:
    """Facts first (at most an eighth of the budget: :func:`fitting_facts`), then evidence in rank
    order while it fits; the evidence is shown chronologically, under a line per day (the speaker's
    local date): a day costs its tokens once, not on every line. Returns the text, its tokens and
    what it shows.

    Each line is counted exactly and a newline costs nothing (the tokenizer takes it for a space
    between words): the text never exceeds ``budget``, since lines that start with "-", "[" or a
    heading never count more joined than alone. When every line also ends in a character that
    joins exactly, the sum of the line counts is the text's count (tokens.joins_exactly) and the
    text is not tokenized again."""
    head_e = "Evidence from past conversations (dated):"
    shown_f = _fitting(facts, budget)
    used = sum(n for _, n in shown_f) + (count_tokens(_HEAD_F) if shown_f else 0)
    shown_e: list[tuple[EvidenceItem, int]] = []
    days: set[date] = set()
    for e in evidence:
        n = _evidence_tokens(e)
        day = e.local_at.date()
        c = n + (count_tokens(head_e) if not shown_e else 0) + (count_tokens(_day_line(day)) if day not in days else 0)
        if used + c > budget:
            if budget - used < 12:
                break
            continue
        shown_e.append((e, n))
        days.add(day)
        used += c
    lines: list[tuple[str, int]] = []
    if shown_f:
        lines += [(_HEAD_F, count_tokens(_HEAD_F))] + [(_fact_line(f), n) for f, n in shown_f]
    if shown_e:
        lines.append((head_e, count_tokens(head_e)))
        last: date | None = None
        for e, n in sorted(shown_e, key=lambda en: (en[0].local_at.date(), en[0].at, en[0].message_ids)):
            day = e.local_at.date()
            if day != last:
                lines.append((_day_line(day), count_tokens(_day_line(day))))
                last = day
            lines.append((_evidence_line(e), n))
    text = "\n".join(line for line, _ in lines)
    exact = all(joins_exactly(line) for line, _ in lines)
    tokens = sum(n for _, n in lines) if exact else count_tokens(text)
    return text, tokens, [f for f, _ in shown_f], [e for e, _ in shown_e]
