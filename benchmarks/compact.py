"""What ``Memory.compact`` (``memsif compact``) buys a kept ``scale.py`` file, and what it costs: in how
many stretches the message vectors lie, the first search after opening from a cold OS cache
(``first_search.py --cold``: Linux, root) and warm, before and after; the compaction's wall and CPU
time, its peak RSS and the disk it needed. Run it on a COPY (it compacts the file):

    cp DIR/scale-1000000-real.db /tmp/c.db && cp DIR/scale-1000000-real.db.queries.npz /tmp/c.db.queries.npz
    python benchmarks/compact.py /tmp/c.db --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, speed_probe  # noqa: E402


def vector_runs(path: str) -> dict[str, int]:
    """The message vectors' pages (vec0's chunks) and in how many stretches of consecutive pages
    they lie (``dbstat``); the file's pages."""
    import apsw

    con = apsw.Connection(f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_URI | apsw.SQLITE_OPEN_READONLY)
    try:
        pages = sorted(r[0] for r in con.execute("SELECT pageno FROM dbstat WHERE name='message_vec_vector_chunks00'"))
        total = con.execute("PRAGMA page_count").fetchone()[0]
    finally:
        con.close()
    runs = 1 + sum(1 for a, b in zip(pages, pages[1:], strict=False) if b != a + 1) if pages else 0
    return {"vector_pages": len(pages), "vector_runs": runs, "file_pages": total}


def first_searches(path: str, runs: int, cold: bool) -> list[str]:
    out = subprocess.run([sys.executable, str(HERE / "first_search.py"), path, "--runs", str(runs)]
                         + (["--cold"] if cold else []), check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "first search" in line]


def compact_once(path: str) -> None:
    """In this (fresh) process: open as scale.py built it, compact, print the report, RSS and the
    largest the file, its -wal and this process's temporary files grew to."""
    from scale import as_built

    from memsif_lite import Memory

    _, emb, cfg = as_built(path + ".queries.npz")
    peak = {"wal": 0, "temp": 0}
    done = threading.Event()

    def watch() -> None:  # the -wal, and the deleted temporary file SQLite builds the copy in (Linux)
        while not done.is_set():
            wal = Path(path + "-wal")
            peak["wal"] = max(peak["wal"], wal.stat().st_size if wal.exists() else 0)
            for fd in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else []:
                try:
                    if os.readlink(f"/proc/self/fd/{fd}").endswith("(deleted)"):
                        peak["temp"] = max(peak["temp"], os.fstat(int(fd)).st_size)
                except OSError:
                    pass
            time.sleep(0.05)

    with Memory(path, embedder=emb, config=cfg, process="manual") as mem:
        t = threading.Thread(target=watch)
        t.start()
        c0 = time.process_time()
        try:
            report = mem.compact()
        finally:
            done.set()
            t.join()
        cpu = time.process_time() - c0
    print(json.dumps({"bytes_before": report.bytes_before, "bytes_after": report.bytes_after,
                      "wal_bytes_left": report.wal_bytes, "seconds": report.seconds, "cpu_seconds": round(cpu, 2),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                      "peak_wal_bytes": peak["wal"], "peak_temp_bytes": peak["temp"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", help="a COPY of a kept scale.py file (with its .queries.npz beside it)")
    ap.add_argument("--runs", type=int, default=3, help="first searches each way, before and after")
    ap.add_argument("--no-cold", action="store_true", help="warm first searches only (no root needed)")
    ap.add_argument("--out", help="write the results here (JSON)")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.once:
        compact_once(args.file)
        return
    res: dict = {"file": args.file, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(),
                 "speed_before": speed_probe(), "before": vector_runs(args.file)}
    cold = not args.no_cold
    if cold:
        res["before"]["cold"] = first_searches(args.file, args.runs, True)
    res["before"]["warm"] = first_searches(args.file, args.runs, False)
    out = subprocess.run([sys.executable, __file__, args.file, "--once"], check=True, capture_output=True,
                         text=True).stdout
    res["compact"] = json.loads(out.splitlines()[-1])
    res["after"] = vector_runs(args.file)
    if cold:
        res["after"]["cold"] = first_searches(args.file, args.runs, True)
    res["after"]["warm"] = first_searches(args.file, args.runs, False)
    res["speed_after"] = speed_probe()
    text = json.dumps(res, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
