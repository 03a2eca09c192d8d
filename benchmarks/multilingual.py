"""Search recall per language on the bundled multilingual fixture (issue 16).

    python benchmarks/multilingual.py [--out benchmarks/results/multilingual.json]

``tests/fixtures/multilingual.json`` holds the same 40 facts about one user in ten languages,
written as a person would write chat messages, a question for each, and 10 distractor messages.
For every language and every bundled model: a fresh memory file, the 50 messages added, each
question asked through ``Memory.search`` (dense + BM25, what an application gets); recall@1 /
@5 = share of questions whose own message is ranked first / in the top 5 (chance: 1/50, 5/50).
Also the same with the dense or the BM25 side alone, ``search_first20_recall@5`` over the first 20
facts only (written before anything was measured on them; five of the later 20 were reworded after
a test run, see benchmarks/README.md), and the embedding throughput of each model on all
messages. The machine and date go into the output.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "multilingual.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", default="me5-small-enpt-int8,me5-small-multi-int8")
    args = ap.parse_args()
    from memsif_lite import Config, Memory
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.retrieval import Retriever

    langs = json.loads(FIXTURE.read_text(encoding="utf-8"))["languages"]
    out: dict = {"date": date.today().isoformat(), "machine": machine(), "fixture": FIXTURE.name, "models": {}}
    for model in args.models.split(","):
        emb = resolve_embedder(model)
        everything = [m for lang in langs.values() for m in lang["memories"] + lang["distractors"]]
        emb.embed(everything[:8], kind="passage")  # load the model and tokenizer first
        t0 = time.perf_counter()
        emb.embed(everything, kind="passage")
        rate = len(everything) / (time.perf_counter() - t0)
        per_lang = {}
        for code, lang in langs.items():
            with tempfile.TemporaryDirectory() as d:
                with Memory(Path(d) / "m.db", config=Config(embedding_model=model)) as mem:
                    mem.add_many([{"speaker": "user", "text": t} for t in lang["memories"] + lang["distractors"]])
                    ids = [m.id for m in mem.messages()][: len(lang["memories"])]
                    retr: Retriever = mem._p.retriever  # noqa: SLF001 - a benchmark looks inside
                    ranks: dict[str, list[list[int]]] = {"search": [], "dense": [], "bm25": []}
                    for q in lang["questions"]:
                        ranks["search"].append([h.id for h in mem.search(q, k=5)])
                        ranks["dense"].append(retr.dense(retr.embed_query(q), 5))
                        ranks["bm25"].append(retr.bm25(q, 5))
            per_lang[code] = {
                f"{side}_recall@{k}": round(float(np.mean([ids[i] in r[:k] for i, r in enumerate(rs)])), 3)
                for side, rs in ranks.items() for k in (1, 5)}
            per_lang[code]["search_first20_recall@5"] = round(
                float(np.mean([ids[i] in r for i, r in enumerate(ranks["search"][:20])])), 3)
        out["models"][model] = {"embed_per_s": round(rate, 1), "languages": per_lang}
        print(f"\n{model}: {rate:.0f} messages/s")
        print("| language | search @1 | search @5 | dense @1 | dense @5 | BM25 @1 | BM25 @5 | search @5, facts 1-20 |")
        print("|---|---|---|---|---|---|---|---|")
        for code, r in per_lang.items():
            print(f"| {langs[code]['name']} | " + " | ".join(
                f"{r[f'{s}_recall@{k}']:.2f}" for s in ("search", "dense", "bm25") for k in (1, 5))
                + f" | {r['search_first20_recall@5']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
