"""The dense partition of message vectors: an inverted file (IVF), so that a dense search of a large
memory scores a share of the rows, not all of them (issue 31; ``docs/architecture.md``, "Dense
search at scale").

* **Lists**: spherical k-means centroids of the messages' int8 codes (:func:`train`), each message
  in the list of its nearest centroid (:func:`assign`). Trained once the file holds
  :data:`MIN_ROWS` message vectors, again each time it has grown :data:`GROWTH` times since.
* **Search** (:func:`probe`): the query scores the centroids; the lists are taken nearest first
  until they hold :func:`scan_budget` rows (:data:`SCAN_SHARE` of them, at most :data:`SCAN_ROWS`
  unless that is under :data:`MIN_SHARE`); the vector cache ranks exactly those rows, and every
  row not yet in a list, with the exact int8 ranking. Recall of the exact top 50:
  ``benchmarks/README.md`` ("Dense search at scale", "Dense recall on distinct real text as the
  file grows").
* **Kept in the file** (``sql/0015_vector_partition.sql``, :mod:`memsif_lite.db.partition`), so
  opening a file never trains; written by :func:`memsif_lite.partitioning.refresh` (``Memory.process``, the background
  worker, offline inline ``add``), outside any write transaction but for short ones that store
  what it computed; each store checks the version it computed against is still the file's.
  Idempotent and safe to cut anywhere: what is not stored is computed again.

The partition is a hint: a list stale, lost or damaged costs recall only (the ranking inside the
scanned rows is always exact, and rows are only ever the cache's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MIN_ROWS", "SCAN_SHARE", "SCAN_ROWS", "MIN_SHARE", "GROWTH", "BLOCK_IDS", "BATCH", "NONE", "Centroids",
           "list_count", "scan_budget", "train", "assign", "probe"]

#: below this many message vectors the exact scan is fast enough (about 5 ms): no partition
MIN_ROWS = 50_000
#: the share of the rows a search scans (the nearest lists holding it), chosen on distinct real
#: sentences (benchmarks/README.md, "Dense recall on distinct real text as the file grows")
SCAN_SHARE = 0.6
#: but no more rows than this (from 500,000 messages on: what 0.3 of a million scans, where issue 31's
#: latency goals are set) ...
SCAN_ROWS = 300_000
#: ... and never a smaller share than this (above a million rows the scan grows again, as it did
#: with a share of 0.3 alone)
MIN_SHARE = 0.3
#: train again when the file holds this many times the rows the current lists were trained on
GROWTH = 4
#: message ids per stored row of list numbers (the file's format)
BLOCK_IDS = 4096
#: messages listed per write transaction
BATCH = 4096
#: the list number of "no list"
NONE = 0xFFFF
#: k-means rounds, and the sample it runs on (rows per list, at most MAX_SAMPLE)
ROUNDS = 6
SAMPLE_PER_LIST = 16
MAX_SAMPLE = 65_536
#: rows scored against the centroids at a time (bounds the rows × lists float32 scratch)
_STRIDE = 8192
#: centroids scored against a query at a time: OpenBLAS runs a larger matrix-vector product on
#: several threads, whose waiting cost more CPU than the product itself (2,000 centroids: 0.14 ms
#: median, spikes to 4 ms, against 0.05 ms in blocks; 2026-12-02, this 2-core sandbox)
_PROBE_ROWS = 1024


@dataclass(frozen=True)
class Centroids:
    """One version of the lists: ``vectors`` (lists × dim float32, unit length), trained on
    ``trained_rows`` message vectors; every message up to id ``assigned_through`` has its list."""

    version: int
    trained_rows: int
    vectors: np.ndarray
    assigned_through: int = 0

    @property
    def lists(self) -> int:
        return int(self.vectors.shape[0])


def list_count(rows: int) -> int:
    """How many lists for ``rows`` message vectors: twice the square root, 16 to 2,048."""
    return int(min(2048, max(16, round(2 * np.sqrt(max(rows, 1))))))


def scan_budget(rows: int, k: int) -> int:
    """How many rows an unfiltered search of ``k`` results scans when the file holds ``rows``:
    :data:`SCAN_SHARE` of them but at most :data:`SCAN_ROWS`, never under :data:`MIN_SHARE` of them,
    at least 64 a result."""
    return max(min(int(SCAN_SHARE * rows), SCAN_ROWS), int(MIN_SHARE * rows), 64 * k)


def _unit(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.where(n > 0, n, 1)).astype(np.float32)


def assign(codes: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The nearest centroid (largest dot product: the rows' lengths do not change which) of each
    int8 code row, as uint16."""
    out = np.empty(len(codes), dtype=np.uint16)
    ct = np.ascontiguousarray(centroids.T)
    for s in range(0, len(codes), _STRIDE):
        out[s:s + _STRIDE] = np.argmax(codes[s:s + _STRIDE].astype(np.float32) @ ct, axis=1)
    return out


def train(codes: np.ndarray, lists: int, seed: int = 0) -> np.ndarray:
    """Spherical k-means of int8 code rows (a sample of the file's) into ``lists`` unit centroids;
    deterministic for a given sample and seed. A list left empty takes a random row again."""
    rng = np.random.default_rng(seed)
    x = _unit(codes.astype(np.float32))
    lists = min(lists, len(x))
    c = x[rng.choice(len(x), lists, replace=False)].copy()
    for _ in range(ROUNDS):
        a = assign(codes, c).astype(np.int64)
        order = np.argsort(a, kind="stable")
        counts = np.bincount(a, minlength=lists)
        sums = np.zeros_like(c)
        held = np.flatnonzero(counts)
        sums[held] = np.add.reduceat(x[order], np.concatenate(([0], np.cumsum(counts)[:-1]))[held], axis=0)
        empty = np.flatnonzero(counts == 0)
        sums[empty] = x[rng.choice(len(x), len(empty), replace=False)] if len(empty) else sums[empty]
        c = _unit(sums)
    return c


def probe(centroids: np.ndarray, sizes: np.ndarray, qf: np.ndarray, budget: int) -> np.ndarray:
    """The lists to scan for query ``qf``: nearest centroid first, until they hold ``budget`` rows."""
    scores = np.concatenate([centroids[s:s + _PROBE_ROWS] @ qf for s in range(0, len(centroids), _PROBE_ROWS)])
    order = np.argsort(-scores, kind="stable")
    held = np.cumsum(sizes[order])
    return order[:int(np.searchsorted(held, budget)) + 1]
