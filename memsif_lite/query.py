"""The query pipeline (paper §3.5): facts first, a sufficiency check, fall back to the
interaction memory for query-local evidence, assemble a dated context within a token budget,
answer, then feed the evidence to the ActiveFact track.

Offline rules (no LLM, or the LLM failed):

* sufficiency: only a promoted ActiveFact can suffice, and only when the question restates one
  of the queries that promoted it (cosine ≥ ``SUFFICIENT_QUERY``): that is the recurring need
  the ActiveFact was formed for. CoreFacts from the offline extractor are fragments, so they
  never suffice on their own; the interaction memory is consulted, which costs only tokens;
* evidence: the best-ranked messages (structure-aware ranking), each cut to its most relevant
  sentences when long;
* answer: extractive (memsif_lite.answers) — a matching current fact, else the evidence sentence
  sharing the most content words with the question, else "I don't know"; marked as extractive.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from . import episodes, prompts
from .active_facts import ActiveFactStore, Evidence
from .answers import has_content_words, offline_answer
from .db import Database, MessageRow
from .errors import NotFoundError
from .filters import MessageFilter
from .fulltext import index_text
from .llm import LLM
from .retrieval import Retriever, fts_query
from .timeutil import day_label, from_stored, local_time, relative_notes, to_stored
from .tokens import (Encode, cached_for_short_texts, count_encoded, count_tokens, count_upto, encode, joins_exactly,
                     prefix_within)

__all__ = ["FactItem", "EvidenceItem", "Context", "Answer", "QueryPipeline", "extractive_answer", "excerpt"]

#: offline sufficiency: cosine between the question and a query that promoted an ActiveFact
SUFFICIENT_QUERY = 0.95
#: facts more than this (raw query–fact cosine) below the best match are not shown: query and
#: passage embeddings live in different cosine ranges, so the cut is relative to the best match
FACT_MARGIN = 0.04
MAX_FACTS = 6
#: offline, only the best-ranked evidence items feed the ActiveFact track (the rest is context)
OFFLINE_ACCUMULATE = 2
MAX_EVIDENCE_TOKENS = 60
#: offline evidence below the top hit needs this many content words (lower-case, not stop words;
#: a number always counts as enough): greetings, thanks and acknowledgements are left out; 0: off
LOW_INFO_WORDS = 1
#: offline, the reply to each of this many best-ranked messages that ask something follows it; 0: off
REPLY_OF_TOP = 5
_SENT = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class FactItem:
    kind: str                      # "core" or "active"
    id: int
    subject: str
    type: str | None
    stmt: str
    valid_from: datetime | None
    valid_to: datetime | None
    message_ids: tuple[int, ...]
    score: float


@dataclass(frozen=True)
class EvidenceItem:
    message_ids: tuple[int, ...]
    speaker: str
    stmt: str
    at: datetime
    session: str | None
    source_ids: tuple[str, ...]
    notes: tuple[str, ...] = ()
    #: UTC offset of the (last) source message's time as its caller gave it; None: unknown (UTC)
    utc_offset_min: int | None = None
    #: tokens of ``stmt`` when known (counted at ingest), so the budget needs no tokenizer call
    stmt_tokens: int | None = field(default=None, compare=False, repr=False)

    @property
    def local_at(self) -> datetime:
        """``at`` at the speaker's UTC offset (naive local time; ``at`` when unknown)."""
        return local_time(self.at, self.utc_offset_min)


@dataclass(frozen=True)
class Context:
    """What :meth:`Memory.context` returns: a ready-to-paste block and its parts."""

    question: str
    text: str
    facts: tuple[FactItem, ...]
    evidence: tuple[EvidenceItem, ...]
    sufficient: bool
    tokens: int
    budget_tokens: int

    @property
    def message_ids(self) -> tuple[int, ...]:
        ids = {m for e in self.evidence for m in e.message_ids} | {m for f in self.facts for m in f.message_ids}
        return tuple(sorted(ids))


@dataclass(frozen=True)
class Answer:
    text: str
    extractive: bool
    context: str
    evidence: tuple[EvidenceItem, ...]
    facts: tuple[FactItem, ...]
    sufficient: bool
    tokens_in: int
    tokens_out: int
    llm_calls: int
    timings_ms: dict = field(default_factory=dict, hash=False, compare=False)


def _overlap(a: str, query_words: set[str]) -> int:
    return len({w.lower() for w in _WORD.findall(index_text(a))} & query_words)


