"""Choose settings on 3 conversations, report them on the other 2 (every 3-of-N split).

    python benchmarks/locomo.py --data ../shared/data/locomo --out a.json                  # defaults
    python benchmarks/locomo.py --data ../shared/data/locomo --out b.json --set query.X=1  # a variant
    python benchmarks/splits.py a.json b.json [--budget 1000] [--system memsif] [--out splits.json] [--effects]

Each result file is one variant of the memsif settings (``--set`` of locomo.py; all files must
cover the same questions). For every split of the conversations into 3 "development" and the
rest "held-out", the variant with the best development score (mean of evidence recall and answer
coverage over all questions at ``--budget``) is chosen, and its held-out figures are reported
next to the flat systems' on the same held-out questions (flat systems do not depend on the
variant: they are read from the first file that has them). The last rows average the held-out figures over
all splits; "all" rows are the figures on every conversation.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo import FLAT, rows_of, summarise  # noqa: E402

#: a question about a state over time (issue 26): the subset ``--questions change`` reports
CHANGE = re.compile(r"\b(still|now|any ?more|used? to|since when|no longer|currently|these days|nowadays|"
                    r"chang(e|ed|es)|switch(ed)?|before|at first|originally|lately|recently|instead)\b", re.I)

SHOW = (("recall", "all"), ("recall", "multi_hop"), ("recall", "temporal"), ("recall", "nce"),
        ("coverage", "all"), ("fully_covered", "all"), ("coverage", "multi_hop"), ("coverage", "temporal"))


def figures(res: dict, system: str, budget: int, keep) -> dict:
    s = summarise(rows_of(res, system), [budget], keep)
    return {f"{m}.{sub}": s[m][str(budget)][sub] for m, sub in SHOW}


def restrict(res: dict, keep) -> dict:
    """A result file with only the questions whose text ``keep`` accepts."""
    if any(len(q) < 4 for q in res["questions"]):
        raise SystemExit("a result file without question texts: rerun it with the current benchmarks/locomo.py")
    mask = [bool(keep(q[3])) for q in res["questions"]]
    out = dict(res, questions=[q for q, k in zip(res["questions"], mask, strict=True) if k], systems={})
    for name, sysres in res["systems"].items():
        pq = {b: [row for row, k in zip(rows, mask, strict=True) if k] for b, rows in sysres["per_question"].items()}
        out["systems"][name] = dict(sysres, per_question=pq)
    return out


def score(f: dict) -> float:
    return ((f["recall.all"] or 0.0) + (f["coverage.all"] or 0.0)) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--budget", type=int, default=1000)
    ap.add_argument("--system", default="memsif")
    ap.add_argument("--dev", type=int, default=3, help="conversations to choose on per split")
    ap.add_argument("--out", default=None)
    ap.add_argument("--questions", choices=("all", "change"), default="all",
                    help="change: only questions about a state over time (CHANGE: 'still', 'now', 'used to', ...;"
                         " result files from before 2026-12-02 lack the question texts this needs)")
    ap.add_argument("--effects", action="store_true",
                    help="also: each file against the first (the defaults), held-out means of the differences")
    args = ap.parse_args()
    runs = [(p, json.loads(Path(p).read_text())) for p in args.results]
    if args.questions == "change":
        runs = [(p, restrict(r, lambda q: CHANGE.search(q) is not None)) for p, r in runs]
    base = next((r for _, r in runs if any(s in FLAT for s in r["systems"])), runs[0][1])
    convs = sorted({q[0] for q in base["questions"]})
    flats = [s for s in base["systems"] if s in FLAT and s != "recency"]
    splits = []
    for dev in itertools.combinations(convs, args.dev):
        held = [c for c in convs if c not in dev]
        dev_scores = [score(figures(r, args.system, args.budget, lambda sid, d=dev: sid in d)) for _, r in runs]
        best = max(range(len(runs)), key=lambda i: (dev_scores[i], -i))
        row = {"dev": list(dev), "held_out": held, "chosen": runs[best][0],
               "settings": runs[best][1].get("settings", {}),
               args.system: figures(runs[best][1], args.system, args.budget, lambda sid, h=held: sid in h)}
        for fs in flats:
            row[fs] = figures(base, fs, args.budget, lambda sid, h=held: sid in h)
        splits.append(row)
    systems = [args.system, *flats]
    mean = {s: {k: round(sum(r[s][k] or 0.0 for r in splits) / len(splits), 4) for k in splits[0][s]} for s in systems}
    every = {p: figures(r, args.system, args.budget, lambda sid: True) for p, r in runs}
    every.update({fs: figures(base, fs, args.budget, lambda sid: True) for fs in flats})
    keys = list(mean[args.system])
    print(f"budget {args.budget}; {len(splits)} splits ({args.dev} dev / {len(convs) - args.dev} held-out)")
    print("| split (held-out) | chosen | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 2) + "|")
    for r in splits:
        for s in systems:
            name = f"{Path(r['chosen']).name}" if s == args.system else s
            print(f"| {','.join(r['held_out'])} | {name} | " + " | ".join(f"{r[s][k]:.3f}" if r[s][k] is not None
                                                                          else "–" for k in keys) + " |")
    for s in systems:
        print(f"| mean held-out | {s} | " + " | ".join(f"{mean[s][k]:.3f}" for k in keys) + " |")
    for name, f in every.items():
        print(f"| all | {Path(name).name} | " + " | ".join(f"{f[k]:.3f}" if f[k] is not None else "–" for k in keys)
              + " |")
    if args.effects:
        print_effects(runs, convs, args)
    if args.out:
        Path(args.out).write_text(json.dumps({"budget": args.budget, "splits": splits, "mean_held_out": mean,
                                              "all": every}, indent=2))


def print_effects(runs: list, convs: list[str], args) -> None:
    """Each variant against the first file: the mean over the splits of its held-out figure minus the
    first file's, and on how many splits its development score beats the first file's."""
    (_, first), keys = runs[0], ("recall.all", "recall.nce", "coverage.all", "fully_covered.all")
    print(f"\neffect against {Path(runs[0][0]).name} (mean over the splits of held-out differences, points)")
    print("| variant | settings | " + " | ".join(keys) + " | dev wins |")
    print("|---" * (len(keys) + 3) + "|")
    for p, r in runs[1:]:
        diffs: dict[str, list[float]] = {k: [] for k in keys}
        wins = 0
        for dev in itertools.combinations(convs, args.dev):
            held = [c for c in convs if c not in dev]
            f = figures(r, args.system, args.budget, lambda sid, h=held: sid in h)
            g = figures(first, args.system, args.budget, lambda sid, h=held: sid in h)
            for k in keys:
                diffs[k].append(100 * ((f[k] or 0.0) - (g[k] or 0.0)))
            wins += score(figures(r, args.system, args.budget, lambda sid, d=dev: sid in d)) > score(
                figures(first, args.system, args.budget, lambda sid, d=dev: sid in d))
        n = len(diffs[keys[0]])
        print(f"| {Path(p).name} | {r.get('settings', {})} | "
              + " | ".join(f"{sum(diffs[k]) / n:+.1f}" for k in keys) + f" | {wins}/{n} |")


if __name__ == "__main__":
    main()
