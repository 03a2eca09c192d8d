"""The dense top 50 alone (the message vector cache, unfiltered) of one tree on a kept ``scale.py``
file: wall and CPU ms p50 / p95 over several rounds of its questions, and a digest of the results (the
same digest: the same ids and distances). To compare trees, run it alternately with each:

    python benchmarks/dense_ab.py /path/to/tree DIR/scale-1000000-real.db 3
"""
from __future__ import annotations

import hashlib
import sys
import time

import numpy as np


def main(tree: str, path: str, rounds: int) -> None:
    sys.path.insert(0, tree + "/benchmarks")
    sys.path.insert(0, tree)  # that tree's memsif_lite first
    from scale import as_built

    from memsif_lite import Memory

    queries, emb, cfg = as_built(path + ".queries.npz")
    wall, cpu, found = [], [], []
    with Memory(path, embedder=emb, config=cfg, read_only=True) as mem:
        mem.search(queries[0], k=10)
        cache = mem._db.messages.cache  # benchmark-only: the cache itself, inside one read snapshot
        with mem._db.read():
            cache.sync()
            for r in range(rounds):
                for qv in emb.V:
                    t, c = time.perf_counter(), time.process_time()
                    got = cache.search(qv, 50)
                    wall.append(time.perf_counter() - t)
                    cpu.append(time.process_time() - c)
                    if r == 0:
                        found.append(got)
    digest = hashlib.sha256(repr(found).encode()).hexdigest()[:12]
    print(f"{tree}: wall p50 {1000 * np.median(wall):.2f} p95 {1000 * np.percentile(wall, 95):.2f} ms, "
          f"CPU p50 {1000 * np.median(cpu):.2f}, {len(wall)} searches, results {digest}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
