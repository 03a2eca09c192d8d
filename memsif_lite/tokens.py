"""One token counter for budgets: the English + Portuguese bundled model's tokenizer (SentencePiece
pieces, close to what chat models count for English; fast and small), loaded lazily and shared by
the API and the benchmarks. A run of characters its vocabulary does not know (Chinese, emoji) is
one unknown token, counted here as one token per character, so budgets hold in every script."""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, Callable, TypeVar

__all__ = ["count_tokens", "count_tokens_many", "joins_exactly", "cached_for_short_texts", "CACHED_CHARS"]

_UNK = 3
#: characters the tokenizer's normalizer turns into a space although Python does not call them
#: white space or unprintable (the rest of its list is white space or unprintable)
_SPACE_TO_TOKENIZER = "\u2581\ufffd"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from .embed import ENPT_MODEL, bundled_tokenizer

    return bundled_tokenizer(ENPT_MODEL)


def _count(enc: Any) -> int:
    # offsets are character offsets into the text (the tokenizers library's; memsif's Python
    # Unigram, used for the multilingual model's embeddings, has none and never counts)
    return len(enc.ids) + sum(end - start - 1 for i, (start, end) in zip(enc.ids, enc.offsets, strict=True)
                              if i == _UNK and end - start > 1)


#: texts up to this long (rendered lines, sentences, prefixes: what recurs) are counted once per
#: process; longer ones every time, so the cache never holds whole long messages
CACHED_CHARS = 1000

T = TypeVar("T")


def cached_for_short_texts(maxsize: int) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Cache ``fn(text, *args)`` per process for texts up to :data:`CACHED_CHARS` long; a longer
    text is computed every time (the cache never holds whole long messages)."""
    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(text: str, *args: Any) -> T:
            return cached(text, *args) if len(text) <= CACHED_CHARS else fn(text, *args)
        return call
    return wrap


@cached_for_short_texts(65536)
def _count_text(text: str) -> int:
    return _count(_tokenizer().encode(text, add_special_tokens=False))


def count_tokens(text: str) -> int:
    """Tokens in ``text`` (without special tokens)."""
    return _count_text(text) if text else 0


def count_tokens_many(texts: list[str]) -> list[int]:
    """:func:`count_tokens` of each text, encoded as one batch (what ingest stores per message)."""
    if not texts:
        return []
    return [_count(e) for e in _tokenizer().encode_batch(list(texts), add_special_tokens=False)]


@functools.lru_cache(maxsize=8192)
def _edge_ok(c: str) -> bool:
    n = unicodedata.normalize("NFKC", c)
    return c.isprintable() and not c.isspace() and c not in _SPACE_TO_TOKENIZER and bool(n) and n == n.strip()


@functools.lru_cache(maxsize=1)
def _added_tokens() -> tuple[str, ...]:
    """Strings the tokenizer takes out of a text before normalising it (``<s>``, ``<mask>``…)."""
    return tuple(t.content for t in _tokenizer().get_added_tokens_decoder().values())


def joins_exactly(text: str) -> bool:
    """True when ``text`` starts and ends with a character the tokenizer keeps as it is (not white
    space, nothing it drops, no compatibility character that becomes a space) and holds none of
    its added tokens (``<s>``…: they are split out before normalising, leaving a space beside them
    that counts). The tokenizer splits at spaces (a newline is one) and tokenizes each word alone,
    so texts like these count additively: ``count_tokens(a + "\n" + b) == count_tokens(a) +
    count_tokens(b)``, and the same with one space (tests/test_ask.py checks it on arbitrary text)."""
    return (bool(text) and _edge_ok(text[0]) and _edge_ok(text[-1])
            and not ("<" in text and any(t in text for t in _added_tokens())))