def _query_words(question: str) -> set[str]:
    q = fts_query(question) or ""
    return {w.strip('"') for w in q.split(" OR ")}


def excerpt(text: str, qwords: set[str], tokens: int | None = None, *, encode: Encode = encode) -> str:
    """The message, or its most relevant sentences (in order) when it is longer than
    MAX_EVIDENCE_TOKENS, read when called (``tokens``: its count from ingest, when known); a
    sentence still over is cut before a word (tokens.prefix_within).

    Linear in the message's length, whatever its shape (one unpunctuated megabyte included): a
    sentence is only encoded up to about the tokens it could still use (tokens.count_upto), one
    with more words than there are tokens left is not encoded at all (a word is at least a token),
    and the excerpt is encoded once more to check it (a failed check cuts it: prefix_within)."""
    max_tokens = MAX_EVIDENCE_TOKENS
    if (tokens if tokens is not None else count_upto(text, max_tokens, encode=encode)) <= max_tokens:
        return text
    spans = _sentence_spans(text)
    sents = [text[a:b] for a, b in spans]
    ranked = sorted(range(len(sents)), key=lambda i: (-_overlap(sents[i], qwords), i)) if len(sents) > 1 else [0]
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


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence with something in it (``_SENT`` splits them)."""
    spans, start = [], 0
    for m in _SENT.finditer(text):
        spans.append((start, m.start()))
        start = m.end()
    spans.append((start, len(text)))
    return [(a, b) for a, b in spans if text[a:b].strip()]


def _fact_line(f: FactItem) -> str:
    when = ""
    if f.valid_to is not None:
        when = f" [from {f.valid_from:%Y-%m-%d} until {f.valid_to:%Y-%m-%d}; no longer current]"
    elif f.valid_from is not None and f.kind == "core":
        when = f" [since {f.valid_from:%Y-%m-%d}]"
    return f"- {f.stmt}{when}"


#: what Python's str.splitlines (and so a reader of the context) takes for the end of a line
_LINE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def _evidence_line(e: EvidenceItem) -> str:
    """An evidence line without its day (the context groups lines under a line per day); a
    statement's own line breaks are indented, so only day lines and evidence lines start a line."""
    notes = f" (dates: {'; '.join(e.notes)})" if e.notes else ""
    return f"- {e.speaker}: {_LINE_BREAK.sub(chr(10) + '  ', e.stmt)}{notes}"


def _day_line(day: date) -> str:
    return f"[{day:%Y-%m-%d}]"


def _evidence_tokens(e: EvidenceItem) -> int:
    """Tokens of the evidence line: its prefix's plus the statement's from ingest, exact when the
    statement joins exactly (tokens.joins_exactly); else the whole line is counted."""
    if e.stmt_tokens is None or e.notes or not joins_exactly(e.stmt) or _LINE_BREAK.search(e.stmt):
        return count_tokens(_evidence_line(e))
    return count_tokens(f"- {e.speaker}:") + e.stmt_tokens


def _assemble(question: str, facts: Sequence[FactItem], evidence: Iterable[EvidenceItem],
              budget: int) -> tuple[str, int, list[FactItem], list[EvidenceItem]]:
    """Facts first (at most an eighth of the budget), then evidence in rank order while it fits; the
    evidence is shown chronologically, under a line per day (the speaker's local date): a day costs
    its tokens once, not on every line. Returns the text, its tokens and what it shows.

    Each line is counted exactly and a newline costs nothing (the tokenizer takes it for a space
    between words): the text never exceeds ``budget``, since lines that start with "-", "[" or a
    heading never count more joined than alone. When every line also ends in a character that
    joins exactly, the sum of the line counts is the text's count (tokens.joins_exactly) and the
    text is not tokenized again."""
    head_f, head_e = "Facts from memory:", "Evidence from past conversations (dated):"
    used = 0
    shown_f: list[tuple[FactItem, int]] = []
    for f in facts:
        n = count_tokens(_fact_line(f))
        c = n + (count_tokens(head_f) if not shown_f else 0)
        if used + c > budget // 8:
            break
        shown_f.append((f, n))
        used += c
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
        lines += [(head_f, count_tokens(head_f))] + [(_fact_line(f), n) for f, n in shown_f]
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


def extractive_answer(question: str, ctx: Context) -> str:
    """The offline answer: a matching current fact first, else the evidence sentence that shares
    the most of the question's content words (memsif_lite.answers)."""
    return offline_answer(question, ctx.facts, ctx.evidence, ctx.sufficient)


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


