"""One token counter for budgets: the English + Portuguese bundled model's tokenizer (SentencePiece
pieces, close to what chat models count for English; fast and small), loaded lazily and shared by
the API and the benchmarks. A run of characters its vocabulary does not know (Chinese, emoji) is
one unknown token, counted here as one token per character, so budgets hold in every script."""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, Callable, TypeVar

__all__ = ["count_tokens", "count_tokens_many", "joins_exactly", "cached_for_short_texts", "CACHED_CHARS", "encode",
           "count_encoded", "prefix_within", "count_upto", "Encode"]

_UNK = 3
#: characters the tokenizer's normalizer turns into a space although Python does not call them
#: white space or unprintable (the rest of its list is white space or unprintable)
_SPACE_TO_TOKENIZER = "\u2581\ufffd"


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from .embed import ENPT_MODEL, bundled_tokenizer

    return bundled_tokenizer(ENPT_MODEL)


#: what :func:`encode` is: text -> the tokenizers library's Encoding (``ids``, ``tokens``, ``offsets``)
Encode = Callable[[str], Any]


def encode(text: str) -> Any:
    """The tokenizer's encoding of ``text`` without special tokens: ids, pieces and character offsets."""
    return _tokenizer().encode(text, add_special_tokens=False)


def count_encoded(enc: Any) -> int:
    """:func:`count_tokens` of the text ``enc`` encodes (an unknown run counts its characters)."""
    return _count(enc)


def _weight(token_id: int, start: int, end: int) -> int:
    return 1 + (end - start - 1 if token_id == _UNK and end - start > 1 else 0)


def _count(enc: Any) -> int:
    # offsets are character offsets into the text (the tokenizers library's; memsif's Python
    # Unigram, used for the multilingual model's embeddings, has none and never counts)
    ids = enc.ids
    if _UNK not in ids:  # every token weighs 1 (the offsets are not read)
        return len(ids)
    return sum(_weight(i, start, end) for i, (start, end) in zip(ids, enc.offsets, strict=True))


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


def _gallop(text: str, most: int, encode: Encode) -> tuple[str, Any]:
    """A prefix of ``text`` and its encoding: the whole text when it counts at most ``most``
    tokens, else a prefix of whole words (unless its first word alone is that long) that counts
    more. Prefixes of 16·(most + 1) characters, then four times longer each time, are encoded, so
    the work is linear in the length of the prefix needed, whatever the length of the text."""
    size = 16 * (most + 1)
    while True:
        if size >= len(text):
            return text, encode(text)
        chunk = text[:size]
        end = len(chunk)
        while end > 0 and not chunk[end - 1].isspace():  # back to the end of the last whole word
            end -= 1
        chunk = chunk[:end] if end > 0 else chunk
        enc = encode(chunk)
        if count_encoded(enc) > most:
            return chunk, enc
        size *= 4


def count_upto(text: str, most: int, *, encode: Encode = encode) -> int:
    """:func:`count_tokens` of ``text`` when it is at most ``most``; else some number above
    ``most``, found without encoding more of the text than a prefix of about that many tokens."""
    return count_encoded(_gallop(text, most, encode)[1])


def prefix_within(text: str, most: int, *, encode: Encode = encode) -> str:
    """The longest prefix of ``text`` that counts at most ``most`` tokens, cut before a word (inside
    the first word only when that word alone is over), without trailing white space.

    The work does not depend on how long the text is beyond the prefix: the cut is found from the
    character offsets of a prefix's encoding (:func:`_gallop`), and one encoding of the result
    checks it. Only when the check fails (normalisation made offsets and a fresh count disagree)
    does a binary search on the cut follow, at most log2(len(result)) + 1 encodings of prefixes of
    the result; the result always counts at most ``most`` (the empty text counts 0)."""
    if most < 0 or not text:
        return ""
    chunk, enc = _gallop(text, most, encode)
    used, word_start, cut = 0, None, None
    for j, (tid, piece, (start, end)) in enumerate(zip(enc.ids, enc.tokens, enc.offsets, strict=True)):
        if j > 0 and piece.startswith("\u2581"):
            word_start = start
        w = _weight(tid, start, end)
        if used + w > most:
            if word_start is not None and word_start > 0:  # before the word this piece belongs to
                cut = word_start
            elif tid == _UNK:  # the first word alone is over, in an unknown run: one token a character
                cut = start + most - used
            else:  # the first word alone is over: after the last piece that fits
                cut = enc.offsets[j - 1][1] if j > 0 else 0
            break
        used += w
    if cut is None:
        return chunk
    out = chunk[:cut].rstrip()
    if count_encoded(encode(out)) <= most:
        return out
    lo, hi = 0, len(out)  # lo: a cut known to fit; hi: one known not to
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_encoded(encode(out[:mid].rstrip())) <= most:
            lo = mid
        else:
            hi = mid
    return out[:lo].rstrip()
