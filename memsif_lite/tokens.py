"""One token counter for budgets: the bundled model's tokenizer (SentencePiece pieces, close to
what chat models count for English), loaded lazily and shared by the API and the benchmarks."""

from __future__ import annotations

import functools

__all__ = ["count_tokens", "count_tokens_many"]


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from tokenizers import Tokenizer

    from .embed import default_model_dir

    tok = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


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
