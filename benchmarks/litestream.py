"""Litestream and a memory file: replication lag, restore time, and whether any WAL frame is lost.

    nice -n 19 python benchmarks/litestream.py --messages 10000,100000 \\
        --litestream /path/to/litestream-0.3.13,/path/to/litestream-0.5.17 --out litestream.json

For each size a file is built once with the synthetic generator of ``scale.py`` (so no embedding
is timed), then for each Litestream binary, on a copy of it:

* ``initial_sync_s``: ``litestream replicate FILE file://REPLICA`` started, until it logs its
  first snapshot (the whole file is in the replica).
* ``lag_s``: one message added (``Memory.add``, one transaction) and nothing else written; its lag
  is the time from ``add`` returning to the modification time of the last replication file
  Litestream writes for it (a 0.3 WAL segment ``generations/*/wal/*``, a 0.5 level-0 LTX file
  ``ltx/0/*``), ``--samples`` times, a few seconds apart. Litestream's sync interval is 1 s.
* ``burst``: ``--burst`` messages added in batches of 100 as fast as the file takes them;
  ``catch_up_s`` is from the last batch returning to the last replication file; ``wal_mb_max`` is
  the largest the ``-wal`` got.
* Litestream is stopped (SIGTERM), the writer closes; ``restore_s`` times ``litestream restore -o``;
  ``open_check_s`` opening the restored file with memsif and running ``check()``. ``identical``:
  every row of every table of the source and the restored file are the same (a lost WAL frame
  would show here); ``snapshots``: full snapshots Litestream took (1 = it never lost its place in
  the WAL, so no checkpoint of memsif's got in its way).

``--checkpoints`` adds the checkpoint comparison: a small file, one process adding messages for
``--seconds`` while Litestream replicates it, with memsif's own behaviour (``auto``: SQLite's
PASSIVE automatic checkpoints only) against the same with an explicit ``PRAGMA wal_checkpoint``
(PASSIVE, or TRUNCATE) after every message, as an application that manages its WAL might do.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from scale import DIM, TableEmbedder, generate  # noqa: E402

SNAPSHOT = re.compile(r"snapshot written|snapshot complete")


def build(n: int, path: Path) -> TableEmbedder:
    from memsif_lite import Config, Memory

    msgs, V, index, _ = generate(n)
    emb = TableEmbedder(V, index)
    if not path.exists():
        with Memory(path, embedder=emb, config=Config(sem_low=0.0, sem_high=0.64)) as mem:
            for start in range(0, n, 1000):
                mem.add_many(msgs[start:start + 1000])
    return emb


def _sync_files(replica: Path) -> dict[str, int]:
    """Replication files Litestream wrote for syncs (not snapshots or compactions), with their mtime (ns)."""
    out = {}
    for pattern in ("generations/*/wal/*", "ltx/0/*"):
        for p in replica.glob(pattern):
            if not p.name.endswith(".tmp"):
                try:
                    out[str(p)] = p.stat().st_mtime_ns
                except FileNotFoundError:  # removed by retention meanwhile
                    pass
    return out


def _wait_quiet(replica: Path, since_ns: int, quiet_s: float = 3.0, limit_s: float = 120.0) -> float | None:
    """Seconds from ``since_ns`` to the last replication file written after it, once none has
    appeared for ``quiet_s`` (None: none appeared within ``limit_s``)."""
    start = time.monotonic()
    last, last_seen = None, time.monotonic()
    while time.monotonic() - start < limit_s:
        newest = max((m for m in _sync_files(replica).values() if m > since_ns), default=None)
        if newest is not None and newest != last:
            last, last_seen = newest, time.monotonic()
        if last is not None and time.monotonic() - last_seen > quiet_s:
            return (last - since_ns) / 1e9
        time.sleep(0.02)
    return None if last is None else (last - since_ns) / 1e9


def _wait_log(log: Path, pattern: re.Pattern, limit_s: float = 600.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if pattern.search(log.read_text(errors="replace")):
            return True
        time.sleep(0.05)
    return False


def content_digest(path: Path) -> dict[str, str]:
    """A hash of every row of every table (vec0 and FTS5 shadow tables included), Litestream's own
    tables left out."""
    import apsw

    con = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = [n for (n,) in con.execute("SELECT name FROM sqlite_schema WHERE type='table' AND "
                                           "sql NOT LIKE 'CREATE VIRTUAL TABLE%' AND name NOT LIKE '\\_litestream%' "
                                           "ESCAPE '\\' ORDER BY name")]
        out = {}
        for n in names:
            h = hashlib.sha256()
            for row in con.execute(f'SELECT * FROM "{n}"'):
                h.update(repr(row).encode())
            out[n] = h.hexdigest()[:16]
        return out
    finally:
        con.close()


def _version(binary: str) -> str:
    return subprocess.run([binary, "version"], capture_output=True, text=True).stdout.strip()


def _restore(binary: str, replica: Path, out: Path) -> float:
    t = time.perf_counter()
    subprocess.run([binary, "restore", "-o", str(out), replica.as_uri()], check=True, capture_output=True)
    return time.perf_counter() - t


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def run_one(binary: str, built: Path, emb: TableEmbedder, n: int, work: Path, samples: int, burst: int) -> dict:
    from memsif_lite import Memory

    src, replica, log = work / "src.db", work / "replica", work / "litestream.log"
    shutil.copy(built, src)
    os.chmod(src, 0o600)
    with open(log, "w") as fh:
        t0 = time.perf_counter()
        ls = subprocess.Popen([binary, "replicate", str(src), replica.as_uri()], stdout=fh, stderr=subprocess.STDOUT)
        try:
            if not _wait_log(log, SNAPSHOT):
                raise RuntimeError(f"no snapshot logged: {log.read_text()[-2000:]}")
            initial = time.perf_counter() - t0
            time.sleep(1.5)
            lags = []
            wal_max = 0
            with Memory(src, embedder=emb) as mem:
                for i in range(samples):
                    mem.add("Ana", f"lag sample {i} about t0w1 and t0w2 coffee")
                    acked = time.time_ns()
                    lag = _wait_quiet(replica, acked, quiet_s=2.5, limit_s=30)
                    lags.append(None if lag is None else round(lag, 3))
                rng = np.random.default_rng(1)
                batch_s = []
                for start in range(0, burst, 100):
                    t = time.perf_counter()
                    mem.add_many([{"speaker": "Ben", "text": f"burst {start + j} t{rng.integers(9)}w1 walk"}
                                  for j in range(100)])
                    batch_s.append(time.perf_counter() - t)
                    wal_max = max(wal_max, Path(f"{src}-wal").stat().st_size)
                acked = time.time_ns()
                catch_up = _wait_quiet(replica, acked, quiet_s=3.0, limit_s=300)
        finally:
            ls.send_signal(signal.SIGTERM)
            ls.wait()
    snapshots = len(SNAPSHOT.findall(log.read_text(errors="replace")))
    restored = work / "restored.db"
    restore_s = _restore(binary, replica, restored)
    t = time.perf_counter()
    with Memory(restored, embedder=emb) as mem:
        problems = mem.check()
        count = mem.stats()["messages"]
    open_check = time.perf_counter() - t
    identical = content_digest(src) == content_digest(restored)
    valid = [x for x in lags if x is not None]
    return {
        "litestream": _version(binary), "messages": n, "file_mb": round(built.stat().st_size / 1e6, 1),
        "initial_sync_s": round(initial, 2),
        "lag_s": lags, "lag_s_median": round(float(np.median(valid)), 3) if valid else None,
        "lag_s_max": max(valid) if valid else None,
        "burst_messages": burst, "burst_ms_per_message": round(1000 * sum(batch_s) / max(1, burst), 3),
        "catch_up_s": None if catch_up is None else round(catch_up, 3),
        "wal_mb_max": round(wal_max / 1e6, 1),
        "replica_mb": round(_dir_bytes(replica) / 1e6, 1), "restore_s": round(restore_s, 2),
        "restored_mb": round(restored.stat().st_size / 1e6, 1), "open_check_s": round(open_check, 2),
        "check_problems": problems, "restored_messages": count, "identical": identical, "snapshots": snapshots,
    }


def run_checkpoints(binary: str, mode: str, seconds: float, work: Path) -> dict:
    """One writer for ``seconds`` under Litestream, with an explicit checkpoint after each add (``auto``: none)."""
    import apsw

    from memsif_lite import Memory

    emb = TableEmbedder(np.zeros((0, DIM), dtype=np.float32), {})
    src, replica, log = work / "src.db", work / "replica", work / "litestream.log"
    Memory(src, embedder=emb).close()
    with open(log, "w") as fh:
        ls = subprocess.Popen([binary, "replicate", str(src), replica.as_uri()], stdout=fh, stderr=subprocess.STDOUT)
        try:
            _wait_log(log, SNAPSHOT, 60)
            time.sleep(1.5)
            side = apsw.Connection(str(src))
            side.setbusytimeout(10_000)  # memsif's busy_timeout_ms
            added, in_ckpt, worst, wal_max, busy = 0, 0.0, 0.0, 0, 0
            with Memory(src, embedder=emb) as mem:
                end = time.perf_counter() + seconds
                while time.perf_counter() < end:
                    mem.add("Ana", f"message {added} about t{added % 9}w1 and coffee")
                    added += 1
                    if mode != "auto":
                        t = time.perf_counter()
                        busy += side.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]
                        d = time.perf_counter() - t
                        in_ckpt, worst = in_ckpt + d, max(worst, d)
                    wal_max = max(wal_max, Path(f"{src}-wal").stat().st_size)
                _wait_quiet(replica, time.time_ns(), quiet_s=2.5, limit_s=60)
            side.close()
        finally:
            ls.send_signal(signal.SIGTERM)
            ls.wait()
    restored = work / "restored.db"
    _restore(binary, replica, restored)
    return {"litestream": _version(binary), "checkpoint": mode, "seconds": seconds, "messages_added": added,
            "seconds_in_checkpoints": round(in_ckpt, 2), "longest_checkpoint_s": round(worst, 2),
            "checkpoints_busy": busy, "wal_mb_max": round(wal_max / 1e6, 1),
            "snapshots": len(SNAPSHOT.findall(log.read_text(errors="replace"))),
            "identical": content_digest(src) == content_digest(restored)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", default="10000,100000")
    ap.add_argument("--litestream", default=os.environ.get("MEMSIF_LITESTREAM") or shutil.which("litestream") or "",
                    help="binaries, comma-separated (default: MEMSIF_LITESTREAM, else litestream on PATH)")
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--burst", type=int, default=2000)
    ap.add_argument("--checkpoints", action="store_true")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--keep", default=None, help="build (and keep) the files in this folder")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    binaries = [b for b in re.split(r"[,:]", args.litestream) if b]
    if not binaries:
        ap.error("no litestream binary: --litestream PATH or MEMSIF_LITESTREAM")
    runs, ckpts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.keep or tmp)
        where.mkdir(parents=True, exist_ok=True)
        for n in (int(x) for x in args.messages.split(",") if x):
            built = where / f"litestream-{n}.db"
            t = time.perf_counter()
            emb = build(n, built)
            print(f"built {n} messages in {time.perf_counter() - t:.0f} s", flush=True)
            for b in binaries:
                with tempfile.TemporaryDirectory(dir=where) as w:
                    r = run_one(b, built, emb, n, Path(w), args.samples, args.burst)
                runs.append(r)
                print(json.dumps(r), flush=True)
        if args.checkpoints:
            for b in binaries:
                for mode in ("auto", "PASSIVE", "TRUNCATE"):
                    with tempfile.TemporaryDirectory(dir=where) as w:
                        r = run_checkpoints(b, mode, args.seconds, Path(w))
                    ckpts.append(r)
                    print(json.dumps(r), flush=True)
    Path(args.out).write_text(json.dumps({"runs": runs, "checkpoints": ckpts, "machine": machine(),
                                          "date": time.strftime("%Y-%m-%d")}, indent=2))
    print("| litestream | messages | file MB | initial sync s | lag s median/max | burst ms/msg | catch-up s "
          "| WAL MB max | restore s | open+check s | identical | snapshots |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(f"| {r['litestream']} | {r['messages']} | {r['file_mb']} | {r['initial_sync_s']} | "
              f"{r['lag_s_median']}/{r['lag_s_max']} | {r['burst_ms_per_message']} | {r['catch_up_s']} | "
              f"{r['wal_mb_max']} | {r['restore_s']} | {r['open_check_s']} | {r['identical']} | {r['snapshots']} |")
    if ckpts:
        print("\n| litestream | checkpoint after each add | messages in "
              f"{args.seconds:g} s | s in checkpoints (longest) | busy | WAL MB max | snapshots | identical |")
        print("|---|---|---|---|---|---|---|---|")
        for r in ckpts:
            print(f"| {r['litestream']} | {r['checkpoint']} | {r['messages_added']} | {r['seconds_in_checkpoints']} "
                  f"({r['longest_checkpoint_s']}) | {r['checkpoints_busy']} | {r['wal_mb_max']} | {r['snapshots']} "
                  f"| {r['identical']} |")


if __name__ == "__main__":
    main()
