"""Recall of the dense partition (``memsif_lite.partition``) on real embeddings: how much of the
exact int8 top 50 the nearest lists holding a share of the rows keep, for each share.

    python benchmarks/partition_recall.py --data ../shared/data/locomo --out results/partition_recall.json
    python benchmarks/partition_recall.py --sentences 160000 --out results/partition_recall_sentences.json

Corpus: every single vector in ``benchmarks/.cache`` (the bundled model's vectors of the LoCoMo
and MemoryBank turns and of derived statements, made by the other benchmarks: which ones depends on
what ran on the machine), deduplicated, as int8 codes; lists trained exactly as ``memsif process``
trains them (``partition.list_count``, ``train`` on the same sample size, ``assign``, ``probe``).
Queries: the LoCoMo dev questions (bundled model, query prefix), split by conversation: the share is
chosen on the first half (conversations 1, 3, 5 of the folder) and reported on the other (2, 4). The
synthetic rows of ``scale.py`` are far easier (a topic's messages sit around one centre):
``scale.py`` reports their recall at 1M.

``--sentences N``: how recall moves as the lists grow (more rows a list, as at a million messages),
on N distinct real sentences, more than the LoCoMo and MemoryBank turns can give: the sentences of
this Python's standard library and of the packages installed beside memsif (docstrings, comments
and text files: ``pip install -e '.[test]'`` gives ~270,000), deduplicated, shuffled with a fixed
seed; 400 others asked as questions (query prefix), 200 to choose on and 200 to report on. On the
first quarter, half and all of the corpus, three sets of lists: those ``memsif process`` trains for
that many rows; those it trained at a quarter of them (kept until the file has grown fourfold:
the most rows a list a search meets, twice the first); and as many rows a list as it trains for a
million (500). The same Python and packages give the same sentences (``corpus_key`` in the output
names them). Embedding them takes ~10 minutes on two cores the first time (kept in
``benchmarks/.cache/sentences/``). The replicated LoCoMo text of ``scale.py`` cannot measure this:
each passage is there ~360 times with the same vector, so the exact top 50 are copies of one or two
passages, all in the same list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import conversation_files, machine  # noqa: E402
from locomo import CATEGORIES  # noqa: E402
from sign_bits import centred_bits  # noqa: E402

from memsif_lite import partition  # noqa: E402
from memsif_lite.int8 import cosine_distances, quantize, squared_norms  # noqa: E402

SHARES = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6)
#: with --sentences: up to the share that keeps 0.98 of the exact top 50
GROWTH_SHARES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
QUESTIONS = 200
MILLION = 1_000_000
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="the LoCoMo folder (questions for the default corpus)")
    ap.add_argument("--sentences", type=int, help="measure on this many local sentences instead")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if bool(args.sentences) == bool(args.data):
        ap.error("give --data or --sentences")
    if args.sentences:
        Path(args.out).write_text(json.dumps(growth(args.sentences), indent=2))
        return
    from memsif_lite.embed import OnnxEmbedder

    cache = Path(__file__).resolve().parent / ".cache"
    vs = [z[k] for f in sorted(cache.glob("*.npz")) for z in [np.load(f)] for k in z.files if z[k].shape == (384,)]
    codes = np.unique(quantize(np.stack(vs)), axis=0)
    n = len(codes)
    sq = squared_norms(codes)
    halves: list[list[str]] = [[], []]
    for i, (_, sample) in enumerate(conversation_files(args.data)):
        halves[i % 2] += [str(q["question"]) for q in sample.get("qa", []) if q.get("category") in CATEGORIES]
    emb = OnnxEmbedder()
    t = time.process_time()
    lists, centroids, assigned, sizes = lists_of(codes)
    build_s = time.process_time() - t
    out: dict = {"corpus": n, "lists": lists, "build_cpu_s": round(build_s, 2), "machine": machine(),
                 "date": time.strftime("%Y-%m-%d"), "halves": []}
    for name, questions in zip(("choose", "report"), halves, strict=True):
        asked = exact_tops(codes, sq, emb.embed(questions, kind="query"))
        rows = recall_rows(asked, centroids, assigned, sizes, SHARES, name)
        out["halves"].append({"half": name, "questions": len(questions), "rows": rows,
                              "sign_bits": sign_bit_rows(codes, asked)})
    Path(args.out).write_text(json.dumps(out, indent=2))


def lists_of(codes: np.ndarray, lists: int | None = None, trained_on: int | None = None
             ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """(lists, centroids, each row's list, each list's size), trained as ``memsif process`` trains
    them (``partitioning.refresh``: ``list_count``, a sample of the same size, ``train``, ``assign``
    of every row); ``lists``: that many instead of ``list_count``'s; ``trained_on``: as trained when
    the file held only its first so many rows (the lists it keeps until it has grown fourfold)."""
    n = len(codes) if trained_on is None else trained_on
    lists = partition.list_count(n) if lists is None else lists
    size = min(n, partition.MAX_SAMPLE, partition.SAMPLE_PER_LIST * lists)
    centroids = partition.train(codes[np.sort(np.random.default_rng(n).choice(n, size, replace=False))], lists)
    assigned = partition.assign(codes, centroids)
    return lists, centroids, assigned, np.bincount(assigned, minlength=lists)


def exact_tops(codes: np.ndarray, sq: np.ndarray, qv: np.ndarray) -> tuple[list[np.ndarray], list[set[int]]]:
    """Each question of ``qv`` quantised (float32), and the rows of its exact int8 top 50 (ties by row)."""
    n, wide = len(codes), codes.astype(np.float32)
    qfs = [quantize(q).astype(np.float32) for q in qv]
    return qfs, [set(np.lexsort((np.arange(n), cosine_distances(wide @ qf, sq, float(qf @ qf))))[:50].tolist())
                 for qf in qfs]


def recall_rows(asked: tuple[list[np.ndarray], list[set[int]]], centroids: np.ndarray, assigned: np.ndarray,
                sizes: np.ndarray, shares: tuple[float, ...], label: str) -> list[dict]:
    """For each share: the mean share of rows scanned, and the mean and worst recall of the exact
    top 50 (``asked``: :func:`exact_tops`) among the rows of the lists ``probe`` picks."""
    n = len(assigned)
    qfs, exact = asked
    rows = []
    for share in shares:
        recall, scanned = [], []
        for qf, top in zip(qfs, exact, strict=True):
            chosen = partition.probe(centroids, sizes, qf, int(share * n))  # no floor of 64 a result
            cand = np.flatnonzero(np.isin(assigned, chosen))
            scanned.append(len(cand) / n)
            recall.append(len(top & set(cand.tolist())) / 50)
        rows.append({"share": share, "scanned": round(float(np.mean(scanned)), 3),
                     "recall_at_50": round(float(np.mean(recall)), 4), "min": round(float(np.min(recall)), 2)})
        print(label, len(qfs), rows[-1], flush=True)
    return rows


def local_sentences() -> list[str]:
    """Distinct sentences of 40-220 characters, six words or more, mostly letters, from this
    Python's standard library and the running environment's ``site-packages`` (``.py``, ``.md``,
    ``.rst``, ``.txt``), in a fixed order."""
    paths = sysconfig.get_paths()
    seen: dict[str, None] = {}
    for d, dirs, files in (w for root in (paths["stdlib"], paths["purelib"]) for w in os.walk(root)):
        dirs[:] = sorted(x for x in dirs if x not in ("site-packages", "__pycache__"))
        for f in sorted(files):
            if not f.endswith((".py", ".md", ".rst", ".txt")):
                continue
            try:
                text = Path(d, f).read_text(errors="ignore")[:400_000]
            except OSError:
                continue
            for part in _SENTENCE_END.split(text):
                s = " ".join(part.replace("#", " ").replace('"""', " ").split())
                if (40 <= len(s) <= 220 and len(s.split()) >= 6
                        and sum(c.isalpha() or c == " " for c in s) >= 0.85 * len(s)):
                    seen.setdefault(s)
    return list(seen)