def _offline_evidence(rows: dict[int, MessageRow], ranked: Sequence[int], qwords: set[str],
                      limit: int) -> Iterator[EvidenceItem]:
    """Evidence items in rank order, made as the assembly asks for them (it stops when the
    budget is full). What depends on a message alone is computed once per process for short
    messages (the same messages recur across questions and budgets)."""
    for i, mid in enumerate(ranked[:limit]):
        r = rows[mid]
        if i > 0 and _is_low_information(r.text, LOW_INFO_WORDS):
            continue
        at = from_stored(r.at)
        stmt = excerpt(r.text, qwords, tokens=r.tokens)  # relative dates resolve on the speaker's local date
        yield EvidenceItem((mid,), r.speaker, stmt, at, r.session, (r.source_id,) if r.source_id else (),
                           _notes(stmt, local_time(at, r.utc_offset_min)), r.utc_offset_min,
                           r.tokens if stmt == r.text else None)


class _Laps:
    """Per-stage timings in milliseconds."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings
        self.t = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(self.timings.get(name, 0.0) + (now - self.t) * 1000.0, 3)
        self.t = now


class QueryPipeline:
    """Facts → sufficiency → structure-aware evidence → budgeted, dated context → answer →
    ActiveFact accumulation. Collaborators are passed in; nothing here knows ``Memory``."""

    def __init__(self, db: Database, *, retriever: Retriever, embed_query: Callable[[str], np.ndarray],
                 llm: LLM | None, active_facts: ActiveFactStore):
        self.db = db
        self.retriever = retriever
        self.embed_query = embed_query
        self.llm = llm
        self.active_facts = active_facts

    # -- facts --------------------------------------------------------------------------------
    def facts(self, qvec: np.ndarray, flt: MessageFilter | None = None) -> list[FactItem]:
        items: list[FactItem] = []
        core, clusters, fl = self.db.facts, self.db.clusters, self.db.filters
        near_core = core.nearest(qvec, 2 * MAX_FACTS) if flt is None else fl.nearest_facts(qvec, 2 * MAX_FACTS, flt)
        near_active = (clusters.nearest_active(qvec, 2 * MAX_FACTS) if flt is None
                       else fl.nearest_active(qvec, 2 * MAX_FACTS, flt))
        got = core.many([fid for fid, _ in near_core])
        for fid, dist in near_core:
            f = got.get(fid)
            if f is not None:
                items.append(FactItem("core", f.id, f.subject, f.type, f.stmt, f.valid_from, f.valid_to,
                                      f.message_ids, 1.0 - dist))
        for fid, dist in near_active:
            aid, subject, stmt, created = clusters.active_row(fid)
            items.append(FactItem("active", aid, subject, None, stmt, from_stored(created), None,
                                  clusters.active_messages(fid), 1.0 - dist))
        if not items:
            return []
        items.sort(key=lambda f: (-f.score, f.kind, f.id))
        return [f for f in items if f.score >= items[0].score - FACT_MARGIN][:MAX_FACTS]

    def _offline_sufficient(self, qvec: np.ndarray, facts: Sequence[FactItem]) -> bool:
        for f in facts:
            if f.kind == "active" and any(float(v @ qvec) >= SUFFICIENT_QUERY
                                          for v in self.db.clusters.active_query_vectors(f.id)):
                return True
        return False

    def _llm_evidence(self, question: str, ranked: Sequence[int]) -> list[EvidenceItem] | None:
        assert self.llm is not None
        by_id = self.db.messages.many(sorted(ranked[:40]))
        rows = [by_id[m] for m in sorted(by_id)]
        lines = [f"[{day_label(local_time(from_stored(r.at), r.utc_offset_min))}] {r.speaker}: {r.text[:500]}"
                 for r in rows]
        got = self.llm.complete(prompts.evidence(question, lines))
        if got is None:
            return None
        out = []
        for subject, stmt, idx in got:
            src = [rows[i] for i in idx]
            out.append(EvidenceItem(tuple(r.id for r in src), subject, stmt, from_stored(src[-1].at), src[-1].session,
                                    tuple(r.source_id for r in src if r.source_id), (), src[-1].utc_offset_min))
        return out

    # -- context ------------------------------------------------------------------------------
    def context(self, question: str, budget_tokens: int, *, timings: dict[str, float] | None = None,
                flt: MessageFilter | None = None) -> Context:
        """Read-only: the facts and (unless they suffice) evidence, within ``budget_tokens``; with a
        filter, only matching facts and messages (:mod:`memsif_lite.filters`)."""
        return self._context(question, budget_tokens, timings, flt)[0]

    def _context(self, question: str, budget_tokens: int, timings: dict[str, float] | None,
                 flt: MessageFilter | None) -> tuple[Context, bool]:
        """:meth:`context`, and whether its evidence items are message excerpts (offline, or the
        LLM's evidence step failed) rather than the LLM's self-contained statements."""
        lap = _Laps(timings if timings is not None else {})
        qvec = self.embed_query(question)
        lap("embed_query")
        facts = self.facts(qvec, flt)
        lap("facts")
        sufficient = False
        if facts:
            verdict = None
            if self.llm is not None:
                verdict = self.llm.complete(prompts.sufficiency(question, [f.stmt for f in facts]))
            sufficient = verdict if verdict is not None else self._offline_sufficient(qvec, facts)
        lap("sufficiency")
        evidence: Iterable[EvidenceItem] = ()
        excerpts = False
        if not sufficient:
            ranked = [m for m, _ in self.retriever.rank_with_structure(question, flt=flt, limit=60)]
            lap("retrieval")
            got: Iterable[EvidenceItem] | None = (self._llm_evidence(question, ranked) if self.llm is not None
                                                  else None)
            if got is None:  # offline evidence is made lazily: its cost shows under "assemble"
                nxt = [m + 1 for m in ranked[:REPLY_OF_TOP]] if flt is None else []  # a filter may exclude them
                rows = self.db.messages.many(ranked[:60] + nxt)
                ranked = with_replies(ranked[:60], rows, REPLY_OF_TOP if flt is None else 0)
                ranked = episodes.with_neighbours(self.db, ranked, rows, episodes.NEIGHBOURS_OF_TOP if flt is None
                                                  else 0)
                got = _offline_evidence(rows, ranked, _query_words(question), 60)
                excerpts = True
            evidence = got
            lap("evidence")
        text, tokens, shown_facts, shown_evidence = _assemble(question, facts, evidence, budget_tokens)
        lap("assemble")
        return (Context(question, text, tuple(shown_facts), tuple(shown_evidence), sufficient, tokens, budget_tokens),
                excerpts)

    # -- ActiveFact accumulation -------------------------------------------------------------------
    def accumulate(self, question: str, evidence: Sequence[Evidence]) -> None:
        """Fold one answered question's evidence into the candidate clusters (one transaction)."""
        missing = self.db.messages.missing([m for e in evidence for m in e.message_ids])
        if missing:
            raise NotFoundError(f"no message with id {missing[0]}")
        qvec = self.embed_query(question)
        with self.db.write():
            self.active_facts.accumulate(question, qvec, evidence)

    # -- answer ---------------------------------------------------------------------------------
    def ask(self, question: str, budget_tokens: int, now: datetime | None,
            flt: MessageFilter | None = None) -> Answer:
        timings: dict[str, float] = {}
        calls_before = self.llm.calls if self.llm is not None else 0
        ctx, excerpts = self._context(question, budget_tokens, timings, flt)
        t = time.perf_counter()
        text: str | None = None
        tokens_in = ctx.tokens
        if self.llm is not None:
            now_s = to_stored(now) if now is not None else to_stored(datetime.now())
            prompt = prompts.answer(question, ctx.text, day_label(from_stored(now_s)))
            tokens_in = count_tokens(prompt.system) + count_tokens(prompt.user)
            text = self.llm.complete(prompt)
        extractive = text is None
        if text is None:
            text = extractive_answer(question, ctx)
        timings["answer"] = round((time.perf_counter() - t) * 1000.0, 3)
        t = time.perf_counter()
        if not ctx.sufficient and ctx.evidence:
            # an excerpt (offline, or the LLM's evidence step failed) does not name its subject: the
            # statement is prefixed with its speaker; the LLM's statements name theirs
            top = ctx.evidence[:OFFLINE_ACCUMULATE] if excerpts else ctx.evidence
            evidence = [Evidence(f"{e.speaker}: {e.stmt}" if excerpts else e.stmt, e.speaker, e.message_ids)
                        for e in top]
            self.accumulate(question, evidence)
        timings["active_facts"] = round((time.perf_counter() - t) * 1000.0, 3)
        calls = (self.llm.calls - calls_before) if self.llm is not None else 0
        return Answer(text, extractive, ctx.text, ctx.evidence, ctx.facts, ctx.sufficient, tokens_in,
                      count_tokens(text), calls, timings)
