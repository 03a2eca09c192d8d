"""Argument checks shared by the facade (:class:`memsif_lite.Memory`) and tool layers: each raises
:class:`InvalidInputError` before anything is read or written."""

from __future__ import annotations

from typing import Any

from .errors import InvalidInputError

__all__ = ["check_question", "check_search", "check_page", "check_id", "check_text", "INT64_MAX", "BUDGET_RANGE",
           "K_RANGE"]

#: the largest integer SQLite stores (ids beyond it cannot name anything)
INT64_MAX = 2**63 - 1
#: the budgets a context or an answer may be given, in tokens (the CLI's options say so too)
BUDGET_RANGE = (50, 200_000)
#: how many results a search may ask for
K_RANGE = (1, 1000)


def _int_in(value: Any, lo: int, hi: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be an integer in [{lo}, {hi}]")


def check_id(value: Any, name: str) -> int:
    """A message or fact id: an ``int`` (not a bool, not ``"1"``) that SQLite can hold. An id that
    fits but names nothing is for the caller to report (NotFoundError)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an integer, got {type(value).__name__}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise InvalidInputError(f"{name} {value} is outside the range of ids (64-bit integers)")
    return value


def check_text(value: Any, name: str) -> str:
    """A string that can reach SQLite: valid Unicode, so no lone surrogate (``"\\ud800"``, or what
    Python makes of undecodable bytes in a command line) — SQLite stores UTF-8."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInputError(f"{name} is not valid Unicode text ({e.reason})") from None
    return value


def check_question(question: Any, budget_tokens: Any) -> None:
    if not isinstance(question, str) or not question.strip():
        raise InvalidInputError("question must be a non-empty string")
    check_text(question, "question")
    _int_in(budget_tokens, *BUDGET_RANGE, "budget_tokens")


def check_search(query: Any, k: Any, level: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must be a non-empty string")
    check_text(query, "query")
    _int_in(k, *K_RANGE, "k")
    if level not in ("message", "segment", "trajectory"):
        raise InvalidInputError("level must be 'message', 'segment' or 'trajectory'")


def check_page(limit: Any, offset: Any) -> None:
    if limit is not None:
        _int_in(limit, 0, 10**9, "limit")
    _int_in(offset, 0, 10**12, "offset")
