"""What the change log costs (docs/history.md): its size per 1,000 messages (bytes with its index
and ``change_facts``, rows by operation), and ``as_of`` reads against current ones — ``context``,
``search`` and ``facts`` at a valid time halfway through the conversation, against the same calls
without it (target: ≤ 1.3× at 10,000 messages); medians of wall time and of this process's CPU
time (steadier on a shared machine).

    python benchmarks/history.py --messages 10000 --out history.json

The conversation is the synthetic one of ``benchmarks/scale.py`` (topic words, vectors from a
table), with one first-person statement in every 10 messages ("I live in ...", "I moved to ...",
"my favourite food is ...", ...), so CoreFacts are added, merged and superseded as it goes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

CITIES = "Lisbon Porto Madrid Berlin Oslo Vienna Prague Rome Dublin Tallinn".split()
FOODS = "pizza sushi tacos ramen paella curry falafel dumplings".split()


def statement(i: int) -> str:
    k = i // 10
    return [f"I live in {CITIES[k % 10]}.", f"I moved to {CITIES[(k * 3) % 10]} last week.",
            f"My favourite food is {FOODS[k % 8]}.", f"I work at Studio{k % 7}.",
            f"I live in {CITIES[k % 10]}."][k % 5]


def log_bytes(path: Path) -> int:
    import apsw

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    size = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name IN ('change_log', 'change_facts', "
                       "'change_log_at', 'change_log_undoes', 'change_log_decision')").fetchone()[0]
    con.close()
    return int(size or 0)


def timed(fn, queries) -> list[tuple[float, float]]:
    """(wall ms, CPU ms of this process) per query: on a shared machine the CPU time is the steadier."""
    out = []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        fn(q)
        out.append(((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000))
    return out


def _p50(xs: list[tuple[float, float]], i: int) -> float:
    return float(np.percentile([x[i] for x in xs], 50))


def run(n: int, workdir: Path) -> dict:
    from memsif_lite import Config, Memory

    msgs, V, index, queries = generate(n)
    for i in range(5, n, 10):
        msgs[i]["text"] = statement(i)
    emb = TableEmbedder(V, index)
    path = workdir / f"history-{n}.db"
    with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
        for start in range(0, n, 1000):
            mem.add_many(msgs[start:start + 1000])
        changes = mem.changes()
        ops = Counter(c.op for c in changes)
        half = msgs[n // 2]["at"]
        mem.search(queries[0], k=10)  # loads the vector cache
        mem.context(queries[0], as_of=half)
        results = {}
        for name, now, then in (
                ("context", lambda q: mem.context(q, budget_tokens=1000),
                 lambda q: mem.context(q, budget_tokens=1000, as_of=half)),
                ("search", lambda q: mem.search(q, k=10), lambda q: mem.search(q, k=10, as_of=half)),
                ("facts", lambda q: mem.facts(), lambda q: mem.facts(as_of=half))):
            a, b = [], []
            for _ in range(3):  # interleaved rounds: the machine's load hits both alike
                a += timed(now, queries)
                b += timed(then, queries)
            results[name] = {"current_ms_p50": round(_p50(a, 0), 2), "as_of_ms_p50": round(_p50(b, 0), 2),
                             "ratio": round(_p50(b, 0) / _p50(a, 0), 2),
                             "current_cpu_ms_p50": round(_p50(a, 1), 3), "as_of_cpu_ms_p50": round(_p50(b, 1), 3),
                             "cpu_ratio": round(_p50(b, 1) / _p50(a, 1), 2)}
        facts = len(mem.facts(include_superseded=True))
    size = log_bytes(path)
    return {"messages": n, "core_facts": facts, "log_rows": len(changes),
            "log_rows_per_1000_messages": round(len(changes) * 1000 / n, 1),
            "log_bytes_per_1000_messages": round(size * 1000 / n),
            "log_share_of_file": round(size / path.stat().st_size, 3),
            "rows_by_op": dict(sorted(ops.items())), "as_of": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        res = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **run(args.messages, Path(d))}
    text = json.dumps(res, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
