"""One tree's query latency on a kept ``scale.py`` file, several rounds of its questions in one
process after one first search; to compare trees, run it alternately with each:

    python benchmarks/search_ab.py /path/to/tree DIR/scale-1000000-real.db 3           # search, context
    python benchmarks/search_ab.py /path/to/tree DIR/scale-1000000-real.db 3 --dense   # dense top 50 alone

``--dense``: the message vector cache's unfiltered top 50 alone, inside one read snapshot, with a
digest of the first round's results (the same digest: the same ids and distances).
"""
from __future__ import annotations

import argparse
import hashlib
import resource
import sys
import time

import numpy as np


def ms(v: list[float], p: int) -> float:
    return round(1000 * float(np.percentile(v, p)), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree")
    ap.add_argument("file")
    ap.add_argument("rounds", type=int)
    ap.add_argument("--dense", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, args.tree + "/benchmarks")
    sys.path.insert(0, args.tree)  # that tree's memsif_lite first
    from scale import as_built

    from memsif_lite import Memory

    queries, emb, cfg = as_built(args.file + ".queries.npz")
    with Memory(args.file, embedder=emb, config=cfg, read_only=args.dense) as mem:
        mem.search(queries[0], k=10)
        if args.dense:
            wall, cpu, found = [], [], []
            cache = mem._db.messages.cache  # benchmark-only: the cache itself
            with mem._db.read():
                cache.sync()
                for r in range(args.rounds):
                    for qv in emb.V:
                        t, c = time.perf_counter(), time.process_time()
                        got = cache.search(qv, 50)
                        wall.append(time.perf_counter() - t)
                        cpu.append(time.process_time() - c)
                        if r == 0:
                            found.append(got)
            digest = hashlib.sha256(repr(found).encode()).hexdigest()[:12]
            print(f"{args.tree}: dense top 50 wall p50 {ms(wall, 50)} p95 {ms(wall, 95)} ms, CPU p50 {ms(cpu, 50)}, "
                  f"{len(wall)} searches, results {digest}", flush=True)
            return
        search, search_cpu, context = [], [], []
        for _ in range(args.rounds):
            for q in queries:
                t = time.perf_counter()
                mem.context(q, budget_tokens=1000)
                context.append(time.perf_counter() - t)
                t, c = time.perf_counter(), time.process_time()
                mem.search(q, k=10)
                search.append(time.perf_counter() - t)
                search_cpu.append(time.process_time() - c)
    rss = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"{args.tree}: search p50 {ms(search, 50)} p95 {ms(search, 95)} (CPU p50 {ms(search_cpu, 50)}) | "
          f"context p50 {ms(context, 50)} p95 {ms(context, 95)} | peak RSS {rss} MB", flush=True)


if __name__ == "__main__":
    main()
