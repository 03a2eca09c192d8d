"""Offline answer quality on LoCoMo: the extractive answer ``Memory.ask`` gives without an LLM,
scored against the gold answer.

    python benchmarks/offline_answers.py --data ../shared/data/locomo --out answers.json \
        [--budget 2000] [--seed 0] [--convs 26,30] [--splits]

Per conversation the memory is built once (``Memory.add_many``, offline, passage vectors from
the shared cache), then reopened with the real model and every question is asked in a seeded
shuffled order (the online query-state protocol of ``replay.py``: candidate clusters and
ActiveFacts accumulate). Category 5 (adversarial: the question names the wrong person, or asks
something never said) is asked too and scored apart. Figures per question (categories 1–4):

* ``coverage``: the share of the gold answer's content words (``_coverage.words``: stop words
  dropped, months and ISO dates normalised) present in the answer; ``full``: all of them;
* ``f1``: token F1 of the answer's content words against the gold's (set overlap; precision
  punishes a long answer, so quoting more does not pay);
* ``dont_know``: the share answered "I don't know".

Category 5: ``abstained`` (answered "I don't know"; the expected answer) and ``adversarial``
(the share of the adversarial answer's words in the answer: quoting what another person said
about their own thing). Latency: ``answer_ms`` (the answer step alone), ``active_facts_ms``
(feeding the evidence to the ActiveFact track) and ``ask_ms`` (the whole ``ask``), p50 / p95.
``--splits``: every 3-of-5 split of the conversations (as ``splits.py``), the figures on the
held-out two.

Choosing the answer rule's settings (``memsif_lite.answers`` constants) by cross-validation:

    python benchmarks/offline_answers.py --data ../shared/data/locomo --out grid.json \
        --grid WORD_WEIGHT=0.05,0.1,0.2 --grid KIND_WEIGHT=0,0.05,0.1 ...

answers every question again under each combination, from the same context (the benchmark's own
cosines: the real model, float vectors), and for every 3-of-5 split chooses the combination with
the best mean of coverage and token F1 on the 3 development conversations and reports it on the
other 2. ``MEANING_ALONE`` (the cosine at which a sentence sharing no question word may answer)
cannot be chosen that way (on answerable questions a lower bar never loses coverage), so it is
measured: per split, the lowest cosine from which such sentences (of the best-ranked evidence
messages) hold the gold answer at least as often as sentences sharing a question word do, on the
development conversations.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files, machine  # noqa: E402
from _coverage import words  # noqa: E402

CATEGORIES = {4: "single_hop", 1: "multi_hop", 2: "temporal", 3: "knowledge", 5: "adversarial"}


def f1(answer: str, gold: str) -> float | None:
    """Token F1 of the answer's content words against the gold answer's (None: no gold word)."""
    g, a = words(gold), words(answer)
    if not g:
        return None
    hit = len(g & a)
    if not hit:
        return 0.0
    p, r = hit / len(a), hit / len(g)
    return 2 * p * r / (p + r)


def score(text: str, q: dict, dont_know: str) -> dict:
    """The figures of one answer (module docstring)."""
    if q["category"] == 5:
        adv = words(str(q.get("adversarial_answer", "")))
        return {"abstained": float(text == dont_know),
                "adversarial": (len(adv & words(text)) / len(adv)) if adv else None}
    gold = words(str(q.get("answer", "")))
    cov = (len(gold & words(text)) / len(gold)) if gold else None
    return {"coverage": cov, "full": None if cov is None else float(cov >= 1.0),
            "f1": f1(text, str(q.get("answer", ""))), "dont_know": float(text == dont_know)}


def _mean(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(float(np.mean(xs)), 4) if xs else None


def summarise(rows: list[dict]) -> dict:
    """Means per category (and "answerable": categories 1–4) of the per-question figures."""
    out: dict = {}
    groups = {"answerable": [r for r in rows if r["category"] != 5],
              **{name: [r for r in rows if r["category"] == c] for c, name in CATEGORIES.items()}}
    for name, sel in groups.items():
        if not sel:
            continue
        keys = ("abstained", "adversarial") if name == "adversarial" else ("coverage", "full", "f1", "dont_know")
        out[name] = {"n": len(sel), **{k: _mean([r["scores"][k] for r in sel]) for k in keys}}
    return out


class BenchMeaning:
    """Cosines of ``Speaker: sentence`` passages to a question, as the query pipeline computes
    them (the real model; float vectors, kept in memory for the whole run)."""

    def __init__(self, embedder):
        self.embedder = embedder
        self.vecs: dict[str, np.ndarray] = {}

    def vectors(self, texts: list[str]) -> np.ndarray:
        miss = [t for t in dict.fromkeys(texts) if t not in self.vecs]
        if miss:
            self.vecs.update(zip(miss, self.embedder.embed(miss, kind="passage"), strict=True))
        return np.stack([self.vecs[t] for t in texts]) if texts else np.zeros((0, self.embedder.dim), np.float32)

    def of(self, question: str):
        from memsif_lite.embed import passage

        qvec = self.embedder.embed([question], kind="query")[0]
        return lambda said: [float(x) for x in self.vectors([passage(s, t) for s, t in said]) @ qvec]


def variants_of(specs: list[str]) -> list[dict]:
    """``NAME=v1,v2`` specs → every combination, as {NAME: value} dicts."""
    names, values = [], []
    for spec in specs:
        name, _, raw = spec.partition("=")
        names.append(name)
        values.append([json.loads(v) for v in raw.split(",")])
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def answer_as(variant: dict, question: str, a, meaning) -> str:
    """The extractive answer to ``question`` from ``a``'s context under the settings ``variant``."""
    from memsif_lite import answers

    saved = {k: getattr(answers, k) for k in variant}
    try:
        for k, v in variant.items():
            setattr(answers, k, v)
        return answers.offline_answer(question, a.facts, a.evidence, a.sufficient, meaning)
    finally:
        for k, v in saved.items():
            setattr(answers, k, v)


