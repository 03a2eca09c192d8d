"""``bm25.ranked`` of this tree against that of an earlier commit, in one process on one kept file:
CPU p50 / p95 of the LoCoMo questions' BM25 lists (depth 50) and whether the lists are identical.

    python benchmarks/bm25_ab.py DIR/scale-1000000-real.db 778498a   # a file scale.py --keep built
"""
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from memsif_lite.db import bm25  # noqa: E402
from memsif_lite.retrieval import query_terms  # noqa: E402


def earlier(rev: str):
    """``memsif_lite/db/bm25.py`` as it was at ``rev``, loaded as a module of its own."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:memsif_lite/db/bm25.py"],
                          check=True, capture_output=True, text=True).stdout
    text = text.replace("from .base import", "from memsif_lite.db.base import")
    f = Path(tempfile.mkdtemp()) / "bm25_earlier.py"
    f.write_text(text)
    spec = importlib.util.spec_from_file_location("bm25_earlier", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(path: str, rev: str, rounds: int = 4, depth: int = 50, weight: float = 2.0) -> None:
    old = earlier(rev)
    questions = [str(q) for q in np.load(path + ".queries.npz")["questions"]]
    con = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
    words = {"earlier": old.CommonWords(), "this tree": bm25.CommonWords()}
    rank = {"earlier": old.ranked, "this tree": bm25.ranked}
    cpu: dict[str, list[float]] = {k: [] for k in rank}
    same = total = 0
    for r in range(rounds):
        for q in questions:
            terms = query_terms(q)
            if not terms:
                continue
            got = {}
            for name, f in (list(rank.items()) if r % 2 == 0 else list(rank.items())[::-1]):  # both orders
                t = time.process_time()
                got[name] = f(con, terms, weight, depth, words=words[name])
                cpu[name].append(time.process_time() - t)
            same += got["earlier"] == got["this tree"]
            total += 1
    for name, v in cpu.items():
        v.sort()
        print(f"{name}: CPU ms p50 {1000 * statistics.median(v):.1f} p95 {1000 * v[int(0.95 * len(v))]:.1f}")
    print(f"identical lists: {same} of {total}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
