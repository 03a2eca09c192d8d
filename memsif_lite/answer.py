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
* answer: extractive — the most relevant evidence sentence (or fact), marked as extractive.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Sequence

import numpy as np

from . import prompts
from .active_facts import Evidence
from .retrieval import fts_query, rank_with_structure
from .timeutil import day_label, from_stored, relative_notes, to_stored
from .tokens import count_tokens

if TYPE_CHECKING:  # pragma: no cover
    from .memory import Memory

__all__ = ["FactItem", "EvidenceItem", "Context", "Answer", "build_context", "answer_question"]

#: offline sufficiency: cosine between the question and a query that promoted an ActiveFact
SUFFICIENT_QUERY = 0.95
#: facts more than this (raw query–fact cosine) below the best match are not shown: query and
#: passage embeddings live in different cosine ranges, so the cut is relative to the best match
FACT_MARGIN = 0.04
MAX_FACTS = 6
#: offline, only the best-ranked evidence items feed the ActiveFact track (the rest is context)
OFFLINE_ACCUMULATE = 2
MAX_EVIDENCE_TOKENS = 60
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
    return len({w.lower() for w in _WORD.findall(a)} & query_words)


def _query_words(question: str) -> set[str]:
    q = fts_query(question) or ""
    return {w.strip('"') for w in q.split(" OR ")}


def _trim(text: str, qwords: set[str], max_tokens: int = MAX_EVIDENCE_TOKENS) -> str:
    """The message, or its most relevant sentences (in order) when it is long."""
    if count_tokens(text) <= max_tokens:
        return text
    sents = [s for s in _SENT.split(text) if s.strip()]
    ranked = sorted(range(len(sents)), key=lambda i: (-_overlap(sents[i], qwords), i))
    keep: list[int] = []
    used = 0
    for i in ranked:
        c = count_tokens(sents[i])
        if used + c > max_tokens and keep:
            continue
        keep.append(i)
        used += c
    out = " ".join(sents[i] for i in sorted(keep))
    while count_tokens(out) > max_tokens and " " in out:  # one very long sentence
        out = out.rsplit(" ", 1)[0]
    return out + (" …" if out != text else "")


def retrieve_facts(mem: "Memory", qvec: np.ndarray) -> list[FactItem]:
    con = mem.con
    items: list[FactItem] = []
    for kind, table, sql in (
        ("core", "fact_vec", "SELECT id, subject, type, stmt, valid_from, valid_to FROM core_facts WHERE id=?"),
        ("active", "active_fact_vec", "SELECT id, subject, NULL, stmt, created_at, NULL FROM active_facts WHERE id=?"),
    ):
        n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        if not n:
            continue
        for fid, dist in con.execute(f"SELECT rowid, distance FROM {table} WHERE embedding MATCH ? AND k = ?",
                                     (qvec.astype(np.float32).tobytes(), min(n, 2 * MAX_FACTS))).fetchall():
            score = 1.0 - float(dist)
            r = con.execute(sql, (fid,)).fetchone()
            if kind == "core":
                mids = tuple(m for (m,) in con.execute(
                    "SELECT message_id FROM fact_sources WHERE fact_id=? ORDER BY message_id", (fid,)))
            else:
                mids = tuple(m for (m,) in con.execute(
                    "SELECT DISTINCT e.message_id FROM active_facts a JOIN cluster_statements s ON s.cluster_id=a.cluster_id "
                    "JOIN cluster_evidence e ON e.statement_id=s.id WHERE a.id=? ORDER BY e.message_id", (fid,)))
            items.append(FactItem(kind, r[0], r[1], r[2], r[3], from_stored(r[4]) if r[4] else None,
                                  from_stored(r[5]) if r[5] else None, mids, score))
    items.sort(key=lambda f: (-f.score, f.kind, f.id))
    return [f for f in items if f.score >= items[0].score - FACT_MARGIN][:MAX_FACTS]


