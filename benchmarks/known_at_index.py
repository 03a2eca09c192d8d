"""Reads by record time on a kept ``scale.py`` file, the way each schema writes them: schema 19's
plain comparison on its index of the text (``known_at <= ?``), schema 20's one range of seconds
(``memsif_lite.db.messages.learnt``) on its index of ``unixepoch(known_at)``. Raw SQL, read-only,
best of seven, CPU ms; bounds keeping ~99 % and ~5 % of the messages; alone and beside a valid-time
filter (``at >= …``, which has its own index); the index's bytes a message (dbstat).

    python benchmarks/known_at_index.py OLD/scale-100000-real.db NEW/scale-100000-real.db

(OLD: a file ``scale.py --keep`` built with a tree before schema 20; NEW: one built with this tree.)
"""

from __future__ import annotations

import argparse
import time

import apsw

from memsif_lite.db.messages import learnt


def measure(path: str) -> None:
    con = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
    version = con.execute("PRAGMA user_version").fetchone()[0]
    n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    size = con.execute("SELECT sum(pgsize) FROM dbstat WHERE name='messages_known_at'").fetchone()[0]
    print(f"{path}: schema {version}, {n} messages, messages_known_at {size / n:.1f} bytes a message")
    times = sorted(k for (k,) in con.execute("SELECT known_at FROM messages"))
    for share in (0.99, 0.05):
        bound = times[int(share * (n - 1))]
        for op in ("<=", ">"):
            cond, args = (learnt(op), (bound,) * 3) if version >= 20 else (f"known_at {op} ?", (bound,))
            for beside in ("", " AND at >= '2000-01-01'"):
                sql = f"SELECT id FROM messages WHERE {cond}{beside}"
                plan = " | ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + sql, args))
                best, kept = float("inf"), 0
                for _ in range(7):
                    c = time.process_time()
                    kept = len(con.execute(sql, args).fetchall())
                    best = min(best, time.process_time() - c)
                print(f"  known_at {op} K{beside or ''}: keeps {kept}, {best * 1000:.1f} ms CPU  [{plan}]")
    con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    for path in ap.parse_args().files:
        measure(path)


if __name__ == "__main__":
    main()
