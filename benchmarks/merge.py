"""What a merge costs (``memsif merge`` / ``Memory.merge_from``): two files of ``--messages`` each
that share half their messages (the common ancestor), whose other halves interleave in time (both
machines were used over the same weeks), merged one into the other; and the merged file's size
against a file ingested directly from the union in time order.

    python benchmarks/merge.py --messages 10000 --out merge_10k.json

Synthetic data and vectors from ``scale.py`` (topics, one 384-d vector per message from a lookup
table, so no model runs: the figures are memsif's own work, not embedding). Offline judges; the
structure rebuild runs inside the merge (``process="inline"``) and, separately, through the queue
(``process="manual"`` then ``process()``). The merged file is checked against the union ingest:
same messages, same segments (by content).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import apsw
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import TableEmbedder, generate  # noqa: E402

from memsif_lite import Config, Memory  # noqa: E402

CFG = Config(sem_low=0.0, sem_high=0.64)


def _size(path: Path) -> int:
    con = apsw.Connection(str(path))
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path.stat().st_size


def _segments(path: Path) -> list[tuple]:
    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = con.execute("SELECT u.segment_id, m.speaker, m.text, m.at FROM message_units u "
                           "JOIN messages m ON m.id=u.message_id ORDER BY m.at, m.id").fetchall()
    finally:
        con.close()
    segs: dict[int, list] = {}
    for sid, *content in rows:
        segs.setdefault(sid, []).append(tuple(content))
    return sorted(tuple(v) for v in segs.values())


def _ingest(path: Path, msgs: list[dict], emb: TableEmbedder) -> float:
    t = time.perf_counter()
    with Memory(path, embedder=emb, config=CFG) as mem:
        for i in range(0, len(msgs), 1000):
            mem.add_many(msgs[i:i + 1000])
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=10_000, help="messages per file (half of them shared)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    n = args.messages
    half = n // 2
    msgs, V, index, _ = generate(half * 3, seed=args.seed)
    emb = TableEmbedder(V, index)
    common, rest = msgs[:half], msgs[half:]
    side = np.random.default_rng(args.seed).permutation(len(rest)) < half
    mine = common + [m for m, s in zip(rest, side, strict=True) if s]
    theirs = common + [m for m, s in zip(rest, side, strict=True) if not s]
    res: dict = {"machine": machine(), "messages_per_file": n, "shared": half, "union": len(msgs),
                 "embedder": "synthetic lookup table (benchmarks/scale.py), 384-d"}
    with tempfile.TemporaryDirectory() as d:
        a, b, union, a2 = (Path(d) / f for f in ("a.db", "b.db", "union.db", "a2.db"))
        res["ingest_s"] = {"mine": round(_ingest(a, mine, emb), 2), "theirs": round(_ingest(b, theirs, emb), 2),
                           "union": round(_ingest(union, msgs, emb), 2)}
        shutil.copy(a, a2)
        before = _size(a)
        with Memory(a, embedder=emb, config=CFG) as mem:
            t = time.perf_counter()
            report = mem.merge_from(b)
            res["merge_inline_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            again = mem.merge_from(b)
            res["merge_again_s"] = round(time.perf_counter() - t, 2)
            problems = mem.check()
        with Memory(a2, embedder=emb, config=CFG, process="manual") as mem:
            t = time.perf_counter()
            queued = mem.merge_from(b)
            res["merge_data_only_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            mem.process()
            res["queue_rebuild_s"] = round(time.perf_counter() - t, 2)
        res["report"] = {k: v for k, v in report.to_dict().items() if not k.startswith("facts_")}
        res["pending_after_data_only"] = queued.pending_steps
        res["second_merge_added"] = again.added
        res["check_problems"] = problems
        res["bytes"] = {"mine_before": before, "merged": _size(a), "merged_via_queue": _size(a2),
                        "union_ingested": _size(union)}
        res["merged_vs_union_size"] = round(res["bytes"]["merged"] / res["bytes"]["union_ingested"], 3)
        res["same_segments_as_union_ingest"] = _segments(a) == _segments(union) == _segments(a2)
    print(json.dumps(res, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
