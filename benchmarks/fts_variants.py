"""Cheaper FTS5 queries for long questions: their cost, and what they do to BM25 recall.

    python benchmarks/fts_variants.py FILE [--depth 200]   # FILE: a memory file, e.g. one built by
                                        # scale.py --real ../shared/data/locomo (100k rows)
    python benchmarks/fts_variants.py --recall            # gold-evidence recall, LoCoMo dev half

Cost mode: for 200 LoCoMo questions (../shared/data/locomo), each variant's FTS5 query time at
the given depth (including its term statistics lookup: query words stemmed by a temporary FTS5
table with the same tokenizer, document counts from ``fts5vocab``) and the overlap of its
top-10 / top-50 with the OR query's. Recall mode: BM25 alone over each conversation's turns (the
same FTS5 table and weights as memsif), share of gold evidence turns in the top 5 / 10 / 50.
Variants: ``or`` every content word (memsif's query); ``rareK`` the K rarest words; ``capF``
drop words in more than F of all rows (the rarest word is kept if none is left); ``and2`` the
rows holding both of the two rarest words, then the OR list's rows until ``depth`` (the issue's
proposal); ``and2capF`` the same, topped up from ``capF``; ``boundedC`` memsif's bounded query
(:mod:`memsif_lite.db.bm25`) with its ``TERM_CAP`` set to C rows (C < 1: that share of the rows);
``dfC`` only its term lookup (which words hold more than C rows). ``or`` runs first and again
last (timing drift). Times are the process's CPU time (wall time beside it in cost mode: other
work on a shared machine inflates wall time, not CPU time).

    python benchmarks/fts_variants.py FILE --variants or,bounded50000,df50000,or   # a chosen list
    python benchmarks/fts_variants.py FILE --period 2760   # FILE's row r is the text of row r + 2760
                                        # (replicated): overlap counts rows by text, not by copy
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

from memsif_lite.db import bm25  # noqa: E402
from memsif_lite.retrieval import SPEAKER_WEIGHT, fts_query  # noqa: E402

SQL = "SELECT rowid FROM message_fts WHERE message_fts MATCH ? ORDER BY bm25(message_fts, 0.3, 1.0) LIMIT ?"
VARIANTS = ["or", "rare3", "rare4", "cap0.1", "cap0.0625", "cap0.03", "and2", "and2cap0.2", "bounded50000",
            "bounded20000", "df50000", "or"]
RECALL_VARIANTS = ["or", "bounded50000", "cap0.1", "cap0.05", "bounded0.1", "bounded0.05"]


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


def ranked(con: apsw.Connection, terms: Terms, name: str, ws: list[str], n: int, depth: int) -> list[int]:
    """One variant's BM25 ranking of the rows for a question's words."""
    if name.startswith(("bounded", "df")):
        cap = float(name.removeprefix("bounded").removeprefix("df"))
        saved, bm25.TERM_CAP = bm25.TERM_CAP, int(cap * n if cap < 1 else cap)
        try:
            if name.startswith("df"):
                bm25.common_terms(con, ws)
                return []
            return bm25.ranked(con, ws, SPEAKER_WEIGHT, depth)
        finally:
            bm25.TERM_CAP = saved
    if name == "or":
        return [r for (r,) in con.execute(SQL, (or_query(ws), depth))]
    df = terms.docs(ws)
    if not name.startswith("and2"):
        keep = choose(name, ws, df, n)
        return [r for (r,) in con.execute(SQL, (or_query(keep), depth))] if keep else []
    present = sorted((w for w in ws if df[w] > 0), key=lambda w: df[w])
    got = [r for (r,) in con.execute(SQL, (f"{or_query(present[:1])} AND {or_query(present[1:2])}", depth))] \
        if len(present) >= 2 else []
    fill = ws if name == "and2" else choose(name[4:], ws, df, n)
    if len(got) < depth and fill:
        seen = set(got)
        got += [r for (r,) in con.execute(SQL, (or_query(fill), depth)) if r not in seen]
    return got[:depth]


def recall() -> None:
    from locomo import gold_ids

    from memsif_lite.importers import locomo_turns

    names = list(dict.fromkeys(_variants(RECALL_VARIANTS)))
    hits: dict[str, dict[int, list[float]]] = {v: {5: [], 10: [], 50: []} for v in names}
    for _, sample in conversation_files("../shared/data/locomo"):
        con = apsw.Connection(":memory:")
        con.execute("CREATE TABLE messages(id INTEGER PRIMARY KEY, speaker TEXT, text TEXT)")
        con.execute("CREATE VIRTUAL TABLE message_fts USING fts5(speaker, text, content='messages', "
                    "content_rowid='id', tokenize='porter unicode61 remove_diacritics 2')")
        source: dict[int, str] = {}
        for i, t in enumerate(locomo_turns(sample["conversation"]), 1):
            con.execute("INSERT INTO messages VALUES(?,?,?)", (i, t["speaker"], t["text"]))
            con.execute("INSERT INTO message_fts(rowid, speaker, text) VALUES(?,?,?)", (i, t["speaker"], t["text"]))
            source[i] = str(t["source_id"])
        terms = Terms(con)
        for q in sample.get("qa", []):
            gold = gold_ids(q.get("evidence", []), set(source.values())) if q.get("category") in CATEGORIES else []
            ws = words(str(q["question"]))
            if not gold or not ws:
                continue
            for name in names:
                got = [source[r] for r in ranked(con, terms, name, ws, len(source), 50)]
                for k, xs in hits[name].items():
                    xs.append(len(set(got[:k]) & set(gold)) / len(gold))
    print(f"{len(hits['or'][5])} questions; gold-evidence recall of BM25 alone @5 / @10 / @50")
    for name in names:
        print(f"{name:12s} " + " / ".join(f"{100 * np.mean(xs):.2f}" for xs in hits[name].values()))


def _variants(default: list[str]) -> list[str]:
    return sys.argv[sys.argv.index("--variants") + 1].split(",") if "--variants" in sys.argv else default


def main() -> None:
    if "--recall" in sys.argv:
        recall()
        return
    depth = int(sys.argv[sys.argv.index("--depth") + 1]) if "--depth" in sys.argv else 200
    period = int(sys.argv[sys.argv.index("--period") + 1]) if "--period" in sys.argv else 0
    qs: list[str] = []
    for _, sample in conversation_files("../shared/data/locomo"):
        qs += [str(q["question"]) for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
    qs = qs[::max(1, len(qs) // 200)][:200]
    con = apsw.Connection(sys.argv[1], flags=apsw.SQLITE_OPEN_READONLY)
    n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    terms = Terms(con)
    base: dict[str, list[int]] = {}
    print(f"{n} rows, {len(qs)} questions, depth {depth}")
    for name in _variants(VARIANTS):
        ms, cpu, o10, o50 = [], [], [], []
        for q in qs:
            ws = words(q)
            if not ws:
                continue
            t, c = time.perf_counter(), time.process_time()
            got = ranked(con, terms, name, ws, n, depth)
            ms.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
            if name == "or":
                base[q] = got
                continue
            if name.startswith("df"):
                continue
            b = [r % period for r in base[q]] if period else base[q]
            got = [r % period for r in got] if period else got
            o10.append(len(set(got[:10]) & set(b[:10])) / max(1, len(set(b[:10]))))
            o50.append(len(set(got[:50]) & set(b[:50])) / max(1, len(set(b[:50]))))
        print(f"{name:12s} ms p50 {np.percentile(ms, 50):6.2f} p95 {np.percentile(ms, 95):6.2f}  "
              f"cpu ms p50 {np.percentile(cpu, 50):6.2f} p95 {np.percentile(cpu, 95):6.2f}  "
              f"overlap top-10 {np.mean(o10) if o10 else 1:.3f} top-50 {np.mean(o50) if o50 else 1:.3f}", flush=True)


if __name__ == "__main__":
    main()
