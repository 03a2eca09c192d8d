"""Cheaper FTS5 queries for long questions: cost and overlap with the OR-of-all-words query.

    python benchmarks/fts_variants.py FILE      # FILE: a memory file, e.g. one built by
                                                # scale.py --real ../shared/data/locomo (100k rows)

For 200 LoCoMo questions (../shared/data/locomo), each variant's FTS5 query time (including its
term statistics lookup: query words stemmed by a temporary FTS5 table with the same tokenizer,
document counts from ``fts5vocab``) and the overlap of its top-10 / top-50 with the OR query's.
Variants: ``rareK`` the K rarest words; ``capF`` drop words in more than F of all rows (the
rarest word is kept if none is left). The OR query runs first and again last (timing drift).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files  # noqa: E402
from locomo import CATEGORIES  # noqa: E402

from memsif_lite.retrieval import fts_query  # noqa: E402

SQL = "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, 0.3, 1.0) LIMIT ?"
VARIANTS = ["or", "rare3", "rare4", "cap0.1", "cap0.0625", "cap0.03", "or"]


def words(q: str) -> list[str]:
    f = fts_query(q)
    return [w.strip('"') for w in f.split(" OR ")] if f else []


def or_query(ws: list[str]) -> str:
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in ws)


class Terms:
    """Document counts of query words, through their porter stems."""

    def __init__(self, con: apsw.Connection):
        self.con = con
        con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, message_fts, 'row')")
        con.execute("CREATE VIRTUAL TABLE temp.qt USING fts5(w, tokenize='porter unicode61 remove_diacritics 2')")
        con.execute("CREATE VIRTUAL TABLE temp.qv USING fts5vocab(temp, qt, 'instance')")

    def docs(self, ws: list[str]) -> dict[str, int]:
        self.con.execute("DELETE FROM temp.qt")
        for i, w in enumerate(ws):
            self.con.execute("INSERT INTO temp.qt(rowid, w) VALUES(?,?)", (i, w))
        stem = {ws[doc]: term for term, doc in self.con.execute("SELECT term, doc FROM temp.qv")}
        marks = ",".join("?" * len(set(stem.values())))
        df = dict(self.con.execute(f"SELECT term, doc FROM temp.v WHERE term IN ({marks})", list(set(stem.values()))))
        return {w: df.get(stem.get(w, w), 0) for w in ws}


def choose(name: str, ws: list[str], df: dict[str, int], n: int) -> list[str]:
    present = sorted((w for w in ws if df[w] > 0), key=lambda w: df[w])
    if name.startswith("rare"):
        return present[:int(name[4:])]
    frac = float(name[3:])
    return [w for w in present if df[w] <= frac * n] or present[:1]


def main() -> None:
    qs: list[str] = []
    for _, sample in conversation_files("../shared/data/locomo"):
        qs += [str(q["question"]) for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
    qs = qs[::max(1, len(qs) // 200)][:200]
    con = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
    n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    terms = Terms(con)
    base: dict[str, list[int]] = {}
    print(f"{n} rows, {len(qs)} questions")
    for name in VARIANTS:
        ms, o10, o50, kept = [], [], [], []
        for q in qs:
            ws = words(q)
            if not ws:
                continue
            t = time.perf_counter()
            keep = ws if name == "or" else choose(name, ws, terms.docs(ws), n)
            got = [r for (r,) in con.execute(SQL, (or_query(keep), 200))] if keep else []
            ms.append((time.perf_counter() - t) * 1000)
            kept.append(len(keep))
            if name == "or":
                base[q] = got
                continue
            b = base[q]
            o10.append(len(set(got[:10]) & set(b[:10])) / max(1, min(10, len(b))))
            o50.append(len(set(got[:50]) & set(b[:50])) / max(1, min(50, len(b))))
        print(f"{name:10s} ms p50 {np.percentile(ms, 50):6.2f} p95 {np.percentile(ms, 95):6.2f}  "
              f"words {np.mean(kept):.1f}  overlap top-10 {np.mean(o10) if o10 else 1:.3f} "
              f"top-50 {np.mean(o50) if o50 else 1:.3f}", flush=True)


if __name__ == "__main__":
    main()
