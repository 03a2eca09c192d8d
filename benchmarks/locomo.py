"""LoCoMo evidence recall: does the context a system builds within a token budget contain the
gold evidence turns? Offline, on real data, for memsif and flat baselines.

    python benchmarks/locomo.py --data ../shared/data/locomo --out results.json \
        [--systems memsif,naive_rag,bm25,hybrid_rag,recency,memsif_no_segments,memsif_no_trajectories] \
        [--budgets 500,1000,2000]

PATH is a folder of per-conversation LoCoMo files or a ``locomo10.json``. Category 5
(adversarial) is excluded; categories 4/1/2/3 are single_hop/multi_hop/temporal/knowledge; ``nce``
is the paper's Non-Contiguous Evidence subset (≥ 2 evidence turns and temporal evidence dispersion
(max pos − min pos)/(L − 1) ≥ 0.3 over the conversation's message positions). Gold ids that name
no turn of the conversation are dropped (LoCoMo has a few typos such as ``D:11:26``, which is
read as ``D11:26``).

Every system reads the same memory file per conversation (built once by ``Memory.add_many`` with
the bundled model and offline judges); each turn in a context costs the tokens of its rendered
line ``[YYYY-MM-DD] Speaker: text`` counted by one shared counter (memsif_lite.tokens). A system
adds turns in its own priority order while they fit, then the context is shown chronologically.
Systems:

* ``memsif``: exactly what ``Memory.context()`` builds offline: CoreFacts/ActiveFacts first
  (their provenance counts as present), then dated evidence from messages ranked with the
  interaction structure (hybrid message score + its Topical Segment's and Event Trajectory's
  scores; memsif_lite.retrieval.rank_with_structure), long turns cut to their relevant
  sentences, rendered with dates and resolved relative times (which cost tokens too);
* ``memsif_no_segments`` / ``memsif_no_trajectories``: the same without that level at query time
  (``Config(segment_weight=0)`` / ``Config(trajectory_weight=0)`` on the same file);
* ``hybrid_rag``: turn-level BM25 (FTS5) + dense fused by reciprocal rank fusion;
* ``naive_rag``: turn-level dense top-k (the paper's Naive RAG); ``bm25``: turn-level BM25;
* ``recency``: the latest turns that fit (the paper's truncated Full-Context).

Costs: ``ingest_turns_per_s`` counts embedding with the real model (timed once per conversation,
uncached) plus what the system stores: flat systems store messages, vectors and FTS rows;
memsif systems also build segments, trajectories and CoreFacts (timed with precomputed vectors).
``query_ms_p50/p95`` time context building only (all budgets), the question's embedding
included for every system that embeds it. ``context_digests`` holds, per budget and question, a
digest of the context's text and of the turns it holds: two runs built the same contexts when
their digests are equal. ``file_bytes_per_turn`` is the
checkpointed file size over turns (flat systems: ``benchmarks/_flat.py``, an independent store
with memsif's message tables only — messages, vectors, FTS — and no structure). ``peak_rss_mb`` is the process's
peak, shared by all systems, unless ``--rss-per-system`` runs each system alone in a subprocess.

Chat-style files (``benchmarks/chatify.py``) may give a turn ``offset_s`` (seconds since its session's
date; LoCoMo files have none) and a question ``evidence_turns`` (the pieces of each original evidence
turn): then ``turn_recall`` reports a gold turn present when any / when all of its pieces are in the
context. ``--structure`` adds per conversation the Topical Segments and Event Trajectories built.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files, machine, peak_rss_mb  # noqa: E402
from _coverage import coverage, words  # noqa: E402

CATEGORIES = {4: "single_hop", 1: "multi_hop", 2: "temporal", 3: "knowledge"}
ALL_SYSTEMS = ["memsif", "naive_rag", "bm25", "hybrid_rag", "recency", "memsif_no_segments", "memsif_no_trajectories"]
FLAT = {"naive_rag", "bm25", "hybrid_rag", "recency"}
DENSE = {"naive_rag", "hybrid_rag"}  # flat systems that embed the question
_EVID = re.compile(r"D:?(\d+):(\d+)")


def gold_ids(evidence, known: set[str]) -> list[str]:
    out = []
    for e in evidence:
        for m in _EVID.finditer(str(e)):
            d = f"D{m.group(1)}:{m.group(2)}"
            if d in known and d not in out:
                out.append(d)
    return out


class PrecomputedEmbedder:
    """Returns vectors computed beforehand (so storage/structure time is measured alone)."""

    def __init__(self, inner):
        self.inner = inner
        self.model_id, self.dim, self.metric = inner.model_id, inner.dim, inner.metric
        self.sem_levels = inner.sem_levels
        self.query_levels = getattr(inner, "query_levels", inner.sem_levels)

    def embed(self, texts, *, kind):
        return self.inner.embed(texts, kind=kind)


_QUERY_CACHE: dict[tuple[str, str], np.ndarray] = {}


def real_query(embedder, system: str, question: str) -> np.ndarray:
    """The query vector, cached per system as each memsif ``Memory`` caches its own: the first
    budget of a question pays for embedding it, in every system (before stop 20 the flat systems
    shared one cache, so a flat system run after another never paid)."""
    if (system, question) not in _QUERY_CACHE:
        _QUERY_CACHE[(system, question)] = embedder.embed([question], kind="query")[0]
    return _QUERY_CACHE[(system, question)]


def pack(order: list[str], cost: dict[str, int], budget: int) -> list[str]:
    used, chosen = 0, []
    for mid in order:
        c = cost[mid]
        if used + c <= budget:
            chosen.append(mid)
            used += c
        if budget - used < 8:
            break
    return sorted(chosen)


def nce(gold: list[str], pos: dict[str, int], n_turns: int) -> bool:
    if len(gold) < 2 or n_turns < 2:
        return False
    ps = [pos[g] for g in gold]
    return (max(ps) - min(ps)) / (n_turns - 1) >= 0.3


def run(args) -> dict:
    from _flat import FlatStore

    from memsif_lite import Config, Memory
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.importers import locomo_turns
    from memsif_lite.timeutil import to_stored
    from memsif_lite.tokens import count_tokens

    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(ALL_SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems: {sorted(unknown)}")
    budgets = [int(b) for b in args.budgets.split(",")]
    real = resolve_embedder(args.model)
    cached = CachedEmbedder(real, cache_name="locomo") if not args.no_cache else real
    knobs = apply_settings(args.set or [])
    ablation = {"memsif": Config(**knobs), "memsif_no_segments": Config(**{**knobs, "segment_weight": 0.0}),
                "memsif_no_trajectories": Config(**{**knobs, "trajectory_weight": 0.0})}
    convs = conversation_files(args.data)
    if args.convs:
        wanted = args.convs.split(",")
        convs = [(sid, s) for sid, s in convs if sid in wanted or sid.split("-")[-1] in wanted]
    totals = {s: {"turns": 0, "ingest_s": 0.0, "bytes": 0, "lat": []} for s in systems}
    # per question: (conversation, category, nce, evidence recall, answer coverage or None)
    per_q: dict[str, dict[int, list[tuple[str, str, bool, float, float | None]]]] = {
        s: {b: [] for b in budgets} for s in systems}
    # chat-style files (benchmarks/chatify.py): per question, turn-level recall (any piece, all pieces)
    per_turn: dict[str, dict[int, list[tuple[float, float]]]] = {s: {b: [] for b in budgets} for s in systems}
    # per question: a digest of the context's text and of the turns it holds (to show that a change
    # which should only make contexts faster to build leaves every one of them as it was)
    digests: dict[str, dict[int, list[str]]] = {s: {b: [] for b in budgets} for s in systems}
    structure: dict[str, dict] = {}
    n_questions = n_turns = 0
    asked: list[str] = []
    embed_s_total = 0.0
    with tempfile.TemporaryDirectory() as d:
        for sid, sample in convs:
            turns = with_offsets(sample["conversation"], list(locomo_turns(sample["conversation"])))
            n_turns += len(turns)
            texts = [f"{t['speaker']}: {t['text']}" for t in turns]
            t0 = time.perf_counter()
            if not args.no_embed_timing:
                real.embed(texts, kind="passage")  # the embedding cost, measured uncached
            embed_s = time.perf_counter() - t0
            embed_s_total += embed_s
            vecs = cached.embed(texts, kind="passage")
            line = {t["source_id"]: f"[{to_stored(t['at'])[:10]}] {t['speaker']}: {t['text']}" for t in turns}
            cost = {sid_: count_tokens(text) for sid_, text in line.items()}
            store_s: dict[str, float] = {}
            size: dict[str, int] = {}
            mems: dict[str, Memory] = {}
            flat = None
            if any(s in FLAT for s in systems):
                t0 = time.perf_counter()
                flat = FlatStore(Path(d) / f"{sid}-flat.db", real.dim)
                flat_ids = flat.add(turns, vecs, [to_stored(t["at"]) for t in turns])
                store_s["flat"] = time.perf_counter() - t0
                size["flat"] = flat.size()
                flat_src = dict(zip(flat_ids, (t["source_id"] for t in turns), strict=True))
            if any(s not in FLAT for s in systems):
                path = Path(d) / f"{sid}-memsif.db"
                t0 = time.perf_counter()
                with Memory(path, embedder=PrecomputedEmbedder(cached), config=ablation["memsif"]) as mem:
                    mem.add_many(turns)
                store_s["memsif"] = time.perf_counter() - t0
                size["memsif"] = path.stat().st_size  # closing the last connection checkpoints the WAL
                for s in systems:
                    if s not in FLAT:
                        mems[s] = Memory(path, embedder=PrecomputedEmbedder(cached), config=ablation[s])
                mem_src = {m.id: m.source_id for m in next(iter(mems.values())).messages()}
                if args.structure:
                    structure[sid] = structure_stats(next(iter(mems.values())), mem_src, sample.get("qa", []))
            known = {t["source_id"] for t in turns}
            pos = {t["source_id"]: i for i, t in enumerate(turns)}
            qas = [q for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
            for s in systems:
                variant = "flat" if s in FLAT else "memsif"
                totals[s]["turns"] += len(turns)
                totals[s]["ingest_s"] += embed_s + store_s[variant]
                totals[s]["bytes"] += size[variant]
            for q in qas:
                gold = gold_ids(q.get("evidence", []), known)
                if not gold:
                    continue
                n_questions += 1
                cat = CATEGORIES[q["category"]]
                is_nce = nce(gold, pos, len(turns))
                question = str(q["question"])
                asked.append(question)
                for s in systems:
                    for b in budgets:
                        t0 = time.perf_counter()
                        if s in FLAT:
                            assert flat is not None
                            qvec = real_query(cached, s, question) if s in DENSE else None
                            order = [flat_src[m] for m in flat.ranking(s, question, qvec)]
                            chosen = pack(order, cost, b)
                            have = set(chosen)
                            text = "\n".join(line[c] for c in chosen)
                        else:
                            ctx = mems[s].context(question, budget_tokens=b)
                            have = {mem_src[m] for m in ctx.message_ids}
                            text = ctx.text
                        totals[s]["lat"].append((time.perf_counter() - t0) * 1000)
                        rec = sum(g in have for g in gold) / len(gold)
                        per_q[s][b].append((sid, cat, is_nce, rec, coverage(q.get("answer", ""), words(text))))
                        digests[s][b].append(hashlib.sha1(
                            f"{text}\0{sorted(have)}".encode()).hexdigest()[:16])
                        if "evidence_turns" in q:
                            per_turn[s][b].append(turn_recall(q["evidence_turns"], known, have))
            for m in mems.values():
                m.close()
            if flat is not None:
                flat.close()
            print(f"conversation {sid}: {len(turns)} turns, {len(qas)} questions", file=sys.stderr)
    if cached is not real:
        cached.save()
    out: dict = {"data": {"conversations": len(convs), "questions": n_questions, "turns": n_turns},
                 "systems": {}, "budgets": budgets, "date": date.today().isoformat(), "machine": machine(),
                 "embedding_model": real.model_id,
                 "embedding_turns_per_s": None if args.no_embed_timing else round(n_turns / embed_s_total, 1),
                 "peak_rss_mb": round(peak_rss_mb(), 1)}
    out["questions"] = ([[sid, c, n, text] for (sid, c, n, _, _), text in zip(per_q[systems[0]][budgets[0]], asked,
                                                                             strict=True)] if systems else [])
    for s in systems:
        lat = totals[s]["lat"]
        out["systems"][s] = {
            **summarise(per_q[s], budgets),
            "per_question": {str(b): [[r, c] for _, _, _, r, c in per_q[s][b]] for b in budgets},
            "context_digests": {str(b): digests[s][b] for b in budgets},
            "ingest_turns_per_s": round(totals[s]["turns"] / totals[s]["ingest_s"], 1),
            "query_ms_p50": round(float(np.percentile(lat, 50)), 2) if lat else None,
            "query_ms_p95": round(float(np.percentile(lat, 95)), 2) if lat else None,
            "file_bytes_per_turn": round(totals[s]["bytes"] / totals[s]["turns"], 1),
        }
        if per_turn[s][budgets[0]] and len(per_turn[s][budgets[0]]) == len(per_q[s][budgets[0]]):
            out["systems"][s]["turn_recall"] = turn_summary(per_q[s], per_turn[s], budgets)
    if structure:
        out["structure"] = structure
    out["settings"] = knobs_shown(args.set or [])
    return out


SUBSETS = ("all", *CATEGORIES.values(), "nce")


def with_offsets(conversation: dict, turns: list[dict]) -> list[dict]:
    """Per-message times for chat-style files: a turn's optional ``offset_s`` (seconds since its
    session's date) replaces the importer's one-minute spacing. LoCoMo files have none: unchanged."""
    from datetime import timedelta

    from memsif_lite.timeutil import parse_locomo_date

    offsets = {t.get("dia_id"): t["offset_s"] for k, v in conversation.items() if k.startswith("session_")
               and isinstance(v, list) for t in v if isinstance(t, dict) and "offset_s" in t}
    if not offsets:
        return turns
    for t in turns:
        date = conversation.get(f"session_{t['session']}_date_time")
        if t["source_id"] in offsets and date:
            t["at"] = parse_locomo_date(date) + timedelta(seconds=float(offsets[t["source_id"]]))
    return turns


def turn_recall(groups: list[list[str]], known: set[str], have: set[str]) -> tuple[float, float]:
    """Evidence recall over original turns split into pieces: a gold turn is present when any
    of its pieces is in the context, and (the second figure, which crumbs cannot game) when all are."""
    gs = [[p for p in g if p in known] for g in groups]
    gs = [g for g in gs if g]
    if not gs:
        return 0.0, 0.0
    return (sum(any(p in have for p in g) for g in gs) / len(gs), sum(all(p in have for p in g) for g in gs) / len(gs))


def turn_summary(rows_by_budget: dict, turn_by_budget: dict, budgets: list[int]) -> dict:
    """Turn-level recall ("any piece" / "all pieces") per budget and subset, with per-question values."""
    out: dict = {}
    for i, name in enumerate(("any_piece", "all_pieces")):
        rows = {b: [(*r[:3], t[i], r[4]) for r, t in zip(rows_by_budget[b], turn_by_budget[b], strict=True)]
                for b in budgets}
        out[name] = summarise(rows, budgets)["recall"]
    out["per_question"] = {str(b): [list(t) for t in turn_by_budget[b]] for b in budgets}
    return out


def structure_stats(mem, mem_src: dict[int, str | None], qa: list[dict]) -> dict:
    """How the interaction structure came out: messages per Topical Segment, Event Trajectories,
    and for chat-style files the share of split evidence turns whose pieces land in more than one segment."""
    segs = mem.segments()
    trajs = mem.trajectories()
    sizes = [len(s.message_ids) for s in segs]
    seg_of = {mem_src.get(m): s.id for s in segs for m in s.message_ids}
    split = [g for q in qa for g in q.get("evidence_turns", []) if len(g) > 1 and all(p in seg_of for p in g)]
    return {"messages": sum(sizes), "segments": len(segs), "trajectories": len(trajs),
            "messages_per_segment_mean": round(float(np.mean(sizes)), 2) if sizes else None,
            "messages_per_segment_median": float(np.median(sizes)) if sizes else None,
            "single_message_segments": round(sum(n == 1 for n in sizes) / len(sizes), 3) if sizes else None,
            "segments_per_trajectory": round(len(segs) / len(trajs), 2) if trajs else None,
            "split_evidence_turns": len(split),
            "split_evidence_turns_across_segments": round(
                sum(len({seg_of[p] for p in g}) > 1 for g in split) / len(split), 3) if split else None}


def _mean(vals: list[float]) -> float | None:
    return round(float(np.mean(vals)), 4) if vals else None


def summarise(rows_by_budget: dict, budgets: list[int], keep=lambda sid: True) -> dict:
    """Evidence recall, answer coverage and the share of fully covered questions per budget and
    subset; ``rows`` are (conversation, category, nce, recall, coverage) per question."""
    out: dict = {"recall": {}, "coverage": {}, "fully_covered": {}}
    for b in budgets:
        rows = [r for r in rows_by_budget[b] if keep(r[0])]
        for key in out:
            out[key][str(b)] = {}
        for sub in SUBSETS:
            sel = [r for r in rows if sub == "all" or r[1] == sub or (sub == "nce" and r[2])]
            cov = [r[4] for r in sel if r[4] is not None]
            out["recall"][str(b)][sub] = _mean([r[3] for r in sel])
            out["coverage"][str(b)][sub] = _mean(cov)
            out["fully_covered"][str(b)][sub] = _mean([float(c >= 1.0) for c in cov])
    return out


def rows_of(res: dict, system: str) -> dict[int, list[tuple]]:
    """A result file's per-question rows of one system (see :func:`summarise`)."""
    q = res["questions"]
    pq = res["systems"][system]["per_question"]
    return {int(b): [(sid, c, n, r, cv) for (sid, c, n, *_), (r, cv) in zip(q, pq[b], strict=True)] for b in pq}


