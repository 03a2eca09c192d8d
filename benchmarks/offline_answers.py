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
about their own thing). Latency: ``answer_ms`` (the answer step alone) and ``ask_ms`` (the whole
``ask``), p50 / p95. ``--splits``: every 3-of-5 split of the conversations (as ``splits.py``),
the figures on the held-out two.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
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


def run(args) -> dict:
    from memsif_lite import Memory
    from memsif_lite.answers import DONT_KNOW
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.importers import locomo_turns

    real = resolve_embedder(None)
    cached = CachedEmbedder(real, cache_name="locomo")
    convs = conversation_files(args.data)
    if args.convs:
        wanted = args.convs.split(",")
        convs = [(sid, s) for sid, s in convs if sid in wanted or sid.split("-")[-1] in wanted]
    rows: list[dict] = []
    answer_ms: list[float] = []
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
                    rows.append({"conversation": sid, "category": q["category"], "question": q["question"],
                                 "gold": str(q.get("answer", q.get("adversarial_answer", ""))), "answer": a.text,
                                 "scores": score(a.text, q, DONT_KNOW)})
                    if args.contexts:
                        rows[-1]["context"] = context_of(a)
            print(f"conversation {sid}: {len(qs)} questions", file=sys.stderr)
    cached.save()
    out = {"date": date.today().isoformat(), "machine": machine(), "budget": args.budget, "seed": args.seed,
           "conversations": [sid for sid, _ in convs], "all": summarise(rows),
           "per_conversation": {sid: summarise([r for r in rows if r["conversation"] == sid]) for sid, _ in convs},
           "answer_ms_p50": round(float(np.percentile(answer_ms, 50)), 2),
           "answer_ms_p95": round(float(np.percentile(answer_ms, 95)), 2),
           "ask_ms_p50": round(float(np.percentile(ask_ms, 50)), 2),
           "ask_ms_p95": round(float(np.percentile(ask_ms, 95)), 2),
           "questions": rows}
    if args.splits:
        out["splits"] = held_out(rows, [sid for sid, _ in convs])
    return out


def context_of(a) -> dict:
    """What the answer was chosen from (``--contexts``), in rank order."""
    return {"sufficient": a.sufficient,
            "facts": [{"subject": f.subject, "stmt": f.stmt, "score": round(f.score, 4), "kind": f.kind,
                       "valid_from": f.valid_from.isoformat() if f.valid_from else None,
                       "valid_to": f.valid_to.isoformat() if f.valid_to else None, "message_ids": list(f.message_ids)}
                      for f in a.facts],
            "evidence": [{"speaker": e.speaker, "stmt": e.stmt, "at": e.at.isoformat(), "message_ids": list(e.message_ids),
                          "utc_offset_min": e.utc_offset_min} for e in a.evidence]}


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
    lines.append(f"\nanswer ms p50/p95 {res['answer_ms_p50']}/{res['answer_ms_p95']}; "
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
    args = ap.parse_args()
    res = run(args)
    Path(args.out).write_text(json.dumps(res, indent=2, ensure_ascii=False))
    print(table(res))


if __name__ == "__main__":
    main()
