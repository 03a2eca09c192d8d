"""What filters cost: ``Memory.search(k=10)`` and ``Memory.context()`` with and without a filter,
and the two ways to run a filtered dense ranking, measured side by side:

* vec0 KNN with the filter inside (``... WHERE embedding MATCH ? AND k = ? AND rowid IN (SELECT id
  FROM messages WHERE ...)``) — what memsif_lite does;
* reading the matching rows' vectors (``SELECT embedding FROM message_vec WHERE rowid IN (...)``)
  and ranking them with numpy.

    python benchmarks/filters.py --messages 10000 --out filters.json

Synthetic data from ``scale.py`` (topics, vectors from a lookup table), with 20 speakers taking
turns and a new session every 250 messages. Filters: one speaker (5 %), one session (250
messages), the last 10 % of the time range, and a broad one (18 of 20 speakers, 90 %).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np
import sqlite_vec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

SPEAKERS = [f"S{i}" for i in range(20)]


def _filters(msgs: list[dict]) -> dict[str, dict]:
    cut = msgs[int(len(msgs) * 0.9)]["at"]
    return {"none": {}, "one_speaker_5pct": {"speakers": "S3"}, "one_session": {"sessions": "7"},
            "last_10pct_of_time": {"since": cut}, "broad_90pct": {"speakers": SPEAKERS[:18]}}


def _p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def _dense_two_ways(path: Path, qvecs: list[np.ndarray], where: str, args: list) -> dict[str, float]:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    sub = f"SELECT id FROM messages WHERE {where}"
    knn, brute = [], []
    for q in qvecs:
        t = time.perf_counter()
        a = [r for r, _ in con.execute("SELECT rowid, distance FROM message_vec WHERE embedding MATCH ? AND k = 50 "
                                       f"AND rowid IN ({sub}) ORDER BY distance", (q.tobytes(), *args))]
        knn.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        rows = con.execute(f"SELECT rowid, embedding FROM message_vec WHERE rowid IN ({sub})", args).fetchall()
        ids = np.array([r for r, _ in rows])
        mat = np.frombuffer(b"".join(e for _, e in rows), dtype=np.float32).reshape(len(rows), -1)
        s = mat @ q
        top = np.argsort(-s, kind="stable")[:50]
        b = ids[top].tolist()
        brute.append((time.perf_counter() - t) * 1000)
        assert len(a) == len(b) and len(set(a) & set(b)) >= 0.9 * len(a)  # same neighbours (ties aside)
    con.close()
    return {"vec0_rowid_in_ms_p50": _p50(knn), "numpy_over_candidates_ms_p50": _p50(brute)}


def run(n: int, workdir: Path) -> dict:
    from memsif_lite import Config, Memory

    msgs, table, queries, rng = generate(n)
    for i, m in enumerate(msgs):  # 20 speakers, sessions of 250 messages
        v = table.pop(f"{m['speaker']}: {m['text']}")
        m["speaker"], m["session"] = SPEAKERS[i % 20], str(i // 250)
        table[f"{m['speaker']}: {m['text']}"] = v
    emb = TableEmbedder(table, rng)
    path = workdir / f"filters-{n}.db"
    out: dict = {"messages": n}
    with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
        t0 = time.perf_counter()
        for start in range(0, n, 1000):
            mem.add_many(msgs[start:start + 1000])
        out["ingest_s"] = round(time.perf_counter() - t0, 1)
        for name, kw in _filters(msgs).items():
            search_ms, ctx_ms, hits = [], [], []
            for q in queries:
                t = time.perf_counter()
                hits.append(len(mem.search(q, k=10, **kw)))
                search_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                mem.context(q, budget_tokens=1000, **kw)
                ctx_ms.append((time.perf_counter() - t) * 1000)
            out[name] = {"search_ms_p50": _p50(search_ms), "context_ms_p50": _p50(ctx_ms), "min_hits": min(hits)}
    qvecs = [table[q] for q in queries]
    cut = msgs[int(n * 0.9)]["at"]
    for name, where, args in (("one_speaker_5pct", "speaker = ?", ["S3"]), ("one_session", "session = ?", ["7"]),
                              ("last_10pct_of_time", "at >= ?", [cut]),
                              ("broad_90pct", f"speaker IN ({','.join('?' * 18)})", SPEAKERS[:18])):
        out[name]["dense_k50"] = _dense_two_ways(path, qvecs, where, args)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        res = {"machine": machine(), "run": run(args.messages, Path(d))}
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
