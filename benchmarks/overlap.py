"""What the second thread of ``Messages.nearest_beside`` buys: ``context`` and ``search`` on a kept
``scale.py`` file, with the BM25 query overlapped with the dense scan and without (the same process,
alternating, two rounds), wall and CPU p50 / p95.

    python benchmarks/overlap.py DIR/scale-1000000-real.db   # a file scale.py --keep built

Without the thread the two rankings run one after the other, as below 50,000 messages.
"""
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import as_built  # noqa: E402

from memsif_lite import Memory  # noqa: E402


def main(path: str, n: int = 60) -> None:
    queries, emb, cfg = as_built(path + ".queries.npz")
    with Memory(path, embedder=emb, config=cfg) as mem:
        mem.search(queries[0], k=10)
        mem.context(queries[0], budget_tokens=1000)
        messages = mem._db.messages  # benchmark-only: switch the overlap off on this instance
        for rnd in range(2):
            for mode in ("overlap", "serial"):
                if mode == "serial":
                    messages.nearest_beside = lambda qv, d, f, also=(): (messages.nearest(qv, d), f(),
                                                                         [g() for g in also])
                else:
                    messages.__dict__.pop("nearest_beside", None)
                wall: dict[str, list[float]] = {"context": [], "search": []}
                cpu: dict[str, list[float]] = {"context": [], "search": []}
                for q in queries[:n]:
                    for name, call in (("context", lambda q=q: mem.context(q, budget_tokens=1000)),
                                       ("search", lambda q=q: mem.search(q, k=10))):
                        t, c = time.perf_counter(), time.process_time()
                        call()
                        wall[name].append((time.perf_counter() - t) * 1000)
                        cpu[name].append((time.process_time() - c) * 1000)
                print(rnd, mode, {k: (round(float(np.median(v)), 1), round(float(np.percentile(v, 95)), 1))
                                  for k, v in wall.items()},
                      "cpu p50", {k: round(float(np.median(v)), 1) for k, v in cpu.items()}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
