"""What ingest derives, row for row: build memory files the same way at two commits and compare.

    python benchmarks/derived_digest.py --data ../shared/data/locomo --dir D --out main.json
    python benchmarks/derived_digest.py --data ../shared/data/locomo --messages 100000 --dir D --out main100k.json
    python benchmarks/derived_digest.py --compare main.json mine.json

The first form ingests each LoCoMo conversation of ``--data`` into its own file (``Memory.add_many``
of the whole conversation, default ``Config``), the second the conversations' turns replicated to
``--messages`` (each copy 400 days later, as ``scale.py --real`` builds them) in ``add_many`` calls of
1,000. Record time is read from a fixed clock (``record_clock``), so two builds of the same input
write the same rows; passage and statement vectors come from the bundled model through an on-disk
cache (``benchmarks/.cache``), so both builds see the same vectors. Then every row of the derived
tables (segments and their running sums, placements with φ and decision, trajectories, CoreFacts,
their sources and history, the change log without its random ``uid``, the unit and fact vectors,
the work queue) is hashed per table; ``--compare`` names the tables whose rows differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files  # noqa: E402

#: table -> the columns compared (ORDER BY the first); change_log.uid is random by design
TABLES = {
    "messages": "id, speaker, text, at, session, source_id, content_hash, created_at, utc_offset_min, known_at, tokens",
    "segments": "id, trajectory_id, n_messages, vec_sum, entities, start_at, end_at, closed, title",
    "segment_sums": "segment_id, vec_sum",
    "message_units": "message_id, segment_id, entities, phi, decision",
    "trajectories": "id, n_segments, n_messages, vec_sum, entities, start_at, end_at, title",
    "core_facts": "id, subject, type, stmt, slot, valid_from, valid_to, superseded_by, created_at, updated_at, origin",
    "fact_sources": "fact_id, message_id",
    "fact_history": "id, fact_id, at, op, stmt, detail",
    "change_log": "id, at, actor, op, purpose, summary, ids, undo, decision, undoes, origin, images",
    "change_facts": "fact_id, change_id",
    "segment_vec": "rowid, embedding",
    "trajectory_vec": "rowid, embedding",
    "fact_vec": "rowid, embedding",
    "work_queue": "*",
}
FIXED = datetime(2026, 1, 1, tzinfo=timezone.utc)


def digest(path: Path) -> dict[str, list]:
    """table -> [row count, sha256 of its rows in order]."""
    import apsw
    import sqlite_vec

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    from memsif_lite.db.structure import trajectory_counts

    out = {}
    for table, cols in TABLES.items():
        order = cols.split(",")[0] if cols != "*" else "1"
        if table == "trajectories":  # its entity counts as a JSON object, whatever the schema (22: rows)
            cols = cols.replace("entities", trajectory_counts(con))
        h, n = hashlib.sha256(), 0
        for row in con.execute(f"SELECT {cols} FROM {table} ORDER BY {order}"):
            h.update(repr(row).encode())
            n += 1
        out[table] = [n, h.hexdigest()]
    con.close()
    return out


def build(files: list[tuple[str, list[dict]]], folder: Path, per_call: int) -> dict:
    from memsif_lite import Config, Memory
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.timeutil import record_clock

    emb = CachedEmbedder(OnnxEmbedder(), cache_name="derived")
    out: dict = {}
    cpu = 0.0
    with record_clock(lambda: FIXED):
        for name, msgs in files:
            path = folder / f"{name}.db"
            path.unlink(missing_ok=True)
            c = time.process_time()
            with Memory(path, embedder=emb, config=Config()) as mem:
                for s in range(0, len(msgs), per_call):
                    mem.add_many(msgs[s:s + per_call])
            cpu += time.process_time() - c
            emb.save()
            out[name] = digest(path)
    return {"files": out, "cpu_s_with_embedding_misses": round(cpu, 1), "embed_misses": emb.misses}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a LoCoMo folder")
    ap.add_argument("--messages", type=int, help="replicate the turns to this many messages, one file")
    ap.add_argument("--dir", help="where the files are written (default: a temporary folder)")
    ap.add_argument("--out", help="the digests as JSON")
    ap.add_argument("--compare", nargs=2, metavar="JSON", help="compare two --out files")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text())["files"] for p in args.compare)
        diff = [f"{f}.{t}: {a[f][t]} != {b.get(f, {}).get(t)}"
                for f in a for t in a[f] if a[f][t] != b.get(f, {}).get(t)]
        print("\n".join(diff) if diff else f"identical: {len(a)} files, {len(TABLES)} tables each")
        raise SystemExit(1 if diff or set(a) != set(b) else 0)
    from memsif_lite.importers import locomo_turns

    convs = conversation_files(args.data)
    if args.messages:
        from scale import replicate

        turns = [t for _, s in convs for t in locomo_turns(s["conversation"])]
        files = [(f"replicated-{args.messages}", replicate(turns, 0, args.messages))]
        per_call = 1000
    else:
        files = [(sid, list(locomo_turns(s["conversation"]))) for sid, s in convs]
        per_call = 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.dir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        result = build(files, folder, per_call)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps({k: v for k, v in result.items() if k != "files"}))


if __name__ == "__main__":
    main()
