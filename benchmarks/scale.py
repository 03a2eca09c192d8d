"""How cost grows with the number of messages: ingest time per message, query latency, file
size and peak RSS, next to a numpy brute-force cosine scan over the same vectors.

    python benchmarks/scale.py --messages 1000,10000,100000 --out scale.json

Synthetic conversations (so the embedder does not dominate): a seeded generator makes topics,
each with a random unit "centre" vector and five topic words; a conversation is a run of
topical stretches of 4–12 messages, topics recurring over time. A message's vector is
normalise(0.8·centre + 0.6·noise) (same-topic cosine ≈ 0.64, unrelated ≈ 0) and its text is two
speakers' names plus topic words and filler words, so BM25, key entities, segments and
trajectories all have something real to work on (Config sem_low=0, sem_high=0.64 matches the
generator). Vectors come from a lookup table keyed by the text, through the normal Embedder
protocol. ``query_ms_*`` time ``Memory.context()`` (facts, structure-aware hybrid retrieval and
a 1,000-token context); ``search_ms_*`` time ``Memory.search(k=10)``; the numpy reference is
``V @ q`` plus a top-10 partial sort over all vectors in memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

DIM = 384
FILLER = ("really maybe today later weekend project morning evening friends family plans idea "
          "coffee walk music movie book dinner work trip city garden photo class team").split()


class TableEmbedder:
    model_id, dim, metric, sem_levels = "synthetic-384", DIM, "cosine", (0.0, 0.64)

    def __init__(self, table: dict[str, np.ndarray], rng: np.random.Generator):
        self.table, self.rng = table, rng

    def embed(self, texts, *, kind):
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.table.get(t)
            if v is None:  # queries: a fresh vector near a topic named in the text
                v = self.table.get(t.split("|", 1)[0], None)
                v = v if v is not None else _unit(self.rng.standard_normal(DIM))
            out[i] = v
        return out


def _unit(v):
    return (v / np.linalg.norm(v)).astype(np.float32)


def generate(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_topics = max(8, n // 60)
    centres = [_unit(rng.standard_normal(DIM)) for _ in range(n_topics)]
    words = [[f"t{k}w{j}" for j in range(5)] for k in range(n_topics)]
    msgs, table, topic_of = [], {}, []
    t0 = 1_700_000_000
    while len(msgs) < n:
        k = int(rng.integers(n_topics))
        for _ in range(int(rng.integers(4, 13))):
            if len(msgs) >= n:
                break
            i = len(msgs)
            speaker = "Ana" if i % 2 else "Ben"
            text = " ".join(list(rng.choice(words[k], 3)) + list(rng.choice(FILLER, 5))) + f" #{i}"
            v = _unit(0.8 * centres[k] + 0.6 * _unit(rng.standard_normal(DIM)))
            table[f"{speaker}: {text}"] = v
            at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + 60 * i))
            msgs.append({"speaker": speaker, "text": text, "at": at})
            topic_of.append(k)
    queries = []
    for _ in range(50):
        k = int(rng.integers(n_topics))
        q = f"what about {words[k][0]} and {words[k][1]}"
        table[q] = _unit(0.8 * centres[k] + 0.6 * _unit(rng.standard_normal(DIM)))
        queries.append(q)
    return msgs, table, queries, rng


def run_size(n: int, workdir: Path) -> dict:
    from memsif_lite import Config, Memory

    msgs, table, queries, rng = generate(n)
    emb = TableEmbedder(table, rng)
    path = workdir / f"scale-{n}.db"
    cfg = Config(sem_low=0.0, sem_high=0.64)
    t0 = time.perf_counter()
    with Memory(path, embedder=emb, config=cfg) as mem:
        for start in range(0, n, 1000):
            mem.add_many(msgs[start:start + 1000])
        ingest_s = time.perf_counter() - t0
        ctx_ms, search_ms = [], []
        for q in queries:
            t = time.perf_counter()
            mem.context(q, budget_tokens=1000)
            ctx_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            mem.search(q, k=10)
            search_ms.append((time.perf_counter() - t) * 1000)
        stats = mem.stats()
    # closing the last connection checkpointed the WAL: the file's size is the data's
    V = np.stack([table[f"{m['speaker']}: {m['text']}"] for m in msgs])
    brute = []
    for q in queries:
        qv = table[q]
        t = time.perf_counter()
        s = V @ qv
        top = np.argpartition(-s, 10)[:10]
        top[np.argsort(-s[top])]
        brute.append((time.perf_counter() - t) * 1000)
    return {
        "messages": n,
        "ingest_ms_per_message": round(ingest_s * 1000 / n, 3),
        "query_ms_p50": round(float(np.percentile(ctx_ms, 50)), 2),
        "query_ms_p95": round(float(np.percentile(ctx_ms, 95)), 2),
        "search_ms_p50": round(float(np.percentile(search_ms, 50)), 2),
        "search_ms_p95": round(float(np.percentile(search_ms, 95)), 2),
        "numpy_bruteforce_ms_p50": round(float(np.percentile(brute, 50)), 3),
        "file_bytes": path.stat().st_size,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "segments": stats["segments"],
        "trajectories": stats["trajectories"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", default="1000,10000,100000")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as d:
        for n in (int(x) for x in args.messages.split(",")):
            r = run_size(n, Path(d))
            runs.append(r)
            print(json.dumps(r), flush=True)
    Path(args.out).write_text(json.dumps({"runs": runs, "machine": machine(),
                                          "date": time.strftime("%Y-%m-%d")}, indent=2))
    print("| messages | ingest ms/msg | context ms p50/p95 | search ms p50/p95 | numpy scan ms p50 | file MB "
          "| peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['messages']} | {r['ingest_ms_per_message']} | {r['query_ms_p50']}/{r['query_ms_p95']} | "
              f"{r['search_ms_p50']}/{r['search_ms_p95']} | {r['numpy_bruteforce_ms_p50']} | "
              f"{r['file_bytes'] / 1e6:.1f} | {r['peak_rss_mb']} |")


if __name__ == "__main__":
    main()
