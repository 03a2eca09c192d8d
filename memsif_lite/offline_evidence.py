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
from typing import Iterator, Sequence

from .answers import has_content_words
from .db import MessageRow
from .fulltext import index_text
from .retrieval import query_terms
from .timeutil import from_stored, local_time, relative_notes
from .tokens import Encode, cached_for_short_texts, count_encoded, count_upto, encode, prefix_within
from .types import EvidenceItem

__all__ = ["excerpt", "query_words", "with_replies", "low_information", "offline_evidence"]

_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


def _overlap(a: str, qwords: set[str]) -> int:
    if a.isascii():  # its index form is itself, and lowering it lowers each word
        return len(qwords.intersection(_WORD.findall(a.lower())))
    return len({w.lower() for w in _WORD.findall(index_text(a))} & qwords)


def query_words(question: str) -> set[str]:
    """The words a message's sentences are ranked by: the question's full-text query terms."""
    return set(query_terms(question))


def excerpt(text: str, qwords: set[str], tokens: int | None = None, *, max_tokens: int, encode: Encode = encode) -> str:
    """The message, or its most relevant sentences (in order) when it is longer than
    ``max_tokens`` (``tokens``: its count from ingest, when known); a
    sentence still over is cut before a word (tokens.prefix_within).

    Linear in the message's length, whatever its shape (one unpunctuated megabyte included): a
    sentence is only encoded up to about the tokens it could still use (tokens.count_upto), one
    with more words than there are tokens left is not encoded at all (a word is at least a token),
    and the excerpt is encoded once more to check it (a failed check cuts it: prefix_within)."""
    if (tokens if tokens is not None else count_upto(text, max_tokens, encode=encode)) <= max_tokens:
        return text
    sents = [x for x in _SENT.split(text) if x.strip()]
    ranked = _ranked(sents, qwords) if len(sents) > 1 else iter([0])
    keep: list[int] = []
    used = 0
    for i in ranked:
        room = max_tokens - used
        if keep and room <= 0:
            break
        if keep and len(sents[i].split()) > room:
            continue
        c = count_upto(sents[i], room if keep else max_tokens, encode=encode)
        if keep and c > room:
            continue
        keep.append(i)
        used += c
    out = " ".join(sents[i] for i in sorted(keep))
    if used > max_tokens or count_encoded(encode(out)) > max_tokens:
        out = prefix_within(out, max_tokens, encode=encode)
    return out + (" …" if out != text else "")


def _ranked(sents: list[str], qwords: set[str]) -> Iterator[int]:
    """Sentence indexes by the question words they share (most first, ties in order), then the
    rest in order. Only a sentence that may share one is scored: one holding a question word
    written in any case, or a character beyond ASCII (the index form of such text may differ from
    it); an ASCII sentence without any shares none. A message of many short sentences costs one
    C-level search each, not a rewrite and a word split each."""
    ascii_words = sorted((w for w in qwords if w.isascii()), key=len, reverse=True)
    maybe = re.compile("|".join([*map(re.escape, ascii_words), r"[^\x00-\x7f]"]), re.IGNORECASE | re.ASCII)
    scored = sorted((-n, i) for i, x in enumerate(sents) if maybe.search(x) and (n := _overlap(x, qwords)))
    first = {i for _, i in scored}
    return itertools.chain((i for _, i in scored), (i for i in range(len(sents)) if i not in first))


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
        stmt = excerpt(r.text, qwords, tokens=r.tokens, max_tokens=top_tokens if i == 0 else max_tokens)
        # relative dates resolve on the speaker's local date
        yield EvidenceItem((mid,), r.speaker, stmt, at, r.session, (r.source_id,) if r.source_id else (),
                           _notes(stmt, local_time(at, r.utc_offset_min)), r.utc_offset_min,
                           r.tokens if stmt == r.text else None)
