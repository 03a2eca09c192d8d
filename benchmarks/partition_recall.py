"""Recall of the dense partition (``memsif_lite.partition``) on real embeddings: how much of the
exact int8 top 50 the nearest lists holding a share of the rows keep, for each share.

    python benchmarks/partition_recall.py --data ../shared/data/locomo --out results/partition_recall.json

Corpus: every passage vector in ``benchmarks/.cache`` (the bundled model's vectors of the LoCoMo
and MemoryBank turns, made by the other benchmarks), deduplicated, as int8 codes; lists trained
exactly as ``memsif process`` trains them (``partition.list_count``, ``train`` on the same sample
size, ``assign``, ``probe``). Queries: the LoCoMo dev questions (bundled model, query prefix),
split by conversation: the share is chosen on the first half (conversations 1, 3, 5 of the
folder) and reported on the other (2, 4). The synthetic rows of ``scale.py`` are far easier (a
topic's messages sit around one centre): ``scale.py`` reports their recall at 1M.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files, machine  # noqa: E402
from locomo import CATEGORIES  # noqa: E402

from memsif_lite import partition  # noqa: E402
from memsif_lite.int8 import cosine_distances, quantize  # noqa: E402

SHARES = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    from memsif_lite.embed import OnnxEmbedder

    cache = Path(__file__).resolve().parent / ".cache"
    vs = [z[k] for f in sorted(cache.glob("*.npz")) for z in [np.load(f)] for k in z.files if z[k].shape == (384,)]
    codes = np.unique(quantize(np.stack(vs)), axis=0)
    n = len(codes)
    wide = codes.astype(np.int32)
    sq = np.einsum("ij,ij->i", wide, wide).astype(np.float64)
    halves: list[list[str]] = [[], []]
    for i, (_, sample) in enumerate(conversation_files(args.data)):
        halves[i % 2] += [str(q["question"]) for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
    emb = OnnxEmbedder()
    lists = partition.list_count(n)
    size = min(n, partition.MAX_SAMPLE, partition.SAMPLE_PER_LIST * lists)
    t = time.process_time()
    centroids = partition.train(codes[np.sort(np.random.default_rng(n).choice(n, size, replace=False))], lists)
    assigned = partition.assign(codes, centroids)
    build_s = time.process_time() - t
    sizes = np.bincount(assigned, minlength=lists)
    out: dict = {"corpus": n, "lists": lists, "build_cpu_s": round(build_s, 2), "machine": machine(),
                 "date": time.strftime("%Y-%m-%d"), "halves": []}
    for name, questions in zip(("choose", "report"), halves, strict=True):
        qv = emb.embed(questions, kind="query")
        rows = []
        for share in SHARES:
            recall, scanned = [], []
            for q in qv:
                qf = quantize(q).astype(np.float32)
                d = cosine_distances(codes.astype(np.float32) @ qf, sq, float(qf @ qf))
                exact = set(np.lexsort((np.arange(n), d))[:50].tolist())
                chosen = partition.probe(centroids, sizes, qf, int(share * n))  # no floor of 64 a result
                cand = np.flatnonzero(np.isin(assigned, chosen))
                scanned.append(len(cand) / n)
                recall.append(len(exact & set(cand.tolist())) / 50)
            rows.append({"share": share, "scanned": round(float(np.mean(scanned)), 3),
                         "recall_at_50": round(float(np.mean(recall)), 4), "min": round(float(np.min(recall)), 2)})
            print(name, len(questions), rows[-1], flush=True)
        out["halves"].append({"half": name, "questions": len(questions), "rows": rows})
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
