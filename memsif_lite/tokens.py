"""One token counter for budgets: the bundled multilingual model's tokenizer (SentencePiece pieces
of the full XLM-R vocabulary: close to what chat models count for English, and every script
counted, where a pruned vocabulary folds a run of Chinese into one unknown token), loaded lazily
and shared with that model's embedder, the API and the benchmarks."""

from __future__ import annotations

import functools

__all__ = ["count_tokens", "count_tokens_many"]


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from .embed import MULTILINGUAL_MODEL, bundled_tokenizer

    return bundled_tokenizer(MULTILINGUAL_MODEL)


@functools.lru_cache(maxsize=65536)
def count_tokens(text: str) -> int:
    """Tokens in ``text`` (without special tokens)."""
    if not text:
        return 0
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


def count_tokens_many(texts: list[str]) -> list[int]:
    """:func:`count_tokens` of each text, encoded as one batch (what ingest stores per message)."""
    if not texts:
        return []
    return [len(e.ids) for e in _tokenizer().encode_batch(list(texts), add_special_tokens=False)]
