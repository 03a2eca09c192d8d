"""How cost grows with the number of messages: ingest time per message, query latency, file
size (bytes per message, per table), the vector cache's memory and peak RSS, next to a numpy
float32 scan over the same vectors in the same process.

    python benchmarks/scale.py --messages 1000,10000,100000 --out scale.json
    python benchmarks/scale.py --messages 100000 --real ../shared/data/locomo --out scale_real.json

Synthetic conversations (so the embedder does not dominate): a seeded generator makes topics,
each with a random unit "centre" vector and five topic words; a conversation is a run of
topical stretches of 4–12 messages, topics recurring over time. A message's vector is
normalise(0.8·centre + 0.6·noise) (same-topic cosine ≈ 0.64, unrelated ≈ 0) and its text is two
speakers' names plus topic words and filler words, so BM25, key entities, segments and
trajectories all have something real to work on (Config sem_low=0, sem_high=0.64 matches the
generator). Vectors come from a lookup table keyed by the text, through the normal Embedder
protocol. ``--real DIR`` instead replicates the LoCoMo turns of DIR (real text, vectors from the
bundled model, embedded once) to the requested size, and asks the LoCoMo questions (their
vectors from the bundled model, precomputed, so no timing includes embedding). ``query_ms_*``
time ``Memory.context()`` (facts, structure-aware hybrid retrieval and a 1,000-token context);
``search_ms_*`` time ``Memory.search(k=10)``; the numpy reference is ``V @ q`` plus a top-10
partial sort over all float32 vectors in memory. Each size runs in its own process (one BLAS
thread unless the environment says otherwise), so peak RSS is that size's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, speed_probe  # noqa: E402

DIM = 384
FILLER = ("really maybe today later weekend project morning evening friends family plans idea "
          "coffee walk music movie book dinner work trip city garden photo class team").split()


class TableEmbedder:
    """Vectors by text from one matrix (``index`` maps a passage or a question to its row)."""

    model_id, dim, metric, sem_levels = "synthetic-384", DIM, "cosine", (0.0, 0.64)

    def __init__(self, V: np.ndarray, index: dict[str, int]):
        self.V, self.index = V, index

    def embed(self, texts, *, kind):
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            j = self.index.get(t)
            if j is None:  # a CoreFact statement (real text): a seeded random unit vector
                rng = np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little"))
                out[i] = _unit(rng.standard_normal(DIM))
            else:
                out[i] = self.V[j]
        return out


def _unit(v):
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def generate(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_topics = max(8, n // 60)
    centres = _unit(rng.standard_normal((n_topics, DIM)))
    words = [[f"t{k}w{j}" for j in range(5)] for k in range(n_topics)]
    msgs, topic_of = [], []
    t0 = 1_700_000_000
    while len(msgs) < n:
        k = int(rng.integers(n_topics))
        for _ in range(int(rng.integers(4, 13))):
            if len(msgs) >= n:
                break
            i = len(msgs)
            speaker = "Ana" if i % 2 else "Ben"
            text = " ".join(list(rng.choice(words[k], 3)) + list(rng.choice(FILLER, 5))) + f" #{i}"
            at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + 60 * i))
            msgs.append({"speaker": speaker, "text": text, "at": at})
            topic_of.append(k)
    V = np.empty((n + 50, DIM), dtype=np.float32)
    for s in range(0, n, 10_000):  # in blocks: no n × dim float64 temporaries
        e = min(s + 10_000, n)
        V[s:e] = _unit(0.8 * centres[topic_of[s:e]] + 0.6 * _unit(rng.standard_normal((e - s, DIM))))
    index = {f"{m['speaker']}: {m['text']}": i for i, m in enumerate(msgs)}
    queries = []
    for j in range(50):
        k = int(rng.integers(n_topics))
        q = f"what about {words[k][0]} and {words[k][1]}"
        V[n + j] = _unit(0.8 * centres[k] + 0.6 * _unit(rng.standard_normal(DIM)))
        index[q] = n + j
        queries.append(q)
    return msgs, V, index, queries


def locomo_passages(data: str):
    """The LoCoMo turns of ``data``, up to 50 of their questions, and the distinct ``Speaker: text``
    passages, in the order :func:`generate_real` embeds them."""
    from _common import conversation_files
    from locomo import CATEGORIES

    from memsif_lite.importers import locomo_turns

    turns, questions = [], []
    for _, sample in conversation_files(data):
        turns += list(locomo_turns(sample["conversation"]))
        questions += [str(q["question"]) for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
    questions = questions[::max(1, len(questions) // 50)][:50]
    passages = list(dict.fromkeys(f"{t['speaker']}: {t['text']}" for t in turns))
    return turns, questions, passages


def replicate(turns, start: int, stop: int) -> list[dict]:
    """Messages ``start`` .. ``stop - 1`` of the LoCoMo turns replicated (each copy 400 days later)."""
    from memsif_lite.timeutil import to_stored

    msgs = []
    for i in range(start, stop):
        t = turns[i % len(turns)]
        rep = i // len(turns)
        msgs.append({"speaker": t["speaker"], "text": t["text"], "session": f"{rep}-{t['session']}",
                     "at": to_stored(t["at"] + timedelta(days=400 * rep))})
    return msgs


def generate_real(n: int, data: str):
    """LoCoMo turns replicated to ``n`` messages (each copy 400 days later), bundled-model vectors."""
    from memsif_lite.embed import OnnxEmbedder

    turns, questions, passages = locomo_passages(data)
    emb = OnnxEmbedder()
    V = np.concatenate([emb.embed(passages, kind="passage"), emb.embed(questions, kind="query")])
    index = {p: i for i, p in enumerate(passages)} | {q: len(passages) + i for i, q in enumerate(questions)}
    TableEmbedder.sem_levels = emb.sem_levels
    TableEmbedder.model_id = "locomo-e5-table"
    return replicate(turns, 0, n), V, index, questions


def _table_bytes(path: Path, n: int) -> dict[str, float]:
    """Bytes per message of each table with its indexes and shadow tables (``dbstat``)."""
    import apsw

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    rows = con.execute("SELECT s.name, m.tbl_name, sum(s.pgsize) FROM dbstat s "
                       "LEFT JOIN sqlite_schema m ON m.name = s.name GROUP BY s.name").fetchall()
    con.close()
    out: dict[str, float] = {}
    for name, tbl, size in rows:
        owner = tbl or name
        for vt in ("message_vec", "segment_vec", "trajectory_vec", "fact_vec", "active_fact_vec", "message_fts"):
            if owner.startswith(vt + "_"):
                owner = vt
        out[owner] = out.get(owner, 0.0) + size / n
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= 1}


def build(n: int, path: Path, real: str | None = None) -> dict:
    """Ingest ``n`` messages into ``path`` (through ``Memory.add_many``, 1,000 a call) and save the
    questions with their vectors beside it (``<path>.queries.npz``) for :func:`measure`."""
    from memsif_lite import Config, Memory

    msgs, V, index, queries = generate_real(n, real) if real else generate(n)
    emb = TableEmbedder(V, index)
    cfg = Config(sem_low=0.0, sem_high=0.64) if not real else Config()
    t0 = time.perf_counter()
    c0 = time.process_time()
    with Memory(path, embedder=emb, config=cfg) as mem:
        for start in range(0, n, 1000):
            mem.add_many(msgs[start:start + 1000])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    np.savez(str(path) + ".queries.npz", vectors=V[[index[q] for q in queries]], questions=np.array(queries),
             model_id=np.array(emb.model_id), sem=np.array(emb.sem_levels), real=np.array(bool(real)))
    return {"messages": n, "text": "locomo" if real else "synthetic",
            "ingest_ms_per_message": round(wall * 1000 / n, 3), "ingest_cpu_ms_per_message": round(cpu * 1000 / n, 3)}


def as_built(queries_npz: str):
    """(questions, embedder, Config) to open a file :func:`build` wrote with, from the
    ``.queries.npz`` saved beside it: the questions' vectors and the model id and semantic levels
    the file records; the thresholds it was built with."""
    from memsif_lite import Config

    saved = np.load(queries_npz)
    queries = [str(q) for q in saved["questions"]]
    TableEmbedder.model_id, TableEmbedder.sem_levels = str(saved["model_id"]), tuple(saved["sem"].tolist())
    emb = TableEmbedder(saved["vectors"], {q: i for i, q in enumerate(queries)})
    return queries, emb, Config() if bool(saved["real"]) else Config(sem_low=0.0, sem_high=0.64)


def measure(path: Path) -> dict:
    """Open a file :func:`build` wrote, in a fresh process: the first dense search after opening
    (it loads the vector cache), ``context`` and ``search`` latency over the saved questions, peak
    RSS (read before the numpy reference below allocates its matrix), then a numpy float32 scan
    over the file's own vectors for scale; then the file opened again, and its first ``context``
    (it loads the message, segment and CoreFact vectors; the process's imports and token counter
    are loaded by then: ``first_search.py --context`` times it in a fresh process)."""
    from memsif_lite import Memory, partition
    from memsif_lite.int8 import dequantize

    queries, emb, cfg = as_built(str(path) + ".queries.npz")
    t0, c0 = time.perf_counter(), time.process_time()
    with Memory(path, embedder=emb, config=cfg) as mem:  # what `memsif process` does: the dense partition
        mem.process()                                    # trained and every message listed, if not yet
    partition_s, partition_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    t0, c0 = time.perf_counter(), time.process_time()
    with Memory(path, embedder=emb, config=cfg) as mem:  # opening checks the file (PRAGMA quick_check)
        open_ms, open_cpu_ms = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
        t0, c0 = time.perf_counter(), time.process_time()
        mem.search(queries[0], k=10)  # the first query loads the vector cache: timed separately
        load_ms, load_cpu_ms = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
        ctx_ms, search_ms, ctx_cpu, search_cpu = [], [], [], []
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            mem.context(q, budget_tokens=1000)
            ctx_ms.append((time.perf_counter() - t) * 1000)
            ctx_cpu.append((time.process_time() - c) * 1000)
            t, c = time.perf_counter(), time.process_time()
            mem.search(q, k=10)
            search_ms.append((time.perf_counter() - t) * 1000)
            search_cpu.append((time.process_time() - c) * 1000)
        stats = mem.stats()
        cache_bytes = sum(c.nbytes for c in mem._db.caches)  # benchmark-only peek: all vector caches
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        dense_ms, recall = [], []  # the dense top 50 alone, and its recall of the exact scan's (every row)
        share, cap = partition.SCAN_SHARE, partition.SCAN_ROWS
        for qv in emb.V:
            t = time.perf_counter()
            got = mem._db.messages.nearest(qv, 50)
            dense_ms.append((time.perf_counter() - t) * 1000)
            partition.SCAN_SHARE, partition.SCAN_ROWS = 1.0, mem._db.messages.cache.size
            truth = mem._db.messages.nearest(qv, 50)
            partition.SCAN_SHARE, partition.SCAN_ROWS = share, cap
            recall.append(len({m for m, _ in got} & {m for m, _ in truth}) / max(1, len(truth)))
        listed = mem._db.vectors._index is not None
        codes = [np.frombuffer(r[0], dtype=np.int8) for r in mem._db.con.execute("SELECT embedding FROM message_vec")]
    M = dequantize(np.stack(codes))
    del codes
    brute = []
    for qv in emb.V:
        t = time.perf_counter()
        s = M @ qv
        top = np.argpartition(-s, 10)[:10]
        top[np.argsort(-s[top])]
        brute.append((time.perf_counter() - t) * 1000)
    n = len(M)
    del M
    with Memory(path, embedder=emb, config=cfg) as mem:  # opened again: the first `context` (it loads every cache)
        t0, c0 = time.perf_counter(), time.process_time()
        mem.context(queries[0], budget_tokens=1000)
        first_ctx_ms, first_ctx_cpu_ms = (time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000
    size = path.stat().st_size
    scan = float(np.percentile(brute, 50))

    def p(xs: list[float], q: int) -> float:
        return round(float(np.percentile(xs, q)), 2)
    return {
        "query_ms_p50": p(ctx_ms, 50), "query_ms_p95": p(ctx_ms, 95),
        "query_cpu_ms_p50": p(ctx_cpu, 50), "query_cpu_ms_p95": p(ctx_cpu, 95),
        "search_ms_p50": p(search_ms, 50), "search_ms_p95": p(search_ms, 95),
        "search_cpu_ms_p50": p(search_cpu, 50), "search_cpu_ms_p95": p(search_cpu, 95),
        "numpy_bruteforce_ms_p50": round(scan, 3),
        "dense50_ms_p50": p(dense_ms, 50), "dense50_ms_p95": p(dense_ms, 95),
        "dense_recall_at_50": round(float(np.mean(recall)), 4),
        "dense_recall_at_50_min": round(float(np.min(recall)), 4),
        "partition_used": listed, "scan_share": share, "scan_rows": cap,
        "context_over_scan": round(p(ctx_ms, 50) / scan, 2),
        "search_over_scan": round(p(search_ms, 50) / scan, 2),
        "open_ms": round(open_ms, 1), "open_cpu_ms": round(open_cpu_ms, 1),
        "first_search_ms": round(load_ms, 1), "first_search_cpu_ms": round(load_cpu_ms, 1),
        "first_context_ms": round(first_ctx_ms, 1), "first_context_cpu_ms": round(first_ctx_cpu_ms, 1),
        "process_before_s": round(partition_s, 1), "process_before_cpu_s": round(partition_cpu_s, 1),
        "vector_cache_mb": round(cache_bytes / 1e6, 1),
        "file_bytes": size,
        "bytes_per_message": round(size / n),
        "bytes_per_message_by_table": _table_bytes(path, n),
        "peak_rss_mb": round(rss, 1),
        "segments": stats["segments"],
        "trajectories": stats["trajectories"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", default="1000,10000,100000")
    ap.add_argument("--real", default=None, help="a LoCoMo folder: replicate its turns instead of synthetic text")
    ap.add_argument("--out", required=True)
    ap.add_argument("--keep", default=None, help="keep the memory files in this folder (e.g. for fts_variants.py)")
    ap.add_argument("--one", choices=("build", "measure"), help=argparse.SUPPRESS)  # a child run, JSON out
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--measure-only", action="store_true",
                    help="measure the files --keep already holds (built earlier with the same --messages/--real)")
    args = ap.parse_args()
    if args.one == "build":
        print(json.dumps(build(int(args.messages), Path(args.file), args.real)), flush=True)
        return
    if args.one == "measure":
        print(json.dumps(measure(Path(args.file))), flush=True)
        return
    runs = []
    speed = [speed_probe()]
    # one BLAS thread for the cache and the numpy reference alike: on a shared 2-core machine a
    # multithreaded BLAS swings the reference scan's timing by an order of magnitude
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **os.environ}
    with tempfile.TemporaryDirectory() as d:
        where = Path(args.keep) if args.keep else Path(d)
        where.mkdir(parents=True, exist_ok=True)
        for n in (int(x) for x in args.messages.split(",")):
            path = where / f"scale-{n}{'-real' if args.real else ''}.db"
            built_json = Path(str(path) + ".build.json")
            if not args.measure_only:
                for stale in (path, Path(str(path) + "-wal"), Path(str(path) + "-shm")):
                    stale.unlink(missing_ok=True)
                cmd = [sys.executable, __file__, "--one", "build", "--messages", str(n), "--file", str(path),
                       "--out", "-"] + (["--real", args.real] if args.real else [])
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
                built_json.write_text(out.strip().splitlines()[-1])
            r = json.loads(built_json.read_text())
            # a fresh process: the first query after opening, and peak RSS, are the reader's alone
            cmd = [sys.executable, __file__, "--one", "measure", "--file", str(path), "--out", "-"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
            r |= json.loads(out.strip().splitlines()[-1])
            runs.append(r)
            print(json.dumps(r), flush=True)
    speed.append(speed_probe())
    Path(args.out).write_text(json.dumps({"runs": runs, "machine": machine(), "speed_before_after": speed,
                                          "date": time.strftime("%Y-%m-%d")}, indent=2))
    print("| messages | text | ingest ms/msg | context ms p50/p95 | search ms p50/p95 | numpy scan ms p50 "
          "| context/scan | search/scan | file MB (B/msg) | cache MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['messages']} | {r['text']} | {r['ingest_ms_per_message']} | "
              f"{r['query_ms_p50']}/{r['query_ms_p95']} | {r['search_ms_p50']}/{r['search_ms_p95']} | "
              f"{r['numpy_bruteforce_ms_p50']} | "
              f"{r['context_over_scan']} | {r['search_over_scan']} | {r['file_bytes'] / 1e6:.1f} "
              f"({r['bytes_per_message']}) | {r['vector_cache_mb']} | {r['peak_rss_mb']} |")
    for r in runs:
        print(f"bytes/message by table at {r['messages']} ({r['text']}): {r['bytes_per_message_by_table']}")


if __name__ == "__main__":
    main()
