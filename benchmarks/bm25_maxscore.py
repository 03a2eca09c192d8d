"""Could BM25 at a million messages skip the rows of its middling words? A MaxScore test, measured.

    python benchmarks/bm25_maxscore.py DIR/scale-1000000-real.db [--rare-rows 3000]

memsif's bounded BM25 (:mod:`memsif_lite.db.bm25`) scores every row holding one of a question's
rarer words (those in at most ``TERM_CAP`` rows): at 1M rows of LoCoMo text that is ~20,000 rows a
question (median), at ~0.6–0.9 µs a row. MaxScore would skip the rows that hold none of the
rarest words (those in at most ``--rare-rows`` rows, *E*) when no such row can reach the best
``depth``: its score is at most the sum over the other words of idf × (k1 + 1) (a BM25 term's
ceiling, any tf, any length), and the rows holding an *E* word are ranked exactly (the same two
queries as the bounded BM25, with *E* for the rarer words). For each of the file's saved questions
with a common word and words on both sides of the split, this prints whether the ceiling lies under
the ``depth``-th score of the *E* rows (then the skip is exact) and the CPU time of the bounded
query against the *E* part alone (plus the bounded query when the test fails).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import as_built  # noqa: E402

from memsif_lite.db import bm25  # noqa: E402
from memsif_lite.retrieval import SPEAKER_WEIGHT, query_terms  # noqa: E402

K1 = 1.2  # FTS5's bm25() constants
DEPTH = 50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="a file scale.py --keep built (read only)")
    ap.add_argument("--rare-rows", type=int, default=3000, help="a word in at most this many rows is in E")
    args = ap.parse_args()
    queries, _, _ = as_built(args.path + ".queries.npz")
    con = apsw.Connection(args.path, flags=apsw.SQLITE_OPEN_READONLY)
    n = con.execute("SELECT count(*) FROM messages").fetchone()[0]

    def rows_of(term: str) -> int:
        return con.execute("SELECT count(*) FROM message_fts WHERE message_fts MATCH ?",
                           (bm25.or_query([term]),)).fetchone()[0]

    def idf(df: int) -> float:  # as FTS5 computes it (never under 1e-6)
        return max(math.log((n - df + 0.5) / (df + 0.5)), 1e-6)

    def match(query: str, depth: int) -> list[tuple[int, float]]:  # the SQL of memsif's BM25 (no filter)
        return list(con.execute("SELECT rowid, bm25(message_fts, ?, 1.0) AS s FROM message_fts "
                                "WHERE message_fts MATCH ? ORDER BY s LIMIT ?", (SPEAKER_WEIGHT, query, depth)))

    def cpu(f):
        c = time.process_time()
        out = f()
        return out, (time.process_time() - c) * 1000

    passed, old, new = 0, [], []
    for q in queries:
        terms = query_terms(str(q))
        df = {t: rows_of(t) for t in terms}
        common = [t for t in terms if df[t] > bm25.TERM_CAP]
        rare = [t for t in terms if t not in common]
        e = [t for t in rare if df[t] <= args.rare_rows]
        m = [t for t in rare if df[t] > args.rare_rows]
        if not common or not e or not m:
            continue
        _, c_old = cpu(lambda terms=terms: bm25.ranked(con, terms, SPEAKER_WEIGHT, DEPTH))

        def e_part(e=e, m=m, common=common):
            both = match(f"({bm25.or_query(e)}) AND ({bm25.or_query(m + common)})", DEPTH)
            seen = {r for r, _ in both}
            alone = [(r, s) for r, s in match(bm25.or_query(e), DEPTH + len(both)) if r not in seen]
            return sorted(both + alone, key=lambda rs: (rs[1], rs[0]))[:DEPTH]

        got, c_new = cpu(e_part)
        ceiling = sum((K1 + 1) * idf(df[t]) for t in m + common)
        theta = -got[-1][1] if len(got) >= DEPTH else 0.0
        ok = theta > ceiling
        passed += ok
        old.append(c_old)
        new.append(c_new + (0 if ok else c_old))
        print(f"E {[(t, df[t]) for t in e]} M {[(t, df[t]) for t in m]} common {len(common)}: "
              f"{DEPTH}th score {theta:.2f}, ceiling {ceiling:.2f} {'skip' if ok else 'no skip'}; "
              f"bounded {c_old:.1f} ms, E part {c_new:.1f} ms")
    print(f"{passed} of {len(old)} questions could skip; CPU ms p50 bounded {np.median(old):.1f}, "
          f"with the test {np.median(new):.1f}")


if __name__ == "__main__":
    main()
