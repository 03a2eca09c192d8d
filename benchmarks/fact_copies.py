"""What a long life does to the CoreFacts: the same things said again and again.

    python benchmarks/fact_copies.py --locomo ../shared/data/locomo --copies 3
    python benchmarks/fact_copies.py --memorybank ../shared/data/memorybank

``--locomo DIR --copies N``: the LoCoMo turns of DIR, replicated N times as ``scale.py --real``
replicates them (each copy 400 days later: the same people saying the same things again), added
one copy per ``add_many`` to one memory file, offline, with the bundled model. ``--memorybank
DIR``: each MemoryBank user's ten days (the user's message, then the companion's reply, a minute
apart) in a file of its own. Prints the current CoreFacts, how many distinct statements (subject
and statement, any case) they hold — a fact kept twice is a copy — and each operation's count from
the facts' history (``op_supersede``: facts ended); with ``--locomo``, also the CoreFacts the
contexts of up to 50 of its questions show (1,000 tokens each) and how many distinct statements
among them; ``--out F`` writes the same as JSON with the date and machine.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from memsif_lite import Memory  # noqa: E402


def _facts(path: Path) -> collections.Counter:
    import apsw

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        current, distinct = con.execute(
            "SELECT count(*), count(DISTINCT lower(subject) || '|' || lower(stmt)) FROM core_facts "
            "WHERE valid_to IS NULL").fetchone()
        out = collections.Counter({"current_facts": current, "distinct_statements": distinct})
        out.update({f"op_{op}": n for op, n in con.execute("SELECT op, count(*) FROM fact_history GROUP BY op")})
        return out
    finally:
        con.close()


def locomo(data: str, copies: int, folder: Path) -> collections.Counter:
    from scale import locomo_passages, replicate

    turns, questions, _ = locomo_passages(data)
    msgs = replicate(turns, 0, copies * len(turns))
    path = folder / "locomo.db"
    with Memory(path) as mem:
        for i in range(copies):
            mem.add_many(msgs[i * len(turns):(i + 1) * len(turns)])
        out = _facts(path)
        for q in questions:  # what a context shows of them: a copy takes a place another fact could
            shown = [f.stmt.lower() for f in mem.context(q, budget_tokens=1000).facts if f.kind == "core"]
            out.update({"context_core_facts_shown": len(shown), "context_distinct_shown": len(set(shown)),
                        "contexts": 1})
    return out


def memorybank(data: str, folder: Path) -> collections.Counter:
    users = json.loads((Path(data) / "memory_bank_en.json").read_text(encoding="utf-8"))
    total: collections.Counter = collections.Counter()
    for name, user in users.items():
        msgs = []
        for day, exchanges in sorted(user["history"].items()):
            for i, e in enumerate(exchanges):
                msgs.append({"speaker": name, "text": e["query"], "at": f"{day}T20:{2 * i:02d}:00", "session": day})
                msgs.append({"speaker": "AI companion", "text": e["response"], "at": f"{day}T20:{2 * i + 1:02d}:00",
                             "session": day})
        path = folder / f"{name}.db"
        with Memory(path) as mem:
            mem.add_many(msgs)
        total.update(_facts(path))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--locomo", metavar="DIR", help="a LoCoMo folder (its conversations replicated --copies times)")
    src.add_argument("--memorybank", metavar="DIR", help="the MemoryBank folder (memory_bank_en.json)")
    ap.add_argument("--copies", type=int, default=3, help="with --locomo: how many times the conversations are said")
    ap.add_argument("--out", help="write the result as JSON here too")
    args = ap.parse_args()
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as d:
        got = locomo(args.locomo, args.copies, Path(d)) if args.locomo else memorybank(args.memorybank, Path(d))
    doc = {"data": "locomo" if args.locomo else "memorybank", **({"copies": args.copies} if args.locomo else {}),
           **dict(sorted(got.items())), "wall_s": round(time.perf_counter() - t0, 1),
           "cpu_s": round(time.process_time() - c0, 1), "date": time.strftime("%Y-%m-%d"), "machine": machine()}
    print(json.dumps(doc))
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
