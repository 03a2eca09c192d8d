"""What ``forget`` costs once the memory is large: forgets of single messages spread over a file
``scale.py --keep`` built, CPU and wall seconds each (one write transaction each: the message, what
was derived only from it, and every trace of its words in what stays, docs/history.md).

    cp DIR/scale-1000000-real.db /tmp/copy.db
    python benchmarks/forget_at_scale.py /tmp/copy.db DIR/scale-1000000-real.db.queries.npz

Run it on a copy: it forgets. The messages are those at evenly spaced positions of the file's ids
(the first, the last and ``--forgets - 2`` between), the same on every run of the same file.

    python benchmarks/forget_at_scale.py /tmp/copy.db DIR/scale-1000000-real.db.queries.npz --source 90

``--source N`` instead forgets N messages in one ``forget(source_id=...)``: the first N of the
session in the middle of the file (scale.py's files have no source ids: the copy's messages get
one first, outside the timing).
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import apsw

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import as_built  # noqa: E402

from memsif_lite import Memory  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", help="a copy of a file scale.py --keep built (it is changed)")
    ap.add_argument("queries", help="the .queries.npz beside the original file")
    ap.add_argument("--forgets", type=int, default=5)
    ap.add_argument("--source", type=int, metavar="N", help="one forget of N messages by their source id instead")
    ap.add_argument("--out", help="write the figures here as JSON too")
    args = ap.parse_args()
    _, emb, cfg = as_built(args.queries)
    if args.source:
        return by_source(args, emb, cfg)
    con = apsw.Connection(args.path, flags=apsw.SQLITE_OPEN_READONLY)  # (a read: which ids there are)
    first, last = con.execute("SELECT min(id), max(id) FROM messages").fetchone()
    n = max(2, args.forgets)
    targets = sorted({first + round(i * (last - first) / (n - 1)) for i in range(n)})
    ids = [con.execute("SELECT min(id) FROM messages WHERE id >= ?", (t,)).fetchone()[0] for t in targets]
    con.close()
    cpu, wall = [], []
    with Memory(args.path, embedder=emb, config=cfg) as mem:
        for mid in ids:
            t, c = time.perf_counter(), time.process_time()
            mem.forget(message_id=mid)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
    out = {"file": args.path, "forgets": len(cpu), "message_ids": ids, "cpu_s": [round(x, 3) for x in cpu],
           "wall_s": [round(x, 3) for x in wall], "cpu_s_p50": round(statistics.median(cpu), 3),
           "wall_s_p50": round(statistics.median(wall), 3), "cpu_s_max": round(max(cpu), 3)}
    print(json.dumps(out))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


def by_source(args: argparse.Namespace, emb, cfg) -> None:
    con = apsw.Connection(args.path)
    mid = con.execute("SELECT (min(id) + max(id)) / 2 FROM messages").fetchone()[0]
    session = con.execute("SELECT session FROM messages WHERE id >= ? ORDER BY id LIMIT 1", (mid,)).fetchone()[0]
    ids = [r[0] for r in con.execute("SELECT id FROM messages WHERE session=? ORDER BY id LIMIT ?",
                                     (session, args.source))]
    con.execute(f"UPDATE messages SET source_id='forget-at-scale' WHERE id IN ({','.join(map(str, ids))})")
    con.close()
    with Memory(args.path, embedder=emb, config=cfg) as mem:
        t, c = time.perf_counter(), time.process_time()
        gone = mem.forget(source_id="forget-at-scale")
        wall, cpu = time.perf_counter() - t, time.process_time() - c
    out = {"file": args.path, "session": session, "messages": len(gone), "cpu_s": round(cpu, 3),
           "wall_s": round(wall, 3), "cpu_s_a_message": round(cpu / len(gone), 4)}
    print(json.dumps(out))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