def apply_settings(settings: list[str]) -> dict:
    """``NAME=VALUE`` knobs for the memsif systems: a ``Config`` field (returned, passed to
    Config) or ``module.CONSTANT`` of memsif_lite (set in this process, e.g. query.MAX_FACTS)."""
    import dataclasses
    import importlib

    from memsif_lite import Config

    fields = {f.name for f in dataclasses.fields(Config)}
    knobs: dict = {}
    for item in settings:
        name, _, raw = item.partition("=")
        value = json.loads(raw) if raw not in ("", None) else None
        if name in fields:
            knobs[name] = value
            continue
        mod, _, const = name.rpartition(".")
        module = importlib.import_module(f"memsif_lite.{mod}")
        if not mod or not hasattr(module, const):
            raise SystemExit(f"unknown setting {name!r}")
        setattr(module, const, value)
    return knobs


def knobs_shown(settings: list[str]) -> dict:
    return {k: json.loads(v) for k, _, v in (s.partition("=") for s in settings)}


JUDGE_SYSTEM = (
    "You grade an answer to a question about a conversation against the gold answer. Be generous with "
    "wording and format (a date in another format, a paraphrase, extra detail) but strict with facts. "
    'Reply with one JSON object: {"correct": true|false}'
)


def _verdict(obj: dict) -> bool:
    from memsif_lite.llm import ReplyError

    if not isinstance(obj.get("correct"), bool):
        raise ReplyError("'correct' must be true or false")
    return bool(obj["correct"])


