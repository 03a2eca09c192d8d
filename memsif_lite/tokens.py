"""One token counter for budgets: the English + Portuguese bundled model's tokenizer (SentencePiece
pieces, close to what chat models count for English; fast and small), loaded lazily and shared by
the API and the benchmarks. A run of characters its vocabulary does not know (Chinese, emoji) is
one unknown token, counted here as one token per character, so budgets hold in every script."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["count_tokens", "count_tokens_many"]

_UNK = 3


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from .embed import ENPT_MODEL, bundled_tokenizer

    return bundled_tokenizer(ENPT_MODEL)


def _count(enc: Any) -> int:
    # offsets are character offsets into the text (the tokenizers library's; memsif's Python
    # Unigram, used for the multilingual model's embeddings, has none and never counts)
    return len(enc.ids) + sum(end - start - 1 for i, (start, end) in zip(enc.ids, enc.offsets, strict=True)
                              if i == _UNK and end - start > 1)


@functools.lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    """Tokens in ``text`` (without special tokens)."""
    if not text:
        return 0
    return _count(_tokenizer().encode(text, add_special_tokens=False))


def count_tokens_many(texts: list[str]) -> list[int]:
    """:func:`count_tokens` of each text, encoded as one batch (what ingest stores per message)."""
    if not texts:
        return []
    return [_count(e) for e in _tokenizer().encode_batch(list(texts), add_special_tokens=False)]
