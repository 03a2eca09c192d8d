"""The query pipeline (paper §3.5): facts first, a sufficiency check, fall back to the
interaction memory for query-local evidence, assemble a dated context within a token budget,
answer, then feed the evidence to the ActiveFact track. The context is laid out by
:mod:`memsif_lite.rendering`; what it returns are :mod:`memsif_lite.types`.

Offline rules (no LLM, or the LLM failed):

* sufficiency: only a promoted ActiveFact can suffice, and only when the question restates one
  of the queries that promoted it (cosine ≥ ``SUFFICIENT_QUERY``): that is the recurring need
  the ActiveFact was formed for. CoreFacts from the offline extractor are fragments, so they
  never suffice on their own; the interaction memory is consulted, which costs only tokens;
* evidence: the best-ranked messages (structure-aware ranking), each cut to its most relevant
  sentences when long (:mod:`memsif_lite.offline_evidence`);
* answer: extractive (memsif_lite.answers) — the current fact or evidence sentence closest to the
  question in meaning (cosines of a bounded set of sentences, stored message vectors reused) and
  in shared words, never another person's own thing, else "I don't know"; marked as extractive.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime
from typing import Callable, Iterable, Sequence

import numpy as np

from . import episodes, prompts
from .active_facts import ActiveFactStore, Evidence
from .answers import Meaning, offline_answer
from .db import Database
from .embed import passage
from .entities import normalise
from .errors import NotFoundError
from .filters import MessageFilter
from .llm import LLM
from .offline_evidence import offline_evidence, query_words, with_replies
from .record_time import shown_as_then
from .rendering import assemble, fitting_facts
from .retrieval import Retriever
from .timeutil import day_label, from_stored, local_time, to_stored
from .tokens import count_tokens
from .types import Answer, Context, EvidenceItem, FactItem

__all__ = ["FactItem", "EvidenceItem", "Context", "Answer", "QueryPipeline", "extractive_answer"]

#: offline sufficiency: cosine between the question and a query that promoted an ActiveFact
SUFFICIENT_QUERY = 0.95
#: facts more than this (raw query–fact cosine) below the best match are not shown: query and
#: passage embeddings live in different cosine ranges, so the cut is relative to the best match
FACT_MARGIN = 0.04
MAX_FACTS = 6
#: the most CoreFacts :meth:`QueryPipeline.facts` ranks to fill places copies left empty
MOST_NEAR_FACTS = 4096
#: offline, only the best-ranked evidence items feed the ActiveFact track (the rest is context)
OFFLINE_ACCUMULATE = 2
MAX_EVIDENCE_TOKENS = 60
#: offline, the best-ranked message is cut at this many tokens instead (its other sentences often
#: hold the answer: LoCoMo development half, held-out coverage +0.7 points, recall unchanged)
TOP_EVIDENCE_TOKENS = 150
#: offline evidence below the top hit needs this many content words (lower-case, not stop words;
#: a number always counts as enough): greetings, thanks and acknowledgements are left out; 0: off
LOW_INFO_WORDS = 1
#: offline, the reply to each of this many best-ranked messages that ask something follows it; 0: off
REPLY_OF_TOP = 5


def extractive_answer(question: str, ctx: Context, meaning: Meaning | None = None) -> str:
    """The offline answer: the current fact or evidence sentence that answers the question, by
    ``meaning`` (cosines to the question) and shared words (memsif_lite.answers)."""
    return offline_answer(question, ctx.facts, ctx.evidence, ctx.sufficient, meaning)


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
                 embed_passages: Callable[[Sequence[str]], np.ndarray], llm: LLM | None,
                 active_facts: ActiveFactStore):
        self.db = db
        self.retriever = retriever
        self.embed_query = embed_query
        self.embed_passages = embed_passages
        self.llm = llm
        self.active_facts = active_facts

    # -- facts --------------------------------------------------------------------------------
    def facts(self, qvec: np.ndarray, flt: MessageFilter | None = None) -> list[FactItem]:
        """The nearest CoreFacts and ActiveFacts shown: the best ``MAX_FACTS`` within ``FACT_MARGIN``
        of the best match, by score (ties: kind, id). Only those are read; a vector whose fact is
        gone is passed over, and so is a CoreFact whose subject, statement and end one shown before
        has (copies an older memsif kept when a subject held many facts of one type: while they
        leave places empty and more CoreFacts could be within the margin, four times more are
        ranked, up to :data:`MOST_NEAR_FACTS`)."""
        fl = self.db.filters
        near_active = (self.db.clusters.nearest_active(qvec, 2 * MAX_FACTS) if flt is None
                       else fl.nearest_active(qvec, 2 * MAX_FACTS, flt))
        k = 2 * MAX_FACTS
        while True:
            near_core = self.db.facts.nearest(qvec, k) if flt is None else fl.nearest_facts(qvec, k, flt)
            items, copies, more = self._shown_facts(near_core, near_active, flt, k)
            if not (copies and more and len(items) < MAX_FACTS and k < MOST_NEAR_FACTS):
                return items
            k = min(4 * k, MOST_NEAR_FACTS)

    def _shown_facts(self, near_core: list[tuple[int, float]], near_active: list[tuple[int, float]],
                     flt: MessageFilter | None, k: int) -> tuple[list[FactItem], bool, bool]:
        """:meth:`facts` among ``near_core``, the ``k`` nearest CoreFacts (id, distance); whether a
        copy was passed over; whether a CoreFact beyond them could still be shown (``k`` of them,
        the last still within the margin)."""
        near = sorted([(1.0 - dist, "core", fid) for fid, dist in near_core]
                      + [(1.0 - dist, "active", fid) for fid, dist in near_active], key=lambda n: (-n[0], n[1], n[2]))
        copies = False
        more = len(near_core) >= k and bool(near) and 1.0 - near_core[-1][1] >= near[0][0] - FACT_MARGIN
        while near:
            shown = [n for n in near if n[0] >= near[0][0] - FACT_MARGIN][:MAX_FACTS]
            read = self._fact_items(shown, as_of=flt is not None and flt.as_of is not None,
                                    known_at=flt.known_at if flt is not None else None)
            items = _once_each(read)
            copies = copies or len(items) < len(read)
            if len(items) == len(shown):
                return items, copies, more
            found = {(f.kind, f.id) for f in items}
            near = [n for n in near if n not in shown or (n[1], n[2]) in found]
        return [], copies, more

    def _fact_items(self, near: list[tuple[float, str, int]], *, as_of: bool,
                    known_at: str | None = None) -> list[FactItem]:
        """``near`` (score, kind, id) as FactItems, in that order, leaving out those not found; with
        ``as_of``, a CoreFact valid then is current then; with ``known_at``, a CoreFact has the
        wording and validity the file held at that record time (docs/history.md)."""
        core = self.db.facts.many([fid for _, kind, fid in near if kind == "core"])
        active = self.db.clusters.active_many([fid for _, kind, fid in near if kind == "active"])
        if known_at is not None:  # as they stood then: wording, validity, sources; ActiveFacts held then
            then, active = shown_as_then(self.db, known_at, list(core), active)
            core = {fid: dataclasses.replace(
                f, stmt=r["stmt"], valid_from=from_stored(r["valid_from"]),
                valid_to=from_stored(r["valid_to"]) if r["valid_to"] else None, message_ids=r["message_ids"])
                for fid, f in core.items() if (r := then.get(fid)) is not None}
        items = []
        for score, kind, fid in near:
            if kind == "core" and (f := core.get(fid)) is not None:
                items.append(FactItem("core", f.id, f.subject, f.type, f.stmt, f.valid_from,
                                      None if as_of else f.valid_to, f.message_ids, score))
            elif kind == "active" and (a := active.get(fid)) is not None:
                items.append(FactItem("active", a.id, a.subject, None, a.stmt, from_stored(a.created_at), None,
                                      a.message_ids, score))
        return items

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
        facts = fitting_facts(self.facts(qvec, flt), budget_tokens)  # judged as shown: those that fit
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
                got = offline_evidence(rows, ranked, query_words(question), 60, low_info_words=LOW_INFO_WORDS,
                                       max_tokens=MAX_EVIDENCE_TOKENS, top_tokens=TOP_EVIDENCE_TOKENS)
                excerpts = True
            evidence = got
            lap("evidence")
        text, tokens, shown_facts, shown_evidence = assemble(question, facts, evidence, budget_tokens)
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
    def meaning(self, question: str) -> Meaning:
        """The cosines to ``question`` of what speakers said (``Speaker: text`` passages, as
        messages are embedded: a whole message's stored vector is reused)."""
        qvec = self.embed_query(question)  # the LRU's: the context embedded it

        def cosines(said: Sequence[tuple[str, str]]) -> list[float]:
            return [float(x) for x in self.embed_passages([passage(s, t) for s, t in said]) @ qvec]
        return cosines

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
            text = extractive_answer(question, ctx, self.meaning(question))
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


def _once_each(items: list[FactItem]) -> list[FactItem]:
    """``items`` without a CoreFact whose subject and statement (compared as an exact duplicate
    is: case and punctuation aside) and end an earlier one has: a value that ended and holds again
    ("I moved back to Lisbon") is two facts, both shown."""
    seen: set[tuple[str, str, datetime | None]] = set()
    out = []
    for f in items:
        if f.kind == "core":
            key = (normalise(f.subject), normalise(f.stmt), f.valid_to)
            if key in seen:
                continue
            seen.add(key)
        out.append(f)
    return out
