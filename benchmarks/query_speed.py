"""Query speed, warm and by CPU time: memsif's ``Memory.context`` against hybrid RAG on the same
conversations, question by question, in one process.

``locomo.py``'s ``query_ms_p50`` is the wall-clock time of one call per question and budget; on the
shared 2-core machine its figures move by a factor of two or three from run to run with the other
processes' load. Here every question's vector is computed beforehand (neither system pays for
embedding it; ``locomo.py`` shows what that adds to both), each (question, budget) is run
``--reps`` times for both systems in turn, and the least CPU time (``time.process_time``) of
each is kept, so most of what load adds is left out and both systems are measured alike. The
hybrid RAG is ``locomo.py``'s (``_flat.py``: its own float32 store, RRF of dense and BM25, packed
with per-line costs). Contexts are not scored here (``locomo.py`` scores them).

    python benchmarks/query_speed.py --data ../shared/data/locomo
    python benchmarks/query_speed.py --data benchmarks/.cache/locomo_chat
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files, machine  # noqa: E402
from locomo import CATEGORIES, gold_ids, pack, with_offsets  # noqa: E402


class Vectors:
    """Passage vectors from the benchmarks' cache (or the model), question vectors computed beforehand."""

    def __init__(self, cached, questions: dict[str, np.ndarray]):
        self.cached, self.questions = cached, questions
        self.model_id, self.dim, self.metric = cached.model_id, cached.dim, cached.metric
        self.sem_levels, self.query_levels = cached.sem_levels, cached.query_levels

    def embed(self, texts, *, kind):
        if kind == "passage":
            return self.cached.embed(texts, kind=kind)
        return np.stack([self.questions[t] for t in texts])


def run(args) -> dict:
    from _flat import FlatStore

    from memsif_lite import Memory
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.importers import locomo_turns
    from memsif_lite.timeutil import to_stored
    from memsif_lite.tokens import count_tokens

    real = resolve_embedder(None)
    cached = CachedEmbedder(real, cache_name="locomo") if not args.no_cache else real
    budgets = [int(b) for b in args.budgets.split(",")]
    best: dict[tuple[str, str, int], list[float]] = {}  # least CPU ms: memsif, hybrid
    with tempfile.TemporaryDirectory() as d:
        for sid, sample in conversation_files(args.data):
            turns = with_offsets(sample["conversation"], list(locomo_turns(sample["conversation"])))
            known = {t["source_id"] for t in turns}
            asked = [q for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
            questions = list(dict.fromkeys(str(q["question"]) for q in asked if gold_ids(q.get("evidence", []), known)))
            vecs = Vectors(cached, dict(zip(questions, real.embed(questions, kind="query"), strict=True)))
            passages = cached.embed([f"{t['speaker']}: {t['text']}" for t in turns], kind="passage")
            flat = FlatStore(Path(d) / f"{sid}-flat.db", real.dim)
            src = dict(zip(flat.add(turns, passages, [to_stored(t["at"]) for t in turns]),
                           (t["source_id"] for t in turns), strict=True))
            line = {t["source_id"]: f"[{to_stored(t['at'])[:10]}] {t['speaker']}: {t['text']}" for t in turns}
            cost = {s: count_tokens(text) for s, text in line.items()}
            with Memory(Path(d) / f"{sid}-memsif.db", embedder=vecs) as mem:
                mem.add_many(turns)
                for _ in range(args.reps):
                    for q in questions:
                        for b in budgets:
                            t0 = time.process_time()
                            mem.context(q, budget_tokens=b)
                            t1 = time.process_time()
                            order = [src[m] for m in flat.ranking("hybrid_rag", q, vecs.questions[q])]
                            "\n".join(line[c] for c in pack(order, cost, b))
                            t2 = time.process_time()
                            ms = best.setdefault((sid, q, b), [float("inf")] * 2)
                            ms[0], ms[1] = min(ms[0], (t1 - t0) * 1000), min(ms[1], (t2 - t1) * 1000)
            flat.close()
            print(f"conversation {sid}: {len(turns)} turns, {len(questions)} questions", file=sys.stderr)
    lat = np.array(list(best.values()))
    out: dict = {"data": str(args.data), "budgets": budgets, "reps": args.reps, "calls": len(lat),
                 "machine": machine(), "systems": {}}
    for i, s in enumerate(("memsif", "hybrid_rag")):
        out["systems"][s] = {"cpu_ms_p50": round(float(np.percentile(lat[:, i], 50)), 3),
                             "cpu_ms_p95": round(float(np.percentile(lat[:, i], 95)), 3)}
    out["p50_ratio"] = round(out["systems"]["memsif"]["cpu_ms_p50"] / out["systems"]["hybrid_rag"]["cpu_ms_p50"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a folder of LoCoMo-style conversation files (or a locomo10.json)")
    ap.add_argument("--budgets", default="500,1000,2000")
    ap.add_argument("--reps", type=int, default=3, help="runs of each (question, budget); the least CPU time is kept")
    ap.add_argument("--out", help="write the result as JSON here too")
    ap.add_argument("--no-cache", action="store_true", help="embed the turns with the model instead of reading the "
                    "vectors locomo.py cached in benchmarks/.cache")
    args = ap.parse_args()
    res = run(args)
    for s, v in res["systems"].items():
        print(f"{s}: CPU ms p50 {v['cpu_ms_p50']} / p95 {v['cpu_ms_p95']}")
    print(f"memsif / hybrid_rag p50: {res['p50_ratio']} ({res['calls']} calls, least of {res['reps']})")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