_SENT = re.compile(r"(?<=[.!?])\s+")


def meaning_points(question: str, q: dict, a, meaning, top: int) -> list[list]:
    """(cosine, shares a question word, holds the gold answer) of each sentence of the ``top``
    best-ranked evidence messages that may answer: not a question, more than a name (for choosing
    ``MEANING_ALONE``)."""
    from memsif_lite.answers import content_words, stem

    names = {stem(w.strip("?,.!")) for w in question.split()[1:] if w[:1].isupper()}
    qwords = content_words(question) - names
    gold = words(str(q.get("answer", "")))
    said = [(e.speaker, x.strip()) for e in a.evidence[:top] for x in _SENT.split(e.stmt.removesuffix(" …"))
            if x.strip() and not x.strip().endswith("?") and content_words(x) - names]  # as answers may
    if not gold or not said:
        return []
    cos = meaning(said)
    return [[round(c, 4), bool(content_words(t) & qwords), len(gold & words(t)) / len(gold) >= 0.5]
            for (_, t), c in zip(said, cos, strict=True)]


def crossing(points: list[list]) -> float | None:
    """The lowest cosine from which sentences sharing no question word hold the answer at least as
    often as sentences sharing one (None: never)."""
    hit = [h for _, shares, h in points if shares]
    if not hit:
        return None
    base = sum(hit) / len(hit)
    alone = sorted(((c, h) for c, shares, h in points if not shares), reverse=True)
    best, n, k = None, 0, 0
    for c, h in alone:  # from the highest cosine down, the precision of everything at or above c
        n, k = n + 1, k + h
        if k / n >= base and n >= 5:
            best = c
    return best


