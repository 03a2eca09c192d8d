"""What record time costs (docs/history.md, "How known_at rewinds"): ingest time and log size with
the before images every change keeps, and ``known_at`` reads (the state rewound from the log)
against current ones — ``facts``, ``segments``, ``context`` at the record time halfway through.

    python benchmarks/known_at.py --messages 10000 --out known_at.json
    python benchmarks/known_at.py --messages 10000 --ingest-only   # also runs on a tree without known_at

The conversation is benchmarks/history.py's (scale.py's synthetic one, one first-person statement in
every 10 messages), added 1,000 messages a call, each call one hour of record time later.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from history import log_bytes, statement, timed  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

R0 = datetime(2026, 1, 1)


def _clock(hour: int):
    try:
        from memsif_lite.timeutil import record_clock
    except ImportError:  # a tree without record time: the system clock
        return contextlib.nullcontext()
    return record_clock(lambda: R0 + timedelta(hours=hour))


def run(n: int, workdir: Path, ingest_only: bool, n_queries: int | None = None) -> dict:
    from memsif_lite import Config, Memory

    msgs, V, index, queries = generate(n)
    queries = queries[:n_queries]
    for i in range(5, n, 10):
        msgs[i]["text"] = statement(i)
    emb = TableEmbedder(V, index)
    path = workdir / f"known-at-{n}.db"
    chunks = list(range(0, n, 1000))
    with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
        t = time.perf_counter()
        for h, start in enumerate(chunks):
            with _clock(h):
                mem.add_many(msgs[start:start + 1000])
        ingest = time.perf_counter() - t
        out: dict = {"messages": n, "ingest_s": round(ingest, 2),
                     "ingest_ms_per_message": round(ingest * 1000 / n, 3)}
        if ingest_only:
            return {**out, "log_bytes_per_1000_messages": round(log_bytes(path) * 1000 / n)}
        half = (R0 + timedelta(hours=len(chunks) // 2 - 1, minutes=30)).isoformat()
        mem.search(queries[0], k=10)  # loads the vector cache
        results = {}
        for name, now, then in (
                ("facts", lambda q: mem.facts(include_superseded=True),
                 lambda q: mem.facts(include_superseded=True, known_at=half)),
                ("segments", lambda q: mem.segments(), lambda q: mem.segments(known_at=half)),
                ("context", lambda q: mem.context(q, budget_tokens=1000),
                 lambda q: mem.context(q, budget_tokens=1000, known_at=half))):
            a, b = [], []
            qs = queries if name == "context" else queries[:5]
            for _ in range(3):  # interleaved rounds: the machine's load hits both alike
                a += timed(now, qs)
                b += timed(then, qs)
            results[name] = {"current_ms_p50": round(float(np.percentile(a, 50)), 2),
                             "known_at_ms_p50": round(float(np.percentile(b, 50)), 2),
                             "ratio": round(float(np.percentile(b, 50) / np.percentile(a, 50)), 2)}
    import apsw

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    col = "images" if any(r[1] == "images" for r in con.execute("PRAGMA table_info(change_log)")) else "before"
    before = con.execute(f"SELECT coalesce(sum(length({col})), 0) FROM change_log").fetchone()[0]
    con.close()
    size = log_bytes(path)
    return {**out, "log_bytes_per_1000_messages": round(size * 1000 / n),
            "before_image_bytes_per_1000_messages": round(before * 1000 / n),
            "log_share_of_file": round(size / path.stat().st_size, 3), "known_at_half": half, "reads": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--ingest-only", action="store_true")
    ap.add_argument("--queries", type=int, default=None, help="use only the first N queries")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        res = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **run(args.messages, Path(d), args.ingest_only,
                                                                                args.queries)}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