def accuracy(args) -> dict:
    """Answer accuracy of memsif with an LLM, the online query-state protocol: per conversation,
    ingest with the LLM judges, then ask every question in a seeded shuffled order (clusters and
    ActiveFacts accumulate across questions); an LLM judge compares with the gold answer."""
    import random

    from memsif_lite import Memory
    from memsif_lite.importers import locomo_turns
    from memsif_lite.llm import LLM, Prompt

    kwargs = {"api_base": args.api_base} if args.api_base else {}
    judge = LLM(args.judge or args.llm, kwargs=kwargs)
    per_cat: dict[str, list[bool]] = {}
    tokens, calls_q, calls_ingest, turns_total = [], [], 0, 0
    with tempfile.TemporaryDirectory() as d:
        for sid, sample in conversation_files(args.data):
            turns = list(locomo_turns(sample["conversation"]))
            turns_total += len(turns)
            with Memory(Path(d) / f"{sid}-llm.db", llm=args.llm, llm_kwargs=kwargs or None) as mem:
                mem.add_many(turns)
                calls_ingest += mem.stats()["llm_calls"]
                qs = [q for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
                random.Random(args.seed).shuffle(qs)
                for q in qs:
                    a = mem.ask(str(q["question"]), budget_tokens=2000, now=turns[-1].get("at"))
                    tokens.append(a.tokens_in + a.tokens_out)
                    calls_q.append(a.llm_calls)
                    user = json.dumps({"question": q["question"], "gold_answer": str(q.get("answer")),
                                       "answer": a.text}, ensure_ascii=False)
                    ok = judge.complete(Prompt("judge", JUDGE_SYSTEM, user, _verdict, 20))
                    per_cat.setdefault(CATEGORIES[q["category"]], []).append(bool(ok))
    allv = [v for vs in per_cat.values() for v in vs]
    return {"model": args.llm, "judge": args.judge or args.llm,
            "accuracy": {"all": round(float(np.mean(allv)), 4) if allv else None,
                         **{k: round(float(np.mean(v)), 4) for k, v in per_cat.items()}},
            "tokens_per_question": round(float(np.mean(tokens)), 1) if tokens else None,
            "llm_calls_per_question": round(float(np.mean(calls_q)), 2) if calls_q else None,
            "llm_calls_per_ingested_turn": round(calls_ingest / max(turns_total, 1), 3)}


def table(res: dict) -> str:
    """Evidence recall (with costs), then answer coverage / fully covered, per system."""
    budgets = res["budgets"]
    mid = str(budgets[len(budgets) // 2])
    cats = ("single_hop", "multi_hop", "temporal", "knowledge", "nce")

    def f(v):
        return f"{v:.3f}" if v is not None else "–"

    lines = ["| system | " + " | ".join(f"all@{b}" for b in budgets) + " | " + " | ".join(f"{c}@{mid}" for c in cats)
             + " | ingest turns/s | query ms p50/p95 | bytes/turn |", "|---" * (len(budgets) + 9) + "|"]
    for name, s in res["systems"].items():
        r = s["recall"]
        lines.append(f"| {name} | " + " | ".join(f(r[str(b)]["all"]) for b in budgets) + " | " +
                     " | ".join(f(r[mid][c]) for c in cats) +
                     f" | {s['ingest_turns_per_s']} | {s['query_ms_p50']}/{s['query_ms_p95']}"
                     f" | {s['file_bytes_per_turn']:.0f} |")
    lines += ["", "answer coverage (fully covered)",
              "| system | " + " | ".join(f"all@{b}" for b in budgets) + " | " + " | ".join(f"{c}@{mid}" for c in cats)
              + " |", "|---" * (len(budgets) + 6) + "|"]
    for name, s in res["systems"].items():
        cv, fc = s["coverage"], s["fully_covered"]
        lines.append(f"| {name} | " + " | ".join(f"{f(cv[str(b)]['all'])} ({f(fc[str(b)]['all'])})" for b in budgets)
                     + " | " + " | ".join(f"{f(cv[mid][c])} ({f(fc[mid][c])})" for c in cats) + " |")
    if any("turn_recall" in s for s in res["systems"].values()):
        lines += ["", "turn-level evidence recall, chat-style pieces: any piece / all pieces in the context",
                  "| system | " + " | ".join(f"all@{b}" for b in budgets) + " | "
                  + " | ".join(f"{c}@{mid}" for c in cats) + " |", "|---" * (len(budgets) + 6) + "|"]
        for name, s in res["systems"].items():
            if "turn_recall" in s:
                a, z = s["turn_recall"]["any_piece"], s["turn_recall"]["all_pieces"]
                lines.append(f"| {name} | " + " | ".join(f"{f(a[str(b)]['all'])} / {f(z[str(b)]['all'])}"
                                                        for b in budgets)
                             + " | " + " | ".join(f"{f(a[mid][c])} / {f(z[mid][c])}" for c in cats) + " |")
    if res.get("structure"):
        keys = list(next(iter(res["structure"].values())))
        lines += ["", "interaction structure", "| conversation | " + " | ".join(keys) + " |",
                  "|---" * (len(keys) + 1) + "|"]
        lines += [f"| {sid} | " + " | ".join(str(v) for v in st.values()) + " |"
                  for sid, st in res["structure"].items()]
    return "\n".join(lines)


def plot(res: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install '.[bench]'): no PNG", file=sys.stderr)
        return False
    budgets = res["budgets"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, s in res["systems"].items():
        ax.plot(budgets, [s["recall"][str(b)]["all"] for b in budgets], marker="o", label=name)
    ax.set_xlabel("context budget (tokens)")
    ax.set_ylabel("evidence recall (all questions)")
    ax.set_title(f"LoCoMo evidence recall ({res['data']['conversations']} conversations, "
                 f"{res['data']['questions']} questions)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--systems", default=",".join(ALL_SYSTEMS))
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument("--model", default=None, help="a bundled embedding model id (default: the default model)")
    ap.add_argument("--convs", default=None, help="only these conversations (comma-separated sample ids)")
    ap.add_argument("--set", action="append", metavar="NAME=VALUE",
                    help="a memsif knob: a Config field or memsif_lite module.CONSTANT (JSON value); repeatable")
    ap.add_argument("--no-cache", action="store_true", help="do not use the on-disk vector cache")
    ap.add_argument("--no-embed-timing", action="store_true",
                    help="do not time the embedding uncached (faster; ingest turns/s then leave embedding out)")
    ap.add_argument("--llm", default=None, help="litellm model: also measure answer accuracy with memsif + this LLM")
    ap.add_argument("--judge", default=None, help="litellm model of the answer judge (default: --llm)")
    ap.add_argument("--api-base", default=None, help="base URL for --llm/--judge (vLLM, Ollama, ...)")
    ap.add_argument("--seed", type=int, default=0, help="question order of the online query-state protocol")
    ap.add_argument("--structure", action="store_true",
                    help="also report the interaction structure per conversation (segments, trajectories)")
    ap.add_argument("--rss-per-system", action="store_true",
                    help="also run each system alone in a subprocess to report its own peak RSS")
    args = ap.parse_args()
    t0 = time.perf_counter()
    res = run(args)
    for sysres in res["systems"].values():
        sysres["peak_rss_mb"] = res["peak_rss_mb"]  # the shared process's peak ...
    if args.rss_per_system:  # ... or each system's own, measured alone
        import subprocess

        with tempfile.TemporaryDirectory() as d:
            for name in res["systems"]:
                out = Path(d) / f"{name}.json"
                subprocess.run([sys.executable, __file__, "--data", args.data, "--out", str(out), "--systems", name,
                                "--budgets", args.budgets] + (["--no-cache"] if args.no_cache else [])
                               + (["--convs", args.convs] if args.convs else [])
                               + [f"--set={x}" for x in (args.set or [])],
                               check=True, capture_output=True)
                res["systems"][name]["peak_rss_mb"] = json.loads(out.read_text())["peak_rss_mb"]
        res["peak_rss_per_system"] = True
    if args.llm:
        res["answer_accuracy"] = accuracy(args)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.write_text(json.dumps(res, indent=2))
    print(table(res))
    if plot(res, out.with_suffix(".png")):
        print(f"\nwrote {out} and {out.with_suffix('.png')} in {res['wall_s']}s")


if __name__ == "__main__":
    main()
