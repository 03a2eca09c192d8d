"""What filters cost: ``Memory.search(k=10)`` and ``Memory.context()`` with and without a filter,
and the two ways to run a filtered dense ranking (k = 50), measured side by side:

* vec0 KNN with the filter inside (``... WHERE embedding MATCH ? AND k = ? AND rowid IN (SELECT id
  FROM messages WHERE ...)``) — what memsif_lite does without its vector cache;
* the in-process vector cache ranking only the rows the filter admits (a time window compared
  beside the cache, speakers or sessions as an id list) — what it does with one.

    python benchmarks/filters.py --messages 10000 --out filters.json

Synthetic data from ``scale.py`` (topics, vectors from a lookup table), with 20 speakers taking
turns and a new session every 250 messages. Filters: one speaker (5 %), one session (250
messages), the last 10 % of the time range, a broad one (18 of 20 speakers, 90 %), and ``as_of``
halfway through.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

SPEAKERS = [f"S{i}" for i in range(20)]


def _filters(msgs: list[dict]) -> dict[str, dict]:
    cut = msgs[int(len(msgs) * 0.9)]["at"]
    return {"none": {}, "one_speaker_5pct": {"speakers": "S3"}, "one_session": {"sessions": "7"},
            "last_10pct_of_time": {"since": cut}, "broad_90pct": {"speakers": SPEAKERS[:18]},
            "as_of_half": {"as_of": msgs[len(msgs) // 2]["at"]}}


def _p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 2)


def _dense_two_ways(mem, qvecs: list[np.ndarray], kw: dict) -> dict[str, float]:
    from memsif_lite.db.filtering import message_sql
    from memsif_lite.filters import MessageFilter

    db, flt = mem._db, MessageFilter.build(**kw)  # noqa: SLF001 - the data-access layer, measured directly
    knn, cache = [], []
    for q in qvecs:
        with db.read():
            t = time.perf_counter()
            a = db.messages.knn("message_vec", q, 50, only=message_sql(flt))
            knn.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            b = db.messages.cached_nearest(q, 50, db.filters.allowed(flt))
            cache.append((time.perf_counter() - t) * 1000)
        assert b is not None and [d for _, d in a] == [d for _, d in b]  # the same ranking
    return {"vec0_rowid_in_ms_p50": _p50(knn), "cache_masked_ms_p50": _p50(cache)}


def run(n: int, workdir: Path) -> dict:
    from memsif_lite import Config, Memory

    msgs, V, index, queries = generate(n)
    for i, m in enumerate(msgs):  # 20 speakers, sessions of 250 messages
        row = index[f"{m['speaker']}: {m['text']}"]
        m["speaker"], m["session"] = SPEAKERS[i % 20], str(i // 250)
        index[f"{m['speaker']}: {m['text']}"] = row
    emb = TableEmbedder(V, index)
    path = workdir / f"filters-{n}.db"
    out: dict = {"messages": n}
    with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
        t0 = time.perf_counter()
        for start in range(0, n, 1000):
            mem.add_many(msgs[start:start + 1000])
        out["ingest_s"] = round(time.perf_counter() - t0, 1)
        mem.search(queries[0], k=10)  # loads the vector cache
        qvecs = [V[index[q]] for q in queries]
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
            if kw:
                out[name]["dense_k50"] = _dense_two_ways(mem, qvecs, kw)
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
