"""Query-local evidence without an LLM (paper §3.5, offline): the best-ranked messages, the
reply to a question placed after it, greetings and acknowledgements left out below the top hit,
and each long message cut to its sentences most relevant to the question.

The knobs (how many tokens an excerpt may use, how many content words a message needs) are the
query pipeline's (:mod:`memsif_lite.query`), passed in on each call.
"""

from __future__ import annotations

import itertools
import re
from datetime import datetime
from typing import Iterator, NamedTuple, Sequence

from .answers import has_content_words
from .db import MessageRow
from .fulltext import index_text
from .retrieval import query_terms
from .timeutil import from_stored, local_time, relative_notes
from .tokens import (CACHED_CHARS, Encode, cached_for_short_texts, count_encoded, count_tokens, count_upto, encode,
                     joins_exactly, prefix_within)
from .types import EvidenceItem

__all__ = ["excerpt", "excerpt_counted", "query_words", "with_replies", "low_information", "offline_evidence"]

_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


def _words(sentence: str) -> frozenset[str]:
    """The words of a sentence as the question's words are matched against them: lower case, in
    the full-text index's form (ASCII text is its own index form)."""
    if sentence.isascii():  # its index form is itself, and lowering it lowers each word
        return frozenset(_WORD.findall(sentence.lower()))
    return frozenset(w.lower() for w in _WORD.findall(index_text(sentence)))


def _split(text: str) -> list[str]:
    return [x for x in _SENT.split(text) if x.strip()]


class _Sentence(NamedTuple):
    text: str
    words: frozenset[str]
    tokens: int
    exact: bool  # tokens.joins_exactly: joined by a space, sentences like it count additively


@cached_for_short_texts(4096)
def _sentences(text: str) -> tuple[_Sentence, ...]:
    """A short message's sentences with what excerpting needs of them that does not depend on the
    question (computed once per process: the same messages recur across questions)."""
    return tuple(_Sentence(x, _words(x), count_encoded(encode(x)), joins_exactly(x)) for x in _split(text))


def query_words(question: str) -> set[str]:
    """The words a message's sentences are ranked by: the question's full-text query terms."""
    return set(query_terms(question))


def excerpt(text: str, qwords: set[str], tokens: int | None = None, *, max_tokens: int, encode: Encode = encode) -> str:
    """The message, or its most relevant sentences (in order) when it is longer than
    ``max_tokens`` (``tokens``: its count from ingest, when known); a
    sentence still over is cut before a word (tokens.prefix_within)."""
    return excerpt_counted(text, qwords, tokens, max_tokens=max_tokens, encode=encode)[0]


def excerpt_counted(text: str, qwords: set[str], tokens: int | None = None, *, max_tokens: int,
                    encode: Encode = encode) -> tuple[str, int | None]:
    """:func:`excerpt`, and its tokens when they are known without counting it again (None: not known).

    A message up to ``tokens.CACHED_CHARS`` long is split into sentences, their words and their
    counts once per process; the excerpt's count is then the sum of its sentences' when each joins
    exactly (tokens.joins_exactly), else it is counted. A longer message is linear in its length,
    whatever its shape (one unpunctuated megabyte included): a sentence is only encoded up to about
    the tokens it could still use (tokens.count_upto), one with more words than there are tokens
    left is not encoded at all (a word is at least a token), and the excerpt is encoded once more
    to check it (a failed check cuts it: prefix_within)."""
    n = tokens if tokens is not None else count_upto(text, max_tokens, encode=encode)
    if n <= max_tokens:
        return text, n
    short = len(text) <= CACHED_CHARS
    parsed = _sentences(text) if short else ()
    sents = [p.text for p in parsed] if short else _split(text)
    if len(sents) <= 1:
        ranked: Iterator[int] = iter([0])
    elif short:
        ranked = _by_overlap([len(qwords.intersection(p.words)) for p in parsed])
    else:
        ranked = _by_overlap(_overlaps(sents, qwords))
    keep: list[int] = []
    used = 0
    for i in ranked:
        room = max_tokens - used
        if keep and room <= 0:
            break
        if keep and len(sents[i].split()) > room:
            continue
        # a short message's sentence count is exact; count_upto's is exact up to the room, and
        # above it some number above it: the same choices either way
        c = parsed[i].tokens if short else count_upto(sents[i], room if keep else max_tokens, encode=encode)
        if keep and c > room:
            continue
        keep.append(i)
        used += c
    out = " ".join(sents[i] for i in sorted(keep))
    if used <= max_tokens:
        n = used if short and all(parsed[i].exact for i in keep) else count_encoded(encode(out))
        if n <= max_tokens:
            if out == text:
                return text, n
            return out + " …", (n + count_tokens("…") if joins_exactly(out) else None)
    out = prefix_within(out, max_tokens, encode=encode)
    return out + (" …" if out != text else ""), None