def _offline_sufficient(mem: "Memory", qvec: np.ndarray, facts: Sequence[FactItem]) -> bool:
    for f in facts:
        if f.kind != "active":
            continue
        for (blob,) in mem.con.execute(
                "SELECT q.vector FROM active_facts a JOIN cluster_queries q ON q.cluster_id=a.cluster_id WHERE a.id=?",
                (f.id,)):
            if float(np.frombuffer(blob, dtype=np.float32) @ qvec) >= SUFFICIENT_QUERY:
                return True
    return False


def _fact_line(f: FactItem) -> str:
    when = ""
    if f.valid_to is not None:
        when = f" [from {f.valid_from:%Y-%m-%d} until {f.valid_to:%Y-%m-%d}; no longer current]"
    elif f.valid_from is not None and f.kind == "core":
        when = f" [since {f.valid_from:%Y-%m-%d}]"
    return f"- {f.stmt}{when}"


def _evidence_line(e: EvidenceItem) -> str:
    notes = f" (dates: {'; '.join(e.notes)})" if e.notes else ""
    return f"- [{e.at:%Y-%m-%d}] {e.speaker}: {e.stmt}{notes}"


def _offline_evidence(mem: "Memory", ranked: Sequence[int], qwords: set[str], limit: int) -> list[EvidenceItem]:
    out = []
    for mid in ranked[:limit]:
        r = mem.con.execute("SELECT speaker, text, at, session, source_id FROM messages WHERE id=?", (mid,)).fetchone()
        at = from_stored(r[2])
        stmt = _trim(r[1], qwords)
        out.append(EvidenceItem((mid,), r[0], stmt, at, r[3], (r[4],) if r[4] else (), tuple(relative_notes(stmt, at))))
    return out


def _llm_evidence(mem: "Memory", question: str, ranked: Sequence[int]) -> list[EvidenceItem] | None:
    rows = [mem.con.execute("SELECT id, speaker, text, at, session, source_id FROM messages WHERE id=?", (m,)).fetchone()
            for m in sorted(ranked[:40])]
    lines = [f"[{day_label(from_stored(r[3]))}] {r[1]}: {r[2][:500]}" for r in rows]
    system, user, validate = prompts.evidence(question, lines)
    got = mem.llm.complete_json("evidence", system, user, validate, max_tokens=700)  # type: ignore[union-attr]
    if got is None:
        return None
    out = []
    for subject, stmt, idx in got:
        src = [rows[i] for i in idx]
        out.append(EvidenceItem(tuple(r[0] for r in src), subject, stmt, from_stored(src[-1][3]), src[-1][4],
                                tuple(r[5] for r in src if r[5])))
    return out


def build_context(mem: "Memory", question: str, budget_tokens: int, *, use_segments: bool = True,
                  use_trajectories: bool = True, timings: dict | None = None) -> Context:
    timings = timings if timings is not None else {}
    t = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[name] = round(timings.get(name, 0.0) + (now - t) * 1000.0, 3)
        t = now

    qvec = mem.embed_query(question)
    lap("embed_query")
    facts = retrieve_facts(mem, qvec)
    lap("facts")
    sufficient = False
    if facts:
        if mem.llm is not None:
            system, user, validate = prompts.sufficiency(question, [f.stmt for f in facts])
            verdict = mem.llm.complete_json("sufficiency", system, user, validate, max_tokens=20)
            sufficient = verdict if verdict is not None else _offline_sufficient(mem, qvec, facts)
        else:
            sufficient = _offline_sufficient(mem, qvec, facts)
    lap("sufficiency")
    evidence: list[EvidenceItem] = []
    if not sufficient:
        ranked = [m for m, _ in rank_with_structure(mem.retriever, question, use_segments=use_segments,
                                                    use_trajectories=use_trajectories)]
        lap("retrieval")
        got = _llm_evidence(mem, question, ranked) if mem.llm is not None else None
        evidence = got if got is not None else _offline_evidence(mem, ranked, _query_words(question), limit=60)
        lap("evidence")
    text, shown_facts, shown_evidence = _assemble(question, facts, evidence, budget_tokens)
    lap("assemble")
    return Context(question, text, tuple(shown_facts), tuple(shown_evidence), sufficient, count_tokens(text),
                   budget_tokens)