def growth(n: int) -> dict:
    """Recall by share on the first quarter, half and all of ``n`` local sentences
    (:func:`local_sentences`), for two disjoint sets of questions (choose, report)."""
    from memsif_lite.embed import OnnxEmbedder

    sentences = local_sentences()
    order = np.random.default_rng(0).permutation(len(sentences))
    if len(order) < n + QUESTIONS + 2 * QUESTIONS:
        raise SystemExit(f"only {len(order)} sentences here")
    # the corpus: sentences QUESTIONS .. n + QUESTIONS of the shuffled order (the first QUESTIONS are
    # not used: they were an earlier version's questions, and the cached embeddings stay valid);
    # the questions: the last 2 × QUESTIONS, never in any corpus
    picked = [sentences[i] for i in order[:n + QUESTIONS]]
    key = hashlib.sha256("\n".join(picked).encode()).hexdigest()[:16]
    store = Path(__file__).resolve().parent / ".cache" / "sentences" / f"{n}-{key}.npz"
    emb = OnnxEmbedder()
    if store.exists():
        passages = np.load(store)["passages"]
    else:
        passages = np.concatenate([emb.embed(picked[s:s + 2048], kind="passage")
                                   for s in range(QUESTIONS, n + QUESTIONS, 2048)])
        store.parent.mkdir(parents=True, exist_ok=True)
        np.savez(store, passages=passages)
    questions = emb.embed([sentences[i] for i in order[-2 * QUESTIONS:]], kind="query")
    halves = {"choose": questions[:QUESTIONS], "report": questions[QUESTIONS:]}
    out: dict = {"sentences_available": len(sentences), "corpus_key": key, "questions": QUESTIONS,
                 "machine": machine(), "date": time.strftime("%Y-%m-%d"), "python": sys.version.split()[0],
                 "sizes": []}
    for size in (n // 4, n // 2, n):
        codes = quantize(passages[:size])
        sq = squared_norms(codes)
        # the lists the package trains for this many rows; those it trained at a quarter of them
        # (still in use until the file grows fourfold: the most rows a list it searches); and as many
        # rows a list as it trains for a million
        variants = [("fresh", lists_of(codes)),
                    ("trained at a quarter", lists_of(codes, trained_on=size // 4)),
                    ("500 a list, as at 1M", lists_of(codes, round(size * partition.list_count(MILLION) / MILLION)))]
        tops = {half: exact_tops(codes, sq, qv) for half, qv in halves.items()}  # once for the three
        for name, (lists, centroids, assigned, sizes) in variants:
            entry: dict = {"rows": size, "lists": name, "count": lists, "rows_per_list": round(size / lists, 1)}
            for half, asked in tops.items():
                entry[half] = recall_rows(asked, centroids, assigned, sizes, GROWTH_SHARES,
                                          f"{size} rows, {lists} lists ({name}), {half}")
            out["sizes"].append(entry)
    out["sign_bits"] = {half: sign_bit_rows(codes, asked) for half, asked in tops.items()}
    return out


def sign_bit_rows(codes: np.ndarray, asked: tuple[list[np.ndarray], list[set[int]]]) -> list[dict]:
    """The other design issue 31 names, for comparison (not in the package): each row's sign bits
    around the corpus's mean code (``sign_bits.centred_bits``: 48 bytes at dimension 384), every
    row's Hamming distance to the question's bits, and the exact top 50 (``asked``: :func:`exact_tops`)
    among the nearest ``shortlist`` share of all rows."""
    centre, bits = centred_bits(codes)
    n, shortlists = len(codes), (0.02, 0.05, 0.1)
    recall: dict[float, list[float]] = {s: [] for s in shortlists}
    for qf, exact in zip(*asked, strict=True):
        ham = np.unpackbits(bits ^ np.packbits(qf > centre), axis=1).sum(axis=1)
        order = np.argsort(ham, kind="stable")
        for s in shortlists:
            recall[s].append(len(exact & set(order[:int(s * n)].tolist())) / 50)
    out = [{"shortlist": s, "recall_at_50": round(float(np.mean(r)), 4), "min": round(float(np.min(r)), 2)}
           for s, r in recall.items()]
    print("sign bits", out, flush=True)
    return out


if __name__ == "__main__":
    main()