def _by_overlap(overlaps: list[int]) -> Iterator[int]:
    """Sentence indexes by the question words they share (most first, ties in order), then the rest in order."""
    scored = sorted((-n, i) for i, n in enumerate(overlaps) if n)
    first = {i for _, i in scored}
    return itertools.chain((i for _, i in scored), (i for i in range(len(overlaps)) if i not in first))


def _overlaps(sents: list[str], qwords: set[str]) -> list[int]:
    """The question words each sentence of a long message shares. Only a sentence that may share
    one is scored: one holding a question word written in any case, or a character beyond ASCII
    (the index form of such text may differ from it); an ASCII sentence without any shares none.
    A message of many short sentences costs one C-level search each, not a rewrite and a word
    split each."""
    ascii_words = sorted((w for w in qwords if w.isascii()), key=len, reverse=True)
    maybe = re.compile("|".join([*map(re.escape, ascii_words), r"[^\x00-\x7f]"]), re.IGNORECASE | re.ASCII)
    return [len(qwords.intersection(_words(x))) if maybe.search(x) else 0 for x in sents]


def with_replies(ranked: Sequence[int], rows: dict[int, MessageRow], top: int) -> list[int]:
    """The ranking with the reply to each of the ``top`` best-ranked messages that ask something
    placed right after it (a "Yes, since 2020!" is found through its question): the next message,
    by another speaker, in the same session, within a day."""
    out: list[int] = []
    for i, mid in enumerate(ranked):
        if mid in out:
            continue
        out.append(mid)
        r, nxt = rows[mid], rows.get(mid + 1)
        if (i < top and nxt is not None and "?" in r.text and nxt.speaker != r.speaker and nxt.session == r.session
                and nxt.id not in out and (from_stored(nxt.at) - from_stored(r.at)).total_seconds() < 86400):
            out.append(nxt.id)
    return out


_DIGIT = re.compile(r"\d")


def low_information(text: str, min_words: int) -> bool:
    """A greeting, thanks or acknowledgement: no number and fewer than ``min_words`` content
    words once stop words and capitalised words (names) are left out."""
    if min_words <= 0 or _DIGIT.search(text):
        return False
    # distinct words only: the same verdict (distinct content words are counted), and a long
    # repetitive message ("ok ok ok …") costs one pass in C, not one Python step per word
    return not has_content_words(" ".join(w for w in set(text.split()) if not w[:1].isupper()), min_words)


@cached_for_short_texts(4096)
def _is_low_information(text: str, min_words: int) -> bool:
    return low_information(text, min_words)  # depends on answers.STOP_WORDS too: a constant


@cached_for_short_texts(4096)
def _notes(stmt: str, said_at: datetime) -> tuple[str, ...]:
    return tuple(relative_notes(stmt, said_at))


def offline_evidence(rows: dict[int, MessageRow], ranked: Sequence[int], qwords: set[str], limit: int, *,
                     low_info_words: int, max_tokens: int, top_tokens: int) -> Iterator[EvidenceItem]:
    """Evidence items in rank order, made as the assembly asks for them (it stops when the
    budget is full); each message cut to its most relevant sentences (:func:`excerpt`) at
    ``max_tokens``, the best-ranked one at ``top_tokens``. What depends on a message alone is
    computed once per process for short messages (the same messages recur across questions and
    budgets)."""
    for i, mid in enumerate(ranked[:limit]):
        r = rows[mid]
        if i > 0 and _is_low_information(r.text, low_info_words):
            continue
        at = from_stored(r.at)
        stmt, n = excerpt_counted(r.text, qwords, r.tokens, max_tokens=top_tokens if i == 0 else max_tokens)
        # relative dates resolve on the speaker's local date
        yield EvidenceItem((mid,), r.speaker, stmt, at, r.session, (r.source_id,) if r.source_id else (),
                           _notes(stmt, local_time(at, r.utc_offset_min)), r.utc_offset_min,
                           n)
