"""Replay one LoCoMo conversation through the whole pipeline: ingest (CoreFacts at write time),
then ask its questions in a fixed shuffled order (the paper's online query-state protocol), so
candidate clusters and ActiveFacts accumulate across questions. Reports CoreFacts per type,
supersessions, clusters formed and promoted, tokens per question and latency per stage.

    python benchmarks/replay.py --data ../shared/data/locomo/26.json [--seed 0] [--budget 2000]
        [--llm MODEL --api-base URL]

Offline by default (extractive answers, offline judges and extractors).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files, machine  # noqa: E402
from locomo import CATEGORIES  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="one LoCoMo conversation file (or a folder: its first)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--llm", default=None)
    ap.add_argument("--api-base", default=None)
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    from memsif_lite import Memory
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.importers import locomo_turns

    sid, sample = conversation_files(args.data)[0]
    turns = list(locomo_turns(sample["conversation"]))
    emb = CachedEmbedder(OnnxEmbedder(), cache_name="locomo")
    kwargs = {"api_base": args.api_base} if args.api_base else None
    with tempfile.TemporaryDirectory() as d:
        with Memory(Path(d) / "m.db", embedder=emb, llm=args.llm, llm_kwargs=kwargs) as mem:
            t0 = time.perf_counter()
            mem.add_many(turns)
            ingest_s = time.perf_counter() - t0
            ingest_calls = mem.stats()["llm_calls"]
            facts = mem.facts(include_superseded=True)
            per_type = Counter(f.type for f in facts)
            superseded = [f for f in facts if f.superseded_by is not None]
            qs = [q for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
            random.Random(args.seed).shuffle(qs)
            tokens_in, tokens_out, calls, sufficient = [], [], [], 0
            stages: dict[str, list[float]] = {}
            promoted_at = None
            for i, q in enumerate(qs, start=1):
                a = mem.ask(str(q["question"]), budget_tokens=args.budget)
                tokens_in.append(a.tokens_in)
                tokens_out.append(a.tokens_out)
                calls.append(a.llm_calls)
                sufficient += a.sufficient
                for k, v in a.timings_ms.items():
                    stages.setdefault(k, []).append(v)
                if promoted_at is None and mem.stats()["active_facts"]:
                    promoted_at = i
            st = mem.stats()
            active = mem.active_facts()
    emb.save()
    out = {
        "conversation": sid, "turns": len(turns), "questions": len(qs), "machine": machine(), "llm": args.llm,
        "ingest_s": round(ingest_s, 2), "llm_calls_per_turn": round(ingest_calls / len(turns), 3),
        "segments": st["segments"], "trajectories": st["trajectories"],
        "core_facts_per_type": dict(per_type), "core_facts_current": st["core_facts"],
        "supersessions": len(superseded), "candidate_clusters": st["candidates"], "active_facts": st["active_facts"],
        "first_promotion_after_question": promoted_at, "answered_from_facts_alone": sufficient,
        "tokens_in_per_question": round(float(np.mean(tokens_in)), 1),
        "tokens_out_per_question": round(float(np.mean(tokens_out)), 1),
        "llm_calls_per_question": round(float(np.mean(calls)), 2),
        "stage_ms_p50": {k: round(float(np.percentile(v, 50)), 2) for k, v in stages.items()},
        "stage_ms_p95": {k: round(float(np.percentile(v, 95)), 2) for k, v in stages.items()},
        "examples": {"superseded": [(f.stmt, f.valid_to.isoformat() if f.valid_to else None) for f in superseded[:3]],
                     "active_facts": [(a.subject, a.stmt, len(a.queries)) for a in active[:5]]},
    }
    print(json.dumps(out, indent=2, ensure_ascii=False))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
