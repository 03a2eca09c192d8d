"""What ``add`` costs once the memory is large: five ``add_many`` of 1,000 messages added to a
file ``scale.py --keep`` built, CPU and wall seconds per call (embedding is not timed: vectors
come from a table, as in scale.py).

    cp DIR/scale-1000000.db /tmp/copy.db
    python benchmarks/ingest_at_scale.py /tmp/copy.db DIR/scale-1000000.db.queries.npz
    cp DIR/scale-1000000-real.db /tmp/copy-real.db
    python benchmarks/ingest_at_scale.py /tmp/copy-real.db DIR/scale-1000000-real.db.queries.npz \\
        --real ../shared/data/locomo --vectors /tmp/locomo-vectors.npy

Synthetic (the default): scale.py's kind of text and vectors. ``--real DIR``: the LoCoMo turns
of DIR replicated past the file's last message, the way ``scale.py --real`` built it, vectors
from the bundled model (embedded once before the timing; ``--vectors`` keeps them in a file for
the next run). Run it on a copy: it adds to the file.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import DIM, FILLER, TableEmbedder, _unit, locomo_passages, replicate  # noqa: E402

from memsif_lite import Config, Memory  # noqa: E402

CALLS, PER_CALL = 5, 1000


def synthetic(start: int):
    rng = np.random.default_rng(7)
    centres = _unit(rng.standard_normal((200, DIM)))
    msgs, V, index = [], [], {}
    t0 = 1_700_000_000 + 60 * start
    for i in range(CALLS * PER_CALL):
        k = (i // 8) % 200
        text = f"t{k}w{i % 5} extra {FILLER[i % len(FILLER)]} #{start + i}"
        sp = "Ana" if i % 2 else "Ben"
        msgs.append({"speaker": sp, "text": text, "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + 60 * i))})
        index[f"{sp}: {text}"] = i
        V.append(_unit(0.8 * centres[k] + 0.6 * _unit(rng.standard_normal(DIM))))
    return msgs, np.stack(V), index


def real(data: str, start: int, vectors: str | None):
    turns, _, passages = locomo_passages(data)
    if vectors and Path(vectors).exists():
        V = np.load(vectors)
    else:
        from memsif_lite.embed import OnnxEmbedder
        V = OnnxEmbedder().embed(passages, kind="passage")
        if vectors:
            np.save(vectors, V)
    if len(V) != len(passages):
        raise SystemExit(f"{vectors} holds {len(V)} vectors, not {len(passages)}: remove it")
    return replicate(turns, start, start + CALLS * PER_CALL), V, {p: i for i, p in enumerate(passages)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("db", help="a COPY of a file scale.py --keep built (this adds to it)")
    ap.add_argument("queries", help="its .queries.npz (the model id and levels the file was built with)")
    ap.add_argument("--real", metavar="DIR", help="a LoCoMo folder: the file was built with scale.py --real DIR")
    ap.add_argument("--vectors", help="with --real: a .npy to keep the passage vectors in between runs")
    ap.add_argument("--start", type=int, default=1_000_000, help="messages the file holds (where text resumes)")
    args = ap.parse_args()
    msgs, V, index = real(args.real, args.start, args.vectors) if args.real else synthetic(args.start)
    saved = np.load(args.queries)
    TableEmbedder.model_id, TableEmbedder.sem_levels = str(saved["model_id"]), tuple(saved["sem"].tolist())
    emb = TableEmbedder(V, index)
    cfg = Config() if args.real else Config(sem_low=0.0, sem_high=0.64)
    out = []
    with Memory(args.db, embedder=emb, config=cfg) as mem:
        for s in range(0, CALLS * PER_CALL, PER_CALL):
            c, w = time.process_time(), time.perf_counter()
            mem.add_many(msgs[s:s + PER_CALL])
            out.append((round((time.process_time() - c) * 1000 / PER_CALL, 3),
                        round((time.perf_counter() - w) * 1000 / PER_CALL, 3)))
    print(json.dumps({"text": "locomo" if args.real else "synthetic", "per_call_ms_per_message_cpu_wall": out,
                      "ms_per_message_cpu_p50": round(float(np.median([o[0] for o in out])), 3),
                      "ms_per_message_cpu_mean": round(float(np.mean([o[0] for o in out])), 3)}))


if __name__ == "__main__":
    main()
