"""The first search after opening a kept ``scale.py`` file (it loads the vector cache): one fresh
process per run, read-only, wall and CPU ms. To compare two trees, run it alternately with each on
``PYTHONPATH`` (this script prints which ``memsif_lite`` it ran).

    python benchmarks/first_search.py DIR/scale-1000000-real.db --runs 5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def once(path: str) -> None:
    from scale import as_built

    import memsif_lite
    from memsif_lite import Memory

    queries, emb, cfg = as_built(path + ".queries.npz")
    with Memory(path, embedder=emb, config=cfg, read_only=True) as mem:
        t, c = time.perf_counter(), time.process_time()
        mem.search(queries[0], k=10)
        print(f"{Path(memsif_lite.__file__).parent}: first search {(time.perf_counter() - t) * 1000:.0f} ms wall, "
              f"{(time.process_time() - c) * 1000:.0f} ms CPU", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.once:
        once(args.file)
        return
    for _ in range(args.runs):
        subprocess.run([sys.executable, __file__, args.file, "--once"], check=True)


if __name__ == "__main__":
    main()
