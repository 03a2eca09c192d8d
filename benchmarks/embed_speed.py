"""Embedding throughput of the bundled models, measured the same way side by side.

    python benchmarks/embed_speed.py --data ../shared/data/locomo [--reps 5]

Every turn of the first development conversation as ``Speaker: text`` passages, through
memsif_lite's own ``OnnxEmbedder`` (threads = cores, batches of 32 sorted by length). Each batch
runs ``--reps`` times, interleaved across models, and the fastest run counts (robust to other load
on a shared machine); tokenization is timed the same way. Also the one-off load time of each
model's tokenizer and session, and the resident memory of a fresh process that opens a new memory
file with the model, adds 20 messages and searches once (one process per model).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files, machine  # noqa: E402


_RSS = """
import sys, tempfile
from pathlib import Path
from memsif_lite import Config, Memory
with tempfile.TemporaryDirectory() as d, Memory(Path(d) / "m.db", config=Config(embedding_model=sys.argv[1])) as mem:
    for i in range(20):
        mem.add("me", f"message {i}: I moved to Porto and my cat Pixel loves the balcony")
    mem.search("Where do I live?")
    print(int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6)
"""


def rss_mb(model: str) -> float:
    out = subprocess.run([sys.executable, "-c", _RSS, model], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default="me5-small-enpt-int8,me5-small-multi-int8")
    args = ap.parse_args()
    from memsif_lite.embed import bundled_models
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.importers import locomo_turns

    _, sample = conversation_files(args.data)[0]
    texts = [f"passage: {t['speaker']}: {t['text']}" for t in locomo_turns(sample["conversation"])]
    models, load_s = {}, {}
    for name in args.models.split(","):
        t0 = time.perf_counter()
        emb = OnnxEmbedder(bundled_models()[name])
        emb._load()  # noqa: SLF001 - a benchmark times the loading apart
        load_s[name] = time.perf_counter() - t0
        models[name] = emb
    plans, tok_s = {}, {}
    for name, emb in models.items():
        best = 1e9
        for _ in range(args.reps):
            t0 = time.perf_counter()
            ids = [e.ids for e in emb._tokenizer.encode_batch(texts)]  # noqa: SLF001
            best = min(best, time.perf_counter() - t0)
        tok_s[name] = best
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        plans[name] = [[ids[i] for i in order[s:s + 32]] for s in range(0, len(order), 32)]
        emb._run(plans[name][0])  # noqa: SLF001 - warm-up
    run_s = dict.fromkeys(models, 0.0)
    for b in range(len(plans[next(iter(models))])):
        best = dict.fromkeys(models, 1e9)
        for _ in range(args.reps):
            for name, emb in models.items():
                t0 = time.perf_counter()
                emb._run(plans[name][b])  # noqa: SLF001
                best[name] = min(best[name], time.perf_counter() - t0)
        for name in models:
            run_s[name] += best[name]
    print(f"{machine()}; {len(texts)} turns, fastest of {args.reps} runs per batch")
    print("| model | turns/s | model s | tokenize s | load s (tokenizer + session) | process RSS MB |")
    print("|---|---|---|---|---|---|")
    for name in models:
        print(f"| {name} | {len(texts) / (run_s[name] + tok_s[name]):.1f} | {run_s[name]:.3f} | {tok_s[name]:.4f} "
              f"| {load_s[name]:.2f} | {rss_mb(name):.0f} |")


if __name__ == "__main__":
    main()
