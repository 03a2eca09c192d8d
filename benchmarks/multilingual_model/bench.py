#!/usr/bin/env python3
"""Throughput (sentences/s) of model directories on the same English texts with memsif_lite's
OnnxEmbedder settings (threads = cores, inter 1, batches of 32 sorted by length, mean pooling).
The machine is shared, so every batch is run ``--reps`` times, interleaved across models, and the
fastest run of each batch is kept (min is robust to other load); tokenization likewise."""
import argparse, json, os, re, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
from verify import Embedder  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("dirs", nargs="+")
ap.add_argument("--locomo", required=True)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--json", default=None)
a = ap.parse_args()
d = json.load(open(a.locomo)); c = d.get("conversation", d)
eng = [f"{t['speaker']}: {t['text']}" for k in sorted((k for k in c if re.fullmatch(r"session_\d+", k)),
       key=lambda s: int(s.split("_")[1])) for t in c[k]][:500]
embs = [("current" if Path(x).name == "models" else Path(x).name, Embedder(Path(x))) for x in a.dirs]
plan = {}
tok_t = {}
for n, e in embs:
    best = 1e9
    for _ in range(a.reps):
        t0 = time.perf_counter(); ids = e.ids(eng, "passage"); best = min(best, time.perf_counter() - t0)
    tok_t[n] = best
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    plan[n] = [[ids[i] for i in order[s:s + 32]] for s in range(0, len(order), 32)]
    e._run(plan[n][0])  # warm-up
run_t = {n: 0.0 for n, _ in embs}
for b in range(len(plan[embs[0][0]])):
    best = {n: 1e9 for n, _ in embs}
    for _ in range(a.reps):
        for n, e in embs:
            t0 = time.perf_counter(); e._run(plan[n][b]); best[n] = min(best[n], time.perf_counter() - t0)
    for n in best:
        run_t[n] += best[n]
out = {"n_texts": len(eng), "reps": a.reps, "threads": os.cpu_count(), "loadavg_end": os.getloadavg(),
       "sent_per_s": {n: round(len(eng) / (run_t[n] + tok_t[n]), 1) for n, _ in embs},
       "model_s": {n: round(run_t[n], 3) for n, _ in embs}, "tokenize_s": {n: round(tok_t[n], 4) for n, _ in embs}}
print(json.dumps(out, indent=1))
if a.json:
    Path(a.json).write_text(json.dumps(out, indent=1))
