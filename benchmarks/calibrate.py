"""Calibrate the semantic-score normalisation of an embedding model on LoCoMo-style data.

    python benchmarks/calibrate.py --data ../shared/data/locomo [--model DIR]

The paper's φ uses a cosine "normalised to [0,1]" with thresholds set for Qwen3-Embedding-8B.
Our model's raw cosines bunch in 0.75–0.9, so memsif rescales linearly between two levels
measured on message pairs (φ compares units by their mean pairwise cosine, so pair levels hold
for segments and trajectories of any size; see memsif_lite/matching.py):

* ``sem_low``  — unrelated: the 10th percentile of the cosine between a message and a random
  message of a *different* conversation (other people, other topics);
* ``sem_high`` — same topic: the median cosine between a message and the one just before it in
  the *same session* (adjacent chat is mostly on one topic).

A typical continuation then scores s_sem≈1 (merged without a judge: φ ≥ τ_merge) and a typical
unrelated message s_sem≈0.4 (φ≈0.32 ≤ τ_split: split without a judge); only the overlap of the
two distributions reaches the boundary judge. The script prints both distributions and the
levels, then ingests every conversation through the real pipeline (offline judges) with those
levels and reports segments, trajectories, mean segment length and the share of φ scores in the
ambiguous band (= boundary-judge LLM calls per message when an LLM is configured).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files  # noqa: E402


class CountingJudge:
    """Counts how often the boundary judge is asked (the ambiguous band's share of messages)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def continues(self, segment_lines, message_line, score, gap):
        self.calls += 1
        return self.inner.continues(segment_lines, message_line, score, gap)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None, help="ONNX model directory (default: bundled)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trajectory-threshold", type=float, default=None)
    args = ap.parse_args()

    from memsif_lite import Config, Memory
    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.importers import locomo_turns
    from memsif_lite.segments import OfflineBoundaryJudge

    emb = CachedEmbedder(OnnxEmbedder(args.model))
    convs = []
    for sid, sample in conversation_files(args.data):
        turns = list(locomo_turns(sample["conversation"]))
        vecs = emb.embed([f"{t['speaker']}: {t['text']}" for t in turns], kind="passage")
        convs.append((sid, turns, vecs))
    emb.save()
    rng = random.Random(args.seed)
    same, unrelated = [], []
    for ci, (_, turns, vecs) in enumerate(convs):
        others = [k for k in range(len(convs)) if k != ci] or [ci]
        for i in range(1, len(turns)):
            if turns[i]["session"] == turns[i - 1]["session"]:
                same.append(float(vecs[i] @ vecs[i - 1]))
            ov = convs[rng.choice(others)][2]
            unrelated.append(float(vecs[i] @ ov[rng.randrange(len(ov))]))
    low, high = float(np.percentile(unrelated, 10)), float(np.median(same))
    q = lambda xs: " ".join(f"p{p} {np.percentile(xs, p):.3f}" for p in (10, 25, 50, 75, 90))  # noqa: E731
    print(f"unrelated pairs ({len(unrelated)}): {q(unrelated)}")
    print(f"adjacent same-session pairs ({len(same)}): {q(same)}")
    print(f"=> sem_low={low:.3f} sem_high={high:.3f}")

    base = dict(sem_low=round(low, 3), sem_high=round(high, 3))
    if args.trajectory_threshold is not None:
        base["trajectory_threshold"] = args.trajectory_threshold
    cfg = Config(**base)
    print(f"\nreal pipeline, offline judges (alpha={cfg.alpha_segment}, tau_merge={cfg.tau_merge}, "
          f"tau_split={cfg.tau_split}, trajectory_threshold={cfg.trajectory_threshold})")
    print("| conversation | turns | segments | mean segment length | trajectories | band share (judge calls/message) |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for sid, turns, _ in convs:
            judge = CountingJudge(OfflineBoundaryJudge(cfg.tau_split, cfg.tau_merge))
            with Memory(Path(d) / f"{sid}.db", embedder=emb, config=cfg, boundary_judge=judge) as mem:
                mem.add_many(turns)
                st = mem.stats()
            band = judge.calls / max(len(turns) - 1, 1)
            print(f"| {sid} | {len(turns)} | {st['segments']} | {len(turns) / st['segments']:.1f} | "
                  f"{st['trajectories']} | {band:.2f} |")


if __name__ == "__main__":
    main()