def _assemble(question: str, facts: Sequence[FactItem], evidence: Sequence[EvidenceItem],
              budget: int) -> tuple[str, list[FactItem], list[EvidenceItem]]:
    """Facts first (at most an eighth of the budget), then evidence in rank order while it fits; the
    evidence is shown chronologically. The result never exceeds ``budget`` tokens."""
    head_f, head_e = "Facts from memory:", "Evidence from past conversations (dated):"
    used = 0
    shown_f: list[FactItem] = []
    for f in facts:
        c = count_tokens(_fact_line(f)) + 1 + (count_tokens(head_f) + 1 if not shown_f else 0)
        if used + c > budget // 8:
            break
        shown_f.append(f)
        used += c
    shown_e: list[EvidenceItem] = []
    for e in evidence:
        c = count_tokens(_evidence_line(e)) + 1 + (count_tokens(head_e) + 1 if not shown_e else 0)
        if used + c > budget:
            if budget - used < 12:
                break
            continue
        shown_e.append(e)
        used += c

    def render() -> str:
        parts = []
        if shown_f:
            parts += [head_f] + [_fact_line(f) for f in shown_f]
        if shown_e:
            parts += [head_e] + [_evidence_line(e) for e in sorted(shown_e, key=lambda e: (e.at, e.message_ids))]
        return "\n".join(parts)

    text = render()
    while count_tokens(text) > budget and (shown_e or shown_f):  # tokenizer joins can differ by a token or two
        (shown_e if shown_e else shown_f).pop()
        text = render()
    return text, shown_f, shown_e


def extractive_answer(question: str, ctx: Context) -> str:
    """The best-ranked evidence item's most relevant sentence (or the top fact when facts
    sufficed); marked with its speaker and date."""
    if ctx.sufficient and ctx.facts:
        return ctx.facts[0].stmt
    if not ctx.evidence:
        return ctx.facts[0].stmt if ctx.facts else "I don't know: nothing in memory matches the question."
    qwords = _query_words(question)
    e = ctx.evidence[0]
    sents = [x for x in _SENT.split(e.stmt) if x.strip()] or [e.stmt]
    best = max(range(len(sents)), key=lambda i: (_overlap(sents[i], qwords), -i))
    return f"{e.speaker} ({e.at:%Y-%m-%d}): {sents[best].strip()}"


def answer_question(mem: "Memory", question: str, budget_tokens: int, now: datetime | None) -> Answer:
    timings: dict = {}
    calls_before = mem._llm_calls_made
    ctx = build_context(mem, question, budget_tokens, timings=timings)
    t = time.perf_counter()
    text, extractive, tokens_in, tokens_out = None, True, ctx.tokens, 0
    if mem.llm is not None:
        now_s = to_stored(now) if now is not None else to_stored(datetime.now())
        system, user, validate = prompts.answer(question, ctx.text, day_label(from_stored(now_s)))
        tokens_in = count_tokens(system) + count_tokens(user)
        text = mem.llm.complete_json("answer", system, user, validate, max_tokens=300)
        extractive = text is None
    if text is None:
        text = extractive_answer(question, ctx)
    tokens_out = count_tokens(text)
    timings["answer"] = round((time.perf_counter() - t) * 1000.0, 3)
    t = time.perf_counter()
    if not ctx.sufficient and ctx.evidence:
        qvec = mem.embed_query(question)
        top = ctx.evidence[:OFFLINE_ACCUMULATE] if mem.llm is None else ctx.evidence
        # offline evidence is a message excerpt: the statement names its speaker (the subject)
        mem._accumulate(question, qvec, [Evidence(e.stmt if mem.llm else f"{e.speaker}: {e.stmt}", e.speaker,
                                                  e.message_ids) for e in top])
    timings["active_facts"] = round((time.perf_counter() - t) * 1000.0, 3)
    return Answer(text, extractive, ctx.text, ctx.evidence, ctx.facts, ctx.sufficient, tokens_in, tokens_out,
                  mem._llm_calls_made - calls_before, timings)
