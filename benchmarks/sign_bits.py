"""What a sign-bit shortlist would cost at scale (issue 31's other dense design; not in the
package): on a kept ``scale.py`` file, the vector cache's int8 codes as loaded, each row's sign
bits around the mean code (48 bytes at dimension 384), and for each saved question: the Hamming
distance of every row to the question's bits, the nearest ``--shortlist`` share of all rows, and
the exact int8 ranking of those (every row at the shortlist's last distance is kept, so a shortlist
is at least the share asked); against the partition's scan that ``Memory.search`` runs today (the
nearest lists holding ``partition.scan_budget`` rows: 300,000 at 1M). Wall ms p50 / p95 of each
step, one thread, and the overlap of the two top 50s with the exact top 50 over every row. Recall
here is only meaningful on a file of distinct texts (the replicated LoCoMo file holds each vector
~360 times: ``partition_recall.py --sentences`` measures recall on real distinct text).

    python benchmarks/sign_bits.py DIR/scale-1000000-real.db --out results/sign_bits_1m_locomo_text.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import as_built  # noqa: E402

from memsif_lite import Memory  # noqa: E402
from memsif_lite.int8 import cosine_distances, quantize, squared_norms  # noqa: E402


def hamming(cols: np.ndarray, q: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """Hamming distances of every row (``cols``: words × rows uint64, one row of words per 64
    bits) to ``q`` (words uint64), into ``out`` (uint16)."""
    np.bitwise_xor(cols[0], q[0], out=tmp)
    np.bitwise_count(tmp, out=tmp)
    np.copyto(out, tmp, casting="unsafe")
    for w in range(1, len(cols)):
        np.bitwise_xor(cols[w], q[w], out=tmp)
        np.bitwise_count(tmp, out=tmp)
        out += tmp.astype(np.uint16)
    return out


def centred_bits(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the centre: the mean code rounded down, as int8; each row's bits, packed: 1 where its code is
    above the centre) — a question's bits are ``np.packbits(quantize(q) > centre)``."""
    centre = np.floor(codes.mean(axis=0, dtype=np.float64)).astype(np.int8)
    bits = np.empty((len(codes), codes.shape[1] // 8), dtype=np.uint8)
    for s in range(0, len(codes), 65536):
        bits[s:s + 65536] = np.packbits(codes[s:s + 65536] > centre, axis=1)
    return centre, bits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--shortlist", type=float, nargs="+", default=[0.02, 0.05, 0.1])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    queries, emb, cfg = as_built(args.file + ".queries.npz")
    with Memory(args.file, embedder=emb, config=cfg, read_only=True) as mem:
        mem.search(queries[0], k=10)  # loads the vector cache
        cache = mem._db.messages.cache  # benchmark-only: the cache's arrays, as loaded
        n = cache.size
        codes, ids = cache._codes[:n], cache._ids[:n]
        sq = squared_norms(codes)
        t = time.perf_counter()
        center, bits = centred_bits(codes)
        cols = np.ascontiguousarray(bits.view(np.uint64).T)
        build_ms = (time.perf_counter() - t) * 1000
        wide = codes.view(np.uint64)  # a row's 384 codes as 48 words: gathered a row at a time
        h, tmp = np.empty(n, dtype=np.uint16), np.empty(n, dtype=np.uint64)
        steps: dict[str, list[float]] = {}
        overlap: dict[str, list[float]] = {}

        def note(name: str, since: float) -> float:
            now = time.perf_counter()
            steps.setdefault(name, []).append((now - since) * 1000)
            return now

        for q in queries:
            qv = emb.embed([q], kind="query")[0]
            qf = quantize(qv).astype(np.float32)
            t = time.perf_counter()
            today = {m for m, _ in cache.search(qv, 50)}
            t = note("partition scan (today)", t)
            d = np.empty(n, dtype=np.float32)
            for s in range(0, n, 65536):
                d[s:s + 65536] = codes[s:s + 65536].astype(np.float32) @ qf
            dist = cosine_distances(d, sq, float(qf @ qf))
            exact = set(ids[np.lexsort((ids, dist))[:50]].tolist())
            overlap.setdefault("partition scan (today)", []).append(len(today & exact) / 50)
            for share in args.shortlist:
                t = time.perf_counter()
                qb = np.packbits(quantize(qv) > center).view(np.uint64)
                hamming(cols, qb, h, tmp)
                t = note(f"{share}: hamming", t)
                counts = np.cumsum(np.bincount(h, minlength=codes.shape[1] + 1))
                rows = np.flatnonzero(h <= int(np.searchsorted(counts, int(share * n))))
                t = note(f"{share}: select", t)
                sub = wide[rows].view(np.int8)
                t = note(f"{share}: gather", t)
                dots = np.empty(len(rows), dtype=np.float32)
                for s in range(0, len(rows), 1024):
                    dots[s:s + 1024] = sub[s:s + 1024].astype(np.float32) @ qf
                dd = cosine_distances(dots, sq[rows], float(qf @ qf))
                top = set(ids[rows[np.lexsort((ids[rows], dd))[:50]]].tolist())
                note(f"{share}: rank", t)
                overlap.setdefault(f"{share}: sign bits", []).append(len(top & exact) / 50)
        p = lambda v, q: round(float(np.percentile(v, q)), 2)  # noqa: E731
        out = {"file": args.file, "rows": n, "bits_build_ms": round(build_ms, 1),
               "bits_mb": round(bits.nbytes / 1e6, 1),
               "steps_ms_p50_p95": {k: (p(v, 50), p(v, 95)) for k, v in steps.items()},
               "recall_at_50": {k: round(float(np.mean(v)), 4) for k, v in overlap.items()},
               "machine": machine(), "date": time.strftime("%Y-%m-%d")}
        for share in args.shortlist:
            total = np.sum([steps[f"{share}: {s}"] for s in ("hamming", "select", "gather", "rank")], axis=0)
            out["steps_ms_p50_p95"][f"{share}: total"] = (p(total, 50), p(total, 95))
        print(json.dumps(out, indent=2))
        Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
