"""``search`` and ``context`` latency of one tree on a kept ``scale.py`` file: several rounds of its
questions in one process, after one first search; to compare trees, run it alternately with each:

    python benchmarks/search_ab.py /path/to/tree DIR/scale-1000000-real.db 3
"""
from __future__ import annotations

import resource
import sys
import time

import numpy as np


def main(tree: str, path: str, rounds: int) -> None:
    sys.path.insert(0, tree + "/benchmarks")
    sys.path.insert(0, tree)  # that tree's memsif_lite first
    from scale import as_built

    from memsif_lite import Memory

    queries, emb, cfg = as_built(path + ".queries.npz")
    search, search_cpu, context = [], [], []
    with Memory(path, embedder=emb, config=cfg) as mem:
        mem.search(queries[0], k=10)
        for _ in range(rounds):
            for q in queries:
                t = time.perf_counter()
                mem.context(q, budget_tokens=1000)
                context.append(time.perf_counter() - t)
                t, c = time.perf_counter(), time.process_time()
                mem.search(q, k=10)
                search.append(time.perf_counter() - t)
                search_cpu.append(time.process_time() - c)

    def ms(v: list[float], p: int) -> float:
        return round(1000 * float(np.percentile(v, p)), 1)
    rss = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"{tree}: search p50 {ms(search, 50)} p95 {ms(search, 95)} (CPU p50 {ms(search_cpu, 50)}) | "
          f"context p50 {ms(context, 50)} p95 {ms(context, 95)} | peak RSS {rss} MB", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
