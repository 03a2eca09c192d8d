"""Calibrate the semantic-score normalisation of an embedding model on LoCoMo-style data.

    python benchmarks/calibrate.py --data ../shared/data/locomo [--model DIR]

The paper's φ uses a cosine "normalised to [0,1]" with thresholds set for Qwen3-Embedding-8B.
Our model's raw cosines bunch in 0.7–0.9, so we rescale linearly between two measured levels:

* ``sem_low``  — unrelated: the 10th percentile of the cosine between a message and the mean of
  a 5-message window taken from a *different* conversation (different people, different topics);
* ``sem_high`` — same topic: median cosine between a message and the mean of the (up to) 5
  messages just before it in the *same session* (adjacent chat is mostly on one topic).

so a typical continuation scores s_sem≈1 (φ ≥ τ_merge: merged without a judge) and a typical
unrelated message s_sem≈0.4 (φ ≈ 0.31 ≤ τ_split: split without a judge); the paper's thresholds
keep their meaning (clear continuation / clear change) and only the overlap goes to the judge. The script prints the
levels, then replays the boundary rule over every conversation with them and reports segments,
mean segment length and the share of φ scores in the ambiguous band (LLM calls per message).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import CachedEmbedder, conversation_files  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None, help="ONNX model directory (default: bundled)")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from memsif_lite.embed import OnnxEmbedder
    from memsif_lite.entities import extract_entities
    from memsif_lite.importers import locomo_turns
    from memsif_lite.matching import phi

    emb = CachedEmbedder(OnnxEmbedder(args.model))
    convs = []
    for sid, sample in conversation_files(args.data):
        turns = list(locomo_turns(sample["conversation"]))
        vecs = emb.embed([f"{t['speaker']}: {t['text']}" for t in turns], kind="passage")
        convs.append((sid, turns, vecs))
    emb.save()
    rng = random.Random(args.seed)
    same, unrelated = [], []
    w = args.window
    for ci, (_, turns, vecs) in enumerate(convs):
        for i in range(1, len(turns)):
            prev = [j for j in range(max(0, i - w), i) if turns[j]["session"] == turns[i]["session"]]
            if prev:
                c = vecs[prev].mean(0)
                same.append(float(vecs[i] @ c / np.linalg.norm(c)))
            other = rng.choice([k for k in range(len(convs)) if k != ci]) if len(convs) > 1 else ci
            ov = convs[other][2]
            s = rng.randrange(0, max(1, len(ov) - w))
            c = ov[s:s + w].mean(0)
            unrelated.append(float(vecs[i] @ c / np.linalg.norm(c)))
    low, high = float(np.percentile(unrelated, 10)), float(np.median(same))
    print(f"unrelated window cosine: p10 {low:.4f} (median {np.median(unrelated):.4f}, p90 {np.percentile(unrelated, 90):.4f})")
    print(f"same-session window cosine: median {high:.4f} (p10 {np.percentile(same, 10):.4f}, p90 {np.percentile(same, 90):.4f})")
    print(f"=> sem_low={low:.3f} sem_high={high:.3f}")

    tau_merge, tau_split, alpha = 0.60, 0.325, 0.8
    mid = (tau_merge + tau_split) / 2
    print(f"\nreplaying the boundary rule (alpha={alpha}, tau_merge={tau_merge}, tau_split={tau_split}, offline judge: phi >= {mid:.4f})")
    print("conversation | turns | segments | mean len | band share | merges | splits")
    for sid, turns, vecs in convs:
        ents = [extract_entities(t["text"]) for t in turns]
        seg_sum, seg_ents, seg_n = vecs[0].astype(np.float64), set(ents[0]), 1
        nseg, band, merges, splits = 1, 0, 0, 0
        for i in range(1, len(turns)):
            score = phi(vecs[i], ents[i], seg_sum / seg_n, seg_ents, alpha=alpha, levels=(low, high))
            if score >= tau_merge:
                cont = True
                merges += 1
            elif score <= tau_split:
                cont = False
                splits += 1
            else:
                band += 1
                cont = score >= mid
            if cont:
                seg_sum, seg_n = seg_sum + vecs[i], seg_n + 1
                seg_ents |= set(ents[i])
            else:
                seg_sum, seg_ents, seg_n, nseg = vecs[i].astype(np.float64), set(ents[i]), 1, nseg + 1
        print(f"{sid} | {len(turns)} | {nseg} | {len(turns) / nseg:.1f} | {band / (len(turns) - 1):.2f} | {merges} | {splits}")


if __name__ == "__main__":
    main()
