"""BM25 (``bm25.ranked``, depth 50) over a kept ``scale.py`` file's questions with SQLite page
caches of several sizes, interleaved, each in its own read-only connection with
``cell_size_check=ON`` as memsif's are: wall and CPU ms p50 / p95 over two rounds of the questions.

    python benchmarks/page_cache.py DIR/scale-1000000-real.db --kib 2000 32768 --repeat 4
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from memsif_lite.db import bm25  # noqa: E402
from memsif_lite.retrieval import query_terms  # noqa: E402


def run(path: str, questions: list[list[str]], kib: int) -> str:
    con = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    con.execute("PRAGMA cell_size_check=ON").fetchall()
    con.execute(f"PRAGMA cache_size=-{kib}").fetchall()
    words = bm25.CommonWords()
    for t in questions:  # which words are common: remembered, as a Memory's connection does
        words.of(con, t)
    wall, cpu = [], []
    for _ in range(2):
        for t in questions:
            a, c = time.perf_counter(), time.process_time()
            bm25.ranked(con, t, 2.0, 50, words=words)
            wall.append(time.perf_counter() - a)
            cpu.append(time.process_time() - c)
    con.close()
    return (f"cache {kib} KiB: wall p50 {1000 * np.median(wall):.1f}, CPU p50 {1000 * np.median(cpu):.1f} "
            f"p95 {1000 * np.percentile(cpu, 95):.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--kib", type=int, nargs="+", default=[2000, 32768])
    ap.add_argument("--repeat", type=int, default=4)
    args = ap.parse_args()
    questions = [t for t in (query_terms(str(q)) for q in np.load(args.file + ".queries.npz")["questions"]) if t]
    for _ in range(args.repeat):
        for kib in args.kib:
            print(run(args.file, questions, kib), flush=True)


if __name__ == "__main__":
    main()
