"""Shared helpers for the benchmark scripts (not part of the package)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CACHE = Path(__file__).resolve().parent / ".cache"


def conversation_files(path: str | Path) -> list[tuple[str, dict]]:
    """(sample_id, sample) for a folder of per-conversation files or a locomo10.json."""
    from memsif_lite.importers import locomo_samples

    p = Path(path)
    files = sorted(p.glob("*.json")) if p.is_dir() else [p]
    out = []
    for f in files:
        data = json.loads(f.read_text(encoding="utf-8"))
        try:
            samples = locomo_samples(data)
        except Exception:
            continue
        for i, s in enumerate(samples):
            sid = str(s.get("sample_id") or (f.stem if len(samples) == 1 else f"{f.stem}-{i}"))
            out.append((sid, s))
    return out


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache of *passage* vectors (benchmarks re-embed the
    same turns for every system; the cache makes that cost be paid once). Queries always go to
    the real model, so query latencies include embedding the question."""

    def __init__(self, inner, cache_name: str = "vectors"):
        self.inner = inner
        self.model_id, self.dim, self.metric = inner.model_id, inner.dim, inner.metric
        self.sem_levels = inner.sem_levels
        self.query_levels = getattr(inner, "query_levels", inner.sem_levels)
        CACHE.mkdir(exist_ok=True)
        self.path = CACHE / f"{cache_name}-{inner.model_id}.npz"
        self.mem: dict[str, np.ndarray] = {}
        if self.path.exists():
            d = np.load(self.path)
            self.mem = {k: d[k] for k in d.files}
        self.dirty = False
        self.misses = 0

    def embed(self, texts, *, kind):
        if kind != "passage":
            return self.inner.embed(texts, kind=kind)
        keys = [hashlib.sha1(f"{kind}\0{t}".encode()).hexdigest() for t in texts]
        miss = [i for i, k in enumerate(keys) if k not in self.mem]
        if miss:
            vecs = self.inner.embed([texts[i] for i in miss], kind=kind)
            for i, v in zip(miss, vecs, strict=True):
                self.mem[keys[i]] = v
            self.dirty = True
            self.misses += len(miss)
        return np.stack([self.mem[k] for k in keys]) if keys else np.zeros((0, self.dim), np.float32)

    def save(self):
        if self.dirty:
            np.savez(self.path, **self.mem)
            self.dirty = False


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``xs``, rounded to 0.01; NaN for no values."""
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))], 2) if xs else float("nan")


def machine() -> str:
    import platform

    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def speed_probe() -> dict[str, float]:
    """How fast this machine is now, for comparing figures across days (a shared machine's speed
    moves: the same tree's 1M `search` p50 read 21.6 ms one morning and 40–52 ms three hours later):
    the best of three runs of a fixed pure-Python loop and of a fixed int8 → float32 conversion and
    matrix-vector product (the vector cache's scan), in milliseconds. Record it beside timings."""
    import time

    import numpy as np

    codes = np.random.default_rng(0).integers(-127, 128, size=(100_000, 384), dtype=np.int8)
    q = np.ones(384, dtype=np.float32)

    def loop() -> None:
        s = 0
        for i in range(3_000_000):
            s += i

    def scan() -> None:  # einsum: numpy's own loop, whatever threads a BLAS would take in this process
        _ = np.einsum("ij,j->i", codes.astype(np.float32), q)

    out = {}
    for name, f in (("python_loop_ms", loop), ("int8_scan_ms", scan)):
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t)
        out[name] = round(best * 1000, 1)
    return out


def timed_adds(mem, items: list[dict], pace: float = 0.0) -> list[float]:
    """``mem.add(**m)`` for each item, one after the other; the milliseconds each took (``pace``:
    seconds to wait after each, as an assistant would between messages)."""
    import time

    ms = []
    for m in items:
        t = time.perf_counter()
        mem.add(**m)
        ms.append((time.perf_counter() - t) * 1000)
        if pace:
            time.sleep(pace)
    return ms