def run(args) -> dict:
    from memsif_lite import Memory
    from memsif_lite.answers import DONT_KNOW
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.importers import locomo_turns

    real = resolve_embedder(None)
    cached = CachedEmbedder(real, cache_name="locomo") if not args.no_cache else real
    convs = conversation_files(args.data)
    if args.convs:
        wanted = args.convs.split(",")
        convs = [(sid, s) for sid, s in convs if sid in wanted or sid.split("-")[-1] in wanted]
    variants = variants_of(args.grid) if args.grid else []
    meaning = BenchMeaning(real) if variants else None
    rows: list[dict] = []
    answer_ms: list[float] = []
    active_ms: list[float] = []
    ask_ms: list[float] = []
    with tempfile.TemporaryDirectory() as d:
        for sid, sample in convs:
            path = Path(d) / f"{sid}.db"
            with Memory(path, embedder=cached) as mem:
                mem.add_many(list(locomo_turns(sample["conversation"])))
            qs = [q for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
            random.Random(args.seed).shuffle(qs)
            with Memory(path, embedder=real) as mem:  # the questions pay for every vector they need
                for q in qs:
                    t0 = time.perf_counter()
                    a = mem.ask(str(q["question"]), budget_tokens=args.budget)
                    ask_ms.append((time.perf_counter() - t0) * 1000)
                    answer_ms.append(float(a.timings_ms.get("answer", 0.0)))
                    active_ms.append(float(a.timings_ms.get("active_facts", 0.0)))
                    rows.append({"conversation": sid, "category": q["category"], "question": q["question"],
                                 "gold": str(q.get("answer", q.get("adversarial_answer", ""))), "answer": a.text,
                                 "scores": score(a.text, q, DONT_KNOW)})
                    if args.contexts:
                        rows[-1]["context"] = context_of(a)
                    if meaning is not None:
                        m = meaning.of(str(q["question"]))
                        rows[-1]["variants"] = [score(answer_as(v, str(q["question"]), a, m), q, DONT_KNOW)
                                                for v in variants]
                        if q["category"] != 5:
                            rows[-1]["meaning_points"] = meaning_points(str(q["question"]), q, a, m, args.points_top)
            print(f"conversation {sid}: {len(qs)} questions", file=sys.stderr)
    if cached is not real:
        cached.save()
    out = {"date": date.today().isoformat(), "machine": machine(), "budget": args.budget, "seed": args.seed,
           "conversations": [sid for sid, _ in convs], "all": summarise(rows),
           "per_conversation": {sid: summarise([r for r in rows if r["conversation"] == sid]) for sid, _ in convs},
           "answer_ms_p50": round(float(np.percentile(answer_ms, 50)), 2),
           "answer_ms_p95": round(float(np.percentile(answer_ms, 95)), 2),
           "active_facts_ms_p50": round(float(np.percentile(active_ms, 50)), 2),
           "active_facts_ms_p95": round(float(np.percentile(active_ms, 95)), 2),
           "ask_ms_p50": round(float(np.percentile(ask_ms, 50)), 2),
           "ask_ms_p95": round(float(np.percentile(ask_ms, 95)), 2),
           "questions": rows}
    if args.splits:
        out["splits"] = held_out(rows, [sid for sid, _ in convs])
    if variants:
        out["variants"] = variants
        out["cross_validation"] = choose(rows, variants, [sid for sid, _ in convs])
    return out


def choose(rows: list[dict], variants: list[dict], convs: list[str], dev: int = 3) -> dict:
    """Per split: the variant with the best development mean of coverage and token F1, its held-out
    figures, and ``MEANING_ALONE`` measured on the development conversations (:func:`crossing`)."""
    def fig(i: int, keep: list[str]) -> dict:
        return summarise([{**r, "scores": r["variants"][i]} for r in rows if r["conversation"] in keep])

    def objective(f: dict) -> float:
        return ((f["answerable"]["coverage"] or 0.0) + (f["answerable"]["f1"] or 0.0)) / 2

    splits = []
    for d in itertools.combinations(convs, dev):
        held = [c for c in convs if c not in d]
        best = max(range(len(variants)), key=lambda i: (objective(fig(i, list(d))), -i))
        f = fig(best, held)
        splits.append({"dev": list(d), "held_out": held, "chosen": variants[best],
                       "meaning_alone": crossing([p for r in rows if r["conversation"] in d
                                                  for p in r.get("meaning_points", [])]),
                       "answerable": f["answerable"], "adversarial": f.get("adversarial")})
    keys = ("coverage", "full", "f1", "dont_know")
    mean = {k: _mean([s["answerable"][k] for s in splits]) for k in keys}
    mean.update({f"adversarial_{k}": _mean([(s["adversarial"] or {}).get(k) for s in splits])
                 for k in ("abstained", "adversarial")})
    every = [{"variant": v, **summarise([{**r, "scores": r["variants"][i]} for r in rows])}
             for i, v in enumerate(variants)]
    return {"splits": splits, "mean_held_out": mean,
            "meaning_alone_all": crossing([p for r in rows for p in r.get("meaning_points", [])]), "all": every}


def context_of(a) -> dict:
    """What the answer was chosen from (``--contexts``), in rank order."""
    return {"sufficient": a.sufficient,
            "facts": [{"subject": f.subject, "stmt": f.stmt, "score": round(f.score, 4), "kind": f.kind,
                       "valid_from": f.valid_from.isoformat() if f.valid_from else None,
                       "valid_to": f.valid_to.isoformat() if f.valid_to else None, "message_ids": list(f.message_ids)}
                      for f in a.facts],
            "evidence": [{"speaker": e.speaker, "stmt": e.stmt, "at": e.at.isoformat(),
                          "message_ids": list(e.message_ids), "utc_offset_min": e.utc_offset_min} for e in a.evidence]}


def held_out(rows: list[dict], convs: list[str], dev: int = 3) -> dict:
    """The figures on the held-out conversations of every ``dev``-of-N split, and their mean."""
    splits = []
    for d in itertools.combinations(convs, dev):
        held = [c for c in convs if c not in d]
        splits.append({"held_out": held, **summarise([r for r in rows if r["conversation"] in held])})
    keys = {"answerable": ("coverage", "full", "f1", "dont_know"), "adversarial": ("abstained", "adversarial")}
    mean = {g: {k: _mean([s[g][k] for s in splits if g in s]) for k in ks} for g, ks in keys.items()}
    return {"splits": splits, "mean_held_out": mean}


def table(res: dict) -> str:
    def f(v):
        return f"{v:.3f}" if isinstance(v, float) else "–"

    lines = ["| subset | n | coverage | fully covered | token F1 | I don't know |", "|---|---|---|---|---|---|"]
    for name, s in res["all"].items():
        if name != "adversarial":
            lines.append(f"| {name} | {s['n']} | {f(s['coverage'])} | {f(s['full'])} | {f(s['f1'])} "
                         f"| {f(s['dont_know'])} |")
    adv = res["all"].get("adversarial")
    if adv:
        lines += ["", f"adversarial (category 5, n={adv['n']}): abstained {f(adv['abstained'])}, "
                      f"adversarial answer's words quoted {f(adv['adversarial'])}"]
    lines += ["", "| conversation | coverage | token F1 | abstained (cat. 5) |", "|---|---|---|---|"]
    for sid, s in res["per_conversation"].items():
        lines.append(f"| {sid} | {f(s['answerable']['coverage'])} | {f(s['answerable']['f1'])} "
                     f"| {f(s.get('adversarial', {}).get('abstained'))} |")
    lines.append(f"\nanswer ms p50/p95 {res['answer_ms_p50']}/{res['answer_ms_p95']}; ActiveFact accumulation ms "
                 f"p50/p95 {res['active_facts_ms_p50']}/{res['active_facts_ms_p95']}; "
                 f"ask ms p50/p95 {res['ask_ms_p50']}/{res['ask_ms_p95']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=int, default=2000, help="the context budget of each ask (ask's default)")
    ap.add_argument("--seed", type=int, default=0, help="question order of the online query-state protocol")
    ap.add_argument("--convs", default=None, help="only these conversations (comma-separated sample ids)")
    ap.add_argument("--splits", action="store_true", help="also the held-out figures of every 3-of-N split")
    ap.add_argument("--contexts", action="store_true", help="also store each answer's facts and evidence")
    ap.add_argument("--no-cache", action="store_true", help="do not use the on-disk vector cache")
    ap.add_argument("--grid", action="append", metavar="NAME=V1,V2",
                    help="a memsif_lite.answers constant and its values to cross-validate (repeatable)")
    ap.add_argument("--points-top", type=int, default=2,
                    help="evidence messages whose sentences measure MEANING_ALONE (default 2: MEANING_TOP)")
    args = ap.parse_args()
    res = run(args)
    Path(args.out).write_text(json.dumps(res, indent=2, ensure_ascii=False))
    print(table(res))
    if "cross_validation" in res:
        cv = res["cross_validation"]
        print("\n| held-out | chosen | MEANING_ALONE measured | coverage | token F1 | I don't know |")
        print("|---|---|---|---|---|---|")
        for sp in cv["splits"]:
            a = sp["answerable"]
            print(f"| {','.join(sp['held_out'])} | {sp['chosen']} | {sp['meaning_alone']} | {a['coverage']:.3f} "
                  f"| {a['f1']:.3f} | {a['dont_know']:.3f} |")
        print(f"mean held-out: {cv['mean_held_out']}; MEANING_ALONE on all: {cv['meaning_alone_all']}")


if __name__ == "__main__":
    main()
