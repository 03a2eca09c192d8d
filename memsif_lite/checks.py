"""Argument checks shared by the facade (:class:`memsif_lite.Memory`) and tool layers: each raises
:class:`InvalidInputError` before anything is read or written."""

from __future__ import annotations

from typing import Any

from .errors import InvalidInputError

__all__ = ["check_question", "check_search", "check_page"]


def _int_in(value: Any, lo: int, hi: int, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidInputError(f"{name} must be an integer in [{lo}, {hi}]")


def check_question(question: Any, budget_tokens: Any) -> None:
    if not isinstance(question, str) or not question.strip():
        raise InvalidInputError("question must be a non-empty string")
    _int_in(budget_tokens, 50, 200_000, "budget_tokens")


def check_search(query: Any, k: Any, level: Any) -> None:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must be a non-empty string")
    _int_in(k, 1, 1000, "k")
    if level not in ("message", "segment", "trajectory"):
        raise InvalidInputError("level must be 'message', 'segment' or 'trajectory'")


def check_page(limit: Any, offset: Any) -> None:
    if limit is not None:
        _int_in(limit, 0, 10**9, "limit")
    _int_in(offset, 0, 10**12, "offset")
