"""Recall of gold evidence turns in the top 5/10 of ``Memory.search``-style rankings on LoCoMo:
dense only, BM25 only (FTS5), and the fused hybrid that ``Memory.search`` returns.

    python benchmarks/search_recall.py --data ../shared/data/locomo [--model ID]

Also reports embedding throughput (turns/s, the bundled model, this machine) and the memory
file's size per message.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files, machine  # noqa: E402
from locomo import CATEGORIES, gold_ids  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None, help="a bundled model id (default: the default model)")
    args = ap.parse_args()
    from memsif_lite import Memory
    from memsif_lite.embed import resolve_embedder
    from memsif_lite.importers import locomo_turns
    from _flat import FlatStore

    emb = resolve_embedder(args.model)
    ks = (5, 10)
    hits: dict[str, dict[int, list[float]]] = {s: {k: [] for k in ks} for s in ("dense", "bm25", "hybrid")}
    turns_total, embed_s, bytes_total = 0, 0.0, 0
    with tempfile.TemporaryDirectory() as d:
        for sid, sample in conversation_files(args.data):
            turns = list(locomo_turns(sample["conversation"]))
            path = Path(d) / f"{sid}.db"
            with Memory(path, embedder=emb) as mem:
                t0 = time.perf_counter()
                emb.embed([f"{t['speaker']}: {t['text']}" for t in turns], kind="passage")
                embed_s += time.perf_counter() - t0
                mem.add_many(turns)
            bytes_total += path.stat().st_size  # closing checkpointed the WAL
            turns_total += len(turns)
            with Memory(path, embedder=emb) as mem:
                flat = FlatStore(path, emb.dim, create=False)  # the same file's message tables, read directly
                src = {m.id: m.source_id for m in mem.messages()}
                known = set(src.values())
                for q in sample.get("qa", []):
                    if q.get("category") not in CATEGORIES:
                        continue
                    gold = gold_ids(q.get("evidence", []), known)
                    if not gold:
                        continue
                    question = str(q["question"])
                    dense = flat.dense(emb.embed([question], kind="query")[0], 50)
                    bm25 = flat.bm25(question, 50)
                    fused = [h.id for h in mem.search(question, k=10)]  # what Memory.search returns
                    for name, ranking in (("dense", dense), ("bm25", bm25), ("hybrid", fused)):
                        for k in ks:
                            top = {src[m] for m in ranking[:k]}
                            hits[name][k].append(sum(g in top for g in gold) / len(gold))
                flat.close()
    print(f"machine: {machine()}; model: {emb.model_id}")
    print(f"questions: {len(hits['dense'][5])}, turns: {turns_total}")
    print("| ranking | recall@5 | recall@10 |\n|---|---|---|")
    for name, by_k in hits.items():
        print(f"| {name} | {np.mean(by_k[5]):.3f} | {np.mean(by_k[10]):.3f} |")
    print(f"embedding throughput: {turns_total / embed_s:.0f} turns/s; "
          f"file size: {bytes_total / turns_total:.0f} bytes/message")


if __name__ == "__main__":
    main()
