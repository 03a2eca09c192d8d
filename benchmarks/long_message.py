"""context() time on one long unpunctuated message (5k / 20k / 50k / 1M characters), offline,
with the bundled model: the trim of a long message to its evidence excerpt must be linear in the
message's length (a message of Config.max_message_chars, 1,000,000 by default, is accepted).

    python benchmarks/long_message.py [--sizes 5000 20000 50000 1000000] [--repeat 3]

Each size gets its own memory file: a few short messages, then the long one (words drawn from a
small vocabulary, no punctuation, so it is one "sentence"); ``sentences`` repeats each size with
the same words cut into six-word sentences (every sentence is ranked against the question), and
``short sentences`` into two-word ones that each hold a question word (the cold review's worst case:
every sentence must be scored). The
time is the best of ``--repeat`` calls of context(), and the first (nothing is cached for texts
over tokens.CACHED_CHARS).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

WORDS = ("garden river window morning coffee train ticket harbour music painting market bicycle lantern "
         "kitchen letter mountain island village evening summer").split()


def long_text(n: int, seed: int = 7, every: int = 0) -> str:
    """``n`` characters of words, a full stop after every ``every`` words (0: none); with
    ``every`` = 2, each sentence starts with a word of the benchmark's question."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(("harbour", "garden")) if every == 2 and len(out) % 2 == 0 else rng.choice(WORDS)
        w += "." if every and len(out) % every == every - 1 else ""
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n].rstrip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[5_000, 20_000, 50_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from memsif_lite import Config, Memory

    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": machine(), "context_s": {}}
    with tempfile.TemporaryDirectory() as d:
        for shape, every in (("unpunctuated", 0), ("sentences", 6), ("short sentences", 2)):
            for n in args.sizes:
                mem = Memory(Path(d) / f"{shape}{n}.db", config=Config(max_message_chars=max(n, 1_000_000)))
                mem.add("Sam", "I bought a new bicycle for the summer.")
                mem.add("Maya", "We should visit the harbour market on Sunday.")
                mem.add("Mallory", long_text(n, every=every))
                mem.process()
                times = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    ctx = mem.context("What did Mallory say about the harbour and the garden?", budget_tokens=1000)
                    times.append(time.perf_counter() - t)
                assert ctx.tokens <= 1000
                out["context_s"][f"{shape} {n}"] = {"best": round(min(times), 3), "first": round(times[0], 3),
                                                    "evidence_items": len(ctx.evidence), "tokens": ctx.tokens}
                mem.close()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
