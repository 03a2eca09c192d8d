"""The first search after opening a kept ``scale.py`` file (it loads the vector cache): one fresh
process per run, read-only, wall and CPU ms. To compare two trees, run it alternately with each on
``PYTHONPATH`` (this script prints which ``memsif_lite`` it ran).

    python benchmarks/first_search.py DIR/scale-1000000-real.db --runs 5
    python benchmarks/first_search.py DIR/scale-1000000-real.db --runs 3 --cold

``--cold``: before each run, write the dirty pages out and drop the operating system's page cache
(Linux, as root: ``/proc/sys/vm/drop_caches``), so the run reads the file from the disk, as the
first search after a reboot does; each run also prints the bytes its process read from the disk.
``--context``: the first ``context`` (a budget of 2,000 tokens) instead of the first ``search``: it
also loads the segment and trajectory caches.
``--model``: the question is embedded by the bundled model, loaded by that first query as in an
application, instead of taking the question's vector saved beside the file (``scale.py`` times
the index alone).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _disk_read() -> int:
    """Bytes this process has read from the disk (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/io") as f:
            return int(dict(line.split(": ") for line in f.read().splitlines())["read_bytes"])
    except OSError:
        return 0


def _drop_page_cache() -> None:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError as e:
        sys.exit(f"--cold needs Linux and root (cannot drop the page cache: {e})")


class _Loaded:
    """The bundled model (loaded at its first call), under the name and levels of the file's
    embedder (``scale.py`` records a table of saved vectors)."""

    def __init__(self, table):
        from memsif_lite.embed import resolve_embedder

        self.model = resolve_embedder(None)
        self.model_id, self.sem_levels, self.metric = table.model_id, table.sem_levels, self.model.metric
        self.dim = self.model.dim

    def embed(self, texts, *, kind):
        return self.model.embed(texts, kind=kind)


def once(path: str, context: bool = False, model: bool = False) -> None:
    from scale import as_built

    import memsif_lite
    from memsif_lite import Memory

    queries, emb, cfg = as_built(path + ".queries.npz")
    if model:
        emb = _Loaded(emb)
    t0, r0 = time.perf_counter(), _disk_read()
    with Memory(path, embedder=emb, config=cfg, read_only=True) as mem:
        t, c, r = time.perf_counter(), time.process_time(), _disk_read()
        if context:
            mem.context(queries[0], budget_tokens=2000)
        else:
            mem.search(queries[0], k=10)
        what = ("context" if context else "search") + (" (the model loaded by it)" if model else "")
        print(f"{Path(memsif_lite.__file__).parent}: first {what} {(time.perf_counter() - t) * 1000:.0f} ms wall, "
              f"{(time.process_time() - c) * 1000:.0f} ms CPU, {(_disk_read() - r) / 1e6:.0f} MB read from the disk; "
              f"the open before it {(t - t0) * 1000:.0f} ms wall, {(r - r0) / 1e6:.0f} MB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="drop the OS page cache before each run (Linux, root)")
    ap.add_argument("--context", action="store_true", help="time the first context instead of the first search")
    ap.add_argument("--model", action="store_true", help="embed the question with the file's model, loaded by it")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.once:
        once(args.file, args.context, args.model)
        return
    for _ in range(args.runs):
        if args.cold:
            _drop_page_cache()
        subprocess.run([sys.executable, __file__, args.file, "--once"] + (["--context"] if args.context else [])
                       + (["--model"] if args.model else []), check=True)


if __name__ == "__main__":
    main()
